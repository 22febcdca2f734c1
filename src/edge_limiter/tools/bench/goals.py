"""Issue 10's goals, as the issue writes them, with what a benchmark run measured and the
verdict its figures give."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from edge_limiter.tools.bench.cells import Data, fmt, percent, times
from edge_limiter.tools.bench.flood import no_call_share
from edge_limiter.tools.bench.tables import (
    BARE_BOUND,
    FLOOR_FORWARD,
    FLOOR_OBJECT,
    JS_FORWARD,
    LEASED,
    LIMITED,
    OUR_OBJECT,
    PROJECT,
)

#: Issue 10's goals, as the issue writes them.
GOALS = (
    "limited route p50 at most 1.5 ms above a JS Worker forwarding to the same origin",
    "abusive key (10x its limit, 10 s): at least 90% of denials with no Durable Object "
    "call, nothing admitted beyond the limit",
    "every algorithm's object step O(1) amortized; `sliding_log` at 10,000/hour within 3x "
    "of `token_bucket`",
    "one hot key at 50 in flight: within 1.3x of a JS Durable Object, at least 1,000 decisions/s",
    "`check` for token bucket and GCRA at most 1 us (about 3x a minimal bucket), 3x faster "
    "than `limits`, Pyodide within 2.5x of CPython",
    "10 clients of one key keep 80% of their throughput and at most 2x p99 beside a 400 "
    "req/s flood of another key; report the absorbable rate",
    "startup at most 10% over a bare Python Worker",
    "RSS after 20,000 requests and after 5,000 keys; zero rows after cleanup",
)


def goals(data: Data) -> list[tuple[int, str, str, str]]:
    """Issue 10's goals with what this run measured and the verdict it gives."""
    checks: list[Callable[[Data], tuple[str, str]]] = [
        _goal_latency,
        _goal_abusive,
        _goal_step,
        _goal_object,
        _goal_check,
        _goal_flood,
        _goal_startup,
        _goal_memory,
    ]
    return judged(GOALS, checks, data)


def judged(
    written: Sequence[str], checks: Sequence[Callable[[Data], tuple[str, str]]], data: Data
) -> list[tuple[int, str, str, str]]:
    """Each goal of ``written`` with what ``data`` measured and the verdict its ``check``
    gives; a goal whose figures the run left out is "not measured in this run"."""
    out = []
    for number, (goal, check) in enumerate(zip(written, checks, strict=True), start=1):
        try:
            measured, verdict = check(data)
        except KeyError:
            measured, verdict = "not measured in this run", "-"
        out.append((number, goal, measured, verdict))
    return out


def _goal_latency(data: Data) -> tuple[str, str]:
    rows = data["gateway"]["rows"]
    forward = rows[JS_FORWARD]["p50"]
    above = rows[LIMITED]["p50"] - forward
    leased = rows[LEASED]["p50"] - forward
    floor = rows[FLOOR_FORWARD]["p50"] - forward
    measured = (
        f"{fmt(above)} ms above; with token leases (opt-in) {fmt(leased)}; the floor, a bare "
        f"Python Worker calling a minimal Python Durable Object and forwarding, {fmt(floor)}"
    )
    if above <= 1.5:
        return measured, "**met**"
    verdict = "**missed**"
    if floor > 1.5:
        verdict += ": the floor of any Python rate limiter on this host is past the goal itself"
    if leased <= 1.5:
        verdict += "; met with token leases"
    return measured, verdict


def _goal_abusive(data: Data) -> tuple[str, str]:
    section = data["abusive"]
    share = no_call_share(section)
    admitted, allowed = section["admitted"], section["allowed"]
    if not section["denied"]:
        return f"no denial in this run; {admitted} admitted of {allowed} allowed", "-"
    measured = (
        f"{percent(share)} of {section['denied']} denials with no call; {admitted} admitted of "
        f"{allowed} allowed"
    )
    return measured, met_or_missed(share >= 0.9 and admitted <= allowed)


def _goal_step(data: Data) -> tuple[str, str]:
    ratios = {
        label: data["core"][label]["step:sliding_log"] / data["core"][label]["step:token_bucket"]
        for label in ("cpython", "pyodide")
    }
    measured = (
        f"`sliding_log` (log full) / `token_bucket`: {times(ratios['cpython'])} on CPython, "
        f"{times(ratios['pyodide'])} on Pyodide"
    )
    return measured, met_or_missed(max(ratios.values()) <= 3)


