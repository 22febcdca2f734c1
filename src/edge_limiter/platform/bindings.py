"""The gateway's ports over Workers bindings: Durable Object stubs, ``fetch``, the clock."""

from __future__ import annotations

import time
from typing import Any

import js
from pyodide.ffi import JsException, to_js

from ..core.http.messages import Response
from ..gateway.ports import OriginRequest, OriginTimeoutError, OriginUnreachableError
from .convert import JsBody, JsHeaders, js_body, js_headers


class DurableObjectStore:
    """Calls ``RateLimiter.decide`` on the object named for (route, key): one RPC call."""

    def __init__(self, namespace: Any) -> None:
        self.namespace = namespace

    async def call(self, name: str, payload: str) -> str:
        stub = self.namespace.getByName(name)
        return str(await stub.decide(payload))


class FetchOrigin:
    """Sends origin requests with the runtime's ``fetch``; redirects are passed through."""

    async def send(self, request: OriginRequest) -> Response:
        init: dict[str, Any] = {
            "method": request.method,
            "headers": js_headers(request.headers),
            "redirect": "manual",
            # Aborting closes the connection; the gateway's own watchdog is only a backstop.
            "signal": js.AbortSignal.timeout(request.timeout_ms),
        }
        body = js_body(request.body)
        if body is not None:
            init["body"] = body
        try:
            answer = await js.fetch(request.url, to_js(init, dict_converter=js.Object.fromEntries))
        except JsException as exc:
            if "TimeoutError" in str(exc) or "timed out" in str(exc).lower():
                raise OriginTimeoutError(str(exc)) from exc
            raise OriginUnreachableError(_short(str(exc))) from exc
        # Fetched headers are immutable: the stages add fields to a copy.
        headers = JsHeaders(js.Headers.new(answer.headers))
        return Response(int(answer.status), headers, JsBody(answer))


def _short(message: str) -> str:
    """The first line of a runtime error, without the Python traceback around it."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "network error"


class SystemClock:
    """The runtime's clock (in production it only advances after I/O)."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)
