"""The gateway's ports over Workers bindings: Durable Object stubs, ``fetch``, the clock."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pyodide.ffi import JsException, create_proxy, to_js

from ..core.control import (
    CONTROL_OBJECT,
    OVERRIDES,
    STATS,
    OverridesAnswer,
    OverridesCall,
    StatsAnswer,
    StatsCall,
)
from ..core.http.messages import Body, BytesBody, HeaderMap, Response
from ..core.idempotency.protocol import CALL, IdempotencyAnswer, IdempotencyCall
from ..core.objects import Ans, Method, Req
from ..core.ratelimit.protocol import DECIDE, StoreRequest, StoreResponse
from ..core.resilience.breaker import BreakerState
from ..core.resilience.shared import SYNC, SyncCall
from ..gateway.ports import (
    ClientBodyError,
    OriginConnectError,
    OriginError,
    OriginRequest,
    OriginTimeoutError,
    OriginUnreachableError,
)
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


class DurableObjects:
    """One Durable Object namespace: each call goes out and comes back through its
    method's codec (:class:`~edge_limiter.core.objects.Method`), one RPC call each."""

    def __init__(self, namespace: Any) -> None:
        self.namespace = namespace

    async def ask(
        self, name: str, method: Method[Req, Ans], request: Req, timeout_ms: int = 0
    ) -> Ans:
        """``method`` on the object named ``name``: ``request`` sent, its answer read
        (``timeout_ms``: :class:`TimeoutError` after that long; 0: no limit)."""
        stub = self.namespace.getByName(name)
        text = await within(getattr(stub, method.name)(method.encode(request)), timeout_ms)
        return method.decode(str(text), request)


class DurableObjectStore(DurableObjects):
    """The rate limiter's objects, one per (route, key): ``RateLimiter.decide``."""

    async def call(self, name: str, request: StoreRequest, timeout_ms: int = 0) -> StoreResponse:
        return await self.ask(name, DECIDE, request, timeout_ms)


class DurableObjectIdempotency(DurableObjects):
    """The idempotency records' objects, one per (route, caller, key): ``call``."""

    async def call(
        self, name: str, call: IdempotencyCall, timeout_ms: int = 0
    ) -> IdempotencyAnswer:
        return await self.ask(name, CALL, call, timeout_ms)


class DurableObjectBreakers(DurableObjects):
    """The origins' shared breakers, one object per origin: ``OriginBreaker.sync``."""

    async def sync(self, name: str, call: SyncCall) -> BreakerState:
        return await self.ask(name, SYNC, call)


class DurableObjectControl(DurableObjects):
    """The Control Durable Object (one instance, ``control``)."""

    async def overrides(self, call: OverridesCall) -> OverridesAnswer:
        return await self.ask(CONTROL_OBJECT, OVERRIDES, call)

    async def stats(self, call: StatsCall) -> StatsAnswer:
        return await self.ask(CONTROL_OBJECT, STATS, call)


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
    """Sends origin requests with the runtime's ``fetch``; redirects are passed through.

    A failure is told apart by what the adapter saw, not by the runtime's words (workerd
    says "Network connection lost." alike for a refused connection, a reset after the
    whole request was sent, and a client's upload that broke off): the body goes to fetch
    watched (:class:`_Outgoing`), so the adapter knows whether the client's own stream
    failed (:class:`ClientBodyError`) and, for a body in memory, whether fetch took more of
    it than it takes before it has a connection (:class:`OriginConnectError` when not). A
    bodiless request, a streamed body, or (on workerd 1.20261117 to 1.20261123) a body small
    enough to be read whole while the runtime connects gives no such sign: its failure is an
    :class:`OriginUnreachableError`, as the request may have arrived.
    """

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
        sent: _Outgoing | None = None
        if request.body is None and untouched(request.headers, None, native):
            # Method and headers go on as they came: one call, no copies.
            target = globals_.Request.new(request.url, native)
        else:
            target = request.url
            init.method = request.method
            init.headers = js_headers(request.headers)
            sent = _Outgoing.of(request.body, request.headers, request.resend_if_unsent)
            if sent is not None:
                init.body = sent.stream
                sent.abort = controller
            else:
                body = js_body(request.body)
                if body is not None:
                    init.body = body
        try:
            answer = await globals_.fetch(target, init)
        except JsException as exc:
            raise _failure(str(exc), sent) from exc
        finally:
            globals_.clearTimeout(timer)
            if sent is not None and sent.streamed:
                _outgoing.pop(sent.number, None)
        status = int(answer.status)
        body = JsBody(answer, idle_ms=request.body_idle_ms or request.timeout_ms)
        return Response(status, JsHeaders.of_response(answer, body, status), body, answer)


