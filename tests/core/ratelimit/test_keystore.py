"""The rate-limiter Durable Object's whole step (:class:`KeyStore`) over real SQLite.

The object's SQL runs here on the standard library's sqlite3, so what is tested is what
the object stores: durability across a restart (a new ``KeyStore`` on the same database),
write-behind's loss bound, the sliding log's O(1) rows, cleanup to zero rows.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.errors import ProtocolError
from edge_limiter.core.ratelimit import keystore
from edge_limiter.core.ratelimit.algorithms import make_algorithm
from edge_limiter.core.ratelimit.keystore import LOG_PRUNE_EVERY, KeyStore
from edge_limiter.core.ratelimit.protocol import (
    DEFAULT_CLEANUP_AFTER_MS,
    StoreRequest,
    StoreResponse,
    row_id,
)
from edge_limiter.core.ratelimit.rates import Limit, Rate, parse_rates
from edge_limiter.core.ratelimit.rule import check_all
from edge_limiter.testing import SqliteSql
from tests.examples import examples

ALGORITHMS = ("token_bucket", "gcra", "sliding_log", "sliding_window", "fixed_window")
RATES = tuple(Limit(rate) for rate in parse_rates("2/second; 3/minute"))
T0 = 1_700_000_000_000


def request(
    op: str = "check",
    algorithm: str = "fixed_window",
    cost: int = 1,
    limits: tuple[Limit, ...] = RATES,
    write_behind_ms: int = 0,
) -> StoreRequest:
    return StoreRequest(op, algorithm, limits, cost, write_behind_ms)


def ask(store: KeyStore, req: StoreRequest, now: int) -> StoreResponse:
    return StoreResponse.from_json(store.decide(req.to_json(), now), req.limits)


def table(sql: SqliteSql, name: str) -> list[dict[str, Any]]:
    return sql.rows(f"SELECT * FROM {name} ORDER BY id")


def test_all_or_nothing_and_nothing_consumed_by_a_denial() -> None:
    sql = SqliteSql()
    store = KeyStore(sql)
    assert [ask(store, request(), T0).decision.allowed for _ in range(3)] == [True, True, False]
    before = table(sql, "limits")
    denied = ask(store, request(), T0 + 500)
    assert not denied.decision.allowed and table(sql, "limits") == before
    assert ask(store, request(), T0 + 1_000).decision.allowed  # 3rd of the minute
    final = ask(store, request(), T0 + 2_000)
    assert not final.decision.allowed
    assert final.decisions[0].allowed and not final.decisions[1].allowed
    assert final.decision.policy == RATES[1]


def test_each_limit_carries_its_own_burst() -> None:
    limits = (Limit(Rate(10, 1000), 20, "burst"), Limit(Rate(1000, 3_600_000)))
    answer = ask(KeyStore(SqliteSql()), request(algorithm="token_bucket", limits=limits), T0)
    assert [(d.limit, d.remaining) for d in answer.decisions] == [(20, 19), (1000, 999)]


def test_bad_payloads_are_protocol_errors() -> None:
    store = KeyStore(SqliteSql())
    bad = request(algorithm="sliding_log", limits=(Limit(Rate(10, 1000), 20),))
    with pytest.raises(ProtocolError, match="takes no burst"):
        store.decide(bad.to_json(), T0)
    with pytest.raises(ProtocolError):
        store.decide("not json", T0)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_peek_predicts_the_next_check_and_writes_nothing(algorithm: str) -> None:
    sql = SqliteSql()
    store = KeyStore(sql)
    for now in (T0, T0, T0 + 10, T0 + 500):
        before = (table(sql, "limits"), table(sql, "log"))
        written = len(sql.statements)
        peeked = ask(store, request("peek", algorithm), now)
        assert (table(sql, "limits"), table(sql, "log")) == before
        assert all(q.startswith("SELECT") for q in sql.statements[written:])
        checked = ask(store, request("check", algorithm), now)
        assert peeked.decisions == checked.decisions


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reset_deletes_the_rows_and_refund_gives_back(algorithm: str) -> None:
    sql = SqliteSql()
    store = KeyStore(sql)
    while ask(store, request("check", algorithm), T0 + 100).decision.allowed:
        pass
    assert table(sql, "limits") or table(sql, "log")
    assert ask(store, request("refund", algorithm), T0 + 100).decision.allowed
    assert ask(store, request("check", algorithm), T0 + 100).decision.allowed
    ask(store, request("reset", algorithm), T0 + 100)
    assert table(sql, "limits") == [] and table(sql, "log") == []
    assert ask(store, request("check", algorithm, cost=2), T0 + 100).decision.allowed


def test_an_isolate_parses_a_payload_once_for_all_its_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keystore, "SHARED_COMPILED", keystore.CompiledPayloads(most=2))
    parsed: list[str] = []
    real = StoreRequest.from_json

    def counted(text: str) -> StoreRequest:
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(StoreRequest, "from_json", staticmethod(counted))
    req = request(algorithm="gcra")
    first, second = KeyStore(SqliteSql()), KeyStore(SqliteSql())
    assert ask(first, req, T0).decisions == ask(second, req, T0).decisions
    assert ask(second, req, T0).decisions[0].remaining == 0
    assert parsed == [req.to_json()]  # the second key's object parsed nothing
    # A refund of one admission is parsed where it is asked, and kept by no one.
    refund = StoreRequest("refund", "gcra", RATES, at=T0)
    for store in (first, second):
        ask(store, refund, T0)
    assert parsed.count(refund.to_json()) == 2
    # Bounded: a third payload drops the two kept, and a bad payload is never kept.
    others = [request(algorithm=name) for name in ("token_bucket", "sliding_window")]
    for other in others:
        ask(KeyStore(SqliteSql()), other, T0)
    with pytest.raises(ProtocolError):
        KeyStore(SqliteSql()).decide('{"op": "check"}', T0)
    assert list(keystore.SHARED_COMPILED.by_text) == [others[1].to_json()]
    assert ask(first, req, T0 + 2_000).decision.allowed  # the object's own copy holds


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("write_behind_ms", [0, 50])
def test_a_memory_only_store_decides_the_same_and_writes_nothing(
    algorithm: str, write_behind_ms: int
) -> None:
    sql = SqliteSql()
    durable, memory = KeyStore(SqliteSql()), KeyStore(sql, durable=False)
    schema = len(sql.statements)
    for step in range(40):
        op = ("check", "check", "check", "peek", "refund")[step % 5]
        req = request(op, algorithm, write_behind_ms=write_behind_ms)
        now = T0 + step * 97
        assert ask(memory, req, now) == ask(durable, req, now)
        assert memory.idle == durable.idle
    assert memory.states == durable.states
    assert all(q.startswith("SELECT") for q in sql.statements[schema:])  # the load only
    assert table(sql, "limits") == [] and table(sql, "log") == []
    assert not memory.dirty and memory.flush_due is None


OPS = st.sampled_from(("check", "check", "check", "peek", "refund", "reset", "lease", "stamp"))


@settings(max_examples=examples(80), deadline=None)
@given(
    algorithm=st.sampled_from(("token_bucket", "gcra", "sliding_window", "fixed_window")),
    steps=st.lists(
        st.tuples(OPS, st.integers(0, 3), st.integers(0, 700), st.booleans()), max_size=40
    ),
)
def test_the_typed_step_answers_what_the_codec_reads(
    algorithm: str, steps: list[tuple[str, int, int, bool]]
) -> None:
    """``DECIDE.typed``: the twin without the codec gets exactly the codec's answers."""
    by_text, typed = KeyStore(SqliteSql()), KeyStore(SqliteSql())
    limits = (Limit(Rate(5, 1_000), algorithm="fixed_window"), *RATES)  # one of its own
    now, admitted = T0, 0
    for op, cost, wait, other_holder in steps:
        now += wait
        if op == "lease":
            req = StoreRequest(
                "lease",
                algorithm,
                limits,
                max(1, cost),
                lease_ttl_ms=200,
                holder="b" if other_holder else "a",
            )
        elif op == "stamp":
            req = StoreRequest("check", algorithm, limits, cost, stamp=True)
        elif op == "refund" and admitted:
            req = StoreRequest("refund", algorithm, limits, cost, at=admitted)
        else:
            req = StoreRequest(op, algorithm, limits, cost)
        expected = ask(by_text, req, now)
        got = typed.step(req, now)
        assert got == expected
        assert [d.policy for d in got.decisions] == list(limits)
        admitted = got.at or admitted
    assert typed.states == by_text.states


