"""The carry of admissions: a key counted under other limits keeps what it used.

When a key comes to another set of limits than a moment ago (an override set, changed or
deleted; a deploy that changed the route), each new limit starts from what the key used
under the old ones, not from a fresh state. Two measures of that use, both kept by the
key's object (:class:`~.keystore.KeyStore`):

- the key's latest admissions (:class:`Recent`), whatever limits counted them, which a
  new limit replays over its last windows (exact while the object lived through them);
- the rows of the other limits, whose use bounds a limit of a window at least as long
  (a lower bound, for a limit whose replay did not see every admission of its span).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .algorithms.base import Algorithm

#: How many of a key's latest admissions its object remembers (see :class:`Recent`).
RECENT_ADMISSIONS = 1024
#: No rows (one empty set for every key's carry, not one each).
_NONE: frozenset[str] = frozenset()


class Recent:
    """The key's latest admissions, ``(time, units)``, whatever limits counted them:
    memory only, at most :data:`RECENT_ADMISSIONS` (a ring, 16 bytes an entry, grown as
    admissions come).

    When the key is counted under other limits than a moment ago (an override set,
    changed or deleted; a deploy that changed the route), each new limit replays what
    the key was admitted within its last windows: it starts from what it would hold had
    it counted them (:meth:`Carry.carried`).
    """

    __slots__ = ("entries", "next", "since")

    def __init__(self) -> None:
        self.entries = array("q")
        """Each admission's time then its units, one after the other (one array, not
        two: a key's object is made for every new key, and holds it while it lives)."""
        self.next = 0
        """Once full: the slot the next admission overwrites (the oldest)."""
        self.since: int | None = None
        """Every admission after this instant is here (None: not known yet): when the
        object started, or the last admission the ring let go."""

    def add(self, now: int, units: int) -> None:
        entries = self.entries
        if len(entries) < 2 * RECENT_ADMISSIONS:
            entries.append(now)
            entries.append(units)
            return
        slot = self.next
        gone = entries[2 * slot]
        if self.since is None or gone > self.since:
            self.since = gone
        entries[2 * slot] = now
        entries[2 * slot + 1] = units
        self.next = slot + 1 if slot + 1 < RECENT_ADMISSIONS else 0

    def clear(self, now: int) -> None:
        self.entries = array("q")
        self.next = 0
        self.since = now

    def replay(self, algorithm: Algorithm[Any], now: int) -> tuple[Any, bool]:
        """``(state, exact)``: the state ``algorithm`` would hold now had it counted the
        admissions of its last two windows (None: none), and whether every admission of
        that span is remembered (else the state is a lower bound).

        Admissions the limit would have denied were made all the same (under other
        limits): it holds the latest of them that it can, so what it admits next waits
        for those to leave its window, not the earliest.
        """
        after = now - 2 * max(algorithm.window_ms, algorithm.limit.policy_window_ms)
        slot, ring = self.next, self.entries
        entries = [
            (ring[i], ring[i + 1])
            for i in (*range(2 * slot, len(ring), 2), *range(0, 2 * slot, 2))
            if after < ring[i] <= now
        ]
        exact = self.since is not None and self.since <= after
        fits, state = _replayed(algorithm, entries)
        if fits:
            return state, exact
        # The shortest start that fits: a later start leaves more room (binary search).
        low, high = 1, len(entries)
        best: Any = None
        while low <= high:
            middle = (low + high) // 2
            fits, state = _replayed(algorithm, entries[middle:])
            if fits:
                best, high = state, middle - 1
            else:
                low = middle + 1
        return best, exact


def _replayed(algorithm: Algorithm[Any], entries: list[tuple[int, int]]) -> tuple[bool, Any]:
    """Whether ``algorithm`` admits every one of ``entries`` in turn, and its state after."""
    state: Any = None
    check = algorithm.check
    for at, units in entries:
        decision, state = check(state, at, units)
        if not decision.allowed:
            return False, None
    return True, state


def used(algorithm: Algorithm[Any], state: Any, now: int) -> int:
    """The units ``state`` holds as used now (0 for the fresh state)."""
    if state is None:
        return 0
    standing = algorithm.peek(state, now, 0)
    return standing.limit - standing.remaining


