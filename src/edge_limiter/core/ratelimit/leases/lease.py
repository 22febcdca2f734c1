"""The units an isolate holds for one key: a lease, or a sliding window's planned
allowance (see the package's docstring)."""

from __future__ import annotations

from ..protocol import StoreResponse
from .plan import Allowance


class Lease:
    """The units an isolate holds for one key, and until when (the isolate's clock).

    ``expires_at`` is the isolate's send time plus the ttl, or the object's end if that
    comes first (a window's lease ends with the window): never later than the object's.
    """

    __slots__ = (
        "cut",
        "expires_at",
        "grant_at",
        "granted",
        "paced_at",
        "rationed",
        "reported",
        "returnable",
        "units",
        "until",
    )

    def __init__(
        self,
        granted: int,
        expires_at: int,
        reported: int = 0,
        *,
        rationed: bool = False,
        cut: bool = False,
    ) -> None:
        self.granted = granted
        self.rationed = rationed
        """The object granted a share of a short limit: once this lease is used up the
        isolate denies locally until :meth:`next_ask_at` instead of asking at once."""
        self.cut = cut
        """The lease ends at the object's end (a window's), before the ttl: a lease asked
        for before that end could only hold what is left of the same window, so the
        isolate asks for the next one when it needs it, not ahead of the end."""
        self.units = granted
        """Units left to admit locally."""
        self.expires_at = expires_at
        self.reported = reported
        """The object's remaining as it answered the grant (for the headers)."""
        self.until = 0
        """Windows: the object's ``returnable_until`` for these units (0: none)."""
        self.paced_at = 0
        """A paced rationed lease: when its holder may ask again (0: not paced)."""
        self.grant_at = 0
        """A rationed lease: when the object could grant a lease again (0: unknown)."""
        self.returnable = True
        """Its unused units may be given back: the object's record of this holder's lease
        is this one (see :meth:`Holding.request`)."""

    @classmethod
    def from_answer(cls, answer: StoreResponse, sent_at: int, ttl_ms: int) -> Lease | None:
        """The lease a granted answer holds (None for a denial); ``sent_at`` is when the
        request left the isolate, in its own clock. Whether it was rationed, the object
        says (``StoreResponse.rationed``)."""
        if answer.granted <= 0:
            return None
        if answer.allowance is not None:
            planned = PlannedLease(answer.allowance, answer.decision.remaining)
            planned.paced_at = answer.ask_at
            return planned
        expires_at = min(sent_at + ttl_ms, answer.expires_at)
        cut = answer.expires_at < sent_at + ttl_ms
        lease = cls(
            answer.granted,
            expires_at,
            answer.decision.remaining,
            rationed=answer.rationed,
            cut=cut,
        )
        if answer.ask_at:
            lease.paced_at = min(expires_at, answer.ask_at)
        lease.until = answer.returnable_until
        return lease

    def next_ask_at(self, lead_ms: int) -> int:
        """When an isolate whose leases are used up may ask again: at once, unless this
        lease was rationed (its units were its share); then shortly before it ends, or
        once it ended if it was cut (its window has nothing left for this holder)."""
        if not self.rationed:
            return 0
        if self.paced_at:
            return self.paced_at
        return self.expires_at if self.cut else self.expires_at - lead_ms

    def take(self, cost: int, now: int) -> bool:
        """Admit ``cost`` from the lease at ``now`` if it has the units and has not ended."""
        if now >= self.expires_at or cost > self.units:
            return False
        self.units -= cost
        return True

    def give_back(self, cost: int, now: int) -> None:
        """Return ``cost`` taken from this lease by a request that the origins failed (the
        route refunds those): it may be used again until the lease ends."""
        if now < self.expires_at:
            self.units += cost

    def unused(self, now: int) -> int:
        """Units still usable at ``now`` (0 once the lease ended)."""
        return self.units if now < self.expires_at else 0

    def live(self, now: int) -> bool:
        """Whether the lease may still admit anything (now or later)."""
        return self.unused(now) > 0

    def reserve(self, cost: int, now: int) -> bool:
        """Take ``cost`` for the requests the lease request was made for (they are
        admitted as of the grant); whether it had them."""
        del now
        self.units -= min(cost, self.units)
        return True

    def remaining(self, now: int) -> int:
        """``Remaining`` for the headers: the object's figure plus the units held."""
        return self.reported + self.unused(now)

    def should_refresh(self, now: int, rate_per_ms: float, lead_ms: int) -> bool:
        """Whether to ask for the next lease now: the lease ends within ``lead_ms`` or
        holds less than ``rate_per_ms`` uses in ``lead_ms`` (the call's round trip). A
        rationed lease is not refreshed (its holder has had its share until the end), and a
        cut one only when it runs low (see :attr:`cut`)."""
        if self.rationed:
            return False
        if not self.cut and now + lead_ms >= self.expires_at:
            return True
        return self.units < rate_per_ms * lead_ms

    @property
    def window_end(self) -> int:
        """Windows: the end of the window its units were granted in, on the object's
        clock (0: a bucket's lease, which has none)."""
        return self.until

    def release(self, now: int, keep: int = 0) -> int:
        """Give back all but ``keep`` units (kept for use while the next lease is asked
        for); the units given back, which the isolate then never uses. A lease that has
        ended gives back every unit it had left (none of them can be used any more)."""
        if now >= self.expires_at:
            given, self.units = self.units, 0
            return given
        given = max(0, self.units - keep)
        self.units -= given
        return given


