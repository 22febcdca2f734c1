"""The schema of a ``[[routes]]`` table, and its parser: the rate-limit fields
(:mod:`.limits`), where the route forwards (:class:`Upstreams`), its cache and
idempotency tables, and the warnings about how they combine."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..caching.settings import CacheSettings
from ..idempotency.settings import IdempotencySettings
from ..identity.settings import AuthSource, Tiers
from ..keys import KeySpec, shared_by_address
from ..resilience.breaker import BreakerSettings
from ..resilience.retry import IDEMPOTENT_METHODS, RetrySettings
from ..routing.origins import PLAIN_LABEL, Origin, Pool, fit_trial_timeout, parse_origin_url
from ..validation import Problems, shown
from .cache import CACHE, parse_cache
from .fields import Duration, Hand, Statuses, Sub
from .idempotency import IDEMPOTENCY, parse_idempotency
from .identity import IDENTITY_FIELDS, check_identity_keys, parse_route_identity
from .keys import parse_key
from .limits import (
    RATE_LIMIT_FIELDS,
    apply_route_burst,
    check_algorithm_takes,
    never_binding,
    parse_leases,
    parse_limits,
    written,
)
from .match import MATCH, parse_match
from .model import (
    MAX_ORIGIN_TIMEOUT_MS,
    FailurePolicy,
    Forwarding,
    Match,
    RateLimitPolicy,
    Route,
)
from .resilience import RETRY, parse_retry
from .table import Reader, Table

ROUTE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: The bulkhead of a plain ``origin`` URL: no cap.
UNCAPPED = 1_000_000_000

# fmt: off
ROUTE = Table("[[routes]]", (
    "One route: which requests it takes, what it counts them by and how, and where it forwards "
    "the ones it admits. Routes are tried in order; the first that matches wins."
), (
    Hand("name", "string", required=True, example="login",
         doc="Unique; letters, digits, `_`, `.`, `-` (at most 64, starting with a letter or "
             "digit). Used in logs, headers, the 429 body and the key's object name."),
    Sub("match", MATCH, required=True, example={"path": "/v1/login", "methods": ["POST"]}),
    *RATE_LIMIT_FIELDS,
    *IDENTITY_FIELDS,
    Hand("origin", "URL", null_is_absent=True, default_text="the top-level `origin`", attr=None,
         example="https://api.example.com/base",
         doc="Forward this route to this URL (a pool of one); a path in it comes before the "
             "request's (`http://10.0.0.5/base` gets `/base/v1/x` for `/v1/x`)."),
    Hand("pool", "pool name", null_is_absent=True, default_text="the top-level `pool`",
         example="regional", example_with={"origin": None},
         show=lambda route: route.forward.pool.name,
         doc="Forward this route to the pool `[pools.NAME]` (set `origin` or `pool`, not "
             "both)."),
    Duration("timeout", 1, MAX_ORIGIN_TIMEOUT_MS, default_text="`origin_timeout`",
             attr="forward.timeout_ms", example="10s",
             doc="How long a request may wait for the origins' answer (its status and fields), "
                 "retries included; a body that keeps coming is never cut off, one the gateway "
                 "reads itself (to store it) only when no byte of it comes for that long."),
    Sub("retry", RETRY, null_is_absent=True, default_text="the pool's", attr="forward.retry",
        example={"attempts": 2},
        doc="How this route's requests are retried, in place of its pool's `retry`."),
    Statuses("refund_on", null_is_absent=True, default=(), default_text="none",
             attr="forward.refund_on", example=[502, 503, 504],
             doc="Final statuses that give the request's quota back (meant for failures a "
                 "client should not pay for; a status under 400 draws a warning)."),
    Sub("cache", CACHE, null_is_absent=True, default_text="none", example={"ttl": "5m"}),
    Sub("idempotency", IDEMPOTENCY, null_is_absent=True, default_text="none",
        example={"mode": "optional"}),
))
# fmt: on


class Upstreams:
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
class Defaults:
    """Top-level settings that routes inherit."""

    upstreams: Upstreams
    pool: Pool | None
    origin_url: str | None
    origin_timeout_ms: int
    store_timeout_ms: int
    case_insensitive: bool
    origin_given: bool = False
    """Whether the top level names an origin or a pool (a broken one has its own problem)."""
    shadow_everywhere: bool = False
    """The top level's ``shadow``: nothing is blocked anywhere."""
    auth: Mapping[str, AuthSource] | None = None
    """The config's token sources by name (None: none)."""
    tiers: Tiers | None = None
    """The config's plan tiers."""
    identity_written: tuple[frozenset[str], bool] = (frozenset(), False)
    """Every auth source name the config writes, and whether it writes ``[tiers]``."""


def route_name(raw: Mapping[str, Any], index: int, problems: Problems) -> tuple[str, str]:
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


