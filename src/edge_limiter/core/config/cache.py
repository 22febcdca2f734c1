"""The schema of a route's ``cache`` table, and its parser.

``cache = { ttl = "1h", default_ttl = "5m", scope = "key", ignore_query = ["utm_source"] }``:
only ``ttl`` is required. How long an answer is served is the origin's to say (RFC 9111);
``ttl`` is the longest any answer is kept fresh, ``default_ttl`` an opt-in lifetime for
answers that say nothing, and the two stale windows opt-in lengthenings of what the
origin's own ``stale-if-error`` / ``stale-while-revalidate`` allow.
"""

from __future__ import annotations

from ..caching.limits import KV_MIN_EXPIRATION_TTL_S, MAX_BODY_BYTES
from ..caching.settings import (
    ALL_PARAMS,
    DEFAULT_MAX_BYTES,
    MAX_STALE_IF_ERROR_MS,
    MAX_STALE_WHILE_REVALIDATE_MS,
    MAX_TTL_MS,
    MIN_TTL_MS,
    SCOPES,
    UNSTORABLE_STATUSES,
    CacheSettings,
)
from ..durations import format_duration
from ..validation import Problems, is_int, shown
from .fields import Choice, Duration, Flag, Hand, Size
from .table import Table

# Only used to hand back a whole settings object after a missing or bad ttl was recorded.
_FALLBACK_TTL_MS = 60_000

# fmt: off
CACHE = Table("cache", (
    "Keep the route's GET and HEAD answers in Workers KV, as a shared HTTP cache (RFC 9111): "
    "the origin says how long an answer may be reused, the route sets the bounds."
), (
    Duration("ttl", MIN_TTL_MS, MAX_TTL_MS, required=True, default=_FALLBACK_TTL_MS,
             rule="how long a response stays fresh, e.g. '5m'", example="1h",
             doc="The longest any answer is served fresh, whatever the origin says; a stale copy "
                 "that can be revalidated (it has an `ETag` or `Last-Modified`) is kept that "
                 "long too. Under a minute draws a warning: KV takes up to 60 s to show an entry "
                 "elsewhere."),
    Duration("default_ttl", MIN_TTL_MS, MAX_TTL_MS, default=0, default_text="none",
             example="5m",
             doc="The lifetime of an answer that gives no explicit one (no `s-maxage`, `max-age` "
                 "or `Expires`), in place of the heuristic from its `Last-Modified`; for 200, "
                 "203, 204, 300, 301 and 308 (or the listed `statuses`). At most `ttl`. Without "
                 "it an API that sends no caching fields is not cached, as RFC 9111 asks."),
    Choice("scope", SCOPES, default="public", rule="'public' or 'key'", suggest=False,
           example="key",
           doc='`"public"`: one entry for everybody. `"key"`: one per rate-limit key and per '
               "caller (`Authorization`, `Cookie`, `Proxy-Authorization` and every header a "
               "route keys on), so one client's answer is never served to another. On a route "
               "keyed by a header or cookie, leaving it unset draws a warning."),
    Hand("ignore_query", 'list of names, or "*"', default_text="none",
         example=["utm_source", "utm_medium"],
         doc='Query parameters left out of the cache key (`"*"`: the whole query). Names, not '
             "patterns."),
    Size("max_bytes", 1, MAX_BODY_BYTES, default=DEFAULT_MAX_BYTES, example=262144,
         doc="Larger bodies are not stored (a KV value holds 25 MiB, less the entry's own "
             "fields)."),
    Hand("statuses", "list of statuses", default_text="any", null_is_absent=True,
         example=[200, 404],
         doc="The statuses that may be stored (200..599, never 206 or 304). Unset, any status "
             "the origin gives a lifetime is, as RFC 9111 lets a shared cache."),
    Flag("count_hits", default=False, example=True,
         doc="Whether a hit consumes rate-limit quota (then it carries the rate-limit fields, "
             "and can be a 429)."),
    Flag("allow_client_no_cache", default=False, example=True,
         doc="Whether a client's `Cache-Control: no-cache` (or `Pragma: no-cache`, "
             "`max-age=0`) makes the cache ask the origin; such a request is rate limited like "
             "a miss."),
    Duration("stale_if_error", 0, MAX_STALE_IF_ERROR_MS, default=0, example="10m",
             doc="At least how long past its freshness a copy may stand in for a failing origin "
                 "(0: as long as the origin's own `stale-if-error` says, RFC 5861). Longer than "
                 "the origin allows is a deviation the operator chooses."),
    Duration("stale_while_revalidate", 0, MAX_STALE_WHILE_REVALIDATE_MS, default=0,
             example="30s",
             doc="At least how long past its freshness a copy is still served (`X-Cache: "
                 "UPDATING`) while a fresh one is fetched after the response (0: as long as the "
                 "origin's own `stale-while-revalidate` says)."),
))
# fmt: on


