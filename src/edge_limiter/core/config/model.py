"""The parsed config: frozen objects, grouped by concern, built once per isolate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..caching.settings import CacheSettings
from ..http.cors import CorsSettings
from ..http.origin_headers import OriginHeader
from ..idempotency.settings import IdempotencySettings
from ..identity.settings import AuthSource, RouteIdentity, Tiers
from ..keys import KeySpec, caller_fields
from ..matching import PathPattern, host_matches, path_segments
from ..ratelimit.rates import Limit
from ..resilience.retry import RetrySettings
from ..routing.origins import Pool

DEFAULT_STORE_TIMEOUT_MS = 1_000
DEFAULT_ORIGIN_TIMEOUT_MS = 30_000
MAX_STORE_TIMEOUT_MS = 30_000
MAX_ORIGIN_TIMEOUT_MS = 10 * 60_000


@dataclass(frozen=True, slots=True)
class Match:
    """Which requests a route takes: methods (None: any), host pattern (None: any), path."""

    path: PathPattern
    methods: frozenset[str] | None = None
    host: str | None = None

    def params(
        self, method: str | None, host: str, segments: list[str], folded: list[str] | None
    ) -> dict[str, str] | None:
        """The captured path parameters when the request matches, else ``None``.

        ``segments`` are the canonical path's; ``folded`` the same lower-cased (used when
        the pattern is case-insensitive; computed once per request by the caller).
        ``method`` None: whatever the method.
        """
        if self.methods is not None and method is not None and method not in self.methods:
            return None
        if self.host is not None and not host_matches(self.host, host):
            return None
        if self.path.case_insensitive and folded is not None:
            return self.path.match_segments(folded)
        return self.path.match_segments(segments)


@dataclass(frozen=True, slots=True)
class RateLimitPolicy:
    """What a route counts and how: algorithm, limits (all must admit), cost, key, shadow."""

    algorithm: str
    limits: tuple[Limit, ...]
    key: KeySpec
    cost: int = 1
    shadow: bool = False
    """Counted and reported, never blocked: the route's own ``shadow`` or the top level's
    (folded in when the config is parsed)."""
    write_behind_ms: int = 0
    """0: each decision is stored before the answer; else changes are written at most this
    long after (a restart of the key's object may forget that last interval)."""
    lease_ttl_ms: int = 0
    """0: every admitted request asks the key's object; else isolates take units ahead in
    leases of this ttl and admit from them locally (:mod:`edge_limiter.core.ratelimit.leases`).
    Always 0 on a shadow route, which checks every request to report what would be."""


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """What happens when the counters cannot be reached within ``store_timeout_ms``."""

    fail_open: bool = True
    store_timeout_ms: int = DEFAULT_STORE_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class Forwarding:
    """Where an admitted request goes: a pool of origins (a single ``origin`` URL is a pool
    of one), how long it may take there in all (``timeout_ms``, retries included), how it
    retries, and which final statuses give its quota back (``refund_on``)."""

    pool: Pool
    timeout_ms: int = DEFAULT_ORIGIN_TIMEOUT_MS
    retry: RetrySettings = field(default_factory=RetrySettings)
    refund_on: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Route:
    """One route: what it matches, what it limits, how it fails and where it forwards."""

    name: str
    match: Match
    limits: RateLimitPolicy
    failure: FailurePolicy
    forward: Forwarding
    cache: CacheSettings | None = None
    """GET and HEAD responses kept in KV (None: not cached)."""
    idempotency: IdempotencySettings | None = None
    """Idempotency-Key handling for unsafe methods (None: not honoured)."""
    identity: RouteIdentity | None = None
    """The token source it verifies and whether its limits come from tiers (None: neither)."""


@dataclass(frozen=True, slots=True)
class Operations:
    """Settings for running the gateway, beside the routes.

    ``shadow``: every route counts and reports but never blocks (for rolling out a config).
    The deny cache remembers keys over their limit for at most ``deny_cache_ttl_ms``
    (0: off). The admin API lives under ``admin_prefix``. Overrides are reloaded every
    ``overrides_refresh_ms``. Allowed requests are logged at the rate ``sample_allowed``;
    ``near_limit`` is the share of a limit used that counts as close to it. A key's
    Durable Object deletes its idle rows no sooner than ``cleanup_after_ms`` after it
    last armed its cleanup alarm (rarely armed alarms are cheaper; storage stays bounded).
    A key's denials on a route are logged at most once per ``denials_every_ms`` in an
    isolate (0: every one), each line counting the ones it stands for.
    """

    shadow: bool = False
    deny_cache_ttl_ms: int = 10_000
    deny_cache_max_keys: int = 10_000
    admin_prefix: str = "/_edge-limiter"
    overrides_refresh_ms: int = 10_000
    sample_allowed: float = 0.0
    near_limit: float = 0.8
    cleanup_after_ms: int = 60_000
    denials_every_ms: int = 1_000


@dataclass(frozen=True, slots=True)
class Config:
    """The whole gateway config: routes in priority order, and the defaults they share.

    ``forward`` is where a request matching no route goes (None: such requests get 404).
    ``matrix_params`` is how ``;params`` in path segments are treated (see
    :func:`~edge_limiter.core.canonical.canonical_path`). ``warnings`` lists what is legal
    but probably not meant (e.g. a route no request can reach).
    """

    routes: tuple[Route, ...]
    forward: Forwarding | None = None
    matrix_params: str = "keep"
    ops: Operations = field(default_factory=Operations)
    warnings: tuple[str, ...] = field(default=(), compare=False)
    method_override: str = "apply"
    """What a POST asking to be taken as another method gets (see
    :mod:`edge_limiter.core.http.method_override`): ``apply``, ``refuse`` or ``pass``."""
    cors: CorsSettings | None = None
    """Which page origins the gateway's own answers allow (:mod:`..http.cors`)."""
    client_ip_header: str | None = None
    """The request field (lower case) that tells origins the client's address, set by the
    gateway on every request it forwards (whatever the client put in it); None: none."""
    forwarded_host: bool = False
    """Whether every forwarded request tells the origin the host and scheme the client
    asked for (``X-Forwarded-Host``, ``X-Forwarded-Proto``), whatever the client sent in
    those fields: the origin's URL is in the request's own ``Host``."""
    origin_headers: tuple[OriginHeader, ...] = ()
    """Fields set on every request to an origin (:mod:`..http.origin_headers`)."""
    auth: Mapping[str, AuthSource] = field(default_factory=dict)
    """The token sources (``[auth.NAME]``) by name."""
    tiers: Tiers | None = None
    """Plan tiers (``[tiers]``), None: none."""
    folds_case: bool = field(init=False, compare=False)
    """Whether any route matches paths case-insensitively (then paths are folded once)."""
    caller_fields: tuple[str, ...] = field(init=False, compare=False)
    """The request fields that tell callers apart (:func:`~..keys.caller_fields`): what
    is stored for one caller is never handed to a request differing in one of them."""

    def __post_init__(self) -> None:
        folds = any(route.match.path.case_insensitive for route in self.routes)
        object.__setattr__(self, "folds_case", folds)
        specs = [route.limits.key for route in self.routes]
        # The fields tokens and API keys come in tell callers apart too.
        places = [source.token for source in self.auth.values()]
        if self.tiers is not None and self.tiers.by == "kv":
            places.append(self.tiers.api_key)
        extra = [place.name for place in places if place.kind == "header"]
        object.__setattr__(self, "caller_fields", caller_fields(specs, extra))

    def pools(self) -> list[Pool]:
        """Every distinct pool the config forwards to, in the order routes name them (the
        unmatched requests' last)."""
        seen: dict[str, Pool] = {}
        forwards = [route.forward for route in self.routes]
        if self.forward is not None:
            forwards.append(self.forward)
        for forward in forwards:
            seen.setdefault(forward.pool.name, forward.pool)
        return list(seen.values())

    def route(self, name: str) -> Route | None:
        """The route called ``name``."""
        for route in self.routes:
            if route.name == name:
                return route
        return None

    def method_decides(self, host: str, path: str) -> bool:
        """Whether the method of a request to this canonical host and path can change what
        the gateway does with it: which route it gets, or (idempotency) whether it is
        protected. False when the first route the path fits takes every method alike, or
        none does (every method is forwarded unlimited)."""
        segments = path_segments(path)
        folded = [segment.lower() for segment in segments] if self.folds_case else None
        for route in self.routes:
            if route.match.params(None, host, segments, folded) is not None:
                return route.match.methods is not None or route.idempotency is not None
        return False

    def match(self, method: str, host: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The first route matching a request (canonical host and path), with its parameters."""
        segments = path_segments(path)
        folded = [segment.lower() for segment in segments] if self.folds_case else None
        for route in self.routes:
            params = route.match.params(method, host, segments, folded)
            if params is not None:
                return route, params
        return None
