"""The cache stage: GET and HEAD responses kept in Workers KV and served at the edge.

Before the rate limit (a hit consumes no quota, unless the route says ``count_hits``): a
fresh entry is answered at once (``X-Cache: HIT`` with its ``Age``; ``304`` when the client's
``If-None-Match`` or ``If-Modified-Since`` says it holds that copy; within the route's
stale-while-revalidate window a stale copy is answered the same way, ``X-Cache:
UPDATING``, and a fresh one fetched after the response). On a miss the request
goes on; if the origin's response may be stored, it is written to KV after the response
is sent (``waitUntil``), never on the request's critical path; other misses of the same
entry meanwhile wait for that answer in the isolate instead of asking the origin again
(request collapsing), and get it as soon as the origin gives it, even if the client whose
request fetches it went away meanwhile (that request is held to the end with
``waitUntil``). KV failures are misses, logged, never errors for the client. The rules
(keys, Cache-Control, Vary, lifetimes) are the pure :mod:`edge_limiter.core.caching`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace

from ..core.caching.conditional import (
    VALIDATORS,
    freshens,
    not_modified,
    not_modified_fields,
    revalidation_fields,
)
from ..core.caching.entry import (
    Entry,
    age_seconds,
    decode_entry,
    encode_entry,
    is_fresh,
    replay_headers,
    revalidating,
    usable_stale,
)
from ..core.caching.keys import base_key, variant_key
from ..core.caching.policy import (
    Lookup,
    Store,
    freshened_entry,
    kv_expiration_ttl,
    lookup_decision,
    manifest_entry,
    response_entry,
    store_decision,
)
from ..core.caching.settings import CacheSettings
from ..core.config import Route
from ..core.errors import BodyReadError, CacheEntryError
from ..core.http import problems
from ..core.http.fields import GATEWAY_FIELD_NAMES, gateway_fields, origin_fields
from ..core.http.messages import Headers, Progress, Response
from ..core.keys import CALLER_FIELDS
from .exchange import Counting, Exchange, Handler, body_broken_response, problem_response
from .ports import KeyValueStore, Services

CACHE_HEADER = "X-Cache"
#: ``X-Cache`` of a stale copy served while a fresh one is fetched (stale-while-revalidate).
UPDATING = "UPDATING"
#: ``X-Cache`` of a stale copy the origin said is still current (a ``304`` to the
#: conditional request the cache sent), served with the fields that ``304`` renewed.
REVALIDATED = "REVALIDATED"
#: KV takes one write per second per key: this isolate skips rewriting a key sooner.
REWRITE_AFTER_MS = 1_000
_RECENT_WRITES = 1_024


#: How long requests for a key whose answer was not stored go to the origin without
#: waiting for each other (Varnish's "hit-for-pass").
PASS_FOR_MS = 60_000


#: A request waiting for another's answer looks again after this long, then twice as
#: long each time, up to :data:`POLL_MAX_S`.
POLL_FIRST_S = 0.005
POLL_MAX_S = 0.05


#: How long a finished fetch's stored answer still answers requests from memory: its KV
#: write lands after the response, and a request meanwhile would miss and ask again.
LINGER_MS = 2_000
#: The most body bytes of such answers held at once.
LINGER_MAX_BYTES = 8 * 1024 * 1024


class _Leader:
    """A miss under way at the origin, and how it ended."""

    __slots__ = (
        "done",
        "failed",
        "finished_at",
        "progress_at",
        "request_fields",
        "started",
        "stored",
    )

    def __init__(self, started: int, request_fields: list[tuple[str, str]]) -> None:
        self.started = started
        self.request_fields = request_fields
        self.progress_at = started
        """When the last part of the answer arrived (its head, then each part of its body)."""
        self.done = False
        self.failed: int | None = None
        """The status when the origins failed it (a 5xx, or no answer: 502/504)."""
        self.finished_at = 0
        self.stored: Entry | None = None


#: Answers that make a stale copy stand in (RFC 5861 section 4, stale-if-error: "an
#: error is any situation that would result in a 500, 502, 503, or 504"), besides
#: origins that could not be reached or timed out.
ERROR_STATUSES = frozenset((500, 502, 503, 504))


class Cache:
    """Serves fresh entries, stores what the origin allows; see the module docstring."""

    def __init__(
        self,
        route: Route,
        settings: CacheSettings,
        kv: KeyValueStore,
        counting: Counting | None,
        services: Services,
        *,
        caller_fields: Iterable[str] = CALLER_FIELDS,
    ) -> None:
        self.route = route
        self.settings = settings
        self.caller_fields = tuple(caller_fields)
        """What an entry kept per rate-limit key varies on besides the origin's ``Vary``."""
        self.kv = kv
        self.counting = counting
        """Counts a hit (``count_hits``: the rate limit's count, through its port)."""
        self.services = services
        self._written: OrderedDict[str, int] = OrderedDict()
        self._purged: OrderedDict[str, int] = OrderedDict()
        """When this isolate last purged each base key (a write, an admin purge): an answer
        the origin gave to a request sent before that is not stored over it."""
        self._refreshing: dict[str, int] = {}
        """Entries being fetched again (stale-while-revalidate), with when it started."""
        self._leaders: dict[str, _Leader] = {}
        """Misses being fetched from the origin, by base key: a request for the same key
        meanwhile waits for that answer instead of asking the origin again."""
        self._lingering: OrderedDict[str, _Leader] = OrderedDict()
        """Finished fetches whose stored answer still answers from memory, oldest first."""
        self._lingering_bytes = 0
        self._passed: OrderedDict[str, int] = OrderedDict()
        """When each base key's answer last turned out not to be stored: requests for it
        go straight on for a while, rather than wait for each other."""

    async def __call__(self, exchange: Exchange, call_next: Handler) -> Response:
        request = exchange.request
        if request.method not in ("GET", "HEAD"):
            return await call_next(exchange)
        request_fields = request.headers.items()
        lookup = lookup_decision(request.method, request_fields, self.settings)
        if lookup.only_if_cached and not lookup.read:
            return self._not_cached()
        if lookup.bypass:
            response = await call_next(exchange)
            response.headers.set(CACHE_HEADER, "BYPASS")
            return response
        scope_key = None
        if self.settings.scope == "key":
            key = exchange.limit_key()
            if isinstance(key, Response):
                return key
            scope_key = key
        base = base_key(
            self.settings,
            route=self.route.name,
            method=request.method,
            host=exchange.host,
            path=self._keyed_path(exchange.path),
            query=request.query,
            scope_key=scope_key,
        )
        now = exchange.now_ms
        # The client's If-None-Match / If-Modified-Since, judged here on a hit, and on a
        # miss that may be stored (see core.caching.conditional).
        validators = [(n, v) for n, v in request_fields if n.lower() in VALIDATORS]
        stale: Entry | None = None
        generation: str | None = None  # the vary manifest's, once read
        varies: tuple[str, ...] = ()  # the fields the stored answers vary on, once known
        if lookup.read:
            entry, generation, varies = await self._lookup(base, request_fields, now)
            if entry is not None and not lookup.accepts(entry, now):
                entry = None  # older than the client takes: a miss
            if entry is not None and is_fresh(entry, now):
                return await self._hit(exchange, entry, validators)
            if entry is not None and revalidating(entry, now) and not lookup.only_if_cached:
                if lookup.write and request.method == "GET":
                    self._revalidate(
                        exchange, base, entry, request_fields, call_next, generation=generation
                    )
                return await self._hit(exchange, entry, validators, UPDATING)
            if lookup.only_if_cached:
                # A stale copy is no answer to it: that is for an origin failing.
                return self._not_cached()
            if entry is not None and usable_stale(entry, now):
                stale = entry
        storing = lookup.write and request.method == "GET"
        known: Entry | None = None
        if lookup.read and storing:
            known = entry
        elif lookup.renew and storing:
            # The client's no-cache: its copy is asked about, never served unasked.
            known, generation, varies = await self._lookup(base, request_fields, now)
        # A stale copy with a validator is asked for conditionally (RFC 9111 section 4.3):
        # a 304 renews it, and its body is not sent again.
        renewable = known if known is not None and now < known.keep_until else None
        leader: _Leader | None = None
        key = variant_key(base, varies, request_fields) if varies else base
        # A client that skipped the cache (no-cache, where the route allows it) wants an
        # answer the origin gave after it asked: it never waits for another's. A HEAD
        # waits for a GET's answer, but never fetches one.
        if lookup.read:
            waited, key = await self._follow(
                exchange,
                key,
                base=base,
                request_fields=request_fields,
                validators=validators,
                lookup=lookup,
                stale=stale,
            )
            if waited is not None:
                return waited
            # A request that goes on after waiting is sent now: its answer is newer than
            # any write or purge that came while it waited, so it may be stored.
            exchange.now_ms = now = self.services.clock.now_ms()
        if storing:
            leader = self._lead(key, base, request_fields, now, exchange.forward.timeout_ms)
        miss = self._miss(
            exchange,
            call_next,
            key,
            base=base,
            request_fields=request_fields,
            validators=validators,
            generation=generation,
            storing=storing,
            stale=stale,
            renewable=renewable,
            leader=leader,
        )
        if leader is None:
            return await miss
        # Others wait for this answer: it is fetched and stored even if this request's
        # client goes away meanwhile (the platform would drop the request).
        return await exchange.finish(miss)

    async def _miss(
        self,
        exchange: Exchange,
        call_next: Handler,
        key: str,
        *,
        base: str,
        request_fields: list[tuple[str, str]],
        validators: list[tuple[str, str]],
        generation: str | None,
        storing: bool,
        stale: Entry | None,
        renewable: Entry | None,
        leader: _Leader | None,
    ) -> Response:
        """The origin's answer to a miss, stored when it may be; as ``leader``, the answer
        the requests for ``key`` meanwhile wait for. With a ``renewable`` stale copy the
        request is conditional, and a ``304`` renews that copy."""
        request = exchange.request
        now = exchange.now_ms
        stored: Entry | None = None
        try:
            if storing and validators:
                # The origin's whole answer fills the cache; the client's condition is
                # judged here against it.
                for name in VALIDATORS:
                    request.headers.delete(name)
            response = await self._ask(exchange, call_next, renewable)
            if renewable is not None and exchange.reached_origin and response.status == 304:
                renewed, stored = await self._renew(
                    exchange, base, request_fields, renewable, response, generation=generation
                )
                return self._answer(
                    exchange, renewed, validators, REVALIDATED, response.headers.items()
                )
            failed = exchange.origin_failed or response.status in ERROR_STATUSES
            if leader is not None and failed:
                leader.failed = response.status
            if stale is not None and failed:
                return self._stale(exchange, stale, response, validators)
            if storing and exchange.reached_origin:
                try:
                    stored = await self._store(
                        exchange,
                        base,
                        request_fields,
                        response,
                        generation,
                        progress=self._progress(leader),
                    )
                except BodyReadError as exc:
                    # Cut off mid-body: nothing is stored, and the client is told, not
                    # sent a truncated copy as if it were whole.
                    self._log_failure("origin_body", exc)
                    return body_broken_response(exchange, self.route.name, response)
                if stored is None:
                    _note(self._passed, base, self.services.clock.now_ms())
                elif validators:
                    response = self._judged(validators, stored, response, now)
            response.headers.set(CACHE_HEADER, "MISS")
            return response
        finally:
            if leader is not None:
                self._release(key, leader, stored)

    # --- request collapsing --------------------------------------------------------------

    def _lead(
        self,
        key: str,
        base: str,
        request_fields: list[tuple[str, str]],
        now: int,
        timeout_ms: int,
    ) -> _Leader | None:
        """Become the request whose answer the others for ``key`` (the base key, or the
        variant once the fields the answers vary on are known) wait for, unless one is
        already under way or the key's last answer was not stored (RFC 9111 section 4: a
        cache may collapse requests; one that cannot store the answer only makes them
        wait)."""
        passed = self._passed.get(base)
        if passed is not None and now - passed < PASS_FOR_MS:
            return None
        current = self._leaders.get(key)
        if current is not None and self._waitable(current, base, now, timeout_ms):
            return None
        self._sweep(now)
        if current is None and len(self._leaders) >= _RECENT_WRITES:
            return None  # that many misses under way: the rest go on as before
        leader = _Leader(now, request_fields)
        self._leaders[key] = leader
        return leader

    def _release(self, key: str, leader: _Leader, stored: Entry | None) -> None:
        """The leader's answer is in (stored, or not): the requests waiting for it see it
        on their next look; a stored one stays for :data:`LINGER_MS`, while its KV write
        is on its way."""
        leader.stored = stored
        leader.finished_at = now = self.services.clock.now_ms()
        leader.done = True
        if self._leaders.get(key) is not leader:
            return
        if stored is None:
            del self._leaders[key]
            return
        before = self._lingering.pop(key, None)
        if before is not None and before.stored is not None:
            self._lingering_bytes -= len(before.stored.body)
        self._lingering[key] = leader
        self._lingering_bytes += len(stored.body)
        self._sweep(now)

    def _sweep(self, now: int) -> None:
        """Forget finished fetches past :data:`LINGER_MS`, and the oldest ones while their
        answers hold more than :data:`LINGER_MAX_BYTES` (oldest first: cheap per call)."""
        lingering = self._lingering
        while lingering:
            key, leader = next(iter(lingering.items()))
            if now - leader.finished_at <= LINGER_MS and self._lingering_bytes <= LINGER_MAX_BYTES:
                return
            del lingering[key]
            self._lingering_bytes -= len(leader.stored.body) if leader.stored else 0
            if self._leaders.get(key) is leader:
                del self._leaders[key]

    def _waitable(self, leader: _Leader, base: str, now: int, timeout_ms: int) -> bool:
        """Whether ``leader``'s answer is still worth waiting for: no write or purge of the
        URI since it was sent, it finished not long ago (or is still coming, with its last
        part within the route's timeout)."""
        if self._purged_since(base, leader.started):
            return False
        if leader.done:
            stored = leader.stored
            return (
                stored is not None
                and now - leader.finished_at <= LINGER_MS
                and is_fresh(stored, now)
            )
        return now - leader.progress_at < timeout_ms + 1_000

    def _progress(self, leader: _Leader | None) -> Progress | None:
        """What the leader's body read reports each part to (a slow body is no dead one)."""
        if leader is None:
            return None
        clock = self.services.clock

        async def heard() -> None:
            leader.progress_at = clock.now_ms()

        return heard

    async def _follow(
        self,
        exchange: Exchange,
        key: str,
        *,
        base: str,
        request_fields: list[tuple[str, str]],
        validators: list[tuple[str, str]],
        lookup: Lookup,
        stale: Entry | None,
    ) -> tuple[Response | None, str]:
        """Wait for the request already fetching this request's answer, and answer from
        what it stored (as a hit: ``X-Cache: HIT``, counted only with ``count_hits``), or
        from the stale copy when the origins failed it. ``None`` when there is no such
        request or its answer is no answer to this one (not stored, purged meanwhile):
        then this request goes to the origin itself, and may lead the fetch of the key
        returned (its own variant, when the answer turned out to vary)."""
        timeout_ms = exchange.forward.timeout_ms
        clock = self.services.clock
        for _ in range(2):  # the base key, then this request's variant of it
            leader = self._leaders.get(key)
            if leader is None or not self._waitable(leader, base, clock.now_ms(), timeout_ms):
                return None, key
            # This request looks on its own timers: awaiting anything the leader resolves
            # would resume it in the leader's request, which the platform refuses (its
            # continuation would be cancelled with that request). Measured on workerd: a
            # request awaiting only an event another sets is cancelled at once as hung
            # (nothing of its own is pending).
            delay_s = POLL_FIRST_S
            while not leader.done:
                await self.services.sleep(delay_s)
                delay_s = min(delay_s * 2, POLL_MAX_S)
                if not leader.done and not self._waitable(leader, base, clock.now_ms(), timeout_ms):
                    return None, key
            exchange.now_ms = now = clock.now_ms()
            entry = leader.stored
            if entry is None:
                if leader.failed is not None and stale is not None:
                    # The origins failed the answer this request waited for: the stale
                    # copy stands in at once (without the leader's rate-limit fields).
                    failed = Response(leader.failed)
                    return self._stale(exchange, stale, failed, validators), key
                return None, key
            if entry.vary:
                mine = variant_key(base, entry.vary, request_fields)
                if mine != variant_key(base, entry.vary, leader.request_fields):
                    if key == mine:
                        return None, key
                    key = mine  # another variant's answer: follow (or lead) this one's
                    continue
            if not is_fresh(entry, now) or not lookup.accepts(entry, now):
                return None, key
            return await self._hit(exchange, entry, validators), key
        return None, key

    @staticmethod
    def _judged(
        validators: list[tuple[str, str]], stored: Entry, response: Response, now: int
    ) -> Response:
        """The origin's answer, or a ``304`` when the copy just stored matches the validators."""
        if not not_modified(validators, stored.status, stored.headers, stored.stored_at, now):
            return response
        out = Headers(not_modified_fields(stored.headers))
        for name, value in gateway_fields(response.headers.items()):
            out.set(name, value)
        origin = response.headers.get("x-origin")
        if origin is not None:
            out.set("X-Origin", origin)
        # It stands for the origin's answer (``native``): its CORS decision stands too.
        return Response(304, out, None, response.native)

    def _revalidate(
        self,
        exchange: Exchange,
        base: str,
        entry: Entry,
        request_fields: list[tuple[str, str]],
        call_next: Handler,
        *,
        generation: str | None,
    ) -> None:
        """Fetch a fresh copy of ``entry`` after the response (once at a time per entry)."""
        mark = (
            variant_key(base, entry.vary, request_fields, generation or "") if entry.vary else base
        )
        now = exchange.now_ms
        started = self._refreshing.get(mark)
        # A refresh still running is not doubled; one that never ended (its work dropped)
        # stops counting once the request would have timed out anyway.
        if started is not None and now - started < exchange.forward.timeout_ms + 1_000:
            return
        if len(self._refreshing) >= _RECENT_WRITES:
            self._refreshing.clear()
        self._refreshing[mark] = now
        exchange.background.defer(
            self._refresh(
                exchange,
                base,
                entry,
                request_fields,
                call_next,
                mark=mark,
                generation=generation,
            )
        )

    async def _refresh(
        self,
        exchange: Exchange,
        base: str,
        entry: Entry,
        request_fields: list[tuple[str, str]],
        call_next: Handler,
        *,
        mark: str,
        generation: str | None,
    ) -> None:
        # The rest of the pipeline, as for a miss: the refresh is rate limited (it is a
        # request to the origin) and goes through the pools, breakers and retries.
        try:
            for name in VALIDATORS:
                exchange.request.headers.delete(name)
            # With count_hits the client's UPDATING answer was counted: that count covers
            # this request to the origin (one unit per client request, as the headers said).
            # Deferred work already: the runtime carries it to its end (``finishing``).
            again = replace(
                exchange,
                reached_origin=False,
                origin_failed=False,
                counted=self.settings.count_hits,
                finishing=True,
            )
            asked_at = self.services.clock.now_ms()
            response = await self._ask(again, call_next, entry)
            if again.reached_origin and response.status == 304:
                again.now_ms = self.services.clock.now_ms()
                await self._renew(
                    again,
                    base,
                    request_fields,
                    entry,
                    response,
                    generation=generation,
                    defer=False,
                    since=asked_at,
                )
            elif again.reached_origin and not (
                again.origin_failed or response.status in ERROR_STATUSES
            ):
                # A failing origin's answer, even one it gives a lifetime, never replaces
                # the copy it failed to refresh: that stays served until its window ends.
                again.now_ms = self.services.clock.now_ms()
                stored = await self._store(
                    again, base, request_fields, response, generation, defer=False, since=asked_at
                )
                if stored is None and response.status < 500:
                    # The origin's answer now is one not to keep (a 404 or 410, no-store,
                    # a cookie): the old copy no longer says what it holds.
                    self._written.pop(mark, None)
                    await self.kv.delete(mark)
        except Exception as exc:  # the client already has its answer
            self._log_failure("revalidate", exc)
        finally:
            self._refreshing.pop(mark, None)

    async def _hit(
        self,
        exchange: Exchange,
        entry: Entry,
        validators: list[tuple[str, str]],
        label: str = "HIT",
    ) -> Response:
        headers: list[tuple[str, str]] = []
        if self.counting is not None:
            counted = await self.counting.count(exchange)
            if isinstance(counted, Response):
                return counted
            headers = counted
        return self._answer(exchange, entry, validators, label, headers)

    def _answer(
        self,
        exchange: Exchange,
        entry: Entry,
        validators: list[tuple[str, str]],
        label: str,
        gateway: list[tuple[str, str]],
    ) -> Response:
        """The client's answer from ``entry`` (``304`` when its validators say it holds
        that copy), with the gateway's own fields for this client (those of ``gateway``:
        its rate-limit state, the origin that renewed it) and ``X-Cache: label``."""
        now = self.services.clock.now_ms() if label == REVALIDATED else exchange.now_ms
        request = exchange.request
        if validators and not_modified(
            validators, entry.status, entry.headers, entry.stored_at, now
        ):
            # The client's copy is current: 304, the body not sent again.
            status = 304
            out = Headers(not_modified_fields(entry.headers))
            out.set("Age", str(age_seconds(entry, now)))
            body = None
        else:
            status = entry.status
            out = Headers(replay_headers(entry, now))
            body = _body_for(request.method, entry, out)
        for name, value in gateway:
            lowered = name.lower()
            if lowered == "x-origin" or lowered in GATEWAY_FIELD_NAMES:
                out.set(name, value)
        out.set(CACHE_HEADER, label)
        return Response(status, out, body)

    async def _ask(
        self, exchange: Exchange, call_next: Handler, renewable: Entry | None
    ) -> Response:
        """The origin's answer: conditional (the copy's validators) when there is a stale
        copy to renew. A ``304`` that is not about that copy (another strong ``ETag``) is
        no answer to pass on: the request is sent again unconditionally, counted once."""
        fields = revalidation_fields(renewable.headers) if renewable is not None else []
        request = exchange.request
        for name, value in fields:
            request.headers.set(name, value)
        response = await call_next(exchange)
        if not fields or response.status != 304 or not exchange.reached_origin:
            return response
        assert renewable is not None
        if freshens(renewable.headers, response.headers.items()):
            return response
        self.services.log({"event": "cache_revalidation_mismatch", "route": self.route.name})
        for name, _ in fields:
            request.headers.delete(name)
        exchange.counted = True
        again = await call_next(exchange)
        for name, value in gateway_fields(response.headers.items()):
            if again.headers.get(name) is None:
                again.headers.set(name, value)  # the counted request's rate-limit state
        return again

    async def _renew(
        self,
        exchange: Exchange,
        base: str,
        request_fields: list[tuple[str, str]],
        entry: Entry,
        response: Response,
        *,
        generation: str | None,
        defer: bool = True,
        since: int | None = None,
    ) -> tuple[Entry, Entry | None]:
        """The stale ``entry`` renewed by the origin's ``304`` (RFC 9111 section 4.3.4):
        the copy to answer with, and the entry stored again (``None``: the ``304`` says
        not to keep it, or the URI was written meanwhile)."""
        now = self.services.clock.now_ms()
        renewed, decision = freshened_entry(
            entry,
            origin_fields(response.headers.items()),
            self.settings,
            now,
            caller_fields=self.caller_fields,
        )
        self.services.log({"event": "cache_revalidated", "route": self.route.name})
        asked = since if since is not None else exchange.now_ms
        if not decision.store or self._purged_since(base, asked):
            return renewed, None
        kept = await self._keep(
            exchange,
            base,
            request_fields,
            renewed,
            decision,
            generation=generation,
            defer=defer,
            sent=asked,
            now=now,
        )
        return renewed, kept

    def _keyed_path(self, path: str) -> str:
        """The canonical path as entries are keyed: on a ``case_insensitive`` route every
        spelling is one resource at the origin, so one entry (and a write to any spelling
        invalidates it)."""
        return path.lower() if self.route.match.path.case_insensitive else path

    async def purge(
        self, host: str, path: str, query: str, scope_key: str | None, *, look: bool = False
    ) -> tuple[str, bool | None]:
        """Forget the stored GET answer for this canonical host, path and query (and, for
        ``scope = "key"``, this rate-limit key): the next request is a miss. Returns the
        KV key removed and, when asked to ``look`` first, whether an entry stood there
        (as this location's KV sees it). Its variants need no removal: a lookup starts at
        this key, and the next manifest stored there is of a new generation, which reaches
        none of them."""
        base = base_key(
            self.settings,
            route=self.route.name,
            method="GET",
            host=host,
            path=self._keyed_path(path),
            query=query,
            scope_key=scope_key,
        )
        self._written.pop(base, None)
        _note(self._purged, base, self.services.clock.now_ms())
        found = (await self.kv.get(base)) is not None if look else None
        await self.kv.delete(base)
        return base, found

    async def invalidate(self, exchange: Exchange, query: str | None = None) -> None:
        """After an unsafe request to this route's URI (its path, with ``query``: by
        default the request's) succeeded (RFC 9111 section 4.4): the stored answer no
        longer says what the origin holds. A failure is logged."""
        scope_key = None
        if self.settings.scope == "key":
            key = exchange.limit_key()
            if isinstance(key, Response):
                return
            scope_key = key
        try:
            asked = exchange.request.query if query is None else query
            await self.purge(exchange.host, exchange.path, asked, scope_key)
        except Exception as exc:  # KV failing: the copy expires on its own
            self._log_failure("delete", exc)
            return
        self.services.log(
            {
                "event": "cache_invalidated",
                "route": self.route.name,
                "method": exchange.request.method,
            }
        )

    def _not_cached(self) -> Response:
        """``504`` for ``only-if-cached`` without a fresh copy (RFC 9111 section 5.2.1.7)."""
        response = problem_response(problems.not_cached(self.route.name))
        response.headers.set(CACHE_HEADER, "MISS")
        return response

    def _stale(
        self,
        exchange: Exchange,
        entry: Entry,
        failed: Response,
        validators: list[tuple[str, str]],
    ) -> Response:
        """The stored copy standing in for origins that all failed (``stale_if_error``),
        or ``304`` when the client's validators say it holds that copy. Its ``Age`` is
        reckoned now, after the time spent on the origins."""
        now = self.services.clock.now_ms()
        self.services.log(
            {"event": "stale_served", "route": self.route.name, "failed_status": failed.status}
        )
        if validators and not_modified(
            validators, entry.status, entry.headers, entry.stored_at, now
        ):
            out = Headers(not_modified_fields(entry.headers))
            out.set("Age", str(age_seconds(entry, now)))
            status, body = 304, None
        else:
            out = Headers(replay_headers(entry, now))
            status, body = entry.status, _body_for(exchange.request.method, entry, out)
        for name, value in gateway_fields(failed.headers.items()):
            out.set(name, value)
        out.set(CACHE_HEADER, "STALE")
        return Response(status, out, body)

    async def _lookup(
        self, base: str, request_fields: list[tuple[str, str]], now: int
    ) -> tuple[Entry | None, str | None, tuple[str, ...]]:
        """The stored answer for this request, the generation of the vary manifest at
        ``base`` (``None``: none stands there) and the fields it names."""
        entry = await self._read(base)
        if entry is None or not entry.manifest:
            return entry, None, ()
        generation = entry.generation
        if now >= entry.expires:
            return None, None, ()
        variant = await self._read(variant_key(base, entry.vary, request_fields, generation))
        if variant is not None and variant.manifest:
            return None, generation, entry.vary
        return variant, generation, entry.vary

    async def _generation(self, base: str, now: int) -> str:
        """The generation of the vary manifest standing at ``base``, or a new one."""
        standing = await self._read(base)
        if standing is not None and standing.manifest and now < standing.expires:
            return standing.generation
        return f"{int(self.services.random() * (1 << 48)):012x}"

    async def _read(self, key: str) -> Entry | None:
        try:
            data = await self.kv.get(key)
        except Exception as exc:  # a KV failure is a miss
            self._log_failure("get", exc)
            return None
        if data is None:
            return None
        try:
            return decode_entry(data)
        except CacheEntryError as exc:
            self._log_failure("decode", exc)
            return None

    async def _store(
        self,
        exchange: Exchange,
        base: str,
        request_fields: list[tuple[str, str]],
        response: Response,
        generation: str | None,
        *,
        defer: bool = True,
        since: int | None = None,
        progress: Progress | None = None,
    ) -> Entry | None:
        """Store ``response`` if it may be (written after the response, unless not
        ``defer``: already there); the entry, if any. A response that varies goes under
        the vary manifest's ``generation`` (``None``: not read; a new one if none stands).
        Not stored when this isolate purged the URI after the request was sent (``since``,
        by default when it arrived): a write done meanwhile must not be undone by the
        answer of a read that started before it (RFC 9111 section 4.4)."""
        now = exchange.now_ms
        if self._purged_since(base, since if since is not None else now):
            return None
        response_fields = origin_fields(response.headers.items())
        decision = store_decision(
            response.status,
            response_fields,
            None,
            self.settings,
            now,
            caller_fields=self.caller_fields,
        )
        if not decision.store:
            return None
        # A body of unknown length is measured as it is read, never held past max_bytes: a
        # larger one is not stored and goes to the client streamed.
        body = await response.read_body_at_most(self.settings.max_bytes, progress)
        if body is None:
            return None
        decision = replace(decision, must_measure=False)
        entry = response_entry(decision, response.status, response_fields, body, now)
        sent = since if since is not None else now
        return await self._keep(
            exchange,
            base,
            request_fields,
            entry,
            decision,
            generation=generation,
            defer=defer,
            sent=sent,
            now=now,
        )

    async def _keep(
        self,
        exchange: Exchange,
        base: str,
        request_fields: list[tuple[str, str]],
        entry: Entry,
        decision: Store,
        *,
        generation: str | None,
        defer: bool,
        sent: int,
        now: int,
    ) -> Entry | None:
        """Write ``entry`` (with its vary manifest, when it varies) after the response,
        unless not ``defer``; ``entry``, or ``None`` when it cannot be encoded."""
        writes: list[tuple[str, bytes]] = []
        try:
            if decision.vary:
                if generation is None:
                    generation = await self._generation(base, now)
                manifest = manifest_entry(decision, now, generation)
                writes.append((base, encode_entry(manifest)))
                target = variant_key(base, decision.vary, request_fields, generation)
            else:
                target = base
            writes.append((target, encode_entry(entry)))
        except CacheEntryError as exc:
            self._log_failure("encode", exc)
            return None
        writes = [(key, value) for key, value in writes if self._may_write(key, now)]
        if writes:
            ttl = kv_expiration_ttl(entry.expires, now)
            if defer:
                exchange.background.defer(self._write(writes, ttl, base, sent))
            else:
                await self._write(writes, ttl, base, sent)
        return entry

    def _may_write(self, key: str, now: int) -> bool:
        """Whether this isolate may write ``key`` now (KV: one write per second per key)."""
        last = self._written.get(key)
        if last is not None and now - last < REWRITE_AFTER_MS:
            return False
        _note(self._written, key, now)
        return True

    def _purged_since(self, base: str, since: int) -> bool:
        """Whether this isolate purged ``base`` at or after ``since``."""
        purged = self._purged.get(base)
        return purged is not None and purged >= since

    async def _write(
        self, writes: list[tuple[str, bytes]], ttl_s: int, base: str, since: int
    ) -> None:
        """Write an answer's entries (after the response), unless a write or purge of its
        URI came after the request was sent (``since``): the answer may be older than it.
        A purge while the writes were on their way is done again after them, since the
        store may apply the two in either order."""
        written: list[str] = []
        for key, value in writes:
            if self._purged_since(base, since):
                break
            try:
                await self.kv.put(key, value, ttl_s)
                written.append(key)
            except Exception as exc:  # a failed write is only a later miss
                self._log_failure("put", exc)
        if written and self._purged_since(base, since):
            for key in written:
                try:
                    await self.kv.delete(key)
                except Exception as exc:  # the copy expires on its own
                    self._log_failure("delete", exc)

    def _log_failure(self, op: str, exc: BaseException) -> None:
        self.services.log(
            {
                "event": "cache_error",
                "route": self.route.name,
                "op": op,
                "error": f"{type(exc).__name__}: {str(exc)[:200]}",
            }
        )


def _body_for(method: str, entry: Entry, fields: Headers) -> bytes | None:
    """The stored body for a GET; for a HEAD none, and the length a GET's body would have
    (as the origin says it for a HEAD), since ``Content-Length`` is never stored.

    A body stored with a ``Content-Encoding`` is kept as the runtime read it, decoded,
    and encoded again for each client on the way out: its length on the wire is not
    known ahead, so a HEAD says none (as the runtime's own answers do).
    """
    if method == "GET":
        return entry.body or None
    encoding = fields.get("content-encoding")
    if entry.status != 204 and (encoding is None or encoding.strip().lower() == "identity"):
        fields.set("Content-Length", str(len(entry.body)))
    return None


def _note(recent: OrderedDict[str, int], key: str, now: int) -> None:
    """Remember ``key`` at ``now`` among the last :data:`_RECENT_WRITES` keys noted."""
    recent[key] = now
    recent.move_to_end(key)
    while len(recent) > _RECENT_WRITES:
        recent.popitem(last=False)
