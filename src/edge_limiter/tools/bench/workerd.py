"""The sections on local workerd: the gateway per request against JavaScript peers, one hot
key's Durable Object, a flooded key beside other clients, and token leases across two
isolates."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from edge_limiter.tools.bench import lease_limits
from edge_limiter.tools.bench import runtime as rt
from edge_limiter.tools.bench.report import Report
from edge_limiter.tools.bench.runtime import KEY
from edge_limiter.tools.build_worker import build
from edge_limiter.tools.local_gateway import LocalGateway


def _gateway_paths(origin: str, gateway: str, peer: str) -> dict[str, tuple[str, dict[str, str]]]:
    """The paths of the gateway section on one runtime: name -> (URL, headers)."""
    return {
        "origin (Node, direct)": (f"{origin}/x", {}),
        "JS Worker: forward": (f"{peer}/forward/x", {}),
        "JS Worker: JS Durable Object + forward": (f"{peer}/limited/x", {}),
        "Python: unmatched path (forward)": (f"{gateway}/unmatched/x", {}),
        "Python: limited route (object + forward)": (f"{gateway}/limited/x", {KEY: "hot"}),
        "Python: limited, write_behind 50ms": (f"{gateway}/behind/x", {KEY: "hot"}),
        "Python: limited, token leases": (f"{gateway}/leased/x", {KEY: "hot"}),
        "Python: denied (429)": (f"{gateway}/small/x", {KEY: "denied"}),
    }


def section_gateway(report: Report, quick: bool, origin: str) -> None:
    requests = 50 if quick else 1000
    many = 100 if quick else 2000
    repeat = 1 if quick else 3
    inflight = 50
    samples: dict[str, list[dict[str, Any]]] = {}
    order: list[str] = []

    def measure(gw: LocalGateway, paths: dict[str, tuple[str, dict[str, str]]]) -> None:
        for name, (url, headers) in paths.items():
            if name not in order:
                order.append(name)
            samples.setdefault(name + "|1", []).append(
                rt.load(url, requests=requests, concurrency=1, headers=headers)
            )
            cpu_s = rt.workerd_cpu_s(gw)
            burst = rt.load(url, requests=many, concurrency=inflight, headers=headers)
            # workerd's CPU time over the burst, per request (the load and the origin run
            # in processes of their own).
            burst["cpu_ms"] = (rt.workerd_cpu_s(gw) - cpu_s) * 1000 / many
            samples.setdefault(name + f"|{inflight}", []).append(burst)

    for _ in range(repeat):
        # A fresh runtime per round (see _fresh_runtimes below), all paths interleaved in it.
        with rt.runtime(origin) as gw:
            # The denial path: a key exhausted first (100/minute).
            rt.load(f"{gw.url}/small/x", requests=150, concurrency=1, headers={KEY: "denied"})
            measure(gw, _gateway_paths(origin, gw.url, gw.peer_urls["peer"]))
        # The floor of any Python Worker on this host (a runtime of its own, same round),
        # and of any Python rate limiter: the least a Python Durable Object does per call.
        with rt.bare_python(origin) as bare:
            measure(
                bare,
                {
                    "bare Python Worker: answer": (f"{bare.url}/x", {}),
                    "bare Python Worker: forward": (f"{bare.url}/forward/x", {}),
                    "bare Python Worker: minimal Python Durable Object + forward": (
                        f"{bare.url}/object-floor/x",
                        {},
                    ),
                },
            )
    # The floor's rows beside the JavaScript ones (origin, forward, object) they compare with.
    floor = [name for name in order if name.startswith("bare ")]
    rest = [name for name in order if name not in floor]
    order = rest[:3] + floor + rest[3:]
    rows: dict[str, Any] = {}
    for name in order:
        one, burst = samples[name + "|1"], samples[name + f"|{inflight}"]
        rows[name] = {
            "p50": rt.median(one, "p50"),
            "p99": rt.median(one, "p99"),
            "rps": rt.median(burst, "rps"),
            "cpu_ms": rt.median(burst, "cpu_ms"),
            "statuses": sorted({status for run in one + burst for status in run["statuses"]}),
        }
    report.section(
        "gateway",
        {"requests": requests, "many": many, "inflight": inflight, "repeat": repeat, "rows": rows},
    )


def section_object(report: Report, quick: bool, origin: str) -> None:
    """The project's object against the JavaScript one on the same workerd; then, on a
    runtime of their own (the same round), the floor: the least a Python Durable Object
    does for the same read-modify-write, and for nothing at all, each against the
    JavaScript object measured again on that runtime."""
    requests = 500 if quick else 5000
    repeat = 1 if quick else 5
    results: dict[str, list[dict[str, Any]]] = {}
    # each row -> the JavaScript object row of the runtime it ran on
    runtimes: dict[str, str] = {}
    project_js = "JS Durable Object"
    floor_js = "JS Durable Object (the floor's runtime)"

    def measure(runtime_name: str, urls: list[tuple[str, str]]) -> None:
        for name, url in urls:
            runtimes[name] = runtime_name
            results.setdefault(name, []).append(rt.load(url, requests=requests, concurrency=50))

    for _ in range(repeat):
        with rt.runtime(origin) as gw:
            peer = gw.peer_urls["peer"]
            measure(
                project_js,
                [
                    (project_js, f"{peer}/object?key=hot-js"),
                    ("Python Durable Object (this project's)", f"{peer}/python-object?key=hot-py"),
                    (
                        f"Python, write_behind {rt.BENCH_WRITE_BEHIND_MS} ms (opt-in; no write "
                        "per decision)",
                        f"{peer}/python-object-behind?key=hot-py-behind",
                    ),
                ],
            )
        with rt.bare_python(origin) as bare:
            peer = bare.peer_urls["peer"]
            measure(
                floor_js,
                [
                    (floor_js, f"{peer}/object?key=hot-js"),
                    (
                        "minimal Python Durable Object: the same read-modify-write (the floor)",
                        f"{peer}/floor-object?key=hot-floor",
                    ),
                    (
                        "minimal Python Durable Object: a method that does nothing",
                        f"{peer}/floor-nothing?key=hot-nothing",
                    ),
                ],
            )
    rows = {
        name: {
            "rps": rt.median(runs_, "rps"),
            "p50": rt.median(runs_, "p50"),
            "p99": rt.median(runs_, "p99"),
            "statuses": sorted({status for run in runs_ for status in run["statuses"]}),
            "peer": runtimes[name],
        }
        for name, runs_ in results.items()
    }
    report.section("object", {"requests": requests, "repeat": repeat, "rows": rows})


def _lease_config(origin: str) -> dict[str, Any]:
    def route(name: str, limits: str, algorithm: str, **more: Any) -> dict[str, Any]:
        match = {"path": f"/{name}/*"}
        return {"name": name, "match": match, "limits": limits, "algorithm": algorithm} | {
            "key": f"header:{KEY}",
            **more,
        }

    return {
        "origin": origin,
        "routes": [
            route("plain", rt.BENCH_LIMIT, "gcra"),
            route("leased", rt.BENCH_LIMIT, "gcra", leases=True),
            route("plain-at-limit", "3000/day", "fixed_window"),
            route("leased-at-limit", "3000/day", "fixed_window", leases=True),
        ],
    }


def section_leases(report: Report, quick: bool, origin: str) -> None:
    per_isolate = 150 if quick else 3000
    inflight = 25
    repeat = 1 if quick else 3
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="edge-limiter-bench-") as tmp:
        worker = Path(tmp) / "worker"
        build(worker)
        for _ in range(repeat):
            gw = LocalGateway(worker, {"EDGE_LIMITER": _lease_config(origin)}, replicas=2)
            with gw:
                bases = [gw.url, *gw.replica_urls]
                for route in ("plain", "leased", "plain-at-limit", "leased-at-limit"):
                    key = {KEY: f"{route}-{time.time_ns()}"}
                    before = rt.decide_calls(gw)
                    started = time.monotonic()
                    loads = [
                        rt.start_load(
                            f"{base}/{route}/x",
                            requests=per_isolate,
                            concurrency=inflight,
                            headers=key,
                            warmup=0,
                        )
                        for base in bases
                    ]
                    results = [rt.finish(load) for load in loads]
                    seconds = time.monotonic() - started
                    calls = rt.decide_calls(gw) - before
                    admitted = sum(r["statuses"].get("200", 0) for r in results)
                    runs.setdefault(route, []).append(
                        {
                            "rps": sum(r["rps"] for r in results),
                            "p50": statistics.median(r["p50"] for r in results),
                            "p99": max(r["p99"] for r in results),
                            "admitted": admitted,
                            "calls": calls,
                            "calls_per_admitted": calls / max(1, admitted),
                            "seconds": seconds,
                        }
                    )
        # Where the limit binds: 2 and 3 isolates, every leasable algorithm, steady load
        # and load moving between isolates, each beside its control and the simulation.
        seconds, clients = (1.0, 8) if quick else (12.0, 40)
        at_limit = lease_limits.measure(
            worker,
            origin,
            isolate_counts=(2,) if quick else (2, 3),
            algorithms=("fixed_window",) if quick else lease_limits.ALGORITHMS,
            modes=("steady", "moving"),
            seconds=seconds,
            clients=clients,
            align=not quick,
        )
        for run in at_limit:
            run["simulated"] = lease_limits.simulated(run, seconds, clients)
    report.section(
        "leases",
        {
            "per_isolate": per_isolate,
            "inflight": inflight,
            "repeat": repeat,
            "runs": runs,
            "at_limit": {
                "seconds": seconds,
                "clients": clients,
                "limit": lease_limits.LIMIT,
                "runs": at_limit,
            },
        },
    )
