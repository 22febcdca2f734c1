"""Multi-limit rules: all or nothing, combined decisions, cost, refund and reset."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from edge_limiter.core.config import parse_config
from edge_limiter.core.config.limits import never_binding
from edge_limiter.core.http.fields import violated_policies
from edge_limiter.core.ratelimit.algorithms import (
    Algorithm,
    FixedWindow,
    SlidingLog,
    SlidingWindowCounter,
    TokenBucket,
    make_algorithm,
)
from edge_limiter.core.ratelimit.decision import Decision, Reason
from edge_limiter.core.ratelimit.rates import (
    HOUR_MS,
    SECOND_MS,
    Limit,
    Rate,
    parse_rate,
    parse_rates,
)
from edge_limiter.core.ratelimit.rule import (
    RuleResult,
    check_all,
    combine,
    peek_all,
    refund_all,
)
from tests.examples import examples

from ..conftest import ALGORITHM_NAMES, FakeClock


def rule(text: str, *classes: type[Algorithm[Any]]) -> list[Algorithm[Any]]:
    """One algorithm per rate of ``text``, of the given classes in order."""
    return [cls(Limit(rate)) for cls, rate in zip(classes, parse_rates(text), strict=True)]


def violated(result: RuleResult) -> tuple[int, ...]:
    """The indexes of the limits that deny the request."""
    return tuple(i for i, decision in enumerate(result.decisions) if not decision.allowed)


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
    assert violated(result) == (0,)
    assert violated_policies(result.decisions) == ["3-per-second"]
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
    assert violated_policies(result.decisions) == ["20-per-hour"]
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
    assert violated(result) == (1,)

    # Exhaust the hour too; then a cost of 2 is refused by all three limits, and the rule
    # admits again only when the slowest of them (the hour) does.
    result = check_all(limits, states, now + 60_000)
    assert result.decision.allowed
    result = check_all(limits, result.states, now + 60_001, cost=2)
    assert violated(result) == (0, 1, 2)
    assert [d.retry_after for d in result.decisions] == [999, 999, HOUR_MS - 60_001]
    assert result.decision == result.decisions[2]
    assert result.decision.reason is Reason.LIMITED
    assert violated_policies(result.decisions) == ["2-per-second", "3-per-minute", "4-per-hour"]


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
    minute, hour = (Limit(rate) for rate in parse_rates("5/minute; 100/hour"))
    decisions = [
        Decision(False, 5, 0, 10, 10, Reason.LIMITED, minute),
        Decision(True, 100, 50, 10, 0, None, hour),
    ]
    assert violated_policies(decisions) == ["5-per-minute"]


def test_cost_above_one_limits_capacity_denies_the_rule(clock: FakeClock) -> None:
    limits = rule("5/second; 100/minute", TokenBucket, SlidingWindowCounter)
    result = check_all(limits, [None, None], clock.now, cost=6)
    assert not result.decision.allowed
    assert violated(result) == (0,)
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
    assert max(limit.idle_at(state) for limit, state in zip(limits, states, strict=True)) == (
        now + HOUR_MS
    )
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
        make_algorithm(
            draw(st.sampled_from(ALGORITHM_NAMES)), Limit(Rate(draw(st.integers(1, 5)), w))
        )
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


@settings(max_examples=examples(200), deadline=None)
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
            assert len(violated(result)) == len(waits)
        states = result.states


# --- burst with several limits ----------------------------------------------------------------


def route_limits(limits: object, burst: int | None, algorithm: str) -> list[Algorithm[Any]]:
    """The algorithms a route's ``limits`` (and route-level ``burst``) give."""
    raw: dict[str, object] = {"name": "r", "match": {"path": "/*"}, "limits": limits}
    raw["algorithm"] = algorithm
    if burst is not None:
        raw["burst"] = burst
    config = parse_config({"origin": "https://o.test", "routes": [raw]})
    policy = config.routes[0].limits
    return [make_algorithm(policy.algorithm, limit) for limit in policy.limits]


