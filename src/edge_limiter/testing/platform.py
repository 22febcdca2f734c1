"""The platform in memory, for the simulator and the gateway's tests: a clock that moves
only when told, waits that do not sleep, ``ctx.waitUntil``, Workers KV and a client's
body."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

#: Where a simulation's clock starts: 2023-11-14T22:13:20Z.
EPOCH_MS = 1_700_000_000_000


class ManualClock:
    """Integer milliseconds that move only when :meth:`advance` is called."""

    def __init__(self, now: int = EPOCH_MS) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class InstantSleep:
    """Waits (a retry's backoff, a request waiting for another's answer) on the manual
    clock: nothing sleeps, and a wait moves the clock to its end, unless it is there
    already (waits that overlap do not add up)."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        end = self.clock.now + round(seconds * 1000)
        await asyncio.sleep(0)
        self.clock.now = max(self.clock.now, end)


class MemoryKV:
    """Workers KV in a dict, with expiry on the manual clock; ``failing`` makes it throw."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.values: dict[str, tuple[bytes, int]] = {}
        self.gets: list[str] = []
        self.puts: list[tuple[str, int]] = []
        self.deletes: list[str] = []
        self.failing = False

    async def get(self, key: str) -> bytes | None:
        self.gets.append(key)
        if self.failing:
            raise RuntimeError("KV GET failed: 500")
        value = self.values.get(key)
        if value is None or value[1] <= self.clock.now:
            return None
        return value[0]

    async def put(self, key: str, value: bytes, ttl_s: int) -> None:
        if self.failing:
            raise RuntimeError("KV PUT failed: 429 too many writes")
        if ttl_s < 60:
            raise ValueError("KV refuses an expirationTtl under 60 s")
        if len(key.encode()) > 512:
            raise ValueError("KV refuses keys over 512 bytes")
        self.puts.append((key, ttl_s))
        self.values[key] = (value, self.clock.now + ttl_s * 1000)

    async def delete(self, key: str) -> None:
        if self.failing:
            raise RuntimeError("KV DELETE failed: 500")
        self.deletes.append(key)
        self.values.pop(key, None)


def _released() -> None:
    """A hold's release that has nothing to release."""


class Deferred:
    """``ctx.waitUntil`` for tests that run each request in an event loop of its own: work
    collected, run after the response (:meth:`run`). The platform starts it at once
    (:class:`AtOnce`, what the simulator uses)."""

    def __init__(self) -> None:
        self.pending: list[Awaitable[Any]] = []

    def defer(self, work: Awaitable[Any]) -> None:
        self.pending.append(work)

    def hold(self) -> Callable[[], None]:
        """Nothing to hold: no request is dropped here (see ``Exchange.finish``)."""
        return _released

    async def run(self) -> int:
        count = 0
        while self.pending:
            await self.pending.pop(0)
            count += 1
        return count

    def discard(self) -> None:
        """Drop the work not yet run (the request it came from failed)."""
        for work in self.pending:
            close = getattr(work, "close", None)
            if close is not None:
                close()
        self.pending.clear()


class AtOnce(Deferred):
    """``ctx.waitUntil`` as the platform does it: deferred work starts at once, while the
    request that deferred it is still going (a lease refresh runs while the request is at
    the origin), and :meth:`run` waits for what is left. The simulator's background."""

    def defer(self, work: Awaitable[Any]) -> None:
        self.pending.append(asyncio.ensure_future(work))

    def discard(self) -> None:
        """Cancel the work still going (the request it came from failed)."""
        for task in self.pending:
            if isinstance(task, asyncio.Future):
                task.cancel()
        self.pending.clear()


def epoch_ms(start: int | str) -> int:
    """A clock's start: epoch milliseconds, or an ISO 8601 time (UTC unless it says)."""
    if isinstance(start, str) and start.strip().isdigit():
        start = int(start.strip())
    if isinstance(start, int):
        if start < 0:
            raise ValueError(f"start must be at 1970-01-01 or later, got {start}")
        return start
    try:
        moment = datetime.fromisoformat(start.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"start must be epoch milliseconds or an ISO 8601 time like "
            f"'2026-12-01T10:00:00Z', got {start!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    millis = int(moment.timestamp() * 1000)
    if millis < 0:
        raise ValueError(f"start must be at 1970-01-01 or later, got {start!r}")
    return millis


class _ClientBody:
    """A request's body as the platform hands it over: a stream, read only when a stage
    asks for it (then kept), so what the gateway does with it is what it does there."""

    __slots__ = ("_bytes", "data")

    def __init__(self, payload: bytes) -> None:
        self._bytes = payload
        self.data: bytes | None = None

    async def read(self, progress: Any = None) -> bytes:
        del progress
        self.data = self._bytes
        return self._bytes

    async def read_at_most(self, limit: int, progress: Any = None) -> bytes | None:
        if len(self._bytes) > limit:
            return None
        return await self.read(progress)