def test_rows_are_read_once_and_memory_answers_after() -> None:
    sql = SqliteSql()
    store = KeyStore(sql)
    for index in range(20):
        ask(store, request(algorithm="gcra"), T0 + index * 1000)
    selects = [q for q in sql.statements if q.startswith("SELECT")]
    assert len(selects) == 2  # the two tables, on the first request only


def test_undecodable_rows_are_treated_as_fresh_and_dropped() -> None:
    sql = SqliteSql()
    KeyStore(sql)
    for limit in RATES:
        sql.run(
            "INSERT INTO limits (id, state, idle_at) VALUES (?, ?, ?)",
            row_id("fixed_window", limit),
            "[1,2,3,4,5]",
            T0,
        )
    sql.run("INSERT INTO limits (id, state, idle_at) VALUES ('junk', 'x', 0)")
    assert ask(KeyStore(sql), request(), T0).decision.allowed
    assert "junk" not in [row["id"] for row in table(sql, "limits")]


def test_rows_carry_when_they_go_idle() -> None:
    sql = SqliteSql()
    ask(KeyStore(sql), request(), 10_000)
    idle = {row["id"]: row["idle_at"] for row in table(sql, "limits")}
    assert idle[row_id("fixed_window", RATES[0])] == 11_000
    assert idle[row_id("fixed_window", RATES[1])] == 60_000


