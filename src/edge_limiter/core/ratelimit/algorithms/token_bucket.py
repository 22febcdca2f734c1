"""Token bucket: a bucket of ``burst`` tokens that refills ``quota`` tokens per window.

The level is kept in exact integers: one token is ``window_ms`` units, so a full bucket is
``burst * window_ms`` units and every millisecond adds exactly ``quota`` units. A request
of ``cost`` needs ``cost * window_ms`` units. Admission is the same as :mod:`.gcra`'s.

Leases (units taken at a grant, used by an isolate up to ``ttl_ms`` later). Two things can
make a bucket admit more than ``burst + rate * (b - a)`` over an interval ``[a, b]``, and
both are closed here (:mod:`.gcra` has the same two rules, in its own units):

* **Use lags the take.** Units taken at ``g`` may be used anywhere in ``[g, g + ttl)``, so
  a burst of uses can meet the refill the bucket already counted. A grant therefore leaves
  a *reserve* of ``ttl_ms`` of refill in the bucket: :meth:`TokenBucket.grantable` is
  ``floor((level - ttl_ms * quota) / window_ms)``. The deficit after any grant is then at
  most ``full - ttl * quota`` (scaled), so the takes over ``[a - ttl, b]`` are at most
  ``burst - rate * ttl + rate * (b - a + ttl)``, and the uses over ``[a, b]`` (every one
  comes from a take in ``(a - ttl, b]``) at most ``burst + rate * (b - a)``.
* **A late refund can credit refill the full bucket threw away.** Taking ``R`` more at
  ``g`` and giving it back at ``t`` equals never taking it only if the bucket that took
  less never reached full in ``(g, t)``; otherwise the refund credits refill the cap had
  discarded. The bucket that took only ``granted - R`` at ``g`` cannot be full before
  ``g + (granted - R) * window_ms / quota``, so :meth:`TokenBucket.lease_refundable`
  allows ``R <= granted - ceil(quota * (t - g) / window_ms)``: the units the refill since
  the grant has not yet overtaken.
"""

from __future__ import annotations

from typing import TypeAlias

from ...errors import StateError
from ..decision import Decision
from ..rates import Limit
from .base import decode_ints, new_tuple, validate_cost
from .leasable import Leasable

TokenBucketState: TypeAlias = tuple[int, int]
"""``(level_scaled, updated_at)``: the bucket level (tokens * ``window_ms``) as of
``updated_at`` (ms). A plain tuple: ``check`` makes one per admitted request, and a named
tuple cost several times as much to build (see ``edge_limiter.core.ratelimit.algorithms.base``)."""


