"""The Worker <-> Durable Object protocol: one pure load-decide-store step."""

from __future__ import annotations

import pytest

from edge_limiter.core.errors import ProtocolError
from edge_limiter.core.protocol import (
    StoreRequest,
    StoreResponse,
    apply,
    row_id,
)
from edge_limiter.core.rates import Limit, Rate, parse_rates

RATES = tuple(Limit(rate) for rate in parse_rates("2/second; 3/minute"))


def request(op: str = "check", algorithm: str = "fixed_window", cost: int = 1) -> StoreRequest:
    return StoreRequest(op, algorithm, RATES, cost)


def run(req: StoreRequest, rows: dict[str, list[int]], now: int) -> StoreResponse:
    result = apply(StoreRequest.from_json(req.to_json()), rows, now)
    for rid, (state, _idle) in result.writes.items():
        rows[rid] = state
    for rid in result.deletes:
        rows.pop(rid)
    return StoreResponse.from_json(result.response.to_json(), RATES)


def test_round_trip_and_all_or_nothing() -> None:
    rows: dict[str, list[int]] = {}
    assert [run(request(), rows, 0).decision.allowed for _ in range(3)] == [True, True, False]
    snapshot = dict(rows)
    denied = run(request(), rows, 500)
    assert not denied.decision.allowed and rows == snapshot  # nothing consumed
    assert run(request(), rows, 1_000).decision.allowed  # 3rd of the minute
    final = run(request(), rows, 2_000)
    assert not final.decision.allowed
    assert final.decisions[0].allowed and not final.decisions[1].allowed
    assert final.decision.policy == RATES[1]


def test_rows_are_keyed_by_algorithm_burst_and_rate() -> None:
    second = RATES[0]
    assert row_id("gcra", Limit(second.rate, 5)) != row_id("gcra", second)
    assert row_id("gcra", second) != row_id("token_bucket", second)
    rows: dict[str, list[int]] = {}
    run(request(), rows, 0)
    assert set(rows) == {row_id("fixed_window", r) for r in RATES}


def test_each_limit_carries_its_own_burst_through_the_protocol() -> None:
    limits = (Limit(Rate(10, 1000), 20, "burst"), Limit(Rate(1000, 3_600_000)))
    sent = StoreRequest("check", "token_bucket", limits)
    assert StoreRequest.from_json(sent.to_json()) == sent
    result = apply(sent, {}, 0)
    answer = StoreResponse.from_json(result.response.to_json(), limits)
    assert [(d.limit, d.remaining) for d in answer.decisions] == [(20, 19), (1000, 999)]


def test_a_burst_for_an_algorithm_that_takes_none_is_a_protocol_error() -> None:
    bad = StoreRequest("check", "sliding_log", (Limit(Rate(10, 1000), 20),))
    with pytest.raises(ProtocolError, match="takes no burst"):
        apply(StoreRequest.from_json(bad.to_json()), {}, 0)


@pytest.mark.parametrize(
    "algorithm", ["token_bucket", "gcra", "sliding_log", "sliding_window", "fixed_window"]
)
def test_peek_predicts_the_next_check_and_writes_nothing(algorithm: str) -> None:
    rows: dict[str, list[int]] = {}
    for now in (0, 0, 10, 500):
        before = dict(rows)
        peeked = apply(request("peek", algorithm), rows, now)
        assert not peeked.writes and not peeked.deletes and rows == before
        checked = run(request("check", algorithm), rows, now)
        assert peeked.response.decisions == checked.decisions


@pytest.mark.parametrize(
    "algorithm", ["token_bucket", "gcra", "sliding_log", "sliding_window", "fixed_window"]
)
def test_reset_deletes_the_rows_and_the_key_admits_its_whole_capacity(algorithm: str) -> None:
    rows: dict[str, list[int]] = {}
    while run(request("check", algorithm), rows, 100).decision.allowed:
        pass
    assert rows
    run(request("reset", algorithm), rows, 100)
    assert rows == {}
    assert run(request("check", algorithm, cost=2), rows, 100).decision.allowed


def test_peek_writes_nothing_refund_and_reset_give_back() -> None:
    rows: dict[str, list[int]] = {}
    run(request(), rows, 0)
    run(request(), rows, 0)
    before = dict(rows)
    peeked = run(request("peek"), rows, 0)
    assert not peeked.decision.allowed and rows == before
    refunded = run(request("refund"), rows, 0)
    assert refunded.decision.allowed
    assert run(request(), rows, 0).decision.allowed
    run(request("reset"), rows, 0)
    assert rows == {}


def test_undecodable_rows_are_treated_as_fresh() -> None:
    rows: dict[str, list[int]] = {row_id("fixed_window", r): [1, 2, 3, 4, 5] for r in RATES}
    assert run(request(), rows, 0).decision.allowed


def test_writes_carry_idle_at() -> None:
    result = apply(request(), {}, 10_000)
    idles = {rid: idle for rid, (_state, idle) in result.writes.items()}
    assert idles[row_id("fixed_window", RATES[0])] == 11_000
    assert idles[row_id("fixed_window", RATES[1])] == 60_000


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{}",
        '{"op":"steal","algorithm":"gcra","limits":[[1,1000,"a",null]]}',
        '{"op":"check","algorithm":"gcra","limits":[]}',
        '{"op":"check","algorithm":"gcra","limits":[[0,1000,"a",null]]}',
        '{"op":"check","algorithm":"gcra","limits":[[1,1000,"a",null]],"cost":-1}',
        '{"op":"check","algorithm":"gcra","limits":[[1,1000,"a",null]],"cost":true}',
        '{"op":"check","algorithm":"leaky","limits":[[1,1000,"a",null]]}',
        '{"op":"check","algorithm":"gcra","limits":[[1,1000,"a",0]]}',
        '{"op":"check","algorithm":"gcra","limits":[[1,1000,"a",true]]}',
        '{"op":"check","algorithm":"gcra","limits":[[1,1000,"a"]]}',
    ],
)
def test_malformed_requests(text: str) -> None:
    with pytest.raises(ProtocolError):
        StoreRequest.from_json(text)


def test_malformed_response() -> None:
    with pytest.raises(ProtocolError):
        StoreResponse.from_json('{"ds":[[true,1,1,1,0]]}', RATES)  # one limit short
