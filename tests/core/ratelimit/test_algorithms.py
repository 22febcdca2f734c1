"""Plain tests of the five algorithms: worked examples, exact numbers, edge cases, errors."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from edge_limiter.core.errors import StateError
from edge_limiter.core.ratelimit.algorithms import (
    ALGORITHMS,
    GCRA,
    Algorithm,
    FixedWindow,
    SlidingLog,
    SlidingLogState,
    SlidingWindowCounter,
    TokenBucket,
    make_algorithm,
)
from edge_limiter.core.ratelimit.decision import Decision, Reason
from edge_limiter.core.ratelimit.rates import DAY_MS, MINUTE_MS, SECOND_MS, Limit, Rate, parse_rate

from ..conftest import ALGORITHM_NAMES, FakeClock, RunRequests, StateAfter

MIDNIGHT = 19_675 * DAY_MS  # 2023-11-14T00:00:00Z: minutes and hours are aligned to it


def at(hours: int, minutes: int, seconds: int) -> int:
    """A wall-clock time on that day, in epoch ms."""
    return MIDNIGHT + ((hours * 60 + minutes) * 60 + seconds) * SECOND_MS


by_name = pytest.mark.parametrize("name", ALGORITHM_NAMES)


# --- worked examples ----------------------------------------------------------------------


def test_worked_example_sliding_counter_7_per_minute_at_30_percent() -> None:
    """Previous minute 5, current minute 3, 30% into the minute: estimate 6.5, allowed."""
    counter = SlidingWindowCounter(Limit(parse_rate("7/minute")))
    index = at(2, 1, 0) // MINUTE_MS
    state = (index, 3, 5)  # (window_index, current, previous)
    now = index * MINUTE_MS + 18 * SECOND_MS  # 30% of the minute

    elapsed = Fraction(now - index * MINUTE_MS, MINUTE_MS)
    assert 5 * (1 - elapsed) + 3 == Fraction(13, 2)

    decision, after = counter.check(state, now)
    assert decision.allowed
    assert decision.remaining == 0  # floor(3.5) + 3 + 1 == 7
    assert after == (index, 4, 5)
    assert not counter.peek(after, now).allowed


def test_worked_example_boundary_burst_fixed_window_lets_ten_through(run: RunRequests) -> None:
    """5/minute: 5 requests from 2:00:50 and 5 from 2:01:00, 20 seconds in all.

    The fixed window admits all 10 (twice the limit within 20 seconds); the sliding log
    admits only the first 5; the sliding counter admits 6 (the previous minute still
    weighs 4 at 2:01:02, leaving room for exactly one more).
    """
    rate = parse_rate("5/minute")
    first = [(at(2, 0, 50 + 2 * i), 1) for i in range(5)]
    second = [(at(2, 1, 2 * i), 1) for i in range(5)]
    requests = first + second

    def admitted(algorithm: Algorithm[Any]) -> list[bool]:
        return [d.allowed for d in run(algorithm, requests, None)[0]]

    assert admitted(FixedWindow(Limit(rate))) == [True] * 10
    assert admitted(SlidingLog(Limit(rate))) == [True] * 5 + [False] * 5
    assert admitted(SlidingWindowCounter(Limit(rate))) == [True] * 5 + [False, True] + [False] * 3


# --- token bucket ----------------------------------------------------------------------------


def test_token_bucket_burst_then_steady_refill(clock: FakeClock, run: RunRequests) -> None:
    bucket = TokenBucket(Limit(Rate(10, SECOND_MS)))  # one token every 100 ms
    decisions, state = run(bucket, [(clock.now, 1)] * 11, None)
    assert [d.allowed for d in decisions] == [True] * 10 + [False]
    assert decisions[9] == Decision(True, 10, 0, 1000, 0, None, bucket.limit)
    assert decisions[10] == Decision(False, 10, 0, 1000, 100, Reason.LIMITED, bucket.limit)
    assert not bucket.peek(state, clock.now + 99).allowed
    decision, state = bucket.check(state, clock.advance(100))
    assert decision.allowed
    assert decision.remaining == 0


def test_token_bucket_burst_differs_from_quota(clock: FakeClock) -> None:
    bucket = TokenBucket(Limit(Rate(1, SECOND_MS), 3))
    assert bucket.capacity == 3
    state = None
    for _ in range(3):
        decision, state = bucket.check(state, clock.now)
        assert decision.allowed
    denied = bucket.peek(state, clock.now)
    # The limit a client is told is what the bucket holds: its burst.
    assert (denied.allowed, denied.limit, denied.retry_after, denied.reset_after) == (
        False,
        3,
        1000,
        3000,
    )


def test_token_bucket_fractional_refill_is_exact() -> None:
    # 3 per 1000 ms: a token every 333.33 ms, so the 4th fits at 334 ms, not at 333.
    bucket = TokenBucket(Limit(Rate(3, 1000)))
    state = (0, 0)
    assert bucket.peek(state, 0).retry_after == 334
    assert not bucket.peek(state, 333).allowed
    assert bucket.peek(state, 334).allowed
    assert bucket.idle_at(state) == 1000


# --- GCRA --------------------------------------------------------------------------------


def test_gcra_spaces_requests_by_the_emission_interval(clock: FakeClock) -> None:
    gcra = GCRA(Limit(Rate(4, SECOND_MS), 1))  # one every 250 ms, no burst
    decision, state = gcra.check(None, clock.now)
    assert decision.allowed
    assert state == (clock.now + 250) * 4
    assert gcra.peek(state, clock.now + 249).retry_after == 1
    assert gcra.peek(state, clock.now + 250).allowed
    assert gcra.idle_at(state) == clock.now + 250


def test_scaled_states_encode_to_js_safe_ints(clock: FakeClock) -> None:
    """tat_ms * quota and tokens * window_ms pass 2**53; their encodings must not."""
    rate = Rate(1_000_000_000, DAY_MS)
    algorithms: list[Algorithm[Any]] = [GCRA(Limit(rate)), TokenBucket(Limit(rate))]
    for algorithm in algorithms:
        _, state = algorithm.check(None, clock.now, 12_345)
        encoded = algorithm.encode(state)
        assert all(abs(value) < 2**53 for value in encoded)
        assert algorithm.decode(encoded) == state


# --- sliding log --------------------------------------------------------------------------


def test_sliding_log_compacts_equal_timestamps_and_keeps_its_log_when_denied(
    clock: FakeClock,
) -> None:
    log = SlidingLog(Limit(Rate(3, SECOND_MS)))
    t0 = clock.now
    _, state = log.check(None, t0, 2)
    _, state = log.check(state, t0, 1)
    assert state == SlidingLogState(((t0, 3),))
    decision, state = log.check(state, t0 + 400, 1)
    assert not decision.allowed
    assert decision.retry_after == 600
    assert decision.reset_after == 600
    # A denied request changes nothing, not even pruning (no write for the Durable Object,
    # and a clock that later goes back still sees the entries).
    before = state
    decision, state = log.check(state, t0 + 1000, 4)
    assert not decision.allowed
    assert state is before
    assert not log.peek(state, t0 + 999, 1).allowed
    # The next admitted request prunes what has left the window.
    decision, state = log.check(state, t0 + 1000, 1)
    assert decision.allowed and state == SlidingLogState(((t0 + 1000, 1),))


def test_sliding_log_retry_waits_for_enough_old_entries(clock: FakeClock, run: RunRequests) -> None:
    log = SlidingLog(Limit(Rate(5, 1000)))
    t0 = clock.now
    _, state = run(log, [(t0, 1), (t0 + 100, 2), (t0 + 200, 2)], None)
    decision = log.peek(state, t0 + 300, 3)
    # 3 must wait for the entries of t0 (1) and t0 + 100 (2) to leave.
    assert decision.retry_after == 1100 - 300
    assert decision.reset_after == 1200 - 300
    assert log.idle_at(state) == t0 + 1200


# --- sliding window counter ------------------------------------------------------------------


def test_sliding_counter_retry_can_land_in_the_next_window() -> None:
    counter = SlidingWindowCounter(Limit(Rate(10, 1000)))
    state = (5, 10, 0)
    decision = counter.peek(state, 5_500, 1)
    # In window 6 the weight of 10 drops below 10 at once: floor(10 * 999 / 1000) == 9.
    assert decision.retry_after == 6_001 - 5_500
    # Full capacity again once floor(10 * (1000 - e) / 1000) == 0, i.e. e >= 901.
    assert decision.reset_after == 6_901 - 5_500
    assert counter.idle_at(state) == 6_901


def test_sliding_counter_rolls_windows_forward() -> None:
    counter = SlidingWindowCounter(Limit(Rate(4, 100)))
    # Window 3, half-way: floor(4 * 0.5) + 1 + 1 == 4 fits.
    decision, state = counter.check((3, 1, 4), 350, 1)
    assert decision.allowed
    assert state == (3, 2, 4)
    # Window 4: the count of window 3 becomes the previous one.
    decision, state = counter.check(state, 420, 1)
    assert (decision.allowed, decision.remaining) == (True, 2)  # 4 - floor(2 * 0.8) - 1
    assert state == (4, 1, 2)
    # Window 6: both counts are stale.
    _, state = counter.check(state, 650, 1)
    assert state == (6, 1, 0)


# --- fixed window -------------------------------------------------------------------------


def test_fixed_window_counts_reset_at_the_edge(clock: FakeClock) -> None:
    window = FixedWindow(Limit(Rate(2, 1000)))
    start = clock.align(1000, offset=990)
    state = None
    for _ in range(2):
        _, state = window.check(state, start)
    denied = window.peek(state, start)
    assert (denied.allowed, denied.retry_after, denied.reset_after) == (False, 10, 10)
    decision, state = window.check(state, start + 10)
    assert decision == Decision(True, 2, 1, 1000, 0, None, window.limit)
    assert state == ((start + 10) // 1000, 1)


# --- every algorithm: costs, clock, registry, decoding -----------------------------------


def fresh(name: str, rate: Rate | None = None) -> Algorithm[Any]:
    return make_algorithm(name, Limit(rate or Rate(5, SECOND_MS)))


@by_name
def test_cost_zero_is_always_allowed_and_consumes_nothing(
    name: str, clock: FakeClock, state_after: StateAfter
) -> None:
    algorithm = fresh(name)
    state = state_after(algorithm, 5, clock.now)
    decision, after = algorithm.check(state, clock.now, 0)
    assert decision.allowed
    assert decision.remaining == 0
    assert algorithm.peek(after, clock.now, 1) == algorithm.peek(state, clock.now, 1)
    assert algorithm.check(None, clock.now, 0) == (algorithm.peek(None, clock.now, 0), None)


@by_name
def test_weighted_cost_uses_that_much_capacity(name: str, clock: FakeClock) -> None:
    algorithm = fresh(name)
    decision, state = algorithm.check(None, clock.now, 3)
    assert (decision.allowed, decision.remaining) == (True, 2)
    assert not algorithm.peek(state, clock.now, 3).allowed
    assert algorithm.peek(state, clock.now, 2).allowed


@by_name
def test_cost_above_capacity_is_denied_with_a_finite_retry(name: str, clock: FakeClock) -> None:
    algorithm = fresh(name)
    decision, state = algorithm.check(None, clock.now, 6)
    assert not decision.allowed
    assert decision.reason is Reason.LIMITED
    assert decision.retry_after == 1  # a fresh state: nothing to wait for, and still no
    assert state is None
    assert not algorithm.peek(None, clock.now + 10 * DAY_MS, 6).allowed


@by_name
def test_negative_or_non_int_cost_is_refused(name: str, clock: FakeClock) -> None:
    algorithm = fresh(name)
    for method in (algorithm.check, algorithm.peek, algorithm.refund):
        with pytest.raises(ValueError, match="cost must be >= 0"):
            method(None, clock.now, -1)
        with pytest.raises(TypeError, match="cost must be an int"):
            method(None, clock.now, 1.5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="cost must be an int"):
            method(None, clock.now, True)


@by_name
def test_refund_gives_back_what_was_taken(
    name: str, clock: FakeClock, state_after: StateAfter
) -> None:
    algorithm = fresh(name)
    state = state_after(algorithm, 5, clock.now)
    assert not algorithm.peek(state, clock.now).allowed
    state = algorithm.refund(state, clock.now, 2)
    assert algorithm.peek(state, clock.now, 2).allowed
    assert not algorithm.peek(state, clock.now, 3).allowed
    assert algorithm.refund(state, clock.now, 100) is None
    assert algorithm.refund(None, clock.now, 1) is None


@by_name
def test_a_clock_that_goes_back_admits_nothing_more(
    name: str, clock: FakeClock, state_after: StateAfter
) -> None:
    algorithm = fresh(name)
    now = clock.align(SECOND_MS, offset=10)
    state = state_after(algorithm, 5, now)
    for earlier in (now - 1, now - 20, now - 500):
        decision = algorithm.peek(state, earlier)
        assert not decision.allowed
        assert decision.retry_after >= 1
    # A check at an earlier time neither admits nor moves the state's clock back.
    _, again = algorithm.check(state, now - 20)
    assert algorithm.peek(again, now) == algorithm.peek(state, now)


@by_name
def test_idle_at_of_a_fresh_state_is_zero(name: str) -> None:
    assert fresh(name).idle_at(None) == 0


def test_registry_names_every_algorithm() -> None:
    assert tuple(ALGORITHMS) == ALGORITHM_NAMES
    for name, cls in ALGORITHMS.items():
        assert cls.name == name
        assert isinstance(make_algorithm(name, Limit(Rate(1, 1000))), cls)


def test_make_algorithm_passes_the_burst_to_buckets_only() -> None:
    rate = Rate(10, SECOND_MS)
    assert make_algorithm("token_bucket", Limit(rate, 25)).capacity == 25
    assert make_algorithm("gcra", Limit(rate)).capacity == 10
    with pytest.raises(ValueError, match="takes no burst"):
        make_algorithm("sliding_log", Limit(rate, 25))
    with pytest.raises(ValueError, match="unknown algorithm 'leaky'"):
        make_algorithm("leaky", Limit(rate))
    for bad in (0, -1, 2_000_000_000):
        with pytest.raises(ValueError, match="burst must be between"):
            TokenBucket(Limit(rate, bad))


def test_each_algorithm_knows_what_it_accepts() -> None:
    """Whether a burst is accepted, and the largest quota, live with the algorithm."""
    assert {name for name, cls in ALGORITHMS.items() if cls.takes_burst} == {"token_bucket", "gcra"}
    assert SlidingLog.max_quota == 10_000
    make_algorithm("sliding_log", Limit(Rate(10_000, SECOND_MS)))
    with pytest.raises(ValueError, match="at most 10000"):
        make_algorithm("sliding_log", Limit(Rate(10_001, SECOND_MS)))
    make_algorithm("fixed_window", Limit(Rate(10_001, SECOND_MS)))


def test_a_bucket_limit_reports_its_burst_as_its_capacity() -> None:
    bucket = TokenBucket(Limit(Rate(10, SECOND_MS), 20))
    decision, _ = bucket.check(None, 0)
    assert (decision.limit, decision.remaining) == (20, 19)
    assert decision.policy is not None and decision.policy.name == "10-per-second-burst-20"


GOOD_STATES: dict[str, object] = {
    "token_bucket": (2500, 7),
    "gcra": 12_345,
    "sliding_log": SlidingLogState(((1, 2), (5, 1))),
    "sliding_window": (3, 2, 1),
    "fixed_window": (3, 2),
}

BAD_DATA: dict[str, list[object]] = {
    "token_bucket": [[1, 2], [1, 2, 3, 4], [-1, 0, 0], [1, 1000, 0], [1, -1, 0]],
    "gcra": [[1], [1, 2, 3], [1, 5], [1, -1]],
    "sliding_log": [[1], [1, 0], [5, 1, 5, 1], [5, 1, 4, 1], [1, 2, 3]],
    "sliding_window": [[1, 2], [1, -1, 0], [1, 0, -1]],
    "fixed_window": [[1], [1, -2], [1, 2, 3]],
}


@by_name
def test_encode_decode_round_trip(name: str) -> None:
    algorithm = fresh(name)
    state = GOOD_STATES[name]
    assert algorithm.decode(algorithm.encode(state)) == state


@by_name
def test_decode_refuses_bad_data_with_a_clear_message(name: str) -> None:
    algorithm = fresh(name)
    shapes: list[object] = ["1,2", None, {"a": 1}, [1.0, 2], [True, 1], ["1", 2]]
    for data in shapes + BAD_DATA[name]:
        with pytest.raises(StateError, match=name):
            algorithm.decode(data)  # type: ignore[arg-type]
