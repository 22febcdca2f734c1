"""The benchmarks: every figure a median over repeated runs and a ratio against a peer
measured in the same run, on the same workload. Results go in BENCHMARKS.md.

Sections (``--only`` picks some; all by default):

- ``core``     the pure core on CPython: ``check`` per algorithm against a minimal token
               bucket and the ``limits`` library's memory storage; the Durable Object step
               (``token_bucket`` against ``sliding_log`` at 10,000/hour); the same on npm
               Pyodide in Node (the version production runs) against CPython;
- ``gateway``  on local workerd, one request at a time and N in flight: the origin alone
               (the load generator's own ceiling), a JavaScript Worker forwarding to it, a
               JavaScript gateway with a JavaScript Durable Object, a bare Python Worker
               (the floor), and the Python gateway on an unmatched path, a limited route,
               the same with write-behind and with token leases, and a denial; then the
               gateway's own work per request on npm Pyodide in Node, without workerd
               (``bench/pyodide_gateway.mjs``), against a bare forward;
- ``object``   one hot key at 50 in flight: the project's Durable Object against a
               JavaScript Durable Object doing the same read-modify-write, both called from
               the same JavaScript Worker;
- ``flood``    a noisy key at 10x its limit (the deny cache's share of denials, exactness),
               and one flooded at R requests/s (open loop, ``hey`` when installed) while 10
               clients of another key run: their throughput and p99 against alone;
- ``leases``   two copies of the Worker (two isolates) driving one hot key at once, on a
               route with token leases against the same route without: requests/s, p50,
               Durable Object calls per admitted request, and the total admitted when the
               limit binds (it must be exactly the limit);
- ``startup``  time to the first answer of a fresh runtime: the project against a bare
               Python Worker on the same host (with and without the project's bindings),
               and where importing the Worker goes on npm Pyodide
               (``bench/pyodide_imports.mjs``);
- ``memory``   workerd's RSS at boot, after N requests and after K distinct keys; storage
               rows left once the keys are idle and cleaned up.

``--quick`` runs every section with small numbers (the test suite does, so the benchmarks
cannot rot); its figures mean nothing. Talks to 127.0.0.1 only.

    .venv/bin/python scripts/bench.py [--quick] [--only core,gateway,...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "bench"))

import runtime as rt  # noqa: E402
from local_gateway import project_deployment  # noqa: E402

SECTIONS = ("core", "gateway", "object", "flood", "leases", "startup", "memory")
KEY = "x-bench-key"


class Report:
    """Markdown tables, printed as each section ends, and every number for ``--json``."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def table(self, title: str, header: list[str], rows: list[list[Any]]) -> None:
        lines = [f"\n### {title}\n", "| " + " | ".join(header) + " |"]
        lines.append("|" + "---|" * len(header))
        for row in rows:
            lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
        print("\n".join(lines), flush=True)

    def note(self, text: str) -> None:
        print(f"\n{text}", flush=True)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


# --- core ------------------------------------------------------------------------------


def _median_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric figure's median over the rounds (the rest from the first round)."""
    merged = dict(rounds[0])
    for key, value in rounds[0].items():
        if isinstance(value, int | float):
            merged[key] = statistics.median(r[key] for r in rounds)
    return merged


