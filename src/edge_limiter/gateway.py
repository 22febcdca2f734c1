"""The gateway's decision flow: route, key, one store call, then forward or answer.

Standard library only and free of platform objects: the Worker entry supplies a
:class:`StoreClient` (the Durable Object stub call) and turns the :class:`Verdict` into
a response, so this whole flow is also tested on CPython with a fake store.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .core.config import Config, Route
from .core.decision import Reason
from .core.errors import ProtocolError
from .core.headers import REASON_HEADER, problem_body, rate_limit_headers, unavailable_body
from .core.keys import object_name
from .core.protocol import StoreRequest, StoreResponse
from .core.request import RequestView

logger = logging.getLogger("edge_limiter")


class StoreClient(Protocol):
    """Calls one key's Durable Object: ``name`` picks the object, ``payload`` is JSON text."""

    async def call(self, name: str, payload: str) -> str:
        """Send one :class:`StoreRequest` and return the :class:`StoreResponse` text."""
        ...


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with a request.

    ``action`` is ``forward`` (send to ``origin``, then add ``headers`` to its response)
    or ``respond`` (answer ``status`` with the JSON ``body`` and ``headers`` directly).
    """

    action: str
    status: int = 200
    origin: str | None = None
    route: Route | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: dict[str, Any] | None = None
    log: dict[str, Any] | None = None


class Gateway:
    """Decides requests against one parsed :class:`Config`."""

    def __init__(self, config: Config, store: StoreClient) -> None:
        self.config = config
        self.store = store

    async def decide(self, request: RequestView) -> Verdict:
        """The verdict for one request; never raises for a store failure."""
        matched = self.config.match(request.method, request.host, request.path)
        if matched is None:
            return self._unmatched(request)
        route, params = matched
        origin = self.config.origin_for(route)
        key = route.key.compute(request, params)
        name = object_name(route.name, key)
        store_request = StoreRequest(
            op="check",
            algorithm=route.algorithm,
            rates=route.rates,
            burst=route.burst,
            cost=route.cost,
        )
        try:
            answer = await asyncio.wait_for(
                self.store.call(name, store_request.to_json()),
                timeout=self.config.store_timeout_ms / 1000,
            )
            response = StoreResponse.from_json(answer, route.rates)
        except (Exception, asyncio.CancelledError) as exc:  # any store failure decides by policy
            return self._store_failed(route, origin, exc)

        decision = response.decision
        if not decision.allowed and route.shadow:
            decision = replace(decision, allowed=True, retry_after=0, reason=Reason.SHADOW)
            headers = rate_limit_headers(decision, response.decisions)
            log = {"event": "shadow_limited", "route": route.name, "key": key}
            return Verdict("forward", origin=origin, route=route, headers=headers, log=log)
        headers = rate_limit_headers(decision, response.decisions)
        if not decision.allowed:
            body = problem_body(route.name, response.decisions, instance=request.path)
            log = {
                "event": "limited",
                "route": route.name,
                "key": key,
                "violated": body["violated-policies"],
            }
            return Verdict("respond", 429, route=route, headers=headers, body=body, log=log)
        return Verdict("forward", origin=origin, route=route, headers=headers)

    def _unmatched(self, request: RequestView) -> Verdict:
        if self.config.origin is None:
            body = {
                "type": "about:blank",
                "title": "Not Found",
                "status": 404,
                "detail": (
                    f"No route matches {request.method} {request.path} and no default "
                    "'origin' is configured for unmatched requests."
                ),
            }
            return Verdict("respond", 404, body=body)
        return Verdict("forward", origin=self.config.origin)

    def _store_failed(self, route: Route, origin: str | None, exc: BaseException) -> Verdict:
        cause = (
            "timeout"
            if isinstance(exc, TimeoutError | asyncio.TimeoutError)
            else type(exc).__name__
        )
        if isinstance(exc, ProtocolError):
            cause = f"protocol: {exc}"
        log = {
            "event": "store_unavailable",
            "route": route.name,
            "cause": cause,
            "policy": "open" if route.fail_open else "closed",
        }
        headers = [(REASON_HEADER, Reason.STORE_UNAVAILABLE.value)]
        if route.fail_open:
            return Verdict("forward", origin=origin, route=route, headers=headers, log=log)
        headers.append(("Retry-After", "1"))
        return Verdict(
            "respond", 503, route=route, headers=headers, body=unavailable_body(route.name), log=log
        )


def log_line(record: dict[str, Any]) -> str:
    """One structured log line (JSON), as Workers Logs and ``wrangler tail`` show best."""
    return json.dumps({"logger": "edge_limiter", **record}, separators=(",", ":"))
