"""The interface every rate-limiting algorithm implements.

An algorithm instance is configured with one :class:`~edge_limiter.core.rates.Rate` (and,
for the bucket-shaped ones, a burst). Its state is a small frozen dataclass of ints that
:meth:`Algorithm.encode` turns into a JSON-able list for one SQLite row. ``None`` is the
fresh state: a key never seen, or one that was reset or cleaned up.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Generic, TypeVar

from ..decision import Decision, Reason
from ..errors import StateError
from ..rates import Rate

S = TypeVar("S")


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
    """One limit's rules. Pure: every method takes ``now`` (integer ms) and never mutates."""

    name: ClassVar[str]

    def __init__(self, rate: Rate) -> None:
        self.rate = rate

    @property
    def capacity(self) -> int:
        """The most cost that can be admitted at one instant from a fresh state."""
        return self.rate.quota

    def _allowed(self, remaining: int, reset_after: int) -> Decision:
        """An allow for this limit (``retry_after`` 0, no reason)."""
        return Decision(True, self.rate.quota, remaining, reset_after, 0, None, self.rate)

    def _denied(self, remaining: int, reset_after: int, retry_after: int) -> Decision:
        """A deny for this limit (``retry_after`` at least 1 ms, reason ``LIMITED``)."""
        return Decision(
            False,
            self.rate.quota,
            remaining,
            reset_after,
            max(1, retry_after),
            Reason.LIMITED,
            self.rate,
        )

    @abstractmethod
    def check(self, state: S | None, now: int, cost: int = 1) -> tuple[Decision, S | None]:
        """Decide a request of ``cost`` at ``now``.

        Returns the decision and the state to store: the state after consuming ``cost``
        when allowed, otherwise a state that admits exactly what the old one did (a
        denied request consumes nothing).
        """

    def peek(self, state: S | None, now: int, cost: int = 1) -> Decision:
        """What :meth:`check` would decide, without consuming anything.

        ``check`` is pure (it returns a new state and never mutates ``state``), so its
        decision is the peek: the state it returns is simply not stored.
        """
        return self.check(state, now, cost)[0]

    @abstractmethod
    def refund(self, state: S | None, now: int, cost: int = 1) -> S | None:
        """Give back ``cost`` previously consumed (never beyond the fresh state)."""

    def reset(self) -> S | None:
        """Forget everything about the key: the fresh state."""
        return None

    @abstractmethod
    def idle_at(self, state: S | None) -> int:
        """The earliest time at which ``state`` admits exactly what a fresh state does.

        The Durable Object deletes a key's row after this instant (storage stays bounded).
        """

    @abstractmethod
    def encode(self, state: S) -> list[int]:
        """The state as a short list of ints, for storage."""

    @abstractmethod
    def decode(self, data: list[int]) -> S:
        """Inverse of :meth:`encode`; raises :class:`~edge_limiter.core.errors.StateError`."""
