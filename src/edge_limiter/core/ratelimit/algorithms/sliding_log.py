"""Sliding log: the exact rolling window, from a log of admitted requests.

A request at ``t`` counts the admitted cost in ``(t - window_ms, t]`` and is admitted iff
that sum plus its own cost is at most ``quota``. So no interval of length ``window_ms``
ever holds more than ``quota``.

The log is the one algorithm whose state grows with the quota (one entry per admitted
request), so its step is written to stay O(1) amortized however long the log is:

- a state is a *view* ``[start, end)`` of an append-only buffer of timestamps and running
  cost totals. The cost in the window is the difference of two totals; expired entries are
  skipped by moving ``start`` (a binary search, only when the oldest entry has expired);
- admitting appends to the buffer in place when the state is the buffer's newest view,
  which it is whenever states are used as a Durable Object uses them (each one replaces
  the last). Older views never look past their own ``end``, so they stay valid: the
  functions are still pure. Appending to an older view copies its live entries first;
- the buffer is compacted (its live entries copied to a fresh one) once the expired part
  is larger than the live part, so memory stays within about twice the live log.

Entries made in the same millisecond stay separate in the buffer; :attr:`SlidingLogState.entries`
and :meth:`SlidingLog.encode` merge them, so the stored log has at most one entry per
millisecond and never more than ``quota`` entries.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import Any

from ...errors import StateError
from ..decision import Decision
from .base import Algorithm, decode_ints, validate_cost

Entry = tuple[int, int]
"""``(timestamp_ms, cost)``."""

#: Never compact a buffer whose expired part is shorter than this (copying is O(live)).
_COMPACT_AFTER = 64


class _Buffer:
    """Append-only timestamps and running totals shared by successive states.

    ``totals[i]`` is the cost admitted by entries ``0 .. i-1``: one more item than
    ``stamps``, so the cost of entries ``a .. b-1`` is ``totals[b] - totals[a]``.
    """

    __slots__ = ("stamps", "totals")

    def __init__(self, stamps: list[int], totals: list[int]) -> None:
        self.stamps = stamps
        self.totals = totals


class SlidingLogState:
    """Admitted requests, oldest first: non-decreasing timestamps, costs >= 1.

    Build one from ``(timestamp, cost)`` entries; compare them by their merged
    :attr:`entries`.
    """

    __slots__ = ("_buffer", "_end", "_start")

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        stamps: list[int] = []
        totals = [0]
        for stamp, cost in entries:
            stamps.append(stamp)
            totals.append(totals[-1] + cost)
        self._buffer = _Buffer(stamps, totals)
        self._start = 0
        self._end = len(stamps)

    @classmethod
    def _view(cls, buffer: _Buffer, start: int, end: int) -> SlidingLogState:
        state = cls.__new__(cls)
        state._buffer = buffer
        state._start = start
        state._end = end
        return state

    @property
    def entries(self) -> tuple[Entry, ...]:
        """The log, one ``(timestamp, cost)`` per distinct millisecond, oldest first."""
        stamps, totals = self._buffer.stamps, self._buffer.totals
        merged: list[list[int]] = []
        for index in range(self._start, self._end):
            cost = totals[index + 1] - totals[index]
            if merged and merged[-1][0] == stamps[index]:
                merged[-1][1] += cost
            else:
                merged.append([stamps[index], cost])
        return tuple((stamp, cost) for stamp, cost in merged)

    @property
    def newest(self) -> int:
        """The newest entry's timestamp (0 for an empty log)."""
        return self._buffer.stamps[self._end - 1] if self._end > self._start else 0

    def __len__(self) -> int:
        """How many entries the view holds (same-millisecond ones counted apart)."""
        return self._end - self._start

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SlidingLogState):
            return NotImplemented
        return self.entries == other.entries

    def __hash__(self) -> int:
        return hash(self.entries)

    def __repr__(self) -> str:
        return f"SlidingLogState({self.entries!r})"


def _append(buffer: _Buffer | None, start: int, end: int, stamp: int, cost: int) -> SlidingLogState:
    """The view ``[start, end)`` plus one entry: in place when it is the buffer's newest."""
    if (
        buffer is None
        or end != len(buffer.stamps)
        or (start >= _COMPACT_AFTER and start > end - start)
    ):
        if buffer is None:
            buffer = _Buffer([], [0])
        else:
            buffer = _Buffer(buffer.stamps[start:end], buffer.totals[start : end + 1])
        start, end = 0, end - start
    buffer.stamps.append(stamp)
    buffer.totals.append(buffer.totals[-1] + cost)
    return SlidingLogState._view(buffer, start, end + 1)


