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

from .limits import MIB

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