def section_core(report: Report, quick: bool) -> None:
    args = ["--calls", "2000" if quick else "100000", "--repeat", "3" if quick else "5"]
    commands = {
        "cpython": [sys.executable, str(HERE / "bench" / "core_bench.py"), *args],
        "pyodide": [rt.NODE, str(HERE / "bench" / "pyodide_core.mjs"), *args],
    }
    # CPython and Pyodide take turns, several rounds, and each figure is the median of its
    # rounds: a ratio of two runs minutes apart measured this machine's drift as much as
    # the interpreters (one such pair gave 2.6x, another 1.6x, same code).
    rounds: dict[str, list[dict[str, Any]]] = {"cpython": [], "pyodide": []}
    for _ in range(1 if quick else 4):
        for runtime_name, command in commands.items():
            completed = subprocess.run(
                command, capture_output=True, text=True, check=True, cwd=rt.ROOT
            )
            rounds[runtime_name].append(json.loads(completed.stdout))
    cpython, pyodide = (_median_rounds(rounds[name]) for name in ("cpython", "pyodide"))
    report.data["core"] = {"cpython": cpython, "pyodide": pyodide}
    floor = cpython["minimal_bucket"]
    peers = {
        "fixed_window": "limits:fixed_window",
        "sliding_window": "limits:sliding_window",
        "sliding_log": "limits:moving_window",
        "token_bucket": "limits:fixed_window",
        "gcra": "limits:fixed_window",
    }
    rows = []
    for name in ("token_bucket", "gcra", "fixed_window", "sliding_window", "sliding_log"):
        ours = cpython[f"check:{name}"]
        peer = peers[name]
        theirs = cpython.get(peer)
        rows.append(
            [
                name,
                ours,
                ours / floor,
                peer.removeprefix("limits:"),
                theirs if theirs is not None else "-",
                theirs / ours if theirs is not None else "-",
                pyodide[f"check:{name}"],
                pyodide[f"check:{name}"] / ours,
                cpython[f"core:{name}"],
                pyodide[f"core:{name}"],
                pyodide[f"core:{name}"] / cpython[f"core:{name}"],
            ]
        )
    report.table(
        f"The pure core, one `check` (ns per call, CPython {cpython['python']} and "
        f"Pyodide {pyodide['python']}; minimal bucket {floor:.0f} ns on CPython; reading "
        f"the clock {cpython['clock']:.0f} ns on CPython, {pyodide['clock']:.0f} on Pyodide)",
        [
            "algorithm",
            "CPython ns",
            "x minimal bucket",
            "`limits` strategy",
            "`limits` ns",
            "`limits` / ours",
            "Pyodide ns",
            "Pyodide / CPython",
            "core alone, CPython ns",
            "core alone, Pyodide ns",
            "core alone, Pyodide / CPython",
        ],
        rows,
    )
    steps = []
    for runtime_name, data in (("CPython", cpython), ("Pyodide", pyodide)):
        steps.append(
            [
                runtime_name,
                data["step:token_bucket"],
                data["step:sliding_log"],
                data["step:sliding_log"] / data["step:token_bucket"],
            ]
        )
    report.table(
        "The Durable Object step (`KeyStore.decide`, SQL excluded; ns per request)",
        ["runtime", "token_bucket 1,000,000/hour", "sliding_log 10,000/hour (full log)", "ratio"],
        steps,
    )


# --- workerd: gateway and object -------------------------------------------------------------


