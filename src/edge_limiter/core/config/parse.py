"""The strict config parser: plain data (TOML or JSON) in, frozen :class:`Config` out.

::

    origin = "https://api.example.com"   # where admitted and unmatched requests go
                                         # (or pool = "NAME", one of [pools.NAME])
    origin_timeout = "30s"               # how long a request may take at the origins
    store_timeout_ms = 1000              # budget for one Durable Object call
    paths = { case_insensitive = false, matrix_params = "keep" }

    [[routes]]
    name = "login"
    match = { methods = ["POST"], path = "/v1/login", host = "api.example.com" }
    limits = "5/minute; 20/hour"         # or [{ rate = "10/s", burst = 20, name = "burst" }]
    algorithm = "sliding_log"
    key = ["ip", "header:x-tenant"]
    on_store_error = "closed"
    # leases = true                      # or { ttl = "500ms" }: isolates admit from units
                                         # taken ahead (token_bucket, gcra, the windows)

Every problem in the whole config is collected and raised as ONE :class:`ConfigError`,
each line naming the route and the field; warnings (legal, but probably not meant) are
kept on the config. The first matching route wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..caching.fields import HOP_BY_HOP, is_token
from ..caching.settings import parse_cache
from ..canonical import MATRIX_MODES
from ..errors import ConfigError, KeySpecError, PatternError, RateParseError
from ..http.cors import parse_cors
from ..http.method_override import MODES as OVERRIDE_MODES
from ..http.origin_headers import (
    FORWARDED_AS_FIELDS,
    FORWARDED_HOST_FIELDS,
    NEVER_SET,
    NOT_AN_ADDRESS,
    PATH_OVERRIDE_FIELDS,
    parse_origin_headers,
)
from ..idempotency.settings import parse_idempotency
from ..keys import KeyPart, KeySpec, parse_key_part, shared_by_address
from ..matching import PathPattern, host_covers, parse_host_pattern
from ..ratelimit.algorithms import ALGORITHMS, Leasable, make_algorithm
from ..ratelimit.leases.policy import LEASABLE, default_ttl, lease_reserve_ok
from ..ratelimit.protocol import algorithm_of
from ..ratelimit.rates import MAX_QUOTA, Limit, Rate, parse_rate, parse_rates
from ..resilience.breaker import BreakerSettings
from ..resilience.retry import IDEMPOTENT_METHODS, RetrySettings, parse_retry
from ..routing.origins import (
    PLAIN_LABEL,
    Origin,
    Pool,
    fit_trial_timeout,
    parse_origin_url,
    parse_pools,
)
from ..validation import (
    Problems,
    boolean,
    choice,
    duration,
    integer,
    is_int,
    shown,
    table,
    unknown_fields,
)
from .model import (
    DEFAULT_ORIGIN_TIMEOUT_MS,
    DEFAULT_STORE_TIMEOUT_MS,
    Config,
    FailurePolicy,
    Forwarding,
    Match,
    Operations,
    RateLimitPolicy,
    Route,
)

DEFAULT_ALGORITHM = "sliding_window"
#: Methods are RFC 9110 tokens, matched as written (upper case by convention).
METHOD_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}$")
ROUTE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
POLICY_NAME_RE = ROUTE_NAME_RE
MAX_STORE_TIMEOUT_MS = 30_000
MAX_ORIGIN_TIMEOUT_MS = 10 * 60_000
#: Write-behind's interval bounds what a restart of a key's object may forget.
MAX_WRITE_BEHIND_MS = 10_000

TOP_FIELDS = (
    "shadow",
    "storage",
    "deny_cache",
    "admin",
    "overrides",
    "logging",
    "origin",
    "pool",
    "pools",
    "origin_timeout",
    "store_timeout_ms",
    "paths",
    "method_override",
    "client_ip_header",
    "forwarded_host",
    "origin_headers",
    "cors",
    "routes",
)
ROUTE_FIELDS = (
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
    "write_behind",
    "leases",
    "on_store_error",
    "origin",
    "pool",
    "timeout",
    "retry",
    "refund_on",
    "cache",
    "idempotency",
)
MATCH_FIELDS = ("methods", "path", "host", "case_insensitive")
LIMIT_FIELDS = ("rate", "name", "burst", "algorithm")
#: The methods local workerd hands to the Worker (checked one by one); others (CONNECT,
#: LINK, MKCALENDAR, made-up names) it answers itself, so a route for them draws a warning.
REACHABLE_METHODS = frozenset(
    (
        *("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PURGE"),
        *("QUERY", "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK"),
        *("SEARCH", "REPORT", "ACL", "BAN", "MKACTIVITY", "CHECKOUT", "MERGE", "NOTIFY"),
        *("SUBSCRIBE", "UNSUBSCRIBE"),
    )
)
LEASE_FIELDS = ("ttl",)
#: A lease longer than this only makes its units sit longer in an isolate that went away.
MAX_LEASE_TTL_MS = 60_000
PATHS_FIELDS = ("case_insensitive", "matrix_params")


# --- limits ---------------------------------------------------------------------------------


def _limit_table(item: Mapping[str, Any], where: str, problems: Problems) -> Limit | None:
    before = len(problems)
    unknown_fields(item, LIMIT_FIELDS, where, problems)
    try:
        rate = parse_rate(item.get("rate"))
    except RateParseError as exc:
        problems.add(f"{where}.rate", str(exc))
        return None
    name = item.get("name", "")
    if "name" in item and (not isinstance(name, str) or not POLICY_NAME_RE.fullmatch(name)):
        problems.add(
            f"{where}.name",
            "must be 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or "
            f"digit, got {shown(name)}",
        )
    burst = item.get("burst")
    if burst is not None and (not is_int(burst) or not 1 <= burst <= MAX_QUOTA):
        problems.add(
            f"{where}.burst", f"must be an integer from 1 to {MAX_QUOTA}, got {shown(burst)}"
        )
    algorithm = ""
    if "algorithm" in item:
        algorithm = choice(
            item, "algorithm", "", where, problems, options=tuple(ALGORITHMS), hints=ALGORITHM_HINTS
        )
    if len(problems) != before:
        return None
    return Limit(rate, burst, name if isinstance(name, str) else "", algorithm)


def _parse_limits(value: object, where: str, problems: Problems) -> list[Limit]:
    """``"10/second; 1000/hour"``, a list of such strings, or tables ``{rate, name, burst}``."""
    if isinstance(value, str):
        try:
            return [Limit(rate) for rate in parse_rates(value)]
        except RateParseError as exc:
            problems.add(where, str(exc))
            return []
    if not isinstance(value, list) or not value:
        problems.add(
            where,
            "must be a string like '10/second; 1000/hour' or a list of such strings or "
            f"tables {{ rate, burst, name }}, got {shown(value)}",
        )
        return []
    limits: list[Limit] = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        if isinstance(item, str):
            try:
                limits.extend(Limit(rate) for rate in parse_rates(item))
            except RateParseError as exc:
                problems.add(at, str(exc))
        elif isinstance(item, Mapping):
            limit = _limit_table(item, at, problems)
            if limit is not None:
                limits.append(limit)
        else:
            problems.add(
                at, f"must be a rate string or a table {{ rate, burst, name }}, got {shown(item)}"
            )
    by_window: dict[int, list[Limit]] = {}
    for limit in limits:
        by_window.setdefault(limit.rate.window_ms, []).append(limit)
    for same in by_window.values():
        if len(same) > 1:
            written = " and ".join(str(limit) for limit in same)
            problems.add(where, f"two limits over the same window ({written})")
    names = [limit.name for limit in limits]
    if len(set(names)) != len(names):
        problems.add(where, f"policy names must be unique, got {names}")
    return limits


def never_binding(limits: list[Limit], algorithm: str) -> list[tuple[Limit, Limit]]:
    """Pairs ``(loose, strict)`` of one route's limits where ``strict`` denies whenever
    ``loose`` would, so ``loose`` changes nothing (it only shows in the policy fields).

    Only limits counted by the same algorithm are compared, and only where it is certain:
    a bucket (``token_bucket``, ``gcra``) that holds no more and refills no faster than
    another is always at least as empty (both take the same requests, and it drains
    slower); a ``sliding_log`` window that is longer and admits no more covers the
    shorter one; a ``fixed_window`` or ``sliding_window`` likewise when its window is a
    whole multiple of the other's (windows are aligned to UTC, so each short window lies
    inside one long one, and a sliding window's weighted estimate over the long windows
    is never below the one over the short windows). The other way round, a longer window
    that admits at least all the shorter one can let into it (:func:`_most_admitted`:
    ``5/second`` and ``300/minute`` for a ``fixed_window``) never denies either.
    """
    pairs: list[tuple[Limit, Limit]] = []
    for at, loose in enumerate(limits):
        own = algorithm_of(loose, algorithm)
        for other, strict in enumerate(limits):
            if other == at or algorithm_of(strict, algorithm) != own:
                continue
            # Two that bind alike (the same bucket over other windows): the later one goes.
            if _stricter(strict, loose, own) and not (at < other and _stricter(loose, strict, own)):
                pairs.append((loose, strict))
                break
    return pairs


def _written(limit: Limit) -> str:
    return f"{limit.rate}, burst {limit.burst}" if limit.burst is not None else str(limit.rate)


def _stricter(strict: Limit, loose: Limit, algorithm: str) -> bool:
    s_rate, l_rate = strict.rate, loose.rate
    if algorithm in ("token_bucket", "gcra"):
        return (
            strict.capacity <= loose.capacity
            # refills no faster: quota per window compared without division
            and s_rate.quota * l_rate.window_ms <= l_rate.quota * s_rate.window_ms
        )
    if s_rate.window_ms < l_rate.window_ms:
        return l_rate.quota >= _most_admitted(s_rate, l_rate, algorithm)
    if algorithm == "sliding_log":
        return s_rate.window_ms > l_rate.window_ms and s_rate.quota <= l_rate.quota
    if algorithm in ("fixed_window", "sliding_window"):
        return (
            s_rate.window_ms > l_rate.window_ms
            and s_rate.window_ms % l_rate.window_ms == 0
            and s_rate.quota <= l_rate.quota
        )
    return False


def _most_admitted(shorter: Rate, longer: Rate, algorithm: str) -> float:
    """The most a ``shorter`` limit lets a ``longer`` window's count reach, whatever the
    traffic (``inf`` where it is not certain). A ``sliding_log``
    window of the longer length is covered by ``ceil(L / S)`` shorter ones, each holding
    at most ``quota``. Aligned windows where ``L`` is a whole multiple ``k`` of ``S``: a
    ``fixed_window`` long window is exactly ``k`` short ones; a ``sliding_window``'s
    estimate over the long windows (the previous one's count weighted down by the share
    gone by, rounded down, plus the current one's, with the request) is at most
    ``k + 1`` short windows' worth."""
    windows, part = divmod(longer.window_ms, shorter.window_ms)
    if algorithm == "sliding_log":
        return (windows + (part > 0)) * shorter.quota
    if algorithm in ("fixed_window", "sliding_window") and part == 0:
        return (windows if algorithm == "fixed_window" else windows + 1) * shorter.quota
    return float("inf")


def _apply_route_burst(
    limits: list[Limit], burst: object, algorithm: str, where: str, problems: Problems
) -> list[Limit]:
    """A route-level ``burst`` sizes the bucket of the limit with the SHORTEST window only.

    Every other limit keeps its quota as its bucket: ``"10/second; 1000/hour"`` with
    ``burst = 20`` lets 20 through at once and still about 1000 an hour.
    """
    if burst is None or not limits:
        return limits
    if not is_int(burst) or not 1 <= burst <= MAX_QUOTA:
        problems.add(
            f"{where}.burst", f"must be an integer from 1 to {MAX_QUOTA}, got {shown(burst)}"
        )
        return limits
    shortest = min(range(len(limits)), key=lambda i: limits[i].rate.window_ms)
    target = limits[shortest]
    if target.burst is not None:
        problems.add(
            f"{where}.burst",
            f"the limit {shown(target.name)} sets its own burst; set it in one place only",
        )
        return limits
    named = target.name != target.rate.name
    updated = Limit(target.rate, int(burst), target.name if named else "", target.algorithm)
    return [updated if i == shortest else limit for i, limit in enumerate(limits)]


#: Other names of the algorithms, and what to write instead.
ALGORITHM_HINTS = {
    "leaky_bucket": "a leaky bucket as a meter, as nginx's limit_req with nodelay, is 'gcra'",
    "moving_window": "the limits library's moving window is 'sliding_log'",
    "sliding_window_log": "write 'sliding_log'",
    "sliding_window_counter": "write 'sliding_window'",
    "fixed_window_counter": "write 'fixed_window'",
    "fixed": "write 'fixed_window'",
    "sliding": "write 'sliding_window' (a weighted counter) or 'sliding_log' (exact)",
    "token": "write 'token_bucket'",
}


def _check_algorithm_takes(
    algorithm: str, limits: list[Limit], where: str, problems: Problems, burst_field: str
) -> None:
    """Let each limit's algorithm (its own, else the route's) say whether it accepts the
    limit (burst, quota range)."""
    for limit in limits:
        own = algorithm_of(limit, algorithm)
        cls = ALGORITHMS[own]
        if limit.burst is not None and not cls.takes_burst:
            takers = ", ".join(name for name, c in ALGORITHMS.items() if c.takes_burst)
            problems.add(
                f"{where}.{burst_field}",
                f"a burst only applies to {takers}, not {own} (limit {shown(limit.name)})",
            )
            continue
        try:
            make_algorithm(own, limit)
        except ValueError as exc:
            problems.add(f"{where}.limits", f"{limit.name}: {exc}")


# --- keys -----------------------------------------------------------------------------------


#: Request fields that never reach an origin: a key on one counts what nobody checks.
_NEVER_FORWARDED = HOP_BY_HOP | {"expect", *PATH_OVERRIDE_FIELDS, *FORWARDED_AS_FIELDS}


def _parse_key(
    raw: Mapping[str, Any], params: tuple[str, ...], where: str, problems: Problems
) -> KeySpec:
    value = raw.get("key", "ip")
    items = value if isinstance(value, list) else [value]
    parts: list[KeyPart] = []
    if not items:
        problems.add(f"{where}.key", "must name at least one key part")
    for item in items:
        try:
            part = parse_key_part(item)
        except KeySpecError as exc:
            problems.add(f"{where}.key", str(exc))
            continue
        if part.kind == "header" and part.name.lower().replace("_", "-") in _NEVER_FORWARDED:
            problems.add(
                f"{where}.key",
                f"{part} is a field no origin ever gets (it describes the connection, or "
                "the gateway drops it): a client could send any value and get a counter "
                "of its own for free",
            )
            continue
        if part.kind == "path" and part.name not in params:
            problems.add(
                f"{where}.key",
                f"{part} names a path parameter that match.path does not capture "
                f"(it captures: {', '.join(params) or 'none'})",
            )
        parts.append(part)
    if len({str(p) for p in parts}) != len(parts):
        problems.add(f"{where}.key", "names the same key part twice")
    others = "+".join(str(part) for part in parts if part.kind != "global")
    if others and any(part.kind == "global" for part in parts):
        problems.add(
            f"{where}.key",
            "'global' is one counter for every request and cannot be combined with other "
            f"key parts: write key = 'global' for one shared counter, or drop it to count "
            f"by {others}",
        )
    v4 = integer(raw, "ipv4_prefix", 32, where, problems, minimum=1, maximum=32)
    v6 = integer(raw, "ipv6_prefix", 64, where, problems, minimum=1, maximum=128)
    if parts and not any(part.kind == "ip" for part in parts):
        for field in ("ipv4_prefix", "ipv6_prefix"):
            if field in raw:
                problems.warn(
                    f"{where}.{field}",
                    "has no effect: the route's key has no 'ip' part (it counts by "
                    f"{'+'.join(str(part) for part in parts)})",
                )
    return KeySpec(tuple(parts), v4, v6)


# --- match ----------------------------------------------------------------------------------


def _parse_match(value: object, case_default: bool, where: str, problems: Problems) -> Match | None:
    if not isinstance(value, Mapping):
        problems.add(
            f"{where}.match",
            "is required: a table like { path = '/v1/*' }"
            if value is None
            else f"must be a table like {{ path = '/v1/*' }}, got {shown(value)}",
        )
        return None
    before = len(problems)
    unknown_fields(value, MATCH_FIELDS, f"{where}.match", problems)
    case_insensitive = boolean(value, "case_insensitive", case_default, f"{where}.match", problems)
    path = PathPattern.parse("*")
    try:
        path = PathPattern.parse(value.get("path"), case_insensitive)
    except PatternError as exc:
        problems.add(f"{where}.match.path", str(exc))
    else:
        named = [seg for seg in path.source.split("/") if re.fullmatch(r":[A-Za-z_]\w*", seg)]
        if named:
            problems.warn(
                f"{where}.match.path",
                f"{named[0]!r} is matched as written (a segment of that very text): a "
                f"parameter is written {{{named[0][1:]}}}",
            )
    methods: frozenset[str] | None = None
    raw_methods = value.get("methods")
    if raw_methods == ["*"]:
        raw_methods = "*"  # every method, as written alone
    if raw_methods is not None and raw_methods != "*":
        listed = raw_methods if isinstance(raw_methods, list) else [raw_methods]
        bad = [m for m in listed if not isinstance(m, str) or not METHOD_RE.fullmatch(m)]
        if "*" in listed:
            problems.add(
                f"{where}.match.methods",
                f"'*' means every method: write methods = '*' alone, got {shown(raw_methods)}",
            )
        elif bad or not listed:
            problems.add(
                f"{where}.match.methods",
                f"must be '*' or a list of methods like ['GET', 'POST'], got {shown(raw_methods)}",
            )
        else:
            methods = frozenset(m.upper() for m in listed)
            unusual = sorted(methods - REACHABLE_METHODS)
            if unusual:
                every = {"ALL", "ANY"} & set(unusual)
                hint = (
                    f" ({', '.join(sorted(every))} is no method: every method is written "
                    "methods = '*')"
                    if every
                    else ""
                )
                problems.warn(
                    f"{where}.match.methods",
                    f"{', '.join(unusual)}: local workerd answers such requests itself (501, "
                    f"or 500 for CONNECT) before the Worker runs, so this never matches "
                    f"there{hint}",
                )
            if "GET" in methods:
                # Origins answer HEAD by running GET (RFC 9110 9.3.2): a HEAD must not
                # reach the origin uncounted where a GET is limited.
                methods |= {"HEAD"}
    host = None
    if value.get("host") is not None:
        try:
            host = parse_host_pattern(value["host"])
        except PatternError as exc:
            problems.add(f"{where}.match.host", str(exc))
    if len(problems) != before:
        return None
    return Match(path, methods, host)


# --- a route --------------------------------------------------------------------------------


def _route_name(raw: Mapping[str, Any], index: int, problems: Problems) -> tuple[str, str]:
    """``(name, where)``: the route's name and how problems refer to it."""
    name = raw.get("name")
    if isinstance(name, str) and ROUTE_NAME_RE.fullmatch(name):
        return name, f"route {shown(name)}"
    where = f"routes[{index}]"
    rule = "letters, digits, '_', '.', '-' (at most 64, no ':' or '#')"
    problems.add(
        f"{where}.name",
        f"is required: {rule}"
        if name is None
        else f"must be {rule}, starting with a letter or digit, got {shown(name)}",
    )
    return where, where


def _parse_route(
    raw: Mapping[str, Any],
    name: str,
    where: str,
    defaults: _Defaults,
    problems: Problems,
) -> Route | None:
    before = len(problems)
    unknown_fields(raw, ROUTE_FIELDS, where, problems)
    match = _parse_match(raw.get("match"), defaults.case_insensitive, where, problems)

    algorithm = choice(
        raw,
        "algorithm",
        DEFAULT_ALGORITHM,
        where,
        problems,
        options=tuple(ALGORITHMS),
        hints=ALGORITHM_HINTS,
    )
    limits = _parse_limits(raw.get("limits"), f"{where}.limits", problems)
    # A limit written with the route's own algorithm is an ordinary one.
    limits = [replace(lim, algorithm="") if lim.algorithm == algorithm else lim for lim in limits]
    limits = _apply_route_burst(limits, raw.get("burst"), algorithm, where, problems)
    # A burst is written for the whole route, or in a limit's table.
    burst_field = "burst" if "burst" in raw else "limits"
    _check_algorithm_takes(algorithm, limits, where, problems, burst_field)
    for loose, strict in never_binding(limits, algorithm):
        problems.warn(
            f"{where}.limits",
            f"the limit {shown(loose.name)} ({_written(loose)}) can never deny a request: "
            f"{shown(strict.name)} ({_written(strict)}) denies first, "
            "whatever the traffic. Remove it, or make it stricter than that one",
        )

    cost = raw.get("cost", 1)
    if not is_int(cost) or cost < 1:
        problems.add(f"{where}.cost", f"must be a positive integer, got {shown(cost)}")
        cost = 1
    elif limits and cost > min(limit.capacity for limit in limits):
        smallest = min(limit.capacity for limit in limits)
        problems.add(
            f"{where}.cost",
            f"{cost} exceeds the smallest limit ({smallest}): no request could ever pass",
        )
    shadow = boolean(raw, "shadow", False, where, problems)
    if raw.get("shadow") is False and defaults.shadow_everywhere:
        problems.warn(
            f"{where}.shadow",
            "has no effect: the top level's shadow = true blocks nothing on any route "
            "(set shadow = true per route instead, to keep this one enforcing)",
        )
    write_behind = 0
    if raw.get("write_behind") is not None:
        write_behind = duration(
            raw,
            "write_behind",
            0,
            where,
            problems,
            minimum_ms=1,
            maximum_ms=MAX_WRITE_BEHIND_MS,
        )
    lease_ttl = _parse_leases(raw.get("leases"), algorithm, limits, where, problems)
    on_store_error = choice(
        raw, "on_store_error", "open", where, problems, options=("open", "closed")
    )
    # As the gateway runs it: under the top level's shadow every route is one, and a
    # shadow route checks every request with its object (no leases).
    shadowed = shadow is True or defaults.shadow_everywhere
    if shadowed:
        which = "this route's" if shadow is True else "the top level's"
        ignored = [
            (
                "on_store_error",
                "a shadow route admits its requests when its counters "
                "cannot be reached too (the failure is logged)",
                on_store_error == "closed",
            ),
            (
                "leases",
                "a shadow route checks every request with its Durable Object, to "
                "report what would be",
                lease_ttl > 0,
            ),
        ]
        for field, why, written in ignored:
            if written:
                problems.warn(
                    f"{where}.{field}", f"has no effect under {which} shadow = true: {why}"
                )
    params = match.path.params if match is not None else ()
    key = _parse_key(raw, params, where, problems)

    timeout = duration(
        raw,
        "timeout",
        defaults.origin_timeout_ms,
        where,
        problems,
        minimum_ms=1,
        maximum_ms=MAX_ORIGIN_TIMEOUT_MS,
    )
    pool = defaults.upstreams.for_route(raw, timeout, where, problems)
    if pool is None and defaults.origin_url is not None:
        # The top-level origin, with this route's timeout for each attempt.
        pool = defaults.upstreams.of_url(defaults.origin_url, timeout, where, problems)
    if (
        pool is None
        and defaults.pool is None
        and raw.get("origin") is None
        and raw.get("pool") is None
        and not defaults.origin_given
    ):
        problems.add(
            f"{where}.origin",
            "no origin to forward to: set 'origin' or 'pool' on the route or at the top level",
        )
    pool = pool if pool is not None else defaults.pool
    retry = pool.retry if pool is not None else RetrySettings()
    if raw.get("retry") is not None:
        retry = parse_retry(raw["retry"], f"{where}.retry", problems)
    refund_on = _statuses(raw.get("refund_on"), f"{where}.refund_on", problems)
    served = sorted(status for status in refund_on if status < 400)
    if served:
        problems.warn(
            f"{where}.refund_on",
            f"gives back the unit of every request answered {', '.join(map(str, served))}: "
            "those requests are never counted (refund_on is meant for the failures a "
            "client should not pay for, such as 502, 503, 504)",
        )
    cache = parse_cache(raw.get("cache"), f"{where}.cache", problems)
    idempotency = parse_idempotency(raw.get("idempotency"), f"{where}.idempotency", problems)
    matched = match.methods if match is not None else None
    if cache is not None and matched is not None and "GET" not in matched:
        problems.warn(
            f"{where}.cache",
            f"never stores anything: the route matches only {', '.join(sorted(matched))}, "
            "and the cache stores answers to GET (a HEAD is answered from the stored GET "
            "answer of its route, never stored itself)",
        )
    if (
        raw.get("retry") is not None
        and retry.attempts > 1  # attempts = 1 says "never retry": nothing to warn of
        and idempotency is None
        and matched is not None
        and not matched & IDEMPOTENT_METHODS
    ):
        problems.warn(
            f"{where}.retry",
            f"has no effect: the route matches only {', '.join(sorted(matched))}, which are "
            "never sent twice (the origin may have acted on the first); with an "
            "idempotency table, requests holding an Idempotency-Key are retried when the "
            "origin says it did not act",
        )
    if (
        idempotency is not None
        and matched is not None
        and not any(idempotency.applies_to(m) for m in matched)
        # A protected POST made one of the route's methods by an override stays protected.
        and not (idempotency.applies_to("POST") and matched - {"GET", "HEAD", "OPTIONS"})
    ):
        problems.warn(
            f"{where}.idempotency",
            f"protects nothing: the route matches only {', '.join(sorted(matched))}, and "
            f"an Idempotency-Key applies to {', '.join(idempotency.methods)}",
        )
    raw_cache = raw.get("cache")
    if (
        cache is not None
        and isinstance(raw_cache, dict)
        and "scope" not in raw_cache
        and any(part.kind in ("header", "cookie") for part in key.parts)
    ):
        named = ", ".join(str(p) for p in key.parts if p.kind in ("header", "cookie"))
        problems.warn(
            f"{where}.cache.scope",
            f"is not set, so one stored answer serves every key of this route ({named}): "
            'set scope = "key" if the origin answers each key its own, or scope = '
            '"public" to say the answers are the same for all',
        )
    if shared_by_address(key):
        counted = ", ".join(str(part) for part in key.parts)
        apart = (
            "told apart only by Authorization, Cookie, Proxy-Authorization and the headers "
            "routes key on"
        )
        if idempotency is not None and not idempotency.fingerprint_headers:
            problems.warn(
                f"{where}.idempotency",
                f"records are kept per rate-limit key ({counted}), which every caller behind "
                f"one address shares (a NAT, a proxy, a mobile carrier): callers are {apart}. "
                "If your API's callers send another credential (an X-Auth-Token), name it in "
                "fingerprint_headers, or key the route on it: else a caller reusing another's "
                "Idempotency-Key is replayed that caller's answer",
            )
        if cache is not None and cache.scope == "key":
            problems.warn(
                f"{where}.cache.scope",
                f'"key" keeps an entry per rate-limit key ({counted}), which every caller '
                f"behind one address shares: callers are {apart}, and by the origin's own "
                "Vary. Key the route on the caller's credential, or have the origin answer "
                "with Vary naming it (or Cache-Control: private)",
            )
    if idempotency is not None and idempotency.lock_timeout_ms <= timeout:
        problems.warn(
            f"{where}.idempotency.lock_timeout",
            f"is not longer than the origin timeout ({timeout} ms): a retry that arrives "
            "after the lock ends, while the first request is still at the origin, is "
            "forwarded again",
        )
    if len(problems) != before or match is None or pool is None:
        return None
    return Route(
        name=name,
        match=match,
        limits=RateLimitPolicy(
            algorithm,
            tuple(limits),
            key,
            cost,
            shadowed,
            write_behind,
            0 if shadowed else lease_ttl,
        ),
        failure=FailurePolicy(on_store_error == "open", defaults.store_timeout_ms),
        forward=Forwarding(pool, timeout, retry, refund_on),
        cache=cache,
        idempotency=idempotency,
    )


def _parse_leases(
    value: object, algorithm: str, limits: list[Limit], where: str, problems: Problems
) -> int:
    """``leases = true`` or ``leases = { ttl = "500ms" }``: the lease ttl in ms (0: off)."""
    where = f"{where}.leases"
    if value is None or value is False:
        return 0
    settings: Mapping[str, Any] = {}
    if value is not True:
        if not isinstance(value, Mapping):
            problems.add(
                where,
                f"must be true, false or a table like {{ ttl = '500ms' }}, got {shown(value)}",
            )
            return 0
        settings = value
        unknown_fields(settings, LEASE_FIELDS, where, problems)
    mixed = sorted({lim.algorithm for lim in limits if lim.algorithm})
    if mixed:
        problems.add(
            where,
            f"leases need one algorithm for all the route's limits, and a limit here uses "
            f"{', '.join(mixed)} (the route: {algorithm})",
        )
        return 0
    if algorithm not in LEASABLE:
        problems.add(
            where,
            f"algorithm {algorithm!r} counts every request exactly and cannot lease "
            f"(leasable: {', '.join(sorted(LEASABLE))})",
        )
        return 0
    found = len(problems)
    ttl = duration(
        settings,
        "ttl",
        default_ttl(algorithm),
        where,
        problems,
        minimum_ms=1,
        maximum_ms=MAX_LEASE_TTL_MS,
    )
    if len(problems) > found:
        # The ttl written is refused (said above): no advice from a ttl nobody wrote.
        return 0
    for limit in limits:
        why = lease_reserve_ok(limit, algorithm, ttl)
        if why is not None:
            problems.add(where, why)
            return 0
    for limit in limits:
        try:
            bucket = ALGORITHMS[algorithm](limit)
        except ValueError:
            return 0  # the limit itself is refused where it is written
        if not isinstance(bucket, Leasable):
            return 0  # refused above
        reserve = bucket.lease_reserve(ttl)
        if reserve * 10 >= limit.capacity:
            advice = (
                "a shorter ttl keeps less"
                if bucket.lease_reserve(1) < reserve
                else "leases do not suit a limit this small"
            )
            problems.warn(
                where,
                f"keeps {reserve} of the {limit.capacity} units of {limit} in reserve (a "
                f"ttl of refill, for the lag between grant and use): at most "
                f"{limit.capacity - reserve} pass at once; {advice}, and without leases "
                "every unit can be used"
                + (
                    "; with more than half in reserve the sustained rate falls too (an "
                    "isolate then gets a unit or two per lease and waits out each lease: "
                    "10/s with a 900ms ttl admitted 7 of 59 in 5 s of 20 requests/s, "
                    "simulated)"
                    if reserve * 2 > limit.capacity
                    else ""
                ),
            )
    return ttl


def _statuses(value: object, where: str, problems: Problems) -> frozenset[int]:
    """A list of HTTP statuses (``refund_on = [502, 503, 504]``); empty when absent."""
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(is_int(v) and 100 <= v <= 599 for v in value):
        problems.add(where, f"must be a list of HTTP statuses 100..599, got {shown(value)}")
        return frozenset()
    return frozenset(value)


#: The bulkhead of a plain ``origin`` URL: no cap.
UNCAPPED = 1_000_000_000


class _Upstreams:
    """The pools a config defines, and the pools of one made for plain ``origin`` URLs."""

    def __init__(
        self, pools: dict[str, Pool], timeout_ms: int, written: frozenset[str] = frozenset()
    ) -> None:
        self.pools = pools
        self.timeout_ms = timeout_ms
        self.written = written
        """Every pool name the config writes, those too broken to use included (their
        problems are reported; a route naming one is not told it names no pool)."""
        self.by_url: dict[str, Pool] = {}
        self.named = {o.name: o.url for pool in pools.values() for o in pool.origins}
        self.label_taken_told = False

    def of_url(self, url: str, timeout_ms: int, where: str, problems: Problems) -> Pool:
        """The pool of one for ``url``; its origin is named by the URL without scheme."""
        name = url.split("://", 1)[1]
        if self.named.get(name, url) != url:
            problems.add(where, f"the origin name {shown(name)} is taken by a pool's origin")
        if PLAIN_LABEL in self.named and not self.label_taken_told:
            self.label_taken_told = True
            problems.add(
                where,
                f"a pool's origin is named {shown(PLAIN_LABEL)}, the name clients and the "
                "admin API give this plain origin (X-Origin): rename that pool origin",
            )
        key = f"{url}#{timeout_ms}"
        if key not in self.by_url:
            # A plain URL has no concurrency cap (a pool's origins have max_in_flight).
            origin = Origin(
                name=name, url=url, timeout_ms=timeout_ms, max_in_flight=UNCAPPED, named=False
            )
            breaker = fit_trial_timeout(BreakerSettings(), (origin,))
            self.by_url[key] = Pool(name, (origin,), breaker)
        return self.by_url[key]

    def named_pool(self, value: object, where: str, problems: Problems) -> Pool | None:
        if isinstance(value, str) and value in self.pools:
            return self.pools[value]
        if isinstance(value, str) and value in self.written:
            return None  # defined, and its own problems say what is wrong with it
        known = ", ".join(self.pools) or "none defined"
        problems.add(where, f"names no pool in [pools] (known: {known}), got {shown(value)}")
        return None

    def for_route(
        self, raw: Mapping[str, Any], timeout_ms: int, where: str, problems: Problems
    ) -> Pool | None:
        """The route's own ``pool`` or ``origin``, if it sets one."""
        if raw.get("pool") is not None and raw.get("origin") is not None:
            problems.add(f"{where}.pool", "set 'pool' or 'origin', not both")
            return None
        if raw.get("pool") is not None:
            return self.named_pool(raw["pool"], f"{where}.pool", problems)
        if raw.get("origin") is not None:
            url = parse_origin_url(raw["origin"], f"{where}.origin", problems)
            return self.of_url(url, timeout_ms, f"{where}.origin", problems) if url else None
        return None


@dataclass(frozen=True, slots=True)
class _Defaults:
    """Top-level settings that routes inherit."""

    upstreams: _Upstreams
    pool: Pool | None
    origin_url: str | None
    origin_timeout_ms: int
    store_timeout_ms: int
    case_insensitive: bool
    origin_given: bool = False
    """Whether the top level names an origin or a pool (a broken one has its own problem)."""
    shadow_everywhere: bool = False
    """The top level's ``shadow``: nothing is blocked anywhere."""


def _unreachable(routes: list[Route], problems: Problems) -> None:
    """Warn about a route that an earlier route shadows completely."""
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


_ADMIN_PREFIX_RE = re.compile(r"(/[A-Za-z0-9_.~-]+)+")


def _operations(raw: Mapping[str, Any], problems: Problems) -> Operations:
    """The top-level operator settings: shadow, deny_cache, admin, overrides, logging."""
    defaults = Operations()
    shadow = boolean(raw, "shadow", False, "config", problems)
    ttl, max_keys = defaults.deny_cache_ttl_ms, defaults.deny_cache_max_keys
    deny = raw.get("deny_cache", {})
    if isinstance(deny, Mapping):
        unknown_fields(deny, ("enabled", "max_keys", "max_ttl"), "config.deny_cache", problems)
        if shadow is True and deny:
            problems.warn(
                "config.deny_cache",
                "has no effect: with shadow = true nothing is denied, so nothing is cached",
            )
        enabled = boolean(deny, "enabled", True, "config.deny_cache", problems)
        ttl = duration(
            deny, "max_ttl", ttl, "config.deny_cache", problems, minimum_ms=1, maximum_ms=300_000
        )
        max_keys = integer(
            deny, "max_keys", max_keys, "config.deny_cache", problems, minimum=1, maximum=1_000_000
        )
        if enabled is False and ("max_ttl" in deny or "max_keys" in deny):
            problems.warn(
                "config.deny_cache",
                "max_ttl and max_keys have no effect with enabled = false (no denial is "
                "remembered)",
            )
        ttl = ttl if enabled else 0
    else:
        problems.add("config.deny_cache", f"must be a table, got {shown(deny)}")
    prefix = defaults.admin_prefix
    admin = raw.get("admin", {})
    if isinstance(admin, Mapping):
        unknown_fields(admin, ("prefix",), "config.admin", problems)
        prefix = admin.get("prefix", prefix)
        if not isinstance(prefix, str) or not _ADMIN_PREFIX_RE.fullmatch(prefix):
            problems.add(
                "config.admin.prefix",
                f"must be a path like '/_edge-limiter' (no trailing slash), got {shown(prefix)}",
            )
            prefix = defaults.admin_prefix
    else:
        problems.add("config.admin", f"must be a table, got {shown(admin)}")
    refresh = defaults.overrides_refresh_ms
    overrides = raw.get("overrides", {})
    if isinstance(overrides, Mapping):
        unknown_fields(overrides, ("refresh",), "config.overrides", problems)
        refresh = duration(
            overrides,
            "refresh",
            refresh,
            "config.overrides",
            problems,
            minimum_ms=1_000,
            maximum_ms=300_000,
        )
    else:
        problems.add("config.overrides", f"must be a table, got {shown(overrides)}")
    sample, near = defaults.sample_allowed, defaults.near_limit
    logging = raw.get("logging", {})
    if isinstance(logging, Mapping):
        unknown_fields(logging, ("sample_allowed", "near_limit"), "config.logging", problems)
        sample = _fraction(logging, "sample_allowed", sample, problems)
        near = _fraction(logging, "near_limit", near, problems)
    else:
        problems.add("config.logging", f"must be a table, got {shown(logging)}")
    cleanup = defaults.cleanup_after_ms
    storage = table(raw.get("storage", {}), "config.storage", problems)
    if storage is not None:
        unknown_fields(storage, ("cleanup_after",), "config.storage", problems)
        cleanup = duration(
            storage,
            "cleanup_after",
            cleanup,
            "config.storage",
            problems,
            minimum_ms=1_000,
            maximum_ms=86_400_000,
        )
    return Operations(shadow, ttl, max_keys, prefix, refresh, sample, near, cleanup)


def _fraction(raw: Mapping[str, Any], name: str, default: float, problems: Problems) -> float:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        problems.add(f"config.logging.{name}", f"must be a number from 0 to 1, got {shown(value)}")
        return default
    return float(value)


def parse_config(raw: object) -> Config:
    """Parse and validate a whole config; raises one :class:`ConfigError` listing every problem."""
    problems = Problems()
    if not isinstance(raw, Mapping):
        raise ConfigError([f"config: must be a table with 'routes', got {type(raw).__name__}"])
    unknown_fields(raw, TOP_FIELDS, "config", problems)

    origin_timeout = duration(
        raw,
        "origin_timeout",
        DEFAULT_ORIGIN_TIMEOUT_MS,
        "config",
        problems,
        minimum_ms=1,
        maximum_ms=MAX_ORIGIN_TIMEOUT_MS,
    )
    raw_pools = raw.get("pools")
    written = frozenset(raw_pools) if isinstance(raw_pools, Mapping) else frozenset()
    upstreams = _Upstreams(parse_pools(raw_pools, problems), origin_timeout, written)
    default_pool = upstreams.for_route(raw, origin_timeout, "config", problems)
    store_timeout = integer(
        raw,
        "store_timeout_ms",
        DEFAULT_STORE_TIMEOUT_MS,
        "config",
        problems,
        minimum=1,
        maximum=MAX_STORE_TIMEOUT_MS,
    )
    case_insensitive = False
    matrix_params = "keep"
    paths = raw.get("paths", {})
    if not isinstance(paths, Mapping):
        problems.add("config.paths", f"must be a table, got {shown(paths)}")
    else:
        unknown_fields(paths, PATHS_FIELDS, "config.paths", problems)
        case_insensitive = boolean(paths, "case_insensitive", False, "config.paths", problems)
        matrix_params = choice(
            paths, "matrix_params", "keep", "config.paths", problems, options=MATRIX_MODES
        )
    method_override = choice(
        raw, "method_override", "apply", "config", problems, options=OVERRIDE_MODES
    )
    cors = parse_cors(raw.get("cors"), problems)
    client_ip_header = _client_ip_header(raw.get("client_ip_header"), problems)
    origin_headers = parse_origin_headers(raw.get("origin_headers"), problems)
    forwarded_host = boolean(raw, "forwarded_host", False, "config", problems)
    every = [*origin_headers, *(h for p in upstreams.pools.values() for h in p.headers)]
    for header in every:
        if header.name == client_ip_header:
            problems.add(
                f"{header.where}.{header.name}",
                "is client_ip_header's field: the gateway sets it to the client's address",
            )
        elif forwarded_host and header.name in FORWARDED_HOST_FIELDS:
            problems.add(
                f"{header.where}.{header.name}",
                "is set by forwarded_host to what the client asked for: set one or the other",
            )
    if forwarded_host and client_ip_header in FORWARDED_HOST_FIELDS:
        problems.add(
            "config.client_ip_header",
            f"{client_ip_header!r} is set by forwarded_host to what the client asked for, "
            "not the client's address",
        )
    origin_url = (
        parse_origin_url(raw["origin"], "config.origin", Problems())
        if raw.get("origin") is not None and raw.get("pool") is None
        else None
    )
    ops = _operations(raw, problems)
    defaults = _Defaults(
        upstreams=upstreams,
        pool=default_pool,
        origin_url=origin_url,
        origin_timeout_ms=origin_timeout,
        store_timeout_ms=store_timeout,
        case_insensitive=case_insensitive,
        origin_given=raw.get("origin") is not None or raw.get("pool") is not None,
        shadow_everywhere=ops.shadow,
    )

    raw_routes = raw.get("routes", [])
    if not isinstance(raw_routes, list):
        problems.add("config.routes", f"must be a list of route tables, got {shown(raw_routes)}")
        raw_routes = []
    elif not raw_routes:
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
        name, where = _route_name(raw_route, index, problems)
        if name in seen:
            # Reported whatever else is wrong with the route.
            problems.add(
                f"{where}.name",
                f"is used by an earlier route (this is routes[{index}]); names must be unique",
            )
            # The route's other problems say which of the two routes they are about.
            where = f"{where} (routes[{index}])"
        seen.add(name)
        route = _parse_route(raw_route, name, where, defaults, problems)
        if route is not None:
            routes.append(route)
    if client_ip_header is not None:
        for route in routes:
            if any(
                part.kind == "header"
                and part.name.lower().replace("_", "-") == client_ip_header.replace("_", "-")
                for part in route.limits.key.parts
            ):
                problems.add(
                    f"route {shown(route.name)}.key",
                    f"counts the client's {client_ip_header!r}, which client_ip_header "
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
    if matrix_params != "keep":
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
    if problems.items:
        raise ConfigError(problems.items)
    _unreachable(routes, problems)
    for route in routes:
        source = route.match.path.source
        static = re.split(r"[*{]", source, maxsplit=1)[0].lower()
        prefix = ops.admin_prefix.lower()  # admin paths are caught in any case
        if static == prefix or static.startswith(prefix + "/"):
            problems.warn(
                f"route {shown(route.name)}.match.path",
                f"{source!r} is under the admin API's prefix {prefix!r}, whose paths are "
                "never forwarded: it can never match (move admin.prefix elsewhere)",
            )
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
        client_ip_header=client_ip_header,
        forwarded_host=forwarded_host,
        origin_headers=origin_headers,
    )


#: Fields that describe the message or the connection: never a place for the client's
#: address (and the platform would not forward some of them as set).
_NOT_CLIENT_IP_FIELDS = HOP_BY_HOP | {
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "cookie",
    "authorization",
    "forwarded",
}


def _client_ip_header(value: object, problems: Problems) -> str | None:
    """``client_ip_header``: a field name such as ``"X-Forwarded-For"``, or absent."""
    if value is None:
        return None
    where = "config.client_ip_header"
    if not isinstance(value, str) or not is_token(value):
        problems.add(where, f"must be a header name such as 'X-Forwarded-For', got {shown(value)}")
        return None
    folded = value.lower()
    dashed = folded.replace("_", "-")  # CGI-style origins read the two spellings alike
    if dashed.startswith("cf-"):
        problems.add(
            where,
            f"{value!r} is a field the runtime owns (Cloudflare sets the CF- fields "
            "itself); name a field of your own, such as 'X-Forwarded-For' or 'X-Real-IP'",
        )
        return None
    if dashed in _NOT_CLIENT_IP_FIELDS or dashed in NOT_AN_ADDRESS or dashed in NEVER_SET:
        hint = (
            " ('forwarded' takes 'for=' syntax: use X-Forwarded-For)"
            if folded == "forwarded"
            else " (origins read another meaning from it)"
        )
        problems.add(where, f"{value!r} is not a field for the client's address{hint}")
        return None
    return folded
