"""The per-key rate-limiter Durable Object: the runtime's shell around
:class:`~edge_limiter.core.ratelimit.keystore.KeyStore`.

One instance per (route, key). The key store does all of the work (rows in memory,
written to this object's SQLite storage, through :mod:`edge_limiter.platform.storage`);
this class hands it each call with the clock, and arms the alarm and the write-behind
timer it asks for.

``decide`` is the only way in: one RPC call per request. It is synchronous, so the read,
the decision and the write of one request can never interleave with another's: concurrent
requests for the key are serialised by the object itself, and the platform holds the
answer until the write is durable.
"""

from __future__ import annotations

import asyncio
from typing import Any

from workers import DurableObject

from edge_limiter.core.ratelimit.keystore import KeyStore
from edge_limiter.platform.storage import ObjectStorage, now_ms


class RateLimiter(DurableObject):  # type: ignore[misc]
    """Holds every limit's counter for one key, atomically."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.storage = ObjectStorage(ctx)
        self.store = KeyStore(self.storage.sql)
        self.flush_timer: asyncio.TimerHandle | None = None

    def decide(self, payload: str) -> str:
        """Run one store request (check, peek, refund, reset or lease) and answer it."""
        now = now_ms()
        answer = self.store.decide(str(payload), now)
        store = self.store
        alarm_at = store.alarm_wanted(now)
        if alarm_at is not None:
            self.storage.arm(alarm_at)
        if store.flush_due is not None and self.flush_timer is None:
            delay_s = max(0, store.flush_due - now) / 1000
            self.flush_timer = asyncio.get_event_loop().call_later(delay_s, self._flush)
        return answer

    def _flush(self) -> None:
        self.flush_timer = None
        self.store.flush(now_ms())

    async def alarm(self, *_args: Any) -> None:
        """Delete rows that no longer matter; re-arm for the rest."""
        next_at = self.store.cleanup(now_ms())
        if next_at is not None:
            await self.storage.set_alarm(next_at)
