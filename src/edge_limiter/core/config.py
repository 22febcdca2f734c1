"""The route configuration: a strict parser from plain data to frozen objects.

The config is plain JSON-able data (in production the ``EDGE_LIMITER`` var of
``wrangler.toml``, written as TOML tables)::

    origin = "https://api.example.com"     # where allowed requests are forwarded
    store_timeout_ms = 1000                # budget for one Durable Object call

    [[routes]]
    name = "login"
    match = { methods = ["POST"], path = "/v1/login", host = "api.example.com" }
    limits = "5/minute; 20/hour"
    algorithm = "sliding_log"
    key = ["ip", "header:x-tenant"]
    cost = 1
    shadow = false
    on_store_error = "closed"

Every problem in the whole config is collected and raised as ONE :class:`ConfigError`,
each line naming the route and the field. The first matching route wins; a request that
matches no route passes through untouched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .algorithms import ALGORITHMS
from .errors import ConfigError, KeySpecError, PatternError, RateParseError
from .keys import KeyPart, KeySpec, parse_key_part
from .matching import PathPattern, host_matches, parse_host_pattern
from .rates import Rate, parse_rate, parse_rates

ALGORITHM_NAMES = tuple(ALGORITHMS)
BUCKET_ALGORITHMS = ("token_bucket", "gcra")
DEFAULT_ALGORITHM = "sliding_window"
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
ROUTE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
POLICY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

DEFAULT_STORE_TIMEOUT_MS = 1_000
MAX_STORE_TIMEOUT_MS = 30_000
#: The sliding log keeps one entry per distinct request time; cap its size per key.
MAX_SLIDING_LOG_QUOTA = 10_000

_TOP_FIELDS = ("origin", "store_timeout_ms", "routes")
_ROUTE_FIELDS = (
    "name",
    "match",
    "limits",
    "algorithm",
    "burst",
    "key",
    "ipv4_prefix",
    "ipv6_prefix",
    "cost",
    "shadow",
    "on_store_error",
    "origin",
)
_MATCH_FIELDS = ("methods", "path", "host")


@dataclass(frozen=True, slots=True)
class Route:
    """One route: what it matches, its limits and how it keys and fails."""

    name: str
    path: PathPattern
    methods: frozenset[str] | None
    host: str | None
    rates: tuple[Rate, ...]
    algorithm: str
    burst: int | None
    key: KeySpec
    cost: int
    shadow: bool
    fail_open: bool
    origin: str | None

    def match(self, method: str, host: str, path: str) -> dict[str, str] | None:
        """The captured path parameters when this route matches, else ``None``."""
        if self.methods is not None and method.upper() not in self.methods:
            return None
        if self.host is not None and not host_matches(self.host, host):
            return None
        return self.path.match(path)


@dataclass(frozen=True, slots=True)
class Config:
    """The whole gateway config: routes in priority order."""

    routes: tuple[Route, ...]
    origin: str | None = None
    store_timeout_ms: int = DEFAULT_STORE_TIMEOUT_MS

    def match(self, method: str, host: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The first route matching the request, with its path parameters."""
        for route in self.routes:
            params = route.match(method, host, path)
            if params is not None:
                return route, params
        return None

    def origin_for(self, route: Route | None) -> str | None:
        """Where a request on ``route`` (or on no route) is forwarded."""
        if route is not None and route.origin is not None:
            return route.origin
        return self.origin


