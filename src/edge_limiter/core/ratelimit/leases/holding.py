"""The isolate's side of leases: its rate, what it asks for, and its leases on one key."""

from __future__ import annotations

from typing import NamedTuple

from ..decision import Decision, Reason
from ..protocol import StoreResponse
from .lease import Lease, PlannedLease

#: The rate meter's period: the isolate's rate is measured over about this much time.
DEFAULT_METER_PERIOD_MS = 1_000

#: How far ahead of running out an isolate asks for its next lease at the least (ms):
#: about one round trip to the key's object, so requests keep being admitted meanwhile.
DEFAULT_LEAD_MS = 10


class RateMeter:
    """An isolate's own rate for one key: a count over the last ``period_ms``.

    Two aligned counters, the previous period's weighted by how much of it the rolling
    period still covers (as :mod:`.algorithms.sliding_window` estimates). Mutable: it is
    the isolate's local bookkeeping, never stored.
    """

    __slots__ = ("current", "index", "period_ms", "previous", "started")

    def __init__(self, period_ms: int = DEFAULT_METER_PERIOD_MS) -> None:
        if period_ms < 1:
            raise ValueError(f"a meter period must be at least 1 ms, got {period_ms}")
        self.period_ms = period_ms
        self.index = 0
        self.current = 0
        self.previous = 0
        self.started = -1
        """When it first observed anything (-1: never)."""

    def _roll(self, now: int) -> None:
        index = now // self.period_ms
        if index == self.index:
            return
        self.previous = self.current if index == self.index + 1 else 0
        self.current = 0
        self.index = index

    def observe(self, now: int, units: int = 1) -> None:
        """Count ``units`` asked for at ``now`` (admitted or not: demand, not admissions)."""
        if now // self.period_ms > self.index:
            self._roll(now)
        if self.started < 0:
            self.started = now
        self.current += units

    def per_ms(self, now: int) -> float:
        """Units per millisecond over the last period."""
        if now // self.period_ms > self.index:
            self._roll(now)
        period = self.period_ms
        elapsed = now - self.index * period
        return (self.previous * (period - elapsed) / period + self.current) / period

    def estimate_per_ms(self, now: int) -> float:
        """:meth:`per_ms`, except while the meter is younger than a period: then what it
        saw after its first observation over the time it has been looking (once that is
        a tenth of a period), and at least ``period / seen`` (a few requests close
        together are not a high rate). The rate an isolate reports to the object, whose
        plans share a window out by such rates: over a whole period, a new isolate's rate
        reads low for its first second. (Lease sizes keep the whole period's reading,
        which never overstates what a new isolate will use.)"""
        if now // self.period_ms > self.index:
            self._roll(now)
        period = self.period_ms
        age = now - self.started
        if self.started < 0 or age >= period or age < period // 10:
            return self.per_ms(now)
        seen = self.previous + self.current
        return max(1, seen - 1) / max(age, period / max(1, seen))


