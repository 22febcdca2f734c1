"""The rate-limit stage: one Durable Object call per request decides, all limits at once.

Before that call: a per-key override may give the key other limits or exempt it, and the
deny cache answers a key known to be over its limit exactly as the object would, without
asking it. Every decision is counted, logged (allowed ones sampled) and written to
Analytics Engine when configured.

On a route with ``leases``, the isolate instead admits from units its key's object
granted ahead (:mod:`edge_limiter.core.ratelimit.leases`): no call while a lease holds units, and
the next lease asked for in the background (after the response) before those run out. A
request that finds no units while a sized lease call is out looks again on its own timers
until that call is answered (the platform lets no request await a promise another
request's call resolves: its continuation would run in the other request's context,
which workerd refuses), then makes its own call if the answer left it nothing. The
holdings and the calls are :mod:`.leasing`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.config import Config, Route
from ..core.errors import ProtocolError
from ..core.http import problems
from ..core.http.fields import (
    REASON_HEADER,
    ceil_seconds,
    rate_limit_headers,
    violated_policies,
    with_origins_fields,
)
from ..core.http.messages import Headers, Response
from ..core.identity.tiers import TierLimits
from ..core.keys import key_digest, object_name
from ..core.ratelimit.check import Check
from ..core.ratelimit.decision import Decision, Reason
from ..core.ratelimit.denycache import shifted
from ..core.ratelimit.leases.holding import Holding, held_back, leased_decisions
from ..core.ratelimit.leases.lease import Lease
from ..core.ratelimit.leases.policy import LEASABLE, default_ttl
from ..core.ratelimit.overrides import Override
from ..core.ratelimit.protocol import StoreRequest
from ..core.ratelimit.rule import combine
from .exchange import Exchange, Handler, problem_response
from .leasing import LEASE_WAIT_ROUNDS, Leases
from .operations import Operating
from .ports import Services

#: Built 429s a route keeps (:meth:`RateLimit._denial`); all dropped when full.
MAX_DENIALS = 256


@dataclass(slots=True)
class Admission:
    """The rate limit's verdict: an answer to give now, or headers for the eventual one."""

    answer: Response | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    refund: StoreRequest | None = None
    lease: Lease | None = None
    """The lease the request was admitted from (a refund goes back to it)."""
    holding: Holding | None = None
    """The key's leases in this isolate, which ``lease`` belongs to."""
    decisions: Sequence[Decision] = ()
    """The admitting decision per limit (the headers again, if the request is refunded)."""


