"""The small interfaces the gateway talks to the platform through.

Production implements them over Workers bindings (``edge_limiter.platform``); tests
implement them with fakes, so the whole request path runs on CPython. The Durable
Objects' ports take and return their typed messages (:mod:`edge_limiter.core.objects`):
the binding and the in-memory twin (:mod:`edge_limiter.testing`) both write and read
them through the same codec.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.control import OverridesAnswer, OverridesCall, StatsAnswer, StatsCall
from ..core.http.messages import Body, HeaderMap, Response
from ..core.idempotency.protocol import IdempotencyAnswer, IdempotencyCall
from ..core.identity.verify import SignatureVerifier
from ..core.ratelimit.protocol import StoreRequest, StoreResponse
from ..core.resilience.breaker import BreakerState
from ..core.resilience.shared import SyncCall


class RateLimitStore(Protocol):
    """One key's counters: the rate limiter's Durable Object named ``name``."""

    async def call(self, name: str, request: StoreRequest, timeout_ms: int = 0) -> StoreResponse:
        """Send one store request and return the object's answer (both through their
        codec, :data:`~edge_limiter.core.ratelimit.protocol.DECIDE`).

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
    resend_if_unsent: bool = False
    """Whether the gateway sends the request to another origin should this attempt never
    leave: then the port tells a connection never made (:class:`OriginConnectError`)
    wherever it can, even at some cost (the platform's watches how far fetch takes a
    body in memory, which it then writes in parts)."""


class OriginError(Exception):
    """An origin call failed before a response was known."""


class OriginTimeoutError(OriginError):
    """The origin did not answer in time."""


class OriginUnreachableError(OriginError):
    """The origin failed with no answer after the request may have reached it (a
    connection reset or closed, DNS, TLS, ... when the port cannot tell that the
    connection was never established)."""


class OriginConnectError(OriginUnreachableError):
    """The connection to the origin was never established (refused, DNS, TLS, a connect
    timeout): the request certainly never left, so it may go to another origin whatever
    its method. ``timed_out``: the attempt's timeout ran out while connecting."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class ClientBodyError(OriginError):
    """The client's body broke off while it was being sent to the origin (an upload that
    ended early): the attempt failed through the client, which says nothing about the
    origin."""


class Origin(Protocol):
    """Sends requests to origins."""

    async def send(self, request: OriginRequest) -> Response:
        """The origin's response. Raises :class:`OriginTimeoutError` (no response within
        ``request.timeout_ms``: the port enforces it), :class:`OriginConnectError` (no
        connection was ever made: only when the port knows it for certain),
        :class:`OriginUnreachableError` (any other failure with no answer) or
        :class:`ClientBodyError` (the request's own body failed while it was sent)."""
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
    """One Idempotency-Key's record: the Durable Object named ``name``."""

    async def call(
        self, name: str, call: IdempotencyCall, timeout_ms: int = 0
    ) -> IdempotencyAnswer:
        """Send one idempotency call and return the object's answer; ``timeout_ms`` as
        for :meth:`RateLimitStore.call`."""
        ...


class BreakerStore(Protocol):
    """One origin's shared breaker: the Durable Object named for the origin."""

    async def sync(self, name: str, call: SyncCall) -> BreakerState:
        """Send a breaker sync and return the authoritative state."""
        ...


class ControlStore(Protocol):
    """The Control Durable Object: per-key overrides and the status page's counters."""

    async def overrides(self, call: OverridesCall) -> OverridesAnswer:
        """List, set or remove overrides."""
        ...

    async def stats(self, call: StatsCall) -> StatsAnswer:
        """Add a batch of counters, or read the summary."""
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


#: Work deferred after a response (``waitUntil``) still running after this long is taken
#: as cut off: the platform ends it 30 s after the response, and then it never finishes
#: (no ``finally`` of it runs), so a mark it would clear is cleared by this bound instead.
DEFERRED_GIVEN_UP_MS = 35_000


class Background(Protocol):
    """Work that may finish after the response is sent (``ctx.waitUntil``)."""

    def defer(self, work: Awaitable[Any]) -> None:
        """Keep ``work`` running after the response (and after its client went away)."""
        ...

    def hold(self) -> Callable[[], None]:
        """Keep the request going until the returned function is called, even if its
        client goes away meanwhile: the runtime then completes what the request awaits
        and resumes it, as for deferred work, instead of dropping it."""
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
    verifier: SignatureVerifier | None = None
    """Checks token signatures (the platform's WebCrypto), for ``[auth]`` sources."""
    kv: Callable[[str], KeyValueStore | None] = lambda _name: None
    """The Worker's KV namespace bound as that name (``[tiers] by = "kv:NAME"``), None
    when it has none."""
