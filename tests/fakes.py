"""Fakes of the gateway's ports, so the whole request path runs on CPython.

The store does what the Durable Object does (load rows, ``apply``, write back) with an
injected clock; the origin records what reached it and answers as a test tells it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from edge_limiter.core.config import parse_config
from edge_limiter.core.http.messages import BytesBody, Client, Headers, Request, Response
from edge_limiter.core.protocol import StoreRequest, apply
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


class MemoryStore:
    """Durable Objects in a dict: one row table per object name, the real protocol step."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.objects: dict[str, dict[str, list[int]]] = {}
        self.calls: list[str] = []

    async def call(self, name: str, payload: str) -> str:
        self.calls.append(name)
        rows = self.objects.setdefault(name, {})
        result = apply(StoreRequest.from_json(payload), rows, self.clock.now)
        for rid, (state, _idle) in result.writes.items():
            rows[rid] = state
        for rid in result.deletes:
            rows.pop(rid, None)
        return result.response.to_json()


class FailingStore:
    async def call(self, name: str, payload: str) -> str:
        raise RuntimeError("Durable Object reset")


class HangingStore:
    async def call(self, name: str, payload: str) -> str:
        await asyncio.Event().wait()
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
            return await self.respond(request)
        echo = json.dumps({"url": request.url, "method": request.method}).encode()
        return Response(200, Headers([("content-type", "application/json")]), echo)


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
    """A gateway over fakes, with what it logged."""

    gateway: Gateway
    clock: FakeClock
    store: Any
    origin: FakeOrigin
    logs: list[dict[str, Any]]

    def send(self, request: Request) -> Response:
        return asyncio.run(self.gateway.handle(request))

    def events(self, name: str) -> list[dict[str, Any]]:
        return [record for record in self.logs if record.get("event") == name]


def harness(
    *routes: dict[str, Any],
    store: Any = None,
    upstream: FakeOrigin | None = None,
    **top: Any,
) -> Harness:
    """A gateway for ``routes`` (and top-level fields ``top``; ``origin=None`` for none)."""
    clock = FakeClock()
    raw = {"origin": "http://origin.test", "routes": list(routes), **top}
    if raw["origin"] is None:
        raw.pop("origin")
    logs: list[dict[str, Any]] = []
    store = store if store is not None else MemoryStore(clock)
    upstream = upstream if upstream is not None else FakeOrigin()
    services = Services(store=store, origin=upstream, clock=clock, log=logs.append)
    return Harness(Gateway(parse_config(raw), services), clock, store, upstream, logs)


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
