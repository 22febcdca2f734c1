"""The interface every rate-limiting algorithm implements.

An algorithm instance is configured with one :class:`~edge_limiter.core.ratelimit.rates.Limit` (a rate and,
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

from ...errors import StateError
from ..decision import Decision, Reason
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
