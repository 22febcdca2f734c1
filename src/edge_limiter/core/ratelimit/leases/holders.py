"""What the object keeps of a limit set's lease holders (:mod:`.grant` decides with it):
each holder's outstanding lease, a sliding window's plan and who claimed from it, and the
rates the holders reported. Memory only: after a restart it starts empty, which can only
under-admit."""

from __future__ import annotations

from typing import NamedTuple

from .plan import Plan


class Held(NamedTuple):
    """A holder's outstanding lease, as the object granted it."""

    units: int
    granted_at: int
    expires_at: int
    returnable_until: int = 0
    """Until when its unused units may come back (0: ``expires_at``). For the windows,
    the end of the window they were taken in: an isolate hands back the units of a lease
    that ended unused with its next request, and the window can still take them."""
    late_until: int = 0
    """A sliding window's record: until when units that come back after the window's
    end are still taken, from that window's count (the next window still weighs it)."""

    @property
    def kept_until(self) -> int:
        """Until when the object keeps this record."""
        return max(self.expires_at, self.returnable_until, self.late_until)


class Holders:
    """The leases outstanding on one limit set, by holder, and the holders' reported rates."""

    __slots__ = (
        "answered",
        "by_holder",
        "ended",
        "plan",
        "plan_index",
        "planned_at",
        "prune_at",
        "rates",
    )

    def __init__(self) -> None:
        self.by_holder: dict[str, Held] = {}
        self.ended: dict[str, Held] = {}
        """A sliding window's record of a holder's grants in a window that has ended, once
        a grant of the next window took its place (``Held.late_until``)."""
        self.prune_at = 0
        self.plan: Plan | None = None
        """A sliding window's plan for the window ``plan_index`` (None: no plan)."""
        self.plan_index = -1
        self.planned_at = 0
        """When the plan was made (its unclaimed allowances are withdrawn a claim's grace
        later: see :data:`.grant.CLAIM_TTLS`)."""
        self.answered: set[str] = set()
        """The holders given their allowance of the plan (each gets it once)."""
        self.rates: dict[str, tuple[int, int]] = {}
        """Holder -> (its observed rate in units per second, when it said so)."""

    def prune(self, now: int, ttl: int, memory: int) -> None:
        """Drop the records kept past their use, and the rates not reported within
        ``memory`` ms; at most once per ``ttl``."""
        if now < self.prune_at:
            return
        for records in (self.by_holder, self.ended):
            for holder, lease in list(records.items()):
                if lease.kept_until <= now:
                    del records[holder]
        forget_before = now - memory
        for holder, (_, seen_at) in list(self.rates.items()):
            if seen_at < forget_before:
                del self.rates[holder]
        self.prune_at = now + ttl