OPS = st.lists(
    st.tuples(
        st.sampled_from(["check", "check", "check", "peek", "refund", "reset", "restart"]),
        st.integers(0, 3),  # cost
        st.integers(0, 700),  # ms since the last step
    ),
    max_size=60,
)


@settings(max_examples=examples(150), deadline=None)
@given(algorithm=st.sampled_from(ALGORITHMS), ops=OPS)
def test_restarts_never_change_a_decision(algorithm: str, ops: list[tuple[str, int, int]]) -> None:
    """Every change is written before the answer: an object restarted at any point (a new
    KeyStore on the same database) decides exactly as one that never stopped, and both
    decide as the pure algorithms do."""
    limits = (Limit(Rate(3, 1000)), Limit(Rate(5, 4000)))
    algs = [make_algorithm(algorithm, limit) for limit in limits]
    sql = SqliteSql()
    restarted = KeyStore(sql)
    steady = KeyStore(SqliteSql())
    pure: list[Any] = [None, None]
    now = T0
    for op, cost, gap in ops:
        now += gap
        if op == "restart":
            restarted = KeyStore(sql)
            continue
        req = request(op, algorithm, cost, limits).to_json()
        one, two = restarted.decide(req, now), steady.decide(req, now)
        assert one == two
        if op == "check":
            result = check_all(algs, pure, now, cost)
            pure = list(result.states)
            got = StoreResponse.from_json(one, limits)
            assert got.decisions == tuple(
                d._replace(reason=g.reason)
                for d, g in zip(result.decisions, got.decisions, strict=True)
            )
        elif op == "refund":
            pure = [a.refund(s, now, cost) for a, s in zip(algs, pure, strict=True)]
        elif op == "reset":
            pure = [None, None]


def test_write_behind_answers_from_memory_and_writes_within_its_interval() -> None:
    sql = SqliteSql()
    store = KeyStore(sql)
    req = request(algorithm="gcra", limits=(Limit(Rate(100, 3_600_000)),), write_behind_ms=50)
    for step in range(5):
        ask(store, req, T0 + step * 10)
    assert table(sql, "limits") == []  # nothing written yet
    assert store.flush_due == T0 + 50
    # A restart now forgets those admissions: that is the documented loss bound.
    assert ask(KeyStore(sql), req, T0 + 45).decisions[0].remaining == 99
    sql.run("DELETE FROM limits")  # (what that restarted object wrote)
    ask(store, req, T0 + 50)  # the interval is over: this request writes the batch
    assert store.flush_due is None and len(table(sql, "limits")) == 1
    again = KeyStore(sql)
    assert ask(again, req, T0 + 50).decisions[0].remaining == 93  # six admitted, kept
    ask(store, req, T0 + 60)
    store.flush(T0 + 61)  # the object's timer
    assert ask(KeyStore(sql), req, T0 + 61).decisions[0].remaining == 92


