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
               (``scripts/bench/pyodide_gateway.mjs``), against a bare forward;
- ``identity`` one request at a time on local workerd: a limited route keyed on a verified
               token's claim (the token cached) against the same route keyed on a header
               (issue 39's goal: at most 0.3 ms more at p50), and the first sight of a
               token, its signature verified by WebCrypto, for RS256, ES256 and EdDSA
               (:mod:`.identity`);
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
               (``scripts/bench/pyodide_imports.mjs``);
- ``memory``   workerd's RSS at boot, after N requests and after K distinct keys; storage
               rows left once the keys are idle and cleaned up;
- ``replay``   ``edge-limiter replay`` on CPython: a day's combined log through five
               routes, lines/s against reading the file alone, and a whole replay's peak
               RSS (:mod:`edge_limiter.tools.replay.bench`).

``--quick`` runs every section with small numbers (the test suite does, so the benchmarks
cannot rot); its figures mean nothing. Talks to 127.0.0.1 only. ``--write FILE`` writes the
document (BENCHMARKS.md) from the run's figures; ``--from-json FILE`` writes it from an
earlier run's ``--json`` without running anything (:mod:`.render`).

    edge-limiter bench [--quick] [--only core,gateway,identity,...] [--json PATH] [--write PATH]
    edge-limiter bench --from-json PATH --write BENCHMARKS.md

The sections live in :mod:`.interpreters` (core, the gateway on Pyodide, imports),
:mod:`.workerd` (gateway, object, flood, leases) and :mod:`.footprint` (startup, memory);
what they share (the origin, the load generator, the runtime and its peers) in
:mod:`.runtime`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from edge_limiter.tools import ROOT
from edge_limiter.tools.bench import runtime as rt
from edge_limiter.tools.bench.flood import section_flood
from edge_limiter.tools.bench.footprint import section_memory, section_startup
from edge_limiter.tools.bench.identity import section_identity
from edge_limiter.tools.bench.interpreters import (
    section_core,
    section_gateway_python,
    section_imports,
)
from edge_limiter.tools.bench.render import render_document
from edge_limiter.tools.bench.report import Report
from edge_limiter.tools.bench.workerd import (
    section_gateway,
    section_leases,
    section_object,
)
from edge_limiter.tools.local_gateway import project_deployment
from edge_limiter.tools.replay.bench import measure as measure_replay
from edge_limiter.tools.toolchain import (
    PYODIDE_OF,
    PYTHON_ENV,
    PYTHONS,
    python_of,
    requested_python,
)

SECTIONS = (
    "core",
    "gateway",
    "identity",
    "object",
    "flood",
    "leases",
    "startup",
    "memory",
    "replay",
)


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


def local_runtime() -> str:
    """The npm packages the local runtime is made of, as installed."""
    versions = []
    for package in ("wrangler", "miniflare", "workerd", "pyodide", "pyodide-314"):
        try:
            manifest = json.loads((ROOT / "node_modules" / package / "package.json").read_text())
        except (OSError, ValueError):
            continue
        versions.append(f"{package} {manifest.get('version', '?')}")
    return "local workerd through Miniflare, hosting npm Pyodide (" + ", ".join(versions) + ")"


#: What a run measures: a change here makes the run's commit not the code measured.
MEASURED = (
    "src",
    "durable_objects",
    "scripts",
    "package.json",
    "package-lock.json",
    "pyproject.toml",
    "wrangler.toml",
)


def python_label() -> str:
    """The Python the runtimes run, and why (wrangler.toml's or the one asked for)."""
    dep = project_deployment()
    asked = requested_python()
    python = asked or python_of(dep.compatibility_date, dep.compatibility_flags)
    how = f"{PYTHON_ENV}={asked}" if asked else "wrangler.toml"
    return f"Python {python} (Pyodide {PYODIDE_OF[python]}; {how})"


def revision() -> tuple[str, bool]:
    """The checkout's commit, and whether the code a run measures differs from it (docs and
    tests may: they are not measured)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False, cwd=ROOT)
        return done.stdout.strip() if done.returncode == 0 else ""

    changed = git("status", "--porcelain", "--untracked-files=no", "--", *MEASURED)
    return git("rev-parse", "--short", "HEAD"), bool(changed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edge-limiter bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny numbers: a smoke test")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--json", type=Path, help="also write every number here")
    parser.add_argument(
        "--write", type=Path, help="write the document (BENCHMARKS.md) from the figures"
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="JSON",
        help="run nothing: take the figures of an earlier --json (for --write)",
    )
    parser.add_argument(
        "--python",
        choices=PYTHONS,
        help="the Python every runtime runs (default: what wrangler.toml selects); the same as "
        f"${PYTHON_ENV}",
    )
    parser.add_argument(
        "--flood-rates",
        default="400",
        help="the flood section's rates (req/s), comma-separated, e.g. 50,100,200,400",
    )
    args = parser.parse_args(argv)
    if args.python:
        # Every runtime the sections start (LocalGateway) and the Node-side Pyodide runs read it.
        os.environ[PYTHON_ENV] = args.python
    if args.from_json:
        if not args.write:
            parser.error("--from-json needs --write FILE")
        data = json.loads(args.from_json.read_text())
    else:
        data = run(parser, args, sys.argv[1:] if argv is None else argv)
        if args.json:
            args.json.write_text(json.dumps(data, indent=2, default=str) + "\n")
    if args.write:
        args.write.write_text(render_document(data))
        print(f"\nwrote {args.write}", flush=True)
    return 0


def section_replay(report: Report, quick: bool) -> None:
    """The replay's speed against reading its log, and a whole replay's peak memory."""
    lines, keys = (2_000, 200) if quick else (1_000_000, 100_000)
    report.section("replay", measure_replay(lines, keys, lines if quick else 200_000))


def run(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]
) -> dict[str, Any]:
    """Run the chosen sections; every figure, with what says where and how they were taken."""
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    commit, dirty = revision()
    meta = {
        "machine": machine(),
        "runtime": local_runtime(),
        "command": " ".join(["edge-limiter bench", *argv]),
        "date": datetime.now(UTC).date().isoformat(),
        "commit": commit,
        "dirty": dirty,
        "quick": args.quick,
        "python": python_label(),
    }
    report = Report(meta)
    print(f"Machine: {meta['machine']}. {meta['python']}. Command: {meta['command']}", flush=True)
    if "core" in chosen:
        section_core(report, args.quick)
    if "replay" in chosen:
        section_replay(report, args.quick)
    with rt.origin_server() as origin:
        # Each section (and each round) runs on a fresh runtime, so none inherits another's
        # heap, timers or counters.
        if "gateway" in chosen:
            section_gateway(report, args.quick, origin)
            section_gateway_python(report, args.quick)
        if "identity" in chosen:
            section_identity(report, args.quick, origin)
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
    return report.data


if __name__ == "__main__":
    sys.exit(main())
