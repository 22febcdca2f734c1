"""Token leases where the limit binds, on local workerd: one key driven from 2 and 3
isolates at once (steady), or from one isolate after another (the load moves), for every
leasable algorithm, each run beside the same route without leases (the control) on a
fresh key, at the same phase of the limit's window.

What it reports per run: the requests admitted with leases and in the control, the
ratio, the object calls per admitted request, and the most the limit allows over the
run's span (the buckets and the fixed window; a sliding window's is the control's). The
simulation run at the same operating point (:mod:`edge_limiter.tools.lease_sim`) is
reported beside it by the section (see :func:`simulated`).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from edge_limiter.core.ratelimit.rates import Limit, parse_rate
from edge_limiter.tools.bench import runtime as rt
from edge_limiter.tools.bench.runtime import KEY
from edge_limiter.tools.lease_sim import Scenario, simulate
from edge_limiter.tools.local_gateway import LocalGateway

#: The limit every run drives (window 10 s: a run of 12 s spans two windows).
LIMIT = "200 per 10 seconds"
WINDOW_S = 10
QUOTA = 200
#: The leasable algorithms, each a leased route and a control route.
ALGORITHMS = ("token_bucket", "gcra", "fixed_window", "sliding_window")
#: Where in the window a run starts (seconds after a window's start).
PHASE_S = 0.3


def routes() -> list[dict[str, Any]]:
    """The routes the runs use: ``lease-<algorithm>`` and ``plain-<algorithm>``."""
    out = []
    for algorithm in ALGORITHMS:
        for name, leases in ((f"lease-{algorithm}", True), (f"plain-{algorithm}", False)):
            route: dict[str, Any] = {
                "name": name,
                "match": {"path": f"/{name}/*"},
                "limits": LIMIT,
                "algorithm": algorithm,
                "key": f"header:{KEY}",
            }
            if leases:
                route["leases"] = True
            out.append(route)
    return out


def allowed(algorithm: str, seconds: float, started_phase: float) -> int | None:
    """The most the limit admits over a span of ``seconds`` starting ``started_phase``
    seconds into a window (None: a sliding window, judged against its control)."""
    if algorithm in ("token_bucket", "gcra"):
        return QUOTA + int(QUOTA * seconds / WINDOW_S) + 1
    if algorithm == "fixed_window":
        return QUOTA * (1 + int((started_phase + seconds) // WINDOW_S))
    return None


def _align(phase_s: float) -> None:
    """Wait until ``phase_s`` seconds into the limit's next window (wall clock, as the
    object's windows are)."""
    now = time.time()
    wait = (phase_s - now % WINDOW_S) % WINDOW_S
    time.sleep(wait)