def _goal_object(data: Data) -> tuple[str, str]:
    rows = data["object"]["rows"]
    ours = rows[OUR_OBJECT]
    ratio = rows[ours["peer"]]["rps"] / ours["rps"]
    floor = rows[FLOOR_OBJECT]
    floor_ratio = rows[floor["peer"]]["rps"] / floor["rps"]
    measured = (
        f"{fmt(ours['rps'])} decisions/s, {times(ratio)} the JavaScript object; the minimal "
        f"Python object doing the same, {times(floor_ratio)}"
    )
    parts = [
        f"1,000/s {met_or_missed(ours['rps'] >= 1000)}",
        f"1.3x {met_or_missed(ratio <= 1.3)}",
    ]
    verdict = "; ".join(parts)
    if ratio > 1.3 and floor_ratio > 1.3:
        verdict += " (the floor of any Python Durable Object here is past it)"
    return measured, verdict


def _goal_check(data: Data) -> tuple[str, str]:
    cpython, pyodide = data["core"]["cpython"], data["core"]["pyodide"]
    names = ("token_bucket", "gcra")
    worst = max(cpython[f"check:{name}"] for name in names)
    minimal = worst / cpython["minimal_bucket"]
    versus = min(cpython["limits:fixed_window"] / cpython[f"check:{name}"] for name in names)
    pyo = max(pyodide[f"check:{name}"] / cpython[f"check:{name}"] for name in names)
    measured = (
        f"at most {fmt(worst)} ns ({times(minimal)} the minimal bucket), at least {times(versus)} "
        f"faster than `limits`, Pyodide at most {times(pyo)} CPython"
    )
    parts = [
        f"1 us {met_or_missed(worst <= 1000)}",
        f"3x minimal {met_or_missed(minimal <= 3)}",
        f"3x `limits` {met_or_missed(versus >= 3)}",
        f"2.5x Pyodide {met_or_missed(pyo <= 2.5)}",
    ]
    return measured, "; ".join(parts)


def _goal_flood(data: Data) -> tuple[str, str]:
    section = data["flood"]
    alone = section["alone"]

    def holds(run: Data) -> bool:
        flooded = run["flooded"]
        return bool(flooded["rps"] / alone["rps"] >= 0.8 and flooded["p99"] / alone["p99"] <= 2)

    rates = {int(rate): run for rate, run in section["rates"].items()}
    absorbable = [rate for rate, run in sorted(rates.items()) if holds(run)]
    told = (
        f"the guarantee holds up to {max(absorbable)} req/s"
        if absorbable
        else (f"the guarantee holds at none of {', '.join(str(r) for r in sorted(rates))} req/s")
    )
    run = rates[400]
    flooded = run["flooded"]
    measured = (
        f"at 400 req/s: {times(flooded['rps'] / alone['rps'])} of the throughput alone, p99 "
        f"{times(flooded['p99'] / alone['p99'])}; {told} (absorbable rate, rates tried: "
        f"{', '.join(str(r) for r in sorted(rates))})"
    )
    return measured, met_or_missed(holds(run)) + " at 400 req/s; absorbable rate reported"


def _goal_startup(data: Data) -> tuple[str, str]:
    section = data["startup"]

    def ratio(field: str) -> float:
        values = section[field]
        return float(statistics.median(values[PROJECT]) / statistics.median(values[BARE_BOUND]))

    ready, first = ratio("ready"), ratio("first")
    measured = f"READY {times(ready)}, first answer {times(first)} the bare Python Worker with the same bindings"
    return measured, met_or_missed(first <= 1.10)


def _goal_memory(data: Data) -> tuple[str, str]:
    section = data["memory"]
    ours = section["project"]
    left = section["storage_after_cleanup"]["rows"]
    measured = (
        f"{fmt(ours['boot_mb'])} MB at boot, {fmt(ours['after_requests_mb'])} after "
        f"{section['requests']:,} requests, {fmt(ours['after_keys_mb'])} after "
        f"{section['keys']:,} keys more; {left} rows left after cleanup"
    )
    return measured, "reported; storage " + met_or_missed(left == 0)


def met_or_missed(ok: bool) -> str:
    return "**met**" if ok else "**missed**"