def want(rate_per_ms: float, ttl_ms: int, min_units: int = 1, max_units: int = 1_000_000) -> int:
    """The units to ask for: what ``rate_per_ms`` uses in ``ttl_ms``, within the bounds."""
    wanted = -int(-rate_per_ms * ttl_ms // 1)  # ceil, without importing math for one call
    return max(min_units, min(max_units, wanted))


def held_back(
    decisions: tuple[Decision, ...], retry_after_ms: int, elapsed_ms: int
) -> tuple[Decision, ...]:
    """The decisions reported for a request an isolate denies without asking, until
    ``retry_after_ms`` from now: its share of a short limit is used up (a rationed lease)
    or the object denied its last lease request ``elapsed_ms`` ago. The limits with the
    fewest units left are the ones reported as denying."""
    if not decisions:
        return decisions
    least = min(d.remaining for d in decisions)
    retry = max(1, retry_after_ms)
    return tuple(
        Decision(
            False,
            d.limit,
            0,
            max(retry, d.reset_after - elapsed_ms),
            retry,
            Reason.LIMITED,
            d.policy,
        )
        if d.remaining == least
        else Decision(
            True, d.limit, d.remaining, max(0, d.reset_after - elapsed_ms), 0, None, d.policy
        )
        for d in decisions
    )


def leased_decisions(
    decisions: tuple[Decision, ...], units: int, elapsed_ms: int
) -> tuple[Decision, ...]:
    """The decisions reported for a request admitted from a lease: the object's decisions
    of the grant ``elapsed_ms`` ago, each limit's ``remaining`` plus the ``units`` the
    isolate still holds (see the module docstring: an approximation, off by at most the
    units other isolates hold)."""
    return tuple(
        Decision(
            True,
            d.limit,
            min(d.limit, d.remaining + units),
            max(0, d.reset_after - elapsed_ms),
            0,
            None,
            d.policy,
        )
        for d in decisions
    )


class Ask(NamedTuple):
    """One lease request a :class:`Holding` made: what to send, and what to match the
    answer with."""

    wanted: int
    returned: int
    observed_rate: int
    min_units: int
    sent_at: int
    number: int
    """The holding's count of requests made, this one included."""
    alone: bool
    """No other request of the holding was in flight when this one was sent."""
    sized: bool = True
    """Sized by the isolate's rate (else only for the requests waiting on it)."""
    returned_until: int = 0
    """Windows: the object's record the ``returned`` units belong to."""


class Holding:
    """One isolate's leases on one key (one limit set): what it may admit locally, and
    what it asks the key's object for next.

    Pure bookkeeping with ``now`` passed in. Whoever drives it (the gateway's rate-limit
    stage, the simulation) asks with :meth:`request` and hands the answer to
    :meth:`answered` (or reports the failure with :meth:`failed`).

    Several requests may be in flight at once (the platform lets no request wait on
    another request's call, so each request that finds no units asks for itself). At
    most one of them is *sized* by the isolate's rate (a refresh, or the first request
    that found no units); the others ask only for what their own request needs, so
    leases are not taken twice over, and a refresh is never held back by them.

    Giving units back: for the windows (``merge``), the object keeps every unexpired
    grant of a holder as one record and any of its unused units may come back, in any
    order. For the buckets the object keeps the grant it decided last, and a refund's
    safety depends on when the units were taken, so units are given back only from a
    lease whose request was alone from its sending to its answer (then the grant the
    object decided last is that one), and never after a request failed.
    """

    __slots__ = (
        "answers",
        "capacity",
        "decided_at",
        "decisions",
        "denied_until",
        "epoch",
        "fresh",
        "in_flight",
        "lead_ms",
        "leases",
        "merge",
        "meter",
        "returns",
        "rtt_ms",
        "sent",
        "sizing",
        "stale",
        "ttl_ms",
        "waiting",
        "young_rates",
    )

    def __init__(
        self,
        ttl_ms: int,
        capacity: int,
        lead_ms: int = DEFAULT_LEAD_MS,
        period_ms: int = DEFAULT_METER_PERIOD_MS,
        *,
        merge: bool = False,
        young_rates: bool = False,
    ) -> None:
        if ttl_ms < 1 or capacity < 1:
            raise ValueError("a holding needs ttl_ms >= 1 and capacity >= 1")
        self.merge = merge
        """The object merges this holder's grants (the windows): see the class docstring."""
        self.young_rates = young_rates
        """Report a young meter's rate over the time it has looked
        (:meth:`RateMeter.estimate_per_ms`): for the algorithms whose supply grows, which
        the object shares out by the reported rates (paced grants, plans). Elsewhere the
        period's reading, which asks for less while an isolate is new (measured: fewer
        calls for a fixed window's burst)."""
        self.ttl_ms = ttl_ms
        self.capacity = capacity
        """The most units one lease may ask for (the limit set's smallest capacity)."""
        self.lead_ms = lead_ms
        """The least time ahead of a lease's end to ask for the next one."""
        self.rtt_ms = lead_ms / 2
        """The round trip of a lease request, as measured (a moving average)."""
        self.meter = RateMeter(period_ms)
        self.leases: list[Lease] = []
        """The leases with units (the newest last): an older one is used up first."""
        self.denied_until = 0
        """Until then the object's last answer was a denial: deny without asking."""
        self.epoch = 0
        """The driver's mark of when that denial was remembered (see :meth:`changed`)."""
        self.fresh = False
        """The key changed at the object since the last answer (see :meth:`changed`): ask
        it before denying, whatever the last answer said."""
        self.decisions: tuple[Decision, ...] = ()
        """The object's decisions in its last answer (for the headers)."""
        self.decided_at = 0
        self.in_flight = 0
        """Lease requests sent and not yet answered."""
        self.answers = 0
        """Lease requests answered or failed so far (a request waiting on the sized one
        in flight looks for a change)."""
        self.sizing = False
        """A sized request is in flight: a request that finds no units waits for its
        lease, asked for at the isolate's rate, rather than ask for itself (a call per
        such request cost about one call per admitted request once a limit bound, with
        many requests in flight)."""
        self.waiting = 0
        """The units the requests on unsized lease requests in flight need: kept here by a
        sized request's give-back, since each of those requests uses this isolate's units
        if its own request is denied (the units it asked for were granted beside it)."""
        self.stale: tuple[int, int] = (0, 0)
        """Windows: units of leases that ended unused, and the object's record they belong
        to (``Lease.until``): given back with the next sized request, while that record
        lasts (its window), since the window counted them and nobody used them."""
        self.sent = 0
        self.returns = True
        """False once a request failed: the object may still decide it, later than any
        request sent after it, so its record of this holder is never known again."""

    def take(self, cost: int, now: int) -> Lease | None:
        """Admit ``cost`` from a lease at ``now``: the lease it came from, or None."""
        for lease in self.leases:
            if lease.take(cost, now):
                return lease
        return None

    def give_back(self, lease: Lease, cost: int, now: int) -> bool:
        """Return ``cost`` taken from ``lease`` by a request the origins failed (the route
        refunds those); whether the units may be used here again (not once the lease has
        ended: then the object must take them back). A lease used up while that request
        was out may have been dropped (a refresh asked for the next one meanwhile: the
        platform starts deferred work at once): it comes back, first in line and never
        given back to the object, whose record of this holder is the newer lease's. A
        denial remembered since no longer holds: the units are there."""
        if now >= lease.expires_at:
            return False
        lease.give_back(cost, now)
        if lease not in self.leases and lease.live(now):
            lease.returnable = False
            self.leases.insert(0, lease)
        self.forget_denial()
        return True

    def ask_at(self, now: int) -> int:
        """When this holding may ask the object again (0: now): after a denial, its
        ``retry_after``; after a rationed lease is used up, shortly before its end."""
        if self.fresh:
            return 0
        if now < self.denied_until:
            return self.denied_until
        if self.leases:
            newest, lead = self.leases[-1], self.lead()
            if isinstance(newest, PlannedLease):
                # Allowances handed on from a holder that went (see ``grant._unclaimed``)
                # sit beside this isolate's own: the first to accrue a unit decides.
                at = min(
                    lease.next_ask_at(lead)
                    for lease in self.leases
                    if isinstance(lease, PlannedLease)
                )
            else:
                at = newest.next_ask_at(lead)
            if now < at:
                return at
        return 0

    def changed(self) -> None:
        """The key may have changed at its object (an admin reset, a refund, an override):
        the next request asks it, even if the last answer was a denial or a rationed
        lease's share is used up (a reset's fresh allowance would otherwise wait for
        the lease's end)."""
        self.forget_denial()
        self.fresh = True

    def forget_denial(self) -> None:
        """Ask the object on the next request even if its last answer was a denial (a
        reset, a refund or an override may have changed the key since)."""
        self.denied_until = 0

    def wants_refresh(self, now: int) -> bool:
        """Whether to ask for the next lease now, ahead of the current one running out
        (never while a sized request is in flight)."""
        if not self.leases or self.sizing:
            return False
        newest = self.leases[-1]
        rate = self.meter.per_ms(now)
        lead = self.lead()
        if not newest.should_refresh(now, rate, lead):
            return False
        if len(self.leases) == 1:
            return True
        # The newest lease may be a small grant to a request that asked beside a sized
        # one: judge by every unit held past the lead, not by the newest lease's alone.
        held = sum(
            lease.unused(now) for lease in self.leases if lease.cut or now + lead < lease.expires_at
        )
        return held < rate * lead

    def lead(self) -> int:
        """How far ahead of a lease's end to ask for the next one: twice the measured
        round trip, at least ``lead_ms``."""
        return max(self.lead_ms, int(2 * self.rtt_ms) + 1)

    def request(self, now: int, min_units: int = 1) -> Ask:
        """A lease request at ``now``, for at least ``min_units`` (what the requests
        waiting on it need).

        Unless a sized request is in flight, it is sized: it asks for what the isolate's
        rate uses in a ttl and gives back the units held beyond what the round trip will
        use (never used here again), when the object can take them back (see the class
        docstring). Otherwise it asks for ``min_units`` only and gives nothing back.
        """
        alone = self.in_flight == 0
        self.in_flight += 1
        self.sent += 1
        rate = self.meter.per_ms(now)
        reported = self.meter.estimate_per_ms(now) if self.young_rates else rate
        observed = max(1, round(reported * 1000))
        if self.sizing:
            self.waiting += min_units
            return Ask(min_units, 0, observed, min_units, now, self.sent, alone, sized=False)
        self.sizing = True
        wanted = max(min_units, want(rate, self.ttl_ms, min_units, self.capacity))
        if self.merge:
            # Kept for the requests of the round trip (what the rate uses in one) and for
            # the requests waiting on their own lease requests.
            keep = int(rate * self.rtt_ms) + 1 + self.waiting
            returned, until = self._release_beyond(now, keep)
            return Ask(wanted, returned, observed, min_units, now, self.sent, alone, True, until)
        returned = 0
        if alone and self.returns and self.leases and self.leases[-1].returnable:
            # A bucket's refund loses what refill has overtaken since the grant: keep
            # enough for twice the lead rather than give back units worth keeping.
            keep = int(rate * self.lead() * 2) + 1
            returned = self.leases[-1].release(now, keep)
        self._prune(now)
        return Ask(wanted, returned, observed, min_units, now, self.sent, alone)

    def _prune(self, now: int) -> None:
        """Drop the leases that ended; a window's unused units become :attr:`stale`."""
        kept = []
        stale, until = self.stale
        for lease in self.leases:
            if lease.live(now):
                kept.append(lease)
            elif self.merge and lease.units > 0 and lease.until:
                if lease.until != until:  # a later window's record: the old one is spent
                    stale, until = 0, lease.until
                stale += lease.units
                lease.units = 0
        self.leases = kept
        self.stale = (stale, until) if stale else (0, 0)

    def _release_beyond(self, now: int, keep: int) -> tuple[int, int]:
        """Windows: give back the units held beyond ``keep`` and the stale ones, all of
        the newest record's (the newest leases' units first: the older ones are used
        first); the units given back and their record."""
        self._prune(now)
        if not self.leases:
            stale, until = self.stale
            self.stale = (0, 0)
            return stale, until
        until = self.leases[-1].until
        stale, stale_until = self.stale
        given = stale if stale_until == until else 0
        self.stale = (0, 0)
        surplus = sum(lease.unused(now) for lease in self.leases if lease.until == until) - keep
        taken = 0
        for lease in reversed(self.leases):
            if taken >= surplus:
                break
            if lease.until == until:
                taken += lease.release(now, max(0, lease.unused(now) - (surplus - taken)))
        return given + taken, until

    def failed(self, ask: Ask) -> None:
        """The request ``ask`` got no answer (the units it gave back are lost: the object
        may or may not have taken them back, and may yet grant it)."""
        self.answers += 1
        self.in_flight = max(0, self.in_flight - 1)
        if ask.sized:
            self.sizing = False
        else:
            self.waiting = max(0, self.waiting - ask.min_units)
        self.returns = False

    def answered(
        self,
        answer: StoreResponse,
        ask: Ask,
        now: int,
        *,
        reserved: int = 0,
        deny_for_ms: int | None = None,
    ) -> Lease | None:
        """Take the object's answer to ``ask``: the new lease (``reserved`` of its units
        already used by the requests the call was made for), or None for a denial,
        remembered until its ``retry_after`` (at most ``deny_for_ms``)."""
        self.answers += 1
        self.in_flight = max(0, self.in_flight - 1)
        if ask.sized:
            self.sizing = False
        else:
            self.waiting = max(0, self.waiting - ask.min_units)
        self.rtt_ms += (max(0, now - ask.sent_at) - self.rtt_ms) / 4
        self.fresh = False
        self.decisions = answer.decisions
        self.decided_at = now
        for held in self.leases:
            # A planned allowance's "ask again by" is answered by this answer, whatever it
            # says: from now on its holder waits for its units to accrue.
            if isinstance(held, PlannedLease) and 0 < held.paced_at <= now:
                held.paced_at = 0
        lease = Lease.from_answer(answer, ask.sent_at, self.ttl_ms)
        if not (ask.alone and self.sent == ask.number):
            # Another request overlapped this one: which grant the object recorded last
            # is unknown, so no lease held now may give units back.
            for old in self.leases:
                old.returnable = False
            if lease is not None:
                lease.returnable = False
        if lease is None:
            if any(lease.unused(now) >= ask.min_units for lease in self.leases):
                # Denied because the units are lent out, this isolate's among them: its
                # requests use those first, and once they are gone it asks again (giving
                # back what ended unused) rather than deny on this answer. (Only while one
                # lease can admit such a request: else every request would ask.)
                return None
            retry = answer.decision.retry_after
            if deny_for_ms is not None:
                retry = min(retry, deny_for_ms)
            self.denied_until = now + retry
            return None
        # A planned allowance may have nothing accrued yet: then it is kept for later,
        # and the requests it was asked for are denied.
        if answer.grant_wait_ms:
            lease.grant_at = now + answer.grant_wait_ms
        # A grant answers after any denial remembered before it (a burst's requests ask
        # at once, and a denial may come first): the key is not denied now.
        self.denied_until = 0
        taken = lease.reserve(reserved, now)
        self._prune(now)
        self.leases.append(lease)
        return lease if taken else None

    def admits_at(self, now: int) -> int:
        """When a request denied here now could be admitted (0: when it may ask): a
        rationed lease used up waits for its end, and for the object to have a lease to
        grant again (its reserve kept), whichever is later."""
        ask_at = self.ask_at(now)
        if ask_at and self.leases and now >= self.denied_until:
            return max(ask_at, self.leases[-1].grant_at)
        return ask_at