def section_gateway(report: Report, quick: bool, origin: str) -> None:
    requests = 200 if quick else 1000
    many = 400 if quick else 2000
    repeat = 1 if quick else 3
    inflight = 50
    samples: dict[str, list[dict[str, Any]]] = {}
    order: list[str] = []

    def measure(paths: dict[str, tuple[str, dict[str, str]]]) -> None:
        for name, (url, headers) in paths.items():
            if name not in order:
                order.append(name)
            samples.setdefault(name + "|1", []).append(
                rt.load(url, requests=requests, concurrency=1, headers=headers)
            )
            samples.setdefault(name + f"|{inflight}", []).append(
                rt.load(url, requests=many, concurrency=inflight, headers=headers)
            )

    for _ in range(repeat):
        # A fresh runtime per round (see _fresh_runtimes below), all paths interleaved in it.
        with rt.runtime(origin) as gw:
            peer = gw.peer_urls["peer"]
            # The denial path: a key exhausted first (100/minute).
            rt.load(f"{gw.url}/small/x", requests=150, concurrency=1, headers={KEY: "denied"})
            measure(
                {
                    "origin (Node, direct)": (f"{origin}/x", {}),
                    "JS Worker: forward": (f"{peer}/forward/x", {}),
                    "JS Worker: JS Durable Object + forward": (f"{peer}/limited/x", {}),
                    "Python: unmatched path (forward)": (f"{gw.url}/unmatched/x", {}),
                    "Python: limited route (object + forward)": (
                        f"{gw.url}/limited/x",
                        {KEY: "hot"},
                    ),
                    "Python: limited, write_behind 50ms": (f"{gw.url}/behind/x", {KEY: "hot"}),
                    "Python: limited, token leases": (f"{gw.url}/leased/x", {KEY: "hot"}),
                    "Python: denied (429)": (f"{gw.url}/small/x", {KEY: "denied"}),
                }
            )
        # The floor of any Python Worker on this host (a runtime of its own, same round),
        # and of any Python rate limiter: the least a Python Durable Object does per call.
        with rt.bare_python(origin) as bare:
            measure(
                {
                    "bare Python Worker: answer": (f"{bare.url}/x", {}),
                    "bare Python Worker: forward": (f"{bare.url}/forward/x", {}),
                    "bare Python Worker: minimal Python Durable Object + forward": (
                        f"{bare.url}/object-floor/x",
                        {},
                    ),
                }
            )
    # The floor's rows beside the JavaScript ones (origin, forward, object) they compare with.
    floor = [name for name in order if name.startswith("bare ")]
    rest = [name for name in order if name not in floor]
    order = rest[:3] + floor + rest[3:]
    forward_p50 = rt.median(samples["JS Worker: forward|1"], "p50")
    rows = []
    table: dict[str, Any] = {}
    for name in order:
        one, burst = samples[name + "|1"], samples[name + f"|{inflight}"]
        p50, p99 = rt.median(one, "p50"), rt.median(one, "p99")
        rps = rt.median(burst, "rps")
        statuses = sorted({status for run in one + burst for status in run["statuses"]})
        table[name] = {"p50": p50, "p99": p99, "rps": rps, "statuses": statuses}
        rows.append([name, p50, p50 - forward_p50, p99, rps, ",".join(statuses)])
    report.data["gateway"] = table
    report.table(
        f"Per request on local workerd ({requests} requests one at a time, {many} with "
        f"{inflight} in flight; medians of {repeat} rounds, each on a fresh runtime)",
        [
            "path",
            "p50 ms",
            "p50 above JS forward",
            "p99 ms",
            f"req/s, {inflight} in flight",
            "statuses",
        ],
        rows,
    )


