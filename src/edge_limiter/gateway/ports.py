"""The small interfaces the gateway talks to the platform through.

Production implements them over Workers bindings (``edge_limiter.platform``); tests
implement them with fakes, so the whole request path runs on CPython.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.http.messages import Body, HeaderMap, Response


class RateLimitStore(Protocol):
    """One key's counters: calls the Durable Object named ``name`` with a JSON payload."""

    async def call(self, name: str, payload: str, timeout_ms: int = 0) -> str:
        """Send one store request (JSON text) and return the answer (JSON text).

        With ``timeout_ms``, raises :class:`TimeoutError` when no answer came in that
        long. The port enforces it with the platform's own timer (no Python timer: on the
        platform, a Python timer still pending when the request ends is never freed)."""
        ...


@dataclass(frozen=True, slots=True)
class OriginRequest:
    """What is sent to an origin: the canonical URL the limiter counted, and the rest.

    ``native`` is the incoming platform request the method, headers and body came from;
    the adapter sends it on as it is when neither its headers nor its body were touched.
    """

    method: str
    url: str
    headers: HeaderMap
    body: bytes | Body | None
    timeout_ms: int
    native: object | None = None
    body_idle_ms: int = 0
    """How long a body the gateway reads may pause between parts before the read fails
    (the route's ``timeout``; 0: ``timeout_ms``)."""


class OriginError(Exception):
    """An origin call failed before a response was known."""


class OriginTimeoutError(OriginError):
    """The origin did not answer in time."""


class OriginUnreachableError(OriginError):
    """The origin could not be reached (DNS, connection refused or reset, TLS, ...)."""


class Origin(Protocol):
    """Sends requests to origins."""

    async def send(self, request: OriginRequest) -> Response:
        """The origin's response; raises :class:`OriginTimeoutError` (no response within
        ``request.timeout_ms``: the port enforces it) or :class:`OriginUnreachableError`."""
        ...


class KeyValueStore(Protocol):
    """An eventually consistent key-value store with expiry (Workers KV)."""

    async def get(self, key: str) -> bytes | None:
        """The value, or ``None`` when absent (raises when the store fails)."""
        ...

    async def put(self, key: str, value: bytes, ttl_s: int) -> None:
        """Store ``value`` for ``ttl_s`` seconds (at least 60 in KV)."""
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key`` (absent or not)."""
        ...


class IdempotencyStore(Protocol):
    """One Idempotency-Key's record: calls the Durable Object named ``name``."""

    async def call(self, name: str, payload: str, timeout_ms: int = 0) -> str:
        """Send one idempotency call (JSON text) and return the answer (JSON text);
        ``timeout_ms`` as for :meth:`RateLimitStore.call`."""
        ...


class BreakerStore(Protocol):
    """One origin's shared breaker: calls the Durable Object named for the origin."""

    async def sync(self, name: str, payload: str) -> str:
        """Send a breaker sync (JSON text) and return the authoritative state (JSON text)."""
        ...


class ControlStore(Protocol):
    """The Control Durable Object: per-key overrides and the status page's counters."""

    async def overrides(self, payload: str) -> str:
        """List, set or remove overrides (JSON text in and out)."""
        ...

    async def stats(self, payload: str) -> str:
        """Add a batch of counters, or read the summary (JSON text in and out)."""
        ...


class Analytics(Protocol):
    """A Workers Analytics Engine dataset."""

    def write(self, blobs: list[str], doubles: list[float], indexes: list[str]) -> None:
        """Write one data point (never blocks the request)."""
        ...


class Clock(Protocol):
    """Wall-clock time in integer milliseconds."""

    def now_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...


class Background(Protocol):
    """Work that may finish after the response is sent (``ctx.waitUntil``)."""

    def defer(self, work: Awaitable[Any]) -> None:
        """Keep ``work`` running after the response, and after its client went away: a
        coroutine, or a task already running that the request awaits too (see
        :meth:`~edge_limiter.gateway.exchange.Exchange.finish`)."""
        ...


LogSink = Callable[[dict[str, Any]], None]
"""Receives one structured record per event worth logging."""


@dataclass(frozen=True, slots=True)
class Services:
    """Everything the gateway needs from the platform, built once per isolate."""

    store: RateLimitStore
    origin: Origin
    clock: Clock
    log: LogSink
    cache: KeyValueStore | None = None
    """Workers KV for cached responses and edge copies of idempotency records."""
    idempotency: IdempotencyStore | None = None
    """The idempotency records' Durable Objects."""
    breakers: BreakerStore | None = None
    """The origins' shared breakers (None: each isolate's own breakers decide alone)."""
    control: ControlStore | None = None
    """Overrides and counters (None: no overrides, no status page counters)."""
    analytics: Analytics | None = None
    """Where each decision is also written as a data point, when configured."""
    admin_token: str | None = None
    """The admin API's bearer secret (None: the admin API is disabled)."""
    secret: Callable[[str], str | None] = lambda _name: None
    """The Worker's secret (or text var) of that name, None when unset (origin_headers)."""
    random: Callable[[], float] = random.random
    """Uniform floats in [0, 1), for the jitter of retries."""
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    """Waits that many seconds (a retry's backoff)."""
