"""A sliding window's lease plan (``edge_limiter.core.ratelimit.leases.plan``): never more than the
window's room at any instant, each allowance non-decreasing, and the busiest holders
sharing the window's last units."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.ratelimit.leases.plan import SCALE, Allowance, Plan, plan_window
from tests.examples import examples

T0 = 1_700_000_040_000  # a multiple of every window used here (60 s included)


def room(quota: int, current: int, previous: int, window: int, t: int) -> int:
    """The sliding window counter's exact room at ``t`` (its own rounding)."""
    end = (t // window + 1) * window
    return quota - current - previous * (end - t) // window


Case = tuple[int, int, int, int, int, dict[str, int]]
"""A drawn plan's window, quota, previous count, current count, now and rates."""


@st.composite
def plans(draw: st.DrawFn) -> Case:
    window = draw(st.sampled_from([50, 100, 1_000, 60_000]))
    quota = draw(st.integers(1, 20_000))
    previous = draw(st.integers(1, quota))
    now = T0 + draw(st.integers(0, window - 1))
    elapsed = now - T0
    # The window's count as the object could hold it: the estimate within the quota.
    most = quota - previous * (window - elapsed) // window
    current = draw(st.integers(0, max(0, most)))
    rates = draw(
        st.dictionaries(
            st.text("abcdefgh", min_size=1, max_size=3),
            st.integers(0, 100_000),
            min_size=1,
            max_size=40,
        )
    )
    return window, quota, previous, current, now, rates


def plan_of(case: Case) -> Plan | None:
    """The plan for a drawn case, whatever the demand (``binding=0``)."""
    window, quota, previous, current, now, rates = case
    return plan_window(
        now, window, quota, current=current, previous=previous, rates=rates, binding=0.0
    )


@settings(max_examples=examples(300), deadline=None)
@given(plans())
def test_the_allowances_never_pass_the_windows_room(case: Case) -> None:
    window, quota, previous, current, now, rates = case
    plan = plan_of(case)
    if plan is None:
        return
    end = T0 + window
    allowances = list(plan.allowances.values())
    assert plan.window_index == now // window
    assert set(plan.allowances) <= set(rates)
    step = max(1, (end - now) // 400)
    instants = sorted({*range(now, end, step), end - 1, *(a.stop_at for a in allowances)})
    last = dict.fromkeys(plan.allowances, 0)
    for t in instants:
        if t >= end:
            continue
        used = 0
        for holder, allowance in plan.allowances.items():
            value = allowance.at(t)
            assert value >= last[holder]  # never taken back
            last[holder] = value
            used += value
        assert used <= room(quota, current, previous, window, t), t
    for allowance in allowances:
        assert allowance.end == end
        assert allowance.at(end - 1) == allowance.final > 0
        assert allowance.at(end) == 0  # it ends with the window
    # The counted total is what the window can still admit, or less.
    assert plan.committed <= room(quota, current, previous, window, end - 1)


@settings(max_examples=examples(200), deadline=None)
@given(plans(), st.data())
def test_reaches_at_is_the_first_instant_an_allowance_has_the_units(
    case: Case, data: st.DataObject
) -> None:
    now = case[4]
    plan = plan_of(case)
    if plan is None:
        return
    allowance = data.draw(st.sampled_from(sorted(plan.allowances.values())))
    start = data.draw(st.integers(now, allowance.end - 1))
    units = data.draw(st.integers(1, allowance.final + 1))
    at = allowance.reaches_at(units, start)
    if units > allowance.final:
        assert at == allowance.end
        return
    assert start <= at < allowance.end
    assert allowance.at(at) >= units
    assert at == start or allowance.at(at - 1) < units


def test_one_holders_allowance_is_the_counters_own_room() -> None:
    # 5 per 10 s, all 5 used in the previous window: the counter admits one at once (its
    # estimate rounds down), and a holder alone must not wait for a whole unit to slide
    # out (it was denied a request sent at the counter's Retry-After).
    plan = plan_window(T0, 10_000, 5, current=0, previous=5, rates={"a": 5_000}, binding=0.0)
    assert plan is not None
    allowance = plan.allowances["a"]
    for t in range(T0 + 1, T0 + 10_000, 7):
        assert allowance.at(t) == room(5, 0, 5, 10_000, t), t


def test_the_busiest_share_the_last_units_and_the_quietest_stop_early() -> None:
    # A full previous window of 5,000 at 5,000/s: 5 units/ms slide out. The busiest
    # holders (their rates add up to the growth) keep their share to the end; the others
    # stop STOP_GAPS of their own gaps before it; one whose gaps are longer than the
    # window gets nothing.
    rates = {"big": 3_000, "mid": 2_500, "small": 100, "tiny": 2}
    plan = plan_window(T0 + 2, 1_000, 5_000, current=0, previous=5_000, rates=rates)
    assert plan is not None
    allowances = plan.allowances
    assert allowances["big"].stop_at == allowances["mid"].stop_at == T0 + 999
    # 3 gaps of 10 ms, rounded up to its step of the stops' grid (a quarter apart)
    assert T0 + 1_000 - 30 * 5 // 4 <= allowances["small"].stop_at <= T0 + 1_000 - 30
    assert "tiny" not in allowances
    # Until the small one stops, the supply goes out in proportion to the rates.
    at = T0 + 500
    big, mid, small = (allowances[h].at(at) for h in ("big", "mid", "small"))
    supplied = room(5_000, 0, 5_000, 1_000, at)
    assert big + mid + small <= supplied <= big + mid + small + 3
    assert big / (big + mid + small) == pytest.approx(3_000 / 5_600, abs=0.01)
    assert plan.committed >= room(5_000, 0, 5_000, 1_000, T0 + 999) - 3


def test_no_plan_when_nothing_binds_or_nothing_grows_or_the_shares_are_too_small() -> None:
    def plan(**kwargs: object) -> object:
        args: dict[str, object] = {"current": 0, "previous": 5_000, "rates": {"a": 9_000}}
        args.update(kwargs)
        return plan_window(T0 + 2, 1_000, 5_000, **args)  # type: ignore[arg-type]

    assert plan() is not None
    assert plan(rates={"a": 4_000}) is None  # demand below the supply: ordinary leases
    assert plan(previous=0) is None  # nothing slides out: the supply is all there
    assert plan(current=5_000) is None  # nothing left
    assert plan(rates={f"h{n}": 10 for n in range(2_000)}) is None  # 2.5 units each


def test_allowances_round_trip_and_malformed_ones_are_refused() -> None:
    allowance = Allowance(
        ((T0 + 2, 0, 3 * SCALE), (T0 + 90, 300 * SCALE, SCALE)), T0 + 990, 1200, T0 + 1_000
    )
    assert Allowance.from_list(allowance.to_list()) == allowance
    assert allowance.at(T0 + 1) == 0
    assert allowance.at(T0 + 12) == 30
    assert allowance.at(T0 + 100) == 310
    assert allowance.at(T0 + 995) == 1200
    for bad in (
        None,
        [1, 2, 3],
        [T0 + 990, 1200, T0 + 1_000, []],
        [T0 + 990, 1200, T0 + 1_000, [[T0 + 90, 0, 1], [T0 + 2, 0, 1]]],  # out of order
        [T0 + 990, 1200, T0 + 1_000, [[T0 + 2, -1, 1]]],
        [T0 + 990, 1200, T0 + 1_000, [[T0 + 2, 0, True]]],
        [T0 + 1_001, 1200, T0 + 1_000, [[T0 + 2, 0, 1]]],  # stops after its end
        [T0 + 990, 1200, T0 + 1_000, [[T0 + 995, 0, 1]]],  # starts after it stops
    ):
        with pytest.raises(ValueError):
            Allowance.from_list(bad)
