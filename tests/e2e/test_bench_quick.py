"""The benchmarks' quick mode, so they cannot rot: every section runs end to end (the core
on CPython and Pyodide, the gateway and its JavaScript peers on local workerd, the flood,
startup, memory) and reports what it measured. The figures themselves are not asserted:
benchmarks are scripts, never timed assertions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_every_benchmark_section_runs_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "edge_limiter.tools", "bench", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    text = done.stdout
    for title in (
        "The pure core",
        "The Durable Object step",
        "Per request on local workerd",
        "The gateway's own work on npm Pyodide in Node",
        "One hot key",
        "One hot key from two isolates",
        "A key at 10x its limit",
        "10 clients of one key",
        "Time to the first answer",
        "Importing the Worker on npm Pyodide",
        "workerd memory and storage",
    ):
        assert title in text, title
    core = data["core"]
    for runtime in ("cpython", "pyodide"):
        assert core[runtime]["check:token_bucket"] > 0
        assert core[runtime]["core:gcra"] > 0
        assert core[runtime]["clock"] > 0
        assert core[runtime]["step:sliding_log"] > 0
    assert core["pyodide"]["platform"] == "emscripten"
    gateway = data["gateway"]
    assert gateway["Python: limited route (object + forward)"]["statuses"] == ["200"]
    assert "429" in gateway["Python: denied (429)"]["statuses"]
    assert gateway["Python: limited, token leases"]["statuses"] == ["200"]
    python = data["gateway_python"]
    assert all(row["min_us"] > 0 for row in python.values())
    assert "x-ratelimit-remaining" in python["limited"]["answer"][1]
    assert python["unmatched"]["answer"] == [200, ["content-type", "x-origin"]]
    assert python["denied"]["answer"][0] == 429
    startup = data["startup"]
    assert all(row["first"] >= row["ready"] > 0 for row in startup.values())
    imports = data["imports"][0]
    assert 0 < imports["dataclasses_ms"] < imports["import_ms"]
    assert imports["dataclasses"] > 0
    # The floor's Python Worker called its minimal Python Durable Object and forwarded.
    floor = gateway["bare Python Worker: minimal Python Durable Object + forward"]
    assert floor["statuses"] == ["200"]
    # Every object row decided (decisions/s is the first column), the write-behind one and
    # the floor's (the minimal Python object, on a runtime of its own) too, every answer a 200.
    assert len(data["object"]) == 6
    assert all(row[0] > 0 for row in data["object"].values())
    assert all(statuses == ["200"] for statuses in data["object_statuses"].values())
    # The abusive key is never admitted beyond its limit (100/minute: 100 at once, plus what
    # refills during the run).
    assert data["abusive"]["admitted"] <= 100 + 100 * 2 / 60 + 1
    assert data["memory"]["storage_after_cleanup"]["rows"] == 0
    leases = data["leases"]
    for route in ("plain", "leased"):
        assert [run["admitted"] for run in leases[route]] == [300]  # far below the limit
    assert leases["leased"][0]["calls"] < leases["plain"][0]["calls"]
