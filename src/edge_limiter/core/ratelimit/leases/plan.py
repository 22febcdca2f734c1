"""Planned leases: a sliding window's supply shared out among its holders once per window.

A sliding window counter admits, at ``t`` in window ``[start, end)``, while
``previous * (end - t) / window + current`` stays within the quota: its supply grows
continuously as the previous window slides out (``previous / window`` units per ms) right
up to the window's end, and a unit not used by then is lost to that window. Handing that
growth out in leases costs either calls (holders ask often, for little) or admissions
(units still ungranted, or granted and unused, when the window ends).

When the holders' demand exceeds what the window can still admit, the key's object
instead makes one *plan* at its first lease request of a window and answers each holder
in it, once, with that holder's whole *allowance* for the rest of the window: a
non-decreasing function of time (:class:`Allowance`) that the isolate evaluates with its
own clock, admitting while its uses stay within it. The supply is shared in proportion
to the rates the holders reported, and a holder's share stops ``STOP_GAPS`` of its own
mean gaps between requests before the window's end (its last units would otherwise wait
for a request that comes after the end): from then on the others, busier, share what it
would have had, so the window's last units go to the holders that use them at once.

Exactness: the plan never gives out more than the window's supply. Every quantity is an
integer in millionths of a unit (:data:`SCALE`), every share is rounded down, and at each
point where a holder's share stops, what the window can give by then (its supply, rounded
down) is shared out again among the holders still active: so at every instant the sum of
all allowances is at most the supply at that instant. The object counts the plan in the
window's state at once (every allowance's final value), as if every unit were used: an
isolate that vanishes, or a restart of the object, can then only under-admit, and other
grants (to holders not in the plan) come only from what the plan leaves.

Clocks: the object plans on its clock and the isolate evaluates its allowance on its
own, both wall clocks, as the window leases compare the isolate's clock with the
object's window end: a skew between them moves the allowance by that skew.

Cost: the shares stop at a few dozen instants at most (stops are rounded to a grid), so a
plan is one pass over the holders per instant (8 ms for 1,000 holders on CPython, once a
window), an allowance a few dozen segments, and evaluating it a binary search.

Pure and standard-library only; ``now`` is always passed in.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from typing import NamedTuple

#: Allowances are tracked in millionths of a unit.
SCALE = 1_000_000

#: A holder's share stops this many of its mean gaps between requests before the end.
STOP_GAPS = 3

#: The busiest holders whose rates add up to this many times the window's growth keep
#: their share until the window's end.
KEEP_BUSIEST = 1.0

#: A plan is made only when the window can still give its holders at least this many
#: units each on average: with less, every holder's last unit is a large part of its
#: share, and units it does not reach in time are a large part of the window.
MIN_SHARE = 4

#: A plan is made only when the holders' reported demand over the rest of the window is
#: at least this many times what the window can still admit: measured, a plan does better
#: than ordinary leases from a demand of about the window's room on (with less, ordinary
#: leases serve every holder what it wants, and strand nothing).
BINDING = 0.9


def _start(segment: tuple[int, int, int]) -> int:
    return segment[0]


def _grid(offset: int) -> int:
    """``offset`` (ms before the window's end) rounded up to the next step of a grid that
    grows by a quarter at each step: holders' shares stop at a few dozen instants in any
    window, whatever their number (each instant costs a pass over the active holders)."""
    step = 1
    while step < offset:
        step = max(step + 1, step * 5 // 4)
    return step


#: A window is planned only when it is at most this many lease ttls long (10 s at the
#: default ttl): a plan's allowance lasts the rest of its window, and an isolate that goes
#: away keeps its share till then (an ordinary lease's, a ttl).
MAX_TTLS = 10


def plans(lease_plans: bool, windows_ms: list[int], ttl_ms: int) -> bool:
    """Whether a route's leases are planned: its algorithm makes plans
    (``Leasable.lease_plans``), it has one limit, and that window is at most
    :data:`MAX_TTLS` ttls long."""
    return lease_plans and len(windows_ms) == 1 and windows_ms[0] <= MAX_TTLS * ttl_ms


class Allowance(NamedTuple):
    """One holder's planned units in one window: whole units it may have used by ``t``.

    ``segments`` are ``(from_ms, base, slope)`` in :data:`SCALE` units, ascending: from
    ``from_ms`` on (until the next segment) the allowance is ``base + slope * (t -
    from_ms)``. Before the first segment it is 0; from ``stop_at`` on it is ``final``
    (whole units); it ends with the window at ``end``.
    """

    segments: tuple[tuple[int, int, int], ...]
    stop_at: int
    final: int
    end: int

    def at(self, now: int) -> int:
        """Whole units allowed in total by ``now`` (0 once the window ended)."""
        if now >= self.end:
            return 0
        if now >= self.stop_at:
            return self.final
        index = bisect_right(self.segments, now, key=_start) - 1
        if index < 0:
            return 0
        start, base, slope = self.segments[index]
        return min(self.final, (base + slope * (now - start)) // SCALE)

    def reaches_at(self, units: int, now: int) -> int:
        """The earliest instant ``>= now`` at which :meth:`at` is at least ``units``
        (``end`` if it never is in this window)."""
        if units <= 0:
            return now
        if units > self.final:
            return self.end
        if self.at(now) >= units:
            return now
        need = units * SCALE
        bounds = [segment[0] for segment in self.segments[1:]] + [self.stop_at]
        for (start, base, slope), until in zip(self.segments, bounds, strict=True):
            if until <= now:
                continue
            if base >= need:
                return max(now, start)
            if slope > 0:
                at = start + -(-(need - base) // slope)
                if at < until:
                    return max(now, at)
        return min(self.end, max(now, self.stop_at))

    def to_list(self) -> list[object]:
        """``[stop_at, final, end, [[from_ms, base, slope], ...]]`` for the answer."""
        return [self.stop_at, self.final, self.end, [list(s) for s in self.segments]]

    @classmethod
    def from_list(cls, data: object) -> Allowance:
        """Inverse of :meth:`to_list`; raises ``ValueError`` on a malformed one."""
        if not isinstance(data, list) or len(data) != 4:
            raise ValueError(f"bad allowance {data!r}")
        stop_at, final, end, raw = data
        numbers = [stop_at, final, end]
        if not isinstance(raw, list) or not raw:
            raise ValueError(f"bad allowance segments {raw!r}")
        segments = []
        for item in raw:
            if not isinstance(item, list) or len(item) != 3:
                raise ValueError(f"bad allowance segment {item!r}")
            numbers += item
            segments.append((item[0], item[1], item[2]))
        if any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in numbers):
            raise ValueError(f"bad allowance numbers {data!r}")
        starts = [s[0] for s in segments]
        if starts != sorted(set(starts)) or starts[-1] > stop_at or stop_at > end:
            raise ValueError(f"bad allowance times {data!r}")
        return cls(tuple(segments), stop_at, final, end)


class Plan(NamedTuple):
    """A window's plan: each holder's allowance."""

    window_index: int
    allowances: Mapping[str, Allowance]

    @property
    def committed(self) -> int:
        """The sum of the allowances' final values: what the object counts at once."""
        return sum(allowance.final for allowance in self.allowances.values())


def _stops(holders: Mapping[str, int], end: int, stop_gaps: int, kept: float) -> dict[str, int]:
    """When each holder's share stops: ``stop_gaps`` of its mean gaps before the window's
    ``end`` (on the grid), except for the busiest holders whose rates add up to ``kept``
    units per second: they share the growth until the end (with fewer, the window's last
    units would outrun their requests)."""
    last = end - 1  # the window's last instant: every allowance is final by then
    stops = {
        holder: min(last, end - _grid(-(-stop_gaps * 1000 // rate)))
        for holder, rate in holders.items()
    }
    covered = 0
    for holder, rate in sorted(holders.items(), key=lambda item: -item[1]):
        if covered >= kept:
            break
        stops[holder] = last
        covered += rate
    return stops


def plan_window(
    now: int,
    window_ms: int,
    quota: int,
    *,
    current: int,
    previous: int,
    rates: Mapping[str, int],
    stop_gaps: int = STOP_GAPS,
    binding: float = BINDING,
    keep_busiest: float = KEEP_BUSIEST,
    min_share: int = MIN_SHARE,
) -> Plan | None:
    """The plan for the rest of the window containing ``now`` (None: no plan is worth it).

    ``current`` and ``previous`` are the sliding window's counts (this window's and the
    previous one's) as of ``now``; ``rates`` are the holders' reported rates (units per
    second). No plan when the holders' demand over the rest of the window is below
    ``binding`` times what the window can still admit, or when nothing grows.
    """
    index = now // window_ms
    end = (index + 1) * window_ms
    room = quota - current
    holders = {holder: rate for holder, rate in rates.items() if rate > 0}
    if room <= 0 or previous <= 0 or not holders:
        return None
    if sum(holders.values()) * (end - now) < binding * room * 1000:
        return None
    if room < min_share * len(holders):
        return None

    def supply(t: int) -> int:
        """What the window can give by ``t``, in SCALE units: the continuous room
        ``room - previous * (end - t) / window`` rounded down, plus one unit less a
        millionth. The counter's exact room is ``room - floor(previous * (end - t) /
        window)``, the continuous room plus its fraction: so the whole units of this are
        never more than the exact room, and are that room whenever the fraction is at
        least a millionth (without it, a plan lagged the counter by a unit: a request
        sent at the Retry-After the counter said was denied for another window / previous
        ms)."""
        return (room * window_ms - previous * (end - t)) * SCALE // window_ms + SCALE - 1

    # The plan starts when the supply is no longer negative (a rounding of the estimate
    # can leave it a fraction below zero at first).
    start = max(now, end - room * window_ms // previous)
    stops = _stops(holders, end, stop_gaps, keep_busiest * previous * 1000 / window_ms)
    active = {holder: rate for holder, rate in holders.items() if stops[holder] > start}
    if not active:
        return None
    value = dict.fromkeys(active, 0)
    """Each active holder's allowance (SCALE units) at the current instant ``at``."""
    finals: dict[str, int] = {}
    segments: dict[str, list[tuple[int, int, int]]] = {holder: [] for holder in active}
    at = start
    given = 0  # SCALE units given out to holders that stopped
    while active:
        # Share out again what the supply has and the active holders do not.
        total = sum(active.values())
        spare = supply(at) - given - sum(value.values())
        if spare > 0:
            for holder, rate in active.items():
                value[holder] += spare * rate // total
        following = min(stops[holder] for holder in active)
        growth = previous * SCALE
        for holder, rate in active.items():
            slope = growth * rate // (window_ms * total)
            segments[holder].append((at, value[holder], slope))
            value[holder] += slope * (following - at)
        at = following
        for holder in [h for h in active if stops[h] <= at]:
            whole = value.pop(holder) // SCALE
            finals[holder] = whole
            given += whole * SCALE
            del active[holder]
    allowances = {
        holder: Allowance(tuple(segments[holder]), stops[holder], final, end)
        for holder, final in finals.items()
        if final > 0
    }
    return Plan(index, allowances) if allowances else None
