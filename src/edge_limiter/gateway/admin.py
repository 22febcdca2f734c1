"""The admin API, under the config's ``admin.prefix`` (``/_edge-limiter`` by default).

Enabled only when the ``EDGE_LIMITER_ADMIN_TOKEN`` secret is set; every call needs it as
``Authorization: Bearer <token>`` (or, for a browser, HTTP Basic with it as the password),
compared in constant time. Missing or wrong credentials get 401 and nothing else. Admin
paths are never forwarded and never rate limited by the routes.

A browser sends the operator's Basic credentials with whatever other sites' pages make it
send (a form's POST, a navigation, a ``no-cors`` fetch), so the credentials alone never
decide that a change was asked for (see :mod:`edge_limiter.core.http.cross_site`):

- a call that changes something takes its parameters as the members of an
  ``application/json`` body only (no form or simple request can send one): a query is a
  400, a body of another type (or none) a 415;
- any call but a navigation whose ``Sec-Fetch-Site`` or ``Origin`` names another page
  is a 403, before the credentials are looked at (so no login prompt over that page);
- no answer under the prefix has CORS fields, and every one says it is not to be
  framed, sniffed or embedded by another origin; the status page runs its own script
  only (a nonce of each answer's own) and changes things with same-origin ``fetch``
  calls with JSON bodies.

=========================================  ================================================
``GET  {prefix}/``                         the status page (HTML)
``GET  {prefix}/api/config``               the effective config
``GET  {prefix}/api/explain?method=&url=`` which route, key and Durable Object a request gets
                                           (also ``header=Name: value``, repeated, and
                                           ``ip``, ``country``, ``continent``, ``asn``,
                                           ``latitude``, ``longitude``)
``GET  {prefix}/api/keys?route=&key=``     a key's state, and what its next request would get
``POST {prefix}/api/keys/reset``           forget a key's counters: ``{"route", "key"}``
``POST {prefix}/api/keys/refund``          give a key units back: ``{"route", "key",
                                           "cost"}`` (cost: an integer, the route's by default)
``GET  {prefix}/api/overrides``            list per-key overrides
``POST {prefix}/api/overrides``            set one: ``{"route", "key", "limits" | "exempt",
                                           "reason", "expires_in" | "expires_at"}``
``DELETE {prefix}/api/overrides/{id}``     remove one
``POST {prefix}/api/cache/purge``          forget the cached GET answer for a URL:
                                           ``{"url"}`` (and ``"key"`` on a route cached
                                           per key)
``GET  {prefix}/api/breakers``             every origin's shared breaker
``POST {prefix}/api/breakers/{origin}``    force it: ``{"state"}``, open, closed or auto
``GET  {prefix}/api/stats``                recent decisions by route, most limited keys
=========================================  ================================================
"""

from __future__ import annotations

import base64
import hmac
import json
import secrets
from collections import Counter
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote

from ..core.canonical import admin_path, canonical_host, canonical_path, runtime_path
from ..core.config import Config
from ..core.config.describe import describe_route
from ..core.control import OverridesCall, StatsCall
from ..core.errors import BodyReadError, ExplainError, KeySpecError, PathError
from ..core.explain import (
    EXPLAINED_CLIENT_PARAMS,
    explain,
    explained_client,
    header_line,
    split_url,
)
from ..core.http import bounded_json, cross_site, problems
from ..core.http.fields import REASON_HEADER, rate_limit_headers
from ..core.http.messages import Headers, Request, Response
from ..core.keys import given_key, key_digest, object_name, written_as_labelled
from ..core.ratelimit.decision import Reason
from ..core.ratelimit.leases.policy import lease_reserves, without_reserve
from ..core.ratelimit.overrides import Override, OverrideError, parse_override
from ..core.ratelimit.protocol import StoreRequest, StoreResponse
from ..core.ratelimit.rule import combine
from ..core.resilience.breaker import FORCED, BreakerState, current_phase
from ..core.resilience.shared import SyncCall
from ..core.routing.origins import PLAIN_LABEL
from .exchange import Exchange, problem_response
from .health import pools_of
from .operations import Operating
from .ports import Services

JSON = "application/json"


