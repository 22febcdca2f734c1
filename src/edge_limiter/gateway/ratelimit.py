"""The rate-limit stage: one Durable Object call per request decides, all limits at once."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace

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


class RateLimit:
    """Counts the request against the route's limits; answers 429 or lets it through."""

    def __init__(self, route: Route, services: Services) -> None:
        self.route = route
        self.services = services
        policy = route.limits
        # The same check for every request of the route: encode it once.
        self.payload = StoreRequest("check", policy.algorithm, policy.limits, policy.cost).to_json()
        self.timeout_s = route.failure.store_timeout_ms / 1000

    async def __call__(self, exchange: Exchange, call_next: Handler) -> Response:
        route = self.route
        try:
            key = route.limits.key.compute(exchange.request, exchange.params)
        except AmbiguousRequestError as exc:
            problem = problems.bad_request(
                f"{exc}; route {route.name!r} counts requests by it, so it must have one value.",
                "ambiguous_key",
                route=route.name,
            )
            return problem_response(problem)
        exchange.key = key
        try:
            answer = await asyncio.wait_for(
                self.services.store.call(object_name(route.name, key), self.payload),
                timeout=self.timeout_s,
            )
            decisions = StoreResponse.from_json(answer, route.limits.limits).decisions
        except (Exception, asyncio.CancelledError) as exc:  # any store failure: the policy decides
            return await self._store_failed(exchange, call_next, exc)

        response_for = StoreResponse(decisions)
        decision = response_for.decision
        if not decision.allowed and route.limits.shadow:
            decision = replace(decision, allowed=True, retry_after=0, reason=Reason.SHADOW)
            self.services.log(
                {"event": "shadow_limited", "route": route.name, "key_hash": key_digest(key)}
            )
        headers = rate_limit_headers(decision, decisions)
        if not decision.allowed:
            problem = problems.quota_exceeded(route.name, decisions, instance=exchange.path)
            self.services.log(
                {
                    "event": "limited",
                    "route": route.name,
                    "key_hash": key_digest(key),
                    "violated": problem.members["violated-policies"],
                }
            )
            return problem_response(problem, headers)
        response = await call_next(exchange)
        for name, value in headers:
            response.headers.set(name, value)
        return response

    async def _store_failed(
        self, exchange: Exchange, call_next: Handler, exc: BaseException
    ) -> Response:
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
        if not route.failure.fail_open:
            return problem_response(
                problems.store_unavailable(route.name),
                [(REASON_HEADER, Reason.STORE_UNAVAILABLE.value)],
            )
        response = await call_next(exchange)
        response.headers.set(REASON_HEADER, Reason.STORE_UNAVAILABLE.value)
        return response