class PlannedLease(Lease):
    """A holder's allowance in a sliding window's plan (:mod:`.lease_plan`): units that
    accrue over the window, on the isolate's clock, and are used as they accrue.

    It is rationed (the holder's share of a short window) and cut (it ends with the
    window): once the units accrued so far are used, the isolate denies locally until the
    next one accrues, and asks the object again only when the window ends. Nothing is
    given back (the object counted the whole allowance at once).
    """

    __slots__ = ("allowance", "short")

    def __init__(self, allowance: Allowance, reported: int = 0) -> None:
        super().__init__(allowance.final, allowance.end, reported, rationed=True, cut=True)
        self.allowance = allowance
        self.short = 1
        """The cost of the last request the allowance could not take yet."""
        self.returnable = False

    @property
    def window_end(self) -> int:
        return self.allowance.end

    @property
    def used(self) -> int:
        """Units of the allowance used (``units`` is what is left of its total)."""
        return self.allowance.final - self.units

    def take(self, cost: int, now: int) -> bool:
        if now >= self.expires_at or self.used + cost > self.allowance.at(now):
            self.short = max(1, cost)
            return False
        self.units -= cost
        return True

    def reserve(self, cost: int, now: int) -> bool:
        return self.take(cost, now)

    def give_back(self, cost: int, now: int) -> None:
        if now < self.expires_at:
            self.units += min(cost, self.used)

    def unused(self, now: int) -> int:
        if now >= self.expires_at:
            return 0
        return max(0, self.allowance.at(now) - self.used)

    def live(self, now: int) -> bool:
        # Kept until the window's end even when used up: its holder then waits for the
        # end (``next_ask_at``) instead of asking the object, which has nothing more.
        return now < self.expires_at

    def release(self, now: int, keep: int = 0) -> int:
        del now, keep
        return 0

    def should_refresh(self, now: int, rate_per_ms: float, lead_ms: int) -> bool:
        del now, rate_per_ms, lead_ms
        return False

    def next_ask_at(self, lead_ms: int) -> int:
        """When the next unit accrues (the holder denies locally until then), or the
        window's end once the allowance is used up; but no later than :attr:`paced_at`
        when the object said to ask again then (other holders' allowances were unclaimed,
        and may be withdrawn by then)."""
        del lead_ms
        accrues = self.allowance.reaches_at(self.used + self.short, 0)
        return min(accrues, self.paced_at) if self.paced_at else accrues
