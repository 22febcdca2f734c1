"""The route table: every route's stages, built once per isolate, and the route stage.

Each route gets its own chain of stages (only those it needs)::

    idempotency -> cache -> rate limit -> upstream

The route stage matches a request to its route and hands it to that chain; a successful
unsafe request then invalidates the cached GET answers it changed. The admin API reads
the table through :class:`~edge_limiter.gateway.admin_calls.RouteView`.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from ..core.caching.invalidation import related_targets
from ..core.canonical import canonical_path
from ..core.config import Config, Route
from ..core.errors import ConfigError, PathError
from ..core.http import problems
from ..core.http.cors import is_preflight
from ..core.http.messages import Headers, Request, Response
from ..core.ratelimit.overrides import Override
from ..core.resilience.breaker import BreakerState
from .cache import Cache
from .exchange import Exchange, Handler, Stage, chain, problem_response
from .idempotency import Idempotency
from .identity import Identify, Identities, refusal
from .operations import Operating
from .ports import Services
from .ratelimit import RateLimit
from .upstream import Upstream

#: RFC 9110 section 9.2.1: methods that change nothing at the origin.
SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS", "TRACE"))
#: The longest a write's answer waits for its cached GET to be removed (then it goes on).
INVALIDATE_WAIT_S = 1.0
#: A route whose own URI's GET may go to an earlier route: matched when it is written.
_MATCH = object()


class RouteTable:
    """The routes and their stages; as a handler, the route stage."""

    def __init__(
        self, config: Config, services: Services, operating: Operating, upstream: Upstream
    ) -> None:
        self.config = config
        self.services = services
        self.operating = operating
        self.upstream = upstream
        self.caches: dict[str, Cache] = {}
        """Each cached route's cache stage, by route name."""
        self.limiters: dict[str, RateLimit] = {}
        """Each route's rate-limit stage, by route name."""
        self.identities = Identities(config, services) if config.auth or config.tiers else None
        """What this isolate knows of callers' identities (None: no route checks one)."""
        self.handlers: dict[str, Handler] = {
            route.name: chain(self._stages(route), upstream) for route in config.routes
        }
        self.invalidates: dict[str, Cache | object | None] = {
            route.name: self._own_target(index, route) for index, route in enumerate(config.routes)
        }
        """By route, the cache a GET of a written URI of it reaches (``None``: none), or
        :data:`_MATCH` where that depends on the URI (an earlier route may take its GETs)."""

    def _stages(self, route: Route) -> list[Stage]:
        """The stages a route's requests walk, in order (only those the route needs)."""
        services, config = self.services, self.config
        limiter = self.limiters[route.name] = RateLimit(route, config, services, self.operating)
        stages: list[Stage] = []
        if route.identity is not None and self.identities is not None:
            # First: nothing is cached, claimed or counted for a caller not yet verified.
            # A rejected request is counted by the route's own limits under its address,
            # then refused (a limiter of its own, so its counts stay apart).
            rejections = RateLimit(route, config, services, self.operating)
            rejected = chain([rejections], refusal(route, config))
            stages.append(Identify(route, config, self.identities, rejected))
        if route.idempotency is not None:
            if services.idempotency is None:
                raise ConfigError(
                    [
                        f"route {route.name!r}.idempotency: needs the IDEMPOTENCY Durable Object binding"
                    ]
                )
            stages.append(
                Idempotency(
                    route,
                    route.idempotency,
                    services.idempotency,
                    services.cache,
                    services,
                    caller_fields=config.caller_fields,
                    by_host=config.forwarded_host or route.match.host is not None,
                )
            )
        if route.cache is not None:
            if services.cache is None:
                raise ConfigError([f"route {route.name!r}.cache: needs the CACHE KV binding"])
            cache = self.caches[route.name] = Cache(
                route,
                route.cache,
                services.cache,
                limiter if route.cache.count_hits else None,
                services,
                caller_fields=config.caller_fields,
            )
            stages.append(cache)
        stages.append(limiter)
        return stages

    def _own_target(self, index: int, route: Route) -> Cache | object | None:
        """What a write to ``route`` invalidates of its own URI, when the table says it
        for every URI: the route's cache, when the route takes GETs and no earlier route
        lists GET among its methods (a route taking every method would have taken the
        write too, so it cannot match the URI)."""
        methods = route.match.methods
        if methods is not None and "GET" not in methods:
            return _MATCH
        for earlier in self.config.routes[:index]:
            if earlier.match.methods is not None and "GET" in earlier.match.methods:
                return _MATCH
        return self.caches.get(route.name)

    # --- the route stage ------------------------------------------------------------------

    async def __call__(self, exchange: Exchange) -> Response:
        request = exchange.request
        exchange.now_ms = self.services.clock.now_ms()
        matched = self.config.match(request.method, exchange.host, exchange.path)
        handler: Handler = self.upstream
        if matched is None:
            if self.config.forward is None:
                return problem_response(problems.not_found(request.method, exchange.path))
            exchange.forward = self.config.forward
        else:
            route, exchange.params = matched
            exchange.route = route
            exchange.forward = route.forward
            # A browser's CORS preflight asks the origin whether it may send the request;
            # it is not the request. Counted, it would take a unit per call and, denied,
            # fail the browser's check, so the page never sees the 429 its real request
            # would get. A route listing OPTIONS counts them.
            if not (
                route.match.methods is None
                and request.body is None  # a preflight has none
                and is_preflight(request.method, request.headers)
            ):
                handler = self.handlers[route.name]
        if self.caches and request.method not in SAFE_METHODS:
            # The cached GETs a write changed are removed even if the writer's client goes
            # away before the answer (else every reader gets the old copy until it expires).
            return await exchange.finish(self._write(handler, exchange))
        return await handler(exchange)

    async def _write(self, handler: Handler, exchange: Exchange) -> Response:
        """An unsafe request, and once it succeeded at the origin, the invalidation of the
        cached GET answers for its URI and those its answer names."""
        # The request as the client sent it: readied for the origin, its fields may be
        # others (origin_headers), and the GETs it retires were keyed on the client's.
        received = replace(exchange.request, headers=Headers(exchange.request.headers.items()))
        response = await handler(exchange)
        if 200 <= response.status < 400 and exchange.reached_origin:
            await self._invalidate(exchange, received, response)
        return response

    async def _invalidate(self, exchange: Exchange, received: Request, response: Response) -> None:
        """An unsafe request to a URI succeeded at the origin: the cached GET answers for it
        and for the URIs on its host that the answer's ``Location`` and
        ``Content-Location`` name (on whichever routes cache their GETs) no longer say what
        the origin holds (RFC 9111 section 4.4). Done before the response, so the client's
        next GET is a miss here; a KV that takes longer than :data:`INVALIDATE_WAIT_S`
        finishes after it."""
        request, host, path = received, exchange.host, exchange.path
        own = self.invalidates[exchange.route.name] if exchange.route is not None else _MATCH
        targets = [(path, request.query)]
        for raw, query in related_targets(request.scheme, host, path, response.headers.items()):
            try:
                targets.append((canonical_path(raw, self.config.matrix_params), query))
            except PathError:
                continue
        works = []
        for target, query in dict.fromkeys(targets):
            if own is not _MATCH and target == path and query == request.query:
                # The route's own URI: its GETs' cache was found when the table was built.
                if isinstance(own, Cache):
                    assert exchange.route is not None
                    routed = self._target(exchange, received, path, exchange.route, exchange.params)
                    works.append(own.invalidate(routed, query))
                continue
            matched = self.config.match("GET", host, target)
            cache = self.caches.get(matched[0].name) if matched is not None else None
            if matched is None or cache is None:
                continue
            routed = self._target(exchange, received, target, *matched)
            works.append(cache.invalidate(routed, query))
        if not works:
            return
        work = asyncio.ensure_future(asyncio.gather(*works))
        try:
            await asyncio.wait_for(asyncio.shield(work), INVALIDATE_WAIT_S)
        except TimeoutError:
            exchange.background.defer(work)

    def _target(
        self,
        exchange: Exchange,
        received: Request,
        path: str,
        route: Route,
        params: dict[str, str],
    ) -> Exchange:
        """An exchange for the GET at ``path`` on ``route`` that a write invalidates: its
        key computed from the request as the client sent it (as the GET's own request
        computed it), for the caller the identity stage verified where the GET's route
        checks the same identity."""
        target = Exchange(
            received, path, exchange.host, self.services.clock.now_ms(), route.forward
        )
        target.background = exchange.background
        target.route, target.params = route, params
        if exchange.route is not None and route.identity == exchange.route.identity:
            target.caller = exchange.caller
        return target

    # --- what the admin API reads (RouteView) -----------------------------------------------

    def cache_scope(self, route: str) -> str | None:
        """What the route's cache keeps its entries per (``None``: it caches nothing)."""
        cache = self.caches.get(route)
        return cache.settings.scope if cache is not None else None

    async def purge(
        self, route: str, host: str, path: str, query: str, scope_key: str | None
    ) -> tuple[str, bool | None]:
        """Forget the route's cached GET answer for this URI (see :meth:`Cache.purge`)."""
        return await self.caches[route].purge(host, path, query, scope_key, look=True)

    def held_units(self, route: str, key: str, override: Override | None, now: int) -> int:
        """The units this isolate's leases on the route's ``key`` still hold."""
        limiter = self.limiters.get(route)
        return limiter.held_units(key, override, now) if limiter is not None else 0

    def adopt_breaker(self, origin: str, shared: BreakerState, now: int) -> None:
        """Take a shared breaker's state into this isolate's copy at once."""
        self.upstream.breakers.take(origin, shared, now)

    def forget_api_key(self, digest: str) -> None:
        """Drop this isolate's memory of the lookup of the API key with this SHA-256."""
        if self.identities is not None:
            self.identities.lookups.forget(digest)
