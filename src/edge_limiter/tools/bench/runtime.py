"""What the workerd benchmarks share: the fast origin, the load generator, the runtime with
its JavaScript peers, and medians."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from edge_limiter.core.ratelimit.protocol import StoreRequest
from edge_limiter.core.ratelimit.rates import Limit, parse_rate
from edge_limiter.tools import ROOT
from edge_limiter.tools.build_worker import build
from edge_limiter.tools.local_gateway import LocalGateway
from edge_limiter.tools.toolchain import node

#: The header that carries the benchmark's rate-limit key.
KEY = "x-bench-key"
LOAD = ROOT / "scripts" / "load.mjs"
ORIGIN = ROOT / "scripts" / "bench" / "origin.mjs"
PEER = ROOT / "scripts" / "bench" / "peer.mjs"
NODE = node()

HOUR_MS = 3_600_000
#: The benchmark route: a limit every request is admitted by, on one key.
BENCH_LIMIT = "1000000/hour"
#: The write-behind of the benchmark's opt-in route (``behind``), in ms.
BENCH_WRITE_BEHIND_MS = 50


@contextmanager
def origin_server() -> Iterator[str]:
    """The fast Node origin; yields its base URL."""
    process = subprocess.Popen(
        [NODE, str(ORIGIN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("ORIGIN "):
            raise RuntimeError(f"origin did not start: {line!r}")
        yield line.split()[1]
    finally:
        process.terminate()
        process.wait(timeout=10)


def load(
    url: str,
    *,
    requests: int = 1000,
    concurrency: int = 1,
    rate: float = 0,
    duration: float = 0,
    headers: Mapping[str, str] | None = None,
    warmup: int = 20,
    header_lines: tuple[str, Path] | None = None,
) -> dict[str, Any]:
    """One run of ``scripts/load.mjs``: rps, p50/p90/p99/max (ms), statuses.
    ``header_lines``: a header whose value each request takes from the next line of a
    file (a token of its own per request)."""
    command = [
        NODE,
        str(LOAD),
        url,
        "--requests",
        str(requests),
        "--concurrency",
        str(concurrency),
        "--warmup",
        str(warmup),
    ]
    if rate:
        command += ["--rate", str(rate)]
    if duration:
        command += ["--duration", str(duration)]
    for name, value in (headers or {}).items():
        command += ["--header", f"{name}: {value}"]
    if header_lines is not None:
        command += ["--header-lines", f"{header_lines[0]}: {header_lines[1]}"]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=900)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def start_load(url: str, **options: Any) -> subprocess.Popen[str]:
    """``load`` in the background (for two loads at once); read it with :func:`finish`."""
    command = [NODE, str(LOAD), url]
    names = {"requests": "--requests", "concurrency": "--concurrency", "rate": "--rate"}
    names |= {"duration": "--duration", "warmup": "--warmup"}
    for key, flag in names.items():
        if options.get(key) is not None:
            command += [flag, str(options[key])]
    for name, value in (options.get("headers") or {}).items():
        command += ["--header", f"{name}: {value}"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = process.communicate(timeout=900)
    result: dict[str, Any] = json.loads(out)
    return result


def median(runs: list[dict[str, Any]], field: str) -> float:
    return float(statistics.median(float(run[field]) for run in runs))


def workerd_processes(gw: Any) -> Iterator[tuple[Path, list[str]]]:
    """The workerd processes of ``gw``'s launcher (its process group): each one's
    ``/proc`` directory and the fields of its ``stat`` after the command's name (state,
    ppid, pgrp, ...)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[2]) == gw.pid and b"workerd" in cmdline:
            yield proc, stat


def workerd_cpu_s(gw: Any) -> float:
    """The CPU time (user and system, seconds) ``gw``'s workerd processes have used so
    far: what production bills, all threads included (utime and stime: the 12th and 13th
    fields after the name)."""
    ticks = sum(int(stat[11]) + int(stat[12]) for _, stat in workerd_processes(gw))
    return ticks / os.sysconf("SC_CLK_TCK")


