"""A bulkhead: a cap on the calls one isolate has in flight to one origin.

When an origin slows down, requests pile up waiting on it and hold the isolate's memory
and connections; the cap turns that pile-up into fast refusals. It counts per isolate,
in memory, on purpose: in-flight calls end with the isolate, so there is nothing to store.
It is plain counting (no asyncio): the caller acquires before the call and releases in a
``finally``.
"""

from __future__ import annotations

from ..errors import BulkheadError


class Bulkhead:
    """At most ``limit`` calls in flight; ``in_flight`` is never negative nor above ``limit``."""

    __slots__ = ("_in_flight", "limit")

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"a bulkhead limit must be an int >= 1, got {limit!r}")
        self.limit = limit
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Calls acquired and not yet released."""
        return self._in_flight

    @property
    def available(self) -> int:
        """How many more calls may start now."""
        return self.limit - self._in_flight

    def try_acquire(self) -> bool:
        """Take a slot if one is free; ``False`` (and nothing taken) when full."""
        if self._in_flight >= self.limit:
            return False
        self._in_flight += 1
        return True

    def release(self) -> None:
        """Give a slot back; raises :class:`BulkheadError` if none is held (a caller's bug)."""
        if self._in_flight == 0:
            raise BulkheadError("released a bulkhead slot that was never acquired")
        self._in_flight -= 1

    def __repr__(self) -> str:
        return f"Bulkhead(limit={self.limit}, in_flight={self._in_flight})"
