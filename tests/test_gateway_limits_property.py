"""The whole gateway never admits more than a route's limits allow, whatever they are.

A route of any algorithm with one or two limits, any cost, with or without token leases and
refunds of failed requests, served by one to three isolates that share its objects; clients
send at times drawn by Hypothesis on the simulated clock, and the origin fails some requests.
The admitted requests the origin answered (its 200s) are then held to each limit's own bound,
computed here from their times alone, and every answer is a 200, a 429 or a 503. The algorithms are checked against models in
tests/core/ratelimit/test_algorithm_properties.py; this runs the same bounds through
everything between the request and the Durable Object: the key, the multi-limit rule, the
object's codec, the deny cache, the leases, the refunds and the isolates' sharing.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from edge_limiter.core.errors import ConfigError
from edge_limiter.testing import OriginCall, Reply, Simulator
from tests.examples import examples
from tests.fakes import SIM_API, one_route

API = SIM_API
ALGORITHMS = ("token_bucket", "gcra", "fixed_window", "sliding_window", "sliding_log")
WINDOW_S = (1, 10, 60)
CLIENTS = ("198.51.100.1", "198.51.100.2")


@dataclass(frozen=True)
class Scenario:
    algorithm: str
    limits: tuple[tuple[int, int], ...]  # (quota, window in seconds)
    cost: int
    leases: bool
    refund: bool
    isolates: int
    steps: tuple[tuple[int, int, int, int], ...]  # (ms after the previous, isolate, client, status)

    def config(self) -> dict[str, object]:
        limits = "; ".join(f"{quota} per {seconds} seconds" for quota, seconds in self.limits)
        route: dict[str, object] = {"algorithm": self.algorithm, "cost": self.cost}
        if self.leases:
            route["leases"] = True
        if self.refund:
            route["refund_on"] = [503]
        return one_route(limits=limits, **route)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    algorithm = draw(st.sampled_from(ALGORITHMS))
    windows = draw(st.lists(st.sampled_from(WINDOW_S), min_size=1, max_size=2, unique=True))
    limits = tuple((draw(st.integers(1, 12)), seconds) for seconds in windows)
    isolates = draw(st.integers(1, 3))
    step = st.tuples(
        st.sampled_from((0, 0, 1, 50, 300, 999, 1000, 2500, 9000)),
        st.integers(0, isolates - 1),
        st.integers(0, len(CLIENTS) - 1),
        st.sampled_from((200, 200, 200, 503)),
    )
    return Scenario(
        algorithm=algorithm,
        limits=limits,
        cost=draw(st.integers(1, 3)),
        leases=algorithm != "sliding_log" and draw(st.booleans()),
        refund=draw(st.booleans()),
        isolates=isolates,
        steps=tuple(draw(st.lists(step, min_size=1, max_size=60))),
    )


def over_the_bound(algorithm: str, quota: int, window_ms: int, spent: list[tuple[int, int]]) -> str:
    """What in ``spent`` (admitted ``(time, units)``, in time order) one limit does not allow,
    or ``""``."""
    if algorithm in ("fixed_window", "sliding_window"):
        # Both count each window aligned to the clock: never more than the quota in one;
        # the sliding window's estimate at each admission (the previous window's units
        # weighted by what the rolling window still covers of it, rounded down, and this
        # window's so far) within the quota too.
        used: dict[int, int] = {}
        for at, units in spent:
            index = at // window_ms
            used[index] = used.get(index, 0) + units
            estimate = used[index]
            if algorithm == "sliding_window":
                left = window_ms - (at - index * window_ms)
                estimate += used.get(index - 1, 0) * left // window_ms
            if estimate > quota:
                return f"{estimate} units counted at {at} (window from {index * window_ms})"
        return ""
    before = [0]  # before[i]: the units of spent[:i]
    for _, units in spent:
        before.append(before[-1] + units)
    for j, (end, _) in enumerate(spent):
        for i in range(j + 1):
            start = spent[i][0]
            units = before[j + 1] - before[i]
            if algorithm == "sliding_log":
                allowed = Fraction(quota) if end - start < window_ms else None
            else:  # a bucket of `quota` refilled at quota per window
                allowed = quota + Fraction(quota * (end - start), window_ms)
            if allowed is not None and units > allowed:
                return f"{units} units in [{start}, {end}] ms, {allowed} allowed"
    return ""


@settings(
    max_examples=examples(400),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(scenarios())
def test_no_route_admits_more_than_each_of_its_limits_allows(scenario: Scenario) -> None:
    status = 200

    def origin(call: OriginCall) -> Reply:
        del call
        return Reply(status)

    try:
        first = Simulator(scenario.config(), origin=origin)
    except ConfigError:
        reject()  # e.g. a bucket too small for its lease's reserve: refused, as it should be
    isolates = [first] + [first.new_isolate() for _ in range(scenario.isolates - 1)]
    spent: dict[str, list[tuple[int, int]]] = {ip: [] for ip in CLIENTS}
    for gap, isolate, client, status in scenario.steps:  # noqa: B007 - the origin reads it
        first.advance(gap)
        answer = isolates[isolate].request("GET", f"{API}/v1/x", ip=CLIENTS[client])
        # 503: the origin's own, or the gateway's once the origin's breaker opened.
        assert answer.status in (200, 429, 503), (answer.status, answer.body[:300])
        if answer.status == 200:
            spent[CLIENTS[client]].append((first.now_ms, scenario.cost))
        elif answer.status == 429:
            assert int(answer.headers["retry-after"]) >= 0
    for ip, admitted in spent.items():
        for quota, seconds in scenario.limits:
            problem = over_the_bound(scenario.algorithm, quota, seconds * 1000, admitted)
            assert not problem, f"{ip}, limit {quota} per {seconds} s: {problem}"
