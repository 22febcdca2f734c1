"""The strict config parser: plain data (TOML or JSON) in, frozen :class:`Config` out.

Every field is declared once, in the schema (the tables of :mod:`.top`, :mod:`.route` and
the modules beside them; ``docs/configuration.md`` is written from it); this module reads
the top level and the routes through it and checks the rules between them. Every problem
in the whole config is collected and raised as ONE :class:`ConfigError`, each line naming
the route and the field; warnings (legal, but probably not meant) are kept on the config.
The first matching route wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import ConfigError
from ..http.origin_headers import FORWARDED_HOST_FIELDS, OriginHeader, parse_origin_headers
from ..matching import host_covers
from ..routing.origins import parse_origin_url
from ..validation import Problems, shown
from .identity import check_tier_routes, parse_auth, parse_tiers
from .model import Config, Forwarding, Route
from .pools import parse_pools, raw_pools
from .route import Defaults, Upstreams, parse_route, route_name
from .table import Reader
from .top import CONFIG, client_ip_header, parse_cors, parse_operations


def parse_config(raw: object, *, kv_bindings: frozenset[str] | None = None) -> Config:
    """Parse and validate a whole config; raises one :class:`ConfigError` listing every
    problem. ``kv_bindings``: the Worker's KV namespaces, where the caller knows them (a
    ``[tiers]`` source must name one)."""
    problems = Problems()
    if not isinstance(raw, Mapping):
        raise ConfigError([f"config: must be a table with 'routes', got {type(raw).__name__}"])
    got = Reader(CONFIG, raw, "config", problems)
    origin_timeout = got.ms("origin_timeout")
    upstreams = Upstreams(parse_pools(raw.get("pools"), problems), origin_timeout, raw_pools(raw))
    default_pool = upstreams.for_route(raw, origin_timeout, "config", problems)
    store_timeout = got.integer("store_timeout_ms")
    paths = got.sub("paths")
    case_insensitive = paths.flag("case_insensitive") if paths is not None else False
    matrix_params = paths.text("matrix_params") if paths is not None else "keep"
    method_override = got.text("method_override")
    cors = parse_cors(raw.get("cors"), problems)
    client_ip = client_ip_header(raw.get("client_ip_header"), problems)
    origin_headers = parse_origin_headers(raw.get("origin_headers"), problems)
    forwarded_host = got.flag("forwarded_host")
    every = [*origin_headers, *(h for p in upstreams.pools.values() for h in p.headers)]
    _set_twice(every, client_ip, forwarded_host, problems)
    origin_url = (
        parse_origin_url(raw["origin"], "config.origin", Problems())
        if raw.get("origin") is not None and raw.get("pool") is None
        else None
    )
    ops = parse_operations(got, problems)
    auth = parse_auth(raw.get("auth"), problems)
    tiers = parse_tiers(raw.get("tiers"), problems, kv_bindings)
    defaults = Defaults(
        upstreams=upstreams,
        pool=default_pool,
        origin_url=origin_url,
        origin_timeout_ms=origin_timeout,
        store_timeout_ms=store_timeout,
        case_insensitive=case_insensitive,
        origin_given=raw.get("origin") is not None or raw.get("pool") is not None,
        shadow_everywhere=ops.shadow,
        auth=auth,
        tiers=tiers,
        identity_written=(_names(raw.get("auth")), raw.get("tiers") is not None),
    )
    routes = _routes(raw.get("routes", []), defaults, problems)
    check_tier_routes(tiers, routes, problems)
    _keys_the_gateway_sets(routes, client_ip, origin_headers, problems)
    if matrix_params != "keep":
        _never_matched_params(routes, matrix_params, problems)
    if problems.items:
        raise ConfigError(problems.items)
    _unreachable(routes, ops.admin_prefix, problems)
    forward = None
    if default_pool is not None:
        forward = Forwarding(default_pool, origin_timeout, default_pool.retry)
    return Config(
        tuple(routes),
        forward,
        matrix_params,
        ops,
        tuple(problems.warnings),
        method_override=method_override,
        cors=cors,
        client_ip_header=client_ip,
        forwarded_host=forwarded_host,
        origin_headers=origin_headers,
        auth=auth,
        tiers=tiers,
    )


def _names(raw: object) -> frozenset[str]:
    return frozenset(str(name) for name in raw) if isinstance(raw, Mapping) else frozenset()


def _routes(raw_routes: object, defaults: Defaults, problems: Problems) -> list[Route]:
    """The routes in the order they are tried; a broken one is left out (its problems said)."""
    if not isinstance(raw_routes, list):
        problems.add("config.routes", f"must be a list of route tables, got {shown(raw_routes)}")
        return []
    if not raw_routes:
        problems.warn(
            "config.routes",
            "there are no routes: nothing is limited (every request is forwarded to the "
            "origin unlimited, or gets 404 without one); add [[routes]] tables",
        )
    routes: list[Route] = []
    seen: set[str] = set()
    for index, raw_route in enumerate(raw_routes):
        if not isinstance(raw_route, Mapping):
            problems.add(f"routes[{index}]", f"must be a table, got {shown(raw_route)}")
            continue
        name, where = route_name(raw_route, index, problems)
        if name in seen:
            # Reported whatever else is wrong with the route.
            problems.add(
                f"{where}.name",
                f"is used by an earlier route (this is routes[{index}]); names must be unique",
            )
            # The route's other problems say which of the two routes they are about.
            where = f"{where} (routes[{index}])"
        seen.add(name)
        route = parse_route(raw_route, name, where, defaults, problems)
        if route is not None:
            routes.append(route)
    return routes


def _set_twice(
    every: list[OriginHeader], client_ip: str | None, forwarded_host: bool, problems: Problems
) -> None:
    """A field for origins that ``client_ip_header`` or ``forwarded_host`` sets too."""
    for header in every:
        if header.name == client_ip:
            problems.add(
                f"{header.where}.{header.name}",
                "is client_ip_header's field: the gateway sets it to the client's address",
            )
        elif forwarded_host and header.name in FORWARDED_HOST_FIELDS:
            problems.add(
                f"{header.where}.{header.name}",
                "is set by forwarded_host to what the client asked for: set one or the other",
            )
    if forwarded_host and client_ip in FORWARDED_HOST_FIELDS:
        problems.add(
            "config.client_ip_header",
            f"{client_ip!r} is set by forwarded_host to what the client asked for, "
            "not the client's address",
        )


def _keys_the_gateway_sets(
    routes: list[Route],
    client_ip: str | None,
    origin_headers: tuple[OriginHeader, ...],
    problems: Problems,
) -> None:
    """A route counting a field the gateway replaces before the origin sees it."""
    if client_ip is not None:
        for route in routes:
            if any(
                part.kind == "header"
                and part.name.lower().replace("_", "-") == client_ip.replace("_", "-")
                for part in route.limits.key.parts
            ):
                problems.add(
                    f"route {shown(route.name)}.key",
                    f"counts the client's {client_ip!r}, which client_ip_header "
                    "replaces with the client's address: the origin would see another "
                    "value than the one counted",
                )
    for route in routes:
        counted = {
            part.name.lower().replace("_", "-"): part.name
            for part in route.limits.key.parts
            if part.kind == "header" and part.name
        }
        for header in (*origin_headers, *route.forward.pool.headers):
            field_name = counted.get(header.name.replace("_", "-"))
            if field_name is not None:
                problems.warn(
                    f"route {shown(route.name)}.key",
                    f"counts the client's {field_name!r}, which {header.where} replaces with its "
                    "own value: the origin sees that value, not the one counted (fine if "
                    "the gateway swaps the client's key for its own; else key on another "
                    "field)",
                )


def _never_matched_params(routes: list[Route], matrix_params: str, problems: Problems) -> None:
    """A route path holding ``;`` where ``paths.matrix_params`` takes every ``;`` away."""
    for route in routes:
        if ";" in route.match.path.source:
            problems.add(
                f"route {shown(route.name)}.match.path",
                f"holds ';' but paths.matrix_params = {matrix_params!r} "
                + (
                    "removes ';params' from every request path: it can never match"
                    if matrix_params == "strip"
                    else "refuses every request path with ';params': it can never match"
                ),
            )


def _unreachable(routes: list[Route], admin_prefix: str, problems: Problems) -> None:
    """Warn about a route that an earlier route, or the admin API, shadows completely."""
    for later_index, later in enumerate(routes):
        for earlier in routes[:later_index]:
            a, b = earlier.match, later.match
            methods_covered = a.methods is None or (
                b.methods is not None and b.methods <= a.methods
            )
            if methods_covered and host_covers(a.host, b.host) and a.path.covers(b.path):
                problems.warn(
                    f"route {shown(later.name)}",
                    f"can never match: the earlier route {shown(earlier.name)} matches every "
                    "request it would (routes are tried in order; move it up or narrow "
                    f"{shown(earlier.name)})",
                )
                break
    prefix = admin_prefix.lower()  # admin paths are caught in any case
    for route in routes:
        source = route.match.path.source
        static = re.split(r"[*{]", source, maxsplit=1)[0].lower()
        if static == prefix or static.startswith(prefix + "/"):
            problems.warn(
                f"route {shown(route.name)}.match.path",
                f"{source!r} is under the admin API's prefix {prefix!r}, whose paths are "
                "never forwarded: it can never match (move admin.prefix elsewhere)",
            )
