"""GCRA, the generic cell rate algorithm: a token bucket stored as one timestamp.

The state is the theoretical arrival time (TAT): the instant the bucket would be full
again. Times are scaled by ``quota`` so the emission interval ``window_ms / quota`` is an
exact integer: ``tat_scaled = tat_ms * quota`` and each unit of cost adds ``window_ms``.
A request is admitted iff ``new_tat - now * quota <= burst * window_ms``.

With ``backlog = tat_scaled - now * quota``, a token bucket's level is
``burst * window_ms - backlog``, so both admit exactly the same requests and report the
same numbers (as long as the clock does not go backwards).

Leases follow :mod:`.token_bucket`'s two rules in GCRA's terms: a grant leaves the backlog
at most ``tolerance - ttl_ms * quota`` (a reserve of ``ttl_ms`` of emission), and a lease's
unused units are refunded only as far as ``granted - ceil(quota * elapsed / window_ms)``
(the TAT of the smaller take cannot have fallen behind ``now`` in the meantime, so moving
the TAT back equals never having taken them).
"""

from __future__ import annotations

from typing import TypeAlias

from ...errors import StateError
from ..decision import Decision
from ..rates import Limit
from .base import decode_ints, new_tuple, validate_cost
from .leasable import Leasable

GCRAState: TypeAlias = int
"""The theoretical arrival time, in ms multiplied by the quota. A plain int: ``check``
makes one per admitted request (see ``edge_limiter.core.ratelimit.algorithms.base``)."""


class GCRA(Leasable[GCRAState]):
    """Up to ``burst`` at once, then one unit every ``window_ms / quota`` ms."""

    name = "gcra"
    takes_burst = True

    def __init__(self, limit: Limit) -> None:
        super().__init__(limit)
        self.burst = limit.capacity
        self._tolerance = self.burst * limit.rate.window_ms
        # What check reads, in one tuple: one attribute load instead of five.
        self._check_constants = (
            self.window_ms,
            self.quota,
            self._tolerance,
            self.capacity,
            self.limit,
        )

    def _ms_for(self, scaled: int) -> int:
        """Scaled time -> whole milliseconds, rounded up (never negative)."""
        return max(0, -(-scaled // self.rate.quota))

    def check(
        self, state: GCRAState | None, now: int, cost: int = 1
    ) -> tuple[Decision, GCRAState | None]:
        """Admit ``cost`` if the TAT it leads to stays within the tolerance."""
        if cost.__class__ is not int or cost < 0:  # the hot path skips the call
            validate_cost(cost)
        window, quota, tolerance, capacity, limit = self._check_constants
        now_scaled = now * quota
        tat = now_scaled if state is None or state < now_scaled else state
        backlog = tat - now_scaled
        new_backlog = backlog + cost * window
        if new_backlog <= tolerance:
            new_state = state if cost == 0 else tat + cost * window
            reset_after = -(-new_backlog // quota) if new_backlog > 0 else 0
            return (
                new_tuple(
                    Decision,
                    (
                        True,
                        capacity,
                        (tolerance - new_backlog) // window,
                        reset_after,
                        0,
                        None,
                        limit,
                    ),
                ),
                new_state,
            )
        reset_after = self._ms_for(backlog)
        if cost > self.burst:
            retry_after = reset_after
        else:
            retry_after = self._ms_for(new_backlog - self._tolerance)
        remaining = max(0, (self._tolerance - backlog) // window)
        return self._denied(remaining, reset_after, retry_after), state

    def refund(
        self, state: GCRAState | None, now: int, cost: int = 1, at: int | None = None
    ) -> GCRAState | None:
        """Move the TAT back by ``cost`` (a TAT not after ``now`` is the fresh state), as
        if the request had never been admitted, whenever it was (``at``)."""
        del at
        validate_cost(cost)
        if state is None:
            return None
        now_scaled = now * self.rate.quota
        tat = max(state, now_scaled) - cost * self.rate.window_ms
        return tat if tat > now_scaled else None

    # --- leases (the lease protocol: :mod:`.leasable`) ---

    def grantable(self, state: GCRAState | None, now: int, ttl_ms: int) -> int:
        """Whole units that fit with a reserve of ``ttl_ms`` of emission left."""
        now_scaled = now * self.rate.quota
        backlog = 0 if state is None else max(0, state - now_scaled)
        room = self._tolerance - backlog - ttl_ms * self.rate.quota
        return max(0, room // self.rate.window_ms)

    def lease_reserve(self, ttl_ms: int) -> int:
        """``ttl_ms`` of emission, in whole units rounded up."""
        return -(-ttl_ms * self.rate.quota // self.rate.window_ms)

    def lease_refundable(self, granted: int, unused: int, granted_at: int, now: int) -> int:
        """As the token bucket's: what the emission since the grant has not overtaken."""
        emitted = -(-max(0, now - granted_at) * self.rate.quota // self.rate.window_ms)
        return max(0, min(unused, granted - emitted))

    def idle_at(self, state: GCRAState | None) -> int:
        """The TAT in ms, rounded up (0 for the fresh state)."""
        if state is None:
            return 0
        return -(-state // self.rate.quota)

    def encode(self, state: GCRAState) -> list[int]:
        """``[tat_ms, remainder]``: ``tat_scaled`` itself passes 2**53 for epoch times."""
        tat_ms, remainder = divmod(state, self.rate.quota)
        return [tat_ms, remainder]

    def decode(self, data: list[int]) -> GCRAState:
        """Inverse of :meth:`encode`."""
        values = decode_ints(data, self.name)
        if len(values) != 2:
            raise StateError(f"{self.name} state must be [tat_ms, remainder], got {values!r}")
        tat_ms, remainder = values
        if not 0 <= remainder < self.rate.quota:
            raise StateError(
                f"{self.name} state remainder must be in [0, {self.rate.quota}), got {values!r}"
            )
        return tat_ms * self.rate.quota + remainder
