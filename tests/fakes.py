"""Fakes of the gateway's ports, so the whole request path runs on CPython.

The store does what the Durable Object does (load rows, ``apply``, write back) with an
injected clock; the origin records what reached it and answers as a test tells it.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from edge_limiter.core.config import parse_config
from edge_limiter.core.errors import BodyReadError
from edge_limiter.core.http.messages import BytesBody, Client, Headers, Request, Response
from edge_limiter.core.ratelimit.protocol import StoreRequest, StoreResponse
from edge_limiter.gateway import (
    Gateway,
    OriginRequest,
    OriginTimeoutError,
    OriginUnreachableError,
    Services,
)
from edge_limiter.testing import (
    Deferred,
    MemoryBreakers,
    MemoryControl,
    MemoryIdempotency,
    MemoryKV,
    MemoryStore,
)
from edge_limiter.testing import InstantSleep as FakeSleep
from edge_limiter.testing import ManualClock as FakeClock


class FailingStore:
    async def call(self, name: str, request: StoreRequest, timeout_ms: int = 0) -> StoreResponse:
        raise RuntimeError("Durable Object reset")


class HangingStore:
    """Never answers: the port's timeout (as the platform's timer would) ends the wait."""

    async def call(self, name: str, request: StoreRequest, timeout_ms: int = 0) -> StoreResponse:
        await asyncio.wait_for(asyncio.Event().wait(), timeout_ms / 1000 if timeout_ms else None)
        raise AssertionError("unreachable")


@dataclass
class Sent:
    """One request as it reached the fake origin."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes
    timeout_ms: int

    @property
    def path(self) -> str:
        after_scheme = self.url.split("://", 1)[1]
        return "/" + after_scheme.split("/", 1)[1].split("?", 1)[0]


Responder = Callable[[OriginRequest], Awaitable[Response]]

#: What the fake origin's responses carry as ``native``, as fetched ones carry the
#: platform's response (the gateway tells the origin's answers from its own by it).
FETCHED = object()


@dataclass
class FakeOrigin:
    """Answers 200 with a JSON echo unless ``respond`` is set; records every request."""

    sent: list[Sent] = field(default_factory=list)
    respond: Responder | None = None

    async def send(self, request: OriginRequest) -> Response:
        body = request.body
        data = body if isinstance(body, bytes) else (await body.read() if body else b"")
        self.sent.append(
            Sent(request.method, request.url, request.headers.items(), data, request.timeout_ms)
        )
        if self.respond is not None:
            # Like the platform's abort signal: no response within the timeout is a timeout.
            try:
                answer = await asyncio.wait_for(self.respond(request), request.timeout_ms / 1000)
            except TimeoutError as exc:
                raise OriginTimeoutError("The operation was aborted due to timeout") from exc
        else:
            echo = json.dumps({"url": request.url, "method": request.method}).encode()
            answer = Response(200, Headers([("content-type", "application/json")]), echo)
        if answer.native is None:
            answer.native = FETCHED  # as the adapter's: the platform's own response
        return answer


def timing_out(_: OriginRequest) -> Awaitable[Response]:
    async def fail() -> Response:
        raise OriginTimeoutError("The operation was aborted due to timeout")

    return fail()


def unreachable(_: OriginRequest) -> Awaitable[Response]:
    async def fail() -> Response:
        raise OriginUnreachableError("connection refused")

    return fail()


def hanging(_: OriginRequest) -> Awaitable[Response]:
    async def wait() -> Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return wait()


#: The client connection of the request running now, when a test gave it one.
_connection: contextvars.ContextVar[Connection | None] = contextvars.ContextVar(
    "connection", default=None
)


