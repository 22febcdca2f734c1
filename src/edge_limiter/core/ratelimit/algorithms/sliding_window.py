"""Sliding window counter: two aligned counters and a weighted estimate.

Windows are aligned at multiples of ``window_ms``. The state is the current window's index
and the cost admitted in it and in the window before. At ``elapsed`` ms into the current
window, the previous window's count is weighted by the share of it that the rolling
window ending now still covers::

    estimate = previous * (window_ms - elapsed) / window_ms + current

A request of ``cost`` is admitted iff
``previous * (window_ms - elapsed) // window_ms + current + cost <= quota`` (integers only:
the weighted part is rounded down). With a limit of 7 per minute, 5 in the previous minute
and 3 so far in this one, 30% into the minute the estimate is 5 * 0.7 + 3 = 6.5, and one
more request is admitted (3 + 3 + 1 <= 7).

The estimate is exact when the previous window's traffic was spread uniformly. What holds
whatever the traffic, and what the tests check:

* every aligned window admits at most ``quota`` (``current + cost <= quota``), and
* any interval of length ``window_ms`` overlaps at most two aligned windows, so it admits
  at most ``2 * quota``.

Over time with no new requests the estimate never grows, so the earliest instant a request
fits is found in closed form: it is in the current window, the next one, or at the start of
the one after (where both counters are stale), with no search loop.

Leases: as in :mod:`.fixed_window`, a lease ends with the window it was taken in, so the
counters hold at least the units used in each window. A use at a later instant of the
same window still passes the test its grant passed: the previous window's weight only
falls as the window goes on, and the current count only grows by grants, each of which
passed the test at its own instant. A refund happens within the lease's window and takes
from the current count, which holds the lease's units (never from the previous one).
"""

from __future__ import annotations

from typing import TypeAlias

from ...errors import StateError
from ..decision import Decision
from .base import decode_ints, new_tuple, validate_cost
from .leasable import Leasable

SlidingWindowState: TypeAlias = tuple[int, int, int]
"""``(window_index, current, previous)``: the cost admitted in window ``window_index``
(``current``) and in the one before. A plain tuple, made once per admitted request (see
``edge_limiter.core.ratelimit.algorithms.base``)."""


