"""A route's token leases in this isolate: the leases held per key, and the calls that
ask the key's object for the next one (:mod:`edge_limiter.core.ratelimit.leases`).

The rate-limit stage admits from these; this module keeps the bookkeeping and the calls,
so the stage keeps only the decisions.
"""

from __future__ import annotations

from collections import OrderedDict

from ..core.config import Route
from ..core.ratelimit.algorithms import Leasable
from ..core.ratelimit.check import Check
from ..core.ratelimit.leases.holding import Holding
from ..core.ratelimit.leases.lease import Lease
from ..core.ratelimit.protocol import StoreRequest
from .operations import Operating
from .ports import Services

#: A request waiting for a lease request in flight looks for its units after this long,
#: then twice as long each time, up to :data:`LEASE_POLL_MAX_S` (a lease call's round
#: trip is a few ms).
LEASE_POLL_FIRST_S = 0.001
LEASE_POLL_MAX_S = 0.008
#: The most lease requests in a row a request waits for before it asks for itself.
LEASE_WAIT_ROUNDS = 4

#: The most keys one route keeps lease bookkeeping for in an isolate (least recent first
#: out: a dropped key's units are never used, which can only under-admit).
MAX_HOLDINGS = 10_000


class Leases:
    """The leases one route's keys hold in this isolate, by object name and limits."""

    def __init__(
        self,
        route: Route,
        services: Services,
        operating: Operating,
        storing: tuple[int, int],
        timeout_ms: int,
    ) -> None:
        self.route = route
        self.services = services
        self.operating = operating
        self.storing = storing
        self.timeout_ms = timeout_ms
        self._held: OrderedDict[tuple[str, str], Holding] = OrderedDict()
        self._held_payload: dict[str, str] = {}
        """Object name -> the limits (payload) its last leased request was counted under."""

    def held_units(self, name: str, payload: str, now: int) -> int:
        """The units this isolate's leases on the object ``name`` under the limits
        ``payload`` still hold."""
        holding = self._held.get((name, payload))
        if holding is None:
            return 0
        return sum(lease.unused(now) for lease in holding.leases if lease.live(now))

    def holding(self, name: str, check: Check) -> Holding:
        slot = (name, check.payload)
        holding = self._held.get(slot)
        last = self._held_payload.get(name)
        if last != check.payload:
            if last is not None:
                # The key is counted under other limits now (an override set, changed or
                # deleted): units leased under the old ones are forfeit. The object
                # carried them into the new limits; spent here too they would count twice.
                self._held.pop((name, last), None)
            self._held_payload[name] = check.payload
            if len(self._held_payload) > MAX_HOLDINGS:
                self._held_payload.pop(next(iter(self._held_payload)))
        if holding is None:
            capacity = min(limit.capacity for limit in check.limits)
            leased = [a for a in check.algorithms if isinstance(a, Leasable)]
            merge = all(algorithm.lease_records_merge for algorithm in leased)
            grows = any(algorithm.lease_supply_grows for algorithm in leased)
            holding = self._held[slot] = Holding(
                check.lease_ttl_ms, capacity, merge=merge, young_rates=grows
            )
            if len(self._held) > MAX_HOLDINGS:
                self._held.popitem(last=False)
        else:
            self._held.move_to_end(slot)
        return holding

    async def wait_for_lease(self, holding: Holding, cost: int, started: int) -> Lease | bool:
        """Wait for the sized lease request in flight: the lease this request is admitted
        from; True when the answer says to deny without asking (a denial, a rationed
        share used up); False when this request must ask for itself (the answer's units
        went to the requests before it, or no answer came within the store's timeout)."""
        clock, sleep = self.services.clock, self.services.sleep
        answers = holding.answers
        delay_s = LEASE_POLL_FIRST_S
        while holding.answers == answers:
            await sleep(delay_s)
            delay_s = min(2 * delay_s, LEASE_POLL_MAX_S)
            now = clock.now_ms()
            lease = holding.take(cost, now)
            if lease is not None:
                return lease
            if now - started >= self.timeout_ms:
                return False
        now = clock.now_ms()
        lease = holding.take(cost, now)
        if lease is not None:
            return lease
        return bool(holding.ask_at(now))

    async def ask(
        self, holding: Holding, name: str, check: Check, now: int, reserved: int
    ) -> Lease | None:
        """One lease call: the new lease, of which ``reserved`` units are already taken by
        the request that made the call, or None when the object denied it. Raises when
        the object cannot be reached."""
        ask = holding.request(now, max(1, reserved))
        policy = self.route.limits
        request = StoreRequest(
            "lease",
            policy.algorithm,
            check.limits,
            ask.wanted,
            *self.storing,
            lease_ttl_ms=check.lease_ttl_ms,
            holder=self.operating.holder,
            returned=ask.returned,
            returned_until=ask.returned_until,
            min_units=ask.min_units,
            observed_rate=ask.observed_rate,
        )
        try:
            response = await self.services.store.call(name, request, self.timeout_ms)
        except BaseException:
            holding.failed(ask)
            raise
        deny_for = self.operating.deny.max_ttl_ms if self.operating.deny_enabled else 0
        return holding.answered(
            response,
            ask,
            self.services.clock.now_ms(),
            reserved=reserved,
            deny_for_ms=deny_for,
        )

    async def refresh(self, holding: Holding, name: str, check: Check) -> None:
        """Ask for the next lease ahead of the current one running out (after a response);
        not if a sized request went out since it was deferred (see ``Holding.request``)."""
        if holding.sizing:
            return
        try:
            await self.ask(holding, name, check, self.services.clock.now_ms(), 0)
        except Exception as exc:
            self.services.log(
                {
                    "event": "lease_refresh_failed",
                    "route": self.route.name,
                    "error": repr(exc)[:200],
                }
            )