class Carry:
    """One key's carry: its recent admissions and the limit set that last took them in."""

    __slots__ = ("recent", "reconciled", "reconciled_exact")

    def __init__(self) -> None:
        self.recent = Recent()
        self.reconciled: tuple[str, ...] = ()
        """The limit set whose rows last took in :attr:`recent` (see :meth:`carried`)."""
        self.reconciled_exact: frozenset[str] = _NONE
        """Rows of :attr:`reconciled` whose replay saw every admission of its span."""

    def reset(self, now: int) -> None:
        """An operator's reset: the key starts afresh, nothing of it is carried."""
        self.recent.clear(now)
        self.reconciled, self.reconciled_exact = (), _NONE

    def carried(
        self,
        algorithms: Sequence[Algorithm[Any]],
        ids: Sequence[str],
        states: Sequence[Any],
        now: int,
        *,
        rows: Mapping[str, Any],
        algorithm_for: Callable[[str], Algorithm[Any] | None],
        keep: bool,
    ) -> Sequence[Any]:
        """``states`` (of the rows ``ids``) with the recent use of the key's other
        ``rows`` carried into them (``states`` itself when nothing is carried).

        The same key counted under other limits moments ago (before an override was set,
        changed or deleted, or before a deploy changed the route) has used what it used;
        a limit of the request's set must not start from less. Two measures of it:

        - The admissions the object remembers (:class:`Recent`, whatever limits counted
          them): when the key comes to this limit set from another, each limit replays
          those of its last windows and starts from that state if it says more is used
          than its own row. Exact while the object has lived through them and they are
          not more than it remembers; a lower bound otherwise (a restart forgets them).
          Once replayed and kept (``keep``: the caller stores the states), the set's rows
          count every admission the replay would, so it is done once per change of set,
          not per request.
        - The other rows, for a limit whose replay did not see every admission of its
          span (the object restarted within it, or forgot the oldest): what a row of
          window ``w`` holds was used within ``w``, so it is at most what was used within
          any longer window: a limit takes the most used (up to its capacity) among the
          other rows whose window is no longer than its own, when that is more than its
          own row says, as used now. (A row of a longer window is left to the replay: its
          use may be older than this limit's window.)
        """
        out: list[Any] | None = None
        exact = self.reconciled_exact
        if tuple(ids) != self.reconciled:
            out, exact = self._replayed(algorithms, ids, states, now)
            if keep:
                self.reconciled, self.reconciled_exact = tuple(ids), exact
        others = _others_used(ids, rows, algorithm_for, now)
        if not others:
            return states if out is None else out
        for index, algorithm in enumerate(algorithms):
            if ids[index] in exact:
                # Its replay saw every admission of its span: it holds all the use there
                # is (seeding the others' use as of now would only push its wait later).
                continue
            most = max(
                (units for window, units in others if window <= algorithm.window_ms), default=0
            )
            most = min(most, algorithm.capacity)
            if most <= 0:
                continue
            own = states[index] if out is None else out[index]
            if used(algorithm, own, now) >= most:
                continue
            decision, seeded = algorithm.check(None, now, most)
            if decision.allowed:
                if out is None:
                    out = list(states)
                out[index] = seeded
        return states if out is None else out

    def _replayed(
        self,
        algorithms: Sequence[Algorithm[Any]],
        ids: Sequence[str],
        states: Sequence[Any],
        now: int,
    ) -> tuple[list[Any] | None, frozenset[str]]:
        """Each limit's replay of the recent admissions, where it says more is used than
        the limit's own row (None: nowhere), and the rows whose replay saw them all."""
        out: list[Any] | None = None
        seen_all = set()
        for index, algorithm in enumerate(algorithms):
            replayed, whole = self.recent.replay(algorithm, now)
            if whole:
                seen_all.add(ids[index])
            if replayed is not None and used(algorithm, replayed, now) > used(
                algorithm, states[index], now
            ):
                if out is None:
                    out = list(states)
                out[index] = replayed
        return out, frozenset(seen_all)


def _others_used(
    ids: Sequence[str],
    rows: Mapping[str, Any],
    algorithm_for: Callable[[str], Algorithm[Any] | None],
    now: int,
) -> list[tuple[int, int]]:
    """``(window, units used now)`` of each of ``rows`` outside ``ids`` that holds any."""
    ids_set = set(ids)
    others: list[tuple[int, int]] = []
    for rid, state in rows.items():
        if rid in ids_set or state is None:
            continue
        other = algorithm_for(rid)
        if other is None:
            continue
        units = used(other, state, now)
        if units > 0:
            others.append((other.window_ms, units))
    return others
