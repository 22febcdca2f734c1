"""The interface every rate-limiting algorithm implements.

An algorithm instance is configured with one :class:`~edge_limiter.core.rates.Limit` (a rate and,
for the bucket-shaped ones, a burst). Its state is immutable plain data (a tuple of ints,
an int, or for the sliding log a named tuple of entries) that :meth:`Algorithm.encode`
turns into a JSON-able list for one SQLite row. ``None`` is the fresh state: a key never
seen, or one that was reset or cleaned up.

Why plain tuples, not named tuples, for the counters' states: ``check`` builds one for
every admitted request, and building a named tuple (even through :data:`new_tuple`) cost
about 190 ns on CPython 3.11 and 410 ns on Pyodide against 40-50 ns for a plain tuple,
which was a fifth of the whole ``check``. The decision stays a named tuple: its fields are
read by name all over the gateway.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Generic, TypeVar

from ..decision import Decision, Reason
from ..errors import StateError
from ..rates import MAX_QUOTA, Limit

S = TypeVar("S")

new_tuple = tuple.__new__
"""Builds a named tuple from a plain tuple of its fields, without the generated
``__new__`` (a Python-level call): about half the cost, on the hottest path there is."""


def validate_cost(cost: int) -> None:
    """Refuse a cost that is not a non-negative int (a float would break exact arithmetic)."""
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise TypeError(f"cost must be an int, got {cost!r}")
    if cost < 0:
        raise ValueError(f"cost must be >= 0, got {cost}")


def decode_ints(data: object, algorithm: str) -> list[int]:
    """Check that stored ``data`` is a list of ints; raise :class:`StateError` otherwise."""
    if not isinstance(data, (list, tuple)):
        raise StateError(f"{algorithm} state must be a list of ints, got {type(data).__name__}")
    for item in data:
        if isinstance(item, bool) or not isinstance(item, int):
            raise StateError(f"{algorithm} state must be a list of ints, got {list(data)!r}")
    return list(data)


class Algorithm(ABC, Generic[S]):
    """One limit's rules. Pure: every method takes ``now`` (integer ms) and never mutates.

    What configuration an algorithm accepts lives here, with the algorithm: whether it
    takes a ``burst`` and the largest quota it supports.
    """

    name: ClassVar[str]
    takes_burst: ClassVar[bool] = False
    """Whether a limit may set ``burst`` (a bucket size other than the quota)."""
    max_quota: ClassVar[int] = MAX_QUOTA
    """The largest quota (or burst) this algorithm supports."""
    logged: ClassVar[bool] = False
    """Whether the state is a log stored one entry per row (else one row per state)."""

    def __init__(self, limit: Limit) -> None:
        if limit.burst is not None and not self.takes_burst:
            raise ValueError(f"algorithm {self.name!r} takes no burst, got burst={limit.burst!r}")
        if limit.capacity > self.max_quota:
            raise ValueError(
                f"algorithm {self.name!r} supports at most {self.max_quota}, got {limit.capacity}"
            )
        self.limit = limit
        self.rate = limit.rate
        # Read on every check: plain attributes, not properties.
        self.capacity = limit.capacity
        self.quota = limit.rate.quota
        self.window_ms = limit.rate.window_ms

    def _allowed(self, remaining: int, reset_after: int) -> Decision:
        """An allow for this limit (``retry_after`` 0, no reason)."""
        return new_tuple(
            Decision, (True, self.capacity, remaining, reset_after, 0, None, self.limit)
        )

    def _denied(self, remaining: int, reset_after: int, retry_after: int) -> Decision:
        """A deny for this limit (``retry_after`` at least 1 ms, reason ``LIMITED``)."""
        return new_tuple(
            Decision,
            (
                False,
                self.capacity,
                remaining,
                reset_after,
                max(1, retry_after),
                Reason.LIMITED,
                self.limit,
            ),
        )

    @abstractmethod
    def check(self, state: S | None, now: int, cost: int = 1) -> tuple[Decision, S | None]:
        """Decide a request of ``cost`` at ``now``.

        Returns the decision and the state to store: the state after consuming ``cost``
        when allowed, otherwise ``state`` itself, unchanged (a denied request consumes
        nothing, and forgets nothing either: not even how far the clock had got).
        """

    def peek(self, state: S | None, now: int, cost: int = 1) -> Decision:
        """What :meth:`check` would decide, without consuming anything.

        ``check`` is pure (it returns a new state and never mutates ``state``), so its
        decision is the peek: the state it returns is simply not stored.
        """
        return self.check(state, now, cost)[0]

    @abstractmethod
    def refund(self, state: S | None, now: int, cost: int = 1, at: int | None = None) -> S | None:
        """Give back ``cost`` previously consumed (never beyond the fresh state).

        ``at``: when the request given back was admitted (``None``: unknown). A window that has
        ended since keeps what it counted (giving it back in a later window would admit
        it twice there), and a log gives back that request's own entry.
        """

    # --- leases (see :mod:`edge_limiter.core.leases`) -----------------------------------

    leasable: ClassVar[bool] = False
    """Whether a key's Durable Object may hand units of this limit to an isolate ahead of
    use (a lease). An algorithm that is not leasable grants nothing."""

    lease_supply_grows: ClassVar[bool] = True
    """Whether what is grantable grows while a lease runs (a bucket refills, a sliding
    window's previous count slides out). Only where it does not (a fixed window) does a
    holder given a rationed share wait for its lease's end: elsewhere it asks again."""

    def lease_growth(self, state: S | None, now: int) -> float:
        """How fast what is grantable grows at ``now``, in units per ms, while nothing is
        taken: the refill rate here (a bucket); a sliding window's slide-out rate."""
        del state, now
        return self.rate.quota / self.rate.window_ms if self.lease_supply_grows else 0.0

    def grantable(self, state: S | None, now: int, ttl_ms: int) -> int:
        """The most units a lease of ``ttl_ms`` granted at ``now`` may take from ``state``.

        A grant of at most this many, made with :meth:`check`, keeps every use of the
        lease's units (at any instant before :meth:`lease_expiry`) within the limit.
        """
        del state, now, ttl_ms
        return 0

    def lease_expiry(self, now: int, ttl_ms: int) -> int:
        """When a lease granted at ``now`` for ``ttl_ms`` ends (its units are void from then)."""
        return now + ttl_ms

    def lease_reserve(self, ttl_ms: int) -> int:
        """Units a lease grant leaves untouched (rounded up): 0 unless use may lag a take."""
        del ttl_ms
        return 0

    lease_plans: ClassVar[bool] = False
    """Whether the object may share the supply of a window out in a plan
    (:mod:`edge_limiter.core.lease_plan`): a sliding window's, which grows until the
    window's end. The algorithm then has ``plan_counts`` and ``plan_commit``."""

    def plan_counts(self, state: S | None, now: int) -> tuple[int, int]:
        """``(current, previous)``: the counts a plan shares the room of (``lease_plans``)."""
        raise NotImplementedError(f"{self.name} makes no lease plans")

    def plan_commit(self, state: S | None, now: int, units: int) -> S | None:
        """``state`` with a plan's ``units`` counted at once (``lease_plans``)."""
        raise NotImplementedError(f"{self.name} makes no lease plans")

    lease_records_merge: ClassVar[bool] = False
    """Whether a holder's outstanding grants may be kept as one record (their units
    summed) whose unused units come back in any order: true for the windows, whose refund
    is exact for any unit taken in the current window (a lease never outlives it); not
    for the buckets, whose refund depends on when each grant was taken."""

    lease_late_returns: ClassVar[bool] = False
    """Whether units of a lease that ended unused are still worth giving back after the
    window that counted them has ended: a sliding window's next window weighs it."""

    def lease_refundable(self, granted: int, unused: int, granted_at: int, now: int) -> int:
        """How many of a lease's ``unused`` units :meth:`refund` may give back at ``now``.

        The caller has checked that the lease (``granted`` units taken at ``granted_at``)
        has not expired. By default all of them: the windows' refund is exact within the
        window the units were taken in, and a lease never outlives that window.
        """
        del granted, granted_at, now
        return unused

    def reset(self) -> S | None:
        """Forget everything about the key: the fresh state."""
        return None

    @abstractmethod
    def idle_at(self, state: S | None) -> int:
        """The earliest time at which ``state`` admits exactly what a fresh state does.

        The Durable Object deletes a key's row after this instant (storage stays bounded).
        """

    def live(self, state: S, now: int) -> S:
        """``state`` without what no longer counts at ``now`` (a log's expired entries), so
        a state kept in memory and the same state read back from storage look alike."""
        del now
        return state

    def encoded_len(self, state: S) -> int:
        """An upper bound of ``len(encode(state))``, without encoding (for size checks)."""
        return len(self.encode(state))

    @abstractmethod
    def encode(self, state: S) -> list[int]:
        """The state as a short list of ints, for storage."""

    @abstractmethod
    def decode(self, data: list[int]) -> S:
        """Inverse of :meth:`encode`; raises :class:`~edge_limiter.core.errors.StateError`."""
