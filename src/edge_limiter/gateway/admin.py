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
``GET  {prefix}/api/api-keys?sha256=``     an API key's record (``[tiers] by = "kv:..."``)
``POST {prefix}/api/api-keys``             set one: ``{"key" | "sha256", "tier", "limits",
                                           "owner"}`` (stored under the key's SHA-256)
``DELETE {prefix}/api/api-keys/{sha256}``  delete one
=========================================  ================================================
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from ..core.canonical import admin_path, canonical_host, canonical_path, runtime_path
from ..core.config import Config, Route
from ..core.config.describe import describe_route
from ..core.control import OverridesCall, StatsCall
from ..core.errors import ExplainError, KeySpecError, PathError
from ..core.explain import (
    EXPLAINED_CLIENT_PARAMS,
    explain,
    explained_client,
    header_line,
    split_url,
)
from ..core.http import cross_site, problems
from ..core.http.fields import REASON_HEADER, rate_limit_headers
from ..core.http.messages import Headers, Request, Response
from ..core.keys import every_route_key, given_key, key_digest, object_name
from ..core.ratelimit.decision import Reason
from ..core.ratelimit.leases.policy import lease_reserves, without_reserve
from ..core.ratelimit.overrides import Override, OverrideError, parse_override
from ..core.ratelimit.protocol import StoreRequest, StoreResponse
from ..core.ratelimit.rates import Limit
from ..core.ratelimit.rule import combine
from ..core.resilience.breaker import FORCED, current_phase
from ..core.resilience.shared import SyncCall
from ..core.routing.origins import PLAIN_LABEL
from .admin_apikeys import ApiKeys
from .admin_calls import (
    AdminError,
    RouteView,
    authorized,
    endpoint_methods,
    example,
    fail,
    hardened,
    json_answer,
    json_body,
    members,
    not_allowed,
    query_params,
)
from .exchange import Exchange, problem_response
from .health import pools_of
from .operations import Operating
from .ports import Services


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
        self.api_keys = ApiKeys(config, services, routes.forget_api_key)
        self._key_specs = [(route.name, route.limits.key) for route in config.routes]

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

    async def handle(self, request: Request, path: str, now: int) -> Response:
        """The answer to a request under the prefix (``path`` its canonical path)."""
        return hardened(await self._answer(request, path, now))

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
            return fail(
                403,
                "Forbidden",
                f"The admin API acts only for its own page and for clients that are no "
                f"browser: {refused}.",
                "admin_cross_site",
            )
        if not authorized(self.services.admin_token, request.headers.get("authorization")):
            response = fail(401, "Unauthorized", "Credentials are required.", "unauthorized")
            challenge = 'Basic realm="edge-limiter"' if page else 'Bearer realm="edge-limiter"'
            response.headers.set("www-authenticate", challenge)
            self.services.log({"event": "admin_unauthorized", "path": path})
            return response
        action = path[len(self.prefix) :].rstrip("/") or "/"
        # A HEAD is answered as its GET (the runtime sends no body with it).
        method = "GET" if request.method == "HEAD" else request.method
        allowed = ("GET",) if page else endpoint_methods(action)
        if method not in allowed:
            return not_allowed(action, request.method, allowed)
        try:
            if method == "GET":
                return await self._read(request, action, page, now)
            return await self._act(request, action, method, now)
        except AdminError as exc:
            response = fail(exc.status, exc.title, str(exc), exc.code)
            for name, value in exc.headers:
                response.headers.set(name, value)
            return response

    async def _read(self, request: Request, action: str, page: bool, now: int) -> Response:
        """A GET: its parameters from the query; it changes nothing."""
        pairs = query_params(action, request.query)
        params = dict(pairs)
        if page:
            part = params.get("part")
            if part not in (None, "live"):
                raise AdminError(400, f"part may only be live, got {part!r}")
            return await self._page(now, whole=part is None)
        if action == "/api/config":
            return self._config()
        if action == "/api/explain":
            return self._explain(params, [v for n, v in pairs if n == "header"])
        if action == "/api/keys":
            return await self._key(params, "peek")
        if action == "/api/overrides":
            return json_answer(200, await self._control(OverridesCall("list"), now))
        if action == "/api/breakers":
            return json_answer(200, {"breakers": await self._breakers(now)})
        if action == "/api/api-keys":
            return await self.api_keys.read(params.get("sha256", ""))
        return json_answer(200, await self._stats())  # /api/stats, the last GET endpoint

    async def _act(self, request: Request, action: str, method: str, now: int) -> Response:
        """A call that changes something: its parameters from a JSON body only, which no
        form or simple request of another site's page can send."""
        if request.query and method == "DELETE":
            raise AdminError(400, f"DELETE {action} takes no query: its path names the override")
        if request.query:
            raise AdminError(
                400,
                f"{method} {action} takes no query: send its parameters as members of an "
                f"application/json body ({example(action)})",
            )
        if method == "DELETE" and action.startswith("/api/api-keys/"):
            return await self.api_keys.delete(action.removeprefix("/api/api-keys/"))
        if method == "DELETE":  # /api/overrides/{id}: the path says it all
            ident = action.removeprefix("/api/overrides/")
            done = await self._control(OverridesCall("delete", id=ident), now)
            if not done.get("deleted"):
                raise AdminError(404, f"no override has the id {ident!r} (see GET overrides)")
            self.services.log({"event": "admin_override_deleted", "id": ident})
            return json_answer(200, done)
        data = await json_body(request, action)
        if action == "/api/overrides":
            return await self._set_override(data, now)
        if action == "/api/api-keys":
            return await self.api_keys.set(data)
        params = members(action, data)
        if action == "/api/cache/purge":
            return await self._purge(params)
        if action.startswith("/api/breakers/"):
            origin = unquote(action.removeprefix("/api/breakers/"))
            return await self._force(origin, params, now)
        return await self._key(params, action.rsplit("/", 1)[1])  # reset, refund

    # --- endpoints ------------------------------------------------------------------------

    def _config(self) -> Response:
        ops = self.config.ops
        return json_answer(
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
            raise AdminError(400, "the url parameter is required")
        try:
            client = explained_client(
                **{name: params.get(name, "") for name in EXPLAINED_CLIENT_PARAMS}
            )
            headers = [header_line(item) for item in header_params]
            explained = explain(
                self.config, params.get("method") or "GET", params["url"], headers, client
            )
        except ExplainError as exc:
            raise AdminError(400, str(exc)) from None
        return json_answer(200, explained)

    async def _purge(self, params: Mapping[str, Any]) -> Response:
        url = params.get("url")
        if not url:
            raise AdminError(400, "url is required (the GET to forget, as clients send it)")
        try:
            scheme, authority, target_path, query = split_url(url)
            path = canonical_path(runtime_path(target_path), self.config.matrix_params)
        except (ExplainError, PathError) as exc:
            raise AdminError(400, f"url: {exc}") from None
        host = canonical_host(authority, scheme.lower())
        matched = self.config.match("GET", host, path)
        scope = self.routes.cache_scope(matched[0].name) if matched is not None else None
        if matched is None or scope is None:
            where = f"route {matched[0].name!r}" if matched is not None else "no route"
            raise AdminError(400, f"a GET of {url} goes to {where}, which caches nothing")
        route = matched[0]
        scope_key = None
        if scope == "key":
            given = params.get("key")
            if not given:
                raise AdminError(
                    400, f"route {route.name!r} caches per rate-limit key: give key as well"
                )
            try:
                scope_key = given_key(route.limits.key, given)
            except KeySpecError as exc:
                raise AdminError(400, f"key: {exc}") from None
        elif "key" in params:
            # Purging "this key's copy" of a shared one would purge it for everyone.
            raise AdminError(
                400,
                f"route {route.name!r} keeps one copy for every key (scope = "
                f"{scope!r}): purge it without key",
            )
        try:
            removed, found = await self.routes.purge(route.name, host, path, query, scope_key)
        except Exception as exc:
            raise AdminError(503, f"the cache (KV) failed: {type(exc).__name__}") from exc
        self.services.log({"event": "admin_cache_purge", "route": route.name, "path": path})
        return json_answer(
            200, {"route": route.name, "url": url, "purged": removed, "found": found}
        )

    def _route_and_key(self, params: Mapping[str, Any]) -> tuple[Route, str]:
        route = self.config.route(params.get("route", ""))
        if route is None:
            names = ", ".join(r.name for r in self.config.routes)
            raise AdminError(400, f"route must be one of: {names}")
        key = params.get("key")
        if not key:
            raise AdminError(400, "key is required (as the config check's --explain prints it)")
        try:
            return route, given_key(route.limits.key, key)
        except KeySpecError as exc:
            raise AdminError(400, f"key: {exc}") from None

    async def _key(self, params: Mapping[str, Any], op: str) -> Response:
        route, key = self._route_and_key(params)
        policy = route.limits
        cost = policy.cost
        if op == "refund":
            cost = params.get("cost", policy.cost)  # an integer (see _members)
            if cost < 1:
                raise AdminError(400, "cost must be at least 1")
        operating = self.operating
        if operating.overrides_loaded_at is None and self.services.control is not None:
            # A fresh isolate loads the list with its first request; the admin API may
            # come first.
            await operating.reload_overrides(self.services.clock.now_ms())
        override = operating.overrides.find(route.name, key, self.services.clock.now_ms())
        limits = override.limits if override is not None and override.limits else policy.limits
        name = object_name(route.name, key)

        if op != "peek":
            await self._object_call(name, route, limits, op, cost)
            self.operating.deny.clear()
            self.services.log(
                {"event": f"admin_{op}", "route": route.name, "key_hash": key_digest(key)}
            )
        return await self._key_state(route, key, name, override, op)

    async def _key_state(
        self, route: Route, key: str, name: str, override: Override | None, op: str
    ) -> Response:
        """What the key holds now, and what a request of the route's cost would get (a
        refund's or reset's own answer is for a request of one unit)."""
        policy = route.limits
        limits = override.limits if override is not None and override.limits else policy.limits
        probe = policy.cost
        # A leased bucket grants no lease that would take its reserve: ask for it too.
        reserves = lease_reserves(limits, policy.algorithm, policy.lease_ttl_ms)
        asked = max(reserves) if policy.lease_ttl_ms else 0
        response = await self._object_call(name, route, limits, "peek", probe + asked)
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
        return json_answer(
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

    async def _object_call(
        self, name: str, route: Route, limits: tuple[Limit, ...], step: str, units: int
    ) -> StoreResponse:
        """One step of the key's object (``name``) under ``limits``."""
        policy = route.limits
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
            raise AdminError(503, f"the key's Durable Object failed: {type(exc).__name__}") from exc

    async def _control(self, call: OverridesCall, now: int) -> dict[str, Any]:
        """The Control object's answer to an overrides call; this isolate takes the list."""
        control = self.services.control
        if control is None:
            raise AdminError(503, "overrides need the CONTROL Durable Object binding")
        try:
            answer = await control.overrides(call)
        except Exception as exc:
            raise AdminError(503, f"the Control object failed: {type(exc).__name__}") from exc
        if answer.error:
            raise AdminError(409, answer.error)
        self.operating.override_set(list(answer.overrides), now)
        return answer.describe()

    async def _set_override(self, data: Any, now: int) -> Response:
        algorithms = {route.name: route.limits.algorithm for route in self.config.routes}
        costs = {route.name: route.limits.cost for route in self.config.routes}
        try:
            override = parse_override(data, now, algorithms, costs=costs)
        except OverrideError as exc:
            raise AdminError(400, str(exc)) from exc
        route = self.config.route(override.route)
        if route is not None and "*" not in override.key:
            # One route, one key: put in the form its requests get (an ip aggregated, a
            # value encoded), or refused, so an override never waits for a key no request has.
            try:
                override = replace(override, key=given_key(route.limits.key, override.key))
            except KeySpecError as exc:
                raise AdminError(400, f"key: {exc}") from None
        elif route is None and "*" not in override.key:
            try:
                override = replace(override, key=every_route_key(self._key_specs, override.key))
            except KeySpecError as exc:
                raise AdminError(400, f"key: {exc}") from None
        self.services.log(
            {"event": "admin_override_set", "route": override.route, "id": override.id}
        )
        described = override.describe()
        answer = await self._control(OverridesCall("put", override), now)
        # The one just set first (its id, to delete it by), then the whole list.
        return json_answer(200, {"override": described, **answer})

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
            raise AdminError(404, f"no origin is named {origin!r} (origins: {names})")
        state = params.get("state", "")
        if state not in (*FORCED, "auto"):
            raise AdminError(400, f"state must be open, closed or auto, got {state!r}")
        breakers = self.services.breakers
        if breakers is None:
            raise AdminError(503, "forcing a breaker needs the BREAKERS Durable Object binding")
        try:
            shared = await breakers.sync(origin, SyncCall(pool.breaker, force=state))
        except Exception as exc:
            raise AdminError(
                503, f"the breaker's Durable Object failed: {type(exc).__name__}"
            ) from exc
        self.routes.adopt_breaker(origin, shared, now)
        self.services.log({"event": "admin_breaker_forced", "origin": origin, "state": state})
        return json_answer(
            200, {"origin": origin, "state": state, "breakers": await self._breakers(now)}
        )

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
            raise AdminError(503, f"the Control object failed: {type(exc).__name__}") from exc
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
