"""The gateway: owns a request from arrival to response, as a pipeline of stages.

Built once per isolate from the parsed config and the platform's services::

    canonicalize -> route -> idempotency -> cache -> rate limit -> forward

Each route gets its own chain of stages, assembled once; a request only walks the
stages its route needs. Nothing here touches the platform: ``edge_limiter.platform``
converts the runtime's request into a :class:`Request` and the :class:`Response` back.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..core.caching.fields import connection_named
from ..core.caching.invalidation import related_targets
from ..core.canonical import canonical_host, canonical_path
from ..core.config import Config, Forwarding, Route
from ..core.errors import BodyReadError, ConfigError, PathError
from ..core.http import problems
from ..core.http.cors import CorsSettings, exposed, is_preflight, with_vary_origin
from ..core.http.messages import Request, Response
from ..core.http.method_override import (
    BODILESS,
    MAX_FORM_BYTES,
    MethodOverrideError,
    asked_methods,
    is_form,
    is_json,
    overridden_method,
    override_fields,
    without_override_param,
)
from ..core.http.origin_headers import merged, resolve_origin_headers
from .admin import Admin
from .cache import Cache
from .exchange import Exchange, Handler, Stage, chain, problem_response
from .health import pools_of, probe_all
from .idempotency import Idempotency
from .operations import Operating
from .ports import Background, Services
from .ratelimit import RateLimit
from .upstream import Upstream

#: RFC 9110 section 9.2.1: methods that change nothing at the origin.
SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS", "TRACE"))
#: The longest a write's answer waits for its cached GET to be removed (then it goes on).
INVALIDATE_WAIT_S = 1.0


def _zero(length: str | None) -> bool:
    """Whether a ``Content-Length`` says no bytes (``0``, ``00``)."""
    return length is not None and length.isascii() and length.isdigit() and int(length) == 0


#: The longest path and query (together, as the runtime hands them over) a request may
#: have; Cloudflare's edge refuses a URI over 32 KB itself (414), so locally too.
MAX_URI_CHARS = 32 * 1024


class Gateway:
    """Handles requests against one parsed :class:`Config`."""

    def __init__(self, config: Config, services: Services) -> None:
        self.config = config
        self.services = services
        self.operating = Operating(config, services)
        self.caches: dict[str, Cache] = {}
        """Each cached route's cache stage, by route name (filled as routes are built)."""
        self.limiters: dict[str, RateLimit] = {}
        """Each route's rate-limit stage, by route name (filled as routes are built)."""
        self.admin = Admin(config, services, self.operating, self.caches, self.limiters)
        # A secret the config names but the Worker lacks is a config problem (503 saying so).
        self.origin_fields = _origin_fields(config, services)
        """The fields every request to a pool's origins carries, by pool name."""
        forward = Upstream(
            services,
            config.client_ip_header,
            self.origin_fields,
            forwarded_host=config.forwarded_host,
            drop_overrides=config.method_override != "pass",
        )
        self.upstream = forward
        self.admin.adopt_breaker = forward.breakers.take
        self._routes: dict[str, Handler] = {}
        for route in config.routes:
            self._routes[route.name] = chain(self._stages(route), forward)
        self._unmatched: Handler = forward

    def _stages(self, route: Route) -> list[Stage]:
        """The stages a route's requests walk, in order (only those the route needs)."""
        services = self.services
        limiter = RateLimit(route, self.config, services, self.operating)
        self.limiters[route.name] = limiter
        stages: list[Stage] = []
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
                    caller_fields=self.config.caller_fields,
                    by_host=self.config.forwarded_host or route.match.host is not None,
                )
            )
        if route.cache is not None:
            if services.cache is None:
                raise ConfigError([f"route {route.name!r}.cache: needs the CACHE KV binding"])
            cache = Cache(
                route,
                route.cache,
                services.cache,
                limiter if route.cache.count_hits else None,
                services,
                caller_fields=self.config.caller_fields,
            )
            self.caches[route.name] = cache
            stages.append(cache)
        stages.append(limiter)
        return stages

    async def probe_health(self) -> list[dict[str, Any]]:
        """The Cron Trigger's work: probe every origin with a health check, report to its
        shared breaker, and take the verdict into this isolate's own copy at once."""
        return await probe_all(
            self.config, self.services, self.origin_fields, adopt=self.upstream.breakers.take
        )

    async def handle(self, request: Request, background: Background | None = None) -> Response:
        """The response to ``request``; never raises for a bad request or a failing origin."""
        connection = request.headers.get("connection")
        if connection is not None:
            # The fields the client's Connection names are for this hop only (RFC 9110
            # 7.6.1): gone before anything reads the request, so what is counted, cached
            # and keyed is what the origin gets.
            named = connection_named(connection)
            if named:
                request.headers.discard(named)
        if len(request.path) + len(request.query) > MAX_URI_CHARS:
            # Refused before any of it is read: canonical form and parameters cost time in
            # proportion (a 1 MB path took a second of the isolate).
            length = len(request.path) + len(request.query)
            self.services.log({"event": "uri_too_long", "length": length})
            return self.with_cors(
                request.headers.get("origin"),
                problem_response(problems.uri_too_long(MAX_URI_CHARS)),
            )
        try:
            path = canonical_path(request.path, self.config.matrix_params)
        except PathError as exc:
            self.services.log({"event": "bad_path", "reason": exc.without_path()})
            response = problem_response(problems.bad_path(exc.for_client()))
        else:
            admin_path = self.admin.admin_path(path)
            if admin_path is not None:  # never for other origins' pages: no CORS fields
                return await self.admin.handle(request, admin_path, self.services.clock.now_ms())
            response = await self._route(request, path, background)
        return self.with_cors(request.headers.get("origin"), response)

    def with_cors(
        self, origin: str | None, response: Response, path: str | None = None
    ) -> Response:
        """``response`` with the CORS fields for a page at ``origin`` (none asked: as it
        is). The platform adapter gives its own answer to a failure (an internal error)
        through here too, so a page can read it, with the request's ``path`` as received:
        an answer for the admin API never gets them, whatever it is."""
        cors = self.config.cors
        if cors is None or origin is None:
            return response
        if path is not None:
            try:
                admin = self.admin.admin_path(canonical_path(path, self.config.matrix_params))
            except PathError:
                admin = None  # no path of the admin API's: the gateway answers it as bad
            if admin is not None:
                return response
        _allow(cors, origin, response)
        return response

    async def _route(self, request: Request, path: str, background: Background | None) -> Response:
        host = canonical_host(request.host, request.scheme)
        if request.method == "POST" and self.config.method_override != "pass":
            refused = await self._method_override(request, host, path)
            if refused is not None:
                return refused
        if request.body is not None and request.method in BODILESS:
            chunked = request.headers.get("transfer-encoding") is not None
            if chunked and request.headers.get("content-length") is None:
                # A chunked body may still be empty (some clients send an empty one as a
                # single last chunk): read to find out, at most one byte.
                try:
                    empty = await request.read_body_at_most(0) == b""
                except BodyReadError:
                    return problem_response(problems.request_body_broken())
            else:
                empty = not chunked and _zero(request.headers.get("content-length"))
            if empty:
                # An empty body said with "Content-Length: 0" (some clients send it on
                # every request), or as an empty chunked one: the request without it is
                # the same request.
                request.body = None
                request.native = None
                request.headers.delete("content-length")
                request.headers.delete("transfer-encoding")
        if request.body is not None and request.method in BODILESS:
            # The platform's fetch cannot send one: forwarding it would change the request.
            return problem_response(
                problems.bad_request(
                    f"A {request.method} request with a body cannot be forwarded as it came "
                    "(the platform sends GET and HEAD without one); send it without a body.",
                    "body_not_allowed",
                )
            )
        matched = self.config.match(request.method, host, path)
        handler: Handler
        if matched is None:
            if self.config.forward is None:
                return problem_response(problems.not_found(request.method, path))
            exchange = self._exchange(request, path, host, self.config.forward, background)
            handler = self._unmatched
        else:
            route, params = matched
            exchange = self._exchange(request, path, host, route.forward, background)
            exchange.route = route
            exchange.params = params
            if (
                route.match.methods is None
                and request.body is None  # a preflight has none
                and is_preflight(request.method, request.headers)
            ):
                # A browser's CORS preflight asks the origin whether it may send the
                # request; it is not the request. Counted, it would take a unit per call
                # and, denied, fail the browser's check, so the page never sees the 429
                # its real request would get. A route listing OPTIONS counts them.
                handler = self._unmatched
            else:
                handler = self._routes[route.name]
        if self.caches and request.method not in SAFE_METHODS:
            # The cached GETs a write changed are removed even if the writer's client goes
            # away before the answer (else every reader gets the old copy until it expires).
            return await exchange.finish(self._write(handler, exchange, host, background))
        return await handler(exchange)

    async def _write(
        self, handler: Handler, exchange: Exchange, host: str, background: Background | None
    ) -> Response:
        """An unsafe request, and once it succeeded at the origin, the invalidation of the
        cached GET answers for its URI and those its answer names."""
        response = await handler(exchange)
        if 200 <= response.status < 400 and exchange.reached_origin:
            await self._invalidate(exchange.request, exchange.path, host, response, background)
        return response

    async def _invalidate(
        self,
        request: Request,
        path: str,
        host: str,
        response: Response,
        background: Background | None,
    ) -> None:
        """An unsafe request to a URI succeeded at the origin: the cached GET answers for it
        and for the URIs on its host that the answer's ``Location`` and
        ``Content-Location`` name (on whichever routes cache their GETs) no longer say what
        the origin holds (RFC 9111 section 4.4). Done before the response, so the client's
        next GET is a miss here; a KV that takes longer than :data:`INVALIDATE_WAIT_S`
        finishes after it."""
        targets = [(path, request.query)]
        for raw, query in related_targets(request.scheme, host, path, response.headers.items()):
            try:
                targets.append((canonical_path(raw, self.config.matrix_params), query))
            except PathError:
                continue
        works = []
        for target, query in dict.fromkeys(targets):
            matched = self.config.match("GET", host, target)
            if matched is None:
                continue
            route, params = matched
            cache = self.caches.get(route.name)
            if cache is None:
                continue
            exchange = self._exchange(request, target, host, route.forward, background)
            exchange.route = route
            exchange.params = params
            works.append(cache.invalidate(exchange, query))
        if not works:
            return
        work = asyncio.ensure_future(asyncio.gather(*works))
        try:
            await asyncio.wait_for(asyncio.shield(work), INVALIDATE_WAIT_S)
        except TimeoutError:
            if background is not None:
                background.defer(work)

    async def _method_override(self, request: Request, host: str, path: str) -> Response | None:
        """Apply (or refuse) what a POST asks to be taken as; ``None`` to go on.

        A form body is read for its ``_method`` only where it could matter: to refuse it,
        or where the method decides the route. Elsewhere the POST goes on as it came,
        counted as any method would be, and its body is streamed, whatever its size.
        """
        headers = request.headers
        fields = override_fields(headers)
        form: bytes | None = None
        json_body: bytes | None = None
        content_type = headers.get("content-type")
        form_like, json_like = is_form(content_type), is_json(content_type)
        if (
            request.body is not None
            and (form_like or json_like)
            and (self.config.method_override == "refuse" or self.config.method_decides(host, path))
        ):
            try:
                body = await request.read_body_at_most(MAX_FORM_BYTES)
            except BodyReadError:
                return problem_response(problems.request_body_broken())
            if body is None and form_like and content_type and content_type.strip():
                # Only a body labelled a form (among its types) is refused for its size: a
                # JSON body, or one of no type (an upload sent without one), over the
                # bound goes on unread.
                return problem_response(problems.form_too_large(MAX_FORM_BYTES))
            # A field sent twice may say both: read as either.
            json_body = body if json_like else None
            form = body if form_like else None
        asked = asked_methods(fields, request.query, form, json_body)
        if not asked:
            return None
        read = form if form is not None else json_body
        has_body = request.body is not None and (read is None or bool(read))
        try:
            wanted = overridden_method(self.config.method_override, asked, has_body)
        except MethodOverrideError as exc:
            self.services.log({"event": "method_override_refused", "reason": str(exc)})
            return problem_response(problems.bad_request(str(exc), "method_override"))
        if wanted is not None:
            request.sent_as = request.method
            request.method = wanted
            request.native = None  # the runtime's request no longer describes this one
            for name in {name for name, _ in fields}:
                headers.delete(name)
            request.query = without_override_param(request.query)
        return None

    def _exchange(
        self,
        request: Request,
        path: str,
        host: str,
        forward: Forwarding,
        background: Background | None,
    ) -> Exchange:
        exchange = Exchange(request, path, host, self.services.clock.now_ms(), forward)
        if background is not None:
            exchange.background = background
        return exchange


