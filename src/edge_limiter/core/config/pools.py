"""The schema of ``[pools.NAME]``, its ``origins`` and their ``health``, and the parser.

A pool is a named list of interchangeable origins with one breaker and one retry policy.
Origin names are unique across all pools: they key the breaker state. Every problem
names the pool, the origin's index and the field; nothing raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..durations import format_duration
from ..http.origin_headers import parse_origin_headers
from ..resilience.shared import DEFAULT_UNHEALTHY_AFTER
from ..routing.origins import (
    CONTINENTS,
    COUNTRIES,
    DEFAULT_HEALTH_TIMEOUT_MS,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_TIMEOUT_MS,
    MAX_HEALTH_TIMEOUT_MS,
    MAX_IN_FLIGHT,
    MAX_PRIORITY,
    MAX_TIMEOUT_MS,
    NAME_RE,
    HealthCheck,
    Origin,
    Pool,
    fit_trial_timeout,
    parse_origin_url,
)
from ..validation import Problems, shown, table
from .fields import Duration, Hand, Integer, Number, Statuses, Sub, Text
from .resilience import BREAKER, RETRY, parse_breaker, parse_retry
from .table import Table

# Codes people write that ISO does not assign, with the one they mean.
_COUNTRY_HINTS = {"UK": "GB", "EL": "GR"}
_NAME_RULE = "letters, digits, '_', '.', '-' (at most 64), starting with a letter or digit"

# fmt: off
HEALTH = Table("health", (
    "An active health check of one origin: `GET path` at every Cron Trigger (every minute "
    "with the repository's `wrangler.toml`); `unhealthy_after` failed probes in a row open its "
    "breaker with no user traffic, and a passing probe lets an open breaker try again at once."
), (
    Text("path", r"/[^\x00-\x20]*", "a path like '/health'", required=True, default="/",
         null_is_absent=True, example="/health", doc="The path probed, on the origin's URL."),
    Duration("timeout", 1, MAX_HEALTH_TIMEOUT_MS, default=DEFAULT_HEALTH_TIMEOUT_MS,
             example="5s", doc="How long a probe may take."),
    Statuses("statuses", non_empty=True, null_is_absent=True, default=(),
             default_text="any 2xx", example=[200], doc="The answers that count as healthy."),
    Integer("unhealthy_after", 1, 100, default=DEFAULT_UNHEALTHY_AFTER, unit="probes",
            example=3, doc="How many failed probes in a row open the origin's breaker."),
))

ORIGIN = Table("origins", (
    "One upstream server of a pool. For each request the pool's origins are put in order from "
    "the client's location (`request.cf`): those serving its country, then its continent, "
    "then by distance when both have coordinates, then by `priority`, then by name; the first "
    "whose breaker allows a call and whose bulkhead has room gets it."
), (
    Text("name", NAME_RE.pattern, _NAME_RULE, required=True, null_is_absent=True, example="eu",
         doc="Unique across all pools: it keys the origin's breaker, and clients are told it in "
             "`X-Origin`."),
    Hand("url", "URL", required=True, example="https://eu.api.example.com",
         doc="http or https, with a host, no credentials, query or fragment; a path in it comes "
             "before the request's (`http://10.0.0.5/base` gets `/base/v1/x`)."),
    Hand("countries", "list of country codes", default_text="none", example=["GB", "CH"],
         doc="ISO 3166-1 alpha-2 codes (and `XK`) of the clients served first (one code may be "
             "written as a string)."),
    Hand("continents", "list of continent codes", default_text="none", example=["EU", "AF"],
         doc="Cloudflare's codes (`AF`, `AN`, `AS`, `EU`, `NA`, `OC`, `SA`) of the clients "
             "served next."),
    Number("lat", -90, 90, unit="degrees", rule="a number of degrees -90..90",
           null_is_absent=True, example=50.11, example_with={"lon": 8.68},
           doc="The origin's latitude, for ordering by distance; `lat` and `lon` go together."),
    Number("lon", -180, 180, unit="degrees", rule="a number of degrees -180..180",
           null_is_absent=True, example=8.68, example_with={"lat": 50.11},
           doc="The origin's longitude."),
    Integer("priority", -MAX_PRIORITY, MAX_PRIORITY, default=0, example=1,
            doc="Lower first, among origins the location does not order."),
    Duration("timeout", 1, MAX_TIMEOUT_MS, default=DEFAULT_TIMEOUT_MS, example="5s",
             doc="How long one attempt at this origin may take (the route's `timeout` bounds "
                 "them all)."),
    Integer("max_in_flight", 1, MAX_IN_FLIGHT, default=DEFAULT_MAX_IN_FLIGHT, unit="requests",
            example=50,
            doc="The bulkhead: at most this many requests per isolate waiting for this origin's "
                "answer; a request finding it full goes to the next origin, or gets `503` "
                "(`origin_busy`) at once, never a queue."),
    Sub("health", HEALTH, null_is_absent=True, default_text="none", example={"path": "/health"}),
))

POOL = Table("[pools.NAME]", (
    "A named list of interchangeable origins, with one breaker and one retry policy; a route "
    '(or the top level) sends its requests there with `pool = "NAME"`.'
), (
    Sub("breaker", BREAKER, null_is_absent=True, default_text="the defaults",
        example={"failure_rate": 25}),
    Sub("retry", RETRY, null_is_absent=True, default_text="the defaults",
        example={"attempts": 2},
        doc="How the pool's requests are retried (a route's own `retry` replaces it)."),
    Sub("origins", ORIGIN, many="list", required=True,
        example=[{"name": "eu", "url": "https://eu.api.example.com"}],
        doc="The pool's origins, at least one (`[[pools.NAME.origins]]`)."),
    Hand("headers", "table of field names", null_is_absent=True, default_text="none",
         example={"X-Gateway-Key": "$REGIONAL_KEY"},
         doc="Fields set on every request to the pool's origins, replacing the top-level "
             '`origin_headers` of the same name: a value as written, or `"$NAME"` for the '
             "Worker's secret `NAME`."),
))
# fmt: on


def parse_pools(raw: object, problems: Problems) -> dict[str, Pool]:
    """The ``pools`` table (``None``: no pools), keyed by pool name, in config order.

    Every problem is recorded in ``problems``; an origin too broken to use (no valid name
    or URL) is left out, a bad optional field falls back to its default. Check
    ``len(problems)`` before trusting the result.
    """
    if raw is None:
        return {}
    pools_table = table(raw, "pools", problems)
    if pools_table is None:
        return {}
    pools: dict[str, Pool] = {}
    # Origin names key breaker state globally, so they are unique across pools.
    origin_owner: dict[str, str] = {}
    for name, raw_pool in pools_table.items():
        where = f"pool {shown(name)}"
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            problems.add(where, f"name must be {_NAME_RULE}")
        pool = _parse_pool(str(name), raw_pool, where, origin_owner, problems)
        if pool is not None and isinstance(name, str) and NAME_RE.fullmatch(name):
            pools[name] = pool
    return pools


def _parse_pool(
    name: str,
    raw: object,
    where: str,
    origin_owner: dict[str, str],
    problems: Problems,
) -> Pool | None:
    got = POOL.read(raw, where, problems)
    if got is None:
        return None
    fields = got.raw
    breaker = parse_breaker(fields.get("breaker"), f"{where}.breaker", problems)
    retry = parse_retry(fields.get("retry"), f"{where}.retry", problems)
    headers = parse_origin_headers(fields.get("headers"), problems, f"{where}.headers")
    raw_origins = fields.get("origins")
    if not isinstance(raw_origins, list) or not raw_origins:
        problems.add(
            f"{where}.origins",
            f"must list at least one origin ([[pools.{name}.origins]]), got {shown(raw_origins)}",
        )
        return None
    origins: list[Origin] = []
    for index, raw_origin in enumerate(raw_origins):
        origin_where = f"{where}.origins[{index}]"
        origin = _parse_origin(raw_origin, origin_where, problems)
        if origin is None:
            continue
        owner = origin_owner.get(origin.name)
        if owner is not None:
            problems.add(
                f"{origin_where}.name",
                f"{shown(origin.name)} is already the name of {owner}; origin names must be "
                "unique across all pools (they key the breaker state)",
            )
            continue
        origin_owner[origin.name] = origin_where
        origins.append(origin)
    if not origins:
        return None
    raw_breaker = fields.get("breaker")
    given = isinstance(raw_breaker, dict) and "trial_timeout" in raw_breaker
    breaker = fit_trial_timeout(breaker, origins, f"{where}.breaker" if given else None, problems)
    _pool_warnings(raw_origins, origins, breaker.slow_call_ms, where, problems)
    return Pool(name, tuple(origins), breaker, retry, headers)


def _pool_warnings(
    raw_origins: list[Any],
    origins: list[Origin],
    slow_call_ms: int | None,
    where: str,
    problems: Problems,
) -> None:
    if len(raw_origins) == 1 and isinstance(raw_origins[0], dict):
        placed = [
            f for f in ("countries", "continents", "lat", "lon", "priority") if f in raw_origins[0]
        ]
        if placed:
            problems.warn(
                f"{where}.origins[0].{placed[0]}",
                f"has no effect: {', '.join(placed)} order a pool's origins, and this pool has one",
            )
    longest = max(origin.timeout_ms for origin in origins)
    if slow_call_ms is not None and slow_call_ms >= longest:
        problems.warn(
            f"{where}.breaker.slow_call",
            f"has no effect: no answer comes later than the pool's longest origin timeout "
            f"({format_duration(longest)}); a slow call must be shorter to be counted",
        )


def _parse_origin(raw: object, where: str, problems: Problems) -> Origin | None:
    got = ORIGIN.read(raw, where, problems)
    if got is None:
        return None
    name = got.optional_text("name")
    url = parse_origin_url(got.raw.get("url"), f"{where}.url", problems)
    countries = _codes(
        got.raw.get("countries"),
        COUNTRIES,
        "ISO 3166-1 alpha-2 country",
        f"{where}.countries",
        problems,
    )
    continents = _codes(
        got.raw.get("continents"),
        CONTINENTS,
        f"continent ({', '.join(sorted(CONTINENTS))})",
        f"{where}.continents",
        problems,
    )
    latitude, longitude = got.get("lat"), got.get("lon")
    if (latitude is None) != (longitude is None):
        missing = "lon" if longitude is None else "lat"
        if missing not in got.raw:
            problems.add(f"{where}.{missing}", "lat and lon go together: give both or neither")
        latitude = longitude = None
    priority, timeout = got.integer("priority"), got.ms("timeout")
    max_in_flight = got.integer("max_in_flight")
    health = None
    if got.given("health"):
        health = _parse_health(got.raw["health"], f"{where}.health", problems)
    if name is None or url is None:
        return None
    return Origin(
        name=name,
        url=url,
        countries=countries,
        continents=continents,
        latitude=latitude,
        longitude=longitude,
        priority=priority,
        timeout_ms=timeout,
        max_in_flight=max_in_flight,
        health=health,
    )


def _codes(
    value: object, known: frozenset[str], kind: str, where: str, problems: Problems
) -> tuple[str, ...]:
    """A list (or one string) of codes from ``known``, upper-cased and sorted."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        problems.add(where, f"must be a list of {kind} codes, got {shown(value)}")
        return ()
    codes: list[str] = []
    for item in items:
        code = item.upper() if isinstance(item, str) else None
        if code is None or code not in known:
            hint = _COUNTRY_HINTS.get(code or "") if known is COUNTRIES else None
            advice = f" (did you mean {shown(hint)}?)" if hint else ""
            article = "an" if kind[:1].upper() in "AEIOU" else "a"
            problems.add(where, f"{shown(item)} is not {article} {kind} code{advice}")
            continue
        if code in codes:
            problems.warn(where, f"{shown(item)} is listed twice")
            continue
        codes.append(code)
    return tuple(sorted(codes))


def _parse_health(raw: object, where: str, problems: Problems) -> HealthCheck | None:
    got = HEALTH.read(raw, where, problems)
    if got is None:
        return None
    got.integer("unhealthy_after")  # before statuses, as ever: problems keep their order
    return HealthCheck(**got.settings())


def raw_pools(raw: Mapping[str, Any]) -> frozenset[str]:
    """Every pool name a config writes, those too broken to use included."""
    pools = raw.get("pools")
    return frozenset(pools) if isinstance(pools, Mapping) else frozenset()
