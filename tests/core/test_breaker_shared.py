"""The shared breaker's Durable Object step: reports replayed, health probes, the protocol."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.errors import ProtocolError
from edge_limiter.core.resilience.breaker import (
    BreakerSettings,
    BreakerState,
    Outcome,
    Permit,
    Phase,
    Refusal,
    Report,
    allow,
    overloaded,
    record,
)
from edge_limiter.core.resilience.shared import (
    SYNC,
    HealthReport,
    SharedBreaker,
    SharedState,
    SyncCall,
    adopt,
    apply_health,
    apply_reports,
    apply_sync,
    decode_settings,
    decode_shared,
    encode_settings,
    encode_shared,
    state_from_json,
    state_to_json,
)
from edge_limiter.testing import SqliteSql
from tests.examples import examples

SETTINGS = BreakerSettings(failure_rate=50, window=4, min_calls=4, open_for_ms=10_000)
T0 = 1_700_000_000_000


def failures(count: int, start: int = T0) -> list[Report]:
    return [Report(start + n, Outcome.FAILURE) for n in range(count)]


def test_reports_from_isolates_trip_the_shared_breaker_at_the_threshold() -> None:
    three = apply_reports(BreakerState(), SETTINGS, failures(3))
    assert three.phase is Phase.CLOSED
    four = apply_reports(BreakerState(), SETTINGS, failures(4))
    assert four.phase is Phase.OPEN and four.open_until == T0 + 3 + 10_000


def test_while_open_reported_calls_do_not_count_then_trials_close_it() -> None:
    opened = apply_reports(BreakerState(), SETTINGS, failures(4))
    ignored = apply_reports(opened, SETTINGS, [Report(T0 + 100, Outcome.SUCCESS)])
    assert ignored == opened
    after = opened.open_until
    trials = [Report(after + n, Outcome.SUCCESS) for n in range(2)]
    closed = apply_reports(opened, SETTINGS, trials)
    assert closed.phase is Phase.CLOSED and closed.trips == 0


def test_reports_are_replayed_in_time_order_whatever_order_they_arrive_in() -> None:
    reports = [*failures(4), Report(T0 + 20_000, Outcome.SUCCESS)]
    assert apply_reports(BreakerState(), SETTINGS, reversed(reports)) == apply_reports(
        BreakerState(), SETTINGS, reports
    )


def test_an_overload_report_parks_the_origin_without_a_failure() -> None:
    parked = apply_reports(
        BreakerState(), SETTINGS, [Report(T0, Outcome.OVERLOAD, None, T0 + 30_000)]
    )
    assert parked.cool_down_until == T0 + 30_000 and parked.recent == ""


def test_failed_probes_open_a_closed_breaker_and_a_passing_one_ends_the_wait() -> None:
    shared = apply_health(SharedState(), SETTINGS, HealthReport(T0, False, 2))
    assert shared.breaker.phase is Phase.CLOSED and shared.failed_probes == 1
    shared = apply_health(shared, SETTINGS, HealthReport(T0 + 60_000, False, 2))
    assert shared.breaker.phase is Phase.OPEN
    assert shared.breaker.open_until == T0 + 60_000 + 10_000
    healed = apply_health(shared, SETTINGS, HealthReport(T0 + 61_000, True, 2))
    assert healed.breaker.open_until == T0 + 61_000 and healed.failed_probes == 0
    # Its next reported call is a trial.
    trial = apply_reports(healed.breaker, SETTINGS, [Report(T0 + 61_001, Outcome.SUCCESS)])
    assert trial.phase is Phase.HALF_OPEN and trial.successes == 1


def test_failed_probes_open_a_half_open_breaker_again_for_longer() -> None:
    # Opened by probes; its wait runs out with no traffic (half-open as stored: open
    # past open_until), and the next failed probe is a failed trial.
    shared = apply_health(SharedState(), SETTINGS, HealthReport(T0, False, 2))
    shared = apply_health(shared, SETTINGS, HealthReport(T0 + 1, False, 2))
    first = shared.breaker
    assert first.phase is Phase.OPEN and first.trips == 1
    later = first.open_until + 60_000
    shared = apply_health(shared, SETTINGS, HealthReport(later, False, 2))
    assert shared.breaker.phase is Phase.OPEN and shared.breaker.trips == 2
    assert shared.breaker.open_until == later + 2 * 10_000
    assert allow(shared.breaker, SETTINGS, later + 1)[0].refusal is Refusal.OPEN
    # Opened by calls, half-open with a trial out (stored as half-open): probes that
    # fail unhealthy_after times in a row open it again.
    opened = apply_reports(BreakerState(), SETTINGS, failures(4))
    _, half = allow(opened, SETTINGS, opened.open_until)
    assert half.phase is Phase.HALF_OPEN
    at = opened.open_until + 5
    shared = apply_health(SharedState(half), SETTINGS, HealthReport(at, False, 2))
    assert shared.breaker.phase is Phase.HALF_OPEN
    shared = apply_health(shared, SETTINGS, HealthReport(at + 1, False, 2))
    assert shared.breaker.phase is Phase.OPEN and shared.breaker.trips == 2
    assert shared.breaker.generation > half.generation
    # While still open (before its wait ends), failed probes change nothing.
    again = apply_health(shared, SETTINGS, HealthReport(at + 2, False, 2))
    assert again.breaker == shared.breaker


def test_a_passing_probe_resets_the_run_of_failures() -> None:
    shared = apply_health(SharedState(), SETTINGS, HealthReport(T0, False, 2))
    shared = apply_health(shared, SETTINGS, HealthReport(T0 + 1, True, 2))
    shared = apply_health(shared, SETTINGS, HealthReport(T0 + 2, False, 2))
    assert shared.breaker.phase is Phase.CLOSED


def test_the_protocol_round_trips() -> None:
    call = SyncCall(SETTINGS, tuple(failures(2)), HealthReport(T0, False, 3))
    again = SyncCall.from_json(call.to_json())
    assert again == call
    shared = apply_sync(again, SharedState())
    assert decode_shared(encode_shared(shared)) == shared
    assert state_from_json(state_to_json(shared.breaker)) == shared.breaker
    assert decode_settings(encode_settings(SETTINGS)) == SETTINGS


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.tuples(st.integers(0, 30_000), st.sampled_from(list(Outcome))), max_size=6),
            st.sampled_from((None, True, False)),
            st.sampled_from((None, None, None, "open", "closed", "auto")),
        ),
        max_size=12,
    )
)
def test_the_typed_sync_answers_what_the_codec_reads(
    calls: list[tuple[list[tuple[int, Outcome]], bool | None, str | None]],
) -> None:
    """``SYNC.typed``: the twin without the codec gets exactly the codec's answers."""
    by_text, typed = SharedBreaker(SqliteSql()), SharedBreaker(SqliteSql())
    for reports, healthy, forced in calls:
        health = None if healthy is None else HealthReport(T0 + 30_000, healthy)
        call = SyncCall(
            SETTINGS, tuple(Report(T0 + at, outcome) for at, outcome in reports), health, forced
        )
        expected = SYNC.decode(by_text.sync(SYNC.encode(call), T0), call)
        assert typed.sync_call(call, T0) == expected
    assert typed.state.get() == by_text.state.get()


