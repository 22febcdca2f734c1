"""The gateway's ports over Workers bindings: Durable Object stubs, ``fetch``, the clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pyodide.ffi import JsException, to_js

from ..core.control import CONTROL_OBJECT
from ..core.http.messages import Response
from ..gateway.ports import OriginRequest, OriginTimeoutError, OriginUnreachableError
from .convert import (
    JsBody,
    JsHeaders,
    absent,
    globals_,
    js_body,
    js_headers,
    js_object,
    untouched,
    within,
)


def as_bytes(value: Any) -> bytes | None:
    """Bytes from what a binding returned: the SDK's binding wrappers hand back Python
    buffers, raw bindings an ArrayBuffer proxy."""
    if absent(value):
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    to_bytes = getattr(value, "to_bytes", None)
    if to_bytes is not None:
        return bytes(to_bytes())
    return bytes(value.to_py())


class DurableObjectStore:
    """Calls ``RateLimiter.decide`` on the object named for (route, key): one RPC call."""

    def __init__(self, namespace: Any) -> None:
        self.namespace = namespace

    async def call(self, name: str, payload: str, timeout_ms: int = 0) -> str:
        stub = self.namespace.getByName(name)
        return str(await within(stub.decide(payload), timeout_ms))


class DurableObjectIdempotency:
    """Calls ``IdempotencyRecords.call`` on the object named for (route, caller, key)."""

    def __init__(self, namespace: Any) -> None:
        self.namespace = namespace

    async def call(self, name: str, payload: str, timeout_ms: int = 0) -> str:
        stub = self.namespace.getByName(name)
        return str(await within(stub.call(payload), timeout_ms))


class DurableObjectBreakers:
    """Calls ``OriginBreaker.sync`` on the object named for the origin."""

    def __init__(self, namespace: Any) -> None:
        self.namespace = namespace

    async def sync(self, name: str, payload: str) -> str:
        stub = self.namespace.getByName(name)
        return str(await stub.sync(payload))


class DurableObjectControl:
    """The Control Durable Object (one instance, ``control``)."""

    def __init__(self, namespace: Any) -> None:
        self.namespace = namespace

    async def overrides(self, payload: str) -> str:
        return str(await self.namespace.getByName(CONTROL_OBJECT).overrides(payload))

    async def stats(self, payload: str) -> str:
        return str(await self.namespace.getByName(CONTROL_OBJECT).stats(payload))


class AnalyticsDataset:
    """A Workers Analytics Engine dataset binding."""

    #: Data points kept converted: the runtime reads a point when it is written, so one
    #: JavaScript object serves every identical point (a flood of denials writes the same
    #: point again and again).
    MAX_KEPT = 256

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.points: dict[tuple[tuple[str, ...], tuple[float, ...], tuple[str, ...]], Any] = {}

    def write(self, blobs: list[str], doubles: list[float], indexes: list[str]) -> None:
        key = (tuple(blobs), tuple(doubles), tuple(indexes))
        point = self.points.get(key)
        if point is None:
            point = to_js(
                {"blobs": blobs, "doubles": doubles, "indexes": indexes},
                dict_converter=globals_.Object.fromEntries,
            )
            if len(self.points) >= self.MAX_KEPT:
                self.points.clear()
            self.points[key] = point
        self.dataset.writeDataPoint(point)


class KvStore:
    """A Workers KV namespace holding bytes."""

    def __init__(self, namespace: Any) -> None:
        self.namespace = namespace

    async def get(self, key: str) -> bytes | None:
        return as_bytes(await self.namespace.get(key, "arrayBuffer"))

    async def put(self, key: str, value: bytes, ttl_s: int) -> None:
        options = to_js({"expirationTtl": ttl_s}, dict_converter=globals_.Object.fromEntries)
        await self.namespace.put(key, to_js(value), options)

    async def delete(self, key: str) -> None:
        await self.namespace.delete(key)


class WaitUntil:
    """Work that goes on after the response: ``ctx.waitUntil``."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    def defer(self, work: Awaitable[Any]) -> None:
        self.ctx.waitUntil(asyncio.ensure_future(work))

    def hold(self) -> Callable[[], None]:
        # A JavaScript promise the runtime waits for, resolved by the returned function:
        # a few calls into JavaScript (a Python future would cross as a proxy the runtime
        # calls back into Python through, about three times the cost).
        if _has_with_resolvers():
            held = globals_.Promise.withResolvers()
            self.ctx.waitUntil(held.promise)
            resolve: Callable[[], None] = held.resolve
            return resolve
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ctx.waitUntil(future)
        return lambda: future.set_result(None)


class FetchOrigin:
    """Sends origin requests with the runtime's ``fetch``; redirects are passed through."""

    async def send(self, request: OriginRequest) -> Response:
        # The timeout bounds the wait for the answer's status and fields: the fetch is
        # aborted then (which closes the connection), and the timer is cleared once they
        # arrive, so a body that keeps coming is never cut off (an AbortSignal.timeout
        # would cut it at the deadline too). A body the gateway reads itself (to store it)
        # is bounded per read instead: no bytes for the timeout ends it (JsBody).
        init = js_object()
        init.redirect = "manual"
        controller = globals_.AbortController.new()
        init.signal = controller.signal
        timer = globals_.setTimeout(
            controller.abort.bind(controller, _timed_out()), request.timeout_ms
        )
        native = request.native
        if untouched(request.headers, request.body, native):
            # Method, headers and body stream go on as they came: one call, no copies.
            target = globals_.Request.new(request.url, native)
        else:
            target = request.url
            init.method = request.method
            init.headers = js_headers(request.headers)
            body = js_body(request.body)
            if body is not None:
                init.body = body
        try:
            answer = await globals_.fetch(target, init)
        except JsException as exc:
            if "TimeoutError" in str(exc) or "timed out" in str(exc).lower():
                raise OriginTimeoutError(str(exc)) from exc
            raise OriginUnreachableError(_short(str(exc))) from exc
        finally:
            globals_.clearTimeout(timer)
        status = int(answer.status)
        body = JsBody(answer, idle_ms=request.body_idle_ms or request.timeout_ms)
        return Response(status, JsHeaders.of_response(answer, body, status), body, answer)


_with_resolvers: bool | None = None


def _has_with_resolvers() -> bool:
    """Whether the runtime's JavaScript has ``Promise.withResolvers`` (workerd's has; an
    older engine, such as Node 20's that the benchmarks run Pyodide in, has not)."""
    global _with_resolvers  # noqa: PLW0603 - looked up once, on first use
    if _with_resolvers is None:
        _with_resolvers = hasattr(globals_.Promise, "withResolvers")
    return _with_resolvers


_timeout_reason: Any = None


def _timed_out() -> Any:
    """The reason an origin fetch is aborted with at its timeout (one per isolate)."""
    global _timeout_reason  # noqa: PLW0603 - made once, on first use
    if _timeout_reason is None:
        _timeout_reason = globals_.DOMException.new(
            "the origin did not answer within the timeout", "TimeoutError"
        )
    return _timeout_reason


def _short(message: str) -> str:
    """The first line of a runtime error, without the Python traceback around it."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "network error"


class SystemClock:
    """The runtime's clock (in production it only advances after I/O)."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)
