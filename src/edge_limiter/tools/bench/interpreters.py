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
    report.section(
        "core", {"cpython": cpython, "pyodide": pyodide, "rounds": len(rounds["cpython"])}
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
    report.section("gateway_python", json.loads(completed.stdout))


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
    report.section("imports", {"runs": runs})