@pytest.mark.parametrize(
    "text",
    ["", "{}", '{"settings":{}}', '{"settings":' + '{"failure_rate":"x"}' + "}", "[1]"],
)
def test_malformed_syncs_are_protocol_errors(text: str) -> None:
    with pytest.raises(ProtocolError):
        SyncCall.from_json(text)


def test_unreadable_stored_state_is_a_fresh_breaker() -> None:
    assert decode_shared("garbage") == SharedState()
    assert decode_shared(None) == SharedState()


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30_000), st.sampled_from(list(Outcome))), max_size=40))
def test_the_shared_state_never_goes_half_open_before_its_open_time(
    steps: list[tuple[int, Outcome]],
) -> None:
    state = BreakerState()
    for at, outcome in sorted(steps):
        before = state
        state = apply_reports(state, SETTINGS, [Report(T0 + at, outcome)])
        if before.phase is Phase.OPEN and T0 + at < before.open_until:
            assert state.phase is Phase.OPEN and state.recent == before.recent


def test_an_operator_forces_a_breaker_open_or_closed_and_hands_it_back() -> None:
    from edge_limiter.core.resilience.breaker import Refusal, allow, record

    stored = SharedState()
    # Forced open (an origin out for maintenance): every call refused, reports and
    # probes decide nothing; the state survives storage and the wire.
    drained = apply_sync(SyncCall(SETTINGS, force="open"), stored)
    decision, _ = allow(drained.breaker, SETTINGS, T0)
    assert decision.refusal is Refusal.FORCED_OPEN and not decision.allowed
    healthy = apply_sync(SyncCall(SETTINGS, health=HealthReport(T0, True)), drained)
    assert healthy.breaker.forced == "open"
    assert decode_shared(encode_shared(healthy)).breaker.forced == "open"
    assert state_from_json(state_to_json(healthy.breaker)).forced == "open"
    assert SyncCall.from_json(SyncCall(SETTINGS, force="closed").to_json()).force == "closed"
    wire = json.loads(SyncCall(SETTINGS).to_json())
    with pytest.raises(ProtocolError):
        SyncCall.from_json(json.dumps({**wire, "force": "sideways"}))
    # Forced closed: every call goes, failures count for nothing (it never trips).
    kept = apply_sync(SyncCall(SETTINGS, force="closed"), stored)
    kept = apply_sync(SyncCall(SETTINGS, reports=tuple(failures(10, T0 + 100))), kept)
    assert kept.breaker.phase is Phase.CLOSED and kept.breaker.recent == ""
    for _ in range(3):
        failed = apply_sync(
            SyncCall(SETTINGS, health=HealthReport(T0 + 200, False, unhealthy_after=1)), kept
        )
        assert failed.breaker.phase is Phase.CLOSED
    decision, state = allow(kept.breaker, SETTINGS, T0 + 300)
    assert decision.allowed
    assert record(state, SETTINGS, T0 + 301, Outcome.FAILURE, decision.permit) == state
    # Auto: the breaker decides again, from the phase it had.
    back = apply_sync(SyncCall(SETTINGS, force="auto"), kept)
    assert back.breaker.forced == "" and back.breaker.generation > kept.breaker.generation
    tripped = apply_sync(SyncCall(SETTINGS, reports=tuple(failures(4, T0 + 400))), back)
    assert tripped.breaker.phase is Phase.OPEN


