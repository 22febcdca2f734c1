"""What the config says about identity: token sources (``[auth.NAME]``), plan tiers
(``[tiers]``) and a route's use of them, as frozen plain data.

The config's parser (:mod:`edge_limiter.core.config.identity`) builds these; the gateway's
identity stage and the rate limit read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..ratelimit.rates import Limit
from .apikeys import FOUND_TTL_MS
from .jwks import REFETCH_INTERVAL_MS
from .keys import Jwk

#: The default bound of a token's length (8 KiB): an access token with a few dozen claims
#: is 1-2 KB; anything larger is refused before one byte of it is decoded.
DEFAULT_MAX_TOKEN_BYTES = 8 * 1024
#: The default leeway on ``exp``, ``nbf`` and ``iat`` for clocks that disagree.
DEFAULT_LEEWAY_MS = 60_000
#: The most leeway a source may give: past this a token lives far longer than its issuer said.
MAX_LEEWAY_MS = 10 * 60_000


@dataclass(frozen=True, slots=True)
class TokenPlace:
    """Where a request carries a credential: ``bearer`` (``Authorization: Bearer``),
    ``header`` (a named field, lower case) or ``cookie`` (a named cookie)."""

    kind: str
    name: str = ""

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}" if self.name else self.kind


@dataclass(frozen=True, slots=True)
class AuthSource:
    """One ``[auth.NAME]``: where its tokens are, who issues them, and the keys that
    verify them."""

    name: str
    token: TokenPlace
    algorithms: frozenset[str]
    issuer: str | None = None
    audiences: tuple[str, ...] = ()
    jwks_url: str | None = None
    keys: tuple[Jwk, ...] = ()
    """Inline public keys (JWK or PEM in the config)."""
    secret: str | None = None
    """The name of the Worker secret holding the HS256 key (``$NAME`` written)."""
    leeway_ms: int = DEFAULT_LEEWAY_MS
    required_claims: tuple[str, ...] = ("exp",)
    max_token_bytes: int = DEFAULT_MAX_TOKEN_BYTES
    refetch_after_ms: int = REFETCH_INTERVAL_MS
    """The least time between two fetches of the key set for a ``kid`` it lacks."""


@dataclass(frozen=True, slots=True)
class Plan:
    """One tier: exempt, or its limits (on every tiered route, or per route or group)."""

    name: str
    exempt: bool = False
    limits: tuple[Limit, ...] = ()
    """The tier's limits on every tiered route its ``routes`` does not name (empty: the
    route's own limits)."""
    leases: bool = False
    routes: Mapping[str, tuple[Limit, ...]] = field(default_factory=dict)
    """Limits by route name or route group."""

    def limits_for(self, route: str, group: str | None) -> tuple[Limit, ...]:
        """The limits this tier has on ``route`` (of ``group``); empty: the route's own."""
        if route in self.routes:
            return self.routes[route]
        if group is not None and group in self.routes:
            return self.routes[group]
        return self.limits


@dataclass(frozen=True, slots=True)
class Tiers:
    """``[tiers]``: where a caller's tier comes from, and each tier's limits.

    ``by`` is ``jwt`` (``source`` a claim's dotted path) or ``kv`` (``source`` a KV
    binding holding API key records, the key read from ``api_key``)."""

    by: str
    source: str
    default: str
    anonymous: str
    plans: Mapping[str, Plan]
    api_key: TokenPlace = TokenPlace("header", "x-api-key")
    api_key_ttl_ms: int = FOUND_TTL_MS
    """How long an isolate remembers a record read from KV (its absence half as long)."""


@dataclass(frozen=True, slots=True)
class RouteIdentity:
    """A route's use of identity: its token source, what an invalid or missing token
    gets, whether its limits come from the caller's tier, and its group."""

    auth: str | None = None
    on_invalid: str = "reject"
    tiers: bool = False
    group: str | None = None