def bench_config(origin: str, **top: Any) -> dict[str, Any]:
    """The gateway config every workerd benchmark runs: one route per path kind."""
    return {
        "origin": origin,
        "routes": [
            {
                "name": "bench",
                "match": {"path": "/limited/*"},
                "limits": BENCH_LIMIT,
                "algorithm": "gcra",
                "key": "header:x-bench-key",
            },
            {
                "name": "behind",
                "match": {"path": "/behind/*"},
                "limits": BENCH_LIMIT,
                "algorithm": "gcra",
                "key": "header:x-bench-key",
                "write_behind": f"{BENCH_WRITE_BEHIND_MS}ms",
            },
            {
                "name": "leased",
                "match": {"path": "/leased/*"},
                "limits": BENCH_LIMIT,
                "algorithm": "gcra",
                "key": "header:x-bench-key",
                "leases": True,
            },
            {
                "name": "small",
                "match": {"path": "/small/*"},
                "limits": "100/minute",
                "algorithm": "gcra",
                "key": "header:x-bench-key",
            },
        ],
        **top,
    }


def bench_payload(write_behind_ms: int = 0) -> str:
    """The store request the gateway sends for the ``bench`` route (for the peers); with
    ``write_behind_ms``, the same route opted into write-behind."""
    return StoreRequest(
        "check", "gcra", (Limit(parse_rate(BENCH_LIMIT)),), write_behind_ms=write_behind_ms
    ).to_json()


# A Python Worker with nothing of the project: what any Python Worker pays on this host to
# answer a request, and to forward one the way the gateway does when nothing changes.
BARE_PYTHON = """
import js
from workers import Response, WorkerEntrypoint


class Default(WorkerEntrypoint):
    async def fetch(self, request):
        native = request.js_object
        if "/forward/" not in native.url:
            return Response("ok")
        init = js.Object.new()
        init.redirect = "manual"
        return await js.fetch(js.Request.new(self.env.ORIGIN + "/x", native), init)
"""


# The floor of a Python rate limiter on this host: the bare Worker above, plus the least a
# Python Durable Object can do for the benchmarks' read-modify-write (the JavaScript
# PeerLimiter of bench/peer.mjs, step for step, in plain Python: rows read once and kept in
# memory, a token bucket in exact integers, the changed row upserted before the answer),
# and a method that does nothing (what entering Python on the object's side costs alone).
# ``/object-floor/*`` calls the object, then forwards as ``/forward/*`` does.
FLOOR_PYTHON = """
import json
import time

import js
from workers import DurableObject, Response, WorkerEntrypoint

UPSERT = (
    "INSERT INTO limits (id, state, idle_at) VALUES (?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET state = excluded.state, idle_at = excluded.idle_at"
)


def raw(wrapped):
    return getattr(wrapped, "_binding", wrapped)


async def forward(env, native):
    init = js.Object.new()
    init.redirect = "manual"
    return await js.fetch(js.Request.new(env.ORIGIN + "/x", native), init)


class Default(WorkerEntrypoint):
    async def fetch(self, request):
        native = request.js_object
        url = native.url
        if "/forward/" in url:
            return await forward(self.env, native)
        if "/deny/" in url:
            # The least a limiter does for a flooded key: read its key, answer 429.
            key = native.headers.get("x-bench-key") or ""
            if key.startswith("flood-"):
                return Response("", status=429, headers={"Retry-After": "60"})
            return await forward(self.env, native)
        if "/object-floor/" in url:
            await raw(self.env.FLOOR_LIMITER).getByName("hot").decide(self.env.PAYLOAD)
            return await forward(self.env, native)
        return Response("ok")


class FloorLimiter(DurableObject):
    def __init__(self, ctx, env):
        super().__init__(ctx, env)
        self.sql = raw(ctx.storage).sql
        self.sql.exec(
            "CREATE TABLE IF NOT EXISTS limits "
            "(id TEXT PRIMARY KEY, state TEXT NOT NULL, idle_at INTEGER NOT NULL)"
        )
        self.rows = None
        self.parsed = {}

    def nothing(self, payload):
        return "{}"

    def decide(self, payload):
        request = self.parsed.get(payload)
        if request is None:
            data = json.loads(payload)
            limits = [
                (f"token_bucket:{burst or ''}:{quota}/{window}", quota, window,
                 (burst or quota) * window)
                for quota, window, _name, burst in data["limits"]
            ]
            request = self.parsed[payload] = (data["cost"], limits)
        if self.rows is None:
            self.rows = {}
            for row in self.sql.exec("SELECT id, state FROM limits").toArray():
                self.rows[row.id] = json.loads(row.state)
        now = int(time.time() * 1000)
        cost, limits = request
        decisions, updates, allowed = [], [], True
        for limit_id, quota, window, full in limits:
            stored = self.rows.get(limit_id)
            level = full
            if stored is not None:
                level = min(full, stored[0] + max(0, now - stored[1]) * quota)
            need = cost * window
            ok = need <= level
            allowed = allowed and ok
            after = level - need if ok else level
            reset_after = -(-(full - after) // quota)
            retry_after = 0 if ok else max(1, -(-(need - level) // quota))
            decisions.append(
                f"[{'true' if ok else 'false'},{full // window},{after // window},"
                f"{reset_after},{retry_after}]"
            )
            updates.append((limit_id, after, now + reset_after))
        if allowed:
            for limit_id, after, idle_at in updates:
                state = [after, now]
                self.rows[limit_id] = state
                self.sql.exec(UPSERT, limit_id, json.dumps(state), idle_at)
        return '{"ds":[' + ",".join(decisions) + "]}"
"""