# --- an isolate's copy adopting the object's answer ----------------------------------------

TRIALS = BreakerSettings(
    failure_rate=50,
    window=4,
    min_calls=2,
    open_for_ms=2_000,
    half_open_calls=1,
    success_threshold=1,
    trial_timeout_ms=30_000,
)


def opened_copy(settings: BreakerSettings = TRIALS) -> tuple[BreakerState, list[Report]]:
    """An isolate's copy tripped by two failures, and the reports it sends for them."""
    reports = failures(2)
    state = BreakerState()
    for report in reports:
        decision, state = allow(state, settings, report.at)
        state = record(state, settings, report.at, report.outcome, decision.permit)
    assert state.phase is Phase.OPEN
    return state, reports


def test_adopt_takes_the_answer_but_keeps_a_longer_local_pause() -> None:
    answer = apply_reports(BreakerState(), SETTINGS, failures(4))
    local = overloaded(BreakerState(), T0, T0 + 60_000)
    adopted = adopt(local, answer)
    assert adopted.phase is Phase.OPEN and adopted.cool_down_until == T0 + 60_000
    assert adopt(BreakerState(), answer).open_until == answer.open_until


def test_a_trial_out_is_not_forgotten_when_an_answer_that_has_not_heard_of_it_comes() -> None:
    # The probe's case: one trial hangs at the origin; the copy syncs (a refused request
    # asks it to) and the object, which hears of a trial only when it ends, still says
    # "open, its time over". Taking that as it is let a second trial through, then a third.
    local, reports = opened_copy()
    answer = apply_reports(BreakerState(), TRIALS, reports)
    half = local.open_until
    first, local = allow(local, TRIALS, half)
    assert first.permit is not None and first.permit.trial
    local = adopt(local, answer, TRIALS)
    second, local = allow(local, TRIALS, half + 1_000)
    assert second.permit is None and second.refusal is Refusal.TRIALS_IN_FLIGHT
    # The trial's own outcome still decides: it closes the copy.
    closed = record(local, TRIALS, half + 2_000, Outcome.SUCCESS, first.permit)
    assert closed.phase is Phase.CLOSED


def test_outcomes_recorded_while_the_answer_was_on_its_way_are_replayed_on_it() -> None:
    # Trials succeeded (the copy closed) while a sync sent before them was out: its
    # answer, "open, its time over", must not reopen the copy.
    settings = replace(TRIALS, half_open_calls=3, success_threshold=2)
    local, reports = opened_copy(settings)
    answer = apply_reports(BreakerState(), settings, reports)
    half = local.open_until
    unreported = []
    for n in range(3):
        decision, local = allow(local, settings, half + n)
        assert decision.permit is not None
        local = record(local, settings, half + 10 + n, Outcome.SUCCESS, decision.permit)
        unreported.append(Report(half + 10 + n, Outcome.SUCCESS, decision.permit))
    assert local.phase is Phase.CLOSED
    adopted = adopt(local, answer, settings, unreported)
    assert adopted.phase is Phase.CLOSED
    # Without the replay the copy would be back to trials.
    assert adopt(local, answer).phase is Phase.OPEN


def test_a_newer_opening_or_a_close_is_taken_and_old_permits_decide_nothing() -> None:
    local, reports = opened_copy()
    half = local.open_until
    trial, local = allow(local, TRIALS, half)
    assert trial.permit is not None
    # Another isolate's trial failed: the object tripped again (a later opening).
    again = apply_reports(BreakerState(), TRIALS, [*reports, Report(half + 5, Outcome.FAILURE)])
    assert again.trips == 2
    taken = adopt(local, again, TRIALS)
    assert taken.phase is Phase.OPEN and taken.trips == 2
    assert record(taken, TRIALS, half + 10, Outcome.SUCCESS, trial.permit) == taken
    # Another isolate's trial succeeded: the object closed.
    closed = apply_reports(BreakerState(), TRIALS, [*reports, Report(half + 5, Outcome.SUCCESS)])
    taken = adopt(local, closed, TRIALS)
    assert taken.phase is Phase.CLOSED
    late = record(taken, TRIALS, half + 10, Outcome.FAILURE, trial.permit)
    assert late.recent == ""