class SlidingLog(Algorithm[SlidingLogState]):
    """At most ``quota`` cost in any ``window_ms`` interval, exactly."""

    name = "sliding_log"
    # One log entry per distinct admitted millisecond: the state grows with the quota.
    max_quota = 10_000
    logged = True

    def _decide(
        self, state: SlidingLogState | None, now: int, cost: int, commit: bool
    ) -> tuple[Decision, SlidingLogState | None]:
        if cost.__class__ is not int or cost < 0:
            validate_cost(cost)
        quota = self.quota
        window = self.window_ms
        if state is None:
            buffer = None
            start = end = used = 0
            stamps: list[int] = []
            totals: list[int] = [0]
        else:
            buffer = state._buffer
            stamps, totals = buffer.stamps, buffer.totals
            start, end = state._start, state._end
            if start < end and stamps[start] <= now - window:
                start = bisect_right(stamps, now - window, start, end)
            used = totals[end] - totals[start]
        if used + cost <= quota:
            if not cost:
                # A free request changes nothing, like a denied one.
                reset_after = stamps[end - 1] + window - now if start < end else 0
                return self._allowed(quota - used, reset_after), state
            # If the clock went backwards, log at the newest timestamp: it then expires a
            # little late, never early, and the log stays sorted.
            stamp = now if start == end or stamps[end - 1] < now else stamps[end - 1]
            decision = self._allowed(quota - used - cost, stamp + window - now)
            if not commit:
                return decision, state
            return decision, _append(buffer, start, end, stamp, cost)
        reset_after = stamps[end - 1] + window - now if start < end else 0
        retry_after = reset_after
        if cost <= quota:
            # The oldest entries leave first: the first one whose exit frees enough.
            excess = used + cost - quota
            index = bisect_left(totals, totals[start] + excess, start + 1, end + 1) - 1
            retry_after = stamps[index] + window - now
        return self._denied(max(0, quota - used), reset_after, retry_after), state

    def check(
        self, state: SlidingLogState | None, now: int, cost: int = 1
    ) -> tuple[Decision, SlidingLogState | None]:
        """Admit ``cost`` if the window ending at ``now`` has room; log it if so."""
        return self._decide(state, now, cost, True)

    def peek(self, state: SlidingLogState | None, now: int, cost: int = 1) -> Decision:
        """What :meth:`check` would decide, without logging (so nothing is appended)."""
        return self._decide(state, now, cost, False)[0]

    def refund(
        self, state: SlidingLogState | None, now: int, cost: int = 1, at: int | None = None
    ) -> SlidingLogState | None:
        """Take ``cost`` back off the request's own entry (admitted ``at``), nothing once
        it has left the window (the newer entries are other requests'); unknown (``at``
        ``None``): off the newest entries. O(live entries): refunds are rare."""
        validate_cost(cost)
        if state is None:
            return None
        cutoff = now - self.window_ms
        entries = [list(entry) for entry in state.entries if entry[0] > cutoff]
        if at is not None:
            entries = [
                [stamp, count - min(count, cost) if stamp == at else count]
                for stamp, count in entries
            ]
            kept = [(stamp, count) for stamp, count in entries if count]
            return SlidingLogState(kept) if kept else None
        left = cost
        while entries and left > 0:
            taken = min(entries[-1][1], left)
            entries[-1][1] -= taken
            left -= taken
            if not entries[-1][1]:
                entries.pop()
        return SlidingLogState((stamp, c) for stamp, c in entries) if entries else None

    def idle_at(self, state: SlidingLogState | None) -> int:
        """When the newest entry leaves the window (0 for the fresh state)."""
        if state is None or not len(state):
            return 0
        return state.newest + self.window_ms

    def live(self, state: SlidingLogState, now: int) -> SlidingLogState:
        """The entries still inside the window ending at ``now`` (a view: no copy)."""
        buffer, start, end = state._buffer, state._start, state._end
        if start < end and buffer.stamps[start] <= now - self.window_ms:
            start = bisect_right(buffer.stamps, now - self.window_ms, start, end)
            return SlidingLogState._view(buffer, start, end)
        return state

    def encoded_len(self, state: SlidingLogState) -> int:
        """At most two ints per entry (same-millisecond entries merge when encoded)."""
        return 2 * len(state)

    def encode(self, state: SlidingLogState) -> list[int]:
        """``[t0, cost0, t1, cost1, ...]``."""
        return [value for entry in state.entries for value in entry]

    def decode(self, data: list[int]) -> SlidingLogState:
        """Inverse of :meth:`encode`."""
        values = decode_ints(data, self.name)
        if len(values) % 2:
            raise StateError(
                f"{self.name} state must be [t0, cost0, t1, cost1, ...], got {len(values)} ints"
            )
        entries = list(zip(values[::2], values[1::2], strict=True))
        _check_entries(entries, self.name)
        return SlidingLogState(entries)


def _check_entries(entries: list[Any], name: str) -> None:
    for index, (stamp, entry_cost) in enumerate(entries):
        if entry_cost < 1:
            raise StateError(f"{name} state has a cost below 1 at entry {index}")
        if index and stamp <= entries[index - 1][0]:
            raise StateError(f"{name} state timestamps must increase, entry {index} does not")
