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
import json
import random
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.canonical import runtime_path
from ..core.config import Config, parse_config
from ..core.config.sources import apply_environment
from ..core.durations import parse_duration
from ..core.errors import ConfigError
from ..core.explain import explained_client, split_url
from ..core.http.messages import Headers, Request
from ..core.identity.verify import SignatureVerifier
from ..gateway import (
    ClientBodyError,
    Gateway,
    OriginConnectError,
    OriginTimeoutError,
    OriginUnreachableError,
    Services,
)
from .objects import (
    MemoryBreakers,
    MemoryControl,
    MemoryIdempotency,
    MemoryObjects,
    MemoryStore,
    NoRows,
    SqliteSql,
)
from .origins import _ATTEMPTS, Answer, Fields, OriginCall, OriginFunction, Reply, _Origins
from .platform import (
    EPOCH_MS,
    AtOnce,
    Deferred,
    InstantSleep,
    ManualClock,
    MemoryKV,
    _ClientBody,
    epoch_ms,
)
from .signatures import LocalVerifier

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
    "NoRows",
    "OriginCall",
    "OriginConnectError",
    "OriginTimeoutError",
    "OriginUnreachableError",
    "Reply",
    "Simulator",
    "SqliteSql",
    "epoch_ms",
]

#: The client address of a simulated request unless one is given (TEST-NET-2).
DEFAULT_IP = "198.51.100.7"


@dataclass
class _World:
    """What every isolate of one simulated Worker shares."""

    clock: ManualClock
    origins: _Origins
    keep_rows: bool = True
    codec: bool = True
    store: MemoryStore = field(init=False)
    kv: MemoryKV = field(init=False)
    records: MemoryIdempotency = field(init=False)
    breakers: MemoryBreakers = field(init=False)
    control: MemoryControl = field(init=False)
    logs: list[dict[str, Any]] = field(default_factory=list)
    isolates: list[Simulator] = field(default_factory=list)
    bindings: dict[str, MemoryKV] = field(default_factory=dict)
    """The Worker's other KV namespaces by binding (the API keys' records)."""

    def __post_init__(self) -> None:
        self.store = MemoryStore(self.clock, keep_rows=self.keep_rows, codec=self.codec)
        self.kv = MemoryKV(self.clock)
        self.records = MemoryIdempotency(self.clock)
        self.breakers = MemoryBreakers(self.clock, codec=self.codec)
        self.control = MemoryControl(self.clock)

    def forget(self) -> None:
        """Every object's and KV's state gone, in place (the isolates hold these)."""
        self.store.objects.clear()
        self.kv.values.clear()
        for namespace in self.bindings.values():
            namespace.values.clear()
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
    ``keep_rows=False`` keeps the rate limiter's counters in memory only (no SQLite per
    key): what a long run over many keys needs, such as the replay of a day's log.
    ``control=False`` runs without the Control Durable Object, as a Worker without its
    binding does (no overrides, no status-page counters: a replay needs neither, and the
    counters of a day's keys cost more than the replay itself).
    ``codec=False`` hands the rate limiter's and the breakers' objects their calls as typed
    messages, not as the text the runtime carries (the same answers, without writing and
    reading it: for a long run such as the replay; a test's calls keep the codec).
    ``secrets`` are the Worker's secrets and vars (for ``origin_headers`` and an
    ``[auth]`` source's ``secret``: a mapping, or a function of the name); ``admin_token``
    enables the admin API; ``seed`` fixes the retries' jitter. ``verifier`` checks token
    signatures (default: :class:`~.signatures.LocalVerifier`, ``cryptography`` standing in
    for the runtime's WebCrypto). The KV namespace of ``[tiers] by = "kv:NAME"`` is one in
    memory (:meth:`kv`), where the admin API stores API key records.
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
        keep_rows: bool = True,
        control: bool = True,
        verifier: SignatureVerifier | None = None,
        codec: bool = True,
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
        self._control = control
        self._verifier = verifier if verifier is not None else LocalVerifier()
        if _world is None:
            clock = ManualClock(epoch_ms(start))
            latency_ms = (
                origin_latency
                if isinstance(origin_latency, int)
                else parse_duration(origin_latency)
            )
            if latency_ms < 0:
                raise ValueError("origin_latency cannot be negative")
            _world = _World(clock, _Origins(origin, clock, latency_ms), keep_rows, codec)
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
            control=world.control if self._control else None,
            admin_token=self._admin_token,
            secret=self._secrets,
            random=random.Random(self._seed).random,
            sleep=InstantSleep(world.clock),
            verifier=self._verifier,
            kv=self.kv,
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

    async def asend(self, request: Request) -> Answer:
        """A request already in the gateway's terms (a :class:`Request` as the platform
        adapter makes it), and then the work it left: for a tool that makes many at times
        of its own (the replay sets the clock, then sends), without the parsing and checks
        of :meth:`arequest`'s options."""
        try:
            answer = await self._send(request)
        except BaseException:
            self._background.discard()
            raise
        await self._background.run()
        return answer

    def forget_history(self) -> None:
        """Drop what the simulation recorded so far (origin calls, object calls, KV
        reads and writes, log lines), keeping all state: a long run's memory stays
        bounded."""
        world = self._world
        world.origins.calls.clear()
        world.logs.clear()
        world.store.calls.clear()
        world.kv.gets.clear()
        world.kv.puts.clear()
        world.kv.deletes.clear()
        world.records.calls.clear()
        world.breakers.calls.clear()
        world.control.calls.clear()
        world.origins.wait.waits.clear()
        for isolate in world.isolates:
            sleep = isolate.gateway.services.sleep
            if isinstance(sleep, InstantSleep):
                sleep.waits.clear()

    def evict_idle(self) -> int:
        """Let go of what the platform would have by now (rate-limiter objects whose rows
        are all idle, KV values past their expiry); how many objects went."""
        world = self._world
        now = world.clock.now
        expired = [key for key, (_, expires) in world.kv.values.items() if expires <= now]
        for key in expired:
            del world.kv.values[key]
        return world.store.evict_idle()

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
        fields = response.headers
        if isinstance(fields, Headers):  # its names are lower case already
            lines = tuple(fields)
        else:
            lines = tuple((name.lower(), value) for name, value in fields.items())
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
            control=self._control,
            verifier=self._verifier,
            _world=self._world,
        )

    def kv(self, binding: str) -> MemoryKV | None:
        """The Worker's KV namespace bound as ``binding``: the one ``[tiers] by =
        "kv:NAME"`` names (API key records under their key's SHA-256, shared by every
        isolate), None for any other name."""
        tiers = self.config.tiers
        if tiers is None or tiers.by != "kv" or binding != tiers.source:
            return None
        return self._world.bindings.setdefault(binding, MemoryKV(self._world.clock))

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
