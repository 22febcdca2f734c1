"""Origin pools: where a route's requests go, and the parser for them.

A pool is a named list of interchangeable origins with one breaker and one retry policy::

    [pools.api]
    breaker = { failure_rate = 50 }
    retry = { attempts = 3, base = "100ms", cap = "2s", budget = 0.2 }

    [[pools.api.origins]]
    name = "eu"
    url = "https://eu.api.example.com"
    continents = ["EU"]
    countries = ["GB", "CH"]
    lat = 50.11
    lon = 8.68
    priority = 1
    timeout = "5s"
    max_in_flight = 100
    health = { path = "/health", timeout = "2s", statuses = [200], unhealthy_after = 2 }

Origin names are unique across all pools: they key the breaker state. The parser records
every problem in a :class:`~edge_limiter.core.validation.Problems` (each naming the pool,
the origin's index and the field) and never raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import isfinite
from typing import Any
from urllib.parse import unquote, urlsplit

from ..durations import format_duration
from ..http.origin_headers import OriginHeader, parse_origin_headers
from ..resilience.breaker import BreakerSettings, parse_breaker
from ..resilience.retry import RetrySettings, parse_retry
from ..resilience.shared import DEFAULT_UNHEALTHY_AFTER
from ..validation import Problems, integer, is_int, shown, table, unknown_fields
from ..validation import duration as duration_field

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

DEFAULT_TIMEOUT_MS = 10_000
MAX_TIMEOUT_MS = 300_000
DEFAULT_MAX_IN_FLIGHT = 100
MAX_IN_FLIGHT = 100_000
MAX_PRIORITY = 1_000_000

DEFAULT_HEALTH_TIMEOUT_MS = 2_000
MAX_HEALTH_TIMEOUT_MS = 60_000

#: Cloudflare's continent codes (``request.cf.continent``).
CONTINENTS = frozenset({"AF", "AN", "AS", "EU", "NA", "OC", "SA"})

_COUNTRY_TABLE = """
    AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ
    BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ
    CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ
    DE DJ DK DM DO DZ
    EC EE EG EH ER ES ET
    FI FJ FK FM FO FR
    GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY
    HK HM HN HR HT HU
    ID IE IL IM IN IO IQ IR IS IT
    JE JM JO JP
    KE KG KH KI KM KN KP KR KW KY KZ
    LA LB LC LI LK LR LS LT LU LV LY
    MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ
    NA NC NE NF NG NI NL NO NP NR NU NZ
    OM
    PA PE PF PG PH PK PL PM PN PR PS PT PW PY
    QA
    RE RO RS RU RW
    SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ
    TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ
    UA UG UM US UY UZ
    VA VC VE VG VI VN VU
    WF WS
    XK
    YE YT
    ZA ZM ZW