def _json(status: int, data: Any) -> Response:
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    headers = Headers([("content-type", JSON), ("cache-control", "no-store")])
    return Response(status, headers, body)


#: An override is a few hundred bytes of JSON; nothing larger is read.
MAX_BODY_BYTES = 64 * 1024


def _fail(status: int, title: str, detail: str, code: str) -> Response:
    return problem_response(problems.Problem(status, title, detail, code))


class RouteView(Protocol):
    """What the admin API reads and asks of the routes' stages (the gateway's route table)."""

    def cache_scope(self, route: str) -> str | None:
        """What the route's cache keeps entries per (``None``: it caches nothing)."""
        ...

    async def purge(
        self, route: str, host: str, path: str, query: str, scope_key: str | None
    ) -> tuple[str, bool | None]:
        """Forget the route's cached GET answer for a URI: the KV key, whether one stood."""
        ...

    def held_units(self, route: str, key: str, override: Override | None, now: int) -> int:
        """The units this isolate's leases on the route's key still hold."""
        ...

    def adopt_breaker(self, origin: str, shared: BreakerState, now: int) -> None:
        """Take a shared breaker's state into this isolate's copy at once."""
        ...


class Admin:
    """Answers requests under the admin prefix; see the module docstring. As a stage before
    the route, it takes every request under the prefix."""

    def __init__(
        self, config: Config, services: Services, operating: Operating, routes: RouteView
    ) -> None:
        self.config = config
        self.services = services
        self.operating = operating
        self.routes = routes
        self.prefix = config.ops.admin_prefix

    def __call__(self, exchange: Exchange) -> Awaitable[Response] | None:
        path = self.admin_path(exchange.path)
        if path is None:
            return None
        exchange.private = True
        return self.handle(exchange.request, path, self.services.clock.now_ms())

    def admin_path(self, path: str) -> str | None:
        """The admin API's path for a canonical path under its prefix, in any case and with
        any ``;params`` in it (``/_EDGE-LIMITER;x/api/config``): never forwarded, where an
        origin that folds case or drops matrix params would read the admin path, with
        the operator's token. ``None`` for every other path."""
        return admin_path(self.prefix, path)

    def _authorized(self, request: Request) -> bool:
        token = self.services.admin_token
        if not token:
            return False
        header = request.headers.get("authorization") or ""
        scheme, _, credentials = header.partition(" ")
        offered = ""
        if scheme.lower() == "bearer":
            offered = credentials.strip()
        elif scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(credentials.strip(), validate=True).decode()
            except (ValueError, UnicodeDecodeError):
                decoded = ""
            offered = decoded.partition(":")[2]
        # Constant time whatever the offered value: compare digests of equal length.
        return hmac.compare_digest(
            hmac.new(b"edge-limiter", offered.encode(), "sha256").digest(),
            hmac.new(b"edge-limiter", token.encode(), "sha256").digest(),
        )

    async def handle(self, request: Request, path: str, now: int) -> Response:
        """The answer to a request under the prefix (``path`` its canonical path)."""
        return _hardened(await self._answer(request, path, now))

    async def _answer(self, request: Request, path: str, now: int) -> Response:
        if not self.services.admin_token:
            return problem_response(problems.admin_disabled(self.prefix))
        page = path in (self.prefix, self.prefix + "/")
        # Before the credentials are looked at: a browser attaches the operator's to the
        # requests other sites' pages make it send (a form's POST), so they say nothing of
        # who asked. The answer is the same whether they are right or missing.
        headers = request.headers
        refused = cross_site.refusal(
            request.method,
            cross_site.own_origin(request.scheme, request.host),
            origin=headers.get("origin"),
            site=headers.get("sec-fetch-site"),
            mode=headers.get("sec-fetch-mode"),
            dest=headers.get("sec-fetch-dest"),
        )
        if refused is not None:
            self.services.log(
                {
                    "event": "admin_cross_site",
                    "method": request.method,
                    "path": path,
                    "credentials": bool(headers.get("authorization")),
                }
            )
            return _fail(
                403,
                "Forbidden",
                f"The admin API acts only for its own page and for clients that are no "
                f"browser: {refused}.",
                "admin_cross_site",
            )
        if not self._authorized(request):
            response = _fail(401, "Unauthorized", "Credentials are required.", "unauthorized")
            challenge = 'Basic realm="edge-limiter"' if page else 'Bearer realm="edge-limiter"'
            response.headers.set("www-authenticate", challenge)
            self.services.log({"event": "admin_unauthorized", "path": path})
            return response
        action = path[len(self.prefix) :].rstrip("/") or "/"
        # A HEAD is answered as its GET (the runtime sends no body with it).
        method = "GET" if request.method == "HEAD" else request.method
        allowed = ("GET",) if page else _methods(action)
        if method not in allowed:
            return _not_allowed(action, request.method, allowed)
        try:
            if method == "GET":
                return await self._read(request, action, page, now)
            return await self._act(request, action, method, now)
        except _AdminError as exc:
            response = _fail(exc.status, exc.title, str(exc), exc.code)
            for name, value in exc.headers:
                response.headers.set(name, value)
            return response

    async def _read(self, request: Request, action: str, page: bool, now: int) -> Response:
        """A GET: its parameters from the query; it changes nothing."""
        pairs = parse_qsl(request.query, keep_blank_values=True)
        params = dict(pairs)
        counts = Counter(name for name, _ in pairs if name != "header")
        twice = sorted(name for name, count in counts.items() if count > 1)
        if twice:
            # Which one was meant cannot be told: say so rather than take the last.
            raise _AdminError(
                400, f"give each parameter once: {', '.join(twice)} came more than once"
            )
        unknown = sorted({name for name, _ in pairs} - _QUERY_PARAMS.get(action, frozenset()))
        if unknown:
            # A misspelt parameter is not ignored: the answer would be to another question.
            takes = ", ".join(sorted(_QUERY_PARAMS.get(action, ()))) or "none"
            raise _AdminError(
                400, f"unknown parameter(s) {', '.join(unknown)}: {action} takes {takes}"
            )
        if page:
            part = params.get("part")
            if part not in (None, "live"):
                raise _AdminError(400, f"part may only be live, got {part!r}")
            return await self._page(now, whole=part is None)
        if action == "/api/config":
            return self._config()
        if action == "/api/explain":
            return self._explain(params, [v for n, v in pairs if n == "header"])
        if action == "/api/keys":
            return await self._key(params, "peek")
        if action == "/api/overrides":
            return _json(200, await self._control(OverridesCall("list"), now))
        if action == "/api/breakers":
            return _json(200, {"breakers": await self._breakers(now)})
        return _json(200, await self._stats())  # /api/stats, the last GET endpoint

    async def _act(self, request: Request, action: str, method: str, now: int) -> Response:
        """A call that changes something: its parameters from a JSON body only, which no
        form or simple request of another site's page can send."""
        if request.query and method == "DELETE":
            raise _AdminError(400, f"DELETE {action} takes no query: its path names the override")
        if request.query:
            raise _AdminError(
                400,
                f"{method} {action} takes no query: send its parameters as members of an "
                f"application/json body ({_example(action)})",
            )
        if method == "DELETE":  # /api/overrides/{id}: the path says it all
            ident = action.removeprefix("/api/overrides/")
            done = await self._control(OverridesCall("delete", id=ident), now)
            if not done.get("deleted"):
                raise _AdminError(404, f"no override has the id {ident!r} (see GET overrides)")
            self.services.log({"event": "admin_override_deleted", "id": ident})
            return _json(200, done)
        data = await self._json_body(request, action)
        if action == "/api/overrides":
            return await self._set_override(data, now)
        params = _members(action, data)
        if action == "/api/cache/purge":
            return await self._purge(params)
        if action.startswith("/api/breakers/"):
            origin = unquote(action.removeprefix("/api/breakers/"))
            return await self._force(origin, params, now)
        return await self._key(params, action.rsplit("/", 1)[1])  # reset, refund

    async def _json_body(self, request: Request, action: str) -> Any:
        """The request's body, which must be JSON said to be (``Content-Type:
        application/json``), at most :data:`MAX_BODY_BYTES`, naming each member once."""
        content_type = request.headers.get("content-type")
        if not cross_site.json_media_type(content_type):
            said = f"Content-Type: {content_type}" if content_type else "no Content-Type"
            raise _AdminError(
                415,
                f"POST {action} takes an application/json body ({_example(action)}), got {said}",
                headers=(("accept-post", JSON),),
            )
        try:
            raw = await request.read_body_at_most(MAX_BODY_BYTES)
        except BodyReadError as exc:
            raise _AdminError(400, f"the body could not be read to its end: {exc}") from exc
        if raw is None:
            raise _AdminError(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
        try:
            return bounded_json.loads(raw or b"null", object_pairs_hook=_once_each)
        except _Repeated as exc:
            raise _AdminError(400, f"the body's JSON is ambiguous: {exc}") from exc
        except ValueError as exc:
            raise _AdminError(400, f"the body is not JSON: {exc}") from exc

    # --- endpoints ------------------------------------------------------------------------

    def _config(self) -> Response:
        ops = self.config.ops
        return _json(
            200,
            {
                "routes": [describe_route(route) for route in self.config.routes],
                "pools": sorted(pool.name for pool in pools_of(self.config)),
                "shadow": ops.shadow,
                "deny_cache_ttl_ms": ops.deny_cache_ttl_ms,
                "overrides_refresh_ms": ops.overrides_refresh_ms,
                "matrix_params": self.config.matrix_params,
                "method_override": self.config.method_override,
                "client_ip_header": self.config.client_ip_header,
                "forwarded_host": self.config.forwarded_host,
                "origin_headers": {h.name: h.describe() for h in self.config.origin_headers},
                "pool_headers": {
                    pool.name: {h.name: h.describe() for h in pool.headers}
                    for pool in pools_of(self.config)
                    if pool.headers
                },
                "warnings": list(self.config.warnings),
            },
        )

    def _explain(self, params: dict[str, str], header_params: list[str]) -> Response:
        if not params.get("url"):
            raise _AdminError(400, "the url parameter is required")
        try:
            client = explained_client(
                **{name: params.get(name, "") for name in EXPLAINED_CLIENT_PARAMS}
            )
            headers = [header_line(item) for item in header_params]
            explained = explain(
                self.config, params.get("method") or "GET", params["url"], headers, client
            )
        except ExplainError as exc:
            raise _AdminError(400, str(exc)) from None
        return _json(200, explained)

    async def _purge(self, params: Mapping[str, Any]) -> Response:
        url = params.get("url")
        if not url:
            raise _AdminError(400, "url is required (the GET to forget, as clients send it)")
        try:
            scheme, authority, target_path, query = split_url(url)
            path = canonical_path(runtime_path(target_path), self.config.matrix_params)
        except (ExplainError, PathError) as exc:
            raise _AdminError(400, f"url: {exc}") from None
        host = canonical_host(authority, scheme.lower())
        matched = self.config.match("GET", host, path)
        scope = self.routes.cache_scope(matched[0].name) if matched is not None else None
        if matched is None or scope is None:
            where = f"route {matched[0].name!r}" if matched is not None else "no route"
            raise _AdminError(400, f"a GET of {url} goes to {where}, which caches nothing")
        route = matched[0]
        scope_key = None
        if scope == "key":
            given = params.get("key")
            if not given:
                raise _AdminError(
                    400, f"route {route.name!r} caches per rate-limit key: give key as well"
                )
            try:
                scope_key = given_key(route.limits.key, given)
            except KeySpecError as exc:
                raise _AdminError(400, f"key: {exc}") from None
        elif "key" in params:
            # Purging "this key's copy" of a shared one would purge it for everyone.
            raise _AdminError(
                400,
                f"route {route.name!r} keeps one copy for every key (scope = "
                f"{scope!r}): purge it without key",
            )
        try:
            removed, found = await self.routes.purge(route.name, host, path, query, scope_key)
        except Exception as exc:
            raise _AdminError(503, f"the cache (KV) failed: {type(exc).__name__}") from exc
        self.services.log({"event": "admin_cache_purge", "route": route.name, "path": path})
        return _json(200, {"route": route.name, "url": url, "purged": removed, "found": found})

    def _route_and_key(self, params: Mapping[str, Any]) -> tuple[Any, str]:
        route = self.config.route(params.get("route", ""))
        if route is None:
            names = ", ".join(r.name for r in self.config.routes)
            raise _AdminError(400, f"route must be one of: {names}")
        key = params.get("key")
        if not key:
            raise _AdminError(400, "key is required (as the config check's --explain prints it)")
        try:
            return route, given_key(route.limits.key, key)
        except KeySpecError as exc:
            raise _AdminError(400, f"key: {exc}") from None

    async def _key(self, params: Mapping[str, Any], op: str) -> Response:
        route, key = self._route_and_key(params)
        policy = route.limits
        cost = policy.cost
        if op == "refund":
            cost = params.get("cost", policy.cost)  # an integer (see _members)
            if cost < 1:
                raise _AdminError(400, "cost must be at least 1")
        operating = self.operating
        if operating.overrides_loaded_at is None and self.services.control is not None:
            # A fresh isolate loads the list with its first request; the admin API may
            # come first.
            await operating.reload_overrides(self.services.clock.now_ms())
        override = operating.overrides.find(route.name, key, self.services.clock.now_ms())
        limits = override.limits if override is not None and override.limits else policy.limits
        name = object_name(route.name, key)

        async def call(step: str, units: int) -> StoreResponse:
            request = StoreRequest(
                step,
                policy.algorithm,
                limits,
                units,
                policy.write_behind_ms,
                self.config.ops.cleanup_after_ms,
            )
            try:
                return await self.services.store.call(name, request)
            except Exception as exc:
                raise _AdminError(
                    503, f"the key's Durable Object failed: {type(exc).__name__}"
                ) from exc

        if op != "peek":
            await call(op, cost)
            self.operating.deny.clear()
            self.services.log(
                {"event": f"admin_{op}", "route": route.name, "key_hash": key_digest(key)}
            )
        # What a request of the route's cost would find now (a refund's or reset's own
        # answer is for a request of one unit).
        probe = policy.cost
        # A leased bucket grants no lease that would take its reserve: ask for it too.
        reserves = lease_reserves(limits, policy.algorithm, policy.lease_ttl_ms)
        asked = max(reserves) if policy.lease_ttl_ms else 0
        response = await call("peek", probe + asked)
        decisions = response.decisions
        if asked:
            decisions = without_reserve(decisions, reserves, asked)
        decision = combine(decisions)
        # What each limit lets the key use now (a denied request took nothing), with the
        # units this isolate's leases hold, which its next requests use first.
        held = self.routes.held_units(route.name, key, override, self.services.clock.now_ms())
        available = [d.remaining + (probe if decision.allowed else 0) + held for d in decisions]
        if held and (decision.allowed or held >= probe):
            decisions = tuple(
                d._replace(allowed=True, retry_after=0, remaining=units - probe)
                for d, units in zip(decisions, available, strict=True)
            )
            decision = combine(decisions)
        if override is not None and override.exempt:
            # As the request path answers an exempt key: let through, counted by nothing.
            next_request = {"allowed": True, "headers": {REASON_HEADER: "exempt"}}
        else:
            said = decision
            if policy.shadow and not decision.allowed:
                # A shadow route lets it through, reporting what it would have done.
                said = decision._replace(allowed=True, retry_after=0, reason=Reason.SHADOW)
            next_request = {
                "allowed": said.allowed,
                "headers": dict(rate_limit_headers(said, decisions)),
            }
        return _json(
            200,
            {
                "route": route.name,
                "key": key,
                "durable_object": name,
                "done": op,
                "override": override.describe() if override is not None else None,
                "limits": [
                    {
                        "policy": d.policy.name if d.policy else "",
                        "limit": d.limit,
                        # What the key may still use now; ``remaining`` is what a request
                        # of the route's cost would leave (as its headers would say).
                        # A denied request consumes nothing: then no limit's remaining
                        # has the probe taken off.
                        "available": units,
                        "remaining": d.remaining,
                        "reset_after_ms": d.reset_after,
                        "retry_after_ms": d.retry_after,
                        "allowed": d.allowed,
                    }
                    for d, units in zip(decisions, available, strict=True)
                ],
                "next_request": next_request,
            },
        )

    async def _control(self, call: OverridesCall, now: int) -> dict[str, Any]:
        """The Control object's answer to an overrides call; this isolate takes the list."""
        control = self.services.control
        if control is None:
            raise _AdminError(503, "overrides need the CONTROL Durable Object binding")
        try:
            answer = await control.overrides(call)
        except Exception as exc:
            raise _AdminError(503, f"the Control object failed: {type(exc).__name__}") from exc
        if answer.error:
            raise _AdminError(409, answer.error)
        self.operating.override_set(list(answer.overrides), now)
        return answer.describe()

    async def _set_override(self, data: Any, now: int) -> Response:
        algorithms = {route.name: route.limits.algorithm for route in self.config.routes}
        costs = {route.name: route.limits.cost for route in self.config.routes}
        try:
            override = parse_override(data, now, algorithms, costs=costs)
        except OverrideError as exc:
            raise _AdminError(400, str(exc)) from exc
        route = self.config.route(override.route)
        if route is not None and "*" not in override.key:
            # One route, one key: put in the form its requests get (an ip aggregated, a
            # value encoded), or refused, so an override never waits for a key no request has.
            try:
                override = replace(override, key=given_key(route.limits.key, override.key))
            except KeySpecError as exc:
                raise _AdminError(400, f"key: {exc}") from None
        elif route is None and "*" not in override.key:
            override = replace(override, key=self._every_route_key(override.key))
        self.services.log(
            {"event": "admin_override_set", "route": override.route, "id": override.id}
        )
        described = override.describe()
        answer = await self._control(OverridesCall("put", override), now)
        # The one just set first (its id, to delete it by), then the whole list.
        return _json(200, {"override": described, **answer})

    def _every_route_key(self, key: str) -> str:
        """An override for every route is compared with each request's key as stored, so
        it is stored in the form requests have (``2001:db8::1`` as the ``2001:db8::/64``
        requests count it in), or refused where routes would count it in different forms,
        or where no route has keys like it."""
        routes = self.config.routes
        # Written with some routes' labels: those routes judge it; else the value alone
        # is for the routes of one-part keys.
        shaped = [r for r in routes if written_as_labelled(r.limits.key, key)]
        judges = shaped or [r for r in routes if len(r.limits.key.parts) == 1]
        refusals: list[str] = []
        forms: dict[str, list[str]] = {}
        for route in judges:
            try:
                counted = given_key(route.limits.key, key)
            except KeySpecError as exc:
                refusals.append(f"route {route.name!r}: {exc}")
                continue
            if not shaped:
                counted = unquote(counted.split("=", 1)[1], errors="surrogateescape")
            forms.setdefault(counted, []).append(route.name)
        if not forms:
            why = "; ".join(refusals) or "no route's key has that many parts"
            raise _AdminError(400, f"key: no route has a key like {key!r} ({why})")
        if len(forms) > 1:
            said = "; ".join(f"{form!r} on {', '.join(names)}" for form, names in forms.items())
            raise _AdminError(
                400,
                f"key: routes count {key!r} in different forms ({said}): set an override "
                "per route instead",
            )
        return next(iter(forms))

    async def _force(self, origin: str, params: Mapping[str, Any], now: int) -> Response:
        """Force an origin's shared breaker open (out of every pool's rotation), closed
        (used whatever it answers) or back to ``auto``; this isolate takes it at once,
        the others with their next refresh (about a second of traffic, 10 s at most)."""
        pools = pools_of(self.config)
        plain = {o.name for p in pools for o in p.origins if not o.named}
        if origin == PLAIN_LABEL and len(plain) == 1 and origin not in plain:
            # The name clients are told (X-Origin, a 503's body) for the one plain origin.
            (origin,) = plain
        pool = next((p for p in pools if any(o.name == origin for o in p.origins)), None)
        if pool is None:
            names = ", ".join(sorted(o.name for p in pools for o in p.origins))
            raise _AdminError(404, f"no origin is named {origin!r} (origins: {names})")
        state = params.get("state", "")
        if state not in (*FORCED, "auto"):
            raise _AdminError(400, f"state must be open, closed or auto, got {state!r}")
        breakers = self.services.breakers
        if breakers is None:
            raise _AdminError(503, "forcing a breaker needs the BREAKERS Durable Object binding")
        try:
            shared = await breakers.sync(origin, SyncCall(pool.breaker, force=state))
        except Exception as exc:
            raise _AdminError(
                503, f"the breaker's Durable Object failed: {type(exc).__name__}"
            ) from exc
        self.routes.adopt_breaker(origin, shared, now)
        self.services.log({"event": "admin_breaker_forced", "origin": origin, "state": state})
        return _json(200, {"origin": origin, "state": state, "breakers": await self._breakers(now)})

    async def _breakers(self, now: int) -> dict[str, str]:
        breakers = self.services.breakers
        phases: dict[str, str] = {}
        for pool in pools_of(self.config):
            for origin in pool.origins:
                phase = "unknown"
                if breakers is not None:
                    try:
                        state = await breakers.sync(origin.name, SyncCall(pool.breaker))
                        # Parked by its own 429 (pause_on_429): no call goes to it until then.
                        paused = now < state.cool_down_until
                        phase = "paused" if paused else current_phase(state, now).value
                        if state.forced:
                            phase = f"forced_{state.forced}"
                    except Exception:
                        phase = "unreachable"
                phases[origin.name] = phase
        return phases

    async def _stats(self) -> dict[str, Any]:
        control = self.services.control
        if control is None:
            return {"routes": {}, "top_limited": []}
        await self.operating.flush_stats(self.services.clock.now_ms())
        try:
            answer = await control.stats(StatsCall("get"))
        except Exception as exc:
            raise _AdminError(503, f"the Control object failed: {type(exc).__name__}") from exc
        return dict(answer.summary or {})

    async def _page(self, now: int, *, whole: bool) -> Response:
        """The status page, or (not ``whole``) its figures alone."""
        from .statuspage import policy, render  # noqa: PLC0415 - only the page needs it

        stats = await self._stats()
        overrides: list[dict[str, Any]] = []
        if self.services.control is not None:
            try:
                listed = await self.services.control.overrides(OverridesCall("list"))
                overrides = [override.describe() for override in listed.overrides]
            except Exception:
                overrides = []
        breakers = await self._breakers(now)
        when = datetime.fromtimestamp(now / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        # A script of the page's own runs; one an override's reason smuggled in does not.
        nonce = secrets.token_urlsafe(18) if whole else None
        html = render(self.config, stats, overrides, breakers, when, nonce=nonce)
        headers = Headers(
            [
                ("content-type", "text/html; charset=utf-8"),
                ("cache-control", "no-store"),
                # A window another origin opened it in gets no hold on it.
                ("cross-origin-opener-policy", "same-origin"),
            ]
        )
        if nonce is not None:
            headers.set("content-security-policy", policy(nonce))
        return Response(200, headers, html.encode())


class _AdminError(Exception):
    """An admin call that cannot be done as asked."""

    def __init__(self, status: int, detail: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(detail)
        self.status = status
        self.headers = headers
        self.title = {
            400: "Bad Request",
            404: "Not Found",
            409: "Conflict",
            413: "Content Too Large",
            415: "Unsupported Media Type",
            503: "Service Unavailable",
        }.get(status, "Error")
        self.code = {
            400: "bad_admin_request",
            404: "admin_not_found",
            409: "admin_conflict",
            413: "admin_body_too_large",
            415: "admin_json_required",
        }.get(status, "admin_unavailable")


#: Each admin endpoint's methods (for the 405 answer to another method).
_ENDPOINT_METHODS = {
    "/api/config": ("GET",),
    "/api/explain": ("GET",),
    "/api/keys": ("GET",),
    "/api/keys/reset": ("POST",),
    "/api/keys/refund": ("POST",),
    "/api/overrides": ("GET", "POST"),
    "/api/cache/purge": ("POST",),
    "/api/breakers": ("GET",),
    "/api/stats": ("GET",),
}


def _methods(action: str) -> tuple[str, ...]:
    """The methods ``action`` takes; none when no endpoint has that path."""
    if action.startswith("/api/overrides/") and action.count("/") == 3:
        return ("DELETE",)
    if action.startswith("/api/breakers/") and action.count("/") == 3:
        return ("POST",)
    return _ENDPOINT_METHODS.get(action, ())


def _not_allowed(action: str, method: str, allowed: tuple[str, ...]) -> Response:
    """404 for a path no endpoint has; 405 with ``Allow`` for another method."""
    if not allowed:
        return _fail(404, "Not Found", f"No admin endpoint {method} {action}.", "no_admin_endpoint")
    if "GET" in allowed:
        allowed = (*allowed, "HEAD")
    response = _fail(
        405,
        "Method Not Allowed",
        f"{action} takes {' or '.join(allowed)}, not {method}.",
        "admin_method_not_allowed",
    )
    response.headers.set("allow", ", ".join(allowed))
    return response


class _Repeated(ValueError):
    """A JSON object names a member twice."""


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose members are named once each: which of two ``route`` members
    was meant cannot be told (an override set on the wrong route)."""
    twice = sorted(name for name, count in Counter(n for n, _ in pairs).items() if count > 1)
    if twice:
        raise _Repeated(f"member(s) {', '.join(twice)} given more than once")
    return dict(pairs)


#: The query parameters each GET endpoint takes (any other is refused).
_QUERY_PARAMS = {
    "/": frozenset(("part",)),
    "/api/explain": frozenset(("url", "method", "header", *EXPLAINED_CLIENT_PARAMS)),
    "/api/keys": frozenset(("route", "key")),
}

#: The members of each POST endpoint's JSON body and their JSON types (any other member is
#: refused); ``/api/overrides`` is checked by :func:`parse_override`.
_MEMBERS: dict[str, dict[str, type]] = {
    "/api/keys/reset": {"route": str, "key": str},
    "/api/keys/refund": {"route": str, "key": str, "cost": int},
    "/api/cache/purge": {"url": str, "key": str},
    "/api/breakers/": {"state": str},
}

#: What each POST endpoint's body looks like, for the answers that say how to send it.
_EXAMPLES = {
    "/api/keys/reset": '{"route": "login", "key": "ip=203.0.113.9"}',
    "/api/keys/refund": '{"route": "login", "key": "ip=203.0.113.9", "cost": 1}',
    "/api/cache/purge": '{"url": "https://api.example.com/v1/catalog", "key": "..."}',
    "/api/breakers/": '{"state": "open"}',
    "/api/overrides": '{"route": "search", "key": "premium_*", "limits": "100/second"}',
}


def _endpoint(action: str) -> str:
    """The table key of ``action`` (every origin's breaker is one endpoint)."""
    return "/api/breakers/" if action.startswith("/api/breakers/") else action


def _example(action: str) -> str:
    return f"e.g. {_EXAMPLES[_endpoint(action)]}"


def _members(action: str, data: Any) -> dict[str, Any]:
    """A POST body's members, each one the endpoint takes and of its type."""
    takes = _MEMBERS[_endpoint(action)]
    if not isinstance(data, dict):
        raise _AdminError(400, f"the body must be a JSON object ({_example(action)})")
    unknown = sorted(set(data) - set(takes))
    if unknown:
        # A misspelt member is not ignored: a refund of 3 units asked as "units": 3 would
        # give back the route's cost and say done.
        raise _AdminError(
            400,
            f"unknown member(s) {', '.join(unknown)}: {action} takes {', '.join(sorted(takes))}",
        )
    for name, value in data.items():
        if takes[name] is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise _AdminError(400, f"{name} must be a JSON integer, got {_shown(value)}")
        elif not isinstance(value, str):
            raise _AdminError(400, f"{name} must be a JSON string, got {_shown(value)}")
    return data


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:60] + "..."


#: Fields on every admin answer: never sniffed as another type, framed, or read by
#: another origin's page as a script or image (the page sets its own policy).
_HARDENING = (
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("cross-origin-resource-policy", "same-origin"),
)
_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"


def _hardened(response: Response) -> Response:
    headers = response.headers
    for name, value in _HARDENING:
        headers.set(name, value)
    if headers.get("content-security-policy") is None:
        headers.set("content-security-policy", _POLICY)
    if headers.get("cache-control") is None:
        headers.set("cache-control", "no-store")
    return response
