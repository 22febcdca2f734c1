"""The sections on what a runtime costs to start and to keep: time to the first answer of a
fresh runtime, workerd's memory, and the storage rows left once keys are idle."""

from __future__ import annotations

import sqlite3
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
    report.section("startup", {"repeat": repeat, "ready": ready, "first": first})


def _workerd_rss_mb(gw: Any) -> float:
    """The resident memory of the workerd processes under the launcher."""
    total = 0
    for proc, _ in rt.workerd_processes(gw):
        for line in (proc / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def section_memory(report: Report, quick: bool, origin: str) -> None:
    """workerd's memory for the project and for the floor (a bare Python Worker calling a
    minimal Python Durable Object), each with the JavaScript peers loaded; the project's
    storage rows before and after its objects' cleanup."""
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
        peers = {"peers": rt.peer_workers(origin, {"RATE_LIMITER": "RateLimiter"})}
        with LocalGateway(
            worker, {"EDGE_LIMITER": config}, persist_dir=state, extra_spec=peers
        ) as gw:
            project = _footprint(
                gw,
                limited=f"{gw.url}/limited/x",
                requests=requests,
                per_key=f"{gw.url}/short/x",
                keys=keys,
                headers={KEY: "one"},
            )
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
    with rt.bare_python(origin) as bare:
        peer = bare.peer_urls["peer"]
        floor = _footprint(
            bare,
            limited=f"{bare.url}/object-floor/x",
            requests=requests,
            per_key=f"{peer}/floor-object?key={{k}}",
            keys=keys,
        )
    report.section(
        "memory",
        {
            "requests": requests,
            "keys": keys,
            "project": project,
            "floor": floor,
            "storage_before_cleanup": rows_now,
            "storage_after_cleanup": rows_after,
        },
    )


def _footprint(
    gw: Any,
    *,
    limited: str,
    requests: int,
    per_key: str,
    keys: int,
    headers: dict[str, str] | None = None,
) -> dict[str, float]:
    """RSS at boot, after ``requests`` to ``limited`` and after ``keys`` distinct keys."""
    boot = _workerd_rss_mb(gw)
    rt.load(limited, requests=requests, concurrency=20, headers=headers)
    after_requests = _workerd_rss_mb(gw)
    _distinct_keys(per_key, keys)
    return {
        "boot_mb": boot,
        "after_requests_mb": after_requests,
        "after_keys_mb": _workerd_rss_mb(gw),
    }


def _distinct_keys(url: str, keys: int) -> None:
    """One request for each of ``keys`` keys: in the key header, and in place of ``{k}``."""
    script = (
        "const n=+process.argv[2],u=process.argv[1];let i=0;"
        "async function w(){while(i<n){const k='k'+(i++);"
        "const r=await fetch(u.replace('{k}',k),{headers:{"
        f"'{KEY}':k}}}});await r.arrayBuffer();}}}}"
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