def section_gateway_python(report: Report, quick: bool) -> None:
    """The gateway's own work per request on npm Pyodide in Node (no workerd, no network)."""
    args = ["--requests", "200", "--rounds", "2"] if quick else []
    completed = subprocess.run(
        [rt.NODE, str(HERE / "bench" / "pyodide_gateway.mjs"), *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=rt.ROOT,
    )
    data = json.loads(completed.stdout)
    report.data["gateway_python"] = data
    bare = data["bare forward"]["min_us"]
    report.table(
        "The gateway's own work on npm Pyodide in Node (us per request: the minimum and the "
        "median of the rounds' means; real JavaScript requests, an origin and an object "
        "that answer at once)",
        ["path", "min us", "median us", "min above the bare forward", "answer's fields"],
        [
            [
                name,
                row["min_us"],
                row["median_us"],
                row["min_us"] - bare,
                ", ".join(row["answer"][1]),
            ]
            for name, row in data.items()
        ],
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
    rows = []
    for name, runs_ in results.items():
        base = rt.median(results[runtimes[name]], "rps")
        rps = rt.median(runs_, "rps")
        rows.append([name, rps, base / rps, rt.median(runs_, "p50"), rt.median(runs_, "p99")])
    report.data["object"] = {row[0]: row[1:] for row in rows}
    report.data["object_statuses"] = {
        name: sorted({status for run in runs_ for status in run["statuses"]})
        for name, runs_ in results.items()
    }
    report.table(
        f"One hot key, 50 in flight, called from the same JavaScript Worker ({requests} "
        f"requests, medians of {repeat} rounds, each on a fresh runtime; each ratio against "
        "the JavaScript object on the same runtime)",
        ["object", "decisions/s", "JS / this", "p50 ms", "p99 ms"],
        rows,
    )


# --- flood -----------------------------------------------------------------------------------


def _decide_calls(gw: Any) -> int:
    return int(gw.durable_object_calls().get("RateLimiter.decide", 0))


def section_flood(
    report: Report, quick: bool, origin: str, flood_rates: tuple[int, ...] = (400,)
) -> None:
    with rt.runtime(origin) as gw:
        _flood(report, quick, gw, flood_rates)


def _flood(report: Report, quick: bool, gw: Any, flood_rates: tuple[int, ...]) -> None:
    seconds = 2 if quick else 10
    # Goal 2: one key at 10x its limit (100/minute -> 1,000/minute) for `seconds`.
    rate = 1000 / 60
    before = _decide_calls(gw)
    abusive = rt.load(
        f"{gw.url}/small/x",
        requests=int(rate * seconds),
        rate=rate,
        headers={KEY: f"abusive-{time.time_ns()}"},
        warmup=0,
    )
    calls = _decide_calls(gw) - before
    admitted = abusive["statuses"].get("200", 0)
    denied = abusive["statuses"].get("429", 0)
    allowance = 100 + 100 * seconds / 60  # the bucket, and what refills meanwhile
    report.data["abusive"] = {"admitted": admitted, "denied": denied, "calls": calls}
    report.table(
        f"A key at 10x its limit (100/minute, {rate:.1f} req/s for {seconds} s)",
        [
            "requests",
            "admitted",
            "allowed at most",
            "denied",
            "object calls",
            "denials answered with no call",
        ],
        [
            [
                admitted + denied,
                admitted,
                int(allowance),
                denied,
                calls,
                f"{max(0, denied - (calls - admitted)) / max(1, denied):.1%}",
            ]
        ],
    )

    # Goal 6: 10 clients of one key, alone and beside a flood of another key, at each rate.
    victims_alone = rt.load(
        f"{gw.url}/limited/x", duration=seconds, concurrency=10, headers={KEY: "victims"}
    )
    rows: list[list[Any]] = [
        ["alone", "-", victims_alone["rps"], victims_alone["p50"], victims_alone["p99"], 1.0, 1.0]
    ]
    report.data["flood"] = {"alone": victims_alone, "rates": {}}
    tool = "scripts/load.mjs --rate R"
    for flood_rate in flood_rates:
        flood, tool = _start_flood(gw, flood_rate, seconds)
        victims_flooded = rt.load(
            f"{gw.url}/limited/x", duration=seconds, concurrency=10, headers={KEY: "victims"}
        )
        flood_out, _ = flood.communicate(timeout=120)
        flood_summary = _hey_summary(flood_out) if tool.startswith("hey") else json.loads(flood_out)
        share = victims_flooded["rps"] / victims_alone["rps"]
        p99 = victims_flooded["p99"] / victims_alone["p99"]
        report.data["flood"]["rates"][flood_rate] = {
            "flooded": victims_flooded,
            "flood": flood_summary,
            "tool": tool,
        }
        rows.append(
            [
                "beside the flood",
                f"{flood_rate} ({flood_summary.get('rps', 0):.0f} served)",
                victims_flooded["rps"],
                victims_flooded["p50"],
                victims_flooded["p99"],
                share,
                p99,
            ]
        )
    report.table(
        f"10 clients of one key (closed loop), alone and while another key is flooded at R "
        f"req/s (open loop, {tool}, {seconds} s each, 100/minute limit)",
        ["", "flood R req/s", "req/s", "p50 ms", "p99 ms", "share of alone", "p99 x alone"],
        rows,
    )


# --- leases ----------------------------------------------------------------------------------


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
        rt.build(worker)
        for _ in range(repeat):
            gw = rt.LocalGateway(worker, {"EDGE_LIMITER": _lease_config(origin)}, replicas=2)
            with gw:
                bases = [gw.url, *gw.replica_urls]
                for route in ("plain", "leased", "plain-at-limit", "leased-at-limit"):
                    key = {KEY: f"{route}-{time.time_ns()}"}
                    before = _decide_calls(gw)
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
                    calls = _decide_calls(gw) - before
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
    rows = []
    for route, samples in runs.items():
        admitted = sorted({run["admitted"] for run in samples})
        rows.append(
            [
                route,
                rt.median(samples, "rps"),
                rt.median(samples, "p50"),
                rt.median(samples, "p99"),
                ",".join(str(a) for a in admitted),
                f"1/{1 / max(1e-9, rt.median(samples, 'calls_per_admitted')):.1f}",
            ]
        )
    report.data["leases"] = runs
    report.table(
        f"One hot key from two isolates at once ({per_isolate} requests per isolate, "
        f"{inflight} in flight each; medians of {repeat} rounds, each on a fresh runtime; "
        "the at-limit routes allow 3000/day)",
        ["route", "req/s (both)", "p50 ms", "p99 ms", "admitted", "object calls per admitted"],
        rows,
    )


def _start_flood(gw: Any, flood_rate: int, seconds: int) -> tuple[Any, str]:
    """An open-loop flood of one new key at ``flood_rate`` requests/s (hey when installed)."""
    hey = shutil.which("hey")
    flood_key = f"flood-{time.time_ns()}"
    if hey and flood_rate % 10 == 0:
        # Workers each rate-limited to 10/s: an open loop per worker.
        workers = flood_rate // 10
        command = [hey, "-z", f"{seconds}s", "-c", str(workers), "-q", "10"]
        command += ["-H", f"{KEY}: {flood_key}", f"{gw.url}/small/x"]
        return subprocess.Popen(command, stdout=subprocess.PIPE, text=True), (
            f"hey -c {workers} -q 10"
        )
    flood = rt.start_load(
        f"{gw.url}/small/x",
        requests=flood_rate * seconds,
        rate=flood_rate,
        headers={KEY: flood_key},
        warmup=0,
    )
    return flood, f"scripts/load.mjs --rate {flood_rate}"


def _hey_summary(text: str) -> dict[str, Any]:
    """Requests/sec and the status counts from hey's report."""
    summary: dict[str, Any] = {"statuses": {}}
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Requests/sec:"):
            summary["rps"] = float(line.split()[1])
        elif line.startswith("[") and "]" in line and "responses" in line:
            status, count = line[1 : line.index("]")], int(line.split()[1])
            summary["statuses"][status] = count
    return summary


# --- startup ---------------------------------------------------------------------------------


def bare_entry_with_objects(class_names: list[str]) -> str:
    """The bare Worker (``runtime.BARE_PYTHON``), exporting an empty Durable Object class
    for each of the project's."""
    classes = "".join(f"\n\nclass {name}(DurableObject):\n    pass\n" for name in class_names)
    entry = rt.BARE_PYTHON.replace("import Response,", "import DurableObject, Response,", 1)
    assert entry != rt.BARE_PYTHON, "BARE_PYTHON no longer imports workers.Response"
    return entry + classes


def section_startup(report: Report, quick: bool, origin: str) -> None:
    """Fresh runtimes in turn: READY (workerd, Pyodide, the imports), then one real request.

    Two bare Workers: one with no bindings, one with the project's bindings (Durable Object
    namespaces, KV), whose local setup Miniflare pays for whichever Worker uses them. The
    goal's ratio is the project's first answer against the second one's.
    """
    repeat = 1 if quick else 7
    kinds = ("bare Python Worker", "bare Python Worker, the project's bindings", "this project")
    ready: dict[str, list[float]] = {kind: [] for kind in kinds}
    first: dict[str, list[float]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="edge-limiter-bench-") as tmp:
        bare = Path(tmp) / "bare"
        bare.mkdir()
        (bare / "entry.py").write_text(rt.BARE_PYTHON)
        bound = Path(tmp) / "bound"
        bound.mkdir()
        class_names = sorted(set(project_deployment().durable_objects.values()))
        (bound / "entry.py").write_text(bare_entry_with_objects(class_names))
        project = Path(tmp) / "project"
        rt.build(project)
        config = {"EDGE_LIMITER": rt.bench_config(origin)}
        for _ in range(repeat):
            for name, worker, variables, objects, kv in (
                (kinds[0], bare, {}, {}, []),
                (kinds[1], bound, {}, None, None),
                (kinds[2], project, config, None, None),
            ):
                gateway = rt.LocalGateway(
                    worker, variables, durable_objects=objects, kv_namespaces=kv
                )
                started = time.monotonic()
                with gateway:
                    # launch.mjs prints READY once the isolate has loaded the Worker.
                    ready[name].append(time.monotonic() - started)
                    # The first request through the Python Worker: for the project a
                    # limited route (config parsed, pipeline built, an object, the origin).
                    with urllib.request.urlopen(f"{gateway.url}/limited/startup") as answer:
                        answer.read()
                        if answer.status != 200:
                            raise RuntimeError(f"{name}: the first request got {answer.status}")
                    first[name].append(time.monotonic() - started)
    base_ready = statistics.median(ready[kinds[1]])
    base_first = statistics.median(first[kinds[1]])
    rows = [
        [
            name,
            statistics.median(ready[name]),
            statistics.median(ready[name]) / base_ready,
            statistics.median(first[name]),
            statistics.median(first[name]) / base_first,
            statistics.median(first[name]) / statistics.median(first[kinds[0]]),
        ]
        for name in kinds
    ]
    report.data["startup"] = {row[0]: {"ready": row[1], "first": row[3]} for row in rows}
    report.table(
        f"Time to the first answer of a fresh runtime (s, median of {repeat}, in turn)",
        [
            "worker",
            "READY s",
            "x bare with bindings",
            "first answer s",
            "x bare with bindings",
            "x bare, no bindings",
        ],
        rows,
    )


def section_imports(report: Report, quick: bool) -> None:
    """Importing the Worker on npm Pyodide in Node: the part of startup that is ours."""
    runs = []
    for _ in range(1 if quick else 5):
        completed = subprocess.run(
            [rt.NODE, str(HERE / "bench" / "pyodide_imports.mjs")],
            capture_output=True,
            text=True,
            check=True,
            cwd=rt.ROOT,
        )
        runs.append(json.loads(completed.stdout))
    import_ms = statistics.median(run["import_ms"] for run in runs)
    dataclass_ms = statistics.median(run["dataclasses_ms"] for run in runs)
    report.data["imports"] = runs
    report.table(
        f"Importing the Worker on npm Pyodide in Node (ms, median of {len(runs)} processes)",
        ["import", "building dataclasses", "dataclasses", "share", "stdlib modules pulled in"],
        [
            [
                import_ms,
                dataclass_ms,
                runs[0]["dataclasses"],
                dataclass_ms / import_ms,
                ", ".join(runs[0]["stdlib_pulled_in"]) or "-",
            ]
        ],
    )


# --- memory ----------------------------------------------------------------------------------


def _workerd_rss_mb(gw: Any) -> float:
    """The resident memory of the workerd processes under the launcher."""
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text().split()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[4]) == gw.pid and b"workerd" in cmdline:
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def section_memory(report: Report, quick: bool, origin: str) -> None:
    requests = 1000 if quick else 20_000
    keys = 200 if quick else 5_000
    with tempfile.TemporaryDirectory(prefix="edge-limiter-bench-") as tmp:
        worker = Path(tmp) / "worker"
        rt.build(worker)
        state = Path(tmp) / "state"
        config = rt.bench_config(origin, storage={"cleanup_after": "1s"})
        config["routes"].append(
            {
                "name": "short",
                "match": {"path": "/short/*"},
                "limits": "100/second",
                "algorithm": "gcra",
                "key": f"header:{KEY}",
            }
        )
        with rt.LocalGateway(worker, {"EDGE_LIMITER": config}, persist_dir=state) as gw:
            boot = _workerd_rss_mb(gw)
            rt.load(f"{gw.url}/limited/x", requests=requests, concurrency=20, headers={KEY: "one"})
            after_requests = _workerd_rss_mb(gw)
            _distinct_keys(f"{gw.url}/short/x", keys)
            after_keys = _workerd_rss_mb(gw)
            rows_now = _storage_rows(state)
            # The short keys are idle after 10 ms; the one limited key is idle once its
            # GCRA time has caught up with the requests it admitted (3.6 ms each at
            # 1,000,000/hour: up to 72 s after the first of 20,000). The alarm fires
            # within a second (cleanup_after) of either.
            per_request = 3600 / int(rt.BENCH_LIMIT.split("/")[0])
            deadline = time.monotonic() + 30 + requests * per_request
            while _storage_rows(state)["rows"] and time.monotonic() < deadline:
                time.sleep(0.5)
            rows_after = _storage_rows(state)
    report.data["memory"] = {
        "boot_mb": boot,
        "after_requests_mb": after_requests,
        "after_keys_mb": after_keys,
        "storage_before_cleanup": rows_now,
        "storage_after_cleanup": rows_after,
    }
    report.table(
        "workerd memory and storage",
        ["", "value"],
        [
            ["RSS at boot (MB)", boot],
            [f"RSS after {requests:,} requests (MB)", after_requests],
            [f"RSS after {keys:,} distinct keys more (MB)", after_keys],
            ["per key object (KB)", (after_keys - after_requests) * 1024 / keys],
            ["rows stored before cleanup", rows_now["rows"]],
            ["rows left after cleanup", rows_after["rows"]],
            ["databases after cleanup (KB on disk)", rows_after["kb"]],
        ],
    )


def _distinct_keys(url: str, keys: int) -> None:
    script = (
        "const n=+process.argv[2],u=process.argv[1];let i=0;"
        "async function w(){while(i<n){const k=i++;const r=await fetch(u,{headers:{"
        f"'{KEY}':'k'+k}}}});await r.arrayBuffer();}}}}"
        "await Promise.all(Array.from({length:20},w));"
    )
    subprocess.run(
        [rt.NODE, "--input-type=module", "-e", script, url, str(keys)], check=True, timeout=900
    )


def _storage_rows(state: Path) -> dict[str, Any]:
    rows = 0
    size = 0
    for path in state.glob("do/*RateLimiter/*.sqlite"):
        if path.name == "metadata.sqlite":
            continue
        size += path.stat().st_size
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            for table in ("limits", "log"):
                rows += db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        except sqlite3.OperationalError:
            pass
        finally:
            db.close()
    return {"rows": rows, "kb": size // 1024}


# --- main ------------------------------------------------------------------------------------


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    node = subprocess.run(
        [rt.NODE, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return (
        f"{os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}, "
        f"CPython {platform.python_version()}, Node {node}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny numbers: a smoke test")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--json", type=Path, help="also write every number here")
    parser.add_argument(
        "--flood-rates",
        default="400",
        help="the flood section's rates (req/s), comma-separated, e.g. 50,100,200,400",
    )
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    report = Report()
    report.note(f"Machine: {machine()}. Command: scripts/bench.py {' '.join(argv or sys.argv[1:])}")
    if "core" in chosen:
        section_core(report, args.quick)
    with rt.origin_server() as origin:
        # Each section (and each round) runs on a fresh runtime, so none inherits another's
        # heap, timers or counters.
        if "gateway" in chosen:
            section_gateway(report, args.quick, origin)
            section_gateway_python(report, args.quick)
        if "object" in chosen:
            section_object(report, args.quick, origin)
        if "flood" in chosen:
            rates = tuple(int(rate) for rate in args.flood_rates.split(",") if rate.strip())
            section_flood(report, args.quick, origin, rates)
        if "leases" in chosen:
            section_leases(report, args.quick, origin)
        if "startup" in chosen:
            section_startup(report, args.quick, origin)
            section_imports(report, args.quick)
        if "memory" in chosen:
            section_memory(report, args.quick, origin)
    if args.json:
        args.json.write_text(json.dumps(report.data, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