class RateLimit:
    """Counts the request against the route's limits; answers 429 or lets it through."""

    def __init__(
        self, route: Route, config: Config, services: Services, operating: Operating
    ) -> None:
        self.route = route
        self.services = services
        self.operating = operating
        policy = route.limits
        self.storing = (policy.write_behind_ms, config.ops.cleanup_after_ms)
        # The top level's shadow is in the route's, and a shadow route has no leases.
        self.shadow = policy.shadow
        self.lease_ttl_ms = policy.lease_ttl_ms
        self.refunds = bool(route.forward.refund_on)
        self.check = Check.of(
            policy.algorithm,
            policy.limits,
            policy.cost,
            self.storing,
            self.lease_ttl_ms,
            refunds=self.refunds,
        )
        self.timeout_ms = route.failure.store_timeout_ms
        self._override_checks: dict[str, Check] = {}
        self._tier_checks: dict[tuple[Any, ...], Check] = {}
        """The checks of callers' tiers on this route, by tier and limits."""
        self.leases = Leases(route, services, operating, self.storing, self.timeout_ms)
        self._denials: dict[tuple[Any, ...], tuple[Response, list[str]]] = {}
        """Built 429s by what they say (see :meth:`_denial`): a flood shares a few."""

    async def __call__(self, exchange: Exchange, call_next: Handler) -> Response:
        if exchange.counted:
            return await call_next(exchange)
        admission = await self.admit(exchange)
        if admission.answer is not None:
            return admission.answer
        response = await call_next(exchange)
        refund = admission.refund
        refunded = bool(refund and response.status in self.route.forward.refund_on and exchange.key)
        headers = admission.headers
        if refunded and admission.decisions:
            # The fields say what the key holds once the unit is back.
            cost = self.route.limits.cost
            given_back = [
                # A limit given back to whole is whole now: nothing to wait for.
                d._replace(remaining=d.limit, reset_after=0)
                if d.remaining + cost >= d.limit
                else d._replace(remaining=d.remaining + cost)
                for d in admission.decisions
            ]
            headers = rate_limit_headers(combine(given_back), given_back)
        if response.native is not None:
            # The origin's answer: its own rate-limit fields, if any, are kept beside ours.
            headers = with_origins_fields(headers, response.headers.get)
        for name, value in headers:
            response.headers.set(name, value)
        if refunded and refund and exchange.key:
            # The origins failed this request: give its quota back (after the response).
            lease = admission.lease
            if lease is None or admission.holding is None:
                exchange.background.defer(self._refund(exchange.key, refund))
            elif not admission.holding.give_back(
                lease, self.route.limits.cost, self.services.clock.now_ms()
            ):
                # The lease ended while the request was out: the object takes the unit
                # back, into the window it was granted in (a bucket's, whenever).
                at = lease.window_end - 1 if lease.window_end else 0
                exchange.background.defer(self._refund(exchange.key, refund.for_admission(at)))
        return response

    async def _refund(self, key: str, request: StoreRequest) -> None:
        try:
            await self.services.store.call(object_name(self.route.name, key), request)
        except Exception as exc:
            self.services.log(
                {"event": "refund_failed", "route": self.route.name, "error": repr(exc)[:200]}
            )
        self.operating.deny.clear()

    def _check_for(self, override: Override | None) -> Check:
        if override is None or not override.limits:
            return self.check
        check = self._override_checks.get(override.id)
        if check is None:
            policy = self.route.limits
            check = Check.of(
                policy.algorithm,
                override.limits,
                policy.cost,
                self.storing,
                self.lease_ttl_ms,
                refunds=self.refunds,
            )
            self._override_checks[override.id] = check
        return check

    def _tier_check(self, tier: TierLimits | None) -> Check:
        """The check of a caller's tier on this route (its own limits: the route's)."""
        if tier is None or not tier.limits:
            return self.check
        slot = (tier.tier, tier.limits, tier.leases)
        check = self._tier_checks.get(slot)
        if check is None:
            policy = self.route.limits
            leases = tier.leases and policy.algorithm in LEASABLE
            ttl = (policy.lease_ttl_ms or default_ttl(policy.algorithm)) if leases else 0
            check = Check.of(
                policy.algorithm,
                tier.limits,
                policy.cost,
                self.storing,
                0 if self.shadow else ttl,
                refunds=self.refunds,
            )
            if len(self._tier_checks) >= MAX_DENIALS:
                self._tier_checks.clear()  # a record's own limits are many at most
            self._tier_checks[slot] = check
        return check

    def held_units(self, key: str, override: Override | None, now: int) -> int:
        """The units this isolate's leases on ``key`` still hold (what its next requests
        use before asking the object; the admin API's state counts them)."""
        if not self.lease_ttl_ms:
            return 0
        check = self._check_for(override)
        return self.leases.held_units(object_name(self.route.name, key), check.payload, now)

    async def count(self, exchange: Exchange) -> Response | list[tuple[str, str]]:
        """The :class:`Counting` port (a cache hit counted on ``count_hits``)."""
        admission = await self.admit(exchange)
        return admission.answer if admission.answer is not None else admission.headers

    async def admit(self, exchange: Exchange) -> Admission:
        """Count the request: a 429 (or 400, or a fail-closed 503), or the headers to add."""
        route = self.route
        key = exchange.limit_key()
        if isinstance(key, Response):
            return Admission(key)
        now = exchange.now_ms
        operating = self.operating
        override = await operating.override_for(route.name, key, now, exchange.background)
        digest = key_digest(key)
        tier = exchange.caller.tier if exchange.caller is not None else None
        if override is None and tier is not None and tier.exempt:
            self._record("exempt", digest, None, 0, exchange)
            return Admission(headers=[(REASON_HEADER, "exempt")])
        if override is not None and override.exempt:
            self._record("exempt", digest, None, 0, exchange, override=override)
            return Admission(headers=[(REASON_HEADER, "exempt")])
        check = self._check_for(override) if override is not None else self._tier_check(tier)
        name = object_name(route.name, key)
        if check.lease_ttl_ms:
            return await self._leased(exchange, check, name, digest, override)
        return await self._checked(exchange, check, name, digest, override)

    async def _checked(
        self,
        exchange: Exchange,
        check: Check,
        name: str,
        digest: str,
        override: Override | None,
    ) -> Admission:
        """One object call decides the request (the deny cache may answer first)."""
        now = exchange.now_ms
        operating = self.operating
        if not self.shadow and operating.deny_enabled:
            cached = operating.deny.lookup((name, check.payload), now)
            if cached is not None:
                decisions = check.replay(cached.rows, cached.decisions, now, cached.denied_at)
                if not combine(decisions).allowed:
                    return self._deny(exchange, decisions, digest, 0, override, cached=True)
        started = self.services.clock.now_ms()
        try:
            response = await self.services.store.call(name, check.request, self.timeout_ms)
        except (Exception, asyncio.CancelledError) as exc:  # any store failure: the policy decides
            return self._store_failed(exc, exchange, digest)
        latency = self.services.clock.now_ms() - started
        decisions = response.decisions
        decision = combine(decisions)
        if decision.allowed:
            if response.rows is not None and operating.deny_enabled and not self.shadow:
                # The object says the key is now at its limit: the next request is decided
                # here from the states it sent, as after a denial.
                replayed = check.replay(response.rows, decisions, now, now)
                if not combine(replayed).allowed:
                    operating.deny.remember((name, check.payload), now, replayed, response.rows)
            self._record("allowed", digest, decision, latency, exchange, override=override)
            return Admission(
                headers=rate_limit_headers(decision, decisions),
                # Given back to the window (or log entry) that counted it.
                refund=check.refund.for_admission(response.at),
                decisions=decisions,
            )
        if self.shadow:
            # Let through, but counted by nothing (it was denied): nothing to give back.
            shadowed = decision._replace(allowed=True, retry_after=0, reason=Reason.SHADOW)
            self._record(
                "shadow",
                digest,
                decision,
                latency,
                exchange,
                override=override,
                extra={"violated": violated_policies(decisions)},
            )
            return Admission(headers=rate_limit_headers(shadowed, decisions))
        if operating.deny_enabled:
            operating.deny.remember((name, check.payload), now, decisions, response.rows)
        return self._deny(exchange, decisions, digest, latency, override, cached=False)

    # --- leases ---------------------------------------------------------------------------

    async def _leased(
        self,
        exchange: Exchange,
        check: Check,
        name: str,
        digest: str,
        override: Override | None,
    ) -> Admission:
        """Admit from the key's leases in this isolate, or ask the object for a lease."""
        cost = self.route.limits.cost
        clock, leases = self.services.clock, self.leases
        holding = leases.holding(name, check)
        now = exchange.now_ms
        holding.meter.observe(now, cost)
        generation = self.operating.deny.generation
        if holding.epoch != generation:
            # The deny cache was dropped (a reset, a refund, an override) since this
            # holding's last answer: ask the object again before denying here.
            holding.changed()
            holding.epoch = generation
        lease = holding.take(cost, now)
        if lease is not None:
            if holding.wants_refresh(now):
                exchange.background.defer(leases.refresh(holding, name, check))
            return self._from_lease(
                exchange, holding, lease, now, digest=digest, override=override, check=check
            )
        if holding.ask_at(now):
            return self._deny_held(exchange, holding, digest, override, now)

        def admitted(lease: Lease, at: int) -> Admission:
            """Admitted from ``lease`` at ``at``, after waiting since ``started``."""
            return self._from_lease(
                exchange,
                holding,
                lease,
                at,
                digest=digest,
                override=override,
                check=check,
                latency=at - started,
            )

        started = clock.now_ms()
        rounds = 0
        while holding.sizing and rounds < LEASE_WAIT_ROUNDS:
            # A sized lease request is out: its lease serves this request too. Wait for it
            # on this request's own timers (see the cache's collapsing: awaiting what
            # another request resolves is refused by the platform); if its units went to
            # the requests before this one, wait for the next sized request (one of them
            # sent it), not ask beside it.
            rounds += 1
            waited = await leases.wait_for_lease(holding, cost, started)
            if isinstance(waited, Lease):
                finished = clock.now_ms()
                return admitted(waited, finished)
            if waited:
                return self._deny_held(exchange, holding, digest, override, clock.now_ms())
        started = clock.now_ms()
        try:
            # Answered even if the client goes away meanwhile: the holding counts the call
            # as out until then (a sized one stops the others from sizing or refreshing),
            # and the lease it brings serves the next requests.
            lease = await exchange.finish(leases.ask(holding, name, check, started, cost))
        except (Exception, asyncio.CancelledError) as exc:
            return self._store_failed(exc, exchange, digest)
        finished = clock.now_ms()
        if lease is not None:
            return admitted(lease, finished)
        spare = holding.take(cost, finished)
        if spare is not None:
            # Denied because this isolate's own leases hold the units (granted to the
            # requests asking beside this one): use them, they are counted.
            return admitted(spare, finished)
        decisions = holding.decisions
        ask_at = holding.ask_at(finished)
        if ask_at and finished >= holding.denied_until:
            # Granted, but its units accrue later (a sliding window's planned share).
            decisions = held_back(decisions, holding.admits_at(finished) - finished, 0)
        return self._deny(exchange, decisions, digest, finished - started, override, cached=False)

    def _deny_held(
        self,
        exchange: Exchange,
        holding: Holding,
        digest: str,
        override: Override | None,
        now: int,
    ) -> Admission:
        """Deny without asking: the object's last answer was a denial still in force, or
        this isolate's share of a short limit is used up (a rationed lease)."""
        elapsed = now - holding.decided_at
        if now < holding.denied_until:
            decisions = shifted(holding.decisions, elapsed)
        else:  # rationed: this isolate's share of a short limit is used up
            decisions = held_back(holding.decisions, holding.admits_at(now) - now, elapsed)
        return self._deny(exchange, decisions, digest, 0, override, cached=True)

    def _from_lease(
        self,
        exchange: Exchange,
        holding: Holding,
        lease: Lease,
        now: int,
        *,
        digest: str,
        override: Override | None,
        check: Check,
        latency: int = 0,
    ) -> Admission:
        units = sum(held.unused(now) for held in holding.leases)
        decisions = leased_decisions(holding.decisions, units, now - holding.decided_at)
        decision = combine(decisions)
        self._record("allowed", digest, decision, latency, exchange, override=override)
        return Admission(
            headers=rate_limit_headers(decision, decisions),
            refund=check.refund,
            lease=lease,
            holding=holding,
            decisions=decisions,
        )

    def _deny(
        self,
        exchange: Exchange,
        decisions: tuple[Decision, ...],
        digest: str,
        latency: int,
        override: Override | None,
        *,
        cached: bool,
    ) -> Admission:
        decision = combine(decisions)
        response, violated = self._denial(exchange.path, decision, decisions)
        self._record(
            "cached_denial" if cached else "limited",
            digest,
            decision,
            latency,
            exchange,
            override=override,
            extra={"violated": violated},
        )
        return Admission(response)

    def _denial(
        self, path: str, decision: Decision, decisions: tuple[Decision, ...]
    ) -> tuple[Response, list[str]]:
        """The 429 for ``decisions`` at ``path``, and the names of the limits it violates.

        Everything a 429 says is in whole seconds, so the denials of a flooded key within
        a second say the same: the body and headers are built once for them, and each
        request gets its own copy of the headers (later stages may add to them).
        """
        said = (
            path,
            decision.limit,
            decision.remaining,
            ceil_seconds(decision.reset_after),
            tuple(
                (
                    d.allowed,
                    d.limit,
                    d.remaining,
                    ceil_seconds(d.reset_after),
                    ceil_seconds(d.retry_after),
                    d.reason,
                    d.policy,
                )
                for d in decisions
            ),
        )
        built = self._denials.get(said)
        if built is None:
            problem = problems.quota_exceeded(self.route.name, decisions, instance=path)
            headers = rate_limit_headers(decision, decisions)
            built = (problem_response(problem, headers), problem.members["violated-policies"])
            if len(self._denials) >= MAX_DENIALS:
                self._denials.clear()
            self._denials[said] = built
        response, violated = built
        return Response(response.status, Headers(response.headers.items()), response.body), violated

    def _record(
        self,
        event: str,
        digest: str,
        decision: Decision | None,
        latency: int,
        exchange: Exchange,
        *,
        override: Override | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        details = dict(extra or {})
        if override is not None:
            details["override"] = override.id
        self.operating.record(
            route=self.route.name,
            event=event,
            key_hash=digest,
            decision=decision,
            latency_ms=latency,
            background=exchange.background,
            now=exchange.now_ms,
            extra=details or None,
        )

    def _policy(self) -> str:
        """What a store failure does here, as the log line says it."""
        if self.route.failure.fail_open:
            return "open"
        return "closed (shadow: admitted)" if self.shadow else "closed"

    def _store_failed(self, exc: BaseException, exchange: Exchange, digest: str) -> Admission:
        route = self.route
        if isinstance(exc, ProtocolError):
            cause = f"protocol: {exc}"
        elif isinstance(exc, TimeoutError | asyncio.TimeoutError):
            cause = "timeout"
        else:
            cause = type(exc).__name__
        self._record(
            "store_unavailable",
            digest,
            None,
            0,
            exchange,
            extra={"cause": cause, "policy": self._policy()},
        )
        reason = [(REASON_HEADER, Reason.STORE_UNAVAILABLE.value)]
        # A shadow route blocks nothing, not even when its counters cannot be reached.
        if not route.failure.fail_open and not self.shadow:
            return Admission(problem_response(problems.store_unavailable(route.name), reason))
        return Admission(headers=reason)
