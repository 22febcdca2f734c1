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

from collections.abc import Iterable
from dataclasses import replace

from ..core.caching.conditional import VALIDATORS, freshens, revalidation_fields
from ..core.caching.entry import Entry, is_fresh, revalidating, usable_stale
from ..core.caching.keys import base_key, variant_key
from ..core.caching.policy import Lookup, lookup_decision
from ..core.caching.settings import CacheSettings
from ..core.config import Route
from ..core.errors import BodyReadError
from ..core.http.fields import gateway_fields
from ..core.http.messages import Response
from ..core.keys import CALLER_FIELDS
from .cache_answers import CACHE_HEADER, REVALIDATED, UPDATING, from_entry, judged, not_cached
from .cache_entries import RECENT, Entries
from .collapsing import POLL_FIRST_S, POLL_MAX_S, Collapsing, Leader
from .exchange import Counting, Exchange, Handler, body_broken_response
from .ports import KeyValueStore, Services

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
        self.counting = counting
        """Counts a hit (``count_hits``: the rate limit's count, through its port)."""
        self.services = services
        self.entries = Entries(route.name, settings, kv, services, caller_fields)
        """The route's entries in KV, and this isolate's memory of its writes and purges."""
        self._refreshing: dict[str, int] = {}
        """Entries being fetched again (stale-while-revalidate), with when it started."""
        self.collapsing = Collapsing(services, self.entries)
        """The misses under way and just finished, which requests for the same entry wait for."""

    async def __call__(self, exchange: Exchange, call_next: Handler) -> Response:
        request = exchange.request
        if request.method not in ("GET", "HEAD"):
            return await call_next(exchange)
        request_fields = request.headers.items()
        lookup = lookup_decision(request.method, request_fields, self.settings)
        if lookup.only_if_cached and not lookup.read:
            return not_cached(self.route.name)
        if lookup.bypass:
            response = await call_next(exchange)
            response.headers.set(CACHE_HEADER, "BYPASS")
            return response
        scope_key = self._scope_key(exchange)
        if isinstance(scope_key, Response):
            return scope_key
        base = self._base_key(
            request.method, exchange.host, exchange.path, request.query, scope_key
        )
        return await self._serve(exchange, call_next, lookup, base, request_fields)

    async def _serve(
        self,
        exchange: Exchange,
        call_next: Handler,
        lookup: Lookup,
        base: str,
        request_fields: list[tuple[str, str]],
    ) -> Response:
        """A GET or HEAD the cache may answer (``lookup``) at ``base``: from its entry, from
        the answer of the miss already under way, or from the origin (then stored)."""
        request = exchange.request
        now = exchange.now_ms
        # The client's If-None-Match / If-Modified-Since, judged here on a hit, and on a
        # miss that may be stored (see core.caching.conditional).
        validators = [(n, v) for n, v in request_fields if n.lower() in VALIDATORS]
        stale: Entry | None = None
        generation: str | None = None  # the vary manifest's, once read
        varies: tuple[str, ...] = ()  # the fields the stored answers vary on, once known
        if lookup.read:
            entry, generation, varies = await self.entries.lookup(base, request_fields, now)
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
                return not_cached(self.route.name)
            if entry is not None and usable_stale(entry, now):
                stale = entry
        storing = lookup.write and request.method == "GET"
        known: Entry | None = None
        if lookup.read and storing:
            known = entry
        elif lookup.renew and storing:
            # The client's no-cache: its copy is asked about, never served unasked.
            known, generation, varies = await self.entries.lookup(base, request_fields, now)
        # A stale copy with a validator is asked for conditionally (RFC 9111 section 4.3):
        # a 304 renews it, and its body is not sent again.
        renewable = known if known is not None and now < known.keep_until else None
        key = variant_key(base, varies, request_fields) if varies else base
        # A client that skipped the cache (no-cache, where the route allows it) wants an
        # answer the origin gave after it asked: it never waits for another's. A HEAD
        # waits for a GET's answer, but never fetches one.
        if lookup.read:
            waited, key = await self._follow(
                exchange, key, base, request_fields, validators, lookup=lookup, stale=stale
            )
            if waited is not None:
                return waited
            # A request that goes on after waiting is sent now: its answer is newer than
            # any write or purge that came while it waited, so it may be stored.
            exchange.now_ms = now = self.services.clock.now_ms()
        timeout_ms = exchange.forward.timeout_ms
        leader = (
            self.collapsing.lead(key, base, request_fields, now, timeout_ms) if storing else None
        )
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
        leader: Leader | None,
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
                renewed, stored = await self.entries.renew(
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
                    stored = await self.entries.store(
                        exchange,
                        base,
                        request_fields,
                        response,
                        generation,
                        progress=self.collapsing.progress(leader),
                    )
                except BodyReadError as exc:
                    # Cut off mid-body: nothing is stored, and the client is told, not
                    # sent a truncated copy as if it were whole.
                    self.entries.log_failure("origin_body", exc)
                    return body_broken_response(exchange, self.route.name, response)
                if stored is None:
                    self.collapsing.passed(base, self.services.clock.now_ms())
                elif validators:
                    response = judged(validators, stored, response, now)
            response.headers.set(CACHE_HEADER, "MISS")
            return response
        finally:
            if leader is not None:
                self.collapsing.release(key, leader, stored)

    async def _follow(
        self,
        exchange: Exchange,
        key: str,
        base: str,
        request_fields: list[tuple[str, str]],
        validators: list[tuple[str, str]],
        *,
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
            leader = self.collapsing.leaders.get(key)
            if leader is None or not self.collapsing.waitable(
                leader, base, clock.now_ms(), timeout_ms
            ):
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
                if not leader.done and not self.collapsing.waitable(
                    leader, base, clock.now_ms(), timeout_ms
                ):
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
        if len(self._refreshing) >= RECENT:
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
                await self.entries.renew(
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
                stored = await self.entries.store(
                    again, base, request_fields, response, generation, defer=False, since=asked_at
                )
                if stored is None and response.status < 500:
                    # The origin's answer now is one not to keep (a 404 or 410, no-store,
                    # a cookie): the old copy no longer says what it holds.
                    await self.entries.forget(mark)
        except Exception as exc:  # the client already has its answer
            self.entries.log_failure("revalidate", exc)
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
        return from_entry(
            exchange.request.method, entry, validators, now, label=label, gateway=gateway
        )

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

    def _scope_key(self, exchange: Exchange) -> str | Response | None:
        """The rate-limit key the entry is kept per (``scope = "key"``; a 400 when the
        request gives a part of it twice), else None."""
        return exchange.limit_key() if self.settings.scope == "key" else None

    def _base_key(
        self, method: str, host: str, path: str, query: str, scope_key: str | None
    ) -> str:
        """The KV key of the entry (or vary manifest) for this canonical URI. On a
        ``case_insensitive`` route every spelling of the path is one resource at the
        origin, so one entry (and a write to any spelling invalidates it)."""
        if self.route.match.path.case_insensitive:
            path = path.lower()
        return base_key(
            self.settings,
            route=self.route.name,
            method=method,
            host=host,
            path=path,
            query=query,
            scope_key=scope_key,
        )

    async def purge(
        self, host: str, path: str, query: str, scope_key: str | None, *, look: bool = False
    ) -> tuple[str, bool | None]:
        """Forget the stored GET answer for this canonical host, path and query (and, for
        ``scope = "key"``, this rate-limit key): the next request is a miss. Returns the
        KV key removed and, when asked to ``look`` first, whether an entry stood there
        (as this location's KV sees it). Its variants need no removal: a lookup starts at
        this key, and the next manifest stored there is of a new generation, which reaches
        none of them."""
        base = self._base_key("GET", host, path, query, scope_key)
        return base, await self.entries.purge(base, look=look)

    async def invalidate(self, exchange: Exchange, query: str | None = None) -> None:
        """After an unsafe request to this route's URI (its path, with ``query``: by
        default the request's) succeeded (RFC 9111 section 4.4): the stored answer no
        longer says what the origin holds. A failure is logged."""
        scope_key = self._scope_key(exchange)
        if isinstance(scope_key, Response):
            return
        try:
            asked = exchange.request.query if query is None else query
            await self.purge(exchange.host, exchange.path, asked, scope_key)
        except Exception as exc:  # KV failing: the copy expires on its own
            self.entries.log_failure("delete", exc)
            return
        self.services.log(
            {
                "event": "cache_invalidated",
                "route": self.route.name,
                "method": exchange.request.method,
            }
        )

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
        fields = gateway_fields(failed.headers.items())
        return from_entry(
            exchange.request.method, entry, validators, now, label="STALE", gateway=fields
        )
