"""Test your gateway config deterministically, on CPython, without a runtime.

:class:`Simulator` runs the whole gateway the Worker runs (canonical paths, routes, keys,
every limit and algorithm, the deny cache, token leases, the response cache,
``Idempotency-Key``, origin pools with breakers, retries and bulkheads, the admin API)
over in-memory stand-ins of its Durable Objects (the same code, over the standard
library's SQLite), of Workers KV and of your origins, on a clock that moves only when you
say. No request waits on real time, and no limit+1 real requests are needed to see a 429
an hour's limit gives::

    from edge_limiter.testing import Simulator

    sim = Simulator.from_file("edge-limiter.toml")
    login = "https://api.example.com/v1/login"
    assert all(sim.request("POST", login, ip="203.0.113.9").status == 200 for _ in range(5))
    denied = sim.request("POST", login, ip="203.0.113.9")
    assert denied.status == 429 and denied.headers["retry-after"] == "60"
    sim.advance("1m")
    assert sim.request("POST", login, ip="203.0.113.9").status == 200

Origins answer ``200`` with a small JSON echo unless ``origin`` says otherwise: a function
of the :class:`OriginCall` that returns a status, a ``(status, headers, body)`` tuple, a
:class:`Reply` (which may come ``after`` a while: later than the attempt's timeout is a
timeout) or ``None`` (the echo), or raises :class:`OriginTimeoutError`,
:class:`OriginUnreachableError` (no answer, the request may have arrived),
:class:`OriginConnectError` (no connection was made: the request never left) or
:class:`ClientBodyError` (the client's upload broke off).

This module is not part of the deployed Worker (the build leaves it out).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import random
import tomllib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

from .core.canonical import runtime_path
from .core.config import Config, parse_config
from .core.config.sources import apply_environment
from .core.control import (
    CONTROL_OBJECT,
    OVERRIDES,
    STATS,
    OverridesAnswer,
    OverridesCall,
    SharedControl,
    StatsAnswer,
    StatsCall,
)
from .core.durations import parse_duration
from .core.errors import ConfigError
from .core.explain import explained_client, split_url
from .core.http.messages import Headers, Request, Response
from .core.idempotency.protocol import CALL, IdempotencyAnswer, IdempotencyCall, RecordStore
from .core.objects import Ans, Method, Req, Sql, call_text
from .core.ratelimit.keystore import KeyStore
from .core.ratelimit.protocol import DECIDE, StoreRequest, StoreResponse
from .core.resilience.breaker import BreakerState
from .core.resilience.shared import SYNC, SharedBreaker, SyncCall
from .gateway import (
    ClientBodyError,
    Gateway,
    OriginConnectError,
    OriginRequest,
    OriginTimeoutError,
    OriginUnreachableError,
    Services,
)

__all__ = [
    "DEFAULT_IP",
    "EPOCH_MS",
    "Answer",
    "AtOnce",
    "ClientBodyError",
    "Deferred",
    "Fields",
    "InstantSleep",
    "ManualClock",
    "MemoryBreakers",
    "MemoryControl",
    "MemoryIdempotency",
    "MemoryKV",
    "MemoryObjects",
    "MemoryStore",
    "OriginCall",
    "OriginConnectError",
    "OriginTimeoutError",
    "OriginUnreachableError",
    "Reply",
    "Simulator",
    "SqliteSql",
    "epoch_ms",
]

Logic = TypeVar("Logic")

#: Where a simulation's clock starts: 2023-11-14T22:13:20Z.
EPOCH_MS = 1_700_000_000_000

#: The client address of a simulated request unless one is given (TEST-NET-2).
DEFAULT_IP = "198.51.100.7"


# --- the platform, in memory -------------------------------------------------------------


class ManualClock:
    """Integer milliseconds that move only when :meth:`advance` is called."""

    def __init__(self, now: int = EPOCH_MS) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class InstantSleep:
    """Waits (a retry's backoff, a request waiting for another's answer) on the manual
    clock: nothing sleeps, and a wait moves the clock to its end, unless it is there
    already (waits that overlap do not add up)."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        end = self.clock.now + round(seconds * 1000)
        await asyncio.sleep(0)
        self.clock.now = max(self.clock.now, end)