def _failure(message: str, sent: _Outgoing | None) -> OriginError:
    """The port's error for a fetch that failed with ``message`` after taking ``sent``."""
    timed_out = "TimeoutError" in message or "timed out" in message.lower()
    if sent is not None:
        _outgoing.pop(sent.number, None)
        if sent.client_error is not None:
            return ClientBodyError(_short(sent.client_error))
        if not sent.connected:
            return OriginConnectError(_short(message), timed_out=timed_out)
    if timed_out:
        return OriginTimeoutError(message)
    return OriginUnreachableError(_short(message))


class _Outgoing:
    """A request body as fetch takes it, watched by the adapter.

    In memory, where the gateway asks (it would send the request to another origin if it
    never left): a stream the adapter serves itself, one part per pull (``highWaterMark``
    0), through a ``FixedLengthStream`` so the origin gets a Content-Length (a stream made
    in JavaScript is otherwise sent chunked). The first part is a single byte, the second
    the rest, then the end. The rule: while the end was not taken the origin cannot have
    the whole request, and while no more than two parts were taken the runtime had no
    connection yet (``connected`` is False): the body can go to another origin. Measured
    (a refused port, one that accepts and never reads, one whose connect hangs):

    - workerd 1.20260426 takes two parts before it has a connection (fetch one, the
      ``FixedLengthStream`` one more), and the next only once the first was written to
      it: a refused connection leaves any body at two parts.
    - workerd (1.20261117 to 1.20261123) reads the body while it connects, before the
      connection exists, until about 64 KiB are buffered (8-16 KiB of a stream without a
      length): a larger body stops at two parts when the connection is refused and is
      taken to its end once one exists; a smaller one is taken to its end either way, so
      its failure is judged as possibly sent (never sent twice; the breaker counts it). Its
      error is the same as before ("Network connection lost.", ``remote`` and
      ``retryable`` true, for a refused connection and a reset alike): no better sign.

    (A body of one byte ends within two pulls: it is never judged unsent.) Elsewhere a
    body in memory goes as bytes, in one write: an origin that answers before reading it
    and closes the connection may make a write after the first fail, and lose its answer.

    The client's own stream (a body too large to keep, or of unknown length): piped by
    the runtime itself into a ``FixedLengthStream`` (its Content-Length) or an
    ``IdentityTransformStream`` (chunked), with no Python per part (thousands of small
    parts would cost seconds). It can be sent only once, so whether a connection was made
    does not matter and is not asked (``connected``). When the pipe fails, the source is
    looked at: if it is the client's stream that failed (not fetch that gave the body up),
    that is the client's failure (``client_error``), and the fetch is ended at once (the
    runtime would wait for the origin's answer to a body that stopped).
    """

    __slots__ = (
        "abort",
        "before_connect",
        "chunks",
        "client_error",
        "ended",
        "number",
        "pulls",
        "stream",
        "streamed",
    )

    def __init__(self, number: int) -> None:
        self.number = number
        self.chunks: list[Any] = []
        self.pulls = 0
        self.before_connect = 2
        self.ended = False
        self.streamed = False
        self.client_error: str | None = None
        self.stream: Any = None
        self.abort: Any = None
        """The fetch's AbortController (see ``client_error``)."""

    @property
    def connected(self) -> bool:
        """Whether the request may have reached the origin: fetch took more of the body
        than it takes before connecting (a streamed body: always, as far as is known)."""
        return self.streamed or self.ended or self.pulls > self.before_connect

    @classmethod
    def of(cls, body: bytes | Body | None, headers: HeaderMap, watch: bool) -> _Outgoing | None:
        """The stream to send ``body`` as: a client's stream always (the length is its
        Content-Length in ``headers``, if any), a body in memory when ``watch`` (the
        gateway would send it elsewhere if it never left). ``None``: sent as it is."""
        stream: Any = None
        length: int | None = None
        data = b""
        if isinstance(body, JsBody) and body.data is None:
            stream = body.stream
            if absent(stream):
                return None
            declared = headers.get("content-length")
            length = int(declared) if declared is not None and declared.isdigit() else None
            if length == 0:
                return None
        elif isinstance(body, JsBody | BytesBody):
            data = body.data or b""
        elif isinstance(body, bytes):
            data = body
        elif body is None:
            return None
        else:
            raise TypeError(f"cannot send a body of type {type(body).__name__}")
        if stream is None and not (data and watch):
            return None
        number = next(_numbers)
        if number % _PRUNE_EVERY == 0:
            for old in [n for n in _outgoing if n < number - _PRUNE_AFTER]:
                del _outgoing[old]
        outgoing = _outgoing[number] = cls(number)
        calls = _calls()
        if stream is not None:
            outgoing.streamed = True
            sink = (
                globals_.IdentityTransformStream.new()
                if length is None
                else globals_.FixedLengthStream.new(length)
            )
            stream.pipeTo(sink.writable).catch(calls.piped.bind(None, number, stream))
            outgoing.stream = sink.readable
            return outgoing
        outgoing.chunks = [to_js(part) for part in (data[:1], data[1:]) if part]
        source = js_object()
        source.pull = calls.pull.bind(None, number)
        source.cancel = calls.cancel.bind(None, number)
        strategy = js_object()
        strategy.highWaterMark = 0
        served = globals_.ReadableStream.new(source, strategy)
        sink = globals_.FixedLengthStream.new(len(data))
        # Its failure is fetch's: nothing to add.
        served.pipeTo(sink.writable).catch(calls.ignore)
        outgoing.stream = sink.readable
        return outgoing


