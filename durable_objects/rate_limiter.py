"""The per-key rate-limiter Durable Object.

One instance per (route, key). :class:`edge_limiter.core.ratelimit.keystore.KeyStore` does all of
the work (rows in memory, written to this object's SQLite storage); this class only hands
it the SQL API and the clock, and arms the alarm and the write-behind timer it asks for.

``decide`` is the only way in: one RPC call per request. It is synchronous, so the read,
the decision and the write of one request can never interleave with another's: concurrent
requests for the key are serialised by the object itself, and the platform holds the
answer until the write is durable.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from workers import DurableObject

from edge_limiter.core.ratelimit.keystore import KeyStore


def _now_ms() -> int:
    return int(time.time() * 1000)


def _raw(wrapped: Any) -> Any:
    """The JavaScript object under the SDK's binding wrapper: every call through the
    wrapper converts its arguments and result, which strings and ints do not need."""
    return getattr(wrapped, "_binding", wrapped)


class _StorageSql:
    """The :class:`~edge_limiter.core.ratelimit.keystore.Sql` port over ``ctx.storage.sql``."""

    def __init__(self, sql: Any) -> None:
        self.exec = sql.exec

    def run(self, query: str, *args: Any) -> None:
        self.exec(query, *args)

    def rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        result = self.exec(query, *args).toArray()
        to_py = getattr(result, "to_py", None)
        return list(to_py() if to_py is not None else result)


class RateLimiter(DurableObject):  # type: ignore[misc]
    """Holds every limit's counter for one key, atomically."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.storage = _raw(ctx.storage)
        self.store = KeyStore(_StorageSql(self.storage.sql))
        self.flush_timer: asyncio.TimerHandle | None = None

    def decide(self, payload: str) -> str:
        """Run one store request (check, peek, refund or reset) and answer it."""
        now = _now_ms()
        answer = self.store.decide(str(payload), now)
        self._after(now)
        return answer

    def _after(self, now: int) -> None:
        store = self.store
        alarm_at = store.alarm_wanted(now)
        if alarm_at is not None:
            # Not awaited: storage operations apply in order, and the answer waits for it.
            self.storage.setAlarm(alarm_at)
        if store.flush_due is not None and self.flush_timer is None:
            delay_s = max(0, store.flush_due - now) / 1000
            self.flush_timer = asyncio.get_event_loop().call_later(delay_s, self._flush)

    def _flush(self) -> None:
        self.flush_timer = None
        self.store.flush(_now_ms())

    async def alarm(self, *_args: Any) -> None:
        """Delete rows that no longer matter; re-arm for the rest."""
        now = _now_ms()
        next_at = self.store.cleanup(now)
        if next_at is not None:
            await self.storage.setAlarm(next_at)
