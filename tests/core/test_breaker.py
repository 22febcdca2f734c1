"""The circuit breaker: exact thresholds, half-open trials, backoff of the open duration,
overload pauses, stale reports, storage, the settings parser, and a property test against
a plain reference model."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.config.resilience import parse_breaker
from edge_limiter.core.errors import StateError
from edge_limiter.core.resilience.breaker import (
    BreakerDecision,
    BreakerSettings,
    BreakerState,
    Outcome,
    Permit,
    Phase,
    Refusal,
    Report,
    allow,
    classify,
    current_phase,
    decode_report,
    decode_state,
    encode_report,
    encode_state,
    open_duration_ms,
    overloaded,
    record,
    record_many,
)
from edge_limiter.core.validation import Problems
from tests.examples import examples

EPOCH_MS = 1_700_000_000_000
S, F, W = Outcome.SUCCESS, Outcome.FAILURE, Outcome.SLOW

SMALL = BreakerSettings(
    failure_rate=50,
    window=10,
    min_calls=4,
    open_for_ms=1_000,
    max_open_for_ms=8_000,
    half_open_calls=3,
    success_threshold=2,
    trial_timeout_ms=5_000,
)


def run(
    outcomes: list[Outcome],
    state: BreakerState | None = None,
    config: BreakerSettings = SMALL,
    now: int = EPOCH_MS,
) -> list[BreakerState]:
    """Record each outcome at ``now``; every state along the way (the first is the input)."""
    states = [state or BreakerState()]
    for outcome in outcomes:
        states.append(record(states[-1], config, now, outcome))
    return states


def tripped(now: int = EPOCH_MS, config: BreakerSettings = SMALL) -> BreakerState:
    """A breaker that tripped at ``now`` (its first trip)."""
    state = run([F] * config.min_calls, config=config, now=now)[-1]
    assert state.phase is Phase.OPEN
    return state


def half_open(now: int = EPOCH_MS, config: BreakerSettings = SMALL) -> tuple[int, BreakerState]:
    """A breaker that tripped at ``now`` and was just moved to half-open; the time it did."""
    state = tripped(now, config)
    decision, state = allow(state, config, state.open_until)
    assert decision.permit == Permit(True, state.generation)
    return state.open_until, state


# --- closed -> open -------------------------------------------------------------------------


def test_a_fresh_breaker_is_closed_and_permits() -> None:
    decision, state = allow(BreakerState(), SMALL, EPOCH_MS)
    assert decision == BreakerDecision(Permit(False, 0))
    assert decision.allowed
    assert state == BreakerState()


def test_trips_exactly_when_min_calls_is_reached_not_one_call_before() -> None:
    states = run([F, F, F, S])
    # Three failures out of three is 100 %, but fewer than min_calls (4) outcomes: closed.
    assert [s.phase for s in states[1:]] == [Phase.CLOSED] * 3 + [Phase.OPEN]
    assert states[3].recent == "fff"


@pytest.mark.parametrize(
    ("failures", "phase"),
    [(4, Phase.CLOSED), (5, Phase.OPEN), (6, Phase.OPEN)],
)
def test_trips_exactly_at_the_failure_rate(failures: int, phase: Phase) -> None:
    config = replace(SMALL, window=10, min_calls=10, failure_rate=50)
    outcomes = [F] * failures + [S] * (10 - failures)
    states = run(outcomes[:-1], config=config)
    assert states[-1].phase is Phase.CLOSED  # nine outcomes: below min_calls
    assert run([outcomes[-1]], states[-1], config)[-1].phase is phase


def test_failure_rate_is_a_percentage_with_exact_integer_arithmetic() -> None:
    # 1 of 3 is 33.33 %: trips at 33, not at 34.
    for rate, phase in ((33, Phase.OPEN), (34, Phase.CLOSED)):
        config = replace(SMALL, window=3, min_calls=3, failure_rate=rate)
        assert run([S, S, F], config=config)[-1].phase is phase


def test_slow_successes_count_as_failures() -> None:
    assert run([W, W, S, S])[-1].phase is Phase.OPEN
    assert run([W, S, S, S])[-1].phase is Phase.CLOSED


def test_the_window_slides_over_the_last_calls() -> None:
    config = replace(SMALL, window=4, min_calls=4, failure_rate=75)
    state = run([F, F, S, S], config=config)[-1]
    assert state.recent == "ffss"
    # Each new failure pushes the oldest outcome out: ffss -> fssf -> ssff -> sfff (75 %).
    states = run([F, F, F], state, config)
    assert [s.recent for s in states[1:3]] == ["fssf", "ssff"]
    assert states[2].phase is Phase.CLOSED
    assert states[3].phase is Phase.OPEN


def test_the_window_never_grows_beyond_its_size() -> None:
    state = run([S] * 25)[-1]
    assert state.recent == "s" * SMALL.window


def test_a_trip_clears_the_window_and_counts_the_trip() -> None:
    state = tripped()
    assert state == BreakerState(
        phase=Phase.OPEN, trips=1, open_until=EPOCH_MS + 1_000, generation=1
    )


# --- open ---------------------------------------------------------------------------------


def test_open_refuses_until_open_until_with_retry_after() -> None:
    state = tripped()
    for now, wait in ((EPOCH_MS, 1_000), (EPOCH_MS + 1, 999), (EPOCH_MS + 999, 1)):
        decision, after = allow(state, SMALL, now)
        assert decision == BreakerDecision(None, wait, Refusal.OPEN)
        assert not decision.allowed
        assert after == state


def test_outcomes_are_ignored_while_open() -> None:
    state = tripped()
    assert record(state, SMALL, EPOCH_MS + 10, F) == state
    assert record(state, SMALL, EPOCH_MS + 10, S) == state


def test_open_becomes_half_open_at_open_until() -> None:
    state = tripped()
    assert current_phase(state, state.open_until - 1) is Phase.OPEN
    assert current_phase(state, state.open_until) is Phase.HALF_OPEN
    decision, after = allow(state, SMALL, state.open_until)
    assert decision.permit == Permit(True, 2)
    assert after.phase is Phase.HALF_OPEN
    assert after.issued == 1


# --- half-open ----------------------------------------------------------------------------


@pytest.mark.parametrize("calls", [1, 2, 3, 7])
def test_half_open_admits_exactly_half_open_calls(calls: int) -> None:
    config = replace(SMALL, half_open_calls=calls, success_threshold=1)
    now, state = half_open(config=config)
    for _ in range(calls - 1):
        decision, state = allow(state, config, now)
        assert decision.permit is not None
        assert decision.permit.trial
    decision, state = allow(state, config, now + 3)
    assert decision == BreakerDecision(None, config.trial_timeout_ms - 3, Refusal.TRIALS_IN_FLIGHT)
    assert state.issued == calls


def test_success_threshold_successes_close_and_reset() -> None:
    now, state = half_open()
    _, state = allow(state, SMALL, now)
    state = record(state, SMALL, now + 5, S)
    assert state.phase is Phase.HALF_OPEN
    assert state.successes == 1
    state = record(state, SMALL, now + 6, S)
    assert state == BreakerState(generation=3)
    assert allow(state, SMALL, now + 7)[0].permit == Permit(False, 3)


def test_any_failure_in_half_open_reopens_for_longer() -> None:
    now, state = half_open()
    _, state = allow(state, SMALL, now)
    state = record(state, SMALL, now + 5, S)
    for outcome in (F, W):
        reopened = record(state, SMALL, now + 6, outcome)
        assert reopened.phase is Phase.OPEN
        assert reopened.trips == 2
        assert reopened.open_until == now + 6 + 2_000


def test_open_duration_doubles_per_trip_and_caps() -> None:
    state = tripped()
    durations = [state.open_until - EPOCH_MS]
    now = EPOCH_MS
    for _ in range(5):
        now = state.open_until
        _, state = allow(state, SMALL, now)
        state = record(state, SMALL, now, F)
        durations.append(state.open_until - now)
    assert durations == [1_000, 2_000, 4_000, 8_000, 8_000, 8_000]
    assert state.trips == 6
    # Closing resets the count: the next trip is short again.
    now = state.open_until
    _, state = allow(state, SMALL, now)
    _, state = allow(state, SMALL, now)
    state = record(record(state, SMALL, now, S), SMALL, now, S)
    assert state.phase is Phase.CLOSED
    assert state.trips == 0
    assert run([F] * 4, state, now=now)[-1].open_until == now + 1_000


def test_open_duration_has_an_overflow_guard() -> None:
    assert open_duration_ms(1, SMALL) == 1_000
    assert open_duration_ms(0, SMALL) == 1_000
    assert open_duration_ms(10**9, SMALL) == 8_000
    odd = replace(SMALL, open_for_ms=3, max_open_for_ms=86_400_000)
    assert open_duration_ms(10, odd) == 3 * 2**9
    assert open_duration_ms(10**6, odd) == 86_400_000


def test_lost_trial_permits_are_taken_back_after_the_trial_timeout() -> None:
    now, state = half_open()
    _, state = allow(state, SMALL, now)
    _, state = allow(state, SMALL, now + 100)
    state = record(state, SMALL, now + 200, S)  # one success, two trials never reported
    expires = now + 100 + SMALL.trial_timeout_ms
    decision, _ = allow(state, SMALL, expires - 1)
    assert decision.refusal is Refusal.TRIALS_IN_FLIGHT
    assert decision.retry_after_ms == 1
    decision, state = allow(state, SMALL, expires)
    assert decision.permit == Permit(True, state.generation)
    assert (state.issued, state.successes) == (2, 1)
    # The success seen before still counts towards closing.
    assert record(state, SMALL, expires + 1, S).phase is Phase.CLOSED


# --- overload -----------------------------------------------------------------------------


def test_overload_pauses_without_counting_a_failure() -> None:
    state = run([F, F, F])[-1]
    paused = overloaded(state, EPOCH_MS, EPOCH_MS + 3_000)
    assert paused.recent == state.recent
    assert paused.phase is Phase.CLOSED
    decision, _ = allow(paused, SMALL, EPOCH_MS + 1_000)
    assert decision == BreakerDecision(None, 2_000, Refusal.OVERLOADED)
    assert allow(paused, SMALL, EPOCH_MS + 3_000)[0].allowed
    # A 429 recorded as an outcome changes nothing either.
    assert record(paused, SMALL, EPOCH_MS, Outcome.OVERLOAD) == paused


def test_overload_never_shortens_a_pause_and_ignores_the_past() -> None:
    state = overloaded(BreakerState(), EPOCH_MS, EPOCH_MS + 5_000)
    assert overloaded(state, EPOCH_MS, EPOCH_MS + 1_000) == state
    assert overloaded(state, EPOCH_MS + 9_000, EPOCH_MS + 8_000) == state
    assert overloaded(state, EPOCH_MS, EPOCH_MS + 6_000).cool_down_until == EPOCH_MS + 6_000


def test_an_overload_pause_on_an_open_breaker_waits_for_both() -> None:
    state = overloaded(tripped(), EPOCH_MS, EPOCH_MS + 300)
    assert allow(state, SMALL, EPOCH_MS + 100)[0] == BreakerDecision(None, 900, Refusal.OVERLOADED)
    assert allow(state, SMALL, EPOCH_MS + 400)[0].refusal is Refusal.OPEN


def test_half_open_ignores_outcomes_when_no_trial_is_out() -> None:
    now, state = half_open()
    state = record(state, SMALL, now, S)
    assert (state.issued, state.successes) == (1, 1)
    for outcome in Outcome:
        assert record(state, SMALL, now + 1, outcome) == state


def test_a_trial_that_meets_a_429_hands_its_permit_back() -> None:
    now, state = half_open()
    after = record(state, SMALL, now + 1, Outcome.OVERLOAD, Permit(True, state.generation))
    assert after.issued == 0
    assert after.phase is Phase.HALF_OPEN


# --- stale outcomes, batches, snapshots ---------------------------------------------------


def test_stale_outcomes_cannot_decide_a_trial() -> None:
    _, state = half_open()
    closed_permit = Permit(False, 0)
    old_trial = Permit(True, state.generation - 2)
    for permit in (closed_permit, old_trial):
        assert record(state, SMALL, EPOCH_MS + 2_000, F, permit) == state
        assert record(state, SMALL, EPOCH_MS + 2_000, S, permit) == state
    assert record(state, SMALL, EPOCH_MS + 2_000, F, Permit(True, state.generation)).phase is (
        Phase.OPEN
    )


def test_a_late_trial_outcome_does_not_count_after_closing() -> None:
    now, state = half_open()
    decision, state = allow(state, SMALL, now)
    permit = decision.permit
    assert permit is not None
    closed = record(record(state, SMALL, now, S), SMALL, now, S)
    assert closed.phase is Phase.CLOSED
    assert record(closed, SMALL, now + 1, F, permit) == closed


def test_record_many_applies_reports_in_time_order() -> None:
    reports = [Report(EPOCH_MS + 3, F), Report(EPOCH_MS + 1, F), Report(EPOCH_MS + 2, F)]
    reports.append(Report(EPOCH_MS + 4, F))
    state = record_many(BreakerState(), SMALL, reversed(reports))
    assert state.phase is Phase.OPEN
    assert state.open_until == EPOCH_MS + 4 + 1_000
    expected = BreakerState()
    for report in sorted(reports, key=lambda r: r.at):
        expected = record(expected, SMALL, report.at, report.outcome)
    assert state == expected


def test_record_many_caps_an_overload_pause_at_max_open_for() -> None:
    year = 365 * 86_400_000
    state = record_many(
        BreakerState(), SMALL, [Report(EPOCH_MS, Outcome.OVERLOAD, None, EPOCH_MS + year)]
    )
    assert state.cool_down_until == EPOCH_MS + SMALL.max_open_for_ms
    assert state.recent == ""


def test_state_and_reports_survive_json() -> None:
    now, state = half_open()
    state = overloaded(record(state, SMALL, now, S), now, now + 10)
    for value in (BreakerState(), run([S, F, W])[-1], tripped(), state):
        assert decode_state(json.loads(json.dumps(encode_state(value)))) == value
    assert encode_state(BreakerState()) == {"v": 1, "phase": "closed"}
    for report in (
        Report(EPOCH_MS, S),
        Report(EPOCH_MS, F, Permit(True, 7)),
        Report(EPOCH_MS, Outcome.OVERLOAD, Permit(False, 0), EPOCH_MS + 5),
    ):
        assert decode_report(json.loads(json.dumps(encode_report(report)))) == report


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"phase": "closed"},
        {"v": 2, "phase": "closed"},
        {"v": 1, "phase": "ajar"},
        {"v": 1, "phase": ["closed"]},
        {"v": 1, "phase": "closed", "recent": "sfx"},
        {"v": 1, "phase": "closed", "recent": 3},
        {"v": 1, "phase": "closed", "trips": -1},
        {"v": 1, "phase": "closed", "trips": True},
        {"v": 1, "phase": "closed", "trips": 1.5},
        {"v": 1, "phase": "closed", "color": "red"},
        {"v": 1, "phase": "half_open", "issued": 1, "successes": 2},
    ],
)
def test_decode_state_refuses_garbage(data: object) -> None:
    with pytest.raises(StateError):
        decode_state(data)


@pytest.mark.parametrize(
    "data",
    [
        None,
        [1, "success", None],
        [-1, "success", None, 0],
        [1, "meh", None, 0],
        [1, ["success"], None, 0],
        [1, "success", [1], 0],
        [1, "success", [1, 1], 0],
        [1, "success", None, "soon"],
    ],
)
def test_decode_report_refuses_garbage(data: object) -> None:
    with pytest.raises(StateError):
        decode_report(data)


# --- classify -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error", "duration", "outcome"),
    [
        (200, None, 10, S),
        (404, None, 10, S),
        (500, None, 10, S),
        (502, None, 10, F),
        (503, None, 10, F),
        (504, None, 10, F),
        (429, None, 10, Outcome.OVERLOAD),
        (429, None, 60_000, Outcome.OVERLOAD),
        (None, "timeout", 5_000, F),
        (None, "connection refused", 3, F),
        (200, "reset mid-body", 3, F),
        (None, None, 3, F),
        (200, None, 2_000, S),
        (200, None, 2_001, W),
        (503, None, 9_000, F),
    ],
)
def test_classify(status: int | None, error: str | None, duration: int, outcome: Outcome) -> None:
    config = replace(SMALL, slow_call_ms=2_000)
    assert classify(status, error, duration, config) is outcome


def test_classify_without_a_slow_threshold_never_says_slow() -> None:
    assert classify(200, None, 10**9, SMALL) is S


@pytest.mark.parametrize("status", [520, 521, 522, 523, 524, 525, 526])
def test_the_edges_answers_for_a_failed_origin_are_failures_whatever_the_pool_lists(
    status: int,
) -> None:
    # Cloudflare answers these in the origin's stead (refused, unreachable, TLS, ...): a
    # failure as a connection error is, though failure_statuses names only the origin's.
    only_500 = replace(SMALL, failure_statuses=(500,))
    assert classify(status, None, 10, only_500) is F
    assert classify(527, None, 10, only_500) is S  # not the edge's


# --- settings -----------------------------------------------------------------------------


def test_parse_breaker_defaults() -> None:
    problems = Problems()
    assert parse_breaker(None, "pool 'api'.breaker", problems) == BreakerSettings()
    assert parse_breaker({}, "pool 'api'.breaker", problems) == BreakerSettings()
    assert not problems.items
    defaults = BreakerSettings()
    assert (defaults.failure_rate, defaults.window, defaults.min_calls) == (50, 20, 10)
    assert (defaults.open_for_ms, defaults.max_open_for_ms) == (10_000, 300_000)
    assert (defaults.half_open_calls, defaults.success_threshold) == (3, 2)
    assert defaults.slow_call_ms is None
    assert defaults.failure_statuses == (502, 503, 504)


def test_parse_breaker_reads_every_field() -> None:
    problems = Problems()
    parsed = parse_breaker(
        {
            "failure_rate": 25,
            "window": 50,
            "min_calls": 20,
            "slow_call": "5s",
            "open_for": "2s",
            "max_open_for": "1m",
            "half_open_calls": 5,
            "success_threshold": 5,
            "trial_timeout": "10s",
            "failure_statuses": [500, 503, 502],
        },
        "b",
        problems,
    )
    assert not problems.items
    assert parsed == BreakerSettings(
        25, 50, 20, 5_000, 2_000, 60_000, 5, 5, 10_000, (500, 502, 503)
    )


@pytest.mark.parametrize(
    ("raw", "where", "fragment"),
    [
        ("fast", "b", "must be a table"),
        ({"failure_rate": 0}, "b.failure_rate", "1..100"),
        ({"failure_rate": 101}, "b.failure_rate", "1..100"),
        ({"failure_rate": 50.5}, "b.failure_rate", "integer"),
        ({"failure_rate": True}, "b.failure_rate", "integer"),
        ({"window": 0}, "b.window", "1..1000"),
        ({"window": 5, "min_calls": 6}, "b.min_calls", "1..5"),
        ({"slow_call": "0s"}, "b.slow_call", "shorter"),
        ({"slow_call": 5}, "b.slow_call", "duration"),
        ({"open_for": "10s", "max_open_for": "5s"}, "b.max_open_for", "shorter"),
        ({"half_open_calls": 2, "success_threshold": 3}, "b.success_threshold", "1..2"),
        ({"failure_statuses": [502, 429]}, "b.failure_statuses", "other than 429"),
        ({"failure_statuses": [200]}, "b.failure_statuses", "400..599"),
        ({"failure_statuses": "502"}, "b.failure_statuses", "list"),
        ({"failure_statuses": [502, 502]}, "b.failure_statuses", "twice"),
        ({"trip_after": 5}, "b.trip_after", "unknown field"),
    ],
)
def test_parse_breaker_problems(raw: object, where: str, fragment: str) -> None:
    problems = Problems()
    parsed = parse_breaker(raw, "b", problems)
    assert isinstance(parsed, BreakerSettings)  # never raises; always usable
    assert len(problems.items) == 1, problems.items
    (problem,) = problems.items
    assert problem.startswith(f"{where}: "), problem
    assert fragment in problem


def test_parse_breaker_keeps_the_good_fields_beside_a_bad_one() -> None:
    problems = Problems()
    parsed = parse_breaker({"failure_rate": 500, "window": 7}, "b", problems)
    assert parsed.failure_rate == 50
    assert parsed.window == 7
    assert parsed.min_calls == 7  # the default min_calls never exceeds the window


def test_settings_refuse_impossible_combinations() -> None:
    with pytest.raises(ValueError, match="min_calls"):
        BreakerSettings(window=5, min_calls=6)
    with pytest.raises(ValueError, match="success_threshold"):
        BreakerSettings(half_open_calls=1, success_threshold=2)
    with pytest.raises(ValueError, match="open_for"):
        BreakerSettings(open_for_ms=10, max_open_for_ms=5)


# --- property: the breaker against a plain reference model ---------------------------------


class Model:
    """The breaker as the spec words it, in the plainest mutable form."""

    def __init__(self, config: BreakerSettings) -> None:
        self.config = config
        self.phase = "closed"
        self.calls: list[bool] = []  # True: failed
        self.trips = 0
        self.open_until = 0
        self.trials_out = 0
        self.trial_successes = 0
        self.trials_expire_at = 0
        self.pause_until = 0

    def allow(self, now: int) -> tuple[bool, int]:
        c = self.config
        if now < self.pause_until:
            wait = self.pause_until - now
            if self.phase == "open" and now < self.open_until:
                wait = max(wait, self.open_until - now)
            return False, wait
        if self.phase == "closed":
            return True, 0
        if self.phase == "open":
            if now < self.open_until:
                return False, self.open_until - now
            self.phase = "half_open"
            self.trials_out = self.trial_successes = 0
        if self.trials_out == c.half_open_calls:
            if now < self.trials_expire_at:
                return False, self.trials_expire_at - now
            self.trials_out = self.trial_successes
        self.trials_out += 1
        self.trials_expire_at = now + c.trial_timeout_ms
        return True, 0

    def trip(self, now: int) -> None:
        self.phase = "open"
        self.trips += 1
        self.open_until = now + min(
            self.config.max_open_for_ms, self.config.open_for_ms * 2 ** (self.trips - 1)
        )
        self.calls = []

    def record(self, now: int, outcome: Outcome) -> None:
        c = self.config
        if self.phase == "open":
            return
        if self.phase == "half_open" and self.trials_out == self.trial_successes:
            return  # no trial out
        if outcome is Outcome.OVERLOAD:
            if self.phase == "half_open":
                self.trials_out -= 1
            return
        failed = outcome in (Outcome.FAILURE, Outcome.SLOW)
        if self.phase == "half_open":
            if failed:
                self.trip(now)
                return
            self.trial_successes += 1
            if self.trial_successes >= c.success_threshold:
                self.phase = "closed"
                self.trips = 0
                self.calls = []
            return
        self.calls = [*self.calls, failed][-c.window :]
        n = len(self.calls)
        if n >= c.min_calls and Fraction(sum(self.calls), n) * 100 >= c.failure_rate:
            self.trip(now)


@st.composite
def breaker_configs(draw: st.DrawFn) -> BreakerSettings:
    window = draw(st.integers(1, 8))
    half_open_calls = draw(st.integers(1, 4))
    open_for = draw(st.integers(1, 50))
    return BreakerSettings(
        failure_rate=draw(st.integers(1, 100)),
        window=window,
        min_calls=draw(st.integers(1, window)),
        open_for_ms=open_for,
        max_open_for_ms=draw(st.integers(open_for, open_for * 10)),
        half_open_calls=half_open_calls,
        success_threshold=draw(st.integers(1, half_open_calls)),
        trial_timeout_ms=draw(st.integers(1, 100)),
    )


STEP = st.tuples(
    st.sampled_from(["allow", "allow", "success", "failure", "slow", "overload", "pause"]),
    st.integers(0, 60),
)


@settings(max_examples=examples(300), deadline=None)
@given(breaker_configs(), st.lists(STEP, max_size=60))
def test_breaker_matches_the_reference_model(
    config: BreakerSettings, steps: list[tuple[str, int]]
) -> None:
    model = Model(config)
    state = BreakerState()
    now = EPOCH_MS
    for action, gap in steps:
        now += gap
        generation, phase_before = state.generation, model.phase
        if action == "allow":
            decision, state = allow(state, config, now)
            allowed, wait = model.allow(now)
            assert (decision.allowed, decision.retry_after_ms) == (allowed, wait)
            assert decision.allowed == (decision.refusal is None)
        elif action == "pause":
            state = overloaded(state, now, now + gap)
            model.pause_until = max(model.pause_until, now + gap)
        else:
            outcome = Outcome(action)
            state = record(state, config, now, outcome)
            model.record(now, outcome)
        # Every phase change, and only a phase change, starts a new generation.
        assert (state.generation != generation) == (state.phase.value != phase_before)
        # The state agrees with the model ...
        assert state.phase.value == model.phase
        assert state.trips == model.trips
        assert [c != "s" for c in state.recent] == model.calls
        # ... and keeps its invariants.
        assert len(state.recent) <= config.window
        assert state.successes <= state.issued <= config.half_open_calls
        if state.phase is Phase.OPEN:
            assert state.open_until - now <= config.max_open_for_ms
        assert decode_state(json.loads(json.dumps(encode_state(state)))) == state


@settings(max_examples=examples(200), deadline=None)
@given(breaker_configs(), st.lists(STEP, max_size=40), st.integers(0, 5))
def test_reports_under_a_stale_permit_never_change_the_state(
    config: BreakerSettings, steps: list[tuple[str, int]], back: int
) -> None:
    state = BreakerState()
    now = EPOCH_MS
    for action, gap in steps:
        now += gap
        if action == "allow":
            _, state = allow(state, config, now)
        elif action != "pause":
            state = record(state, config, now, Outcome(action))
    stale = [Permit(True, state.generation - 1 - back), Permit(False, state.generation + 1)]
    if state.phase is Phase.HALF_OPEN:
        stale.append(Permit(False, state.generation))
    else:
        stale.append(Permit(True, state.generation))
    for permit in stale:
        for outcome in Outcome:
            assert record(state, config, now, outcome, permit) == state


def test_a_success_whose_body_broke_off_counts_once_as_a_failure() -> None:
    settings = BreakerSettings(failure_rate=60, window=5, min_calls=5)
    state = BreakerState()
    for now in range(4):  # four answers whose bodies broke: head a success, body a failure
        state = record(state, settings, now, Outcome.SUCCESS)
        state = record(state, settings, now, Outcome.BROKEN)
    assert state.recent == "ffff" and current_phase(state, 4) is Phase.CLOSED
    state = record(state, settings, 5, Outcome.SUCCESS)
    state = record(state, settings, 5, Outcome.BROKEN)
    assert current_phase(state, 6) is Phase.OPEN  # 5 of 5 failed: a 100% broken origin
    # Reported to the shared breaker as such.
    report = Report(7, Outcome.BROKEN, None, 0)
    assert decode_report(encode_report(report)) == report