"""
#: ISO 3166-1 alpha-2 codes in use, plus XK (Kosovo), which Cloudflare reports too.
COUNTRIES = frozenset(_COUNTRY_TABLE.split())
# Codes people write that ISO does not assign, with the one they mean.
_COUNTRY_HINTS = {"UK": "GB", "EL": "GR"}

_POOL_FIELDS = ("breaker", "retry", "origins", "headers")
_ORIGIN_FIELDS = (
    "name",
    "url",
    "countries",
    "continents",
    "lat",
    "lon",
    "priority",
    "timeout",
    "max_in_flight",
    "health",
)
_HEALTH_FIELDS = ("path", "timeout", "statuses", "unhealthy_after")


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """An active health check: ``GET path`` at every Cron Trigger, given ``timeout_ms``.

    ``statuses`` are the answers that count as healthy; empty means any 2xx.
    ``unhealthy_after`` failed probes in a row open the origin's breaker.
    """

    path: str
    timeout_ms: int = DEFAULT_HEALTH_TIMEOUT_MS
    statuses: tuple[int, ...] = ()
    unhealthy_after: int = DEFAULT_UNHEALTHY_AFTER

    def healthy(self, status: int) -> bool:
        """Whether an answer with ``status`` means the origin is up."""
        if self.statuses:
            return status in self.statuses
        return 200 <= status <= 299


@dataclass(frozen=True, slots=True)
class Origin:
    """One upstream server.

    ``url`` has no query, fragment or trailing slash; ``countries`` (ISO 3166 alpha-2) and
    ``continents`` (Cloudflare's codes) are the clients it serves first, upper-case and
    sorted; ``latitude``/``longitude`` are both set or both ``None``; a lower ``priority``
    is preferred; ``timeout_ms`` bounds each attempt; ``max_in_flight`` is the per-isolate
    bulkhead cap.
    """

    name: str
    url: str
    countries: tuple[str, ...] = ()
    continents: tuple[str, ...] = ()
    latitude: float | None = None
    longitude: float | None = None
    priority: int = 0
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    health: HealthCheck | None = None
    named: bool = True
    """Whether the config gave the name (a pool's origin), or it is a plain ``origin`` URL's."""

    @property
    def label(self) -> str:
        """The origin as clients are told it (``X-Origin``, a failure's problem body): its
        name, or ``"origin"`` for a plain URL, whose host and path are never shown to
        clients (the Cloudflare convention: a client that learns the origin's address can go
        round the gateway). Logs and the admin API use :attr:`name`."""
        return self.name if self.named else PLAIN_LABEL


@dataclass(frozen=True, slots=True)
class Pool:
    """A named list of interchangeable origins (config order), with its breaker and retries."""

    name: str
    origins: tuple[Origin, ...]
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    retry: RetrySettings = field(default_factory=RetrySettings)
    headers: tuple[OriginHeader, ...] = ()
    """The pool's own fields for its origins (over the top-level ``origin_headers``)."""

    @property
    def label(self) -> str:
        """The pool as clients are told it: its name, or ``"origin"`` for a plain URL's."""
        return self.name if all(origin.named for origin in self.origins) else PLAIN_LABEL


#: How clients are told a plain ``origin`` URL (see :attr:`Origin.label`).
PLAIN_LABEL = "origin"


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
            problems.add(
                where,
                "name must be letters, digits, '_', '.', '-' (at most 64), starting "
                "with a letter or digit",
            )
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
    fields = table(raw, where, problems)
    if fields is None:
        return None
    unknown_fields(fields, _POOL_FIELDS, where, problems)
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
    if breaker.slow_call_ms is not None and breaker.slow_call_ms >= longest:
        problems.warn(
            f"{where}.breaker.slow_call",
            f"has no effect: no answer comes later than the pool's longest origin timeout "
            f"({format_duration(longest)}); a slow call must be shorter to be counted",
        )
    return Pool(name, tuple(origins), breaker, retry, headers)


def fit_trial_timeout(
    breaker: BreakerSettings,
    origins: Sequence[Origin],
    where: str | None = None,
    problems: Problems | None = None,
) -> BreakerSettings:
    """The breaker's ``trial_timeout`` longer than any attempt at its origins can last.

    A half-open trial still running when it ends is taken for lost, and another goes out
    beside it. A ``trial_timeout`` the config gives (``where``) that is not longer than the
    pool's longest origin ``timeout`` is a problem; the default grows to a second past it.
    """
    longest = max(origin.timeout_ms for origin in origins)
    if breaker.trial_timeout_ms > longest:
        return breaker
    if where is not None and problems is not None:
        problems.add(
            f"{where}.trial_timeout",
            f"must be longer than the pool's longest origin timeout ({longest} ms): a trial "
            "still waiting for its answer would be taken for lost, and another sent beside "
            f"it, got {breaker.trial_timeout_ms} ms",
        )
    return replace(breaker, trial_timeout_ms=longest + 1_000)


def _parse_origin(raw: object, where: str, problems: Problems) -> Origin | None:
    fields = table(raw, where, problems)
    if fields is None:
        return None
    unknown_fields(fields, _ORIGIN_FIELDS, where, problems)
    name = fields.get("name")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        rule = "letters, digits, '_', '.', '-' (at most 64), starting with a letter or digit"
        problems.add(
            f"{where}.name",
            f"is required: {rule}" if name is None else f"must be {rule}, got {shown(name)}",
        )
        name = None
    url = parse_origin_url(fields.get("url"), f"{where}.url", problems)
    countries = _codes(
        fields.get("countries"),
        COUNTRIES,
        "ISO 3166-1 alpha-2 country",
        f"{where}.countries",
        problems,
    )
    continents = _codes(
        fields.get("continents"),
        CONTINENTS,
        f"continent ({', '.join(sorted(CONTINENTS))})",
        f"{where}.continents",
        problems,
    )
    latitude = _coordinate(fields, "lat", 90, where, problems)
    longitude = _coordinate(fields, "lon", 180, where, problems)
    if (latitude is None) != (longitude is None):
        missing = "lon" if longitude is None else "lat"
        if missing not in fields:
            problems.add(f"{where}.{missing}", "lat and lon go together: give both or neither")
        latitude = longitude = None
    priority = integer(
        fields, "priority", 0, where, problems, minimum=-MAX_PRIORITY, maximum=MAX_PRIORITY
    )
    timeout = duration_field(
        fields,
        "timeout",
        DEFAULT_TIMEOUT_MS,
        where,
        problems,
        minimum_ms=1,
        maximum_ms=MAX_TIMEOUT_MS,
    )
    max_in_flight = integer(
        fields,
        "max_in_flight",
        DEFAULT_MAX_IN_FLIGHT,
        where,
        problems,
        minimum=1,
        maximum=MAX_IN_FLIGHT,
    )
    health = None
    if fields.get("health") is not None:
        health = _parse_health(fields["health"], f"{where}.health", problems)
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


def parse_origin_url(value: object, where: str, problems: Problems) -> str | None:
    """An origin's base URL without its trailing slash, or ``None`` after recording a problem.

    http or https, with a host, no credentials, no query or fragment, no whitespace.
    """
    usage = "must be an http(s) URL like 'https://api.example.com'"
    if not isinstance(value, str) or not value:
        problems.add(where, f"{usage}, got {shown(value)}")
        return None
    if any(ch <= " " or ch == "\x7f" for ch in value):
        problems.add(
            where, f"must not contain whitespace or control characters, got {shown(value)}"
        )
        return None
    if "\\" in value:
        # The runtime's URL parser (WHATWG) reads a backslash as '/' in an http(s) URL:
        # 'https://a.example\\x' is a fetch of https://a.example/x/..., not that host.
        problems.add(where, f"must not contain '\\', which fetch reads as '/', got {shown(value)}")
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.add(where, f"{usage}, got {shown(value)}")
        return None
    host = parts.hostname
    if not (host.startswith("[") or ":" in host) and not _HOST_RE.fullmatch(host):
        hint = (
            " (a `$NAME` is read as a secret in origin_headers only, never in a URL)"
            if "$" in host
            else ""
        )
        problems.add(
            where,
            f"has a host that is not a domain name or address (letters, digits, '-', '_' "
            f"and '.'){hint}, got {shown(value)}",
        )
        return None
    if "?" in value or "#" in value:
        problems.add(where, f"must not carry a query or fragment, got {shown(value)}")
        return None
    if "@" in parts.netloc:
        problems.add(
            where,
            f"must not carry credentials (user:password@), which the runtime's fetch "
            f"refuses, got {shown(parts.hostname)} with credentials",
        )
        return None
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        problems.add(where, f"has an invalid port (1 to 65535), got {shown(value)}")
        return None
    if _BAD_PERCENT_RE.search(parts.path):
        problems.add(where, f"has an invalid percent-encoding in its path, got {shown(value)}")
        return None
    segments = [unquote(segment) for segment in parts.path.split("/")]
    if "." in segments or ".." in segments:
        problems.add(
            where,
            f"has a dot segment ('.' or '..') in its path, which fetch resolves away; "
            f"write the path as it resolves, got {shown(value)}",
        )
        return None
    return value.rstrip("/")


_BAD_PERCENT_RE = re.compile(r"%(?![0-9A-Fa-f]{2})")
#: A host name fetch sends as written (non-ASCII letters go out in IDNA).
_HOST_RE = re.compile(r"[\w.-]+")


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


def _coordinate(
    fields: Mapping[str, Any], name: str, limit: int, where: str, problems: Problems
) -> float | None:
    """A latitude (``limit`` 90) or longitude (180) in degrees, or ``None``."""
    value = fields.get(name)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not isfinite(value)
        or not -limit <= value <= limit
    ):
        problems.add(
            f"{where}.{name}", f"must be a number of degrees -{limit}..{limit}, got {shown(value)}"
        )
        return None
    return float(value)


def _parse_health(raw: object, where: str, problems: Problems) -> HealthCheck | None:
    fields = table(raw, where, problems)
    if fields is None:
        return None
    unknown_fields(fields, _HEALTH_FIELDS, where, problems)
    path = fields.get("path")
    if not isinstance(path, str) or not path.startswith("/") or any(ch <= " " for ch in path):
        problems.add(
            f"{where}.path",
            "is required: a path like '/health'"
            if path is None
            else f"must be a path like '/health', got {shown(path)}",
        )
        path = "/"
    timeout = duration_field(
        fields,
        "timeout",
        DEFAULT_HEALTH_TIMEOUT_MS,
        where,
        problems,
        minimum_ms=1,
        maximum_ms=MAX_HEALTH_TIMEOUT_MS,
    )
    unhealthy_after = integer(
        fields, "unhealthy_after", DEFAULT_UNHEALTHY_AFTER, where, problems, minimum=1, maximum=100
    )
    statuses: tuple[int, ...] = ()
    raw_statuses = fields.get("statuses")
    if raw_statuses is not None:
        if (
            not isinstance(raw_statuses, list)
            or not raw_statuses
            or not all(is_int(s) and 100 <= s <= 599 for s in raw_statuses)
        ):
            problems.add(
                f"{where}.statuses",
                f"must be a non-empty list of HTTP statuses 100..599, got {shown(raw_statuses)}",
            )
        else:
            statuses = tuple(sorted(set(raw_statuses)))
    return HealthCheck(path, timeout, statuses, unhealthy_after)
