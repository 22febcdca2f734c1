"""Benchmark: what the gateway costs per request, against its peer measured in the same run.

The peer is the demo origin called directly (no gateway). Three paths are timed over
loopback with a keep-alive Node load generator (``scripts/load.mjs``, so the client is
not the bottleneck: its own ceiling is the ``origin`` row), one at a time and with N in
flight, repeated and reported as medians:

- ``origin``     the origin itself;
- ``pass``       through the gateway on a path no route matches (Worker only, no Durable Object);
- ``limited``    through the gateway on a rate-limited route (Worker + one Durable Object call),
                 with a limit high enough that every request is admitted and forwarded.

Prints requests per second and latency percentiles, and the ratios against the origin.
Bounded: a fixed number of requests per path; talks to 127.0.0.1 only.

    .venv/bin/python scripts/bench_gateway.py [--requests 1000] [--concurrency 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from build_worker import build  # noqa: E402
from demo_origin import DemoOrigin  # noqa: E402
from local_gateway import LocalGateway  # noqa: E402

LOAD = ROOT / "scripts" / "load.mjs"


def load(url: str, requests: int, concurrency: int) -> dict[str, Any]:
    """One run of the load generator."""
    done = subprocess.run(
        ["node", str(LOAD), url, "--requests", str(requests), "--concurrency", str(concurrency)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    if set(result["statuses"]) != {"200"}:
        raise RuntimeError(f"{url}: unexpected statuses {result['statuses']}")
    return result


def median_of(runs: list[dict[str, Any]], field: str) -> float:
    return statistics.median(run[field] for run in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, DemoOrigin("bench") as origin:
        worker = Path(tmp) / "worker"
        build(worker)
        config = {
            "origin": origin.url,
            "routes": [
                {
                    "name": "bench",
                    "match": {"path": "/limited"},
                    "limits": "1000000/hour",
                    "algorithm": "gcra",
                    "key": "global",
                }
            ],
        }
        with LocalGateway(worker, {"EDGE_LIMITER": config}, persist_dir=Path(tmp) / "state") as gw:
            paths = {
                "origin": f"{origin.url}/limited",
                "pass": f"{gw.url}/unmatched",
                "limited": f"{gw.url}/limited",
            }
            rows = {}
            for name, url in paths.items():
                one = [load(url, args.requests, 1) for _ in range(args.repeat)]
                many = [load(url, args.requests, args.concurrency) for _ in range(args.repeat)]
                rows[name] = (
                    median_of(one, "rps"),
                    median_of(one, "p50"),
                    median_of(one, "p99"),
                    median_of(many, "rps"),
                    median_of(many, "p50"),
                )
    base = rows["origin"]
    print(
        f"\n{args.requests} requests per run, medians of {args.repeat} runs; "
        f"{args.concurrency} in flight for the concurrent runs"
    )
    print(
        f"{'path':<9}{'1 at a time req/s':>18}{'p50 ms':>9}{'p99 ms':>9}"
        f"{f'{args.concurrency} in flight req/s':>22}{'p50 ms':>9}"
        f"{'req/s vs origin':>17}{f'{args.concurrency} in flight vs origin':>26}"
    )
    for name, (seq, p50, p99, rps, p50_many) in rows.items():
        print(
            f"{name:<9}{seq:>18.0f}{p50:>9.2f}{p99:>9.2f}{rps:>22.0f}{p50_many:>9.2f}"
            f"{seq / base[0]:>17.2f}{rps / base[3]:>26.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