def test_the_sliding_log_costs_a_bounded_number_of_statements_at_any_quota() -> None:
    sql = SqliteSql()
    store = KeyStore(sql)
    limits = (Limit(Rate(10_000, 3_600_000)),)
    req = request(algorithm="sliding_log", limits=limits).to_json()
    now = T0
    store.decide(req, now)  # the first request also reads the tables
    for _ in range(12_000):
        now += 300  # 12,000 per hour: the log stays full
        before = len(sql.statements)
        store.decide(req, now)
        assert len(sql.statements) - before <= 2  # an insert, and now and then a prune
    rows = len(table(sql, "log"))
    assert rows <= 10_000 + LOG_PRUNE_EVERY
    # After a restart, the log read back from its rows decides exactly as before.
    probe = request("peek", "sliding_log", limits=limits).to_json()
    assert KeyStore(sql).decide(probe, now) == store.decide(probe, now)


def test_a_log_stored_as_one_row_by_an_older_version_moves_to_rows() -> None:
    sql = SqliteSql()
    KeyStore(sql)
    limit = Limit(Rate(3, 60_000))
    rid = row_id("sliding_log", limit)
    sql.run(
        "INSERT INTO limits (id, state, idle_at) VALUES (?, ?, ?)",
        rid,
        f"[{T0},1,{T0 + 5},1]",
        T0 + 60_005,
    )
    store = KeyStore(sql)
    answer = ask(store, request(algorithm="sliding_log", limits=(limit,)), T0 + 10)
    assert answer.decisions[0].remaining == 0
    assert table(sql, "limits") == []
    assert [(r["at"], r["cost"]) for r in table(sql, "log")] == [(T0, 1), (T0 + 5, 1), (T0 + 10, 1)]


def test_the_alarm_is_armed_rarely_and_cleanup_leaves_no_rows() -> None:
    sql = SqliteSql()
    store = KeyStore(sql)
    short = (Limit(Rate(100_000, 60_000)),)  # idle again within a millisecond
    armed = []
    for step in range(1_000):
        now = T0 + step
        ask(store, request(algorithm="gcra", limits=short), now)
        at = store.alarm_wanted(now)
        if at is not None:
            armed.append(at)
    assert armed == [T0 + DEFAULT_CLEANUP_AFTER_MS]  # once, a minute out
    for algorithm in ALGORITHMS:
        # One key under five algorithms' rows: each carries the others' use (at most a
        # full minute-long limit, so idle within two minutes).
        ask(store, request(algorithm=algorithm), T0 + 1_000)
    assert store.cleanup(T0 + DEFAULT_CLEANUP_AFTER_MS) is not None  # the minute-long rows remain
    assert store.cleanup(T0 + 1_000 + 120_000) is None
    assert table(sql, "limits") == [] and table(sql, "log") == []
    # And a fresh object on the emptied storage starts from nothing.
    assert ask(KeyStore(sql), request(), T0 + 70_000).decisions[1].remaining == 2


def test_the_cleanup_delay_comes_with_the_request() -> None:
    store = KeyStore(SqliteSql())
    req = StoreRequest("check", "gcra", RATES, cleanup_after_ms=1_000)
    assert StoreRequest.from_json(req.to_json()) == req
    store.decide(req.to_json(), T0)
    assert store.alarm_wanted(T0) == T0 + 1_000  # the 2/second row is idle by then


def limits_of(text: str) -> tuple[Limit, ...]:
    return tuple(Limit(rate) for rate in parse_rates(text))


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_use_under_other_limits_carries_over(algorithm: str) -> None:
    # An override set, changed or removed gives the key other limits (other rows): what it
    # used moments ago still counts, so lowering a limit never hands out a fresh allowance.
    store = KeyStore(SqliteSql())
    base, lowered = limits_of("5/10 seconds"), limits_of("2/10 seconds")
    assert ask(store, request(algorithm=algorithm, limits=base), T0).decision.allowed
    admitted = [
        ask(store, request(algorithm=algorithm, limits=lowered), T0 + 1 + i).decision.allowed
        for i in range(3)
    ]
    assert admitted == [True, False, False]  # 2 in 10 s: one used, one left
    # Raised, then taken away again: the 20 used under the override count on the base.
    store = KeyStore(SqliteSql())
    raised = limits_of("100/10 seconds")
    for i in range(20):
        assert ask(store, request(algorithm=algorithm, limits=raised), T0 + i).decision.allowed
    assert not ask(store, request(algorithm=algorithm, limits=base), T0 + 30).decision.allowed


