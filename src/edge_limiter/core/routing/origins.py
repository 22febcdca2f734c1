"""Origin pools: where a route's requests go.

A pool is a named list of interchangeable origins with one breaker and one retry policy
(``[pools.NAME]``; its schema and parser are :mod:`edge_limiter.core.config.pools`).
Origin names are unique across all pools: they key the breaker state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import unquote, urlsplit

from ..http.origin_headers import OriginHeader
from ..resilience.breaker import BreakerSettings
from ..resilience.retry import RetrySettings
from ..resilience.shared import DEFAULT_UNHEALTHY_AFTER
from ..validation import Problems, shown

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