def parse_route(
    raw: Mapping[str, Any], name: str, where: str, defaults: Defaults, problems: Problems
) -> Route | None:
    """One route (``where`` names it in problems), or ``None`` when it has a problem."""
    before = len(problems)
    got = Reader(ROUTE, raw, where, problems)
    match = parse_match(raw.get("match"), defaults.case_insensitive, where, problems)
    policy, fail_open = _rate_limit(got, match, defaults, problems)
    pool, retry = _upstream(got, defaults, problems)
    refund_on = frozenset(got.words("refund_on"))
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
    identity = parse_route_identity(
        got, defaults.auth or {}, defaults.tiers, problems, defaults.identity_written
    )
    check_identity_keys(
        where,
        policy.key,
        identity,
        defaults.tiers,
        problems,
        tiers_written=defaults.identity_written[1],
    )
    matched = match.methods if match is not None else None
    _warnings(
        got,
        matched=matched,
        key=policy.key,
        retry=retry,
        cache=cache,
        idempotency=idempotency,
        problems=problems,
    )
    if len(problems) != before or match is None or pool is None:
        return None
    return Route(
        name=name,
        match=match,
        limits=policy,
        failure=FailurePolicy(fail_open, defaults.store_timeout_ms),
        forward=Forwarding(pool, got.ms("timeout"), retry, refund_on),
        cache=cache,
        idempotency=idempotency,
        identity=identity,
    )


def _rate_limit(
    got: Reader, match: Match | None, defaults: Defaults, problems: Problems
) -> tuple[RateLimitPolicy, bool]:
    """What the route counts and how, and whether it fails open."""
    where = got.where
    algorithm = got.text("algorithm")
    limits = parse_limits(got.raw.get("limits"), f"{where}.limits", problems)
    # A limit written with the route's own algorithm is an ordinary one.
    limits = [replace(lim, algorithm="") if lim.algorithm == algorithm else lim for lim in limits]
    limits = apply_route_burst(limits, got, problems)
    # A burst is written for the whole route, or in a limit's table.
    burst_field = "burst" if "burst" in got.raw else "limits"
    check_algorithm_takes(algorithm, limits, where, problems, burst_field)
    for loose, strict in never_binding(limits, algorithm):
        problems.warn(
            f"{where}.limits",
            f"the limit {shown(loose.name)} ({written(loose)}) can never deny a request: "
            f"{shown(strict.name)} ({written(strict)}) denies first, "
            "whatever the traffic. Remove it, or make it stricter than that one",
        )
    cost = got.integer("cost")
    if not got.refused("cost") and limits and cost > min(limit.capacity for limit in limits):
        smallest = min(limit.capacity for limit in limits)
        problems.add(
            f"{where}.cost",
            f"{cost} exceeds the smallest limit ({smallest}): no request could ever pass",
        )
    shadow = got.flag("shadow")
    if got.raw.get("shadow") is False and defaults.shadow_everywhere:
        problems.warn(
            f"{where}.shadow",
            "has no effect: the top level's shadow = true blocks nothing on any route "
            "(set shadow = true per route instead, to keep this one enforcing)",
        )
    write_behind = got.ms("write_behind")
    lease_ttl = parse_leases(got.raw.get("leases"), algorithm, limits, where, problems)
    fail_open = got.text("on_store_error") == "open"
    # As the gateway runs it: under the top level's shadow every route is one, and a
    # shadow route checks every request with its object (no leases).
    shadowed = shadow or defaults.shadow_everywhere
    if shadowed:
        which = "this route's" if shadow else "the top level's"
        ignored = [
            (
                "on_store_error",
                "a shadow route admits its requests when its counters "
                "cannot be reached too (the failure is logged)",
                not fail_open,
            ),
            (
                "leases",
                "a shadow route checks every request with its Durable Object, to "
                "report what would be",
                lease_ttl > 0,
            ),
        ]
        for field, why, is_written in ignored:
            if is_written:
                problems.warn(
                    f"{where}.{field}", f"has no effect under {which} shadow = true: {why}"
                )
    key = parse_key(got, match.path.params if match is not None else (), problems)
    lease_ttl = 0 if shadowed else lease_ttl
    policy = RateLimitPolicy(algorithm, tuple(limits), key, cost, shadowed, write_behind, lease_ttl)
    return policy, fail_open


def _upstream(
    got: Reader, defaults: Defaults, problems: Problems
) -> tuple[Pool | None, RetrySettings]:
    """The pool the route forwards to (``None`` after a problem), and how it retries."""
    where, raw = got.where, got.raw
    timeout = got.ms("timeout", defaults.origin_timeout_ms)
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
    if got.given("retry"):
        retry = parse_retry(raw["retry"], f"{where}.retry", problems)
    return pool, retry


def _warnings(
    got: Reader,
    *,
    matched: frozenset[str] | None,
    key: KeySpec,
    retry: RetrySettings,
    cache: CacheSettings | None,
    idempotency: IdempotencySettings | None,
    problems: Problems,
) -> None:
    """What the route's methods, key, retries, cache and idempotency mean together."""
    where = got.where
    if cache is not None and matched is not None and "GET" not in matched:
        problems.warn(
            f"{where}.cache",
            f"never stores anything: the route matches only {', '.join(sorted(matched))}, "
            "and the cache stores answers to GET (a HEAD is answered from the stored GET "
            "answer of its route, never stored itself)",
        )
    if (
        got.given("retry")
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
    raw_cache = got.raw.get("cache")
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
    _shared_address_warnings(where, key, cache, idempotency, problems)
    timeout = got.ms("timeout")
    if idempotency is not None and idempotency.lock_timeout_ms <= timeout:
        problems.warn(
            f"{where}.idempotency.lock_timeout",
            f"is not longer than the origin timeout ({timeout} ms): a retry that arrives "
            "after the lock ends, while the first request is still at the origin, is "
            "forwarded again",
        )


def _shared_address_warnings(
    where: str,
    key: KeySpec,
    cache: CacheSettings | None,
    idempotency: IdempotencySettings | None,
    problems: Problems,
) -> None:
    """A key every caller behind one address shares does not tell callers apart."""
    if not shared_by_address(key):
        return
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
