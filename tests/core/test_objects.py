"""The one mechanism of the Durable Objects (:mod:`edge_limiter.core.objects`): each
method's codec round trips and refuses what it cannot read, naming what is wrong; the
rate limiter's hand-written answer is the JSON a plain encoder writes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.control import (
    OVERRIDES,
    STATS,
    OverridesAnswer,
    OverridesCall,
    StatsAnswer,
    StatsCall,
)
from edge_limiter.core.errors import ProtocolError
from edge_limiter.core.idempotency.protocol import CALL, IdempotencyAnswer, IdempotencyCall
from edge_limiter.core.idempotency.records import Outcome as IdempotencyOutcome
from edge_limiter.core.idempotency.records import StoredResponse
from edge_limiter.core.objects import Method, SqlCell
from edge_limiter.core.ratelimit.decision import Decision, Reason
from edge_limiter.core.ratelimit.leases.plan import Allowance
from edge_limiter.core.ratelimit.overrides import parse_override
from edge_limiter.core.ratelimit.protocol import DECIDE, StoreRequest, StoreResponse, checked
from edge_limiter.core.ratelimit.rates import Limit, Rate
from edge_limiter.core.resilience.breaker import BreakerSettings, BreakerState, Outcome, Report
from edge_limiter.core.resilience.shared import SYNC, HealthReport, SyncCall, state_to_json
from edge_limiter.core.stats import StatsBatch
from edge_limiter.testing import SqliteSql

T0 = 1_700_000_000_000
LIMITS = (Limit(Rate(10, 1_000)), Limit(Rate(100, 60_000), 150, "minute"))
OVERRIDE = parse_override(
    {"route": "api", "key": "premium_*", "limits": "100/minute", "reason": "a partner"},
    T0,
    {"api": "fixed_window"},
    new_id="0123456789abcdef",
)
BATCH = StatsBatch({"api": {"allowed": 3, "limited": 1}}, {"api|abc": 1})


def decision(allowed: bool, limit: Limit, remaining: int = 3) -> Decision:
    reason = None if allowed else Reason.LIMITED
    return Decision(allowed, limit.capacity, remaining, 500, 0 if allowed else 250, reason, limit)


EXCHANGES: list[tuple[Method[Any, Any], Any, Any]] = [
    (
        DECIDE,
        StoreRequest("check", "token_bucket", LIMITS, 2, 50, stamp=True),
        checked((decision(True, LIMITS[0]), decision(True, LIMITS[1])), None, T0),
    ),
    (
        DECIDE,
        StoreRequest("lease", "fixed_window", LIMITS, 8, lease_ttl_ms=500, holder="iso-1"),
        StoreResponse(
            (decision(True, LIMITS[0]), decision(True, LIMITS[1])),
            granted=4,
            expires_at=T0 + 500,
            rationed=True,
            returnable_until=T0 + 1_000,
            grant_wait_ms=20,
        ),
    ),
    (
        DECIDE,
        StoreRequest("check", "fixed_window", LIMITS),
        checked((decision(False, LIMITS[0], 0), decision(True, LIMITS[1])), ([5, 10], None)),
    ),
    (
        CALL,
        IdempotencyCall("complete", token=7, response=StoredResponse(201, (("a", "b"),), b"{}")),
        IdempotencyAnswer(IdempotencyOutcome.COMPLETED),
    ),
    (
        CALL,
        IdempotencyCall("claim", "fp"),
        IdempotencyAnswer(IdempotencyOutcome.IN_FLIGHT, token=3, retry_after_ms=250),
    ),
    (
        SYNC,
        SyncCall(
            BreakerSettings(failure_rate=50, window=4, min_calls=4, open_for_ms=10_000),
            (Report(T0, Outcome.FAILURE),),
            HealthReport(T0, False, 3),
        ),
        BreakerState(trips=2, open_until=T0 + 10_000),
    ),
    (OVERRIDES, OverridesCall("list"), OverridesAnswer((OVERRIDE,))),
    (OVERRIDES, OverridesCall("put", OVERRIDE), OverridesAnswer((OVERRIDE,), ("old",))),
    (OVERRIDES, OverridesCall("delete", id=OVERRIDE.id), OverridesAnswer((), deleted=True)),
    (OVERRIDES, OverridesCall("list"), OverridesAnswer(error="at most 1000 overrides")),
    (STATS, StatsCall.add(BATCH, T0), StatsAnswer()),
    (STATS, StatsCall("get"), StatsAnswer({"routes": {}, "top_limited": []})),
]


@pytest.mark.parametrize(("method", "request_", "answer"), EXCHANGES)
def test_every_methods_codec_round_trips(
    method: Method[Any, Any], request_: Any, answer: Any
) -> None:
    text = method.encode(request_)
    assert type(request_).from_json(text) == request_
    # The object writes its answer with the answer's codec (a breaker's: state_to_json).
    written = state_to_json(answer) if isinstance(answer, BreakerState) else answer.to_json()
    assert method.decode(written, request_) == answer


@pytest.mark.parametrize(
    ("read", "text", "named"),
    [
        (StoreRequest.from_json, "[]", "store request must be a JSON object"),
        (StoreRequest.from_json, '{"op":"check","algorithm":"gcra"}', "missing field 'limits'"),
        (
            StoreRequest.from_json,
            '{"op":"check","algorithm":"gcra","limits":[[1,1000,"a",null]],"cost":-1}',
            "bad cost -1",
        ),
        (
            lambda text: DECIDE.decode(text, StoreRequest("check", "gcra", LIMITS)),
            '{"ds":[]}',
            "0 decisions for 2 limits",
        ),
        (
            lambda text: DECIDE.decode(text, StoreRequest("check", "gcra", LIMITS[:1])),
            '{"st":[]}',
            "missing field 'ds'",
        ),
        (
            lambda text: DECIDE.decode(text, StoreRequest("check", "gcra", LIMITS[:1])),
            '{"ds":[[true,1,0,1,0]],"g":-1,"x":5}',
            "bad lease grant -1",
        ),
        (IdempotencyCall.from_json, '{"op":"claim"}', "needs the request's fingerprint"),
        (IdempotencyCall.from_json, '{"fp":"x"}', "missing field 'op'"),
        (
            IdempotencyAnswer.from_json,
            '{"outcome":"claimed","token":-1}',
            "bad number in answer: -1",
        ),
        (SyncCall.from_json, '{"reports":[]}', "missing field 'settings'"),
        (SyncCall.from_json, "[1]", "breaker sync must be a JSON object"),
        (
            lambda text: SYNC.decode(text, SyncCall(BreakerSettings())),
            '{"x":1}',
            "missing field 'state'",
        ),
        (OverridesCall.from_json, '{"op":"zap"}', "unknown overrides op 'zap'"),
        (OverridesCall.from_json, '{"op":"put","override":{"id":1}}', "put needs a valid override"),
        (OverridesCall.from_json, "[]", "overrides call must be a JSON object"),
        (OverridesAnswer.from_json, '{"replaced":[]}', "missing field 'overrides'"),
        (OverridesAnswer.from_json, '{"deleted":"yes","overrides":[]}', "bad deleted flag"),
        (StatsCall.from_json, '{"op":"add"}', "add needs a batch"),
        (StatsCall.from_json, '{"op":"add","batch":[1]}', "malformed stats batch"),
        (StatsCall.from_json, '{"op":"sum"}', "unknown stats op 'sum'"),
        (StatsAnswer.from_json, "[1]", "stats answer must be a JSON object"),
    ],
)
def test_malformed_text_is_refused_naming_what_is_wrong(read: Any, text: str, named: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        read(text)
    assert named in str(refused.value)


def _reference(answer: StoreResponse) -> dict[str, Any]:
    """The answer as a plain encoder writes it: the model the written text must match."""
    data: dict[str, Any] = {
        "ds": [
            [d.allowed, d.limit, d.remaining, d.reset_after, d.retry_after]
            for d in answer.decisions
        ]
    }
    if answer.at:
        data["at"] = answer.at
    if answer.rows is not None:
        data["st"] = list(answer.rows)
    if answer.expires_at:
        data["g"] = answer.granted
        data["x"] = answer.expires_at
        if answer.rationed:
            data["rn"] = 2 if answer.ask_at else 1
        if answer.ask_at:
            data["na"] = answer.ask_at
        if answer.grant_wait_ms:
            data["gw"] = answer.grant_wait_ms
        if answer.returnable_until:
            data["ru"] = answer.returnable_until
        if answer.allowance is not None:
            data["pl"] = answer.allowance.to_list()
    return data


@st.composite
def answers(draw: st.DrawFn) -> tuple[StoreResponse, tuple[Limit, ...]]:
    limits = LIMITS[: draw(st.integers(1, 2))]
    numbers = st.integers(0, 2**40)
    decisions = tuple(
        decision(draw(st.booleans()), limit, draw(st.integers(0, limit.capacity)))
        for limit in limits
    )
    rows = draw(st.none() | st.tuples(*(st.none() | st.lists(numbers, max_size=4) for _ in limits)))
    at = draw(st.integers(0, 2**45))
    if not draw(st.booleans()):
        return checked(decisions, rows, at), limits
    granted = draw(st.integers(1, 1_000))
    expires_at = draw(st.integers(1, 2**45))
    kind = draw(st.sampled_from(["plain", "rationed", "paced", "planned"]))
    rationed = kind != "plain"
    ask_at = draw(st.integers(1, 2**45)) if kind == "paced" else 0
    allowance = None
    if kind == "planned":
        allowance = Allowance(((0, 0, 5),), expires_at, granted, expires_at)
    answer = StoreResponse(
        decisions,
        rows,
        granted,
        expires_at,
        rationed,
        draw(st.integers(0, 2**45)),
        ask_at,
        allowance,
        draw(st.integers(0, 10_000)) if rationed else 0,
        at,
    )
    return answer, limits


@given(answers())
@settings(max_examples=300, deadline=None)
def test_the_written_answer_is_what_a_plain_encoder_writes_and_reads_back(
    drawn: tuple[StoreResponse, tuple[Limit, ...]],
) -> None:
    answer, limits = drawn
    text = answer.to_json()
    assert json.loads(text) == _reference(answer)
    assert StoreResponse.from_json(text, limits) == answer


def test_a_cell_keeps_one_value_in_a_table_of_its_own() -> None:
    sql = SqliteSql()
    one, named = SqlCell(sql, "record"), SqlCell(sql, "control", "overrides")
    assert one.get() is None and named.get() is None
    one.put("a")
    named.put("b")
    one.put("c")
    assert (one.get(), named.get()) == ("c", "b")
    assert sql.rows("SELECT * FROM record") == [{"id": 1, "value": "c"}]
    one.delete()
    assert one.get() is None and named.get() == "b"
