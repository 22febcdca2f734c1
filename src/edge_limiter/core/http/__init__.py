"""What the gateway says over HTTP: rate-limit fields and problem bodies (RFC 9457)."""