class SlidingWindowCounter(Leasable[SlidingWindowState]):
    """An approximate rolling window from two fixed-window counters."""

    name = "sliding_window"

    def _at(self, state: SlidingWindowState | None, now: int) -> tuple[int, int, int, int]:
        """``(window_index, current, previous, t)`` rolled forward to ``now``.

        ``t`` is ``now``, or the start of the stored window if the clock went back before
        it: the stored counts are then kept as they are, weighted as if at its start.
        """
        window = self.rate.window_ms
        index = now // window
        if state is None or index > state[0] + 1:
            return index, 0, 0, now
        stored, current, previous = state
        if index == stored + 1:
            return index, 0, current, now
        return stored, current, previous, max(now, stored * window)

    def _weighted(self, previous: int, elapsed: int) -> int:
        window = self.rate.window_ms
        return previous * (window - elapsed) // window

    def _first_fit(self, index: int, current: int, previous: int, t: int, cost: int) -> int:
        """The earliest instant ``>= t`` at which ``cost`` (at most the quota) fits.

        ``floor(previous * (W - e) / W) <= room`` holds iff ``previous * (W - e)`` is at
        most ``(room + 1) * W - 1``, i.e. iff ``e >= W - ((room + 1) * W - 1) // previous``.
        """
        window = self.rate.window_ms
        quota = self.rate.quota
        start = index * window
        room = quota - current - cost
        if room >= 0:
            if previous == 0:
                return t
            elapsed = window - ((room + 1) * window - 1) // previous
            fit = max(t, start + elapsed)
            if fit < start + window:
                return fit
        # Next window: this window's count becomes the weighted one, the new count is 0.
        start += window
        room = quota - cost
        if current == 0:
            return start
        elapsed = window - ((room + 1) * window - 1) // current
        if elapsed < window:
            return start + max(0, elapsed)
        # The window after: both counters are stale.
        return start + window

    def check(
        self, state: SlidingWindowState | None, now: int, cost: int = 1
    ) -> tuple[Decision, SlidingWindowState | None]:
        """Admit ``cost`` if the weighted estimate leaves room; count it if so."""
        # The hot path: _at, _weighted and (for an admitted request) _first_fit are
        # written out here; the tests hold them to the same answers.
        if cost.__class__ is not int or cost < 0:
            validate_cost(cost)
        window = self.window_ms
        quota = self.quota
        index = now // window
        if state is None or index > state[0] + 1:
            current = previous = 0
            t = now
        elif index == state[0] + 1:
            current, previous, t = 0, state[1], now
        else:
            index, current, previous = state
            t = max(now, index * window)
        start = index * window
        used = previous * (window - (t - start)) // window + current
        if used + cost <= quota:
            if not cost:
                # A free request changes nothing, like a denied one.
                reset_after = self._first_fit(index, current, previous, t, quota) - now
                return self._allowed(quota - used, reset_after), state
            current += cost
            # When the whole quota fits again (_first_fit with cost = quota): this window
            # now holds ``current >= 1``, so not before the next one, once this window's
            # count weighs less than 1 there (at the latest, the start of the one after).
            reset_after = start + 2 * window - (window - 1) // current - now
            return (
                new_tuple(
                    Decision,
                    (True, quota, quota - used - cost, reset_after, 0, None, self.limit),
                ),
                (index, current, previous),
            )
        reset_after = self._first_fit(index, current, previous, t, quota) - now
        if cost > quota:
            retry_after = reset_after
        else:
            retry_after = self._first_fit(index, current, previous, t, cost) - now
        return self._denied(max(0, quota - used), reset_after, retry_after), state

    @staticmethod
    def _wrap(index: int, current: int, previous: int) -> SlidingWindowState | None:
        if current == 0 and previous == 0:
            return None
        return index, current, previous

    def refund(
        self, state: SlidingWindowState | None, now: int, cost: int = 1, at: int | None = None
    ) -> SlidingWindowState | None:
        """Take ``cost`` back from the window that counted the request (admitted ``at``):
        the current one, or the previous one, or none once that has slid out. Unknown
        (``at`` ``None``): from the current window first, then from the previous one."""
        validate_cost(cost)
        index, current, previous, _ = self._at(state, now)
        if at is not None:
            counted_in = at // self.rate.window_ms
            if counted_in == index:
                return self._wrap(index, max(0, current - cost), previous)
            if counted_in == index - 1:
                return self._wrap(index, current, max(0, previous - cost))
            return self._wrap(index, current, previous)
        taken = min(cost, current)
        return self._wrap(index, current - taken, max(0, previous - (cost - taken)))

    # --- leases (the lease protocol: :mod:`.leasable`) ---

    lease_records_merge = True
    lease_plans = True
    lease_late_returns = True

    def plan_counts(self, state: SlidingWindowState | None, now: int) -> tuple[int, int]:
        """``(current, previous)`` as of ``now``: what a plan shares out is the room they
        leave (see :func:`~edge_limiter.core.ratelimit.leases.plan.plan_window`)."""
        _, current, previous, _ = self._at(state, now)
        return current, previous

    def plan_commit(
        self, state: SlidingWindowState | None, now: int, units: int
    ) -> SlidingWindowState | None:
        """``state`` with ``units`` more counted in the window of ``now``, unchecked: a
        plan's allowances, counted at once though they accrue until the window's end
        (the plan never lets their uses pass the limit at any instant)."""
        index, current, previous, _ = self._at(state, now)
        return self._wrap(index, current + units, previous)

    def grantable(self, state: SlidingWindowState | None, now: int, ttl_ms: int) -> int:
        """The room the weighted estimate leaves now (0 if the clock went back)."""
        del ttl_ms
        window = self.rate.window_ms
        if state is not None and now // window < state[0]:
            return 0
        index, current, previous, t = self._at(state, now)
        used = self._weighted(previous, t - index * window) + current
        return max(0, self.rate.quota - used)

    def lease_growth(self, state: SlidingWindowState | None, now: int) -> float:
        """The previous window's count sliding out: ``previous / window`` units per ms."""
        if state is None:
            return 0.0
        _, _, previous, _ = self._at(state, now)
        return previous / self.rate.window_ms

    def lease_expiry(self, now: int, ttl_ms: int) -> int:
        """``now + ttl_ms``, or the end of the current window if that comes first."""
        window = self.rate.window_ms
        return min(now + ttl_ms, (now // window + 1) * window)

    def idle_at(self, state: SlidingWindowState | None) -> int:
        """When the estimate reaches 0 for good (0 for the fresh state)."""
        if state is None:
            return 0
        index, current, previous = state
        return self._first_fit(
            index, current, previous, index * self.rate.window_ms, self.rate.quota
        )

    def encode(self, state: SlidingWindowState) -> list[int]:
        """``[window_index, current, previous]``."""
        return list(state)

    def decode(self, data: list[int]) -> SlidingWindowState:
        """Inverse of :meth:`encode`."""
        values = decode_ints(data, self.name)
        if len(values) != 3:
            raise StateError(
                f"{self.name} state must be [window_index, current, previous], got {values!r}"
            )
        index, current, previous = values
        if current < 0 or previous < 0:
            raise StateError(f"{self.name} state has a negative count: {values!r}")
        return index, current, previous
