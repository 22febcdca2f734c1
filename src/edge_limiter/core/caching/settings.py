"""A route's cache settings: the parsed ``cache`` table.

Its fields, their defaults and bounds are declared once, in the config schema
(:data:`edge_limiter.core.config.cache.CACHE`, which parses them and writes their docs).
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
    """How one route caches its GET and HEAD responses in KV: the ``cache`` table's fields,
    durations in ms (0: unset). ``statuses`` ``None``: any status the origin gives a
    lifetime may be stored, and :data:`DEFAULT_TTL_STATUSES` get ``default_ttl``."""

    ttl_ms: int
    default_ttl_ms: int = 0
    scope: str = "public"
    ignore_query: tuple[str, ...] = ()
    """Sorted; ``("*",)``: the whole query."""
    max_bytes: int = DEFAULT_MAX_BYTES
    statuses: tuple[int, ...] | None = None
    count_hits: bool = False
    allow_client_no_cache: bool = False
    stale_if_error_ms: int = 0
    stale_while_revalidate_ms: int = 0

    @property
    def ignores_whole_query(self) -> bool:
        """Whether the query is left out of the key altogether."""
        return ALL_PARAMS in self.ignore_query
