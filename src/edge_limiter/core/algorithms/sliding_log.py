"""Sliding log: the exact rolling window, from a log of admitted requests.

A request at ``t`` counts the admitted cost in ``(t - window_ms, t]`` and is admitted iff
that sum plus its own cost is at most ``quota``. So no interval of length ``window_ms``
ever holds more than ``quota``. The log keeps one ``(timestamp, cost)`` entry per distinct
millisecond, so it never holds more than ``quota`` entries; expired entries are pruned
from every state this module returns.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple

from ..decision import Decision
from ..errors import StateError
from .base import Algorithm, decode_ints, validate_cost

Entry = tuple[int, int]
"""``(timestamp_ms, cost)``."""


def _stamp(entry: Entry) -> int:
    return entry[0]


class SlidingLogState(NamedTuple):
    """Admitted requests, oldest first: strictly increasing timestamps, costs >= 1."""

    entries: tuple[Entry, ...]


class SlidingLog(Algorithm[SlidingLogState]):
    """At most ``quota`` cost in any ``window_ms`` interval, exactly."""

    name = "sliding_log"
    # One log entry per distinct admitted millisecond: the state grows with the quota.
    max_quota = 10_000

    def _live(self, state: SlidingLogState | None, now: int) -> tuple[Entry, ...]:
        """The entries still inside the window ending at ``now``."""
        if state is None:
            return ()
        start = bisect_right(state.entries, now - self.rate.window_ms, key=_stamp)
        return state.entries[start:]

    def _leave_at(self, entry: Entry) -> int:
        """The first instant ``entry`` no longer counts."""
        return entry[0] + self.rate.window_ms

    @staticmethod
    def _wrap(entries: tuple[Entry, ...]) -> SlidingLogState | None:
        return SlidingLogState(entries) if entries else None

    def check(
        self, state: SlidingLogState | None, now: int, cost: int = 1
    ) -> tuple[Decision, SlidingLogState | None]:
        """Admit ``cost`` if the window ending at ``now`` has room; log it if so."""
        validate_cost(cost)
        quota = self.rate.quota
        live = self._live(state, now)
        used = sum(entry_cost for _, entry_cost in live)
        if used + cost <= quota:
            entries = live
            if cost:
                # If the clock went backwards, log at the newest timestamp: it then
                # expires a little late, never early, and the log stays sorted.
                stamp = max(now, live[-1][0]) if live else now
                if live and live[-1][0] == stamp:
                    entries = (*live[:-1], (stamp, live[-1][1] + cost))
                else:
                    entries = (*live, (stamp, cost))
            reset_after = self._leave_at(entries[-1]) - now if entries else 0
            # A free request (cost 0) changes nothing, like a denied one.
            new_state = self._wrap(entries) if cost else state
            return self._allowed(quota - used - cost, reset_after), new_state
        reset_after = self._leave_at(live[-1]) - now if live else 0
        retry_after = reset_after
        if cost <= quota:
            # The oldest entries leave first: find the one whose exit frees enough.
            excess = used + cost - quota
            freed = 0
            for entry in live:
                freed += entry[1]
                if freed >= excess:
                    retry_after = self._leave_at(entry) - now
                    break
        return self._denied(max(0, quota - used), reset_after, retry_after), state

    def refund(
        self, state: SlidingLogState | None, now: int, cost: int = 1
    ) -> SlidingLogState | None:
        """Take ``cost`` back off the newest entries."""
        validate_cost(cost)
        entries = list(self._live(state, now))
        left = cost
        while entries and left > 0:
            stamp, entry_cost = entries[-1]
            if entry_cost <= left:
                entries.pop()
                left -= entry_cost
            else:
                entries[-1] = (stamp, entry_cost - left)
                left = 0
        return self._wrap(tuple(entries))

    def idle_at(self, state: SlidingLogState | None) -> int:
        """When the newest entry leaves the window (0 for the fresh state)."""
        if state is None or not state.entries:
            return 0
        return self._leave_at(state.entries[-1])

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
        entries = tuple(zip(values[::2], values[1::2], strict=True))
        for index, (stamp, entry_cost) in enumerate(entries):
            if entry_cost < 1:
                raise StateError(f"{self.name} state has a cost below 1 at entry {index}")
            if index and stamp <= entries[index - 1][0]:
                raise StateError(
                    f"{self.name} state timestamps must increase, entry {index} does not"
                )
        return SlidingLogState(entries)