class TokenBucket(Leasable[TokenBucketState]):
    """Up to ``burst`` at once, refilled continuously at ``rate.quota`` per ``rate.window_ms``.

    ``burst`` defaults to the quota.
    """

    name = "token_bucket"
    takes_burst = True

    def __init__(self, limit: Limit) -> None:
        super().__init__(limit)
        self.burst = limit.capacity
        self._full = self.burst * limit.rate.window_ms
        # What check reads, in one tuple: one attribute load instead of five.
        self._check_constants = (
            self.window_ms,
            self.quota,
            self._full,
            self.capacity,
            self.limit,
        )

    def _level(self, state: TokenBucketState | None, now: int) -> tuple[int, int]:
        """The level at ``now`` and the instant it is valid from.

        If the clock went backwards (``now`` before ``updated_at``), nothing refills until
        ``updated_at`` again, so refill time is never counted twice.
        """
        if state is None:
            return self._full, now
        level_scaled, updated_at = state
        elapsed = max(0, now - updated_at)
        level = min(self._full, level_scaled + elapsed * self.rate.quota)
        return level, max(now, updated_at)

    def _until_level(self, level: int, target: int) -> int:
        """Milliseconds of refill needed to go from ``level`` to ``target`` units."""
        return max(0, -(-(target - level) // self.rate.quota))

    def check(
        self, state: TokenBucketState | None, now: int, cost: int = 1
    ) -> tuple[Decision, TokenBucketState | None]:
        """Take ``cost`` tokens if the bucket holds them; otherwise take nothing."""
        # The hot path: every request of a token-bucket route runs this once per limit, so
        # the arithmetic of _level and _until_level is written out here.
        if cost.__class__ is not int or cost < 0:
            validate_cost(cost)
        window, quota, full, capacity, limit = self._check_constants
        if state is None:
            level, as_of = full, now
        else:
            updated_at = state[1]
            if now >= updated_at:
                level = state[0] + (now - updated_at) * quota
                if level > full:  # noqa: PLR1730 - a comparison is cheaper than min()
                    level = full
                as_of = now
            else:
                level, as_of = min(full, state[0]), updated_at
        lag = as_of - now
        need = cost * window
        if need <= level:
            after = level - need
            new_state = state if cost == 0 else (after, as_of)
            reset_after = lag + (-((after - full) // quota) if after < full else 0)
            return (
                new_tuple(
                    Decision,
                    (True, capacity, after // window, reset_after, 0, None, limit),
                ),
                new_state,
            )
        reset_after = lag + self._until_level(level, full)
        # A cost above the burst never fits: point at the full bucket, never loop.
        retry_after = reset_after if cost > self.burst else lag + self._until_level(level, need)
        return self._denied(level // window, reset_after, retry_after), state

    def refund(
        self, state: TokenBucketState | None, now: int, cost: int = 1, at: int | None = None
    ) -> TokenBucketState | None:
        """Put ``cost`` tokens back (a full bucket is the fresh state). Whenever the
        request was admitted (``at``), the bucket is then as if it never had been: what it
        refilled since is capped at the burst either way."""
        del at
        validate_cost(cost)
        if state is None:
            return None
        level, as_of = self._level(state, now)
        level = min(self._full, level + cost * self.rate.window_ms)
        if level == self._full:
            return None
        return level, as_of

    # --- leases (the lease protocol: :mod:`.leasable`) ---

    def grantable(self, state: TokenBucketState | None, now: int, ttl_ms: int) -> int:
        """Whole tokens above a reserve of ``ttl_ms`` of refill (0 if the clock went back)."""
        if state is not None and now < state[1]:
            return 0
        level, _ = self._level(state, now)
        return max(0, (level - ttl_ms * self.rate.quota) // self.rate.window_ms)

    def lease_reserve(self, ttl_ms: int) -> int:
        """``ttl_ms`` of refill, in whole tokens rounded up."""
        return -(-ttl_ms * self.rate.quota // self.rate.window_ms)

    def lease_refundable(self, granted: int, unused: int, granted_at: int, now: int) -> int:
        """The unused units the refill since the grant has not overtaken (module docstring)."""
        refilled = -(-max(0, now - granted_at) * self.rate.quota // self.rate.window_ms)
        return max(0, min(unused, granted - refilled))

    def idle_at(self, state: TokenBucketState | None) -> int:
        """When the bucket is full again (0 for the fresh state)."""
        if state is None:
            return 0
        level_scaled, updated_at = state
        level = min(self._full, level_scaled)
        return updated_at + self._until_level(level, self._full)

    def encode(self, state: TokenBucketState) -> list[int]:
        """``[whole_tokens, remainder, updated_at]``: each part stays a small int.

        ``level_scaled`` itself can pass 2**53 for large windows and bursts, which would
        lose precision on the way through JavaScript.
        """
        level_scaled, updated_at = state
        tokens, remainder = divmod(level_scaled, self.rate.window_ms)
        return [tokens, remainder, updated_at]

    def decode(self, data: list[int]) -> TokenBucketState:
        """Inverse of :meth:`encode`; a level above the burst is capped at a full bucket."""
        values = decode_ints(data, self.name)
        if len(values) != 3:
            raise StateError(
                f"{self.name} state must be [tokens, remainder, updated_at], got {values!r}"
            )
        tokens, remainder, updated_at = values
        if tokens < 0 or not 0 <= remainder < self.rate.window_ms:
            raise StateError(
                f"{self.name} state has an impossible level for window "
                f"{self.rate.window_ms} ms: {values!r}"
            )
        level = min(self._full, tokens * self.rate.window_ms + remainder)
        return level, updated_at
