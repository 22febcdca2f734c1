"""The object's grant side of leases: how many units a holder gets, and what comes back.

The key's object (:class:`~..keystore.KeyStore`) hands a lease request (op ``lease``) to
:class:`Grants`, which takes the holder's returned units back, then sizes the grant
(:func:`grant_size`, within what each limit's :meth:`~..algorithms.Leasable.grantable`
allows) and checks it like a request of that many units. A busy sliding window is shared
out in a plan instead (:mod:`.plan`).

Each holder's outstanding lease (units, grant time, end) is kept in memory only, to cap
what its next request may return: after a restart returns are ignored, which can only
under-admit. Holders are counted per limit set as those seen within about one ttl
(expired ones are dropped at most once per ttl).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ...errors import StateError
from ..algorithms.leasable import Leasable
from ..carry import used
from ..decision import Decision
from ..protocol import Compiled, StoreRequest, StoreResponse, shared_rows
from ..rule import check_all, refund_all
from .holders import Held, Holders
from .plan import Allowance, plan_window, plans

#: A paced rationed holder asks again once its share of the growth is about this many
#: units (so a call brings about this many admissions, and no more sit unclaimed).
PACE_UNITS = 10

#: A holder's reported rate counts for this many lease ttls after its last lease request
#: (an active holder asks at least once per ttl or window; one that went away stops
#: holding a share of the grants after this).
RATE_MEMORY_TTLS = 3

#: A plan's allowance not claimed within this many lease ttls of the plan (at most a
#: quarter of the window) is handed to
#: the next holder that asks: its holder has gone (an active holder asks with its first
#: request of the window), and its units were never handed out. Measured
#: on the local runtime: with the load moved from one isolate to another, the newcomer
#: got 23 of the 49 units its window had room for while the plan kept the rest for the
#: isolate that had gone quiet four seconds before.
CLAIM_TTLS = 1

#: A ttl longer than any window: ``lease_expiry(now, WINDOW_END)`` is the window's end.
WINDOW_END = 1 << 62


def pace_ms(growth_per_ms: float, share: float, units: int = PACE_UNITS) -> int:
    """How long (ms) until a holder with ``share`` (0-1] of the demand gets ``units`` of a
    supply that grows by ``growth_per_ms``: when a rationed holder of a growing supply
    asks again. At least 1 ms; a supply that does not grow: an hour (the lease's end
    comes first)."""
    rate = growth_per_ms * max(0.0, min(1.0, share))
    if rate <= 0:
        return 3_600_000
    return max(1, -int(-units // rate))


def grant_size(
    wanted: int,
    grantable: int,
    holders: int,
    min_units: int = 1,
    others_demand: int | None = None,
) -> int:
    """Units to grant (0: deny) when an isolate wants ``wanted`` and the limit has
    ``grantable`` for a lease, with ``holders`` isolates holding leases (this one included).

    With ``others_demand`` (the units the other holders are expected to ask for before
    this lease ends, from the rates they reported): the isolate gets what it wants while
    the limit has it for everyone, else its share ``wanted / (wanted + others_demand)`` of
    what is left, so every holder's share lasts about as long and the last units are not
    first-come. Without it (no rates reported), while the limit has plenty (room for this
    lease for every holder, or for twice it) the isolate gets what it wants, below that at
    most half of what is left. Never below ``min_units`` (the request waiting on the
    grant). A grant below ``wanted`` is *rationed*: the holder waits for its end.
    """
    if grantable < min_units or wanted < min_units:
        return 0
    if others_demand is not None:
        total = wanted + max(0, others_demand)
        if grantable >= total:
            return wanted
        return max(min_units, wanted * grantable // total)
    if grantable >= wanted * min(2, max(1, holders)):
        return wanted
    return max(min_units, min(wanted, grantable // 2))


class GrantStore(Protocol):
    """The key's object as the grant side uses it (:class:`~..keystore.KeyStore`)."""

    def held_states(
        self, compiled: Compiled, now: int, *, keep: bool
    ) -> tuple[Sequence[Any], Sequence[Any]]:
        """The stored states of ``compiled``'s rows, and the states to decide from (the
        key's use under other limits carried in)."""
        ...

    def admitted(self, now: int, units: int) -> None:
        """``units`` were taken from the key at ``now`` (for the carry)."""
        ...

    def store(
        self,
        compiled: Compiled,
        states: Sequence[Any],
        new_states: Sequence[Any],
        now: int,
        *,
        at_once: bool = False,
    ) -> None:
        """Keep ``new_states`` (where they are not ``states``) and write them."""
        ...


