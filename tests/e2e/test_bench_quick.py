"""The benchmarks' quick mode, so they cannot rot: every section runs end to end (the core
on CPython and Pyodide, the gateway and its JavaScript peers on local workerd, verified
identity, the flood, startup, memory) and reports what it measured. The figures themselves are not asserted:
benchmarks are scripts, never timed assertions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edge_limiter.tools.bench.render import render_document
from edge_limiter.tools.bench.tables import SECTIONS

pytestmark = pytest.mark.e2e


def test_every_benchmark_section_runs_and_reports(tmp_path: Path) -> None:
    out, doc = tmp_path / "bench.json", tmp_path / "BENCHMARKS.md"
    command = [sys.executable, "-m", "edge_limiter.tools", "bench", "--quick"]
    done = subprocess.run(
        [*command, "--json", str(out), "--write", str(doc)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    text, written = done.stdout, doc.read_text()
    # Each section's table is printed as it ends, and every one is in the document.
    for title, _peer, _build in SECTIONS.values():
        assert f"## {title}" in text, title
        assert f"## {title}" in written, title
    assert written == render_document(data)
    assert "not measured in this run" not in written  # every goal has its figures
    assert data["meta"]["quick"] is True and data["meta"]["commit"]
    core = data["core"]
    for runtime in ("cpython", "pyodide"):
        assert core[runtime]["check:token_bucket"] > 0
        assert core[runtime]["core:gcra"] > 0
        assert core[runtime]["clock"] > 0
        assert core[runtime]["step:sliding_log"] > 0
    assert core["pyodide"]["platform"] == "emscripten"
    gateway = data["gateway"]["rows"]
    assert gateway["Python: limited route (object + forward)"]["statuses"] == ["200"]
    assert "429" in gateway["Python: denied (429)"]["statuses"]
    assert gateway["Python: limited, token leases"]["statuses"] == ["200"]
    # Every identity row was verified and admitted: the cached token, and a first sight of
    # each algorithm (a token of its own per request, each signature checked by WebCrypto).
    identity = data["identity"]["rows"]
    assert len(identity) == 5
    assert all(row["statuses"] == ["200"] and row["p50"] > 0 for row in identity.values())
    # The replay timed every line of its small log, and a whole replay ran in a child.
    replay = data["replay"]
    assert replay["replay_timed_lines"] == replay["lines"] and replay["replay_lines_per_s"] > 0
    assert replay["full_replay_peak_rss_mb"] > 0
    python = data["gateway_python"]
    assert all(row["min_us"] > 0 for row in python.values())
    assert "x-ratelimit-remaining" in python["limited"]["answer"][1]
    assert python["unmatched"]["answer"] == [200, ["content-type", "x-origin"]]
    assert python["denied"]["answer"][0] == 429
    startup = data["startup"]
    for kind, values in startup["first"].items():
        assert all(
            first >= ready > 0 for first, ready in zip(values, startup["ready"][kind], strict=True)
        )
    imports = data["imports"]["runs"][0]
    assert 0 < imports["dataclasses_ms"] < imports["import_ms"]
    assert imports["dataclasses"] > 0
    # The floor's Python Worker called its minimal Python Durable Object and forwarded.
    floor = gateway["bare Python Worker: minimal Python Durable Object + forward"]
    assert floor["statuses"] == ["200"]
    # Every object row decided, the write-behind one and the floor's (the minimal Python
    # object, on a runtime of its own) too, every answer a 200, each against the JavaScript
    # object of its own runtime.
    objects = data["object"]["rows"]
    assert len(objects) == 6
    assert all(row["rps"] > 0 and row["statuses"] == ["200"] for row in objects.values())
    assert {row["peer"] for row in objects.values()} <= set(objects)
    # The abusive key is never admitted beyond its limit (100/minute: 100 at once, plus what
    # refills during the run).
    assert data["abusive"]["admitted"] <= data["abusive"]["allowed"]
    # The flood's floor: the bare Worker answered 429 to every request of the flooded key,
    # its clients (minimal object + forward) were each admitted, alone and beside it.
    floor = data["flood"]["floor"]
    assert floor["alone"]["statuses"] == {"200": floor["alone"]["statuses"]["200"]}
    for run in floor["rates"].values():
        assert set(run["flood"]["statuses"]) == {"429"}
        assert set(run["flooded"]["statuses"]) == {"200"}
    memory = data["memory"]
    assert memory["storage_after_cleanup"]["rows"] == 0
    for side in ("project", "floor"):
        figures = memory[side]
        assert 0 < figures["boot_mb"] < figures["after_keys_mb"]
    leases = data["leases"]["runs"]
    for route in ("plain", "leased"):
        assert [run["admitted"] for run in leases[route]] == [300]  # far below the limit
    assert leases["leased"][0]["calls"] < leases["plain"][0]["calls"]
