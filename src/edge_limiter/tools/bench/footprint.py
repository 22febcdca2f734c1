"""The sections on what a runtime costs to start and to keep: time to the first answer of a
fresh runtime, workerd's memory, and the storage rows left once keys are idle."""

from __future__ import annotations

import sqlite3
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from edge_limiter.tools.bench import runtime as rt
from edge_limiter.tools.bench.report import Report
from edge_limiter.tools.bench.runtime import KEY
from edge_limiter.tools.build_worker import build
from edge_limiter.tools.local_gateway import LocalGateway, project_deployment


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
        build(project)
        config = {"EDGE_LIMITER": rt.bench_config(origin)}
        for _ in range(repeat):
            for name, worker, variables, objects, kv in (
                (kinds[0], bare, {}, {}, []),
                (kinds[1], bound, {}, None, None),
                (kinds[2], project, config, None, None),
            ):
                gateway = LocalGateway(worker, variables, durable_objects=objects, kv_namespaces=kv)
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
        build(worker)
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
        with LocalGateway(worker, {"EDGE_LIMITER": config}, persist_dir=state) as gw:
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