class Grants:
    """The object's grant side: every limit set's outstanding leases (memory only)."""

    __slots__ = ("by_limits",)

    def __init__(self) -> None:
        self.by_limits: dict[tuple[str, ...], Holders] = {}
        """Limit set (row ids) -> its outstanding leases."""

    def forget(self, ids: tuple[str, ...]) -> None:
        """A reset's fresh allowance: units of leases granted before it may still be used
        (an operator's reset gives the key more, never less), but not given back into
        it, which would admit them twice."""
        self.by_limits.pop(ids, None)

    def lease(
        self,
        store: GrantStore,
        request: StoreRequest,
        compiled: Compiled,
        algorithms: tuple[Leasable[Any], ...],
        now: int,
    ) -> StoreResponse:
        """Op ``lease``: take the holder's returns back, then grant what the planner sizes."""
        holders = self.by_limits.get(compiled.ids)
        if holders is None:
            holders = self.by_limits[compiled.ids] = Holders()
        return _Lease(store, request, compiled, algorithms, holders=holders, now=now).run()


class _Lease:
    """One lease request, step by step (each step a method, in the order :meth:`run`
    takes them)."""

    def __init__(
        self,
        store: GrantStore,
        request: StoreRequest,
        compiled: Compiled,
        algorithms: tuple[Leasable[Any], ...],
        *,
        holders: Holders,
        now: int,
    ) -> None:
        self.store = store
        self.request = request
        self.compiled = compiled
        self.algorithms = algorithms
        self.holders = holders
        self.now = now
        self.ttl = request.lease_ttl_ms
        self.windows = all(algorithm.lease_records_merge for algorithm in algorithms)
        self.planned = plans(
            algorithms[0].lease_plans,
            [algorithm.rate.window_ms for algorithm in algorithms],
            self.ttl,
        )
        self.held: Held | None = None
        """The holder's record of this window (the windows) or its last grant."""

    def _rate_memory(self) -> int:
        """How long (ms) a holder's reported rate counts after it said so."""
        memory = RATE_MEMORY_TTLS * self.ttl
        if self.planned:
            # A holder in a window's plan asks once a window: its rate lasts two.
            memory = max(memory, 2 * self.algorithms[0].rate.window_ms)
        return memory

    def run(self) -> StoreResponse:
        request, now, holders = self.request, self.now, self.holders
        memory = self._rate_memory()
        holders.prune(now, self.ttl, memory)
        if request.observed_rate:
            holders.rates[request.holder] = (request.observed_rate, now)
        # As for a check (a denied lease keeps nothing: the replay is done again).
        _, states = self.store.held_states(self.compiled, now, keep=False)
        current = self._take_back(states)
        if self.planned:
            planned = self._planned(states, current)
            if isinstance(planned, StoreResponse):
                return planned
            states = current = list(planned)
        return self._grant(states, current)

    # --- returns ------------------------------------------------------------------------

    def _record(self) -> tuple[Held | None, bool]:
        """The holder's record its returns go back into, and whether that is a record of
        a window that has ended (else the current one, :attr:`held`)."""
        request, now, holders = self.request, self.now, self.holders
        held = holders.by_holder.pop(request.holder, None)
        if held is not None and now >= held.kept_until:
            held = None
        if self.windows and held is not None and now >= held.returnable_until:
            # Its window has ended: nothing merges into it; its units may still come
            # back (see ``Held.late_until``), whatever this request gets.
            if held.units > 0:
                holders.ended[request.holder] = held
            held = None
        self.held = held
        if (
            self.windows
            and request.returned
            and (held is None or held.returnable_until != request.returned_until)
        ):
            # Units of a window that ended, whose record a grant of the next one replaced.
            record = holders.ended.get(request.holder)
            if record is not None and now >= record.kept_until:
                record = None
            return record, True
        return held, False

    def _take_back(self, states: Sequence[Any]) -> Sequence[Any]:
        """``states`` with the units the holder gave back refunded, as far as its record
        of them allows (``states`` itself when none are taken back)."""
        request, now, algorithms = self.request, self.now, self.algorithms
        record, ended = self._record()
        if (
            record is None
            or not request.returned
            or (self.windows and request.returned_until != record.returnable_until)
        ):
            return states
        back = min(request.returned, record.units)
        for algorithm in algorithms:
            back = algorithm.lease_refundable(record.units, back, record.granted_at, now)
        at = None
        if self.windows and now >= record.returnable_until:
            # Units of a window that has ended (a lease that ended unused, handed back
            # with the holder's first request since): taken from that window's count,
            # which a sliding window still weighs, when every limit counted them in the
            # window ending then.
            at = record.returnable_until - 1
            if any(
                record.granted_at // algorithm.rate.window_ms != at // algorithm.rate.window_ms
                for algorithm in algorithms
            ):
                back = 0
        if back <= 0:
            return states
        record = record._replace(units=record.units - back)
        if ended:
            self.holders.ended[request.holder] = record
        else:
            self.held = record
        return refund_all(algorithms, states, now, back, at)

    # --- a sliding window's plan --------------------------------------------------------

    def _planned(
        self, states: Sequence[Any], current: Sequence[Any]
    ) -> StoreResponse | Sequence[Any]:
        """A sliding window's plan (:mod:`.plan`): the answer for a holder in this
        window's plan, or the states to go on with (the plan, made at the window's first
        lease request, is counted in them and stored at once).

        Each holder gets its allowance once: its isolate counts its uses against it, and
        an isolate that lost track of them (its answer lost, its holding dropped) must not
        start over. A holder asking again in the window gets what the plan left, like a
        holder the plan does not know: an answer lost on the way costs that isolate the
        rest of the window, never an admission over the limit.
        """
        algorithm, holders, now = self.algorithms[0], self.holders, self.now
        window = algorithm.rate.window_ms
        index = now // window
        if holders.plan_index != index:
            holders.plan_index = index
            holders.plan = None
            holders.answered.clear()
            counted, previous = algorithm.plan_counts(current[0], now)
            rates = {holder: rate for holder, (rate, _) in holders.rates.items()}
            plan = plan_window(
                now, window, algorithm.rate.quota, current=counted, previous=previous, rates=rates
            )
            if plan is not None:
                holders.plan = plan
                holders.planned_at = now
                committed = [algorithm.plan_commit(current[0], now, plan.committed)]
                taken = used(algorithm, committed[0], now) - used(algorithm, current[0], now)
                if taken > 0:
                    self.store.admitted(now, taken)
                # Written at once even on a write-behind route: a restart that lost it
                # would plan the window's room again (write-behind's bound is a few ms of
                # admissions, not a window's).
                self.store.store(self.compiled, states, committed, now, at_once=True)
                states = current = committed
        plan = holders.plan
        holder = self.request.holder
        allowance = None if plan is None else plan.allowances.get(holder)
        if plan is None:
            return current
        if allowance is None or holder in holders.answered:
            allowance = self._unclaimed()
            if allowance is None:
                return current
        holders.answered.add(holder)
        if current[0] is not states[0]:
            self.store.store(self.compiled, states, current, now)
        decision = algorithm.peek(current[0], now, 0)
        if not decision.allowed:  # the plan's count runs ahead of the estimate: none left
            decision = decision._replace(allowed=True, remaining=0, retry_after=0, reason=None)
        # While other allowances are unclaimed, the holder asks again once they may be
        # handed on (when its own accrued units run out): see :meth:`_unclaimed`.
        unclaimed = any(other not in holders.answered for other in plan.allowances)
        claim_by = max(now + 1, holders.planned_at + self._claim_ms())
        return StoreResponse(
            (decision,),
            granted=allowance.final,
            expires_at=allowance.end,
            rationed=True,
            ask_at=claim_by if unclaimed and claim_by < allowance.end else 0,
            allowance=allowance,
        )

    def _claim_ms(self) -> int:
        """How long after the plan its holders have to claim their allowances: a ttl, at
        most a quarter of the window (a one-second window's default ttl is the window)."""
        return min(CLAIM_TTLS * self.ttl, self.algorithms[0].rate.window_ms // 4)

    def _unclaimed(self) -> Allowance | None:
        """The largest allowance of this window's plan its holder did not claim within
        :data:`CLAIM_TTLS` ttls of the plan (None: none), handed to this holder instead,
        which asked again or was not in the plan: never handed out, those units were never
        used, and an allowance may be used by any one holder (the plan keeps every
        allowance's sum within the window's supply at every instant). Its holder has gone
        (an active holder asks with its first request of the window): its rate is
        forgotten (the next window's plan leaves it out) and, if it comes back, it gets
        what the plan left, as a holder the plan does not know."""
        holders, now = self.holders, self.now
        plan = holders.plan
        if plan is None or now < holders.planned_at + self._claim_ms():
            return None
        gone = [holder for holder in plan.allowances if holder not in holders.answered]
        if not gone:
            return None
        for holder in gone:
            holders.rates.pop(holder, None)
        largest = max(gone, key=lambda holder: plan.allowances[holder].final)
        holders.answered.add(largest)
        return plan.allowances[largest]

    # --- the grant ----------------------------------------------------------------------

    def _others_demand(self, expires_at: int) -> int | None:
        """What the other holders will ask for before a lease ending at ``expires_at``
        ends: each one's rate over the part of ``[now, expires_at)`` its own live lease
        does not cover (None: this holder reported no rate)."""
        if not self.request.observed_rate:
            return None
        demand = 0
        by_holder = self.holders.by_holder
        for holder, (rate, _) in self.holders.rates.items():
            if holder == self.request.holder:
                continue
            other = by_holder.get(holder)
            covered_to = self.now if other is None else max(self.now, other.expires_at)
            if covered_to < expires_at:
                demand += rate * (expires_at - covered_to)
        return -(-demand // 1000)

    def _grant(self, states: Sequence[Any], current: Sequence[Any]) -> StoreResponse:
        """Size the grant and make it, or deny."""
        request, now, ttl, algorithms = self.request, self.now, self.ttl, self.algorithms
        min_units = request.min_units
        expires_at = min(algorithm.lease_expiry(now, ttl) for algorithm in algorithms)
        # A lease cut short (a window ends first) is worth that much less of the rate.
        wanted = max(min_units, -(-request.cost * (expires_at - now) // ttl))
        grantable = min(
            algorithm.grantable(state, now, ttl)
            for algorithm, state in zip(algorithms, current, strict=True)
        )
        others = self._others_demand(expires_at)
        live = sum(1 for other in self.holders.by_holder.values() if other.expires_at > now)
        until_end = min(algorithm.lease_expiry(now, WINDOW_END) for algorithm in algorithms)
        plenty = False
        if others is not None and self.windows and expires_at == until_end:
            # A window's lease, cut by its end: if what grows until then covers every
            # holder's demand, nobody is short, and the holder takes what is there now
            # and asks again when it runs low (rationing it would deny requests the
            # window has room for).
            growth = min(
                algorithm.lease_growth(state, now)
                for algorithm, state in zip(algorithms, current, strict=True)
            )
            plenty = wanted + others <= grantable + growth * (expires_at - now)
        granted = grant_size(wanted, grantable, live + 1, min_units, others)
        if granted < min_units:
            return self._denied(states, current)
        result = check_all(algorithms, current, now, granted)
        if not result.decision.allowed:
            raise StateError(f"a grant of {granted} within {grantable} was denied")
        self.store.admitted(now, granted)
        self._keep_grant(granted, expires_at, until_end)
        # The reserve is not lent to anyone: none of it is "remaining" (the isolate's
        # headers add the units it holds to this figure).
        lent = tuple(
            d._replace(remaining=max(0, d.remaining - algorithm.lease_reserve(ttl)))
            for algorithm, d in zip(algorithms, result.decisions, strict=True)
        )
        answer = StoreResponse(
            lent,
            granted=granted,
            expires_at=expires_at,
            returnable_until=until_end if self.windows else 0,
        )
        if granted < wanted and not plenty:
            answer = self._rationed(answer, result.states, until_end, live + 1)
        self.store.store(self.compiled, states, result.states, now)
        return answer

    def _keep_grant(self, granted: int, expires_at: int, until_end: int) -> None:
        """Record the grant as the holder's outstanding lease."""
        request, now, algorithms = self.request, self.now, self.algorithms
        by_holder, held = self.holders.by_holder, self.held
        if not self.windows:
            # Kept past its end: units of a lease that ended unused come back with
            # the holder's next request, refunded as far as the refill since the
            # grant has not overtaken them (``lease_refundable``), so until then.
            overtaken = min(
                now + -(-granted * algorithm.rate.window_ms // algorithm.rate.quota)
                for algorithm in algorithms
            )
            by_holder[request.holder] = Held(
                granted, now, expires_at, late_until=max(expires_at, overtaken)
            )
            return
        # The windows keep one record per holder of every grant of the window
        # (Leasable.lease_records_merge), returnable until the window's end (the
        # shortest of the limits'); the buckets only the last grant. A record of an
        # earlier window is not merged into (its units are spent).
        until = until_end
        # Units that come back after that still count while any limit's count of them
        # matters (see ``Held.late_until``): until the end of a longer limit's window (a
        # route's hour beside its minute), and a sliding window's next window, which
        # weighs this one.
        late = max(
            (now // algorithm.rate.window_ms + 1) * algorithm.rate.window_ms
            + (algorithm.rate.window_ms if algorithm.lease_late_returns else 0)
            for algorithm in algorithms
        )
        if held is not None and held.returnable_until == until:
            by_holder[request.holder] = Held(
                held.units + granted,
                held.granted_at,
                max(expires_at, held.expires_at),
                until,
                late,
            )
        else:
            by_holder[request.holder] = Held(granted, now, expires_at, until, late)

    def _rationed(
        self,
        answer: StoreResponse,
        states: Sequence[Any],
        until_end: int,
        holding: int,
    ) -> StoreResponse:
        """``answer`` as a rationed grant (the holder's share of a short limit): when
        its holder may ask again, and when a lease could be granted again.

        A rationed holder waits for its lease's end when nothing grows grantable
        meanwhile (a fixed window), or when the lease ends by its ttl (a bucket's, or a
        long window's), not by its window's end. Else (a sliding window's lease cut by
        its window's end, while the previous window slides out) it is paced: it asks
        again after part of a ttl, so the holders share the growth a few times a window,
        not one unit per call. ``holding``: how many holders hold a live lease, this one
        included.
        """
        now, ttl, algorithms = self.now, self.ttl, self.algorithms
        expires_at = answer.expires_at
        ask_at = 0
        waits = expires_at != until_end or not any(
            algorithm.lease_supply_grows for algorithm in algorithms
        )
        if not waits:
            # The growth that matters is that of the limits short of units: a route's
            # hour with plenty left (and nothing sliding out of it) must not hold back
            # the asks its second's growth allows.
            pairs = list(zip(algorithms, states, strict=True))
            short = [
                (algorithm, state)
                for algorithm, state in pairs
                if algorithm.grantable(state, now, ttl) < PACE_UNITS
            ]
            growth, binding = min(
                (
                    (algorithm.lease_growth(state, now), algorithm)
                    for algorithm, state in short or pairs
                ),
                key=lambda pair: pair[0],
            )
            rates = self.holders.rates
            total = sum(rate for rate, _ in rates.values())
            mine = self.request.observed_rate
            share = mine / total if mine and total else 1 / holding
            # A small limit grows by few units a window: ask for a tenth of it.
            units = max(1, min(PACE_UNITS, binding.rate.quota // 10))
            ask_at = min(expires_at, now + pace_ms(growth, share, units))
        # When a lease of min_units could be granted again, the reserve kept: the
        # holder's denials until then say that, not when it may ask.
        min_units = self.request.min_units
        wait = max(
            algorithm.peek(state, now, min_units + algorithm.lease_reserve(ttl)).retry_after
            for algorithm, state in zip(algorithms, states, strict=True)
        )
        return answer._replace(rationed=True, ask_at=ask_at, grant_wait_ms=max(0, wait))

    def _denied(self, states: Sequence[Any], current: Sequence[Any]) -> StoreResponse:
        """No grant: each limit answers for the least it could grant (with its reserve),
        so ``retry_after`` says when a lease of ``min_units`` could be granted."""
        request, now, ttl = self.request, self.now, self.ttl
        held = self.held
        if self.windows and held is not None and held.units > 0:
            # What it still holds may come back later.
            self.holders.by_holder[request.holder] = held
        # A window's units lent out come back with their holders' next requests (those
        # that end unused): this holder asks again once the first other lease has ended,
        # not at the window's end. (Told to wait for the window's end, an isolate denied
        # its clients for the rest of it while another gave back 36 of 200 units, on the
        # local runtime.)
        lent_until = 0
        if self.windows:
            lent_until = min(
                (
                    other.expires_at
                    for holder, other in self.holders.by_holder.items()
                    if holder != request.holder and other.expires_at > now
                ),
                default=0,
            )
        decisions: list[Decision] = []
        for algorithm, state in zip(self.algorithms, current, strict=True):
            reserve = algorithm.lease_reserve(ttl)
            decision = algorithm.peek(state, now, request.min_units + reserve)
            if decision.allowed:
                decision = algorithm.peek(state, now, 0)
            else:
                # The reserve is not this holder's to use: none of it is "remaining".
                decision = decision._replace(remaining=max(0, decision.remaining - reserve))
                if lent_until and now + decision.retry_after > lent_until:
                    decision = decision._replace(retry_after=max(1, lent_until - now))
            decisions.append(decision)
        if request.observed_rate:
            # A denied holder's demand counts until it may ask again (and a few ttls more,
            # as any holder's): the first holder to ask once units come back (a new window)
            # must not be granted every unit as if it were alone.
            # Until one ttl past its retry: a holder that does not come back by then has
            # gone (its demand must not ration the others for long).
            retry = max((d.retry_after for d in decisions if not d.allowed), default=0)
            memory = self._rate_memory()
            seen = max(now, now + retry + ttl - memory)
            self.holders.rates[request.holder] = (request.observed_rate, seen)
        rows = shared_rows(self.algorithms, current, now)
        self.store.store(self.compiled, states, current, now)
        return StoreResponse(tuple(decisions), rows)
