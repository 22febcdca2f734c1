"""A route's cache settings, and their strict parser.

In the config a route caches its GET and HEAD responses with a table::

    cache = { ttl = "1h", default_ttl = "5m", scope = "key", ignore_query = ["utm_source"],
              max_bytes = 262144, statuses = [200, 404], count_hits = false,
              allow_client_no_cache = false, stale_if_error = "10m",
              stale_while_revalidate = "30s" }

Only ``ttl`` is required. How long an answer is served is the origin's to say (RFC 9111):
its ``s-maxage``, ``max-age`` or ``Expires``, else a share of the time since its
``Last-Modified``; ``ttl`` is the longest any answer is kept fresh, ``default_ttl`` an
opt-in lifetime for answers that say nothing, and the two stale windows opt-in
lengthenings of what the origin's own ``stale-if-error`` / ``stale-while-revalidate``
allow. The parser records every problem in a
:class:`~edge_limiter.core.validation.Problems` and never raises; a bad field takes its
default, so the rest of the route is still checked in the same pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..durations import format_duration
from ..validation import Problems, boolean, duration, integer, is_int, shown, table, unknown_fields
from .limits import KV_MIN_EXPIRATION_TTL_S, MAX_BODY_BYTES, MIB

SCOPES = ("public", "key")
DEFAULT_MAX_BYTES = 1 * MIB
#: The statuses an answer without an explicit lifetime gets the route's ``default_ttl`` for,
#: unless the route lists ``statuses``: RFC 9110 section 15.1's cacheable-by-default
#: statuses less 404, 405, 410, 414 and 501 (an error the origin says nothing about is
#: only kept that long when a route asks for it).
DEFAULT_TTL_STATUSES = (200, 203, 204, 300, 301, 308)
#: 206 answers one Range request and 304 a conditional one; neither is a whole response.
UNSTORABLE_STATUSES = (206, 304)
MIN_TTL_MS = 1_000
MAX_TTL_MS = 365 * 86_400_000
MAX_STALE_IF_ERROR_MS = 30 * 86_400_000
MAX_STALE_WHILE_REVALIDATE_MS = 86_400_000
#: ``ignore_query`` entry meaning "leave the whole query out of the key".
ALL_PARAMS = "*"

_FIELDS = (
    "ttl",
    "default_ttl",
    "scope",
    "ignore_query",
    "max_bytes",
    "statuses",
    "count_hits",
    "allow_client_no_cache",
    "stale_if_error",
    "stale_while_revalidate",
)
# Only used to hand back a whole settings object after a missing or bad ttl was recorded.
_FALLBACK_TTL_MS = 60_000


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """How one route caches its GET and HEAD responses in KV."""

    ttl_ms: int
    """The longest a stored response is served fresh, whatever the origin says; a stale one
    that can be revalidated (it has a validator) is kept that long too."""
    default_ttl_ms: int = 0
    """The lifetime of an answer that gives no explicit one (no ``s-maxage``, ``max-age``
    or ``Expires``), in place of the heuristic from its ``Last-Modified``; 0: none (the
    heuristic alone). Only for heuristically cacheable statuses, or answers marked
    ``public`` (RFC 9111 section 4.2.2)."""
    scope: str = "public"
    """``"public"``: one entry for everybody; ``"key"``: one per rate-limit key."""
    ignore_query: tuple[str, ...] = ()
    """Query parameter names left out of the key (``("*",)``: the whole query)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """The largest body stored."""
    statuses: tuple[int, ...] | None = None
    """The status codes that may be stored (``None``: any the origin gives a lifetime, as
    RFC 9111 lets a shared cache; and those :data:`DEFAULT_TTL_STATUSES` get
    ``default_ttl``). Listed, only those, and ``default_ttl`` applies to them."""
    count_hits: bool = False
    """Whether a cache hit consumes rate-limit quota."""
    allow_client_no_cache: bool = False
    """Whether a client's ``no-cache`` (or ``max-age=0``) skips the cache."""
    stale_if_error_ms: int = 0
    """At least how long past its freshness a stored copy may stand in for a failing
    origin (0: as long as the origin's ``stale-if-error`` says; RFC 5861). Longer than the
    origin allows is a deviation the operator chooses."""
    stale_while_revalidate_ms: int = 0
    """At least how long past its freshness a stored copy is still served while a fresh
    one is fetched after the response (0: as long as the origin's
    ``stale-while-revalidate`` says). Longer than the origin allows is a deviation."""

    @property
    def ignores_whole_query(self) -> bool:
        """Whether the query is left out of the key altogether."""
        return ALL_PARAMS in self.ignore_query


def parse_cache(raw: object, where: str, problems: Problems) -> CacheSettings | None:
    """The settings in ``raw`` (a route's ``cache`` table), or ``None`` when it is absent.

    ``where`` names the table in problems, e.g. ``"route 'login'.cache"``. A value that is
    not a table is a problem and gives ``None``; bad fields are problems and take defaults.
    """
    if raw is None:
        return None
    data = table(raw, where, problems)
    if data is None:
        return None
    unknown_fields(data, _FIELDS, where, problems)

    if "ttl" in data:
        ttl_ms = duration(
            data,
            "ttl",
            _FALLBACK_TTL_MS,
            where,
            problems,
            minimum_ms=MIN_TTL_MS,
            maximum_ms=MAX_TTL_MS,
        )
    else:
        problems.add(f"{where}.ttl", "is required: how long a response stays fresh, e.g. '5m'")
        ttl_ms = _FALLBACK_TTL_MS
    if ttl_ms < KV_MIN_EXPIRATION_TTL_S * 1000:
        problems.warn(
            f"{where}.ttl",
            f"{format_duration(ttl_ms)} is shorter than KV's propagation time (up to 60 s): "
            "other locations will rarely see the entry while it is fresh",
        )

    default_ttl_ms = 0
    if "default_ttl" in data:
        default_ttl_ms = duration(
            data,
            "default_ttl",
            0,
            where,
            problems,
            minimum_ms=MIN_TTL_MS,
            maximum_ms=MAX_TTL_MS,
        )
        if default_ttl_ms > ttl_ms:
            problems.add(
                f"{where}.default_ttl",
                f"{format_duration(default_ttl_ms)} is longer than ttl "
                f"({format_duration(ttl_ms)}), the longest any answer is kept fresh",
            )
            default_ttl_ms = ttl_ms

    scope = data.get("scope", "public")
    if scope not in SCOPES:
        problems.add(f"{where}.scope", f"must be 'public' or 'key', got {shown(scope)}")
        scope = "public"

    return CacheSettings(
        ttl_ms=ttl_ms,
        default_ttl_ms=default_ttl_ms,
        scope=scope,
        ignore_query=_ignore_query(data.get("ignore_query", []), f"{where}.ignore_query", problems),
        max_bytes=integer(
            data,
            "max_bytes",
            DEFAULT_MAX_BYTES,
            where,
            problems,
            minimum=1,
            maximum=MAX_BODY_BYTES,
        ),
        statuses=_statuses(data.get("statuses"), f"{where}.statuses", problems),
        count_hits=boolean(data, "count_hits", False, where, problems),
        allow_client_no_cache=boolean(data, "allow_client_no_cache", False, where, problems),
        stale_if_error_ms=duration(
            data, "stale_if_error", 0, where, problems, maximum_ms=MAX_STALE_IF_ERROR_MS
        ),
        stale_while_revalidate_ms=duration(
            data,
            "stale_while_revalidate",
            0,
            where,
            problems,
            maximum_ms=MAX_STALE_WHILE_REVALIDATE_MS,
        ),
    )


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
