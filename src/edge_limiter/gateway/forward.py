"""The last stage: send the request, as canonicalized and counted, to its origin."""

from __future__ import annotations

import asyncio

from ..core.http import problems
from ..core.http.messages import Response
from .exchange import Exchange, problem_response
from .ports import OriginRequest, OriginTimeoutError, OriginUnreachableError, Services

#: Extra time the gateway's own watchdog allows beyond the origin timeout, so the
#: platform's abort (which closes the connection) normally fires first.
WATCHDOG_GRACE_S = 0.25


class Forward:
    """Forwards to the exchange's origin with its timeout; 504 and 502 on failure."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def __call__(self, exchange: Exchange) -> Response:
        forward = exchange.forward
        request = exchange.request
        url = forward.origin + exchange.path
        if request.query:
            url += "?" + request.query
        outgoing = OriginRequest(
            method=request.method,
            url=url,
            headers=request.headers,
            body=request.body,
            timeout_ms=forward.timeout_ms,
            native=request.native,
        )
        try:
            response = await asyncio.wait_for(
                self.services.origin.send(outgoing),
                timeout=forward.timeout_ms / 1000 + WATCHDOG_GRACE_S,
            )
            exchange.reached_origin = True
            return response
        except (OriginTimeoutError, TimeoutError):
            self._log(exchange, "timeout", None)
            problem = problems.origin_timeout(
                exchange.route_name, forward.origin, forward.timeout_ms
            )
        except OriginUnreachableError as exc:
            self._log(exchange, "unreachable", str(exc))
            problem = problems.origin_unreachable(
                exchange.route_name, forward.origin, str(exc) or type(exc).__name__
            )
        return problem_response(problem)

    def _log(self, exchange: Exchange, outcome: str, detail: str | None) -> None:
        record = {
            "event": "origin_error",
            "route": exchange.route_name,
            "origin": exchange.forward.origin,
            "outcome": outcome,
        }
        if detail:
            record["detail"] = detail
        self.services.log(record)