def test_use_within_a_longer_window_carries_as_far_as_it_was_recent() -> None:
    # 500 of a day, all more than a second ago, are no use of the last second: the
    # per-second limit starts whole.
    store = KeyStore(SqliteSql())
    daily, fast = limits_of("1000/day"), limits_of("10/second")
    for i in range(500):
        ask(store, request(algorithm="gcra", limits=daily), T0 + i)
    answer = ask(store, request(algorithm="gcra", limits=fast), T0 + 2_000)
    assert answer.decision.allowed and answer.decision.remaining == 9
    # Right after them, the last second's use is what the object saw admitted in it.
    store = KeyStore(SqliteSql())
    for i in range(500):
        ask(store, request(algorithm="gcra", limits=daily), T0 + i)
    assert not ask(store, request(algorithm="gcra", limits=fast), T0 + 500).decision.allowed
    # The other way round it does: the last second's use is part of the day's.
    store = KeyStore(SqliteSql())
    for i in range(8):
        ask(store, request(algorithm="gcra", limits=fast), T0 + i)
    later = ask(store, request(algorithm="gcra", limits=limits_of("20/day")), T0 + 10)
    assert later.decision.remaining == 20 - 8 - 1


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_an_override_of_a_longer_window_that_goes_leaves_its_use_counted(algorithm: str) -> None:
    # A probe's finding: 8 admitted under an override of 8/20 s, then the override
    # deleted: the route's own 5/10 s (3/2 s for the buckets) admitted 5 more at once.
    base = limits_of("3/2 seconds" if algorithm in ("token_bucket", "gcra") else "5/10 seconds")
    override = limits_of("8/20 seconds")
    store = KeyStore(SqliteSql())
    for i in range(8):
        assert ask(
            store, request(algorithm=algorithm, limits=override), T0 + 30 * i
        ).decision.allowed
    after = ask(store, request(algorithm=algorithm, limits=base), T0 + 300)
    assert not after.decision.allowed, after
    # And the other way: the route's use counts under an override of a shorter window.
    store = KeyStore(SqliteSql())
    long_base, short = limits_of("10/20 seconds"), limits_of("3/2 seconds")
    for i in range(3):
        ask(store, request(algorithm=algorithm, limits=long_base), T0 + i)
    assert not ask(store, request(algorithm=algorithm, limits=short), T0 + 100).decision.allowed


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_carried_use_is_stored_as_carried(algorithm: str) -> None:
    # A probe's finding: a sliding log seeded with the use carried from the route's
    # limit stored only the new request's entry, so after the object restarted the
    # carried use was gone (admitted 10 s early under an 8/20 s override).
    sql = SqliteSql()
    store = KeyStore(sql)
    base, override = limits_of("5/10 seconds"), limits_of("8/20 seconds")
    for i in range(5):
        ask(store, request(algorithm=algorithm, limits=base), T0 + 20 * i)
    seen = [
        ask(
            store, request(algorithm=algorithm, limits=override), T0 + 114 + 60 * i
        ).decision.allowed
        for i in range(4)
    ]
    assert seen == [True, True, True, False]
    later = T0 + 10_274
    restarted = ask(KeyStore(sql), request(algorithm=algorithm, limits=override), later)
    kept = ask(store, request(algorithm=algorithm, limits=override), later)
    assert (restarted.decision.allowed, restarted.decision.remaining) == (
        kept.decision.allowed,
        kept.decision.remaining,
    )
    if algorithm in ("sliding_log", "fixed_window", "sliding_window"):
        assert not kept.decision.allowed  # 8 within the 20 s


