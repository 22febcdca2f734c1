"""When a token source's key set (its ``jwks_url``) is fetched, kept, and served stale.

A key set is kept for as long as its ``Cache-Control: max-age`` says, within
:data:`MIN_TTL_MS` and :data:`MAX_TTL_MS` (:data:`DEFAULT_TTL_MS` without one), in the
isolate and in KV. Past that it is fetched again; while the endpoint fails, the last set
goes on verifying tokens for :data:`STALE_MS` more. A token naming a key the set does not
have (a provider rotated its keys) makes it fetch again, but at most once per
:data:`REFETCH_INTERVAL_MS` per source (the source's ``refetch_after``, from
:data:`MIN_REFETCH_MS` to :data:`MAX_REFETCH_MS`): tokens with made-up ``kid``s from an
attacker cost at most one fetch per interval, never one per request. With no set at all (the first fetch
failed), it is tried again at most every :data:`RETRY_MS`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..caching.cache_control import parse_cache_control
from .keys import Jwk

DEFAULT_TTL_MS = 300_000
MIN_TTL_MS = 60_000
MAX_TTL_MS = 86_400_000
STALE_MS = 86_400_000
REFETCH_INTERVAL_MS = 60_000
#: The bounds of a source's ``refetch_after``: at most 12 fetches a minute per isolate for
#: made-up ``kid``s (node-jwks-rsa's default allows 10), and at least one an hour.
MIN_REFETCH_MS = 5_000
MAX_REFETCH_MS = 3_600_000
RETRY_MS = 10_000


@dataclass(frozen=True, slots=True)
class KeySet:
    """One source's keys as this isolate knows them."""

    keys: tuple[Jwk, ...] = ()
    fresh_until: int = 0
    stale_until: int = 0
    asked_at: int | None = None
    """When a fetch last started (None: never)."""

    def usable(self, now: int) -> tuple[Jwk, ...]:
        """The keys to verify with at ``now`` (fresh, or stale within :data:`STALE_MS`)."""
        return self.keys if now < self.stale_until else ()

    def due(
        self, now: int, *, unknown_kid: bool = False, refetch_ms: int = REFETCH_INTERVAL_MS
    ) -> bool:
        """Whether to fetch the set now: it is past its lifetime, or a token names a key
        it lacks; never sooner than ``refetch_ms`` after the last fetch for an unknown key,
        nor :data:`RETRY_MS` after one that left no keys at all."""
        since = None if self.asked_at is None else now - self.asked_at
        if since is None:
            return True
        if not self.keys:
            return since >= RETRY_MS
        if now >= self.fresh_until:
            return since >= RETRY_MS
        return unknown_kid and since >= refetch_ms

    def asking(self, now: int) -> KeySet:
        """The set once a fetch has started at ``now``."""
        return replace(self, asked_at=now)

    def fetched(self, keys: tuple[Jwk, ...], cache_control: str | None, now: int) -> KeySet:
        """The set as the endpoint answered it at ``now``."""
        fresh_until = now + lifetime_ms(cache_control)
        return KeySet(keys, fresh_until, fresh_until + STALE_MS, self.asked_at)


def lifetime_ms(cache_control: str | None) -> int:
    """How long a fetched set is kept fresh: its ``max-age`` (``s-maxage`` first), within
    the bounds; ``no-store`` or ``no-cache`` the shortest."""
    directives = parse_cache_control(cache_control)
    if directives.no_store or directives.no_cache:
        return MIN_TTL_MS
    seconds = directives.s_maxage if directives.s_maxage is not None else directives.max_age
    if seconds is None:
        return DEFAULT_TTL_MS
    return min(MAX_TTL_MS, max(MIN_TTL_MS, seconds * 1000))