class SqliteSql:
    """A Durable Object's SQL API over the standard library's sqlite3 (one database)."""

    def __init__(self, path: str = ":memory:") -> None:
        import sqlite3  # noqa: PLC0415 - CPython only; never imported by the Worker

        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.statements: list[str] = []

    def run(self, query: str, *args: Any) -> None:
        self.statements.append(query)
        self.db.execute(query, args)

    def rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        self.statements.append(query)
        return [dict(row) for row in self.db.execute(query, args)]


class MemoryObjects(Generic[Logic]):
    """Durable Objects of one class in memory: one instance of the object's logic per
    name, over its own SQLite (:class:`SqliteSql`), each call written and read through
    its method's codec (:class:`~edge_limiter.core.objects.Method`) as the runtime's
    binding does: the very logic and codec the deployed objects run."""

    def __init__(self, clock: ManualClock, logic: Callable[[Sql], Logic]) -> None:
        self.clock = clock
        self.logic = logic
        self.objects: dict[str, Logic] = {}

    def object(self, name: str) -> Logic:
        """The object named ``name`` (made on its first call, as the runtime does)."""
        found = self.objects.get(name)
        if found is None:
            found = self.objects[name] = self.logic(SqliteSql())
        return found

    def ask(self, name: str, method: Method[Req, Ans], request: Req) -> Ans:
        """``method`` on the object named ``name``, at the clock's time."""
        text = call_text(self.object(name), method, method.encode(request), self.clock.now)
        return method.decode(text, request)


