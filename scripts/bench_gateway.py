"""Benchmark: what the gateway costs per request, against its peer measured in the same run.

The peer is the demo origin called directly (no gateway). Three paths are timed over
loopback, sequentially and with N requests in flight:

- ``origin``     the origin itself;
- ``pass``       through the gateway on a path no route matches (Worker only, no Durable Object);
- ``limited``    through the gateway on a rate-limited route (Worker + one Durable Object call),
                 with a limit high enough that every request is admitted and forwarded.

Prints requests per second and latency percentiles, and the ratios against the origin.
Bounded: a fixed number of requests per path; talks to 127.0.0.1 only.

    .venv/bin/python scripts/bench_gateway.py [--requests 500] [--concurrency 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from build_worker import build  # noqa: E402
from demo_origin import DemoOrigin  # noqa: E402
from local_gateway import LocalGateway  # noqa: E402


async def sequential(url: str, count: int) -> list[float]:
    async with httpx.AsyncClient(timeout=30) as client:
        await client.get(url)  # warm the connection and the isolate
        latencies = []
        for _ in range(count):
            started = time.perf_counter()
            answer = await client.get(url)
            latencies.append(time.perf_counter() - started)
            answer.raise_for_status()
        return latencies


async def concurrent(url: str, count: int, in_flight: int) -> float:
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        gate = asyncio.Semaphore(in_flight)

        async def one() -> None:
            async with gate:
                (await client.get(url)).raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(count)))
        return count / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=50)
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
                latencies = asyncio.run(sequential(url, args.requests))
                rps = asyncio.run(concurrent(url, args.requests, args.concurrency))
                latencies.sort()
                rows[name] = (
                    len(latencies) / sum(latencies),
                    statistics.median(latencies) * 1000,
                    latencies[int(len(latencies) * 0.99) - 1] * 1000,
                    rps,
                )
    base = rows["origin"]
    print(
        f"\n{args.requests} requests per path, {args.concurrency} in flight for the concurrent run"
    )
    print(
        f"{'path':<9}{'seq req/s':>11}{'p50 ms':>9}{'p99 ms':>9}{'conc req/s':>12}{'seq vs origin':>15}{'conc vs origin':>16}"
    )
    for name, (seq, p50, p99, rps) in rows.items():
        print(
            f"{name:<9}{seq:>11.0f}{p50:>9.2f}{p99:>9.2f}{rps:>12.0f}"
            f"{seq / base[0]:>15.2f}{rps / base[3]:>16.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