class Connection:
    """A client's connection, as workerd treats a request whose client goes away
    (``gone``): from then on, once no work the request handed to ``waitUntil`` is left
    running (nor a hold of it), nothing the request awaits from the platform ever
    completes (its handler is never resumed, and no ``finally`` of it runs); while such
    work runs, the request's I/O goes on (the runtime keeps the request for it). It is
    the request's background too: deferred work starts at once, as on the platform."""

    def __init__(self) -> None:
        self.gone = False
        self.kept: list[asyncio.Future[Any]] = []
        self.closing = False
        """The event loop cancelled a wait that never ends (it is closing): from then on
        every call fails at once, so that the dropped request ends."""

    def defer(self, work: Awaitable[Any]) -> None:
        self.kept.append(asyncio.ensure_future(work))

    def hold(self) -> Callable[[], None]:
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.kept.append(held)
        return lambda: held.set_result(None)

    @property
    def dropped(self) -> bool:
        """Whether the platform dropped the request: its client went away, and no work
        it handed to ``waitUntil`` is left running."""
        return self.gone and all(task.done() for task in self.kept)

    async def passable(self) -> None:
        """Returns once the request's I/O may go on: never, once it was dropped."""
        task = asyncio.current_task()
        # A cancellation asyncio.wait_for swallowed (3.11) still counts.
        if self.closing or (task is not None and task.cancelling()):
            self.closing = True
            raise asyncio.CancelledError
        if self.dropped:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.closing = True
                raise

    async def run(self) -> None:
        """Wait for the deferred work (and the work it deferred)."""
        while not all(task.done() for task in self.kept):
            await asyncio.gather(*self.kept, return_exceptions=True)


class OnPlatform:
    """A port whose calls are the platform's I/O: for a request whose connection was
    dropped (:class:`Connection`) they never complete (nor do those under way then)."""

    def __init__(self, port: Any) -> None:
        self.port = port

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.port, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            connection = _connection.get()
            if connection is None:
                return await attr(*args, **kwargs)
            await connection.passable()
            result = await attr(*args, **kwargs)
            await connection.passable()
            return result

        return call


@dataclass
class Harness:
    """A gateway over fakes, with what it logged and what it left for after the response."""

    gateway: Gateway
    clock: FakeClock
    store: Any
    origin: FakeOrigin
    logs: list[dict[str, Any]]
    kv: MemoryKV
    records: MemoryIdempotency
    breakers: MemoryBreakers
    sleep: FakeSleep
    control: MemoryControl
    background: Deferred = field(default_factory=Deferred)

    def send(self, request: Request, *, flush: bool = True) -> Response:
        """One request; then (by default) the work it deferred, as after a response."""
        response = asyncio.run(self.gateway.handle(request, self.background))
        if flush:
            self.flush()
        return response

    def flush(self) -> int:
        """Run the deferred work (KV writes): what happens after responses are sent."""
        return asyncio.run(self.background.run())

    def connect(self, request: Request) -> tuple[asyncio.Task[Response], Connection]:
        """``request`` from a client that may go away (``connection.gone = True``), started
        (in a running event loop): the task handling it, and its connection."""
        connection = Connection()
        context = contextvars.copy_context()
        context.run(_connection.set, connection)
        handling = self.gateway.handle(request, connection)
        return asyncio.get_running_loop().create_task(handling, context=context), connection

    async def concurrently(self, *requests: Request) -> list[Response]:
        return list(
            await asyncio.gather(*(self.gateway.handle(r, self.background) for r in requests))
        )

    def events(self, name: str) -> list[dict[str, Any]]:
        return [record for record in self.logs if record.get("event") == name]


def harness(
    *routes: dict[str, Any],
    store: Any = None,
    upstream: FakeOrigin | None = None,
    admin_token: str | None = None,
    clock: FakeClock | None = None,
    secrets: dict[str, str] | None = None,
    breakers: MemoryBreakers | None = None,
    control: MemoryControl | None = None,
    verifier: Any = None,
    named_kv: dict[str, Any] | None = None,
    **top: Any,
) -> Harness:
    """A gateway for ``routes`` (and top-level fields ``top``; ``origin=None`` for none).
    Several harnesses given one ``store`` and one ``clock`` (and ``breakers``) are
    isolates of one Worker."""
    clock = clock if clock is not None else FakeClock()
    raw = {"origin": "http://origin.test", "routes": list(routes), **top}
    if raw["origin"] is None:
        raw.pop("origin")
    logs: list[dict[str, Any]] = []
    store = store if store is not None else MemoryStore(clock)
    upstream = upstream if upstream is not None else FakeOrigin()
    kv = MemoryKV(clock)
    records = MemoryIdempotency(clock)
    breakers = breakers if breakers is not None else MemoryBreakers()
    sleep = FakeSleep(clock)
    control = control if control is not None else MemoryControl(clock)
    # Every port's calls are the platform's I/O (see Connection).
    services = Services(
        store=OnPlatform(store),
        origin=OnPlatform(upstream),
        clock=clock,
        log=logs.append,
        cache=OnPlatform(kv),
        idempotency=OnPlatform(records),
        breakers=OnPlatform(breakers),
        control=OnPlatform(control),
        admin_token=admin_token,
        secret=(secrets or {}).get,
        random=random.Random(7).random,
        sleep=sleep,
        verifier=verifier,
        kv=lambda name: OnPlatform((named_kv or {})[name]) if name in (named_kv or {}) else None,
    )
    gateway = Gateway(parse_config(raw), services)
    return Harness(gateway, clock, store, upstream, logs, kv, records, breakers, sleep, control)