def parse_cache(raw: object, where: str, problems: Problems) -> CacheSettings | None:
    """The settings in ``raw`` (a route's ``cache`` table), or ``None`` when it is absent.

    ``where`` names the table in problems, e.g. ``"route 'login'.cache"``. A value that is
    not a table is a problem and gives ``None``; bad fields are problems and take defaults.
    """
    got = None if raw is None else CACHE.read(raw, where, problems)
    if got is None:
        return None
    ttl_ms = got.ms("ttl")
    if ttl_ms < KV_MIN_EXPIRATION_TTL_S * 1000:
        problems.warn(
            f"{where}.ttl",
            f"{format_duration(ttl_ms)} is shorter than KV's propagation time (up to 60 s): "
            "other locations will rarely see the entry while it is fresh",
        )
    default_ttl_ms = got.ms("default_ttl")
    if default_ttl_ms > ttl_ms:
        problems.add(
            f"{where}.default_ttl",
            f"{format_duration(default_ttl_ms)} is longer than ttl "
            f"({format_duration(ttl_ms)}), the longest any answer is kept fresh",
        )
        default_ttl_ms = ttl_ms
    got.text("scope")
    ignore_query = _ignore_query(got.raw.get("ignore_query", []), f"{where}.ignore_query", problems)
    got.integer("max_bytes")
    statuses = _statuses(got.raw.get("statuses"), f"{where}.statuses", problems)
    values = got.settings()  # the rest, in the table's order
    values.update(default_ttl_ms=default_ttl_ms, ignore_query=ignore_query, statuses=statuses)
    return CacheSettings(**values)


def _ignore_query(value: object, where: str, problems: Problems) -> tuple[str, ...]:
    """A list of parameter names, or ``"*"``; sorted and without repeats."""
    if value == ALL_PARAMS:
        return (ALL_PARAMS,)
    if not isinstance(value, list):
        problems.add(where, f"must be a list of query parameter names, or '*', got {shown(value)}")
        return ()
    names: list[str] = []
    for index, name in enumerate(value):
        if not isinstance(name, str) or not name or "&" in name or "=" in name:
            problems.add(
                f"{where}[{index}]",
                f"must be a query parameter name (non-empty, no '&' or '='), got {shown(name)}",
            )
        elif name != ALL_PARAMS and "*" in name:
            problems.add(
                f"{where}[{index}]",
                f"takes names, not patterns: {shown(name)} would ignore only a parameter "
                "spelled with a '*'; list each name (utm_source, utm_medium, ...)",
            )
        elif name in names:
            problems.warn(f"{where}[{index}]", f"names {shown(name)} twice")
        else:
            names.append(name)
    if ALL_PARAMS in names:
        if len(names) > 1:
            problems.warn(where, "'*' already ignores the whole query; the other names add nothing")
        return (ALL_PARAMS,)
    return tuple(sorted(names))


def _statuses(value: object, where: str, problems: Problems) -> tuple[int, ...] | None:
    """A non-empty list of storable status codes, or ``None`` when absent."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        problems.add(where, f"must be a non-empty list of status codes, got {shown(value)}")
        return None
    statuses: set[int] = set()
    for index, status in enumerate(value):
        if not is_int(status) or not 200 <= status <= 599:
            problems.add(
                f"{where}[{index}]", f"must be a status code 200..599, got {shown(status)}"
            )
        elif status in UNSTORABLE_STATUSES:
            problems.add(
                f"{where}[{index}]",
                f"{status} is a partial or conditional answer, never a whole response to store",
            )
        else:
            statuses.add(status)
    return tuple(sorted(statuses)) if statuses else None
