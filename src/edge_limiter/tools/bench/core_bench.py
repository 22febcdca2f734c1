"""The pure core's costs, per call, on whatever Python runs this file (CPython or Pyodide).

Prints one JSON object: nanoseconds per call (the median of ``--repeat`` rounds; in each
round every candidate runs once, interleaved, so machine noise hits them alike):

- ``check:<algorithm>``: one ``check`` at a limit every call admits (1,000,000/hour), the
  clock read once per call as a real caller does;
- ``core:<algorithm>``: the same ``check`` with ``now`` passed in (advancing 1 ms a call)
  and no clock read: the core alone, which never reads a clock (``clock`` is the read
  itself, ``int(time.time() * 1000)``, on its own);
- ``minimal_bucket``: the floor, a token bucket of two mutable floats with the same clock
  read (no decision object, no validation, no exactness);
- ``limits:<strategy>``: the ``limits`` library's ``hit`` on its memory storage, same
  workload (only where ``limits`` is installed: not on Pyodide);
- ``step:<algorithm>``: the Durable Object's whole step (``KeyStore.decide``: JSON in,
  decide, JSON out, the row write handed to SQL) with SQL that does nothing, at a limit
  the requests keep full: ``token_bucket`` at 1,000,000/hour and ``sliding_log`` at
  10,000/hour with its log full (10,000 entries), one request per 360 ms of clock.

    python -m edge_limiter.tools.bench.core_bench [--calls 200000] [--repeat 7]
    node scripts/bench/pyodide_core.mjs [the same arguments]     (on npm Pyodide)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from edge_limiter.core.ratelimit.algorithms import make_algorithm
from edge_limiter.core.ratelimit.keystore import KeyStore
from edge_limiter.core.ratelimit.protocol import StoreRequest
from edge_limiter.core.ratelimit.rates import Limit, Rate

ALGORITHMS = ("token_bucket", "gcra", "sliding_window", "fixed_window", "sliding_log")
HOUR_MS = 3_600_000
T0 = 1_700_000_000_000

Runner = Callable[[int], float]
"""Runs ``n`` calls, returns the seconds they took."""


def check_runner(name: str) -> Runner:
    quota = 10_000 if name == "sliding_log" else 1_000_000
    alg = make_algorithm(name, Limit(Rate(quota, HOUR_MS)))

    def run(n: int) -> float:
        check = alg.check
        clock = time.time
        state: Any = None
        started = time.perf_counter()
        for _ in range(n):
            now = int(clock() * 1000)
            _, state = check(state, now, 1)
        return time.perf_counter() - started

    return run


def core_runner(name: str) -> Runner:
    quota = 10_000 if name == "sliding_log" else 1_000_000
    alg = make_algorithm(name, Limit(Rate(quota, HOUR_MS)))

    def run(n: int) -> float:
        check = alg.check
        state: Any = None
        now = T0
        started = time.perf_counter()
        for _ in range(n):
            now += 1
            _, state = check(state, now, 1)
        return time.perf_counter() - started

    return run


def clock_runner() -> Runner:
    def run(n: int) -> float:
        clock = time.time
        started = time.perf_counter()
        for _ in range(n):
            int(clock() * 1000)
        return time.perf_counter() - started

    return run


class MinimalBucket:
    """Two floats, no checks: the least a token bucket can do per call."""

    def __init__(self, rate_per_ms: float, burst: float) -> None:
        self.rate, self.burst = rate_per_ms, burst
        self.level, self.at = burst, 0.0

    def take(self, now: float) -> bool:
        level = min(self.burst, self.level + (now - self.at) * self.rate)
        self.at = now
        if level >= 1:
            self.level = level - 1
            return True
        self.level = level
        return False


def minimal_runner() -> Runner:
    def run(n: int) -> float:
        bucket = MinimalBucket(1_000_000 / HOUR_MS, 1_000_000)
        take = bucket.take
        clock = time.time
        started = time.perf_counter()
        for _ in range(n):
            take(int(clock() * 1000))
        return time.perf_counter() - started

    return run


def limits_runners() -> dict[str, Runner]:
    try:  # not installed on Pyodide: the peer is measured on CPython only
        from limits import RateLimitItemPerHour  # noqa: PLC0415
        from limits.storage import MemoryStorage  # noqa: PLC0415
        from limits.strategies import (  # noqa: PLC0415
            FixedWindowRateLimiter,
            MovingWindowRateLimiter,
            SlidingWindowCounterRateLimiter,
        )
    except ImportError:
        return {}
    strategies = {
        "fixed_window": (FixedWindowRateLimiter, 1_000_000),
        "sliding_window": (SlidingWindowCounterRateLimiter, 1_000_000),
        # The moving window is its sliding log; the same 10,000/hour as ours.
        "moving_window": (MovingWindowRateLimiter, 10_000),
    }
    runners: dict[str, Runner] = {}
    for label, (strategy, quota) in strategies.items():

        def run(n: int, strategy: Any = strategy, quota: int = quota) -> float:
            limiter = strategy(MemoryStorage())
            item = RateLimitItemPerHour(quota)
            hit = limiter.hit
            started = time.perf_counter()
            for _ in range(n):
                hit(item, "key")
            return time.perf_counter() - started

        runners[f"limits:{label}"] = run
    return runners


class NullSql:
    """SQL that does nothing: the step's own cost, without SQLite's."""

    def run(self, query: str, *args: Any) -> None:
        return None

    def rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        return []


def step_runner(name: str, quota: int) -> Runner:
    payload = StoreRequest("check", name, (Limit(Rate(quota, HOUR_MS)),)).to_json()
    spacing = HOUR_MS // quota if name == "sliding_log" else 360

    def run(n: int) -> float:
        store = KeyStore(NullSql())
        now = T0
        if name == "sliding_log":
            for _ in range(quota):  # fill the log: the window holds `quota` entries
                now += spacing
                store.decide(payload, now)
        decide = store.decide
        started = time.perf_counter()
        for _ in range(n):
            now += spacing
            decide(payload, now)
        return time.perf_counter() - started

    return run


def measure(runners: dict[str, Runner], calls: int, repeat: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeat):
        for name, run in runners.items():
            samples[name].append(run(calls) / calls * 1e9)
    return {name: round(statistics.median(values), 1) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    runners: dict[str, Runner] = {f"check:{name}": check_runner(name) for name in ALGORITHMS}
    runners.update({f"core:{name}": core_runner(name) for name in ALGORITHMS})
    runners["clock"] = clock_runner()
    runners["minimal_bucket"] = minimal_runner()
    runners.update(limits_runners())
    results: dict[str, Any] = measure(runners, args.calls, args.repeat)
    steps = {
        "step:token_bucket": step_runner("token_bucket", 1_000_000),
        "step:sliding_log": step_runner("sliding_log", 10_000),
    }
    results.update(measure(steps, max(1, args.calls // 10), args.repeat))
    results["python"] = sys.version.split()[0]
    results["platform"] = sys.platform
    return results


if __name__ == "__main__":
    print(json.dumps(main()))
