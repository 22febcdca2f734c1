"""Shared fixtures for the core tests: a fake clock and state factories.

Nothing here sleeps: time is an integer number of milliseconds that moves only when a
test says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from edge_limiter.core.ratelimit.algorithms import Algorithm
from edge_limiter.core.ratelimit.decision import Decision

# 2023-11-14T22:13:20Z: an epoch-sized time, so scaled arithmetic sees realistic magnitudes.
EPOCH_MS = 1_700_000_000_000

ALGORITHM_NAMES = ("token_bucket", "gcra", "sliding_log", "sliding_window", "fixed_window")


class FakeClock:
    """An integer-millisecond clock that only moves when told to."""

    def __init__(self, start: int = EPOCH_MS) -> None:
        self.now = start

    def advance(self, ms: int) -> int:
        """Move forward by ``ms`` and return the new time."""
        if ms < 0:
            raise ValueError("a fake clock only moves forward; pass the earlier time instead")
        self.now += ms
        return self.now

    def align(self, window_ms: int, offset: int = 0) -> int:
        """Jump to ``offset`` ms into the next window boundary (for aligned algorithms)."""
        self.now = (self.now // window_ms + 1) * window_ms + offset
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    """A fresh fake clock at an epoch-sized time."""
    return FakeClock()


RunRequests = Callable[[Algorithm[Any], Iterable[tuple[int, int]], Any], tuple[list[Decision], Any]]


def run_requests(
    algorithm: Algorithm[Any], requests: Iterable[tuple[int, int]], state: Any = None
) -> tuple[list[Decision], Any]:
    """Check each ``(now, cost)`` in turn from ``state``; the decisions and the last state."""
    decisions = []
    for now, cost in requests:
        decision, state = algorithm.check(state, now, cost)
        decisions.append(decision)
    return decisions, state


@pytest.fixture
def run() -> RunRequests:
    """:func:`run_requests`, as a fixture."""
    return run_requests


StateAfter = Callable[[Algorithm[Any], int, int], Any]


@pytest.fixture
def state_after() -> StateAfter:
    """Factory: the state after ``count`` unit requests at ``now``, all of them admitted."""

    def make(algorithm: Algorithm[Any], count: int, now: int) -> Any:
        decisions, state = run_requests(algorithm, [(now, 1)] * count)
        assert all(decision.allowed for decision in decisions), decisions
        return state

    return make