def _drive(
    bases: Sequence[str],
    route: str,
    key: str,
    schedule: Sequence[tuple[int, float, float]],
    clients: int,
) -> list[dict[str, Any]]:
    """Run each ``(isolate, start_s, seconds)`` of ``schedule``: ``clients`` closed-loop
    clients on that isolate from ``start_s`` for ``seconds``; each load's summary."""
    results: list[dict[str, Any]] = [{} for _ in schedule]
    started = time.monotonic()

    def one(position: int, isolate: int, start_s: float, seconds: float) -> None:
        delay = start_s - (time.monotonic() - started)
        if delay > 0:
            time.sleep(delay)
        process = rt.start_load(
            f"{bases[isolate]}/{route}/x",
            requests=10**8,
            concurrency=clients,
            duration=seconds,
            headers={KEY: key},
            warmup=0,
        )
        results[position] = rt.finish(process)

    threads = [
        threading.Thread(target=one, args=(position, *item))
        for position, item in enumerate(schedule)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def schedule(mode: str, isolates: int, seconds: float) -> list[tuple[int, float, float]]:
    """``steady``: every isolate the whole time; ``moving``: one isolate after another,
    an equal part of the time each."""
    if mode == "steady":
        return [(index, 0.0, seconds) for index in range(isolates)]
    part = seconds / isolates
    return [(index, index * part, part) for index in range(isolates)]


def run_pair(
    gw: LocalGateway,
    bases: Sequence[str],
    algorithm: str,
    mode: str,
    *,
    seconds: float,
    clients: int,
    align: bool = True,
) -> dict[str, Any]:
    """One leased run and its control, each on a fresh key at the same window phase
    (``align``: else at once, as ``--quick`` runs, whose figures mean nothing)."""
    out: dict[str, Any] = {"algorithm": algorithm, "mode": mode, "isolates": len(bases)}
    plan = schedule(mode, len(bases), seconds)
    for kind in ("lease", "plain"):
        route = f"{kind}-{algorithm}"
        key = f"{route}-{mode}-{len(bases)}-{time.time_ns()}"
        if align:
            _align(PHASE_S)
        before = rt.decide_calls(gw)
        results = _drive(bases, route, key, plan, clients)
        calls = rt.decide_calls(gw) - before
        admitted = [r["statuses"].get("200", 0) for r in results]
        requests = sum(r["requests"] for r in results)
        statuses = sorted({s for r in results for s in r["statuses"]})
        out[kind] = {
            "admitted": sum(admitted),
            "by_isolate": admitted,
            "requests": requests,
            "calls": calls,
            "statuses": statuses,
            "rps": requests / seconds,
        }
    out["allowed"] = allowed(algorithm, seconds, PHASE_S)
    lease, plain = out["lease"], out["plain"]
    out["ratio"] = lease["admitted"] / max(1, plain["admitted"])
    out["calls_per_admitted"] = lease["calls"] / max(1, lease["admitted"])
    return out


#: The one-way delay of a lease call the simulation uses (µs): the round trips measured
#: on the local runtime under this load (both isolates and the object in one workerd, on
#: a shared 2-core machine) were mostly 5-60 ms.
SIM_DELAY_US = (2_500, 30_000)
#: Where the arrivals start in the window, as measured (the load generator's start).
SIM_PHASE_MS = 500
#: The simulation's seeds: each figure is the median of a run per seed (one seed's run
#: moves by about 5% with the seed, as one runtime run does between rounds).
SIM_SEEDS = (1, 2, 3, 4, 5)


def simulated(
    run: dict[str, Any],
    seconds: float,
    clients: int,
    delay_us: tuple[int, int] = SIM_DELAY_US,
) -> dict[str, Any]:
    """The lease simulation at the operating point of ``run`` (its isolates, algorithm,
    mode, the same limit, phase and duration, and its load: ``clients`` closed-loop
    clients per isolate, each answered as fast on average as the run's were): the ratio of
    admitted requests to its exact counter's, and object calls per admitted request."""
    requests = max(1, run["lease"]["requests"])
    busy = run["isolates"] if run["mode"] == "steady" else 1
    scenario = Scenario(
        run["isolates"],
        max(1, round(requests / seconds)),
        Limit(parse_rate(LIMIT)),
        run["algorithm"],
        skew=0.0,
        duration_ms=int(seconds * 1000),
        delay_us=delay_us,
        phase_ms=SIM_PHASE_MS,
        moving=run["mode"] == "moving",
        clients=clients,
        # A client's mean cycle in the run (its waits for a lease included: a little long).
        cycle_us=int(seconds * 1_000_000 * clients * busy / requests),
    )
    results = [simulate(replace(scenario, seed=seed)) for seed in SIM_SEEDS]
    return {
        "rate": scenario.rate,
        "cycle_ms": scenario.cycle_us / 1000,
        "ratio": statistics.median(r.admitted / max(1, r.reference_admitted) for r in results),
        "calls_per_admitted": statistics.median(r.calls_per_admitted for r in results),
        "over": max(r.over for r in results),
    }


def measure(
    worker: Any,
    origin: str,
    *,
    isolate_counts: Sequence[int],
    algorithms: Sequence[str],
    modes: Sequence[str],
    seconds: float,
    clients: int,
    align: bool = True,
) -> list[dict[str, Any]]:
    """Every (isolates, algorithm, mode) pair of runs, a fresh runtime per isolate count."""

    runs = []
    for isolates in isolate_counts:
        config = {"origin": origin, "routes": routes()}
        with LocalGateway(worker, {"EDGE_LIMITER": config}, replicas=isolates) as gw:
            bases = [gw.url, *gw.replica_urls]
            # Every isolate warmed up (Pyodide booted, the config parsed) on another route.
            for base in bases:
                rt.load(f"{base}/plain-gcra/x", requests=20, concurrency=2, warmup=0)
            for algorithm in algorithms:
                for mode in modes:
                    runs.append(
                        run_pair(
                            gw,
                            bases,
                            algorithm,
                            mode,
                            seconds=seconds,
                            clients=clients,
                            align=align,
                        )
                    )
    return runs