@pytest.mark.parametrize("algorithm", ["token_bucket", "gcra"])
def test_a_route_burst_sizes_only_the_shortest_limit(algorithm: str) -> None:
    """`10/second; 1000/hour` with burst 20, at 20 requests/s for 60 s: 20 + 10/s get in."""
    limits = route_limits("10/second; 1000/hour", 20, algorithm)
    assert [(a.limit.rate.quota, a.capacity) for a in limits] == [(10, 20), (1000, 1000)]
    states: tuple[object | None, ...] = (None, None)
    admitted = 0
    for step in range(20 * 60):
        result = check_all(limits, states, step * 50)
        admitted += result.decision.allowed
        states = result.states
        if step == 0:
            assert result.decision.remaining == 19  # the burst, not the hour, is tightest
    # The burst at once, then one token every 100 ms until the last request at 59.95 s.
    assert admitted == 20 + 59_950 // 100 == 619


@settings(max_examples=examples(150), deadline=None)
@given(data=st.data())
def test_a_multi_limit_bucket_admits_what_its_tightest_limit_allows(data: st.DataObject) -> None:
    """Over any interval t, the rule admits at most min over limits of
    capacity + quota * t / window, and a route burst never shrinks a longer limit."""
    algorithm = data.draw(st.sampled_from(["token_bucket", "gcra"]))
    windows = sorted(data.draw(st.lists(st.integers(1, 60), min_size=2, max_size=3, unique=True)))
    quotas = [data.draw(st.integers(1, 6)) * (i + 1) for i in range(len(windows))]
    text = "; ".join(f"{q} per {w} seconds" for q, w in zip(quotas, windows, strict=True))
    burst = data.draw(st.none() | st.integers(1, 12))
    limits = route_limits(text, burst, algorithm)
    for algo, quota in zip(limits[1:], quotas[1:], strict=True):
        assert algo.capacity == quota  # only the shortest window takes the route's burst
    gaps = data.draw(st.lists(st.integers(0, 3_000), min_size=1, max_size=40))
    states: tuple[object | None, ...] = tuple(None for _ in limits)
    now, admitted = 0, []
    for gap in gaps:
        now += gap
        result = check_all(limits, states, now)
        if result.decision.allowed:
            admitted.append(now)
        states = result.states
    for i, first in enumerate(admitted):
        for last in admitted[i:]:
            count = sum(1 for t in admitted if first <= t <= last)
            for algo in limits:
                window, quota = algo.rate.window_ms, algo.rate.quota
                assert count * window <= algo.capacity * window + quota * (last - first)
    # While the longer limits have quota left, the rule admits exactly what its shortest
    # limit alone admits: they never cut into its burst.
    shortest, alone, state, now = limits[0], [], None, 0
    for gap in gaps:
        now += gap
        decision, state = shortest.check(state, now)
        if decision.allowed:
            alone.append(now)
    if len(alone) <= min(quotas[1:]):
        assert admitted == alone


# --- limits that can never deny (the config check's warning) ------------------------------

_UNITS_MS = (1_000, 60_000, 3_600_000)


@st.composite
def _limit_pairs(draw: st.DrawFn) -> tuple[str, Limit, Limit]:
    algorithm = draw(
        st.sampled_from(["token_bucket", "gcra", "fixed_window", "sliding_window", "sliding_log"])
    )
    limits = []
    for _ in range(2):
        window = draw(st.sampled_from(_UNITS_MS)) * draw(st.sampled_from([1, 2, 3]))
        quota = draw(st.integers(1, 12))
        burst = None
        if algorithm in ("token_bucket", "gcra") and draw(st.booleans()):
            burst = draw(st.integers(1, 12))
        limits.append(Limit(Rate(quota, window), burst))
    assume(limits[0].rate.window_ms != limits[1].rate.window_ms)
    return algorithm, limits[0], limits[1]


