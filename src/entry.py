"""The Worker entry point (``main`` in wrangler.toml after the build step).

Exports the gateway (``Default``) and the Durable Object classes the runtime must find in
the main module (``RateLimiter``, ``IdempotencyRecords``).
"""

from __future__ import annotations

from typing import Any

from workers import WorkerEntrypoint

from durable_objects.idempotency import IdempotencyRecords
from durable_objects.rate_limiter import RateLimiter
from edge_limiter.platform.worker import handle_fetch

__all__ = ["Default", "IdempotencyRecords", "RateLimiter"]


class Default(WorkerEntrypoint):  # type: ignore[misc]
    """The gateway: every request goes through :func:`edge_limiter.platform.worker.handle_fetch`."""

    async def fetch(self, request: Any) -> Any:
        return await handle_fetch(request, self.env, self.ctx)
