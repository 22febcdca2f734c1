"""The replay's speed and memory, each against its peer of the same run.

    python -m edge_limiter.tools.replay.bench [--lines 1000000] [--keys 100000]
                                              [--replayed 200000] [--json FILE]

Writes a combined-format log of ``--lines`` lines over a day from ``--keys`` client
addresses (and one more, far over its limits, on one line in 100) (plain text, in a temporary directory) for a config of five routes, one per
algorithm, then measures:

- reading alone: the whole file parsed and put in order (the peer: what no replay can
  beat);
- the replay: the first ``--replayed`` lines through the whole gateway, lines/s, and its
  ratio to reading (the issue's goal: 50,000 lines/s, at most 5x slower than reading);
- memory: the whole file replayed (every key), the process's peak RSS (goal: 300 MB for
  1,000,000 lines and 100,000 keys), in a child process so nothing else counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from edge_limiter.core.config import parse_config

from .driver import Replay, replay_all
from .reading import read_logs

DAY_S = 86_400
START_S = 1_767_225_600  # 2026-01-01T00:00:00Z
ROUTES = (
    ("login", "POST", "/v1/login", "10/minute", "sliding_log"),
    ("search", "GET", "/v1/search", "60/minute", "sliding_window"),
    ("items", "GET", "/v1/items/*", "600/hour", "token_bucket"),
    ("orders", "POST", "/v1/orders", "100/hour", "fixed_window"),
    ("feed", "GET", "/v1/feed", "30/minute", "gcra"),
)
#: The one client far over its limits (1 line in 100).
NOISY = "192.0.2.66"
TARGETS = {
    "login": "/v1/login",
    "search": "/v1/search?q=shoes",
    "items": "/v1/items/42",
    "orders": "/v1/orders",
    "feed": "/v1/feed",
}


def config() -> dict[str, Any]:
    return {
        "origin": "https://origin.test",
        "routes": [
            {"name": name, "match": {"methods": [method], "path": path}, "limits": limits,
             "algorithm": algorithm, "key": "ip"}
            for name, method, path, limits, algorithm in ROUTES
        ],
    }  # fmt: skip


def write_log(path: Path, lines: int, keys: int, seed: int = 1) -> None:
    """``lines`` requests over a day, from ``keys`` addresses (every one of them used)."""
    rng = random.Random(seed)
    step = DAY_S / lines
    methods = {name: method for name, method, *_ in ROUTES}
    names = list(TARGETS)
    with path.open("w", encoding="utf-8") as out:
        stamp_s, stamp = -1, ""
        for n in range(lines):
            second = START_S + int(n * step)
            if second != stamp_s:
                stamp_s = second
                stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(second))
            key = n % keys if n < keys else rng.randrange(keys)
            ip = f"10.{key >> 16 & 255}.{key >> 8 & 255}.{key & 255}"
            if n % 100 == 1:
                ip = NOISY  # one client at many times its limits: denials to count
            name = names[n % 5]
            out.write(
                f'{ip} - - [{stamp}] "{methods[name]} {TARGETS[name]} HTTP/1.1" 200 512 '
                f'"-" "bench/1.0"\n'
            )


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def read_only(path: Path) -> tuple[int, float]:
    started = time.perf_counter()
    records, _ = read_logs([path])
    count = sum(1 for _ in records)
    return count, time.perf_counter() - started


def replay(path: Path, limit: int | None) -> tuple[int, float, dict[str, Any]]:
    run = Replay(parse_config(config()), "bench")
    records, _ = read_logs([path])

    def first() -> Any:
        for n, record in enumerate(records):
            if limit is not None and n >= limit:
                return
            yield record

    started = time.perf_counter()
    asyncio.run(replay_all(first(), [run]))
    seconds = time.perf_counter() - started
    total = sum(t.requests for t in run.result.routes.values())
    denied = sum(t.denied for t in run.result.routes.values())
    objects = len(run.sim._world.store.objects)
    return total, seconds, {"denied": denied, "objects_held_at_end": objects}


def measure(lines: int, keys: int, replayed: int) -> dict[str, Any]:
    """The replay's figures for a log of ``lines`` lines from ``keys`` clients: reading
    alone, the first ``replayed`` lines replayed, and a whole replay's peak RSS (in a
    child process)."""
    with tempfile.TemporaryDirectory(prefix="replay-bench-") as tmp:
        log = Path(tmp) / "access.log"
        write_log(log, lines, keys)
        read_count, read_s = read_only(log)
        n, replay_s, _ = replay(log, min(replayed, lines))
        child = subprocess.run(
            [sys.executable, "-m", "edge_limiter.tools.replay.bench", "--memory-child", str(log)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        memory = json.loads(child.stdout)
    reading_rate = read_count / read_s
    replay_rate = n / replay_s
    return {
        "lines": lines,
        "keys": keys,
        "routes": len(ROUTES),
        "reading_lines_per_s": round(reading_rate),
        "replay_lines_per_s": round(replay_rate),
        "replay_timed_lines": n,
        "replay_slower_than_reading": round(reading_rate / replay_rate, 1),
        "full_replay_lines_per_s": round(memory["lines"] / memory["seconds"]),
        "full_replay_peak_rss_mb": round(memory["rss_mb"]),
        "full_replay_objects_held_at_end": memory["objects_held_at_end"],
        "goal_lines_per_s": 50_000,
        "goal_ratio": 5,
        "goal_rss_mb": 300,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edge_limiter.tools.replay.bench")
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--replayed", type=int, default=200_000, help="lines timed for speed")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--memory-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child is not None:
        count, seconds, extra = replay(args.memory_child, None)
        print(json.dumps({"lines": count, "seconds": seconds, "rss_mb": _rss_mb(), **extra}))
        return 0
    figures = measure(args.lines, args.keys, args.replayed)
    reading_rate = figures["reading_lines_per_s"]
    replay_rate = figures["replay_lines_per_s"]
    print(f"{args.lines} lines, {args.keys} keys, {len(ROUTES)} routes (one per algorithm)")
    print(f"reading alone (the peer):   {reading_rate:>9,.0f} lines/s")
    print(
        f"replay, whole gateway:      {replay_rate:>9,.0f} lines/s  "
        f"({figures['replay_slower_than_reading']}x slower than reading; goal 50,000 "
        f"lines/s and at most 5x)"
    )
    print(
        f"replay of every line:       {figures['full_replay_lines_per_s']:>9,} lines/s, peak RSS "
        f"{figures['full_replay_peak_rss_mb']} MB (goal 300 MB)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