class _Problems:
    """Collects problems with their location, so one error reports all of them."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_origin(value: object, where: str, problems: _Problems) -> str | None:
    if not isinstance(value, str) or not value:
        problems.add(where, f"must be an http(s) URL like 'https://api.example.com', got {value!r}")
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        problems.add(where, f"must be an http(s) URL like 'https://api.example.com', got {value!r}")
        return None
    if parts.query or parts.fragment:
        problems.add(where, f"must not carry a query or fragment, got {value!r}")
        return None
    return value.rstrip("/")


def _parse_limits(value: object, where: str, problems: _Problems) -> tuple[Rate, ...]:
    """``"10/second; 1000/hour"``, a list of such strings, or tables ``{rate, name}``."""
    try:
        if isinstance(value, str):
            return parse_rates(value)
        if isinstance(value, list) and value:
            rates: list[Rate] = []
            for index, item in enumerate(value):
                if isinstance(item, str):
                    rates.extend(parse_rates(item))
                elif isinstance(item, Mapping):
                    unknown = sorted(set(item) - {"rate", "name"})
                    if unknown:
                        problems.add(f"{where}[{index}]", f"unknown field(s) {unknown}")
                        continue
                    rate = parse_rate(item.get("rate"))  # type: ignore[arg-type]
                    name = item.get("name")
                    if name is not None:
                        if not isinstance(name, str) or not POLICY_NAME_RE.match(name):
                            problems.add(
                                f"{where}[{index}].name",
                                f"must match {POLICY_NAME_RE.pattern}, got {name!r}",
                            )
                            continue
                        rate = Rate(rate.quota, rate.window_ms, name)
                    rates.append(rate)
                else:
                    problems.add(
                        f"{where}[{index}]",
                        f"must be a rate string or a table {{rate, name}}, got {item!r}",
                    )
            windows = [r.window_ms for r in rates]
            if len(set(windows)) != len(windows):
                problems.add(where, "two limits over the same window")
            names = [r.name for r in rates]
            if len(set(names)) != len(names):
                problems.add(where, f"policy names must be unique, got {names}")
            return tuple(rates)
    except RateParseError as exc:
        problems.add(where, str(exc))
        return ()
    problems.add(where, f"must be a string like '10/second; 1000/hour', got {value!r}")
    return ()


def _parse_key(value: object, route: Mapping[str, Any], where: str, problems: _Problems) -> KeySpec:
    raw = value if value is not None else "ip"
    items = raw if isinstance(raw, list) else [raw]
    parts: list[KeyPart] = []
    if not items:
        problems.add(f"{where}.key", "must name at least one key part")
    for item in items:
        try:
            parts.append(parse_key_part(item))
        except KeySpecError as exc:
            problems.add(f"{where}.key", str(exc))
    prefixes: dict[str, int] = {}
    for field_name, default, maximum in (("ipv4_prefix", 32, 32), ("ipv6_prefix", 64, 128)):
        prefix = route.get(field_name, default)
        if not _is_int(prefix) or not 1 <= prefix <= maximum:
            problems.add(
                f"{where}.{field_name}", f"must be an integer 1..{maximum}, got {prefix!r}"
            )
            prefix = default
        prefixes[field_name] = prefix
    if len({str(p) for p in parts}) != len(parts):
        problems.add(f"{where}.key", "names the same key part twice")
    return KeySpec(tuple(parts), prefixes["ipv4_prefix"], prefixes["ipv6_prefix"])


def _parse_route(raw: object, index: int, problems: _Problems) -> Route | None:
    if not isinstance(raw, Mapping):
        problems.add(f"routes[{index}]", f"must be a table, got {raw!r}")
        return None
    name = raw.get("name")
    if isinstance(name, str) and ROUTE_NAME_RE.match(name):
        where = f"route {name!r}"
    else:
        where = f"routes[{index}]"
        problems.add(
            f"{where}.name",
            "is required: letters, digits, '_', '.', '-' (at most 64, no ':' or '#'), "
            f"got {name!r}",
        )
        name = f"routes[{index}]"
    before = len(problems.items)
    for unknown in sorted(set(raw) - set(_ROUTE_FIELDS)):
        problems.add(f"{where}.{unknown}", f"unknown field (known: {', '.join(_ROUTE_FIELDS)})")

    # match
    match = raw.get("match")
    path = PathPattern.parse("*")
    methods: frozenset[str] | None = None
    host: str | None = None
    if not isinstance(match, Mapping):
        problems.add(f"{where}.match", "is required: a table like { path = '/v1/*' }")
    else:
        for unknown in sorted(set(match) - set(_MATCH_FIELDS)):
            problems.add(f"{where}.match.{unknown}", "unknown field (known: methods, path, host)")
        try:
            path = PathPattern.parse(match.get("path"))  # type: ignore[arg-type]
        except PatternError as exc:
            problems.add(f"{where}.match.path", str(exc))
        raw_methods = match.get("methods")
        if raw_methods is not None and raw_methods != "*":
            listed = raw_methods if isinstance(raw_methods, list) else [raw_methods]
            bad = [m for m in listed if not isinstance(m, str) or m.upper() not in HTTP_METHODS]
            if bad or not listed:
                problems.add(
                    f"{where}.match.methods",
                    f"must be '*' or a list of {', '.join(HTTP_METHODS)}, got {raw_methods!r}",
                )
            else:
                methods = frozenset(m.upper() for m in listed)
        if match.get("host") is not None:
            try:
                host = parse_host_pattern(match["host"])
            except PatternError as exc:
                problems.add(f"{where}.match.host", str(exc))

    rates = _parse_limits(raw.get("limits"), f"{where}.limits", problems)

    algorithm = raw.get("algorithm", DEFAULT_ALGORITHM)
    if algorithm not in ALGORITHM_NAMES:
        problems.add(
            f"{where}.algorithm", f"must be one of {', '.join(ALGORITHM_NAMES)}, got {algorithm!r}"
        )
        algorithm = DEFAULT_ALGORITHM

    burst = raw.get("burst")
    if burst is not None:
        if algorithm not in BUCKET_ALGORITHMS:
            problems.add(
                f"{where}.burst", f"only applies to token_bucket and gcra, not {algorithm}"
            )
            burst = None
        elif not _is_int(burst) or burst < 1:
            problems.add(f"{where}.burst", f"must be a positive integer, got {burst!r}")
            burst = None

    if algorithm == "sliding_log":
        for rate in rates:
            if rate.quota > MAX_SLIDING_LOG_QUOTA:
                problems.add(
                    f"{where}.limits",
                    f"sliding_log keeps one entry per request: {rate} exceeds its maximum "
                    f"quota of {MAX_SLIDING_LOG_QUOTA}; use sliding_window or gcra",
                )

    cost = raw.get("cost", 1)
    if not _is_int(cost) or cost < 1:
        problems.add(f"{where}.cost", f"must be a positive integer, got {cost!r}")
        cost = 1
    elif rates:
        capacity = min(burst if burst is not None else r.quota for r in rates)
        if cost > capacity:
            problems.add(
                f"{where}.cost",
                f"{cost} exceeds the smallest limit ({capacity}): no request could ever pass",
            )

    shadow = raw.get("shadow", False)
    if not isinstance(shadow, bool):
        problems.add(f"{where}.shadow", f"must be true or false, got {shadow!r}")
        shadow = False

    on_store_error = raw.get("on_store_error", "open")
    if on_store_error not in ("open", "closed"):
        problems.add(
            f"{where}.on_store_error", f"must be 'open' or 'closed', got {on_store_error!r}"
        )
        on_store_error = "open"

    origin = None
    if raw.get("origin") is not None:
        origin = _check_origin(raw["origin"], f"{where}.origin", problems)

    key = _parse_key(raw.get("key"), raw, where, problems)

    if len(problems.items) != before:
        return None
    return Route(
        name=name,
        path=path,
        methods=methods,
        host=host,
        rates=rates,
        algorithm=algorithm,
        burst=burst,
        key=key,
        cost=cost,
        shadow=shadow,
        fail_open=on_store_error == "open",
        origin=origin,
    )


def parse_config(raw: object) -> Config:
    """Parse and validate the whole config; raises one :class:`ConfigError` listing all problems."""
    problems = _Problems()
    if not isinstance(raw, Mapping):
        raise ConfigError([f"config: must be a table with 'routes', got {type(raw).__name__}"])
    for unknown in sorted(set(raw) - set(_TOP_FIELDS)):
        problems.add(f"config.{unknown}", f"unknown field (known: {', '.join(_TOP_FIELDS)})")

    origin = None
    if raw.get("origin") is not None:
        origin = _check_origin(raw["origin"], "config.origin", problems)

    timeout = raw.get("store_timeout_ms", DEFAULT_STORE_TIMEOUT_MS)
    if not _is_int(timeout) or not 1 <= timeout <= MAX_STORE_TIMEOUT_MS:
        problems.add(
            "config.store_timeout_ms",
            f"must be an integer 1..{MAX_STORE_TIMEOUT_MS}, got {timeout!r}",
        )
        timeout = DEFAULT_STORE_TIMEOUT_MS

    raw_routes = raw.get("routes", [])
    routes: list[Route] = []
    if not isinstance(raw_routes, list):
        problems.add("config.routes", f"must be a list of route tables, got {raw_routes!r}")
        raw_routes = []
    seen: set[str] = set()
    for index, raw_route in enumerate(raw_routes):
        route = _parse_route(raw_route, index, problems)
        if route is None:
            continue
        if route.name in seen:
            problems.add(
                f"route {route.name!r}.name", "is used by an earlier route; names must be unique"
            )
        seen.add(route.name)
        routes.append(route)
        if route.origin is None and origin is None:
            problems.add(
                f"route {route.name!r}.origin",
                "no origin to forward to: set 'origin' on the route or at the top level",
            )
    if problems.items:
        raise ConfigError(problems.items)
    return Config(tuple(routes), origin, timeout)