def request(
    path: str = "/v1/x",
    method: str = "GET",
    ip: str = "198.51.100.7",
    *,
    query: str = "",
    host: str = "api.test",
    headers: list[tuple[str, str]] | dict[str, str] | None = None,
    body: bytes | None = None,
    country: str = "",
) -> Request:
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    return Request(
        method=method,
        path=path,
        query=query,
        host=host,
        headers=Headers(pairs),
        client=Client(ip=ip, country=country),
        body=BytesBody(body) if body is not None else None,
    )


def body_json(response: Response) -> dict[str, Any]:
    assert isinstance(response.body, bytes)
    return dict(json.loads(response.body))


def answering(
    status: int = 200,
    headers: list[tuple[str, str]] | None = None,
    body: bytes | None = None,
) -> Responder:
    """An origin that answers every request alike; the body counts the requests so far."""
    count = 0

    async def respond(_: OriginRequest) -> Response:
        nonlocal count
        count += 1
        data = body if body is not None else f"answer {count}".encode()
        return Response(status, Headers(list(headers or [])), data)

    return respond


class BrokenBody:
    """A body cut off mid-way (the connection reset or the framing broke)."""

    async def read(self) -> bytes:
        raise BodyReadError("Network connection lost.")

    async def read_at_most(self, limit: int, progress: Any = None) -> bytes | None:
        del limit, progress
        raise BodyReadError("Network connection lost.")


class StreamedBody:
    """A body of unknown length (chunked), as the platform streams it: ``read`` holds it
    all in memory, ``read_at_most`` no more than ``limit``; ``held`` is the most any
    read held, ``whole`` whether one was read whole."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.held = 0
        self.whole = False

    async def read(self) -> bytes:
        self.held = max(self.held, len(self.data))
        self.whole = True
        return self.data

    async def read_at_most(self, limit: int, progress: Any = None) -> bytes | None:
        del progress
        if len(self.data) > limit:
            self.held = max(self.held, limit + 1)
            return None
        return await self.read()


def streaming(data: bytes, status: int = 200, headers: list[tuple[str, str]] | None = None) -> Any:
    """An origin that answers ``status`` with ``data`` streamed, of unknown length; the
    bodies it gave are in ``respond.bodies``."""
    bodies: list[StreamedBody] = []

    async def respond(outgoing: OriginRequest) -> Response:
        del outgoing
        body = StreamedBody(data)
        bodies.append(body)
        return Response(status, Headers(list(headers or [])), body)

    respond.bodies = bodies  # type: ignore[attr-defined]
    return respond


def cut_off(status: int = 200) -> Any:
    """An origin that answers ``status`` with a body that breaks while it is read."""

    async def respond(outgoing: OriginRequest) -> Response:
        del outgoing
        return Response(status, Headers([("content-type", "application/json")]), BrokenBody())

    return respond


#: Where a simulated config's one route sends its requests (:func:`one_route`).
SIM_API = "https://api.example.com"


def one_route(**route: Any) -> dict[str, Any]:
    """A config of one route for the simulator (``r`` on ``/v1/*``, keyed by address, a
    limit far above any test's traffic), in front of :data:`SIM_API`; ``route`` fields are
    laid over it (its limits, algorithm, cache, idempotency, ...)."""
    defaults = {"name": "r", "match": {"path": "/v1/*"}, "limits": "1000/second", "key": "ip"}
    return {"origin": SIM_API, "routes": [{**defaults, **route}]}
