"""The lease protocol: what an algorithm does for its units to be leased.

A key's Durable Object may hand units of a limit to an isolate ahead of use (a lease,
:mod:`edge_limiter.core.ratelimit.leases`): the grant side asks the algorithm how much a
lease may take, when it ends, what it leaves in reserve and what may come back. An
algorithm that can answer subclasses :class:`Leasable`; one that cannot (the sliding
log, whose entries are per request) stays a plain :class:`~.base.Algorithm`, and a route
using it cannot lease.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

from .base import Algorithm, S


class Leasable(Algorithm[S]):
    """An algorithm whose units a key's object may grant ahead of use.

    Every member is about leases; the counting itself is :class:`~.base.Algorithm`'s.
    """

    lease_supply_grows: ClassVar[bool] = True
    """Whether what is grantable grows while a lease runs (a bucket refills, a sliding
    window's previous count slides out). Only where it does not (a fixed window) does a
    holder given a rationed share wait for its lease's end: elsewhere it asks again."""

    lease_plans: ClassVar[bool] = False
    """Whether the object may share the supply of a window out in a plan
    (:mod:`edge_limiter.core.ratelimit.leases.plan`): a sliding window's, which grows
    until the window's end. The algorithm then has ``plan_counts`` and ``plan_commit``."""

    lease_records_merge: ClassVar[bool] = False
    """Whether a holder's outstanding grants may be kept as one record (their units
    summed) whose unused units come back in any order: true for the windows, whose refund
    is exact for any unit taken in the current window (a lease never outlives it); not
    for the buckets, whose refund depends on when each grant was taken."""

    lease_late_returns: ClassVar[bool] = False
    """Whether units of a lease that ended unused are still worth giving back after the
    window that counted them has ended: a sliding window's next window weighs it."""

    @abstractmethod
    def grantable(self, state: S | None, now: int, ttl_ms: int) -> int:
        """The most units a lease of ``ttl_ms`` granted at ``now`` may take from ``state``.

        A grant of at most this many, made with :meth:`check`, keeps every use of the
        lease's units (at any instant before :meth:`lease_expiry`) within the limit.
        """

    def lease_growth(self, state: S | None, now: int) -> float:
        """How fast what is grantable grows at ``now``, in units per ms, while nothing is
        taken: the refill rate here (a bucket); a sliding window's slide-out rate."""
        del state, now
        return self.rate.quota / self.rate.window_ms if self.lease_supply_grows else 0.0

    def lease_expiry(self, now: int, ttl_ms: int) -> int:
        """When a lease granted at ``now`` for ``ttl_ms`` ends (its units are void from then)."""
        return now + ttl_ms

    def lease_reserve(self, ttl_ms: int) -> int:
        """Units a lease grant leaves untouched (rounded up): 0 unless use may lag a take."""
        del ttl_ms
        return 0

    def lease_refundable(self, granted: int, unused: int, granted_at: int, now: int) -> int:
        """How many of a lease's ``unused`` units :meth:`refund` may give back at ``now``.

        The caller has checked that the lease (``granted`` units taken at ``granted_at``)
        has not expired. By default all of them: the windows' refund is exact within the
        window the units were taken in, and a lease never outlives that window.
        """
        del granted, granted_at, now
        return unused

    def plan_counts(self, state: S | None, now: int) -> tuple[int, int]:
        """``(current, previous)``: the counts a plan shares the room of (``lease_plans``)."""
        raise NotImplementedError(f"{self.name} makes no lease plans")

    def plan_commit(self, state: S | None, now: int, units: int) -> S | None:
        """``state`` with a plan's ``units`` counted at once (``lease_plans``)."""
        raise NotImplementedError(f"{self.name} makes no lease plans")
