"""The one-call protocol to the idempotency Durable Object."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.errors import ProtocolError
from edge_limiter.core.idempotency.protocol import (
    IdempotencyAnswer,
    IdempotencyCall,
    apply_call,
    apply_stored,
)
from edge_limiter.core.idempotency.records import (
    LATE_GRACE_MS,
    Completed,
    InFlight,
    Outcome,
    StoredResponse,
    decode_record,
    idle_at,
)
from tests.examples import examples

from .conftest import FakeClock

OK = StoredResponse(201, (("Content-Type", "application/json"),), b'{"id":1}')


def test_calls_round_trip() -> None:
    calls = [
        IdempotencyCall("claim", "fp", lock_timeout_ms=5_000),
        IdempotencyCall("complete", token=7, response=OK, retention_ms=60_000),
        IdempotencyCall("complete", token=7, response=StoredResponse(200, (), None, True)),
        IdempotencyCall("release", token=7),
        IdempotencyCall("get"),
    ]
    for call in calls:
        assert IdempotencyCall.from_json(call.to_json()) == call


@pytest.mark.parametrize(
    "fields",
    [
        {"op": "steal"},
        {"op": "claim"},
        {"op": "complete", "token": 1},
        {"op": "complete", "response": OK},
        {"op": "release"},
        {"op": "release", "token": -1},
        {"op": "claim", "fingerprint": "fp", "lock_timeout_ms": 0},
        {"op": "get", "retention_ms": True},
    ],
)
def test_incomplete_calls_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ProtocolError):
        IdempotencyCall(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        "{}",
        '{"op":"claim","fp":3}',
        '{"op":"claim","fp":"x","lock":1.5}',
        '{"op":"complete","token":1,"response":{"status":200}}',
        '{"op":"complete","token":1,"response":"yes"}',
    ],
)
def test_malformed_call_text_is_a_protocol_error(text: str) -> None:
    with pytest.raises(ProtocolError):
        IdempotencyCall.from_json(text)


def test_answers_round_trip_and_stay_small() -> None:
    answers = [
        IdempotencyAnswer(Outcome.CLAIMED, token=12),
        IdempotencyAnswer(Outcome.IN_FLIGHT, retry_after_ms=250),
        IdempotencyAnswer(Outcome.REPLAY, response=OK),
        IdempotencyAnswer(Outcome.REFUSED, reason="fenced"),
        IdempotencyAnswer(Outcome.MISMATCH),
    ]
    for answer in answers:
        assert IdempotencyAnswer.from_json(answer.to_json()) == answer
    assert IdempotencyAnswer(Outcome.MISMATCH).to_json() == '{"outcome":"mismatch"}'


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{}",
        '{"outcome":"won"}',
        '{"outcome":"claimed","token":"1"}',
        '{"outcome":"refused","reason":1}',
    ],
)
def test_malformed_answers_are_protocol_errors(text: str) -> None:
    with pytest.raises(ProtocolError):
        IdempotencyAnswer.from_json(text)


def test_a_whole_exchange(clock: FakeClock) -> None:
    answer, record = apply_call(
        IdempotencyCall("claim", "fp", lock_timeout_ms=1_000), None, clock.now
    )
    claimed = IdempotencyAnswer.from_json(answer)
    assert claimed == IdempotencyAnswer(Outcome.CLAIMED, token=clock.now)
    assert isinstance(record, InFlight)

    answer, same = apply_call(IdempotencyCall("get"), record, clock.now + 10)
    assert IdempotencyAnswer.from_json(answer) == IdempotencyAnswer(
        Outcome.IN_FLIGHT, token=claimed.token, retry_after_ms=990
    )
    assert same is record

    call = IdempotencyCall("complete", token=claimed.token, response=OK, retention_ms=60_000)
    answer, record = apply_call(call, record, clock.advance(100))
    assert IdempotencyAnswer.from_json(answer).outcome == Outcome.COMPLETED
    assert isinstance(record, Completed)

    answer, _ = apply_call(IdempotencyCall("claim", "fp"), record, clock.advance(100))
    assert IdempotencyAnswer.from_json(answer) == IdempotencyAnswer(Outcome.REPLAY, response=OK)

    answer, after = apply_call(IdempotencyCall("release", token=claimed.token), record, clock.now)
    assert IdempotencyAnswer.from_json(answer).outcome == Outcome.REFUSED
    assert after is record


def test_apply_stored_returns_the_text_to_store_and_when_to_delete(clock: FakeClock) -> None:
    call = IdempotencyCall("claim", "fp", lock_timeout_ms=1_000).to_json()
    answer, stored, deadline = apply_stored(call, None, clock.now)
    assert IdempotencyAnswer.from_json(answer).outcome == Outcome.CLAIMED
    assert stored is not None
    record = decode_record(stored)
    assert deadline == idle_at(record) == clock.now + 1_000 + LATE_GRACE_MS
    answer, again, _ = apply_stored(call, stored, clock.now)
    assert IdempotencyAnswer.from_json(answer).outcome == Outcome.IN_FLIGHT
    assert again == stored


def test_get_on_nothing_stores_nothing(clock: FakeClock) -> None:
    answer, stored, deadline = apply_stored(IdempotencyCall("get").to_json(), None, clock.now)
    assert IdempotencyAnswer.from_json(answer).outcome == Outcome.ABSENT
    assert stored is None and deadline is None


def test_an_unreadable_record_counts_as_absent(clock: FakeClock) -> None:
    call = IdempotencyCall("claim", "fp").to_json()
    answer, stored, _ = apply_stored(call, '{"v":99}', clock.now)
    assert IdempotencyAnswer.from_json(answer).outcome == Outcome.CLAIMED
    assert stored is not None and json.loads(stored)["v"] == 1


def test_a_malformed_call_raises(clock: FakeClock) -> None:
    with pytest.raises(ProtocolError):
        apply_stored('{"op":"claim"}', None, clock.now)


header_text = st.text(st.characters(codec="utf-8"), max_size=6)
responses = st.builds(
    StoredResponse,
    status=st.integers(100, 599),
    headers=st.lists(st.tuples(header_text, header_text), max_size=4).map(tuple),
    body=st.one_of(st.none(), st.binary(max_size=40)),
    body_too_large=st.booleans(),
)


calls = st.builds(
    IdempotencyCall,
    op=st.sampled_from(["claim", "complete", "release", "get"]),
    fingerprint=header_text.map(lambda text: text or "x"),
    token=st.integers(1, 2**53),
    response=responses,
    lock_timeout_ms=st.integers(1, 2**40),
    retention_ms=st.integers(1, 2**40),
)
answers = st.builds(
    IdempotencyAnswer,
    outcome=st.sampled_from(Outcome),
    token=st.integers(0, 2**53),
    retry_after_ms=st.integers(0, 2**40),
    response=st.one_of(st.none(), responses),
    reason=header_text,
)


@settings(max_examples=examples(200), deadline=None)
@given(calls, answers)
def test_any_valid_call_and_answer_round_trip(
    call: IdempotencyCall, answer: IdempotencyAnswer
) -> None:
    assert IdempotencyCall.from_json(call.to_json()) == call
    assert IdempotencyAnswer.from_json(answer.to_json()) == answer
