"""Multi-limit rules: all or nothing, combined decisions, cost, refund and reset."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.algorithms import (
    Algorithm,
    FixedWindow,
    SlidingLog,
    SlidingWindowCounter,
    TokenBucket,
    make_algorithm,
)
from edge_limiter.core.decision import Decision, Reason
from edge_limiter.core.limiter import (
    RuleResult,
    check_all,
    combine,
    idle_at_all,
    peek_all,
    refund_all,
    violated_policies,
)
from edge_limiter.core.rates import HOUR_MS, SECOND_MS, Rate, parse_rates

from .conftest import ALGORITHM_NAMES, FakeClock


def rule(text: str, *classes: type[Algorithm[Any]]) -> list[Algorithm[Any]]:
    """One algorithm per rate of ``text``, of the given classes in order."""
    return [cls(rate) for cls, rate in zip(classes, parse_rates(text), strict=True)]


def test_a_request_passes_only_if_every_limit_admits_it(clock: FakeClock) -> None:
    limits = rule("3/second; 5/minute", TokenBucket, SlidingLog)
    states: tuple[object | None, ...] = (None, None)
    for _ in range(3):
        result = check_all(limits, states, clock.now)
        assert result.decision.allowed
        states = result.states
    # The per-second bucket is empty: denied, and the per-minute log keeps its 2 left.
    result = check_all(limits, states, clock.now)
    assert not result.decision.allowed
    assert result.violated == (0,)
    assert result.violated_policies == ("3-per-second",)
    assert result.states == states
    assert limits[1].peek(result.states[1], clock.now, 2).allowed


def test_a_denied_request_consumes_nothing_from_any_limit(clock: FakeClock) -> None:
    limits = rule("10/second; 20/hour", TokenBucket, SlidingWindowCounter)
    states: tuple[object | None, ...] = (None, None)
    for _ in range(2):
        result = check_all(limits, states, clock.now, cost=10)
        assert result.decision.allowed
        states = result.states
        clock.advance(SECOND_MS)
    # The hour is used up; the bucket (full again) would admit 10, but must not lose them.
    result = check_all(limits, states, clock.now, cost=10)
    assert not result.decision.allowed
    assert result.violated_policies == ("20-per-hour",)
    assert result.states == states
    assert result.decisions[0].allowed  # what the bucket alone says ...
    assert limits[0].peek(result.states[0], clock.now, 10).allowed  # ... and still can
    # ... and reports what it still holds: nothing was taken from it.
    assert result.decisions[0].remaining == 10
    assert result.decisions[1] == peek_all(limits, states, clock.now, 10).decisions[1]


def test_combined_denial_waits_for_the_slowest_limit(clock: FakeClock) -> None:
    limits = rule("2/second; 3/minute; 4/hour", FixedWindow, SlidingLog, SlidingLog)
    now = clock.align(HOUR_MS)
    states: tuple[object | None, ...] = (None, None, None)
    for offset in (0, 0, 1000):
        result = check_all(limits, states, now + offset)
        assert result.decision.allowed
        states = result.states
    result = check_all(limits, states, now + 1500)
    per_second, per_minute, per_hour = result.decisions
    assert per_second.allowed
    assert not per_minute.allowed
    assert per_hour.allowed
    assert result.decision == per_minute
    assert result.decision.retry_after == 60_000 - 1500
    assert result.violated == (1,)

    # Exhaust the hour too; then a cost of 2 is refused by all three limits, and the rule
    # admits again only when the slowest of them (the hour) does.
    result = check_all(limits, states, now + 60_000)
    assert result.decision.allowed
    result = check_all(limits, result.states, now + 60_001, cost=2)
    assert result.violated == (0, 1, 2)
    assert [d.retry_after for d in result.decisions] == [999, 999, HOUR_MS - 60_001]
    assert result.decision == result.decisions[2]
    assert result.decision.reason is Reason.LIMITED
    assert result.violated_policies == ("2-per-second", "3-per-minute", "4-per-hour")


def test_combined_allow_reports_the_tightest_limit() -> None:
    rate = Rate(10, SECOND_MS)
    loose = Decision(True, 10, 7, 300, 0, None, rate)
    tight = Decision(True, 10, 2, 800, 0, None, rate)
    tie_short = Decision(True, 10, 2, 100, 0, None, rate)
    assert combine([loose, tight, tie_short]) == tight
    assert combine([tie_short, loose]) == tie_short


def test_combine_needs_a_decision() -> None:
    with pytest.raises(ValueError, match="at least one limit"):
        combine([])


def test_violated_policies_names_the_denying_limits() -> None:
    minute, hour = parse_rates("5/minute; 100/hour")
    decisions = [
        Decision(False, 5, 0, 10, 10, Reason.LIMITED, minute),
        Decision(True, 100, 50, 10, 0, None, hour),
        Decision(False, 9, 0, 10, 10, Reason.LIMITED, None),
    ]
    assert violated_policies(decisions) == ("5-per-minute", "9")


def test_cost_above_one_limits_capacity_denies_the_rule(clock: FakeClock) -> None:
    limits = rule("5/second; 100/minute", TokenBucket, SlidingWindowCounter)
    result = check_all(limits, [None, None], clock.now, cost=6)
    assert not result.decision.allowed
    assert result.violated == (0,)
    assert result.decision.retry_after >= 1
    assert result.states == (None, None)


def test_cost_zero_is_allowed_and_changes_nothing(clock: FakeClock) -> None:
    limits = rule("1/second; 1/minute", TokenBucket, FixedWindow)
    first = check_all(limits, [None, None], clock.now)
    result = check_all(limits, first.states, clock.now, cost=0)
    assert result.decision.allowed
    assert result.decision.remaining == 0
    assert not check_all(limits, result.states, clock.now).decision.allowed


def test_bad_arguments_are_refused(clock: FakeClock) -> None:
    limits = rule("1/second; 1/minute", TokenBucket, FixedWindow)
    for call in (check_all, peek_all, refund_all):
        with pytest.raises(ValueError, match="cost must be >= 0"):
            call(limits, [None, None], clock.now, -1)
        with pytest.raises(ValueError, match="2 limits but 1 states"):
            call(limits, [None], clock.now, 1)
        with pytest.raises(ValueError, match="at least one limit"):
            call([], [], clock.now, 1)


def test_refund_all_gives_back_to_every_limit(clock: FakeClock) -> None:
    limits = rule("2/second; 3/minute", SlidingLog, SlidingWindowCounter)
    before: tuple[object | None, ...] = check_all(limits, [None, None], clock.now).states
    after = check_all(limits, before, clock.now, cost=1).states
    refunded = refund_all(limits, after, clock.now, 1)
    assert (
        peek_all(limits, refunded, clock.now).decisions
        == peek_all(limits, before, clock.now).decisions
    )
    assert refund_all(limits, refunded, clock.now, 100) == (None, None)


def test_reset_and_idle_at_across_limits(clock: FakeClock) -> None:
    limits = rule("1/second; 2/hour", TokenBucket, SlidingLog)
    now = clock.now
    states = check_all(limits, [None, None], now).states
    assert idle_at_all(limits, states) == now + HOUR_MS
    fresh = [limit.reset() for limit in limits]
    assert peek_all(limits, fresh, now).decision == peek_all(limits, [None, None], now).decision


def test_peek_all_leaves_states_alone(clock: FakeClock) -> None:
    limits = rule("1/second; 5/minute", TokenBucket, SlidingLog)
    states = check_all(limits, [None, None], clock.now).states
    peeked = peek_all(limits, states, clock.now + 10)
    assert peeked.states == states
    assert peeked == RuleResult(
        check_all(limits, states, clock.now + 10).decision, peeked.decisions, states
    )


# --- property: the rule is the conjunction of its limits -----------------------------------


@st.composite
def rules(draw: st.DrawFn) -> tuple[list[Algorithm[Any]], list[tuple[int, int]]]:
    count = draw(st.integers(1, 3))
    windows = draw(st.lists(st.integers(1, 40), min_size=count, max_size=count, unique=True))
    limits = [
        make_algorithm(draw(st.sampled_from(ALGORITHM_NAMES)), Rate(draw(st.integers(1, 5)), w))
        for w in windows
    ]
    size = draw(st.integers(0, 25))
    gaps = draw(st.lists(st.integers(0, 25), min_size=size, max_size=size))
    costs = draw(st.lists(st.integers(0, 4), min_size=size, max_size=size))
    now, requests = 0, []
    for gap, cost in zip(gaps, costs, strict=True):
        now += gap
        requests.append((now, cost))
    return limits, requests


@settings(max_examples=200, deadline=None)
@given(scenario=rules())
def test_a_rule_admits_exactly_when_every_limit_alone_would(
    scenario: tuple[list[Algorithm[Any]], list[tuple[int, int]]],
) -> None:
    limits, requests = scenario
    states: tuple[object | None, ...] = tuple(None for _ in limits)
    for now, cost in requests:
        alone = [limit.check(state, now, cost) for limit, state in zip(limits, states, strict=True)]
        result = check_all(limits, states, now, cost)
        assert result.decision.allowed == all(decision.allowed for decision, _ in alone)
        if result.decision.allowed:
            assert result.decisions == tuple(decision for decision, _ in alone)
            assert result.states == tuple(state for _, state in alone)
            assert result.decision.remaining == min(d.remaining for d in result.decisions)
        else:
            assert result.states == states
            # Denying limits report their own verdict; the others what they still hold.
            for limit, state, (alone_decision, _), reported in zip(
                limits, states, alone, result.decisions, strict=True
            ):
                expected = (
                    alone_decision if not alone_decision.allowed else limit.peek(state, now, 0)
                )
                assert reported == expected
            waits = [d.retry_after for d in result.decisions if not d.allowed]
            assert result.decision.retry_after == max(waits)
            assert len(result.violated) == len(waits)
        states = result.states