class MemoryStore(MemoryObjects[KeyStore]):
    """The rate limiter's Durable Objects: a :class:`KeyStore` per object name."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock, KeyStore)
        self.calls: list[str] = []

    async def call(self, name: str, request: StoreRequest, timeout_ms: int = 0) -> StoreResponse:
        del timeout_ms
        self.calls.append(name)
        return self.ask(name, DECIDE, request)


class MemoryKV:
    """Workers KV in a dict, with expiry on the manual clock; ``failing`` makes it throw."""

    def __init__(self, clock: ManualClock) -> None:
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
        if ttl_s < 60:
            raise ValueError("KV refuses an expirationTtl under 60 s")
        if len(key.encode()) > 512:
            raise ValueError("KV refuses keys over 512 bytes")
        self.puts.append((key, ttl_s))
        self.values[key] = (value, self.clock.now + ttl_s * 1000)

    async def delete(self, key: str) -> None:
        if self.failing:
            raise RuntimeError("KV DELETE failed: 500")
        self.deletes.append(key)
        self.values.pop(key, None)


class MemoryIdempotency(MemoryObjects[RecordStore]):
    """The idempotency records' Durable Objects: a :class:`RecordStore` per object name
    (``failing``: every call fails, as an overloaded object's would)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock, RecordStore)
        self.calls: list[tuple[str, str]] = []
        self.failing = False

    async def call(
        self, name: str, call: IdempotencyCall, timeout_ms: int = 0
    ) -> IdempotencyAnswer:
        del timeout_ms
        self.calls.append((name, call.op))
        if self.failing:
            raise RuntimeError("Durable Object overloaded")
        return self.ask(name, CALL, call)


class MemoryBreakers(MemoryObjects[SharedBreaker]):
    """The origins' shared breakers (Durable Objects): a :class:`SharedBreaker` per origin
    (``failing``: every sync fails, as an unreachable object's would)."""

    def __init__(self, clock: ManualClock | None = None) -> None:
        super().__init__(clock or ManualClock(), SharedBreaker)
        self.calls: list[str] = []
        self.failing = False

    async def sync(self, name: str, call: SyncCall) -> BreakerState:
        self.calls.append(name)
        if self.failing:
            raise RuntimeError("breaker Durable Object unreachable")
        return self.ask(name, SYNC, call)


class MemoryControl(MemoryObjects[SharedControl]):
    """The Control Durable Object (overrides, counters): one :class:`SharedControl`."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock, SharedControl)
        self.calls: list[str] = []

    async def overrides(self, call: OverridesCall) -> OverridesAnswer:
        self.calls.append("overrides")
        return self.ask(CONTROL_OBJECT, OVERRIDES, call)

    async def stats(self, call: StatsCall) -> StatsAnswer:
        self.calls.append("stats")
        return self.ask(CONTROL_OBJECT, STATS, call)


def _released() -> None:
    """A hold's release that has nothing to release."""


class Deferred:
    """``ctx.waitUntil`` for tests that run each request in an event loop of its own: work
    collected, run after the response (:meth:`run`). The platform starts it at once
    (:class:`AtOnce`, what the simulator uses)."""

    def __init__(self) -> None:
        self.pending: list[Awaitable[Any]] = []

    def defer(self, work: Awaitable[Any]) -> None:
        self.pending.append(work)

    def hold(self) -> Callable[[], None]:
        """Nothing to hold: no request is dropped here (see ``Exchange.finish``)."""
        return _released

    async def run(self) -> int:
        count = 0
        while self.pending:
            await self.pending.pop(0)
            count += 1
        return count

    def discard(self) -> None:
        """Drop the work not yet run (the request it came from failed)."""
        for work in self.pending:
            close = getattr(work, "close", None)
            if close is not None:
                close()
        self.pending.clear()


class AtOnce(Deferred):
    """``ctx.waitUntil`` as the platform does it: deferred work starts at once, while the
    request that deferred it is still going (a lease refresh runs while the request is at
    the origin), and :meth:`run` waits for what is left. The simulator's background."""

    def defer(self, work: Awaitable[Any]) -> None:
        self.pending.append(asyncio.ensure_future(work))

    def discard(self) -> None:
        """Cancel the work still going (the request it came from failed)."""
        for task in self.pending:
            if isinstance(task, asyncio.Future):
                task.cancel()
        self.pending.clear()


def epoch_ms(start: int | str) -> int:
    """A clock's start: epoch milliseconds, or an ISO 8601 time (UTC unless it says)."""
    if isinstance(start, str) and start.strip().isdigit():
        start = int(start.strip())
    if isinstance(start, int):
        if start < 0:
            raise ValueError(f"start must be at 1970-01-01 or later, got {start}")
        return start
    try:
        moment = datetime.fromisoformat(start.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"start must be epoch milliseconds or an ISO 8601 time like "
            f"'2026-12-01T10:00:00Z', got {start!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    millis = int(moment.timestamp() * 1000)
    if millis < 0:
        raise ValueError(f"start must be at 1970-01-01 or later, got {start!r}")
    return millis


class _ClientBody:
    """A request's body as the platform hands it over: a stream, read only when a stage
    asks for it (then kept), so what the gateway does with it is what it does there."""

    __slots__ = ("_bytes", "data")

    def __init__(self, payload: bytes) -> None:
        self._bytes = payload
        self.data: bytes | None = None

    async def read(self, progress: Any = None) -> bytes:
        del progress
        self.data = self._bytes
        return self._bytes

    async def read_at_most(self, limit: int, progress: Any = None) -> bytes | None:
        if len(self._bytes) > limit:
            return None
        return await self.read(progress)


# --- what a simulation shows ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OriginCall:
    """One request as it reached an origin."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    timeout_ms: int = 0
    """How long the gateway waits for this attempt's answer (its status and fields)."""

    @property
    def path(self) -> str:
        """The URL's path (without the query)."""
        return split_url(self.url)[2]

    def header(self, name: str) -> str | None:
        """The field's value (lines joined with ``, ``), ``None`` when absent."""
        values = [value for key, value in self.headers if key.lower() == name.lower()]
        return ", ".join(values) if values else None


@dataclass(frozen=True, slots=True)
class Reply:
    """An origin's answer, given ``after`` a while on the simulated clock (milliseconds or
    ``"3s"``; by default the simulator's ``origin_latency``). An answer that would come
    after the attempt's timeout never comes: the gateway's wait ends at the timeout."""

    status: int = 200
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = ()
    body: bytes | str = b""
    after: int | str | None = None


class Fields(dict[str, str]):
    """An answer's fields by name, in any case (kept in lower case); a field sent on
    several lines joined with ``, ``."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)

    def get_all(self, name: str) -> list[str]:
        """Every line of the field ``name`` (any case), in order (``Set-Cookie``)."""
        wanted = name.lower()
        return [value for key, value in self.lines if key == wanted]

    @classmethod
    def of(cls, lines: tuple[tuple[str, str], ...]) -> Fields:
        """The fields of ``lines`` (names in lower case), each line kept for :meth:`get_all`."""
        fields = cls()
        for key, value in lines:
            fields[key] = f"{fields[key]}, {value}" if key in fields else value
        fields.lines = lines
        return fields

    lines: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Answer:
    """What the client got."""

    status: int
    headers: Fields
    """By name in any case; a field sent on several lines joined with ``, `` (see
    :meth:`get_all` for ``Set-Cookie``)."""
    body: bytes
    forwarded: int
    """How many attempts at origins this request made, retries included, whether or not
    they reached one (0: answered by the gateway or from its cache)."""
    header_list: tuple[tuple[str, str], ...] = ()
    """The fields as sent, one pair per line."""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def get_all(self, name: str) -> list[str]:
        """Every line of the field ``name`` (any case), in order (as ``headers.get_all``)."""
        return self.headers.get_all(name)

    def json(self) -> Any:
        return json.loads(self.body)


#: What an origin function may return: a status, a body (answered 200), (status, body),
#: (status, headers, body), a :class:`Reply`, or None (the JSON echo).
OriginReply = (
    int
    | str
    | bytes
    | tuple[int, bytes | str]
    | tuple[int, Mapping[str, str] | Iterable[tuple[str, str]], bytes | str]
    | Reply
    | None
)
OriginFunction = Callable[[OriginCall], OriginReply | Awaitable[OriginReply]]


class _Origins:
    """Every origin of the config, answered by one function (or the JSON echo)."""

    def __init__(self, respond: OriginFunction | None, clock: ManualClock, latency_ms: int) -> None:
        self.respond = respond
        self.wait = InstantSleep(clock)
        self.latency_ms = latency_ms
        self.calls: list[OriginCall] = []

    async def send(self, request: OriginRequest) -> Response:
        body = request.body
        data = body if isinstance(body, bytes) else (await body.read() if body else b"")
        call = OriginCall(
            request.method, request.url, tuple(request.headers.items()), data, request.timeout_ms
        )
        self.calls.append(call)
        attempts = _ATTEMPTS.get()
        if attempts is not None:
            attempts[0] += 1
        reply: Any = self.respond(call) if self.respond is not None else None
        if inspect.isawaitable(reply):
            reply = await reply
        if not isinstance(reply, Reply):
            reply = _as_reply(reply, request, len(self.calls))
        after_ms = (
            self.latency_ms
            if reply.after is None
            else reply.after
            if isinstance(reply.after, int)
            else parse_duration(reply.after)
        )
        if request.timeout_ms and after_ms > request.timeout_ms:
            await self.wait(request.timeout_ms / 1000)
            raise OriginTimeoutError("The operation was aborted due to timeout")
        if after_ms > 0:
            await self.wait(after_ms / 1000)
        fields = reply.headers
        pairs = list(fields.items()) if isinstance(fields, Mapping) else list(fields)
        raw = reply.body.encode() if isinstance(reply.body, str) else bytes(reply.body)
        # Marked as fetched, as the platform's answers are: the gateway tells an origin's
        # answer from its own by it (CORS, for one).
        return Response(int(reply.status), Headers(pairs), raw, _FETCHED)


#: What an origin's answer carries as ``native`` (the platform's own response there).
_FETCHED = object()

#: The attempts at origins of the request being answered (each request of a burst runs in
#: its own task, with its own count).
_ATTEMPTS: ContextVar[list[int] | None] = ContextVar("attempts", default=None)


def _as_reply(reply: Any, request: OriginRequest, number: int) -> Reply:
    """What an origin function returned, as a :class:`Reply`."""
    if reply is None:
        echo = {"origin": request.url, "method": request.method, "n": number}
        return Reply(200, [("content-type", "application/json")], json.dumps(echo))
    if isinstance(reply, int) and not isinstance(reply, bool):
        return Reply(reply)
    if isinstance(reply, str | bytes):
        return Reply(200, body=reply)
    if isinstance(reply, tuple) and len(reply) == 2:
        return Reply(reply[0], body=reply[1])
    if isinstance(reply, tuple) and len(reply) == 3:
        return Reply(*reply)
    raise TypeError(
        "an origin function returns None (a JSON echo), a status, a body, (status, body), "
        f"(status, headers, body) or a Reply; got {reply!r}"
    )


@dataclass
class _World:
    """What every isolate of one simulated Worker shares."""

    clock: ManualClock
    origins: _Origins
    store: MemoryStore = field(init=False)
    kv: MemoryKV = field(init=False)
    records: MemoryIdempotency = field(init=False)
    breakers: MemoryBreakers = field(init=False)
    control: MemoryControl = field(init=False)
    logs: list[dict[str, Any]] = field(default_factory=list)
    isolates: list[Simulator] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store = MemoryStore(self.clock)
        self.kv = MemoryKV(self.clock)
        self.records = MemoryIdempotency(self.clock)
        self.breakers = MemoryBreakers(self.clock)
        self.control = MemoryControl(self.clock)

    def forget(self) -> None:
        """Every object's and KV's state gone, in place (the isolates hold these)."""
        self.store.objects.clear()
        self.kv.values.clear()
        self.records.objects.clear()
        self.breakers.objects.clear()
        self.control.objects.clear()


class Simulator:
    """The gateway for ``config`` (a table as in ``edge-limiter.toml``, or a parsed
    :class:`~edge_limiter.core.config.Config`) in one simulated isolate.

    ``origin`` answers every origin's requests (see the module's docstring), each after
    ``origin_latency`` on the simulated clock unless its :class:`Reply` says otherwise
    (milliseconds or ``"50ms"``: requests at once then overlap at the origin, as they do
    on the platform). ``start`` is when the clock starts, in epoch milliseconds or as an
    ISO 8601 time (``"2026-12-01T10:00:00Z"``): windows aligned to the clock
    (``fixed_window``, ``sliding_window``) reset at times that depend on it.
    ``env`` lays the config's ``[env.NAME]`` table over its top level, as the Worker does
    for ``EDGE_LIMITER_ENV = NAME``.
    ``secrets`` are the Worker's secrets and vars (for ``origin_headers``: a mapping, or
    a function of the name); ``admin_token`` enables the admin API; ``seed`` fixes the
    retries' jitter.
    Raises :class:`~edge_limiter.core.errors.ConfigError` for a config the Worker refuses.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | Config,
        *,
        env: str | None = None,
        origin: OriginFunction | None = None,
        origin_latency: int | str = 0,
        secrets: Mapping[str, str] | Callable[[str], str | None] | None = None,
        admin_token: str | None = None,
        start: int | str = EPOCH_MS,
        seed: int = 7,
        _world: _World | None = None,
    ) -> None:
        if isinstance(config, Config):
            if env is not None:
                raise ValueError("env applies to a config table, not a parsed Config")
            self.config = config
        else:
            self.config = parse_config(apply_environment(config, env, "the config", by_var=False))
        self._secrets = secrets if callable(secrets) else dict(secrets or {}).get
        self._admin_token = admin_token
        self._seed = seed
        if _world is None:
            clock = ManualClock(epoch_ms(start))
            latency_ms = (
                origin_latency
                if isinstance(origin_latency, int)
                else parse_duration(origin_latency)
            )
            if latency_ms < 0:
                raise ValueError("origin_latency cannot be negative")
            _world = _World(clock, _Origins(origin, clock, latency_ms))
        self._world = _world
        self._world.isolates.append(self)
        self._build()

    @classmethod
    def from_file(cls, path: str | Path, env: str | None = None, **options: Any) -> Simulator:
        """The config in a TOML file, with ``[env.NAME]`` laid over it as the Worker does
        for ``EDGE_LIMITER_ENV = NAME``."""
        file = Path(path)
        try:
            document = tomllib.loads(file.read_text(encoding="utf-8-sig"))
        except RecursionError:
            # tomllib reads nested arrays and inline tables recursively.
            raise ConfigError([f"{file.name}: arrays or tables nested too deep to read"]) from None
        return cls(apply_environment(document, env, file.name, by_var=False), **options)

    def _build(self) -> None:
        world = self._world
        self._background = AtOnce()
        services = Services(
            store=world.store,
            origin=world.origins,
            clock=world.clock,
            log=world.logs.append,
            cache=world.kv,
            idempotency=world.records,
            breakers=world.breakers,
            control=world.control,
            admin_token=self._admin_token,
            secret=self._secrets,
            random=random.Random(self._seed).random,
            sleep=InstantSleep(world.clock),
        )
        self.gateway = Gateway(self.config, services)

    # --- requests ------------------------------------------------------------------------

    @staticmethod
    def _outside_a_loop(name: str) -> None:
        """The synchronous calls run their own event loop: inside a running one, say
        which ``a``-method to await instead (before any coroutine is made)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise RuntimeError(f"{name}() runs its own event loop: await a{name}() in an async test")

    def request(self, method: str, url: str, **options: Any) -> Answer:
        """One request, and then what it left for after the response (cache writes).

        Options: ``ip`` (the client's address, as Cloudflare's ``CF-Connecting-IP``),
        ``headers`` (a mapping or ``(name, value)`` pairs), ``body`` (bytes or text),
        ``country``, ``continent``, ``asn``, ``latitude``, ``longitude`` (``request.cf``).
        """
        self._outside_a_loop("request")
        return asyncio.run(self.arequest(method, url, **options))

    async def arequest(self, method: str, url: str, **options: Any) -> Answer:
        """:meth:`request` from a running event loop (an ``async`` test, with
        pytest-asyncio or anyio)."""
        try:
            answer = await self._send(self._request(method, url, **options))
        except BaseException:
            self._background.discard()  # an origin function raised: the test's to see
            raise
        await self._background.run()
        return answer

    def burst(self, count: int, method: str, url: str, **options: Any) -> list[Answer]:
        """``count`` identical requests at once (their object calls interleave as the
        runtime's would), then the work they left."""
        self._outside_a_loop("burst")
        return asyncio.run(self.aburst(count, method, url, **options))

    async def aburst(self, count: int, method: str, url: str, **options: Any) -> list[Answer]:
        """:meth:`burst` from a running event loop."""
        requests = [self._request(method, url, **options) for _ in range(count)]
        try:
            answers = await asyncio.gather(*(self._send(r) for r in requests))
        except BaseException:
            self._background.discard()
            raise
        await self._background.run()
        return list(answers)

    def admin(self, method: str, path: str, body: Any = None) -> Answer:
        """A call to the admin API (``path`` under its prefix, query included, e.g.
        ``"/api/keys?route=login&key=203.0.113.9"``) with the ``admin_token`` given;
        ``body`` is sent as JSON, where a call that changes something takes its
        parameters (``admin("POST", "/api/keys/reset", {"route": "login", "key":
        "203.0.113.9"})``)."""
        self._outside_a_loop("admin")
        return asyncio.run(self.aadmin(method, path, body))

    async def aadmin(self, method: str, path: str, body: Any = None) -> Answer:
        """:meth:`admin` from a running event loop."""
        if self._admin_token is None:
            raise ValueError("the admin API needs Simulator(..., admin_token='...')")
        prefix = self.config.ops.admin_prefix
        headers = {"authorization": f"Bearer {self._admin_token}"}
        data = None
        if body is not None:
            headers["content-type"] = "application/json"
            data = json.dumps(body)
        url = f"https://gateway.test{prefix}{path}"
        return await self.arequest(method, url, headers=headers, body=data)

    def health_check(self) -> list[dict[str, Any]]:
        """The Cron Trigger's work: every origin with a health check probed, its breaker
        told; one report per origin."""
        self._outside_a_loop("health_check")
        return asyncio.run(self.ahealth_check())

    async def ahealth_check(self) -> list[dict[str, Any]]:
        """:meth:`health_check` from a running event loop."""
        return await self.gateway.probe_health()

    def _request(
        self,
        method: str,
        url: str,
        *,
        ip: str = DEFAULT_IP,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        body: bytes | str | None = None,
        country: str = "",
        continent: str = "",
        asn: str | int = "",
        latitude: float | None = None,
        longitude: float | None = None,
    ) -> Request:
        scheme, authority, path, query = split_url(url)
        client = explained_client(
            ip=ip,
            country=country,
            continent=continent,
            asn=str(asn),
            latitude="" if latitude is None else str(latitude),
            longitude="" if longitude is None else str(longitude),
        )
        pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or [])
        # Cloudflare sets the client's address itself, whatever the client sent.
        pairs = [(k, v) for k, v in pairs if k.lower() != "cf-connecting-ip"]
        if client.ip:
            pairs.append(("cf-connecting-ip", client.ip))
        data = body.encode() if isinstance(body, str) else body
        framed = {k.lower() for k, _ in pairs} & {"content-length", "transfer-encoding"}
        if data is not None and not framed:
            pairs.append(("content-length", str(len(data))))  # as HTTP clients send it
        # The runtime hands the Worker a field sent on several lines as one value, joined
        # with ", " (a Cookie sent twice is "a=1, b=2" to the gateway).
        joined: dict[str, tuple[str, list[str]]] = {}
        for name, value in pairs:
            joined.setdefault(name.lower(), (name, []))[1].append(value)
        pairs = [(name, ", ".join(values)) for name, values in joined.values()]
        return Request(
            method=method.upper(),
            path=runtime_path(path),
            query=query,
            host=authority,
            scheme=scheme.lower(),
            headers=Headers(pairs),
            client=client,
            body=_ClientBody(data) if data is not None else None,
        )

    async def _send(self, request: Request) -> Answer:
        attempts = [0]
        token = _ATTEMPTS.set(attempts)
        try:
            return await self._answer(request, attempts)
        finally:
            _ATTEMPTS.reset(token)

    async def _answer(self, request: Request, attempts: list[int]) -> Answer:
        response = await self.gateway.handle(request, self._background)
        forwarded = attempts[0]
        body = response.body
        if body is None:
            data = b""
        elif isinstance(body, bytes | bytearray):
            data = bytes(body)
        else:
            data = await body.read()
        lines = tuple((name.lower(), value) for name, value in response.headers.items())
        return Answer(response.status, Fields.of(lines), data, forwarded, lines)

    # --- time and state ------------------------------------------------------------------

    @property
    def now_ms(self) -> int:
        """The simulated clock, in epoch milliseconds."""
        return self._world.clock.now

    def advance(self, duration: int | str) -> None:
        """Move the clock: milliseconds, or a duration such as ``"1m"`` or ``"250ms"``."""
        if isinstance(duration, bool) or not isinstance(duration, int | str):
            raise TypeError(
                f"advance takes milliseconds (an int) or a duration such as '1m', got {duration!r}"
            )
        ms = duration if isinstance(duration, int) else parse_duration(duration)
        if ms < 0:
            raise ValueError("the clock only moves forward")
        self._world.clock.advance(ms)

    def reset(self) -> None:
        """Forget every counter, cached answer, idempotency record, breaker and override,
        in every isolate: a Worker deployed afresh (the clock keeps its time; the origin
        calls and logs so far are kept)."""
        self._world.forget()
        for isolate in self._world.isolates:
            isolate._build()

    def new_isolate(self) -> Simulator:
        """Another isolate of the same Worker: the same objects, KV, origins and clock, but
        its own deny cache, leases and copies of the breakers."""
        return Simulator(
            self.config,
            secrets=self._secrets,
            admin_token=self._admin_token,
            seed=self._seed + len(self._world.isolates),
            _world=self._world,
        )

    @property
    def origin_calls(self) -> list[OriginCall]:
        """Every request that reached an origin, in order."""
        return self._world.origins.calls

    @property
    def logs(self) -> list[dict[str, Any]]:
        """The gateway's log lines (one dict per event), in order."""
        return self._world.logs

    @property
    def object_calls(self) -> int:
        """How many calls the rate limiter's Durable Objects took."""
        return len(self._world.store.calls)