def test_calls_admitted_while_closed_keep_counting_across_an_answer() -> None:
    local = BreakerState()
    decision, local = allow(local, TRIALS, T0)
    answer = replace(apply_reports(BreakerState(), TRIALS, []), generation=7)
    local = adopt(local, answer, TRIALS)
    after = record(local, TRIALS, T0 + 5, Outcome.FAILURE, decision.permit)
    assert after.recent == "f"


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["call", "end_ok", "end_fail", "sync_out", "sync_in"]),
            st.integers(0, 1_500),
        ),
        max_size=60,
    ),
    st.integers(1, 3),
)
def test_one_copy_never_has_more_trials_out_on_one_opening_than_half_open_calls(
    events: list[tuple[str, int]], half_open_calls: int
) -> None:
    """Calls, their ends and syncs (sent, answered later) in any order: at no time does
    the copy have more than ``half_open_calls`` trials out on the same opening."""
    config = replace(
        TRIALS, open_for_ms=1_000, half_open_calls=half_open_calls, trial_timeout_ms=600_000
    )
    authoritative = BreakerState()
    local = BreakerState()
    pending: list[Report] = []
    in_sync: list[Report] | None = None
    out: list[tuple[Permit, tuple[int, int]]] = []  # trial permits out, and their opening
    now = T0
    for kind, gap in events:
        now += gap
        if kind == "call":
            decision, local = allow(local, config, now)
            permit = decision.permit
            if permit is not None:
                if permit.trial:
                    out.append((permit, (local.trips, local.open_until)))
                    opening = (local.trips, local.open_until)
                    assert sum(1 for _, o in out if o == opening) <= half_open_calls
                else:
                    # An ordinary call fails at once (drives the copy open).
                    local = record(local, config, now, Outcome.FAILURE, permit)
                    pending.append(Report(now, Outcome.FAILURE, permit))
        elif kind in ("end_ok", "end_fail") and out:
            permit, _ = out.pop(0)
            outcome = Outcome.SUCCESS if kind == "end_ok" else Outcome.FAILURE
            local = record(local, config, now, outcome, permit)
            pending.append(Report(now, outcome, permit))
        elif kind == "sync_out" and in_sync is None:
            in_sync, pending = pending, []
        elif kind == "sync_in" and in_sync is not None:
            authoritative = apply_reports(authoritative, config, in_sync)
            local = adopt(local, authoritative, config, pending)
            in_sync = None


def test_the_object_reads_its_row_once_and_memory_answers_after() -> None:
    sql = SqliteSql()
    breaker = SharedBreaker(sql)
    for start in (T0, T0 + 100):
        breaker.sync(SyncCall(SETTINGS, tuple(failures(2, start))).to_json(), start)
    reads = [q for q in sql.statements if q.startswith("SELECT")]
    assert len(reads) == 1
    # Stored all the same: a new instance (a restart) reads the state memory held.
    again = SharedBreaker(sql)
    answer = state_from_json(again.sync(SyncCall(SETTINGS).to_json(), T0 + 200))
    assert breaker.shared is not None and answer == breaker.shared.breaker
    assert answer.phase is Phase.OPEN


class FailingWrites(SqliteSql):
    failing = False

    def run(self, query: str, *args: object) -> None:
        if self.failing and query.startswith("INSERT"):
            raise RuntimeError("storage write failed")
        super().run(query, *args)


def test_a_sync_whose_write_failed_is_not_kept_in_memory_either() -> None:
    sql = FailingWrites()
    breaker = SharedBreaker(sql)
    breaker.sync(SyncCall(SETTINGS, tuple(failures(1))).to_json(), T0)
    sql.failing = True
    with pytest.raises(RuntimeError):
        breaker.sync(SyncCall(SETTINGS, tuple(failures(1, T0 + 10))).to_json(), T0 + 10)
    sql.failing = False
    # The isolate sends those reports again: counted once, as if the first try never was.
    reports = tuple(failures(1, T0 + 10))
    answer = state_from_json(breaker.sync(SyncCall(SETTINGS, reports).to_json(), T0 + 20))
    fresh = SharedBreaker(SqliteSql())
    fresh.sync(SyncCall(SETTINGS, tuple(failures(1))).to_json(), T0)
    assert answer == state_from_json(fresh.sync(SyncCall(SETTINGS, reports).to_json(), T0 + 20))