def _origin_fields(config: Config, services: Services) -> dict[str, tuple[tuple[str, str], ...]]:
    """For every pool the config forwards to, the fields its origins get: ``origin_headers``
    with the pool's own ``headers`` over them, secrets resolved. Raises
    :class:`ConfigError` naming every secret the Worker lacks."""
    problems: list[str] = []
    fields: dict[str, tuple[tuple[str, str], ...]] = {}
    for pool in pools_of(config):
        try:
            fields[pool.name] = resolve_origin_headers(
                merged(config.origin_headers, pool.headers), services.secret
            )
        except ConfigError as exc:
            problems.extend(p for p in exc.problems if p not in problems)
    if problems:
        raise ConfigError(problems)
    return fields


def _allow(cors: CorsSettings, origin: str, response: Response) -> None:
    """The CORS fields for a page at ``origin`` (see :mod:`edge_limiter.core.http.cors`)."""
    headers = response.headers
    allowed = headers.get("access-control-allow-origin")
    if allowed is None:
        if response.native is not None:
            return  # the origin's own answer: its CORS decision stands
        allowed = cors.allowed(origin)
        if allowed is None:
            # Not this page; a listed one is told otherwise: the answer varies by Origin.
            vary = with_vary_origin(headers.get("vary"))
            if vary is not None:
                headers.set("Vary", vary)
            return
        headers.set("Access-Control-Allow-Origin", allowed)
        if cors.allow_credentials:
            headers.set("Access-Control-Allow-Credentials", "true")
        if allowed != "*":
            vary = with_vary_origin(headers.get("vary"))
            if vary is not None:
                headers.set("Vary", vary)
    elif allowed.strip() not in ("*", origin):
        return  # the origin's answer allows another page: nothing to expose to this one
    credentials = headers.get("access-control-allow-credentials") == "true"
    fields = exposed(headers.get("access-control-expose-headers"), credentials)
    if fields is not None:
        headers.set("Access-Control-Expose-Headers", fields)
