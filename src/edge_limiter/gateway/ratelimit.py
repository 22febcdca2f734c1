"""The rate-limit stage: one Durable Object call per request decides, all limits at once."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field, replace

from ..core.config import Route
from ..core.decision import Reason
from ..core.errors import AmbiguousRequestError, ProtocolError
from ..core.http import problems
from ..core.http.fields import REASON_HEADER, rate_limit_headers
from ..core.http.messages import Response
from ..core.keys import object_name
from ..core.protocol import StoreRequest, StoreResponse
from .exchange import Exchange, Handler, problem_response
from .ports import Services


def key_digest(key: str) -> str:
    """A short, stable hash of a rate-limit key: logs never carry the key itself."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def request_key(route: Route, exchange: Exchange) -> str | Response:
    """The route's rate-limit key for the request (kept on the exchange), or a 400."""
    if exchange.key is not None:
        return exchange.key
    try:
        exchange.key = route.limits.key.compute(exchange.request, exchange.params)
    except AmbiguousRequestError as exc:
        return problem_response(
            problems.bad_request(
                f"{exc}; route {route.name!r} counts requests by it, so it must have one value.",
                "ambiguous_key",
                route=route.name,
            )
        )
    return exchange.key


@dataclass(slots=True)
class Admission:
    """The rate limit's verdict: an answer to give now, or headers for the eventual one."""

    answer: Response | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)


class RateLimit:
    """Counts the request against the route's limits; answers 429 or lets it through."""

    def __init__(self, route: Route, services: Services) -> None:
        self.route = route
        self.services = services
        policy = route.limits
        # The same check (and refund) for every request of the route: encode them once.
        self.payload = StoreRequest("check", policy.algorithm, policy.limits, policy.cost).to_json()
        self.refund = StoreRequest("refund", policy.algorithm, policy.limits, policy.cost).to_json()
        self.timeout_s = route.failure.store_timeout_ms / 1000

    async def __call__(self, exchange: Exchange, call_next: Handler) -> Response:
        admission = await self.admit(exchange)
        if admission.answer is not None:
            return admission.answer
        response = await call_next(exchange)
        for name, value in admission.headers:
            response.headers.set(name, value)
        if response.status in self.route.forward.refund_on and exchange.key is not None:
            # The origins failed this request: give its quota back (after the response).
            exchange.background.defer(self._refund(exchange.key))
        return response

    async def _refund(self, key: str) -> None:
        try:
            await self.services.store.call(object_name(self.route.name, key), self.refund)
        except Exception as exc:
            self.services.log(
                {"event": "refund_failed", "route": self.route.name, "error": repr(exc)[:200]}
            )

    async def admit(self, exchange: Exchange) -> Admission:
        """Count the request: a 429 (or 400, or a fail-closed 503), or the headers to add."""
        route = self.route
        key = request_key(route, exchange)
        if isinstance(key, Response):
            return Admission(key)
        try:
            answer = await asyncio.wait_for(
                self.services.store.call(object_name(route.name, key), self.payload),
                timeout=self.timeout_s,
            )
            decisions = StoreResponse.from_json(answer, route.limits.limits).decisions
        except (Exception, asyncio.CancelledError) as exc:  # any store failure: the policy decides
            return self._store_failed(exc)

        decision = StoreResponse(decisions).decision
        if not decision.allowed and route.limits.shadow:
            decision = replace(decision, allowed=True, retry_after=0, reason=Reason.SHADOW)
            self.services.log(
                {"event": "shadow_limited", "route": route.name, "key_hash": key_digest(key)}
            )
        headers = rate_limit_headers(decision, decisions)
        if decision.allowed:
            return Admission(headers=headers)
        problem = problems.quota_exceeded(route.name, decisions, instance=exchange.path)
        self.services.log(
            {
                "event": "limited",
                "route": route.name,
                "key_hash": key_digest(key),
                "violated": problem.members["violated-policies"],
            }
        )
        return Admission(problem_response(problem, headers))

    def _store_failed(self, exc: BaseException) -> Admission:
        route = self.route
        if isinstance(exc, ProtocolError):
            cause = f"protocol: {exc}"
        elif isinstance(exc, TimeoutError | asyncio.TimeoutError):
            cause = "timeout"
        else:
            cause = type(exc).__name__
        self.services.log(
            {
                "event": "store_unavailable",
                "route": route.name,
                "cause": cause,
                "policy": "open" if route.failure.fail_open else "closed",
            }
        )
        reason = [(REASON_HEADER, Reason.STORE_UNAVAILABLE.value)]
        if not route.failure.fail_open:
            return Admission(problem_response(problems.store_unavailable(route.name), reason))
        return Admission(headers=reason)
