"""The replay itself: each logged request sent through the whole gateway (the simulator's
in-memory Durable Objects, KV and origins) at the time its line says, the origin answering
what the log recorded; the gateway's own decision lines tallied per route.

Where the time goes, and why it is so: the gateway's work per request (canonical form,
route, key, the Durable Object's step, the rate-limit fields, the forward with its
breaker and the shared breaker's sync) is the same code the Worker runs, and costs about
0.1 ms on CPython for a day's log, keys coming and going; this module adds the request's
construction and the tallies (under a tenth of it). The simulator runs the objects
without their codec (their typed steps, which the tests hold to the codec's answers) and
their counters in memory only, and the collector's full passes are made rare
(:func:`collecting_rarely`): the replay's heap is large and long-lived.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from ...core.canonical import canonical_host, canonical_path, runtime_path
from ...core.config import Config, Route
from ...core.errors import AmbiguousRequestError, PathError
from ...core.http.messages import Client, Headers, Request
from ...core.stats import DENYING_EVENTS
from ...testing import OriginCall, Reply, Simulator
from .formats import DECISION_EVENTS, GatewayRecord
from .records import COOKIE, IP, LogRecord
from .report import UNMATCHED, KeyTally, Replayed

#: Requests between two sweeps of the objects the platform would have let go by then.
SWEEP_EVERY = 20_000
#: Young collections (of the middle generation) between two full ones during a replay
#: (CPython's default: 10; see :func:`collecting_rarely`).
FULL_COLLECTION_AFTER = 100
#: Disagreements with the gateway's own decisions shown (with their line numbers).
SHOWN_DISAGREEMENTS = 10
#: Key kinds whose value is a credential: a denied key is shown by its hash.
_SECRET_KINDS = frozenset(("header", "cookie"))
_DENIED = frozenset((*DENYING_EVENTS, "shadow"))


def _secret(name: str) -> str:
    """The Worker's secrets in a replay: their names, never their values."""
    return f"<secret {name}>"


def _needs(route: Route) -> list[tuple[str, str]]:
    """What the route's key is made of, as (part as written, what a log must keep)."""
    needs = []
    for part in route.limits.key.parts:
        if part.kind in ("ip", "country", "asn"):
            needs.append((str(part), part.kind))
        elif part.kind == "header":
            needs.append((str(part), part.name.lower()))
        elif part.kind == "cookie":
            needs.append((str(part), COOKIE))
    return needs