def decide_calls(gw: LocalGateway) -> int:
    """How many times the gateway's isolates have called ``RateLimiter.decide`` so far."""
    return int(gw.durable_object_calls().get("RateLimiter.decide", 0))


def peer_workers(origin: str, durable_objects: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JavaScript peer Worker (bench/peer.mjs), its own Durable Object and
    ``durable_objects`` of the Python Worker bound to it."""
    return [
        {
            "name": "peer",
            "module": str(PEER),
            "bindings": {
                "ORIGIN": origin,
                "PAYLOAD": bench_payload(),
                "PAYLOAD_BEHIND": bench_payload(BENCH_WRITE_BEHIND_MS),
            },
            "durableObjects": {
                "PEER_LIMITER": {"className": "PeerLimiter"},
                **{
                    binding: {"className": class_name, "worker": "gateway"}
                    for binding, class_name in durable_objects.items()
                },
            },
        }
    ]


@contextmanager
def bare_python(origin: str) -> Iterator[LocalGateway]:
    """The floor Worker (``FLOOR_PYTHON``: a bare Python Worker and the least a Python
    Durable Object can do) on local workerd, the JavaScript peers beside it:
    ``/forward/*`` goes to ``origin``."""
    with tempfile.TemporaryDirectory(prefix="edge-limiter-bench-") as tmp:
        worker = Path(tmp) / "bare"
        worker.mkdir()
        (worker / "entry.py").write_text(FLOOR_PYTHON)
        floor = {"FLOOR_LIMITER": "FloorLimiter"}
        with LocalGateway(
            worker,
            {"ORIGIN": origin, "PAYLOAD": bench_payload()},
            durable_objects=floor,
            kv_namespaces=[],
            persist_dir=Path(tmp) / "state",
            extra_spec={"peers": peer_workers(origin, floor)},
        ) as gateway:
            yield gateway


@contextmanager
def runtime(origin: str, *, persist: bool = True, **top: Any) -> Iterator[LocalGateway]:
    """The built project on local workerd with the JavaScript peers beside it."""
    with tempfile.TemporaryDirectory(prefix="edge-limiter-bench-") as tmp:
        worker = Path(tmp) / "worker"
        build(worker)
        peers = peer_workers(origin, {"RATE_LIMITER": "RateLimiter"})
        # The peer's own Durable Object class lives in the peer's script.
        gateway = LocalGateway(
            worker,
            {"EDGE_LIMITER": bench_config(origin, **top)},
            persist_dir=Path(tmp) / "state" if persist else None,
            extra_spec={"peers": peers},
        )
        with gateway:
            yield gateway
