"""The shared circuit breaker of one origin: one Durable Object per origin name, the
runtime's shell around :class:`~edge_limiter.core.resilience.shared.SharedBreaker`.

Isolates send what they saw (and the Cron Trigger its health probes) in one ``sync``
call; the object applies it, stores the result in one SQLite row and answers with the
authoritative breaker, which the isolate adopts.
"""

from __future__ import annotations

from typing import Any

from workers import DurableObject

from edge_limiter.core.resilience.shared import SharedBreaker
from edge_limiter.platform.storage import ObjectStorage, now_ms


class OriginBreaker(DurableObject):  # type: ignore[misc]
    """Holds one origin's breaker state, shared by every isolate."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.breaker = SharedBreaker(ObjectStorage(ctx).sql)

    async def sync(self, payload: str) -> str:
        """Apply an isolate's reports (or a health probe); answer the authoritative state."""
        return self.breaker.sync(str(payload), now_ms())
