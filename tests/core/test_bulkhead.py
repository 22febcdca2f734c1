"""The bulkhead: a per-isolate cap on calls in flight, never negative, never above its limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_limiter.core.errors import BulkheadError, EdgeLimiterError
from edge_limiter.core.resilience.bulkhead import Bulkhead


def test_admits_exactly_limit_calls() -> None:
    bulkhead = Bulkhead(3)
    assert [bulkhead.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert bulkhead.in_flight == 3
    assert bulkhead.available == 0


def test_a_release_makes_room_for_one_more() -> None:
    bulkhead = Bulkhead(2)
    assert bulkhead.try_acquire()
    assert bulkhead.try_acquire()
    bulkhead.release()
    assert bulkhead.in_flight == 1
    assert bulkhead.try_acquire()
    assert not bulkhead.try_acquire()


def test_a_refused_acquire_takes_nothing() -> None:
    bulkhead = Bulkhead(1)
    bulkhead.try_acquire()
    for _ in range(5):
        assert not bulkhead.try_acquire()
    bulkhead.release()
    assert bulkhead.in_flight == 0


def test_releasing_more_than_acquired_is_an_error_and_changes_nothing() -> None:
    bulkhead = Bulkhead(2)
    with pytest.raises(BulkheadError, match="never acquired"):
        bulkhead.release()
    assert isinstance(BulkheadError("x"), EdgeLimiterError)
    assert bulkhead.in_flight == 0
    assert bulkhead.try_acquire()


@pytest.mark.parametrize("limit", [0, -1, True, 2.5, "3"])
def test_the_limit_must_be_a_positive_int(limit: object) -> None:
    with pytest.raises(ValueError, match="limit"):
        Bulkhead(limit)  # type: ignore[arg-type]


def test_repr_names_limit_and_in_flight() -> None:
    bulkhead = Bulkhead(4)
    bulkhead.try_acquire()
    assert repr(bulkhead) == "Bulkhead(limit=4, in_flight=1)"


@given(st.integers(1, 6), st.lists(st.booleans(), max_size=80))
def test_in_flight_matches_a_counter_and_stays_in_bounds(limit: int, steps: list[bool]) -> None:
    bulkhead = Bulkhead(limit)
    held = 0
    for acquire in steps:
        if acquire:
            assert bulkhead.try_acquire() == (held < limit)
            held = min(limit, held + 1)
        elif held:
            bulkhead.release()
            held -= 1
        else:
            with pytest.raises(BulkheadError):
                bulkhead.release()
        assert bulkhead.in_flight == held
        assert 0 <= bulkhead.in_flight <= limit
        assert bulkhead.available == limit - held