class Replay:
    """One config's replay: :meth:`send` each record in time order, then :attr:`result`."""

    def __init__(self, config: Config, label: str, host: str = "") -> None:
        # Every admission and every denial logged, so each request's decision and key hash
        # are read from the gateway's own line rather than worked out again here.
        logging = dataclasses.replace(config.ops, sample_allowed=1.0, denials_every_ms=0)
        self.config = dataclasses.replace(config, ops=logging)
        self.host = host or _first_host(config)
        self.status = 200
        self.sim = Simulator(
            self.config,
            origin=self._origin,
            secrets=_secret,
            keep_rows=False,
            control=False,
            codec=False,
            start=0,
        )
        self.clock = self.sim._world.clock
        self.logs = self.sim._world.logs
        self.result = Replayed(label)
        for route in config.routes:  # every route reported, in order, also without requests
            self.result.route(route.name)
        self.needs = {route.name: _needs(route) for route in config.routes}
        self.secret_keys = {
            route.name
            for route in config.routes
            if any(part.kind in _SECRET_KINDS for part in route.limits.key.parts)
        }
        self.by_name = {route.name: route for route in config.routes}
        self._synthesized: dict[str, tuple[str, str, str, list[tuple[str, str]]] | None] = {}
        self._sent = 0
        self._replies: dict[int, Reply] = {}

    def _origin(self, call: OriginCall) -> Reply:
        del call
        reply = self._replies.get(self.status)
        if reply is None:  # one per status (a Reply is immutable)
            reply = self._replies[self.status] = Reply(self.status)
        return reply

    async def send(self, record: LogRecord) -> None:
        """Replay one logged request at its time (a gateway line with ``repeats``: that
        many more, at the same time)."""
        for _ in range(1 + (record.repeats if isinstance(record, GatewayRecord) else 0)):
            await self._send(record)

    async def _send(self, record: LogRecord) -> None:
        result = self.result
        at = record.at_ms
        if result.first_ms < 0:
            result.first_ms = at
            self.clock.now = at
        elif at > self.clock.now:
            self.clock.now = at  # a retry's wait may have moved it past this line's time
        result.last_ms = at
        if isinstance(record, GatewayRecord):
            made = self._from_gateway(record)
            if made is None:
                return
            request, route, params = made
        else:
            made_plain = self._request(record)
            if made_plain is None:
                return
            request, route, params = made_plain
        self.status = record.status
        answer = await self.sim.asend(request)
        tally = result.route(route.name if route is not None else UNMATCHED)
        tally.requests += 1
        tally.statuses[answer.status] = tally.statuses.get(answer.status, 0) + 1
        tally.origin_attempts += answer.forwarded
        if answer.forwarded:
            tally.reached_origin += 1
        fields = answer.headers
        if fields.get("x-cache") in ("HIT", "STALE"):
            tally.cache_hits += 1
        if fields.get("idempotent-replayed") == "true":
            tally.replayed += 1
        event, digest = self._decision(route)
        denied = event in _DENIED
        if denied:
            tally.denied += 1
            if event == "shadow":
                tally.shadow += 1
        minute = tally.minutes.get(at // 60_000)
        if minute is None:
            minute = tally.minutes[at // 60_000] = [0, 0]
        minute[denied] += 1
        if digest is not None and route is not None:
            key = tally.keys.get(digest)
            if key is None:
                key = tally.keys[digest] = KeyTally()
            if denied and not key.denied:
                tally.labels[digest] = self._label(record, request, route, params, digest)
            key.count(at, denied)
        if isinstance(record, GatewayRecord) and event is not None:
            self._compare(record, denied)
        # What the simulation recorded (origin calls, object calls) is dropped at once:
        # kept, it would outlive the young collections and make every full one longer.
        self.sim.forget_history()
        self._sent += 1
        if self._sent % SWEEP_EVERY == 0:
            self.sim.evict_idle()

    def _decision(self, route: Route | None) -> tuple[str | None, str | None]:
        """The rate limit's decision on this request, from the gateway's own line."""
        found: tuple[str | None, str | None] = (None, None)
        if route is not None:
            for line in self.logs:
                if line.get("event") in DECISION_EVENTS and line.get("route") == route.name:
                    found = (line["event"], line.get("key_hash"))
        self.logs.clear()
        return found

    def _compare(self, record: GatewayRecord, denied: bool) -> None:
        result = self.result
        if (record.event in _DENIED) == denied:
            result.agreed += 1
            return
        result.disagreed += 1
        if len(result.disagreements) < SHOWN_DISAGREEMENTS:
            said = "denied" if denied else "admitted"
            result.disagreements.append(
                f"line {record.number}: the gateway logged {record.event!r}, the replay {said}"
            )

    def _label(
        self,
        record: LogRecord,
        request: Request,
        route: Route,
        params: dict[str, str],
        digest: str,
    ) -> str:
        """A denied key as the report shows it: the key itself, or its hash when it holds
        a header or cookie (a credential, perhaps) or came from the gateway's log."""
        if isinstance(record, GatewayRecord) or route.name in self.secret_keys:
            return digest
        try:
            return route.limits.key.compute(request, params)
        except AmbiguousRequestError:
            return digest

    # --- requests --------------------------------------------------------------------

    def _request(self, record: LogRecord) -> tuple[Request, Route | None, dict[str, str]] | None:
        """The request a log line describes, as the platform hands it to the Worker, with
        its route; None when its route's key needs what the log does not keep."""
        raw_path, _, query = record.target.partition("?")
        path = runtime_path(raw_path.partition("#")[0] or "/")
        host = record.host or self.host
        config = self.config
        route: Route | None = None
        params: dict[str, str] = {}
        try:
            matched = config.match(
                record.method,
                canonical_host(host, record.scheme),
                canonical_path(path, config.matrix_params),
            )
        except PathError:
            matched = None  # the gateway refuses it (400): sent, to count it as it would
        if matched is not None:
            route, params = matched
            kept = record.kept
            for written, needed in self.needs[route.name]:
                if needed not in kept or (needed == IP and not record.ip):
                    tally = self.result.route(route.name)
                    tally.requests += 1
                    tally.unkeyed[written] = tally.unkeyed.get(written, 0) + 1
                    return None
        headers = [pair for pair in record.headers if pair[0] != "cf-connecting-ip"]
        if record.ip:
            headers.append(("cf-connecting-ip", record.ip))
        request = Request(
            record.method,
            path,
            query.partition("#")[0],
            host,
            record.scheme,
            Headers(headers),
            Client(ip=record.ip, country=record.country, asn=record.asn),
        )
        return request, route, params

    def _from_gateway(
        self, record: GatewayRecord
    ) -> tuple[Request, Route | None, dict[str, str]] | None:
        """A request on the record's route whose key is one-to-one with its hash."""
        route = self.by_name.get(record.route)
        if route is None:
            unknown = self.result.unknown_routes
            unknown[record.route] = unknown.get(record.route, 0) + 1
            return None
        if route.name not in self._synthesized:
            self._synthesized[route.name] = _shape(route, self.host)
        shape = self._synthesized[route.name]
        if shape is None:
            tally = self.result.route(route.name)
            tally.requests += 1
            part = next(str(p) for p in route.limits.key.parts if p.kind in ("country", "asn"))
            tally.unkeyed[part] = tally.unkeyed.get(part, 0) + 1
            return None
        method, host, target, fields = shape
        value = record.key_hash
        ip = _ip_of(value)
        target = target.replace("{key}", value)
        path, _, query = target.partition("?")
        headers = [(name, text.replace("{key}", value)) for name, text in fields]
        headers.append(("cf-connecting-ip", ip))
        request = Request(method, path, query, host, "https", Headers(headers), Client(ip=ip))
        matched = self.config.match(
            method, canonical_host(host, "https"), canonical_path(path, self.config.matrix_params)
        )
        if matched is None or matched[0].name != route.name:
            unknown = self.result.unknown_routes
            unknown[record.route] = unknown.get(record.route, 0) + 1
            return None
        return request, route, matched[1]


def _first_host(config: Config) -> str:
    """A host for lines that do not say theirs: the first route's exact host, if any."""
    for route in config.routes:
        host = route.match.host
        if host and not host.startswith("*"):
            return host
    return "gateway.test"


def _ip_of(digest: str) -> str:
    """An address one-to-one with ``digest`` in its first 64 bits (a unique-local IPv6
    /64: what an ``ip`` key counts by default)."""
    h = hashlib.sha256(digest.encode()).hexdigest()
    return f"fd{h[:2]}:{h[2:6]}:{h[6:10]}:{h[10:14]}::1"


def _shape(route: Route, host: str) -> tuple[str, str, str, list[tuple[str, str]]] | None:
    """A request on ``route`` whose key is made of ``{key}`` (put in every part the key
    names): method, host, path with query, fields. None when a part cannot be made
    (country and ASN cannot carry a hash)."""
    parts = route.limits.key.parts
    if any(part.kind in ("country", "asn") for part in parts):
        return None
    names = {part.name for part in parts if part.kind == "path"}
    segments = []
    pattern = route.match.path
    for segment in pattern.segments:
        if segment.startswith("{") and segment.endswith("}"):
            segments.append("{key}" if segment[1:-1] in names else "x")
        elif segment == "*":
            segments.append("x")
        else:
            segments.append(segment)
    path = "/" + "/".join(segments)
    query = "&".join(f"{part.name}={{key}}" for part in parts if part.kind == "query")
    fields = [(part.name, "{key}") for part in parts if part.kind == "header"]
    cookies = "; ".join(f"{part.name}={{key}}" for part in parts if part.kind == "cookie")
    if cookies:
        fields.append(("cookie", cookies))
    methods = route.match.methods
    method = "GET" if not methods or "GET" in methods else sorted(methods)[0]
    wanted = route.match.host
    if wanted:
        host = "x" + wanted[1:] if wanted.startswith("*") else wanted
    return method, host, path + (f"?{query}" if query else ""), fields


async def replay_all(records: Iterable[LogRecord], runs: list[Replay]) -> None:
    """Every record through every config, in order (with the collector tuned for it, see
    :func:`collecting_rarely`)."""
    with collecting_rarely():
        for record in records:
            for run in runs:
                await run.send(record)


@contextmanager
def collecting_rarely() -> Iterator[None]:
    """The garbage collector's full passes made rarely while a replay runs.

    A replay keeps a large heap that lives long (an object per active key, a tally per
    key) and adds to it with every request, so CPython's full collections (one each time
    a quarter more objects have survived) walk the whole heap over and over, for
    garbage a replay hardly makes: they took a fifth of its time. What exists before the
    replay (the configs, the gateways) is moved out of the collector's way
    (``gc.freeze``), and a full pass comes after ten times as many young ones as by
    default; young collections go on as usual, so short-lived cycles are collected as
    ever. Both are undone after.
    """
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(thresholds[0], thresholds[1], FULL_COLLECTION_AFTER)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
