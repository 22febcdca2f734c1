"""The Worker entry point (``main`` in wrangler.toml after the build step).

Exports the gateway (``Default``) and the Durable Object classes the runtime must find in
the main module (``RateLimiter``, ``IdempotencyRecords``, ``OriginBreaker``, ``Control``).
"""

from __future__ import annotations

from typing import Any

from workers import WorkerEntrypoint

from durable_objects.breaker import OriginBreaker
from durable_objects.control import Control
from durable_objects.idempotency import IdempotencyRecords
from durable_objects.rate_limiter import RateLimiter
from edge_limiter.platform.worker import handle_fetch, handle_scheduled

__all__ = ["Control", "Default", "IdempotencyRecords", "OriginBreaker", "RateLimiter"]


class Default(WorkerEntrypoint):  # type: ignore[misc]
    """The gateway: every request goes through :func:`edge_limiter.platform.worker.handle_fetch`."""

    async def fetch(self, request: Any) -> Any:
        return await handle_fetch(request, self.env, self.ctx)

    async def scheduled(self, *_args: Any) -> None:
        """Cron Triggers: probe the origins' health paths and feed their breakers."""
        await handle_scheduled(self.env)
