"""The interface every rate-limiting algorithm implements.

An algorithm instance is configured with one :class:`~edge_limiter.core.rates.Rate` (and,
for the bucket-shaped ones, a burst). Its state is a small frozen dataclass of ints that
:meth:`Algorithm.encode` turns into a JSON-able list for one SQLite row. ``None`` is the
fresh state: a key never seen, or one that was reset or cleaned up.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Generic, TypeVar

from ..decision import Decision
from ..rates import Rate

S = TypeVar("S")


class Algorithm(ABC, Generic[S]):
    """One limit's rules. Pure: every method takes ``now`` (integer ms) and never mutates."""

    name: ClassVar[str]

    def __init__(self, rate: Rate) -> None:
        self.rate = rate

    @property
    def capacity(self) -> int:
        """The most cost that can be admitted at one instant from a fresh state."""
        return self.rate.quota

    @abstractmethod
    def check(self, state: S | None, now: int, cost: int = 1) -> tuple[Decision, S | None]:
        """Decide a request of ``cost`` at ``now``.

        Returns the decision and the state to store: the state after consuming ``cost``
        when allowed, otherwise a state that admits exactly what the old one did (a
        denied request consumes nothing).
        """

    @abstractmethod
    def peek(self, state: S | None, now: int, cost: int = 1) -> Decision:
        """What :meth:`check` would decide, without consuming anything."""

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