def test_a_sliding_log_carries_the_latest_admissions_not_the_earliest() -> None:
    # A probe's finding: 10 admitted 0.3 s apart under an override of 10/4 s, deleted:
    # the route's 5/10 s admitted as each of the first five expired (10 in its window).
    store = KeyStore(SqliteSql())
    base, override = limits_of("5/10 seconds"), limits_of("10/4 seconds")
    stamps = [T0 + 300 * i for i in range(10)]
    for at in stamps:
        assert ask(store, request(algorithm="sliding_log", limits=override), at).decision.allowed
    polls = range(stamps[-1] + 100, stamps[5] + 10_000, 250)
    for at in polls:  # denials all the while: none of them moves the wait later
        assert not ask(store, request(algorithm="sliding_log", limits=base), at).decision.allowed
    assert ask(
        store, request(algorithm="sliding_log", limits=base), stamps[5] + 10_000
    ).decision.allowed


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_wait_after_the_override_goes_is_not_pushed_later_by_each_denial(algorithm: str) -> None:
    # A probe's finding: the route's use and the override's, then the override deleted:
    # the 429s counted Retry-After down to 1, then said 10 again (the other rows' use
    # seeded anew, as of each request): admitted 20 s after a 0.6 s burst.
    store = KeyStore(SqliteSql())
    base, override = limits_of("5/10 seconds"), limits_of("20/10 seconds")
    for i in range(2):
        ask(store, request(algorithm=algorithm, limits=base), T0 + 10 * i)
    for i in range(10):
        ask(store, request(algorithm=algorithm, limits=override), T0 + 100 + 50 * i)
    first = ask(store, request(algorithm=algorithm, limits=base), T0 + 700)
    assert not first.decision.allowed
    promised = T0 + 700 + first.decision.retry_after
    at = T0 + 700
    while at < promised:
        answer = ask(store, request(algorithm=algorithm, limits=base), at)
        assert not answer.decision.allowed and at + answer.decision.retry_after <= promised + 1
        at += 500
    assert ask(store, request(algorithm=algorithm, limits=base), promised).decision.allowed
    assert promised <= T0 + 11_000


@pytest.mark.parametrize("algorithm", ["fixed_window", "sliding_log"])
def test_hundreds_of_admissions_carry_whole(algorithm: str) -> None:
    # A probe's finding: 400 under an override of 5000/hour, deleted: the route's
    # 1000/minute said 744 left (the object remembered only 256 admissions).
    store = KeyStore(SqliteSql())
    base, override = limits_of("1000/minute"), limits_of("5000/hour")
    for i in range(400):
        ask(store, request(algorithm=algorithm, limits=override), T0 + i)
    after = ask(store, request(algorithm=algorithm, limits=base), T0 + 500)
    assert after.decision.allowed and after.decisions[0].remaining == 1000 - 401


def test_the_recent_admissions_are_replayed_once_per_change_of_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from edge_limiter.core.ratelimit import carry

    calls: list[int] = []
    real = carry.Recent.replay

    def counted(self: Any, algorithm: Any, now: int) -> Any:
        calls.append(now)
        return real(self, algorithm, now)

    monkeypatch.setattr(carry.Recent, "replay", counted)
    store = KeyStore(SqliteSql())
    base, override = limits_of("50/10 seconds"), limits_of("80/20 seconds")
    for i in range(5):
        ask(store, request(algorithm="sliding_log", limits=base), T0 + i)
    for i in range(20):  # the base's row lives on: every request carries, one replays
        ask(store, request(algorithm="sliding_log", limits=override), T0 + 10 + i)
    assert len(calls) == 1
    # A peek keeps nothing, so the next check replays again.
    ask(store, request(algorithm="sliding_log", limits=base), T0 + 40)
    ask(store, request("peek", algorithm="sliding_log", limits=override), T0 + 41)
    ask(store, request(algorithm="sliding_log", limits=override), T0 + 42)
    assert len(calls) == 4
    answer = ask(store, request(algorithm="sliding_log", limits=override), T0 + 43)
    assert len(calls) == 4 and answer.decisions[0].remaining == 80 - 28


def test_a_reset_forgets_the_use_under_other_limits_too() -> None:
    # An operator's reset gives the key a fresh allowance: the rows of its other limits
    # (an override's, the route's own) would otherwise carry their use straight back.
    sql = SqliteSql()
    store = KeyStore(sql)
    base, override = limits_of("5/10 seconds"), limits_of("3/10 seconds")
    for i in range(5):
        ask(store, request(algorithm="sliding_log", limits=base), T0 + i)
    ask(store, request("reset", algorithm="sliding_log", limits=override), T0 + 10)
    fresh = ask(store, request(algorithm="sliding_log", limits=override), T0 + 11)
    assert fresh.decision.allowed and fresh.decision.remaining == 2
    assert table(sql, "log") == [row for row in table(sql, "log") if "3/" in row["id"]]
