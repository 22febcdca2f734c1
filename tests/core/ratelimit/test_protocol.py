"""The Worker <-> Durable Object protocol: requests, answers and row ids."""

from __future__ import annotations

import pytest

from edge_limiter.core.errors import ProtocolError
from edge_limiter.core.ratelimit.keystore import KeyStore
from edge_limiter.core.ratelimit.protocol import (
    StoreRequest,
    StoreResponse,
    parse_row_id,
    row_id,
)
from edge_limiter.core.ratelimit.rates import Limit, Rate, parse_rates
from edge_limiter.testing import SqliteSql

RATES = tuple(Limit(rate) for rate in parse_rates("2/second; 3/minute"))


def request(op: str = "check", algorithm: str = "fixed_window", cost: int = 1) -> StoreRequest:
    return StoreRequest(op, algorithm, RATES, cost)


def test_requests_round_trip_with_their_burst_and_write_behind() -> None:
    limits = (Limit(Rate(10, 1000), 20, "burst"), Limit(Rate(1000, 3_600_000)))
    for sent in (
        StoreRequest("check", "token_bucket", limits),
        StoreRequest("refund", "gcra", limits, 3, write_behind_ms=50),
        StoreRequest("check", "gcra", limits, stamp=True),
        StoreRequest("refund", "gcra", limits, at=1_700_000_000_123),
    ):
        assert StoreRequest.from_json(sent.to_json()) == sent
    assert '"wb"' not in StoreRequest("check", "gcra", limits).to_json()
    # A route's refund, for one admission.
    refund = StoreRequest("refund", "gcra", limits)
    assert refund.for_admission(0).to_json() == refund.to_json()
    given_back = refund.for_admission(1_700_000_000_123).to_json()
    assert StoreRequest.from_json(given_back).at == 1_700_000_000_123


def test_a_stamped_check_is_answered_with_the_objects_clock_for_its_refund() -> None:
    store = KeyStore(SqliteSql())
    now = 1_700_000_009_000
    stamped = StoreRequest("check", "fixed_window", RATES[:1], stamp=True).to_json()
    plain = StoreRequest("check", "fixed_window", RATES[:1]).to_json()
    assert StoreResponse.from_json(store.decide(stamped, now), RATES[:1]).at == now
    assert StoreResponse.from_json(store.decide(plain, now), RATES[:1]).at == 0
    # Given back in a later second: that second keeps its count (2 per second).
    refund = StoreRequest("refund", "fixed_window", RATES[:1]).for_admission(now).to_json()
    assert StoreResponse.from_json(store.decide(plain, now + 1_000), RATES[:1]).decision.allowed
    store.decide(refund, now + 1_500)
    assert StoreResponse.from_json(store.decide(plain, now + 1_600), RATES[:1]).decision.allowed
    assert not StoreResponse.from_json(store.decide(plain, now + 1_700), RATES[:1]).decision.allowed


def test_rows_are_keyed_by_algorithm_burst_and_rate_and_parse_back() -> None:
    second = RATES[0]
    assert row_id("gcra", Limit(second.rate, 5)) != row_id("gcra", second)
    assert row_id("gcra", second) != row_id("token_bucket", second)
    for algorithm, limit in (("gcra", Limit(second.rate, 5)), ("sliding_log", RATES[1])):
        parsed = parse_row_id(row_id(algorithm, limit))
        assert parsed is not None
        assert parsed[0] == algorithm
        assert (parsed[1].rate, parsed[1].burst) == (limit.rate, limit.burst)
    for bad in ("", "gcra", "leaky::1/1000", "gcra:x:1/1000", "gcra::1-1000", "gcra::0/1000"):
        assert parse_row_id(bad) is None


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
        '{"op":"check","algorithm":"gcra","limits":[[1,1000,"a",null]],"wb":"50ms"}',
        '{"op":"check","algorithm":"gcra","limits":[[1,1000,"a",null]],"at":5}',
        '{"op":"refund","algorithm":"gcra","limits":[[1,1000,"a",null]],"at":-5}',
    ],
)
def test_malformed_requests(text: str) -> None:
    with pytest.raises(ProtocolError):
        StoreRequest.from_json(text)


def test_malformed_response() -> None:
    with pytest.raises(ProtocolError):
        StoreResponse.from_json('{"ds":[[true,1,1,1,0]]}', RATES)  # one limit short


def test_a_limit_with_its_own_algorithm_travels_and_counts_apart() -> None:
    from edge_limiter.core.ratelimit.keystore import KeyStore
    from edge_limiter.core.ratelimit.protocol import StoreRequest, StoreResponse, algorithm_of
    from edge_limiter.core.ratelimit.rates import Limit, Rate
    from edge_limiter.testing import SqliteSql

    day = Limit(Rate(3, 86_400_000), algorithm="fixed_window")
    burst = Limit(Rate(10, 1_000), burst=20)
    request = StoreRequest("check", "token_bucket", (burst, day))
    again = StoreRequest.from_json(request.to_json())
    assert again.limits == (burst, day)
    # Written once only when it differs from the route's.
    assert '"fixed_window"' in request.to_json()
    plain = StoreRequest("check", "fixed_window", (day,))
    assert '"fixed_window"' not in plain.to_json().split('"limits"')[1]  # the route's
    assert algorithm_of(StoreRequest.from_json(plain.to_json()).limits[0], "fixed_window") == (
        "fixed_window"
    )
    store = KeyStore(SqliteSql())
    day_start = 1_700_006_400_000  # a UTC midnight
    answers = [
        StoreResponse.from_json(
            store.decide(request.to_json(), day_start + 86_400_000 - 3 + i), request.limits
        )
        for i in range(3)
    ]
    assert [a.decision.allowed for a in answers] == [True, True, True]
    denied = StoreResponse.from_json(
        store.decide(request.to_json(), day_start + 86_400_000 - 1), request.limits
    )
    assert not denied.decision.allowed  # the day's 3 are used...
    fresh = StoreResponse.from_json(
        store.decide(request.to_json(), day_start + 86_400_000), request.limits
    )
    assert fresh.decision.allowed  # ...and the next day starts at midnight, bucket or not
    assert sorted(store.states) == sorted(["token_bucket:20:10/1000", "fixed_window::3/86400000"])