@settings(max_examples=examples(300), deadline=None)
@given(
    _limit_pairs(),
    st.lists(st.tuples(st.integers(0, 400_000), st.integers(1, 3)), min_size=1, max_size=60),
)
def test_a_limit_said_never_to_deny_never_denies_alone(
    pair: tuple[str, Limit, Limit], steps: list[tuple[int, int]]
) -> None:
    """What the config check warns about holds for any traffic: whenever the limit it
    calls loose would deny a request, the stricter one denies it too."""
    algorithm, first, second = pair
    redundant = never_binding([first, second], algorithm)
    assume(redundant)
    ((loose, strict),) = redundant
    order = [loose, strict]
    algorithms = [make_algorithm(algorithm, limit) for limit in order]
    states: list[object] = [None, None]
    now = 1_700_000_000_000
    for gap, cost in steps:
        now += gap
        if cost > min(limit.capacity for limit in order):
            continue
        result = check_all(algorithms, states, now, cost)
        loose_decision, strict_decision = result.decisions
        if not loose_decision.allowed:
            assert not strict_decision.allowed, (loose, strict, now)
        states = list(result.states)


def test_never_binding_names_only_certain_cases() -> None:
    def rates(algorithm: str, *written: str) -> list[tuple[str, str]]:
        limits = [Limit(parse_rate(text)) for text in written]
        return [(a.name, b.name) for a, b in never_binding(limits, algorithm)]

    assert rates("sliding_window", "10/minute", "5/hour") == [("10-per-minute", "5-per-hour")]
    assert rates("sliding_window", "10/second", "1000/hour") == []
    # A fixed window whose window is not a multiple of the other's may admit more in a
    # short window straddling two long ones.
    assert rates("fixed_window", "10/minute", "5/90s") == []
    assert rates("sliding_log", "10/minute", "5/90s") == [("10-per-minute", "5-per-90-seconds")]
    # A longer window that admits all the shorter can let into it never denies: exactly
    # k short windows' quota for a fixed window (k = L / S), k + 1 for a sliding window's
    # estimate, ceil(L / S) for a log; nothing when L is no whole multiple of S (windows).
    assert rates("fixed_window", "5/second", "100000/minute") == [
        ("100000-per-minute", "5-per-second")
    ]
    assert rates("fixed_window", "5/second", "300/minute") == [("300-per-minute", "5-per-second")]
    assert rates("fixed_window", "5/second", "299/minute") == []
    assert rates("fixed_window", "5/minute", "3000/hour") == [("3000-per-hour", "5-per-minute")]
    assert rates("sliding_window", "5/second", "305/minute") == [("305-per-minute", "5-per-second")]
    assert rates("sliding_window", "5/second", "304/minute") == []
    assert rates("sliding_log", "5/second", "300/minute") == [("300-per-minute", "5-per-second")]
    assert rates("sliding_log", "5/second", "299/minute") == []
    assert rates("sliding_log", "5/minute", "10/90s") == [("10-per-90-seconds", "5-per-minute")]
    assert rates("fixed_window", "5/minute", "1000/90s") == []
    # Buckets: capacity and refill compared, whatever the windows.
    assert rates("token_bucket", "10/minute", "100/second") == [("100-per-second", "10-per-minute")]
    # The same bucket written over two windows: only the later one is named.
    same = [Limit(parse_rate("10/minute"), 10), Limit(parse_rate("600/hour"), 10)]
    assert [(a.name, b.name) for a, b in never_binding(same, "gcra")] == [
        ("600-per-hour-burst-10", "10-per-minute")
    ]
    # Limits of different algorithms are not compared.
    mixed = [Limit(parse_rate("10/minute")), Limit(parse_rate("5/hour"), algorithm="fixed_window")]
    assert never_binding(mixed, "token_bucket") == []
