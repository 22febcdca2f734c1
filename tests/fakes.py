"""Fakes of the gateway's ports, so the whole request path runs on CPython.

The store does what the Durable Object does (load rows, ``apply``, write back) with an
injected clock; the origin records what reached it and answers as a test tells it.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from edge_limiter.core.config import parse_config
from edge_limiter.core.errors import BodyReadError
from edge_limiter.core.http.messages import BytesBody, Client, Headers, Request, Response
from edge_limiter.core.idempotency.protocol import apply_stored
from edge_limiter.core.keystore import KeyStore
from edge_limiter.gateway import (
    Gateway,
    OriginRequest,
    OriginTimeoutError,
    OriginUnreachableError,
    Services,
)

EPOCH_MS = 1_700_000_000_000


class FakeClock:
    """Integer milliseconds that move only when a test says so."""

    def __init__(self, now: int = EPOCH_MS) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class FakeSleep:
    """The retries' backoff on the fake clock: waiting moves time, nothing sleeps."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(round(seconds * 1000))
        await asyncio.sleep(0)


class MemoryBreakers:
    """The origins' shared breakers (Durable Objects) in a dict: the real sync step."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.calls: list[str] = []
        self.failing = False

    async def call_sync(self, name: str, payload: str) -> str:
        from edge_limiter.core.resilience.shared import (
            SyncCall,
            apply_sync,
            decode_shared,
            encode_shared,
            state_to_json,
        )

        self.calls.append(name)
        if self.failing:
            raise RuntimeError("breaker Durable Object unreachable")
        shared = apply_sync(SyncCall.from_json(payload), decode_shared(self.states.get(name)))
        self.states[name] = encode_shared(shared)
        return state_to_json(shared.breaker)

    async def sync(self, name: str, payload: str) -> str:
        return await self.call_sync(name, payload)


class MemoryControl:
    """The Control Durable Object in memory: the real steps, on the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.stored: dict[str, str] = {}
        self.calls: list[str] = []

    async def overrides(self, payload: str) -> str:
        from edge_limiter.core.control import apply_overrides_call

        self.calls.append("overrides")
        answer, stored = apply_overrides_call(payload, self.stored.get("o"), self.clock.now)
        if stored is not None:
            self.stored["o"] = stored
        return answer

    async def stats(self, payload: str) -> str:
        from edge_limiter.core.control import apply_stats_call

        self.calls.append("stats")
        answer, stored = apply_stats_call(payload, self.stored.get("s"), self.clock.now)
        if stored is not None:
            self.stored["s"] = stored
        return answer


class SqliteSql:
    """The Durable Object SQL API over the standard library's sqlite3 (one database)."""

    def __init__(self, path: str = ":memory:") -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.statements: list[str] = []

    def run(self, query: str, *args: Any) -> None:
        self.statements.append(query)
        self.db.execute(query, args)

    def rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        self.statements.append(query)
        return [dict(row) for row in self.db.execute(query, args)]


class MemoryStore:
    """Durable Objects in a dict: one :class:`KeyStore` over its own SQLite per object name,
    exactly the step the real object runs."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.objects: dict[str, KeyStore] = {}
        self.calls: list[str] = []

    async def call(self, name: str, payload: str, timeout_ms: int = 0) -> str:
        self.calls.append(name)
        store = self.objects.get(name)
        if store is None:
            store = self.objects[name] = KeyStore(SqliteSql())
        return store.decide(payload, self.clock.now)


class FailingStore:
    async def call(self, name: str, payload: str, timeout_ms: int = 0) -> str:
        raise RuntimeError("Durable Object reset")


class HangingStore:
    """Never answers: the port's timeout (as the platform's timer would) ends the wait."""

    async def call(self, name: str, payload: str, timeout_ms: int = 0) -> str:
        await asyncio.wait_for(asyncio.Event().wait(), timeout_ms / 1000 if timeout_ms else None)
        raise AssertionError("unreachable")


class MemoryKV:
    """Workers KV in a dict, with expiry on the fake clock; ``failing`` makes it throw."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.values: dict[str, tuple[bytes, int]] = {}
        self.gets: list[str] = []
        self.puts: list[tuple[str, int]] = []
        self.deletes: list[str] = []
        self.failing = False

    async def get(self, key: str) -> bytes | None:
        self.gets.append(key)
        if self.failing:
            raise RuntimeError("KV GET failed: 500")
        value = self.values.get(key)
        if value is None or value[1] <= self.clock.now:
            return None
        return value[0]

    async def put(self, key: str, value: bytes, ttl_s: int) -> None:
        if self.failing:
            raise RuntimeError("KV PUT failed: 429 too many writes")
        assert ttl_s >= 60, "KV refuses an expirationTtl under 60 s"
        assert len(key.encode()) <= 512, "KV refuses keys over 512 bytes"
        self.puts.append((key, ttl_s))
        self.values[key] = (value, self.clock.now + ttl_s * 1000)

    async def delete(self, key: str) -> None:
        if self.failing:
            raise RuntimeError("KV DELETE failed: 500")
        self.deletes.append(key)
        self.values.pop(key, None)


class MemoryIdempotency:
    """The idempotency Durable Objects in a dict: the real protocol step on the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.records: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []
        self.failing = False

    async def call(self, name: str, payload: str, timeout_ms: int = 0) -> str:
        self.calls.append((name, json.loads(payload)["op"]))
        if self.failing:
            raise RuntimeError("Durable Object overloaded")
        answer, new, _idle = apply_stored(payload, self.records.get(name), self.clock.now)
        if new is None:
            self.records.pop(name, None)
        else:
            self.records[name] = new
        return answer


class Deferred:
    """``waitUntil`` for tests: work collected, run when the test says (after the response)."""

    def __init__(self) -> None:
        self.pending: list[Awaitable[Any]] = []

    def defer(self, work: Awaitable[Any]) -> None:
        self.pending.append(work)

    async def run(self) -> int:
        count = 0
        while self.pending:
            await self.pending.pop(0)
            count += 1
        return count


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
    control = MemoryControl(clock)
    services = Services(
        store=store,
        origin=upstream,
        clock=clock,
        log=logs.append,
        cache=kv,
        idempotency=records,
        breakers=breakers,
        control=control,
        admin_token=admin_token,
        secret=(secrets or {}).get,
        random=random.Random(7).random,
        sleep=sleep,
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
