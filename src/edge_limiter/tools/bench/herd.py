"""A herd on a cached route: many clients ask for one URI nobody has fetched yet.

    scripts/dev --port 8936 --quiet &        # the example config and its demo origins
    .venv/bin/python -m edge_limiter.tools.bench.herd http://127.0.0.1:8936 [--clients 100]
                                                     [--rounds 3]

Each round sends ``--clients`` GETs at once for a new URI under the example config's
cached ``catalog`` route, each from its own address, with the demo origin answering after
300 ms (``X-Demo-Delay``). Prints one JSON line per run: for each round, how many
fetches reached the origin (the demo origin numbers its answers, so distinct numbers are
distinct fetches), how many answers were cache hits, and the p50 and max latency in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid

import httpx


async def _one(client: httpx.AsyncClient, url: str, ip: str) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    answer = await client.get(url, headers={"cf-connecting-ip": ip, "x-demo-delay": "300"})
    return answer, (time.perf_counter() - started) * 1000


async def _run(base: str, clients: int, rounds: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    limits = httpx.Limits(max_connections=clients + 10)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        for number in range(rounds):
            url = f"{base}/v1/catalog/herd-{uuid.uuid4().hex[:8]}"
            answers = await asyncio.gather(
                *(_one(client, url, f"10.9.{number}.{i % 250}") for i in range(clients))
            )
            fetches = {a.json().get("n") for a, _ in answers if a.status_code == 200}
            latencies = sorted(ms for _, ms in answers)
            out.append(
                {
                    "origin_fetches": len(fetches),
                    "statuses": sorted({a.status_code for a, _ in answers}),
                    "hits": sum(1 for a, _ in answers if a.headers.get("x-cache") == "HIT"),
                    "p50_ms": round(statistics.median(latencies)),
                    "max_ms": round(latencies[-1]),
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the gateway, e.g. http://127.0.0.1:8936")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_run(args.base.rstrip("/"), args.clients, args.rounds))))


if __name__ == "__main__":
    main()
