"""Durable Objects of edge-limiter."""
