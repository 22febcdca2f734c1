"""The sections that need no workerd: the pure core on CPython against npm Pyodide in Node,
the gateway's own work on Pyodide, and importing the Worker on Pyodide."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

from edge_limiter.tools import ROOT
from edge_limiter.tools.bench import runtime as rt
from edge_limiter.tools.bench.report import Report

#: The JavaScript that runs the Worker's Python on npm Pyodide in Node.
SCRIPTS = ROOT / "scripts" / "bench"


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
        "cpython": [sys.executable, "-m", "edge_limiter.tools.bench.core_bench", *args],
        "pyodide": [rt.NODE, str(SCRIPTS / "pyodide_core.mjs"), *args],
    }
    # CPython and Pyodide take turns, several rounds, and each figure is the median of its
    # rounds: a ratio of two runs minutes apart measured this machine's drift as much as
    # the interpreters (one such pair gave 2.6x, another 1.6x, same code).
    rounds: dict[str, list[dict[str, Any]]] = {"cpython": [], "pyodide": []}
    for _ in range(1 if quick else 4):
        for runtime_name, command in commands.items():
            completed = subprocess.run(
                command, capture_output=True, text=True, check=True, cwd=ROOT
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


def section_gateway_python(report: Report, quick: bool) -> None:
    """The gateway's own work per request on npm Pyodide in Node (no workerd, no network)."""
    args = ["--requests", "200", "--rounds", "2"] if quick else []
    completed = subprocess.run(
        [rt.NODE, str(SCRIPTS / "pyodide_gateway.mjs"), *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
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


def section_imports(report: Report, quick: bool) -> None:
    """Importing the Worker on npm Pyodide in Node: the part of startup that is ours."""
    runs = []
    for _ in range(1 if quick else 5):
        completed = subprocess.run(
            [rt.NODE, str(SCRIPTS / "pyodide_imports.mjs")],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
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