#: The bodies being sent, by number (the callbacks carry it); each leaves when its
#: stream ends or its fetch fails (a client's stream: when its fetch settles). Every so
#: many bodies, those begun more than ``_PRUNE_AFTER`` bodies ago are dropped.
_outgoing: dict[int, _Outgoing] = {}
_numbers = itertools.count()
_PRUNE_EVERY = 4096
_PRUNE_AFTER = 65_536


class _Calls:
    """The stream callbacks, one proxy each for the isolate (bound to a body's number
    per stream, in JavaScript: no proxy per request to free)."""

    def __init__(self) -> None:
        self.pull = create_proxy(_pull)
        self.cancel = create_proxy(_cancel)
        self.piped = create_proxy(_piped)
        self.client_failed = create_proxy(_client_failed)
        self.ignore = create_proxy(_ignore)


_calls_made: _Calls | None = None


def _calls() -> _Calls:
    global _calls_made  # noqa: PLW0603 - made once, on first use
    if _calls_made is None:
        _calls_made = _Calls()
    return _calls_made


def _pull(number: int, controller: Any) -> None:
    outgoing = _outgoing.get(int(number))
    if outgoing is None:  # pruned, or its fetch already failed
        controller.error(globals_.Error.new("the request body is no longer being sent"))
        return
    outgoing.pulls += 1
    if outgoing.chunks:
        controller.enqueue(outgoing.chunks.pop(0))
    else:
        outgoing.ended = True
        _outgoing.pop(outgoing.number, None)
        controller.close()


def _cancel(number: int, _reason: Any) -> None:
    _outgoing.pop(int(number), None)


def _piped(number: int, source: Any, _reason: Any) -> None:
    """The pipe of a client's stream failed: through the client's stream (it is errored:
    its ``closed`` rejects) or through fetch giving the body up (the pipe cancelled the
    client's stream, which is then closed)."""
    if int(number) not in _outgoing:
        return  # its fetch settled already
    try:
        reader = source.getReader()
    except JsException:
        return
    reader.closed.catch(_calls().client_failed.bind(None, number))


def _client_failed(number: int, error: Any) -> None:
    outgoing = _outgoing.get(int(number))
    if outgoing is None:
        return
    outgoing.client_error = str(getattr(error, "message", None) or error)
    if outgoing.abort is not None:
        outgoing.abort.abort(error)


def _ignore(_reason: Any) -> None:
    return None


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
