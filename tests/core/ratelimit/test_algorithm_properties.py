"""Property tests: every algorithm against a simple reference model, and the contracts of
the :class:`Algorithm` interface (peek, refund, reset, idle_at, encode/decode, retry and
reset times) over random request sequences.

Times are non-decreasing integer milliseconds, except in the tests of a clock that goes
back; costs include 0 and costs above capacity. The per-step contracts share one walk per
example (each is its own ``assert_*`` helper), which keeps the suite fast without losing
what each one checks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from fractions import Fraction
from math import ceil, floor
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.ratelimit.algorithms import Algorithm, make_algorithm
from edge_limiter.core.ratelimit.decision import Decision, Reason
from edge_limiter.core.ratelimit.rates import Limit, Rate
from tests.examples import examples

NAMES = ("token_bucket", "gcra", "sliding_log", "sliding_window", "fixed_window")
BUCKETS = ("token_bucket", "gcra")
EPOCH_MS = 1_700_000_000_000
JS_SAFE = 2**53

PROPERTY = settings(max_examples=examples(200), deadline=None)

Request = tuple[int, int]


# --- strategies ---------------------------------------------------------------------------


def request_from_code(code: int, window: int, capacity: int) -> Request:
    """Turn one random 16-bit code into ``(gap, cost)``.

    Random bytes are several times cheaper for hypothesis to generate than nested
    ``one_of`` strategies. Bits 0-1 pick the gap's kind (a quarter of the gaps are 0, a
    quarter short, half up to two windows), bit 10 the cost's (half the costs are 1, half
    anything from 0 to capacity + 2). Code 0 is ``(0, 1)``, so examples shrink to bursts
    of unit requests.
    """
    gap_kind, gap_value = code & 3, (code >> 2) & 0xFF
    cost_kind, cost_value = (code >> 10) & 1, (code >> 11) & 0x1F
    if gap_kind == 0:
        gap = 0
    elif gap_kind == 1:
        gap = gap_value % (window // 4 + 2)
    else:
        gap = gap_value % (2 * window + 1)
    cost = 1 if cost_kind == 0 else cost_value % (capacity + 3)
    return gap, cost


def requests(
    rate: Rate, capacity: int, start: int, min_size: int = 0, max_size: int = 30
) -> st.SearchStrategy[list[Request]]:
    """Non-decreasing ``(now, cost)`` pairs from ``start``, with bursts and quiet spells."""

    def build(raw: bytes) -> list[Request]:
        out: list[Request] = []
        now = start
        for offset in range(0, len(raw), 2):
            code = int.from_bytes(raw[offset : offset + 2], "little")
            gap, cost = request_from_code(code, rate.window_ms, capacity)
            now += gap
            out.append((now, cost))
        return out

    return st.binary(min_size=2 * min_size, max_size=2 * max_size).map(build)


@st.composite
def scenarios(draw: st.DrawFn, name: str) -> tuple[Algorithm[Any], list[Request]]:
    """An algorithm called ``name`` with a small random rate (and burst), and requests."""
    rate = Rate(draw(st.integers(1, 6)), draw(st.integers(1, 30)))
    burst = draw(st.none() | st.integers(1, 8)) if name in BUCKETS else None
    algorithm = make_algorithm(name, Limit(rate, burst))
    start = draw(st.sampled_from((0, EPOCH_MS))) + draw(st.integers(0, 3 * rate.window_ms))
    # Draw the length first: left to itself hypothesis makes most lists very short.
    size = draw(st.integers(0, 30))
    return algorithm, draw(requests(rate, algorithm.capacity, start, size, size))


def walk(
    algorithm: Algorithm[Any], reqs: list[Request], state: Any = None
) -> Iterator[tuple[int, int, Any, Decision, Any]]:
    """Check each request in turn: ``(now, cost, state_before, decision, state_after)``."""
    for now, cost in reqs:
        decision, after = algorithm.check(state, now, cost)
        yield now, cost, state, decision, after
        state = after


def decisions_of(
    algorithm: Algorithm[Any], reqs: list[Request], state: Any = None
) -> list[Decision]:
    """Only the decisions of :func:`walk`."""
    return [decision for _, _, _, decision, _ in walk(algorithm, reqs, state)]


def final_state(algorithm: Algorithm[Any], reqs: list[Request]) -> Any:
    """The state after all of ``reqs``."""
    state: Any = None
    for _, _, _, _, after in walk(algorithm, reqs):
        state = after
    return state


def admitted_of(algorithm: Algorithm[Any], reqs: list[Request]) -> list[Request]:
    """The requests (with a cost) that were admitted."""
    return [(now, cost) for now, cost, _, d, _ in walk(algorithm, reqs) if d.allowed and cost]


by_name = pytest.mark.parametrize("name", NAMES)


# --- every algorithm: the interface's contracts, step by step ------------------------------


def assert_fields_consistent(alg: Algorithm[Any], cost: int, decision: Decision) -> None:
    """limit/policy/reason/retry agree with ``allowed``; cost 0 passes, cost > capacity never."""
    assert decision.limit == alg.capacity
    assert decision.policy == alg.limit
    if decision.allowed:
        assert (decision.retry_after, decision.reason) == (0, None)
    else:
        assert decision.retry_after >= 1
        assert decision.reason is Reason.LIMITED
    if cost == 0:
        assert decision.allowed
    if cost > alg.capacity:
        assert not decision.allowed
        assert decision.retry_after == max(1, decision.reset_after)


def assert_consumes_nothing_unless_admitted(
    cost: int, before: Any, d: Decision, after: Any
) -> None:
    """A denied or free request returns the very state it got: nothing to store, and
    nothing forgotten (not even how far the clock had got)."""
    if not d.allowed or cost == 0:
        assert after is before


def assert_remaining_exact(alg: Algorithm[Any], after: Any, now: int, d: Decision) -> None:
    """``remaining`` is the largest cost admitted right now."""
    assert alg.peek(after, now, d.remaining).allowed
    assert not alg.peek(after, now, d.remaining + 1).allowed


def assert_retry_exact(alg: Algorithm[Any], after: Any, now: int, cost: int, d: Decision) -> None:
    """A denied cost that can ever fit fits at ``now + retry_after`` and not 1 ms before."""
    if d.allowed or cost > alg.capacity:
        return
    assert not alg.peek(after, now + d.retry_after - 1, cost).allowed
    assert alg.peek(after, now + d.retry_after, cost).allowed


def assert_reset_exact(alg: Algorithm[Any], after: Any, now: int, d: Decision) -> None:
    """The full capacity fits at ``now + reset_after`` and not 1 ms before."""
    if d.reset_after > 0:
        assert not alg.peek(after, now + d.reset_after - 1, alg.capacity).allowed
    assert alg.peek(after, now + d.reset_after, alg.capacity).allowed


def assert_equivalent(alg: Algorithm[Any], one: Any, other: Any, probes: list[Request]) -> None:
    """Two states decide every probe ``(at, cost)`` alike."""
    for at, cost in probes:
        assert alg.peek(one, at, cost) == alg.peek(other, at, cost), (at, cost)


@by_name
@PROPERTY
@given(data=st.data())
def test_contracts_hold_at_every_step(name: str, data: st.DataObject) -> None:
    """Fields, peek, remaining, retry_after, reset_after, consume-nothing and refund."""
    alg, reqs = data.draw(scenarios(name))
    steps = list(walk(alg, reqs))
    for index, (now, cost, before, decision, after) in enumerate(steps):
        assert_fields_consistent(alg, cost, decision)
        assert_consumes_nothing_unless_admitted(cost, before, decision, after)
        assert_remaining_exact(alg, after, now, decision)
        assert_retry_exact(alg, after, now, cost, decision)
        assert_reset_exact(alg, after, now, decision)
        probes = [(now, 1), (now, alg.capacity), (now + 1, 1)]
        if index + 1 < len(steps):
            probes.append(steps[index + 1][:2])
        if decision.allowed and cost:
            # Refunding what was just taken decides as if the request never happened.
            assert_equivalent(alg, alg.refund(after, now, cost), before, probes)
        else:
            # A denied or free request consumes nothing.
            assert_equivalent(alg, after, before, probes)
        # A cost above capacity is refused now and forever, and changes nothing.
        huge = alg.capacity + 1 + index % 3
        later = now + (100 * alg.rate.window_ms if index % 2 else 0)
        refused, kept = alg.check(after, later, huge)
        assert not refused.allowed
        assert refused.retry_after == max(1, refused.reset_after)
        assert_equivalent(alg, kept, after, [(later, 1), (later, alg.capacity)])


@by_name
@PROPERTY
@given(data=st.data())
def test_encode_decode_round_trip_keeps_future_decisions(name: str, data: st.DataObject) -> None:
    alg, reqs = data.draw(scenarios(name))
    state: Any = None
    stored: list[Decision] = []
    for now, cost in reqs:
        if state is not None:
            encoded = alg.encode(state)
            assert all(type(value) is int and abs(value) < JS_SAFE for value in encoded)
            assert alg.decode(encoded) == state
            state = alg.decode(json.loads(json.dumps(encoded)))
        decision, state = alg.check(state, now, cost)
        stored.append(decision)
    assert stored == decisions_of(alg, reqs)


@by_name
@PROPERTY
@given(data=st.data())
def test_idle_at_reset_and_full_refund_give_a_fresh_state(name: str, data: st.DataObject) -> None:
    alg, reqs = data.draw(scenarios(name))
    state = final_state(alg, reqs)
    last = reqs[-1][0] if reqs else 0

    # From idle_at on, the state decides like a fresh one ...
    idle = alg.idle_at(state)
    start = max(idle, last) + data.draw(st.sampled_from((0, 0, 1, alg.rate.window_ms)))
    follow = data.draw(requests(alg.rate, alg.capacity, start, 0, 15))
    assert decisions_of(alg, follow, state) == decisions_of(alg, follow)
    # ... and not a millisecond earlier: the full capacity does not fit yet.
    if state is not None and idle - 1 >= last:
        assert not alg.peek(state, idle - 1, alg.capacity).allowed

    # reset() is the fresh state.
    assert alg.reset() is None

    # Refunding more than was ever taken stops at the fresh state.
    refunded = alg.refund(state, last, 10 * alg.capacity + 10)
    probes = [(last, c) for c in (1, alg.capacity, alg.capacity + 1)]
    assert_equivalent(alg, refunded, None, probes)


@pytest.mark.parametrize("name", ["fixed_window", "sliding_window", "sliding_log"])
@PROPERTY
@given(data=st.data())
def test_a_refund_made_later_is_as_if_the_request_had_never_been_admitted(
    name: str, data: st.DataObject
) -> None:
    """A probe's finding: a refund arriving in a later window freed a unit of that window
    (fixed and sliding windows), or a newer request's log entry: 6 passed a limit of 5.
    Given when the request was admitted (``at``), a refund made any time later leaves the
    state as if that request had never come, whenever the others were decided alike.

    (Not so for a bucket: one that would have filled up without the request, while it was
    out, has lost refill the refund cannot tell; see the README's refunds.)"""
    alg, reqs = data.draw(scenarios(name))
    admitted = [i for i, (now, cost, _, d, _) in enumerate(walk(alg, reqs)) if d.allowed and cost]
    if not admitted:
        return
    chosen = data.draw(st.sampled_from(admitted))
    at, cost = reqs[chosen]
    without = reqs[:chosen] + reqs[chosen + 1 :]
    with_decisions = decisions_of(alg, reqs)
    without_decisions = decisions_of(alg, without)
    others = with_decisions[:chosen] + with_decisions[chosen + 1 :]
    if [d.allowed for d in others] != [d.allowed for d in without_decisions]:
        return  # the request's units decided another one: no such counterfactual
    last = reqs[-1][0]
    later = last + data.draw(st.sampled_from((0, 1, alg.rate.window_ms // 2, alg.rate.window_ms)))
    refunded = alg.refund(final_state(alg, reqs), later, cost, at)
    probes = [(later + d, c) for d in (0, 1, alg.rate.window_ms) for c in (1, alg.capacity)]
    assert_equivalent(alg, refunded, final_state(alg, without), probes)


# --- token bucket and GCRA ------------------------------------------------------------------


def reference_bucket(
    rate: Rate, burst: int, reqs: list[Request]
) -> list[tuple[bool, int, int, int]]:
    """A textbook token bucket over exact fractions: (allowed, remaining, reset, retry)."""
    full = Fraction(burst)
    tokens = full
    last: int | None = None
    out: list[tuple[bool, int, int, int]] = []

    def ms_for(amount: Fraction) -> int:
        return max(0, ceil(amount * rate.window_ms / rate.quota))

    for now, cost in reqs:
        if last is not None:
            tokens = min(full, tokens + Fraction(rate.quota * (now - last), rate.window_ms))
        last = now
        if cost <= tokens:
            tokens -= cost
            out.append((True, floor(tokens), ms_for(full - tokens), 0))
        else:
            reset = ms_for(full - tokens)
            retry = max(1, reset) if cost > burst else ms_for(cost - tokens)
            out.append((False, floor(tokens), reset, retry))
    return out


@pytest.mark.parametrize("name", BUCKETS)
@PROPERTY
@given(data=st.data())
def test_bucket_matches_a_fraction_reference_and_bounds_every_interval(
    name: str, data: st.DataObject
) -> None:
    alg, reqs = data.draw(scenarios(name))
    quota, window, burst = alg.rate.quota, alg.rate.window_ms, alg.capacity
    got = [(d.allowed, d.remaining, d.reset_after, d.retry_after) for d in decisions_of(alg, reqs)]
    assert got == reference_bucket(alg.rate, burst, reqs)

    # Never more than burst + quota * t / window in any interval of length t.
    admitted = admitted_of(alg, reqs)
    times = sorted({now for now, _ in admitted})
    for i, first in enumerate(times):
        for last in times[i:]:
            total = sum(cost for now, cost in admitted if first <= now <= last)
            assert total * window <= burst * window + quota * (last - first)


@PROPERTY
@given(data=st.data())
def test_gcra_and_token_bucket_decide_exactly_alike(data: st.DataObject) -> None:
    bucket, reqs = data.draw(scenarios("token_bucket"))
    gcra = make_algorithm("gcra", bucket.limit)
    assert decisions_of(gcra, reqs) == decisions_of(bucket, reqs)


# --- sliding log --------------------------------------------------------------------------


@PROPERTY
@given(data=st.data())
def test_sliding_log_matches_a_brute_force_log_and_bounds_every_window(
    data: st.DataObject,
) -> None:
    alg, reqs = data.draw(scenarios("sliding_log"))
    quota, window = alg.rate.quota, alg.rate.window_ms
    admitted: list[Request] = []
    for now, cost, _, decision, _ in walk(alg, reqs):
        used = sum(c for t, c in admitted if now - window < t <= now)
        expected = used + cost <= quota
        assert decision.allowed == expected
        assert decision.remaining == quota - used - (cost if expected else 0)
        if expected and cost:
            admitted.append((now, cost))
    # The busiest window (t - window, t] ends at an admitted request.
    for end, _ in admitted:
        assert sum(c for t, c in admitted if end - window < t <= end) <= quota


# --- sliding window counter ------------------------------------------------------------------


def aligned_totals(admitted: list[Request], window: int) -> dict[int, int]:
    """Admitted cost per aligned window index."""
    totals: dict[int, int] = {}
    for now, cost in admitted:
        totals[now // window] = totals.get(now // window, 0) + cost
    return totals


@PROPERTY
@given(data=st.data())
def test_sliding_window_matches_a_reference_and_keeps_its_bounds(data: st.DataObject) -> None:
    alg, reqs = data.draw(scenarios("sliding_window"))
    quota, window = alg.rate.quota, alg.rate.window_ms
    admitted: list[Request] = []
    for now, cost, _, decision, _ in walk(alg, reqs):
        index = now // window
        totals = aligned_totals(admitted, window)
        current, previous = totals.get(index, 0), totals.get(index - 1, 0)
        used = previous * (window - (now - index * window)) // window + current
        expected = used + cost <= quota
        assert decision.allowed == expected
        assert decision.remaining == quota - used - (cost if expected else 0)
        if expected and cost:
            admitted.append((now, cost))
    # Every aligned window holds at most the quota ...
    assert all(total <= quota for total in aligned_totals(admitted, window).values())
    # ... so any interval [t, t + window), which overlaps two of them, at most twice it.
    for start, _ in admitted:
        assert sum(c for t, c in admitted if start <= t < start + window) <= 2 * quota


# --- fixed window -------------------------------------------------------------------------


@PROPERTY
@given(data=st.data())
def test_fixed_window_matches_a_reference_and_resets_at_edges(data: st.DataObject) -> None:
    alg, reqs = data.draw(scenarios("fixed_window"))
    quota, window = alg.rate.quota, alg.rate.window_ms
    admitted: list[Request] = []
    for now, cost, _, decision, _ in walk(alg, reqs):
        count = aligned_totals(admitted, window).get(now // window, 0)
        assert decision.allowed == (count + cost <= quota)
        if count == 0 and cost <= quota:
            assert decision.allowed  # a new window starts from zero
        if decision.allowed:
            assert decision.remaining == quota - count - cost
            if cost:
                admitted.append((now, cost))
        elif cost <= quota:
            assert decision.retry_after == (now // window + 1) * window - now
    assert all(total <= quota for total in aligned_totals(admitted, window).values())


# --- a clock that goes back -----------------------------------------------------------------


@st.composite
def wobbly_scenarios(draw: st.DrawFn, name: str) -> tuple[Algorithm[Any], list[Request]]:
    """Like :func:`scenarios`, but a quarter of the steps move the clock BACK (up to two
    windows), as a Durable Object's clock may after a move between machines."""
    alg, reqs = draw(scenarios(name))
    window = alg.rate.window_ms
    out: list[Request] = []
    shift = 0
    for index, (now, cost) in enumerate(reqs):
        if index and draw(st.integers(0, 3)) == 0:
            shift += draw(st.integers(1, 2 * window))
        out.append((now - shift, cost))
    return alg, out


def effective_admissions(alg: Algorithm[Any], reqs: list[Request]) -> list[Request]:
    """The admitted requests, each placed at its effective time: the latest of its own
    time and the effective times of the admissions before it (what the state records)."""
    admitted: list[Request] = []
    latest: int | None = None
    for now, cost, _, decision, _ in walk(alg, reqs):
        if decision.allowed and cost:
            latest = now if latest is None else max(latest, now)
            admitted.append((latest, cost))
    return admitted


@by_name
@PROPERTY
@given(data=st.data())
def test_a_clock_that_goes_back_never_admits_beyond_the_limit(
    name: str, data: st.DataObject
) -> None:
    """With the clock jumping back, the limit holds over effective times: time stands
    still for the key until the clock catches up with what it has recorded."""
    alg, reqs = data.draw(wobbly_scenarios(name))
    quota, window, capacity = alg.rate.quota, alg.rate.window_ms, alg.capacity
    for _, cost, before, decision, after in walk(alg, reqs):
        assert_consumes_nothing_unless_admitted(cost, before, decision, after)
    admitted = effective_admissions(alg, reqs)
    times = sorted({t for t, _ in admitted})
    if name in BUCKETS:
        for i, first in enumerate(times):
            for last in times[i:]:
                total = sum(c for t, c in admitted if first <= t <= last)
                assert total * window <= capacity * window + quota * (last - first)
    elif name == "sliding_log":
        for end in times:
            assert sum(c for t, c in admitted if end - window < t <= end) <= quota
    else:  # the aligned counters
        assert all(total <= quota for total in aligned_totals(admitted, window).values())


@PROPERTY
@given(
    quota=st.integers(1, 300),
    window=st.integers(1, 400),
    steps=st.lists(
        st.tuples(st.integers(0, 60), st.integers(0, 3), st.integers(0, 1_000)),
        min_size=1,
        max_size=400,
    ),
)
def test_sliding_log_states_stay_valid_when_older_ones_are_reused(
    quota: int, window: int, steps: list[tuple[int, int, int]]
) -> None:
    """States share an append-only buffer: checking from any earlier state (as a peek, a
    retry or a test does) must decide as if that state were the only one, and must not
    change what the other states hold. Long runs also go through the buffer's compaction."""
    alg = make_algorithm("sliding_log", Limit(Rate(quota, window)))
    now = EPOCH_MS
    history: list[Any] = [None]
    logs: list[tuple[tuple[int, int], ...]] = [()]
    for gap, cost, pick in steps:
        now += gap
        # Mostly the newest state (the Durable Object's case), sometimes an older one.
        index = len(history) - 1 if pick % 4 else pick % len(history)
        base, log = history[index], logs[index]
        used = sum(c for t, c in log if now - window < t <= now)
        decision, state = alg.check(base, now, cost)
        assert decision.allowed == (used + cost <= quota)
        if decision.allowed and cost:
            stamp = max([now, *(t for t, _ in log)])
            live = [(t, c) for t, c in log if t > now - window]
            if live and live[-1][0] == stamp:
                live[-1] = (stamp, live[-1][1] + cost)
            else:
                live.append((stamp, cost))
            expected = tuple(live)
        else:
            expected = log
            assert state is base
        assert (state.entries if state is not None else ()) == expected
        history.append(state)
        logs.append(expected)
    for state, log in zip(history, logs, strict=True):
        assert (state.entries if state is not None else ()) == log
