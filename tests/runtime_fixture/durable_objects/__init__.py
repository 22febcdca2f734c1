"""Durable Objects of the local runtime's fixture Worker."""
