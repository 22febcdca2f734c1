"""The retry budget (exact limits, a property test of its guarantee against the raw trace),
the retry settings parser and which requests are safe to retry."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.config.resilience import parse_retry
from edge_limiter.core.errors import StateError
from edge_limiter.core.resilience.budget import (
    RetryBudget,
    RetryBudgetState,
    decode_budget,
    encode_budget,
)
from edge_limiter.core.resilience.retry import (
    Delivery,
    RetrySettings,
    counts_on_breaker,
    delivery_of,
    is_idempotent,
    may_resend,
    resend_is_free,
)
from edge_limiter.core.validation import Problems
from tests.examples import examples

EPOCH_MS = 1_700_000_000_000  # a whole second, so bucket boundaries are easy to read
EMPTY = RetryBudgetState()


def noted(
    budget: RetryBudget, count: int, now: int, state: RetryBudgetState = EMPTY
) -> RetryBudgetState:
    for _ in range(count):
        state = budget.note_request(state, now)
    return state


def spend_all(
    budget: RetryBudget, state: RetryBudgetState, now: int
) -> tuple[int, RetryBudgetState]:
    """Spend retries at ``now`` until refused; how many were granted, and the state."""
    granted = 0
    while True:
        ok, state = budget.try_spend(state, now)
        if not ok:
            return granted, state
        granted += 1


# --- exact limits -------------------------------------------------------------------------


def test_without_traffic_only_the_floor_is_available() -> None:
    budget = RetryBudget(0.2, min_per_second=1, window_ms=10_000)
    assert budget.available(EMPTY, EPOCH_MS) == 10
    granted, state = spend_all(budget, EMPTY, EPOCH_MS)
    assert granted == 10
    assert budget.available(state, EPOCH_MS) == 0


def test_no_floor_and_no_requests_means_no_retries() -> None:
    budget = RetryBudget(0.2, min_per_second=0)
    assert budget.try_spend(EMPTY, EPOCH_MS) == (False, EMPTY)


@pytest.mark.parametrize(("requests", "retries"), [(4, 0), (5, 1), (9, 1), (10, 2), (100, 20)])
def test_retries_are_ratio_of_requests(requests: int, retries: int) -> None:
    budget = RetryBudget(0.2, min_per_second=0)
    state = noted(budget, requests, EPOCH_MS)
    assert spend_all(budget, state, EPOCH_MS + 1)[0] == retries


def test_the_ratio_and_the_floor_add_up() -> None:
    budget = RetryBudget(0.5, min_per_second=2, window_ms=5_000)
    state = noted(budget, 7, EPOCH_MS)
    # 0.5 * 7 + 2 * 5 = 13.5: thirteen retries.
    assert budget.available(state, EPOCH_MS) == 13
    assert spend_all(budget, state, EPOCH_MS)[0] == 13


def test_requests_leave_the_window_bucket_by_bucket() -> None:
    budget = RetryBudget(1.0, min_per_second=0, window_ms=10_000, bucket_ms=1_000)
    state = noted(budget, 5, EPOCH_MS + 999)  # the bucket [EPOCH, EPOCH + 1 s)
    state = noted(budget, 3, EPOCH_MS + 4_000, state)
    assert budget.available(state, EPOCH_MS + 9_999) == 8
    # At EPOCH + 10 s the first bucket is eleven buckets back: out of the window.
    assert budget.available(state, EPOCH_MS + 10_000) == 3
    assert budget.available(state, EPOCH_MS + 14_000) == 0
    assert budget.note_request(state, EPOCH_MS + 30_000).buckets == (
        (EPOCH_MS // 1_000 + 30, 1, 0),
    )


def test_spent_retries_also_leave_the_window() -> None:
    budget = RetryBudget(0.0, min_per_second=1, window_ms=2_000, bucket_ms=1_000)
    granted, state = spend_all(budget, EMPTY, EPOCH_MS)
    assert granted == 2
    assert budget.try_spend(state, EPOCH_MS + 1_999)[0] is False
    assert budget.try_spend(state, EPOCH_MS + 2_000)[0] is True


def test_a_clock_going_back_counts_into_the_newest_bucket() -> None:
    budget = RetryBudget(1.0, min_per_second=0)
    state = budget.note_request(EMPTY, EPOCH_MS + 5_000)
    state = budget.note_request(state, EPOCH_MS)
    assert state.buckets == ((EPOCH_MS // 1_000 + 5, 2, 0),)


def test_a_refused_retry_only_drops_old_buckets() -> None:
    budget = RetryBudget(0.2, min_per_second=0, window_ms=2_000)
    state = noted(budget, 1, EPOCH_MS)
    ok, after = budget.try_spend(state, EPOCH_MS + 500)
    assert (ok, after) == (False, state)
    assert budget.try_spend(state, EPOCH_MS + 2_000) == (False, EMPTY)


def test_budget_state_survives_json_and_refuses_garbage() -> None:
    budget = RetryBudget(0.2)
    state = noted(budget, 3, EPOCH_MS)
    _, state = budget.try_spend(noted(budget, 2, EPOCH_MS + 1_000, state), EPOCH_MS + 1_000)
    assert decode_budget(json.loads(json.dumps(encode_budget(state)))) == state
    for bad in (None, {}, [[1, 2]], [[1, 2, -3]], [[1, 2, True]], [[2, 0, 0], [1, 0, 0]], ["x"]):
        with pytest.raises(StateError):
            decode_budget(bad)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"ratio": -0.1}, "ratio"),
        ({"ratio": float("nan")}, "ratio"),
        ({"ratio": 0.2, "min_per_second": -1}, "min_per_second"),
        ({"ratio": 0.2, "bucket_ms": 0}, "bucket_ms"),
        ({"ratio": 0.2, "window_ms": 10_000, "bucket_ms": 3_000}, "multiple"),
        ({"ratio": 0.2, "window_ms": 10_000, "bucket_ms": 1}, "multiple"),
    ],
)
def test_budget_refuses_bad_settings(kwargs: dict[str, float], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        RetryBudget(**kwargs)  # type: ignore[arg-type]


# --- property: the guarantee, checked against the raw trace ------------------------------

EVENT = st.tuples(st.booleans(), st.integers(0, 700))  # (is a retry, gap in ms)


@st.composite
def budgets(draw: st.DrawFn) -> RetryBudget:
    bucket = draw(st.sampled_from([100, 250, 1_000]))
    buckets = draw(st.integers(1, 8))
    ratio = draw(st.sampled_from([0.0, 0.05, 0.1, 0.2, 1 / 3, 0.5, 1.0]))
    return RetryBudget(ratio, draw(st.integers(0, 3)), bucket * buckets, bucket)


@settings(max_examples=examples(300), deadline=None)
@given(budgets(), st.lists(EVENT, max_size=120))
def test_retries_never_exceed_ratio_of_requests_plus_floor(
    budget: RetryBudget, events: list[tuple[bool, int]]
) -> None:
    ratio = Fraction(budget.ratio_ppm, 1_000_000)
    floor = Fraction(budget.min_per_second * budget.window_ms, 1_000)
    window, bucket = budget.window_ms, budget.bucket_ms
    requests: list[int] = []  # times
    retries: list[int] = []  # times of granted retries
    state = EMPTY
    now = EPOCH_MS
    for is_retry, gap in events:
        now += gap
        if not is_retry:
            state = budget.note_request(state, now)
            requests.append(now)
            continue
        # The reference: counts over the whole buckets of the window, from the raw trace.
        oldest = (now // bucket - window // bucket + 1) * bucket
        seen = sum(1 for t in requests if t >= oldest)
        spent = sum(1 for t in retries if t >= oldest)
        expected = spent + 1 <= ratio * seen + floor
        ok, state = budget.try_spend(state, now)
        assert ok == expected
        if ok:
            retries.append(now)
            # The guarantee at a grant: the retries of the last (window - bucket), this one
            # included, are covered by the requests of the last window.
            recent_retries = sum(1 for r in retries if now - window + bucket < r <= now)
            recent_requests = sum(1 for q in requests if now - window < q <= now)
            assert recent_retries <= ratio * recent_requests + floor
        assert len(state.buckets) <= window // bucket
    # Over any stretch of (window - bucket) ending at e, the retries are covered by the
    # requests since e - (2 * window - bucket). Checked at every end where the count changes.
    stretch = window - bucket
    for end in {*retries, *(r + stretch - 1 for r in retries), *requests}:
        in_stretch = sum(1 for r in retries if end - stretch < r <= end)
        earned = sum(1 for q in requests if end - stretch - window < q <= end)
        assert in_stretch <= ratio * earned + floor


def test_a_stretch_can_spend_what_the_window_before_it_earned() -> None:
    """Why the any-stretch bound looks back a further window: credit is spent later."""
    budget = RetryBudget(1.0, min_per_second=0, window_ms=2_000, bucket_ms=1_000)
    state = noted(budget, 5, EPOCH_MS)
    granted, _ = spend_all(budget, state, EPOCH_MS + 1_999)
    assert granted == 5  # all spent in a stretch (EPOCH + 1 s, EPOCH + 2 s) with no requests


# --- retry settings -----------------------------------------------------------------------


def test_parse_retry_defaults() -> None:
    problems = Problems()
    assert parse_retry(None, "r", problems) == RetrySettings()
    assert parse_retry({}, "r", problems) == RetrySettings()
    assert not problems.items
    assert RetrySettings() == RetrySettings(3, 100, 2_000, 0.2, 1, 10_000)


def test_parse_retry_reads_every_field() -> None:
    problems = Problems()
    parsed = parse_retry(
        {
            "attempts": 4,
            "base": "50ms",
            "cap": "1s",
            "budget": 0.1,
            "min_per_second": 5,
            "budget_window": "30s",
        },
        "r",
        problems,
    )
    assert not problems.items
    assert parsed == RetrySettings(4, 50, 1_000, 0.1, 5, 30_000)
    assert parsed.budget() == RetryBudget(0.1, 5, 30_000, 1_000)
    assert parse_retry({"budget": 1}, "r", problems).budget_ratio == 1.0


@pytest.mark.parametrize(
    ("raw", "where", "fragment"),
    [
        ([], "r", "must be a table"),
        ({"attempts": 0}, "r.attempts", "1..10"),
        ({"attempts": 11}, "r.attempts", "1..10"),
        ({"base": "0ms"}, "r.base", "shorter"),
        ({"base": 100}, "r.base", "duration"),
        ({"base": "1s", "cap": "500ms"}, "r.cap", "must be at least base (1s)"),
        ({"cap": "2m"}, "r.cap", "longer"),
        ({"budget": 1.5}, "r.budget", "0..1"),
        ({"budget": -0.1}, "r.budget", "0..1"),
        ({"budget": "20%"}, "r.budget", "0..1"),
        ({"budget": True}, "r.budget", "0..1"),
        ({"budget": float("inf")}, "r.budget", "0..1"),
        ({"min_per_second": -1}, "r.min_per_second", "0..1000"),
        ({"budget_window": "1500ms"}, "r.budget_window", "whole seconds"),
        ({"budget_window": "10m"}, "r.budget_window", "longer"),
        ({"retries": 3}, "r.retries", "unknown field"),
    ],
)
def test_parse_retry_problems(raw: object, where: str, fragment: str) -> None:
    problems = Problems()
    parsed = parse_retry(raw, "r", problems)
    assert isinstance(parsed, RetrySettings)
    assert len(problems.items) == 1, problems.items
    (problem,) = problems.items
    assert problem.startswith(f"{where}: "), problem
    assert fragment in problem
    parsed.budget()  # whatever was wrong, the defaults make a valid budget


# --- idempotency --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "claim", "retry"),
    [
        ("GET", False, True),
        ("HEAD", False, True),
        ("OPTIONS", False, True),
        ("PUT", False, True),
        ("DELETE", False, True),
        ("TRACE", False, True),
        ("get", False, True),
        ("POST", False, False),
        ("PATCH", False, False),
        ("CONNECT", False, False),
        ("PURGE", False, False),
        ("POST", True, True),
        ("PATCH", True, True),
        ("GET", True, True),
    ],
)
def test_is_idempotent(method: str, claim: bool, retry: bool) -> None:
    assert is_idempotent(method, claim) is retry


@pytest.mark.parametrize(
    ("method", "claim", "status", "delivery", "resent"),
    [
        # Never left: any method may go again, with or without a claim.
        ("POST", False, None, Delivery.NOT_SENT, True),
        ("PATCH", False, None, Delivery.NOT_SENT, True),
        ("POST", True, None, Delivery.NOT_SENT, True),
        ("POST", False, 521, Delivery.SENT, True),  # the edge: refused
        ("POST", False, 523, Delivery.SENT, True),  # the edge: unreachable
        ("POST", False, 522, Delivery.SENT, False),  # may have been taken: not certain
        # May have arrived: only an idempotent method, or a claim the origin did not act on.
        ("POST", False, None, Delivery.SENT, False),
        ("POST", False, 502, Delivery.SENT, False),
        ("GET", False, None, Delivery.SENT, True),
        ("POST", True, None, Delivery.SENT, False),
        ("POST", True, 503, Delivery.SENT, True),
        # The client's body broke off: gone, never sent again.
        ("GET", False, None, Delivery.CLIENT_FAILED, False),
        ("PUT", True, None, Delivery.CLIENT_FAILED, False),
    ],
)
def test_may_resend(
    method: str, claim: bool, status: int | None, delivery: Delivery, resent: bool
) -> None:
    assert may_resend(method, claim, status, delivery) is resent


def test_only_the_clients_failure_counts_neither_way_and_only_a_request_never_sent_is_free() -> (
    None
):
    assert [counts_on_breaker(d) for d in Delivery] == [True, True, False]
    assert [resend_is_free(d) for d in Delivery] == [True, False, False]
    assert [delivery_of(s) for s in (None, 200, 502, 521, 522, 526)] == [
        Delivery.SENT,
        Delivery.SENT,
        Delivery.SENT,
        Delivery.NOT_SENT,
        Delivery.SENT,
        Delivery.NOT_SENT,
    ]
