"""Fixed window: one counter per aligned window of ``window_ms``.

Windows start at multiples of ``window_ms``; a request is admitted iff the window's count
plus its cost is at most ``quota``, and the count starts again from 0 at each window edge.
Cheap and exact per window, but a burst on both sides of an edge can pass up to twice the
quota within one window's length.

Leases: a lease ends at ``min(now + ttl, end of the window it was taken in)``
(:meth:`FixedWindow.lease_expiry`), so every unit is used in the window that counted it
and the uses in a window never exceed the units taken in it, which the check keeps within
the quota. A refund of a lease's unused units happens only while the lease is unexpired,
so in that same window: it lowers that window's count by units that are never used.
"""

from __future__ import annotations

from typing import TypeAlias

from ...errors import StateError
from ..decision import Decision
from .base import decode_ints, new_tuple, validate_cost
from .leasable import Leasable

FixedWindowState: TypeAlias = tuple[int, int]
"""``(window_index, used)``: the cost admitted so far in the window ``window_index``. A
plain tuple, made once per admitted request (see ``edge_limiter.core.ratelimit.algorithms.base``)."""


class FixedWindow(Leasable[FixedWindowState]):
    """At most ``quota`` per aligned window."""

    name = "fixed_window"

    def _at(self, state: FixedWindowState | None, now: int) -> tuple[int, int]:
        """``(window_index, count)`` at ``now``.

        If the clock went back before the stored window, that window and its count stay.
        """
        index = now // self.rate.window_ms
        if state is None or index > state[0]:
            return index, 0
        return state

    @staticmethod
    def _wrap(index: int, count: int) -> FixedWindowState | None:
        return (index, count) if count else None

    def check(
        self, state: FixedWindowState | None, now: int, cost: int = 1
    ) -> tuple[Decision, FixedWindowState | None]:
        """Admit ``cost`` if the window has room; count it if so."""
        # The hot path: _at, _wrap and _allowed are written out here.
        if cost.__class__ is not int or cost < 0:
            validate_cost(cost)
        quota = self.quota
        window = self.window_ms
        index = now // window
        if state is None or index > state[0]:
            count = 0
        else:
            index, count = state
        window_end = (index + 1) * window - now
        if count + cost <= quota:
            if not cost:
                # A free request changes nothing, like a denied one.
                return self._allowed(quota - count, window_end if count else 0), state
            count += cost
            return (
                new_tuple(Decision, (True, quota, quota - count, window_end, 0, None, self.limit)),
                (index, count),
            )
        reset_after = window_end if count else 0
        # A cost within the quota fits once the window ends; a larger one never does.
        retry_after = window_end if cost <= quota else reset_after
        return self._denied(max(0, quota - count), reset_after, retry_after), state

    def refund(
        self, state: FixedWindowState | None, now: int, cost: int = 1, at: int | None = None
    ) -> FixedWindowState | None:
        """Take ``cost`` back from the current window (an ended window is forgotten); a
        request admitted (``at``) in a window that has ended gives nothing back to this
        one, which never counted it."""
        validate_cost(cost)
        index, count = self._at(state, now)
        if at is not None and at // self.rate.window_ms != index:
            return self._wrap(index, count)
        return self._wrap(index, max(0, count - cost))

    # --- leases (the lease protocol: :mod:`.leasable`) ---

    lease_records_merge = True
    lease_supply_grows = False

    def grantable(self, state: FixedWindowState | None, now: int, ttl_ms: int) -> int:
        """What the current window has left (0 if the clock went back before the stored one)."""
        del ttl_ms
        if state is not None and now // self.rate.window_ms < state[0]:
            return 0
        _, count = self._at(state, now)
        return max(0, self.rate.quota - count)

    def lease_expiry(self, now: int, ttl_ms: int) -> int:
        """``now + ttl_ms``, or the end of the current window if that comes first."""
        window = self.rate.window_ms
        return min(now + ttl_ms, (now // window + 1) * window)

    def idle_at(self, state: FixedWindowState | None) -> int:
        """When the window ends (0 for the fresh state)."""
        if state is None:
            return 0
        index, used = state
        if used == 0:
            return index * self.rate.window_ms
        return (index + 1) * self.rate.window_ms

    def encode(self, state: FixedWindowState) -> list[int]:
        """``[window_index, count]``."""
        return list(state)

    def decode(self, data: list[int]) -> FixedWindowState:
        """Inverse of :meth:`encode`."""
        values = decode_ints(data, self.name)
        if len(values) != 2:
            raise StateError(f"{self.name} state must be [window_index, count], got {values!r}")
        index, count = values
        if count < 0:
            raise StateError(f"{self.name} state has a negative count: {values!r}")
        return index, count
