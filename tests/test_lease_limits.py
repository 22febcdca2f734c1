"""The bench's simulation beside the runs where the limit binds
(``edge_limiter.tools.bench.lease_limits.simulated``): it drives the run's own closed-loop
load, not Poisson arrivals at the run's rate."""

from __future__ import annotations

import statistics
from typing import Any

from edge_limiter.core.ratelimit.rates import Limit, parse_rate
from edge_limiter.tools.bench.lease_limits import simulated
from edge_limiter.tools.lease_sim import Scenario, simulate


def run(mode: str, requests: int) -> dict[str, Any]:
    return {
        "algorithm": "token_bucket",
        "mode": mode,
        "isolates": 2,
        "lease": {"admitted": 420, "requests": requests, "calls": 40},
    }


def test_each_client_cycles_as_fast_as_the_runs_did() -> None:
    # 12 s, 40 clients: 12,000 requests from one busy isolate at a time is a cycle of 40 ms
    # per client; from two at once, 80 ms.
    moving = simulated(run("moving", 12_000), 12.0, 40)
    steady = simulated(run("steady", 12_000), 12.0, 40)
    assert moving["cycle_ms"] == 40.0 and steady["cycle_ms"] == 80.0
    for figures in (moving, steady):
        assert figures["over"] == 0
        # 200 per 10 s over 12 s: the bucket binds, and leases admit close to its counter.
        assert 0.9 <= figures["ratio"] <= 1.0
        assert 0 < figures["calls_per_admitted"] < 1


def calls_per_admitted(rate: int, clients: int) -> float:
    """The median over three seeds, three isolates, load moving between them."""
    limit = Limit(parse_rate("200 per 10 seconds"))
    return statistics.median(
        simulate(
            Scenario(
                3, rate, limit, "token_bucket", skew=0.0, duration_ms=12_000,
                delay_us=(2_500, 30_000), phase_ms=500, moving=True, seed=seed,
                clients=clients, cycle_us=int(clients * 1_000_000 / rate) if clients else 0,
            )
        ).calls_per_admitted
        for seed in (1, 2, 3)
    )  # fmt: skip


def test_a_closed_loop_holds_its_calls_per_admitted_where_poisson_arrivals_fall() -> None:
    # What the runtime showed (about 1 call per 12 admitted on 3 isolates at 1,400-1,700
    # requests/s): open-loop arrivals pile up while a lease call is out, so the faster
    # they come the larger each ask, and the fewer the calls; 40 clients per isolate can
    # have no more than 40 requests waiting, whatever their speed.
    closed = calls_per_admitted(1_500, 40), calls_per_admitted(1_900, 40)
    poisson = calls_per_admitted(1_500, 0), calls_per_admitted(1_900, 0)
    assert abs(closed[1] - closed[0]) <= 0.1 * closed[0]
    assert poisson[1] < poisson[0]
    assert closed[1] > 1.2 * poisson[1]
