"""Token leases: each algorithm's grant rules, the protocol fields, the object's lease op
and, as a property, no over-admission by any mix of isolates, delays and ttls."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.errors import ProtocolError
from edge_limiter.core.ratelimit.algorithms import Leasable, make_algorithm
from edge_limiter.core.ratelimit.decision import Decision, Reason
from edge_limiter.core.ratelimit.keystore import KeyStore
from edge_limiter.core.ratelimit.leases.grant import RATE_MEMORY_TTLS, grant_size, pace_ms
from edge_limiter.core.ratelimit.leases.holding import Holding, RateMeter, want
from edge_limiter.core.ratelimit.leases.lease import Lease
from edge_limiter.core.ratelimit.leases.plan import Allowance
from edge_limiter.core.ratelimit.leases.policy import lease_reserve_ok
from edge_limiter.core.ratelimit.protocol import StoreRequest, StoreResponse
from edge_limiter.core.ratelimit.rates import Limit, Rate
from edge_limiter.testing import SqliteSql
from tests.examples import examples

T0 = 1_700_000_000_000  # a multiple of every window used here
LEASABLE = ("token_bucket", "gcra", "fixed_window", "sliding_window")
SECOND = Limit(Rate(10, 1_000))


def lease(
    algorithm: str = "fixed_window",
    wanted: int = 5,
    *,
    holder: str = "a",
    returned: int = 0,
    until: int = 0,
    ttl: int = 100,
    min_units: int = 1,
    limits: tuple[Limit, ...] = (SECOND,),
    observed_rate: int = 0,
) -> StoreRequest:
    return StoreRequest(
        "lease",
        algorithm,
        limits,
        wanted,
        lease_ttl_ms=ttl,
        holder=holder,
        returned=returned,
        returned_until=until,
        min_units=min_units,
        observed_rate=observed_rate,
    )


def ask(store: KeyStore, req: StoreRequest, now: int) -> StoreResponse:
    return StoreResponse.from_json(store.decide(req.to_json(), now), req.limits)


# --- each algorithm -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["token_bucket", "gcra"])
def test_buckets_keep_a_ttl_of_refill_in_reserve(name: str) -> None:
    algorithm = make_algorithm(name, SECOND)  # 10 per second: 1 unit per 100 ms
    assert algorithm.lease_reserve(250) == 3
    assert algorithm.grantable(None, T0, 250) == 7  # 10 - 2.5, rounded down
    assert algorithm.lease_expiry(T0 + 7, 250) == T0 + 257
    _, state = algorithm.check(None, T0, 7)
    assert algorithm.grantable(state, T0, 250) == 0
    assert algorithm.grantable(state, T0 + 100, 250) == 1
    # Refunds: only what the refill since the grant has not overtaken.
    assert algorithm.lease_refundable(7, 5, T0, T0) == 5
    assert algorithm.lease_refundable(7, 5, T0, T0 + 250) == 4  # 7 - ceil(2.5)
    assert algorithm.lease_refundable(7, 5, T0, T0 + 700) == 0


def test_a_bucket_whose_clock_went_back_grants_nothing() -> None:
    algorithm = make_algorithm("token_bucket", SECOND)
    _, state = algorithm.check(None, T0, 1)
    assert algorithm.grantable(state, T0 - 1, 10) == 0


@pytest.mark.parametrize("name", ["fixed_window", "sliding_window"])
def test_window_leases_end_with_their_window_and_take_what_is_left(name: str) -> None:
    algorithm = make_algorithm(name, SECOND)
    assert algorithm.lease_reserve(500) == 0
    assert algorithm.lease_expiry(T0 + 100, 300) == T0 + 400
    assert algorithm.lease_expiry(T0 + 900, 300) == T0 + 1_000
    _, state = algorithm.check(None, T0 + 100, 6)
    assert algorithm.grantable(state, T0 + 200, 300) == 4
    assert algorithm.lease_refundable(6, 4, T0 + 100, T0 + 900) == 4
    assert algorithm.grantable(state, T0 + 50 - 1_000, 300) == 0  # the clock went back


def test_the_sliding_window_grants_as_the_previous_window_fades() -> None:
    algorithm = make_algorithm("sliding_window", SECOND)
    _, state = algorithm.check(None, T0, 10)
    assert algorithm.grantable(state, T0 + 1_000, 100) == 0
    assert algorithm.grantable(state, T0 + 1_500, 100) == 5


def test_the_sliding_log_does_not_lease() -> None:
    algorithm = make_algorithm("sliding_log", SECOND)
    assert not isinstance(algorithm, Leasable)
    assert not hasattr(algorithm, "grantable")  # no lease protocol: nothing to grant
    assert lease_reserve_ok(SECOND, "sliding_log", 10) is not None


def test_the_config_can_ask_whether_a_ttl_leaves_anything_to_lease() -> None:
    assert lease_reserve_ok(SECOND, "token_bucket", 900) is None
    error = lease_reserve_ok(SECOND, "token_bucket", 901)
    assert error is not None and "at most 900 ms" in error
    assert lease_reserve_ok(Limit(Rate(10, 1_000), 20), "gcra", 1_500) is None
    assert lease_reserve_ok(SECOND, "fixed_window", 60_000) is None
    assert lease_reserve_ok(SECOND, "fixed_window", 0) is not None
    assert lease_reserve_ok(SECOND, "leaky", 10) is not None
    # A burst the algorithm does not take is the limit's own problem (said where it is
    # written), not the leases'.
    assert lease_reserve_ok(Limit(Rate(10, 1_000), 5), "fixed_window", 10) is None
    one = lease_reserve_ok(Limit(Rate(1, 3_600_000)), "token_bucket", 1)
    assert one is not None and "a burst of at least 2" in one and "ttl of at most" not in one


# --- the planner ----------------------------------------------------------------------


def test_the_meter_measures_the_rate_over_its_period() -> None:
    meter = RateMeter(1_000)
    for at in range(0, 1_000, 10):
        meter.observe(T0 + at)
    assert meter.per_ms(T0 + 1_000) == pytest.approx(0.1)
    assert meter.per_ms(T0 + 1_500) == pytest.approx(0.05)
    assert meter.per_ms(T0 + 3_000) == 0
    assert want(0.1, 250) == 25
    assert want(0.0, 250, min_units=2) == 2
    assert want(5.0, 250, max_units=100) == 100


def test_grants_shrink_to_one_unit_as_the_limit_runs_low() -> None:
    assert grant_size(10, 1_000, 50) == 10
    assert grant_size(10, 15, 1) == 10
    assert grant_size(10, 15, 3) == 7
    assert [grant_size(10, left, 3) for left in (3, 2, 1)] == [1, 1, 1]
    assert grant_size(10, 0, 3) == 0
    assert grant_size(10, 2, 3, min_units=3) == 0
    assert grant_size(10, 4, 3, min_units=3) == 3


def test_an_isolate_lease_ends_by_its_own_clock_and_gives_back_the_rest() -> None:
    assert Lease.from_answer(StoreResponse(()), T0, 100) is None
    held = Lease(5, T0 + 100, reported=3)
    assert held.take(2, T0) and not held.take(4, T0)
    assert held.remaining(T0) == 6
    assert not held.should_refresh(T0, 0.1, 10)
    assert held.should_refresh(T0, 1.0, 10)  # 3 left: less than 10 ms of use
    assert held.should_refresh(T0 + 90, 0.0, 10)  # ends within the lead
    assert held.release(T0 + 10, keep=1) == 2
    assert held.unused(T0 + 10) == 1 and held.unused(T0 + 100) == 0
    assert not held.take(1, T0 + 100)
    assert held.release(T0 + 100) == 1  # ended: every unit left goes back, none is usable
    assert held.release(T0 + 100) == 0


def test_a_lease_from_an_answer_ends_at_send_time_plus_ttl_or_the_objects_end() -> None:
    decisions = (make_algorithm("fixed_window", SECOND).check(None, T0, 5)[0],)
    granted = StoreResponse(decisions, granted=5, expires_at=T0 + 1_000)
    held = Lease.from_answer(granted, T0 - 3, 100)
    assert held is not None and held.expires_at == T0 + 97 and held.reported == 5
    assert not held.rationed and not held.cut and held.next_ask_at(10) == 0
    assert held.should_refresh(T0 + 90, 0.0, 10)  # ends within the lead
    rationed = StoreResponse(decisions, granted=5, expires_at=T0 + 1_000, rationed=True)
    held = Lease.from_answer(rationed, T0 - 3, 100)
    assert held is not None and held.rationed and held.next_ask_at(10) == T0 + 87
    assert not held.should_refresh(T0 + 90, 1.0, 10)  # its share until the end
    cut = Lease.from_answer(StoreResponse(decisions, granted=5, expires_at=T0 + 50), T0, 100)
    assert cut is not None and cut.expires_at == T0 + 50 and cut.cut and not cut.rationed
    assert not cut.should_refresh(T0 + 45, 0.01, 10)  # a new lease would end at T0 + 50 too
    assert cut.should_refresh(T0 + 45, 1.0, 10)  # but it runs low
    cut_short = StoreResponse(decisions, granted=5, expires_at=T0 + 50, rationed=True)
    held = Lease.from_answer(cut_short, T0, 100)
    assert held is not None and held.next_ask_at(10) == T0 + 50  # after its window


def test_grants_are_each_holders_share_of_the_demand_when_the_limit_is_short() -> None:
    assert grant_size(10, 1_000, 50, others_demand=90) == 10
    assert grant_size(10, 50, 50, others_demand=90) == 5  # half the demand fits: half
    assert grant_size(30, 50, 50, others_demand=70) == 15
    assert grant_size(10, 1, 50, others_demand=90) == 1  # never below the minimum
    assert grant_size(10, 2, 50, min_units=3, others_demand=0) == 0
    assert grant_size(10, 8, 1, others_demand=0) == 8  # alone: all that is left


# --- the protocol ---------------------------------------------------------------------


def test_lease_requests_and_answers_round_trip() -> None:
    sent = lease(returned=3, min_units=2, ttl=250, observed_rate=1_200)
    text = sent.to_json()
    assert StoreRequest.from_json(text) == sent
    assert all(f'"{key}"' in text for key in ("lt", "h", "rt", "mn", "or"))
    assert '"or"' not in lease().to_json()
    check = StoreRequest("check", "gcra", (SECOND,))
    assert check.to_json() == (
        '{"op":"check","algorithm":"gcra","cost":1,"limits":[[10,1000,"10-per-second",null]]}'
    )
    decisions = (make_algorithm("gcra", SECOND).check(None, T0, 4)[0],)
    answer = StoreResponse(decisions, granted=4, expires_at=T0 + 250)
    assert json.loads(answer.to_json())["g"] == 4
    assert StoreResponse.from_json(answer.to_json(), (SECOND,)) == answer
    assert '"g"' not in StoreResponse(decisions).to_json()
    rationed = StoreResponse(decisions, granted=4, expires_at=T0 + 250, rationed=True)
    assert json.loads(rationed.to_json())["rn"] == 1 and '"rn"' not in answer.to_json()
    assert StoreResponse.from_json(rationed.to_json(), (SECOND,)) == rationed
    allowance = Allowance(((T0 + 2, 0, 3_000),), T0 + 990, 2, T0 + 1_000)
    plan = StoreResponse(
        decisions, granted=2, expires_at=T0 + 1_000, rationed=True, allowance=allowance
    )
    assert StoreResponse.from_json(plan.to_json(), (SECOND,)) == plan


BASE = '{"op":"lease","algorithm":"gcra","limits":[[1,1000,"a",null]],"cost":2'


@pytest.mark.parametrize(
    "tail",
    [
        ',"h":"a"}',  # no ttl
        ',"lt":0,"h":"a"}',
        ',"lt":true,"h":"a"}',
        ',"lt":10}',  # no holder
        ',"lt":10,"h":""}',
        ',"lt":10,"h":7}',
        f',"lt":10,"h":"{"x" * 65}"}}',
        ',"lt":10,"h":"a","rt":-1}',
        ',"lt":10,"h":"a","rt":1.5}',
        ',"lt":10,"h":"a","mn":0}',
        ',"lt":10,"h":"a","mn":3}',  # wants 2, below its minimum
        ',"lt":10,"h":"a","or":-1}',
        ',"lt":10,"h":"a","or":2.5}',
        ',"lt":10,"h":"a","or":false}',
    ],
)
def test_malformed_lease_requests(tail: str) -> None:
    with pytest.raises(ProtocolError):
        StoreRequest.from_json(BASE + tail)


def test_malformed_lease_answers() -> None:
    for text in (
        '{"ds":[[true,1,0,1,0]],"g":1}',
        '{"ds":[[true,1,0,1,0]],"g":-1,"x":5}',
        '{"ds":[[true,1,0,1,0]],"rn":1}',  # rationed without a grant
        '{"ds":[[true,1,0,1,0]],"g":1,"x":5,"rn":3}',
        '{"ds":[[true,1,0,1,0]],"g":1,"x":5,"rn":2}',  # paced without its next ask time
        '{"ds":[[true,1,0,1,0]],"g":1,"x":5,"rn":1,"na":4}',  # a next ask time, not paced
        '{"ds":[[true,1,0,1,0]],"g":1,"x":5,"rn":true}',
        # A plan's allowance: not rationed, another total or end than the grant's, or bad.
        '{"ds":[[true,1,0,1,0]],"g":2,"x":9,"pl":[8,2,9,[[1,0,1]]]}',
        '{"ds":[[true,1,0,1,0]],"g":3,"x":9,"rn":1,"pl":[8,2,9,[[1,0,1]]]}',
        '{"ds":[[true,1,0,1,0]],"g":2,"x":10,"rn":1,"pl":[8,2,9,[[1,0,1]]]}',
        '{"ds":[[true,1,0,1,0]],"g":2,"x":9,"rn":1,"pl":[8,2,9,[]]}',
        '{"ds":[[true,1,0,1,0]],"g":2,"x":9,"rn":1,"pl":"x"}',
    ):
        with pytest.raises(ProtocolError):
            StoreResponse.from_json(text, (Limit(Rate(1, 1_000)),))


# --- the object's lease op ------------------------------------------------------------


def test_pace_gives_a_holder_its_units_of_the_growth() -> None:
    assert pace_ms(5.0, 0.01, units=10) == 200  # 5 units/ms, a 1% share: 0.05 units/ms
    assert pace_ms(0.5, 1.0, units=10) == 20
    assert pace_ms(100.0, 1.0, units=10) == 1  # never below 1 ms
    assert pace_ms(0.0, 0.5) == 3_600_000  # nothing grows: the lease's end comes first


def test_a_rationed_sliding_window_holder_is_paced_not_sent_to_the_window_end() -> None:
    store = KeyStore(SqliteSql())
    limit = (Limit(Rate(100, 1_000)),)
    sliding = "sliding_window"
    # A full previous window: at T0 + 100 the estimate is 90 used, 10 left, and 0.1 unit
    # per ms slides out.
    for at in range(0, 1_000, 10):
        ask(store, lease(sliding, 1, holder="old", limits=limit), T0 - 1_000 + at)
    # Reported rates of 20 and 68 units/s: less than the window's room (so not planned,
    # see lease_plan), more than it has for a's 50 units now and b's rest of the window.
    for holder, rate in (("a", 20), ("b", 68)):
        ask(store, lease(sliding, 1, holder=holder, limits=limit, observed_rate=rate), T0 + 99)
    a = ask(
        store,
        lease(sliding, 50, holder="a", limits=limit, ttl=1_000, observed_rate=20),
        T0 + 100,
    )
    assert a.rationed and 0 < a.granted < 50 and a.allowance is None
    # Its share (20 of the 88 units/s reported) of 0.1 units/ms brings PACE_UNITS units
    # in PACE_UNITS / 0.023 ms: it asks again then, long before the window's end.
    assert a.ask_at == T0 + 100 + pace_ms(0.1, 20 / 88)
    held = Lease.from_answer(a, T0 + 100, 1_000)
    assert held is not None and held.next_ask_at(10) == a.ask_at < T0 + 1_000
    # A fixed window's rationed holder waits for the window's end: nothing slides out.
    fixed = KeyStore(SqliteSql())
    for holder in ("a", "b"):
        ask(fixed, lease(wanted=1, holder=holder, limits=limit, observed_rate=100), T0 + 99)
    f = ask(
        fixed, lease(wanted=99, holder="a", limits=limit, ttl=1_000, observed_rate=100), T0 + 100
    )
    assert f.rationed and not f.ask_at


def test_the_object_sizes_grants_by_the_holders_reported_rates() -> None:
    store = KeyStore(SqliteSql())
    limit = (Limit(Rate(100, 1_000)),)
    # Three holders say their rates (units per second), each with a lease of 100 ms.
    for holder, rate in (("a", 100), ("b", 50), ("c", 50)):
        ask(store, lease(wanted=1, holder=holder, limits=limit, observed_rate=rate), T0)
    a = ask(store, lease(wanted=20, holder="a", limits=limit, observed_rate=100, ttl=1_000), T0)
    # 97 left until the window ends; a wants 20, the others will ask for 50 each over the
    # 900 ms their leases do not cover: a gets its share, 97 * 20 / 110, rationed.
    assert (a.granted, a.rationed) == (97 * 20 // 110, True)
    plenty = ask(store, lease(wanted=5, holder="b", limits=limit, observed_rate=50), T0 + 1)
    assert (plenty.granted, plenty.rationed) == (5, False)
    # A holder that stops asking stops counting after RATE_MEMORY_TTLS ttls.
    later = T0 + 1_000 + RATE_MEMORY_TTLS * 100 + 1
    alone = ask(store, lease(wanted=5, holder="d", limits=limit, observed_rate=10), later)
    assert (alone.granted, alone.rationed) == (5, False)


def test_the_object_grants_then_shrinks_then_denies_with_its_states() -> None:
    store = KeyStore(SqliteSql())
    first = ask(store, lease(wanted=4, holder="a"), T0)
    assert (first.granted, first.expires_at, first.decision.remaining) == (4, T0 + 100, 6)
    second = ask(store, lease(wanted=4, holder="b"), T0 + 1)
    assert second.granted == 3  # 6 left for 2 holders: half of it
    shrinking = [ask(store, lease(wanted=4, holder=h), T0 + 2).granted for h in "cdef"]
    assert shrinking == [1, 1, 1, 0]
    denied = ask(store, lease(wanted=4, holder="g"), T0 + 3)
    assert not denied.decision.allowed and denied.granted == 0
    assert denied.decision.retry_after == 97 and denied.rows == ([T0 // 1_000, 10],)


def test_sliding_log_leases_and_bad_lease_payloads_are_refused() -> None:
    store = KeyStore(SqliteSql())
    with pytest.raises(ProtocolError, match="cannot lease"):
        store.decide(lease("sliding_log").to_json(), T0)
    with pytest.raises(ProtocolError):
        store.decide(BASE + "}", T0)


def test_window_returns_are_capped_by_the_holders_record_and_its_window() -> None:
    store = KeyStore(SqliteSql())
    first = ask(store, lease(wanted=4, holder="a"), T0)
    assert first.granted == 4 and first.returnable_until == T0 + 1_000
    until = first.returnable_until
    # "a" gives back 10 of its 4: only 4 come back; then it takes 5 (6 were left + 4).
    again = ask(store, lease(wanted=5, holder="a", returned=10, until=until), T0 + 10)
    assert (again.granted, again.decision.remaining) == (5, 5)
    # "b" never held a lease: its return is ignored.
    other = ask(store, lease(wanted=1, holder="b", returned=3, until=until), T0 + 20)
    assert other.decision.remaining == 4
    # "a"'s lease ended at T0 + 110 with units unused: they come back while the window
    # that counted them lasts...
    late = ask(store, lease(wanted=1, holder="a", returned=2, until=until), T0 + 200)
    assert late.decision.remaining == 4 + 2 - 1
    # ...named by their record (another record's are ignored)...
    wrong = ask(store, lease(wanted=1, holder="a", returned=2, until=until + 1), T0 + 300)
    assert wrong.decision.remaining == 4
    # ...and never into the next window.
    later = ask(store, lease(wanted=1, holder="a", returned=3, until=until), T0 + 1_000)
    assert later.decision.remaining == 10 - 1


def test_bucket_returns_are_capped_by_the_refill_since_the_grant() -> None:
    store = KeyStore(SqliteSql())
    first = ask(store, lease("token_bucket", wanted=5, ttl=300), T0)
    # 5 left in the bucket, 3 of them the reserve (300 ms of refill) lent to no one.
    assert (first.granted, first.decision.remaining) == (5, 5 - 3)
    # 250 ms later 2.5 units have refilled: of 5 unused, 5 - 3 = 2 may come back.
    again = ask(store, lease("token_bucket", wanted=1, ttl=300, returned=5), T0 + 250)
    assert again.decision.remaining == 5 + 2 + 2 - 1 - 3


def test_a_restarted_object_keeps_the_units_it_granted_and_ignores_returns() -> None:
    sql = SqliteSql()
    assert ask(KeyStore(sql), lease(wanted=4), T0).granted == 4
    restarted = KeyStore(sql)
    answer = ask(restarted, lease(wanted=2, returned=4), T0 + 10)
    assert (answer.granted, answer.decision.remaining) == (2, 4)


def test_write_behind_applies_to_grants() -> None:
    sql = SqliteSql()
    store = KeyStore(sql)
    req = StoreRequest("lease", "fixed_window", (SECOND,), 3, 50, lease_ttl_ms=100, holder="a")
    assert ask(store, req, T0).granted == 3
    assert sql.rows("SELECT * FROM limits") == []
    store.flush(T0 + 50)
    assert len(sql.rows("SELECT * FROM limits")) == 1


def test_a_grant_counts_in_every_limit_of_the_rule() -> None:
    limits = (SECOND, Limit(Rate(12, 60_000)))
    store = KeyStore(SqliteSql())
    answer = ask(store, lease(wanted=20, limits=limits, ttl=5_000), T0)
    # The second's window ends the lease after 1 s of its 5: 20 wanted is worth 4 then.
    assert answer.granted == 4 and answer.expires_at == T0 + 1_000
    assert [d.remaining for d in answer.decisions] == [6, 8]
    denied = ask(store, lease(wanted=20, holder="b", limits=limits, ttl=5_000, min_units=7), T0)
    assert not denied.decision.allowed
    assert [d.allowed for d in denied.decisions] == [False, True]


# --- the property: no over-admission --------------------------------------------------


def strict_excess(algorithm: str, limit: Limit, uses: list[int]) -> int:
    """An independent checker: units of ``uses`` (sorted unit-use times) over the limit."""
    window, quota = limit.rate.window_ms, limit.rate.quota
    if algorithm in ("token_bucket", "gcra"):
        # Every interval [a, b] may hold at most burst + quota * (b - a) / window uses.
        worst = 0
        for i, start in enumerate(uses):
            for j in range(i, len(uses)):
                allowed = limit.capacity * window + quota * (uses[j] - start)
                worst = max(worst, (j - i + 1) * window - allowed)
        return -(-worst // window)
    counts: dict[int, int] = {}
    for at in uses:
        counts[at // window] = counts.get(at // window, 0) + 1
    if algorithm == "fixed_window":
        return sum(max(0, count - quota) for count in counts.values())
    seen: dict[int, int] = {}
    failed = 0
    for at in uses:
        index = at // window
        seen[index] = seen.get(index, 0) + 1
        weight = counts.get(index - 1, 0) * (window - at % window) // window
        failed += weight + seen[index] > quota
    return failed


def leasable_ttls(limit: Limit) -> st.SearchStrategy[int]:
    """Lease ttls up to two windows whose bucket reserve leaves a unit to lease."""
    window, quota = limit.rate.window_ms, limit.rate.quota
    return st.integers(1, min(max(1, (limit.capacity - 1) * window // quota), 2 * window))


@st.composite
def lease_runs(draw: st.DrawFn) -> tuple[str, Limit, int, list[tuple[int, ...]]]:
    algorithm = draw(st.sampled_from(LEASABLE))
    window = draw(st.sampled_from([50, 100, 1_000]))
    quota = draw(st.integers(1, 12))
    burst = None
    if algorithm in ("token_bucket", "gcra"):
        burst = draw(st.one_of(st.none(), st.integers(2, 20)))
    limit = Limit(Rate(quota, window), burst)
    ttl = draw(leasable_ttls(limit))
    assert lease_reserve_ok(limit, algorithm, ttl) is None or limit.capacity == 1
    steps = draw(
        st.lists(
            st.tuples(
                st.integers(0, window),  # gap before the isolate sends
                st.integers(0, 3),  # which isolate
                st.integers(0, 5),  # delay to the object
                st.integers(0, 5),  # delay back
                st.integers(1, 8),  # units wanted
                st.integers(0, 1_000),  # how much of the old lease to use (per mille)
                st.integers(0, 1_000),  # of the rest, how much to give back
                st.integers(0, 999),  # where in the lease's life the uses fall
            ),
            min_size=1,
            max_size=25,
        )
    )
    return algorithm, limit, ttl, steps


@settings(max_examples=examples(300), deadline=None)
@given(lease_runs())
def test_leases_never_admit_more_than_the_limit(
    run: tuple[str, Limit, int, list[tuple[int, ...]]],
) -> None:
    algorithm, limit, ttl, steps = run
    store = KeyStore(SqliteSql())
    held: dict[int, tuple[Lease, int]] = {}  # isolate -> (lease, when it arrived)
    uses: list[int] = []
    sent = decided = T0 + 7
    for gap, isolate, there, back, wanted, used_pm, give_pm, spot in steps:
        sent += gap
        returned = 0
        if isolate in held:
            old, arrived = held[isolate]
            # Use part of the old lease, at instants spread over its life until now...
            usable = old.unused(max(arrived, min(sent, old.expires_at - 1)))
            for k in range(usable * used_pm // 1_000):
                end = min(sent, old.expires_at)
                at = arrived + (end - arrived) * ((spot + 97 * k) % 1_000) // 1_000
                if arrived <= at < end and old.take(1, at):
                    uses.append(at)
            # ...give part of the rest back, and use the kept units while the next is asked.
            returned = old.release(sent, old.unused(sent) * (1_000 - give_pm) // 1_000)
            for k in range(old.unused(sent)):
                at = sent + (old.expires_at - sent) * ((spot + 31 * k) % 1_000) // 1_000
                # (never before the lease arrived: a send at 0 ms gap may precede it)
                if arrived <= at < old.expires_at and old.take(1, at):
                    uses.append(at)
        decided = max(decided, sent + there)
        req = lease(
            algorithm,
            wanted,
            holder=f"i{isolate}",
            returned=returned,
            ttl=ttl,
            limits=(limit,),
            observed_rate=spot % 7,  # 0: not reported (the old sizing)
        )
        answer = ask(store, req, decided)
        got = Lease.from_answer(answer, sent, ttl)
        held.pop(isolate, None)
        if got is not None:
            uses.append(decided)  # the request waiting on it, admitted as of the grant
            got.units -= 1
            held[isolate] = (got, decided + back)
    for old, arrived in held.values():
        for _ in range(old.unused(arrived)):
            if old.take(1, arrived):
                uses.append(arrived)
    assert strict_excess(algorithm, limit, sorted(uses)) == 0


@st.composite
def bucket_runs(draw: st.DrawFn) -> tuple[str, Limit, int, list[tuple[int, ...]]]:
    algorithm = draw(st.sampled_from(["token_bucket", "gcra"]))
    window = draw(st.sampled_from([100, 1_000]))
    limit = Limit(Rate(draw(st.integers(1, 20)), window), draw(st.integers(2, 40)))
    ttl = draw(leasable_ttls(limit))
    steps = draw(
        st.lists(
            st.tuples(
                st.integers(0, ttl),  # gap before the isolate sends
                st.integers(0, 2),  # which isolate
                st.integers(0, 3),  # delay to the object
                st.integers(0, 3),  # delay back
                st.integers(1, 2 * limit.capacity),  # units wanted
                st.integers(1, 2 * limit.capacity),  # of which the requests waiting on it
                st.booleans(),  # give the old lease's units back (else use them at its end)
                st.booleans(),  # report a rate
            ),
            min_size=1,
            max_size=30,
        )
    )
    return algorithm, limit, ttl, steps


@settings(max_examples=examples(300), deadline=None)
@given(bucket_runs())
def test_bucket_leases_used_at_their_last_instant_never_admit_more_than_the_limit(
    run: tuple[str, Limit, int, list[tuple[int, ...]]],
) -> None:
    """The adversary of a bucket's leases: units held are used at the last instant their
    lease allows (meeting the refill counted since), or given back to lift the level. (A
    bucket that kept no reserve fails this within a few hundred examples.)"""
    algorithm, limit, ttl, steps = run
    store = KeyStore(SqliteSql())
    held: dict[int, tuple[Lease, int]] = {}
    uses: list[int] = []

    def use_at_its_end(lease: Lease, arrived: int) -> None:
        last = lease.expires_at - 1
        uses.extend([last] * (lease.unused(last) if last >= arrived else 0))

    sent = decided = T0 + 7
    for gap, isolate, there, back, wanted, least, give, rate in steps:
        sent += gap
        returned = 0
        if isolate in held:
            old, arrived = held.pop(isolate)
            if give:
                returned = old.release(sent)
            else:
                use_at_its_end(old, arrived)
        decided = max(decided, sent + there)
        req = lease(
            algorithm,
            wanted,
            holder=f"i{isolate}",
            returned=returned,
            ttl=ttl,
            limits=(limit,),
            min_units=min(least, wanted),
            observed_rate=10 if rate else 0,
        )
        answer = ask(store, req, decided)
        got = Lease.from_answer(answer, sent, ttl)
        if got is not None:
            uses += [decided] * min(least, wanted)  # the requests waiting, as of the grant
            got.units -= min(least, wanted)
            held[isolate] = (got, decided + back)
    for old, arrived in held.values():
        use_at_its_end(old, arrived)
    assert strict_excess(algorithm, limit, sorted(uses)) == 0


def test_the_strict_checker_catches_over_admission() -> None:
    limit = Limit(Rate(2, 100))
    assert strict_excess("token_bucket", limit, [0, 0, 0]) == 1
    assert strict_excess("token_bucket", limit, [0, 0, 50, 99]) == 1
    assert strict_excess("token_bucket", limit, [0, 0, 50, 100]) == 0
    assert strict_excess("fixed_window", limit, [0, 50, 99, 100]) == 1
    assert strict_excess("sliding_window", limit, [90, 95, 100]) == 1
    assert strict_excess("sliding_window", limit, [90, 95, 150]) == 0


# --- the isolate side: Holding, with calls that overlap, arrive out of order or fail ------


@st.composite
def holding_runs(draw: st.DrawFn) -> tuple[str, Limit, int, list[tuple[int, ...]]]:
    algorithm, limit, ttl, _ = draw(lease_runs())
    steps = draw(
        st.lists(
            st.tuples(
                st.integers(0, 40),  # ms since the previous step
                st.integers(0, 2),  # which isolate
                st.sampled_from("sdaufff"),  # send, decide, answer, use, fail (a timeout)
                st.integers(0, 50),  # which call; or how many units
            ),
            min_size=1,
            max_size=60,
        )
    )
    return algorithm, limit, ttl, steps


def drive_holdings(
    algorithm: str,
    limit: Limit,
    ttl: int,
    steps: list[tuple[int, ...]],
    *,
    isolates: int = 3,
    greedy: bool = False,
) -> tuple[list[int], int]:
    """Each isolate drives a real :class:`Holding` as the gateway does; the unit-use times
    and how many answers were a window plan's allowance. ``greedy``: after every step,
    every isolate uses all it may (a demand far above the limit)."""
    store = KeyStore(SqliteSql())
    made = make_algorithm(algorithm, limit)  # as the gateway does
    merge, grows = made.lease_records_merge, made.lease_supply_grows

    def new_holding() -> Holding:
        return Holding(
            ttl, limit.capacity, lead_ms=5, period_ms=100, merge=merge, young_rates=grows
        )

    holdings = [new_holding() for _ in range(isolates)]
    outgoing: list[tuple[int, Any, str, bool]] = []  # (isolate, ask, payload, abandoned)
    answering: list[tuple[int, Any, StoreResponse, int]] = []  # (isolate, ask, answer, at)
    uses: list[int] = []
    planned = 0
    now = T0 + 3
    for gap, isolate, action, n in steps:
        now += gap
        holding = holdings[isolate % isolates]
        if action == "s":
            holding.meter.observe(now, n % 3 + 1)
            sent = holding.request(now, n % 2 + 1)
            payload = lease(
                algorithm,
                sent.wanted,
                holder=f"i{isolate % isolates}",
                returned=sent.returned,
                until=sent.returned_until,
                ttl=ttl,
                min_units=sent.min_units,
                limits=(limit,),
                observed_rate=sent.observed_rate,
            )
            outgoing.append((isolate % isolates, sent, payload.to_json(), False))
        elif action == "d" and outgoing:
            who, sent, payload, abandoned = outgoing.pop(n % len(outgoing))
            answer = StoreResponse.from_json(store.decide(payload, now), (limit,))
            if answer.granted and answer.allowance is None:
                uses.extend([now] * sent.min_units)  # the waiting requests, as of the grant
            if not abandoned:
                answering.append((who, sent, answer, now))
        elif action == "a" and answering:
            who, sent, answer, _ = answering.pop(n % len(answering))
            taken = holdings[who].answered(answer, sent, now, reserved=sent.min_units)
            if answer.allowance is not None:
                planned += 1
                if taken is not None:  # an allowance is taken as it arrives, if it has them
                    uses.extend([now] * sent.min_units)
        elif action == "u":
            for _ in range(n % 4 + 1):
                if holding.take(1, now) is not None:
                    uses.append(now)
        elif action == "f" and outgoing:
            index = n % len(outgoing)
            who, sent, payload, abandoned = outgoing[index]
            if not abandoned:
                holdings[who].failed(sent)
                outgoing[index] = (who, sent, payload, True)
        elif action == "r":
            # The isolate drops its holding (the gateway keeps a bounded number): a new
            # one, same holder, knowing nothing of what was used; answers in flight for
            # the old one are lost with it.
            who = isolate % isolates
            holdings[who] = new_holding()
            outgoing = [(w, a, p, True if w == who else x) for w, a, p, x in outgoing]
            answering = [item for item in answering if item[0] != who]
        if greedy:
            for each in holdings:
                while each.take(1, now) is not None:
                    uses.append(now)
    return sorted(uses), planned


@settings(max_examples=examples(300), deadline=None)
@given(holding_runs())
def test_holdings_never_admit_more_than_the_limit_whatever_the_order_of_calls(
    run: tuple[str, Limit, int, list[tuple[int, ...]]],
) -> None:
    """Each isolate drives a real :class:`Holding` as the gateway does (several calls in
    flight, each request that finds no units asking for itself), while the calls reach the
    object and come back in any order, or time out at the isolate and are decided later
    anyway (a ghost grant): the units used never exceed the limit."""
    algorithm, limit, ttl, steps = run
    uses, _ = drive_holdings(algorithm, limit, ttl, steps)
    assert strict_excess(algorithm, limit, uses) == 0


@st.composite
def busy_sliding_runs(draw: st.DrawFn) -> tuple[Limit, list[tuple[int, ...]]]:
    """A sliding window its isolates ask far more of than it allows, over several windows:
    the object plans most of them (about half the runs plan at least one window)."""
    limit = Limit(Rate(draw(st.integers(8, 30)), 100))
    steps = draw(
        st.lists(
            st.tuples(
                st.integers(0, 3),
                st.integers(0, 2),
                st.sampled_from("sssddaaufr"),
                st.integers(0, 50),
            ),
            min_size=100,
            max_size=400,
        )
    )
    return limit, steps


@settings(max_examples=examples(200), deadline=None)
@given(busy_sliding_runs())
def test_planned_windows_never_admit_more_than_the_limit_whatever_the_order_of_calls(
    run: tuple[Limit, list[tuple[int, ...]]],
) -> None:
    """The same, on a sliding window under a demand that makes the object plan its
    windows: allowances taken as they accrue, answers repeated, lost or out of order."""
    limit, steps = run
    uses, _ = drive_holdings("sliding_window", limit, 100, steps, isolates=3, greedy=True)
    assert strict_excess("sliding_window", limit, uses) == 0


def test_the_busy_runs_do_make_plans() -> None:
    """The run the property above draws from does reach the plans (else it would test
    only the ordinary leases again)."""
    steps = [(1, n % 2, "ssdauuu"[n % 7], n) for n in range(1_500)]
    limit = Limit(Rate(20, 100))
    uses, planned = drive_holdings("sliding_window", limit, 100, steps, isolates=2)
    assert planned > 5
    assert strict_excess("sliding_window", Limit(Rate(20, 100)), uses) == 0


def test_window_grants_merge_so_units_of_any_lease_come_back() -> None:
    limit = (Limit(Rate(100, 1_000)),)
    # A window takes back 12 of the 15 units of both grants. A bucket at most the 5 of
    # the last grant it recorded, less what refill has overtaken since (1 ms of 0.1 unit,
    # rounded up): 4.
    for algorithm, ttl, remaining in (
        ("fixed_window", 1_000, 100 - 15 + 12 - 1),
        ("token_bucket", 100, 88 - 10),  # less its reserve: 100 ms of refill
    ):
        store = KeyStore(SqliteSql())
        first = ask(store, lease(algorithm, 10, holder="a", limits=limit, ttl=ttl), T0 + 1)
        ask(store, lease(algorithm, 5, holder="a", limits=limit, ttl=ttl), T0 + 2)
        until = first.returnable_until  # the window's end; 0 for a bucket
        again = ask(
            store,
            lease(algorithm, 1, holder="a", returned=12, until=until, limits=limit, ttl=ttl),
            T0 + 3,
        )
        assert again.granted == 1
        assert again.decision.remaining == remaining, algorithm


def test_one_sized_request_at_a_time_and_refreshes_are_not_held_back() -> None:
    holding = Holding(1_000, 1_000, lead_ms=10)
    for _ in range(100):
        holding.meter.observe(T0)
    sized = holding.request(T0)
    small = holding.request(T0, 2)
    assert sized.sized and sized.wanted == 100
    assert not small.sized and small.wanted == small.min_units == 2
    granted = StoreResponse(
        (Decision(True, 1_000, 500, 1_000, 0),), granted=2, expires_at=T0 + 1_000
    )
    holding.answered(granted, small, T0 + 1, reserved=2)
    assert holding.sizing  # the sized request is still in flight
    big = StoreResponse((Decision(True, 1_000, 400, 1_000, 0),), granted=100, expires_at=T0 + 1_000)
    holding.answered(big, sized, T0 + 4)
    assert not holding.sizing and holding.rtt_ms < 5  # a 4 ms round trip moved the average
    # Near the lease's end (within twice the round trip, at least lead_ms) it refreshes.
    assert not holding.wants_refresh(T0 + 500)
    assert holding.wants_refresh(T0 + 995)


def test_a_small_grant_beside_a_big_one_does_not_trigger_a_refresh_that_gives_units_back() -> None:
    """Found on workerd: a burst of 45 under 50/minute drew 429s. The burst's requests
    asked for themselves beside one sized request; a one-unit grant answered last was the
    newest lease, empty once used, so a refresh went out judged by it alone and gave back
    the big lease's units, while the requests still waiting on their own asks were denied
    (the object had lent those units to this isolate) and found nothing left here."""
    holding = Holding(1_000, 50, merge=True)
    for _ in range(40):
        holding.meter.observe(T0)
    sized = holding.request(T0)
    small = [holding.request(T0, 1) for _ in range(4)]
    assert sized.sized and not any(ask.sized for ask in small) and holding.waiting == 4

    def grant(units: int) -> StoreResponse:
        decision = Decision(True, 50, 50 - units, 60_000, 0)
        return StoreResponse(
            (decision,), granted=units, expires_at=T0 + 60_000, returnable_until=T0 + 60_000
        )

    holding.answered(grant(20), sized, T0 + 10, reserved=1)
    holding.answered(grant(1), small[0], T0 + 10, reserved=1)
    assert holding.waiting == 3
    assert holding.leases[-1].unused(T0 + 11) == 0  # the newest, a one-unit grant, used
    assert not holding.wants_refresh(T0 + 11)  # 19 units held in the older lease
    # A sized request while three asks wait keeps a unit for each of them.
    again = holding.request(T0 + 12)
    rate = holding.meter.per_ms(T0 + 12)
    kept = sum(lease.unused(T0 + 12) for lease in holding.leases)
    assert kept == int(rate * holding.rtt_ms) + 1 + 3
    assert again.returned == 19 - kept
    for ask in small[1:]:
        holding.answered(StoreResponse((Decision(False, 50, 0, 60_000, 60_000),)), ask, T0 + 13)
    assert holding.waiting == 0
    assert all(holding.take(1, T0 + 14) is not None for _ in range(3))


def test_a_denial_while_the_isolate_holds_the_units_is_not_remembered() -> None:
    """A burst's requests each ask beside the sized request; the last asks are denied
    because this isolate holds the units. Remembering that denial (until the window's
    end, at most the deny cache's time) refused the next burst without asking, while the
    units of the lease that had ended unused were never given back: a second burst of 30
    under 50/minute got none of the 20 left."""
    holding = Holding(1_000, 50, merge=True)
    for _ in range(30):
        holding.meter.observe(T0)
    sized, small = holding.request(T0), holding.request(T0, 1)
    granted = StoreResponse(
        (Decision(True, 50, 0, 59_000, 0),),
        granted=20,
        expires_at=T0 + 1_000,
        returnable_until=T0 + 59_000,
    )
    holding.answered(granted, sized, T0 + 10, reserved=1)
    denied = StoreResponse((Decision(False, 50, 0, 59_000, 59_000, Reason.LIMITED),))
    assert holding.answered(denied, small, T0 + 11, deny_for_ms=10_000) is None
    assert holding.ask_at(T0 + 11) == 0  # 19 units held here: not a denial of this isolate
    assert holding.take(1, T0 + 11) is not None
    # The lease ends with 18 unused: the next request asks, giving them back.
    again = holding.request(T0 + 2_000)
    assert again.sized and again.returned == 18
    # Denied with nothing held: remembered.
    assert holding.answered(denied, again, T0 + 2_010, deny_for_ms=10_000) is None
    assert holding.ask_at(T0 + 2_011) == T0 + 12_010


def test_overlapping_calls_give_nothing_back_and_a_failure_ends_giving_back() -> None:
    holding = Holding(1_000, 100)
    for _ in range(50):
        holding.meter.observe(T0)
    first = holding.request(T0)
    second = holding.request(T0)  # while the first is in flight: asks for itself only
    assert first.alone and first.wanted > 1
    assert not second.alone and second.wanted == second.min_units == 1
    granted = StoreResponse((Decision(True, 100, 50, 1_000, 0),), granted=10, expires_at=T0 + 1_000)
    got = holding.answered(granted, first, T0 + 2)
    assert got is not None and not got.returnable  # another call overlapped it
    holding.answered(granted, second, T0 + 3)
    third = holding.request(T0 + 4)
    assert third.alone and third.returned == 0  # none of those leases gives back
    holding.answered(granted, third, T0 + 6)
    alone = holding.leases[-1]
    assert alone.returnable
    holding.failed(holding.request(T0 + 7))
    assert holding.request(T0 + 8).returned == 0 and not holding.returns


def test_a_grant_after_a_denial_ends_it_and_a_give_back_ends_one_too() -> None:
    # A probe's finding: a burst's lease requests answered denial-then-grant left the
    # denial standing with the grant's (allowed) decisions: 429s with no Retry-After and
    # no limit named, for the denial's whole time.
    holding = Holding(1_000, 100)
    first, second = holding.request(T0), holding.request(T0)
    denied = StoreResponse((Decision(False, 5, 0, 10_000, 10_000, Reason.LIMITED),))
    assert holding.answered(denied, first, T0 + 1, deny_for_ms=10_000) is None
    assert holding.ask_at(T0 + 2) == T0 + 10_001
    granted = StoreResponse((Decision(True, 5, 3, 10_000, 0),), granted=2, expires_at=T0 + 900)
    lease = holding.answered(granted, second, T0 + 2)
    assert lease is not None and holding.ask_at(T0 + 3) == 0
    # A unit given back (a refunded request) is usable again at once, and a denial
    # remembered meanwhile no longer holds; once the lease has ended, it is not taken.
    assert lease.take(2, T0 + 3)
    holding.answered(denied, holding.request(T0 + 4), T0 + 5, deny_for_ms=10_000)
    assert holding.give_back(lease, 1, T0 + 6) and holding.ask_at(T0 + 7) == 0
    assert holding.take(1, T0 + 7) is lease
    assert not holding.give_back(lease, 1, T0 + 900)


def test_units_leased_before_a_reset_are_not_given_back_into_the_fresh_allowance() -> None:
    store = KeyStore(SqliteSql())
    limit = (Limit(Rate(10, 1_000)),)
    granted = ask(store, lease(wanted=6, holder="a", limits=limit, ttl=1_000), T0 + 1)
    assert granted.granted == 6
    reset = StoreRequest("reset", "fixed_window", limit).to_json()
    store.decide(reset, T0 + 2)
    used = StoreRequest("check", "fixed_window", limit, 5).to_json()
    store.decide(used, T0 + 3)  # 5 of the fresh 10
    # "a" gives its 6 old units back: ignored, else the fresh allowance would count 5 - 6.
    after = ask(store, lease(wanted=1, holder="a", returned=6, limits=limit, ttl=1_000), T0 + 4)
    assert after.granted == 1 and after.decision.remaining == 4


# --- a sliding window's plan (edge_limiter.core.ratelimit.leases.plan) ------------------------

HUNDRED = (Limit(Rate(100, 1_000)),)


def busy_window(store: KeyStore, rates: dict[str, int]) -> None:
    """The window before T0 used in full by the holders, each reporting its rate."""
    names = sorted(rates)
    for at in range(100):
        holder = names[at % len(names)]
        req = lease(
            "sliding_window",
            1,
            holder=holder,
            limits=HUNDRED,
            ttl=1_000,
            observed_rate=rates[holder],
        )
        assert ask(store, req, T0 - 1_000 + at * 10).granted == 1


def planned(holder: str, rate: int, wanted: int = 1) -> StoreRequest:
    return lease(
        "sliding_window", wanted, holder=holder, limits=HUNDRED, ttl=1_000, observed_rate=rate
    )


def test_a_busy_sliding_window_is_planned_at_its_first_lease_request() -> None:
    sql = SqliteSql()
    store = KeyStore(sql)
    busy_window(store, {"a": 300, "b": 100})  # 400/s asked of 100/s
    a = ask(store, planned("a", 300), T0 + 2)
    assert a.allowance is not None and a.rationed
    assert (a.granted, a.expires_at) == (a.allowance.final, T0 + 1_000)
    b = ask(store, planned("b", 100), T0 + 5)
    assert b.allowance is not None
    # Shared in proportion to the rates, and never more than the window holds.
    assert a.allowance.at(T0 + 500) == pytest.approx(3 * b.allowance.at(T0 + 500), abs=2)
    assert 95 <= a.granted + b.granted <= 100
    # Each holder gets its allowance once (its isolate counts its uses there; one that
    # asks again may have lost count): after that, like a holder the plan does not
    # know, it gets what the plan left: nothing.
    for holder in ("a", "c"):
        late = ask(store, planned(holder, 300), T0 + 400)
        assert late.allowance is None and late.granted == 0 and not late.decision.allowed
    # The plan is counted at once, in storage: a restarted object, which has lost it,
    # cannot grant its units again.
    restarted = KeyStore(sql)
    again = ask(restarted, planned("a", 300), T0 + 600)
    assert again.granted == 0 and again.allowance is None
    # The next window is planned again, with the rates reported since.
    following = ask(store, planned("b", 100), T0 + 1_003)
    assert following.allowance is not None and following.expires_at == T0 + 2_000


def test_a_window_whose_holders_ask_less_than_it_allows_gets_ordinary_leases() -> None:
    store = KeyStore(SqliteSql())
    busy_window(store, {"a": 60, "b": 30})  # 90/s asked of 100/s
    answer = ask(store, planned("a", 60, wanted=5), T0 + 2)
    assert answer.allowance is None and answer.granted >= 1


def test_a_planned_lease_admits_its_units_as_they_accrue() -> None:
    store = KeyStore(SqliteSql())
    busy_window(store, {"a": 300, "b": 100})
    holding = Holding(1_000, 100, merge=True)
    for _ in range(10):
        holding.meter.observe(T0 - 500)
    sent = holding.request(T0 + 2)
    answer = ask(store, planned("a", sent.observed_rate or 300), T0 + 2)
    assert answer.allowance is not None
    allowance = answer.allowance
    # What accrued by the answer is taken for the request that asked; the rest accrues.
    start = allowance.reaches_at(1, T0 + 2)
    lease = holding.answered(answer, sent, start, reserved=1)
    assert lease is not None and lease.unused(start) == allowance.at(start) - 1
    now = start
    used = 1
    while holding.take(1, now) is not None:
        used += 1
    assert used == allowance.at(now)
    # Used up for now: the holding denies until the next unit accrues, without asking.
    due = holding.ask_at(now)
    assert due == allowance.reaches_at(used + 1, now) > now
    assert holding.take(1, due - 1) is None and holding.take(1, due) is not None
    # Nothing is given back (the object counted the whole allowance); a request the
    # origins failed gives its unit back to the allowance.
    assert holding.request(due, 1).returned == 0
    assert lease.unused(due) == allowance.at(due) - used - 1
    lease.give_back(1, due)
    assert lease.unused(due) == allowance.at(due) - used
    # At the window's end it is over: the next request asks the object.
    assert holding.ask_at(T0 + 999) in (0, T0 + 1_000) and holding.ask_at(T0 + 1_000) == 0
    assert lease.unused(T0 + 1_000) == 0 and holding.take(1, T0 + 1_000) is None


def test_a_planned_lease_with_nothing_accrued_yet_keeps_the_allowance_for_later() -> None:
    store = KeyStore(SqliteSql())
    busy_window(store, {"a": 300, "b": 100})
    answer = ask(store, planned("b", 100), T0 + 2)
    assert answer.allowance is not None
    holding = Holding(1_000, 100, merge=True)
    sent = holding.request(T0 + 2, 1)
    first = answer.allowance.reaches_at(1, T0 + 2)
    assert first > T0 + 2  # its first unit accrues later
    assert holding.answered(answer, sent, T0 + 2, reserved=1) is None
    assert len(holding.leases) == 1 and holding.ask_at(T0 + 2) == first
    assert holding.take(1, first) is not None


def test_a_young_meter_reports_its_rate_over_the_time_it_has_looked() -> None:
    meter = RateMeter(1_000)
    assert meter.estimate_per_ms(T0) == meter.per_ms(T0) == 0
    for at in range(0, 300, 10):  # 100/s, for 300 ms
        meter.observe(T0 + at)
    # Over the whole period the rate reads 30/s; over the 300 ms it has looked, 100/s
    # (the first observation starts the clock).
    assert meter.per_ms(T0 + 300) == pytest.approx(0.03)
    assert meter.estimate_per_ms(T0 + 300) == pytest.approx(29 / 300)
    # Too young (a tenth of a period), or a burst at one instant: the period's reading.
    assert meter.estimate_per_ms(T0 + 50) == meter.per_ms(T0 + 50)
    burst = RateMeter(1_000)
    for _ in range(40):
        burst.observe(T0)
    assert burst.estimate_per_ms(T0 + 150) == pytest.approx(39 / 150)
    lone = RateMeter(1_000)
    lone.observe(T0)
    assert lone.estimate_per_ms(T0 + 500) == pytest.approx(1 / 1_000)
    # A period old: the same as the period's reading.
    assert meter.estimate_per_ms(T0 + 1_000) == meter.per_ms(T0 + 1_000)


def test_a_long_windows_plan_remembers_the_holders_of_the_window_before() -> None:
    # A 10 s window (as long as a plan goes at a 1 s ttl): its holders ask once a window,
    # so the rates they reported 10 s ago (far more than a few ttls) still make the plan.
    ten = (Limit(Rate(1_000, 10_000)),)

    def ten_lease(holder: str, rate: int, wanted: int, ttl: int = 1_000) -> StoreRequest:
        return lease(
            "sliding_window", wanted, holder=holder, limits=ten, ttl=ttl, observed_rate=rate
        )

    store = KeyStore(SqliteSql())
    start = T0 - 10_000
    assert ask(store, ten_lease("a", 150, 800), start + 1).granted > 0
    assert ask(store, ten_lease("b", 60, 200), start + 2).granted > 0
    plan = ask(store, ten_lease("a", 150, 1), start + 10_001)
    assert plan.allowance is not None
    other = ask(store, ten_lease("b", 60, 1), start + 10_500)
    assert other.allowance is not None and other.allowance.final > 0
    # A window longer than MAX_TTLS ttls is not planned: ordinary leases, whose
    # units an isolate that goes away holds for a ttl, not the rest of the window.
    longer = KeyStore(SqliteSql())
    for holder, rate, wanted, at in (("a", 150, 800, 1), ("b", 60, 200, 2), ("a", 150, 1, 10_001)):
        answer = ask(longer, ten_lease(holder, rate, wanted, ttl=999), start + at)
    assert answer.allowance is None


def test_a_plan_is_written_at_once_even_on_a_write_behind_route() -> None:
    sql = SqliteSql()
    store = KeyStore(sql)
    busy_window(store, {"a": 300, "b": 100})
    behind = StoreRequest(
        "lease",
        "sliding_window",
        HUNDRED,
        1,
        50,
        lease_ttl_ms=1_000,
        holder="a",
        observed_rate=300,
    )
    assert ask(store, behind, T0 + 2).allowance is not None
    # No flush: a restart now still finds the plan counted in the window.
    restarted = KeyStore(sql)
    other = StoreRequest(
        "lease",
        "sliding_window",
        HUNDRED,
        1,
        50,
        lease_ttl_ms=1_000,
        holder="z",
        observed_rate=300,
    )
    assert ask(restarted, other, T0 + 500).granted == 0


def test_holdings_report_young_rates_only_where_the_object_shares_growth() -> None:
    young, period = Holding(1_000, 100, young_rates=True), Holding(1_000, 100)
    for holding in (young, period):
        for at in range(0, 300, 10):
            holding.meter.observe(T0 + at)
    assert young.request(T0 + 300).observed_rate == round(29 / 300 * 1_000)  # 97/s
    assert period.request(T0 + 300).observed_rate == 30  # 30 in the period


def test_a_denial_is_remembered_when_no_lease_can_admit_a_request_of_its_cost() -> None:
    """Units spread over leases that none of a costly request can be admitted from do not
    keep a denial from being remembered (else every such request would ask the object)."""
    holding = Holding(1_000, 50, merge=True)
    holding.leases = [Lease(2, T0 + 1_000), Lease(2, T0 + 1_000)]
    holding.sizing = True  # a sized request is out: this one gives nothing back
    assert holding.take(3, T0 + 2) is None
    denied = StoreResponse((Decision(False, 50, 0, 59_000, 59_000, Reason.LIMITED),))
    holding.answered(denied, holding.request(T0 + 2, 3), T0 + 3, deny_for_ms=10_000)
    assert holding.ask_at(T0 + 4) == T0 + 10_003
    # One lease that can admit it: not remembered.
    holding.leases = [Lease(3, T0 + 1_000)]
    holding.answered(denied, holding.request(T0 + 5, 3), T0 + 6, deny_for_ms=10_000)
    assert holding.ask_at(T0 + 6) == T0 + 10_003  # the earlier denial still stands
    holding.forget_denial()
    holding.answered(denied, holding.request(T0 + 7, 3), T0 + 8, deny_for_ms=10_000)
    assert holding.ask_at(T0 + 9) == 0


def test_a_sliding_windows_units_that_come_back_after_its_end_leave_its_count() -> None:
    """A probe's finding: a leased sliding window's next window weighed the units of the
    leases that ended unused in the last one (a burst of 20 at 5 s into a 50/10s window
    left 19-21 for a burst 2 s into the next, not 34). Units handed back with the holder's
    first request after the window's end now leave that window's count; a fixed window's
    next window does not weigh it, so nothing is kept for it."""
    ten_s = (Limit(Rate(50, 10_000)),)
    start = T0 - T0 % 10_000 + 5_000  # 5 s into a window
    store = KeyStore(SqliteSql())
    granted = ask(store, lease("sliding_window", 36, limits=ten_s, ttl=1_000), start)
    assert granted.granted == 36 and granted.returnable_until == start + 5_000
    # 20 used; the lease ended with 16 unused. At 2 s into the next window (a weight of
    # 0.8 for the last): 50 - 0.8 * 20 = 34 room, with the 16 given back.
    late = lease(
        "sliding_window",
        50,
        returned=16,
        until=granted.returnable_until,
        limits=ten_s,
        ttl=1_000,
    )
    after = ask(store, late, start + 7_000)
    assert after.granted + after.decision.remaining == 34  # granted, and left to grant
    # Without them given back: 50 - 0.8 * 36, the weighted count rounded down: 22.
    kept = KeyStore(SqliteSql())
    ask(kept, lease("sliding_window", 36, limits=ten_s, ttl=1_000), start)
    plain = lease("sliding_window", 50, limits=ten_s, ttl=1_000)
    without = ask(kept, plain, start + 7_000)
    assert without.granted + without.decision.remaining == 22
    # A fixed window's record ends with its window: nothing to give back into.
    fixed = KeyStore(SqliteSql())
    first = ask(fixed, lease("fixed_window", 36, limits=ten_s, ttl=1_000), start)
    again = lease(
        "fixed_window", 50, returned=16, until=first.returnable_until, limits=ten_s, ttl=1_000
    )
    fresh = ask(fixed, again, start + 7_000)
    assert fresh.granted + fresh.decision.remaining == 50


def test_an_allowance_its_holder_does_not_claim_goes_to_a_holder_that_asks() -> None:
    """Found on the local runtime: with the load moved from one isolate to another, the
    newcomer got 23 of the 49 units its window had room for, while the plan kept the rest
    for the isolate that had gone quiet seconds before (its rate still remembered)."""
    store = KeyStore(SqliteSql())
    busy_window(store, {"a": 300, "b": 300})  # b goes quiet from now on
    a = ask(store, planned("a", 300), T0 + 2)
    assert a.allowance is not None
    # b's allowance is unclaimed: a is told to ask again once b's claim runs out (a
    # quarter of the window here, the ttl being the window).
    assert a.ask_at == T0 + 2 + 250
    early = ask(store, planned("a", 300), T0 + 100)
    assert early.allowance is None and early.granted == 0  # not yet: b may still come
    again = ask(store, planned("a", 300), T0 + 300)
    assert again.allowance is not None and again.ask_at == 0
    # Both allowances together are the window's room, as the plan made it.
    assert 95 <= a.granted + again.granted <= 100
    assert a.allowance.at(T0 + 999) + again.allowance.at(T0 + 999) <= 100
    # Its holder forgotten, the next window's plan leaves it out.
    following = ask(store, planned("a", 300), T0 + 1_002)
    assert following.allowance is not None and following.ask_at == 0


def test_a_newcomer_takes_an_unclaimed_allowance() -> None:
    store = KeyStore(SqliteSql())
    busy_window(store, {"a": 300, "b": 300})
    assert ask(store, planned("a", 300), T0 + 2).allowance is not None
    newcomer = ask(store, planned("c", 300), T0 + 260)
    assert newcomer.allowance is not None and newcomer.granted >= 40


def test_a_window_denial_says_to_ask_again_when_another_holders_lease_ends() -> None:
    """Told to wait for the window's end, an isolate on the local runtime denied its
    clients for the rest of it while the other gave back 36 of the 200 units."""
    store = KeyStore(SqliteSql())
    limits = (Limit(Rate(200, 10_000)),)
    first = ask(store, lease(wanted=200, holder="a", ttl=1_000, limits=limits), T0)
    assert first.granted == 200 and first.expires_at == T0 + 1_000
    denied = ask(store, lease(wanted=50, holder="b", ttl=1_000, limits=limits), T0 + 40)
    assert denied.granted == 0 and denied.decision.retry_after == 960
