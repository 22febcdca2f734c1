"""The flood sections: one key at 10x its limit (how many denials cost no object call),
and clients of one key beside an open-loop flood of another, on the gateway and on the
floor (a bare Python Worker that answers 429 to the flooded key and calls a minimal Python
Durable Object for the clients), each in a runtime of its own."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import TYPE_CHECKING, Any

from edge_limiter.tools.bench import runtime as rt
from edge_limiter.tools.bench.cells import Data, Row, fmt, percent, times
from edge_limiter.tools.bench.runtime import KEY

if TYPE_CHECKING:  # the report renders this module's tables: no import at run time
    from edge_limiter.tools.bench.report import Report

#: Every flooded key starts so: the floor Worker answers 429 to these.
FLOOD_PREFIX = "flood-"


def section_flood(
    report: Report, quick: bool, origin: str, flood_rates: tuple[int, ...] = (400,)
) -> None:
    seconds = 1 if quick else 10
    with rt.runtime(origin) as gw:
        _abusive(report, gw, seconds)
        ours = _beside_floods(gw, "/limited/x", "/small/x", flood_rates, seconds)
    with rt.bare_python(origin) as bare:
        floor = _beside_floods(bare, "/object-floor/x", "/deny/x", flood_rates, seconds)
    report.section("flood", {"seconds": seconds, **ours, "floor": floor})


def _abusive(report: Report, gw: Any, seconds: int) -> None:
    """Issue 10's goal 2: one key at 10x its limit (100/minute -> 1,000/minute)."""
    rate = 1000 / 60
    before = rt.decide_calls(gw)
    abusive = rt.load(
        f"{gw.url}/small/x",
        requests=int(rate * seconds),
        rate=rate,
        headers={KEY: f"abusive-{time.time_ns()}"},
        warmup=0,
    )
    calls = rt.decide_calls(gw) - before
    report.section(
        "abusive",
        {
            "admitted": abusive["statuses"].get("200", 0),
            "denied": abusive["statuses"].get("429", 0),
            "calls": calls,
            # What may be admitted: the bucket, and what refills meanwhile.
            "allowed": int(100 + 100 * seconds / 60),
            "limit": "100/minute",
            "rate": rate,
            "seconds": seconds,
        },
    )


def _beside_floods(
    gw: Any, victims_path: str, flood_path: str, flood_rates: tuple[int, ...], seconds: int
) -> Data:
    """10 clients of one key on ``victims_path``, alone and beside a flood of another key
    on ``flood_path`` at each rate."""
    victims = f"{gw.url}{victims_path}"
    alone = rt.load(victims, duration=seconds, concurrency=10, headers={KEY: "victims"})
    runs: dict[str, Any] = {}
    for flood_rate in flood_rates:
        flood, tool = _start_flood(f"{gw.url}{flood_path}", flood_rate, seconds)
        flooded = rt.load(victims, duration=seconds, concurrency=10, headers={KEY: "victims"})
        out, _ = flood.communicate(timeout=120)
        summary = _hey_summary(out) if tool.startswith("hey") else json.loads(out)
        runs[str(flood_rate)] = {"flooded": flooded, "flood": summary, "tool": tool}
    return {"alone": alone, "rates": runs}


def _start_flood(url: str, flood_rate: int, seconds: int) -> tuple[Any, str]:
    """An open-loop flood of one new key at ``flood_rate`` requests/s (hey when installed)."""
    hey = shutil.which("hey")
    flood_key = f"{FLOOD_PREFIX}{time.time_ns()}"
    if hey and flood_rate % 10 == 0:
        # Workers each rate-limited to 10/s: an open loop per worker.
        workers = flood_rate // 10
        command = [hey, "-z", f"{seconds}s", "-c", str(workers), "-q", "10"]
        command += ["-H", f"{KEY}: {flood_key}", url]
        return subprocess.Popen(command, stdout=subprocess.PIPE, text=True), (
            f"hey -c {workers} -q 10"
        )
    flood = rt.start_load(
        url, requests=flood_rate * seconds, rate=flood_rate, headers={KEY: flood_key}, warmup=0
    )
    return flood, f"scripts/load.mjs --rate {flood_rate}"


def _hey_summary(text: str) -> dict[str, Any]:
    """Requests/sec and the status counts from hey's report."""
    summary: dict[str, Any] = {"statuses": {}}
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Requests/sec:"):
            summary["rps"] = float(line.split()[1])
        elif line.startswith("[") and "]" in line and "responses" in line:
            status, count = line[1 : line.index("]")], int(line.split()[1])
            summary["statuses"][status] = count
    return summary


def no_call_share(section: Data) -> float:
    """The share of denials answered with no object call (every admission costs one)."""
    denied = int(section["denied"])
    answered = int(section["calls"]) - int(section["admitted"])
    return max(0, denied - answered) / max(1, denied)


def abusive_table(data: Data) -> tuple[list[str], list[Row], list[str]]:
    section = data["abusive"]
    admitted, denied, calls = section["admitted"], section["denied"], section["calls"]
    allowed = section["allowed"]
    rows: list[Row] = [
        [
            admitted + denied,
            admitted,
            allowed,
            times(admitted / allowed),
            denied,
            calls,
            percent(no_call_share(section)),
        ]
    ]
    header = [
        "requests",
        "admitted",
        "allowed at most",
        "admitted / allowed",
        "denied",
        "object calls",
        "denials answered with no call",
    ]
    notes = [
        f"One key at 10x its limit ({section['limit']}: {fmt(section['rate'])} req/s for "
        f"{section['seconds']} s); allowed at most is the limit plus what refills meanwhile."
    ]
    return header, rows, notes


def shares(section: Data) -> dict[int, tuple[float, float | None]]:
    """Per flood rate: the victims' share of their throughput alone on the gateway, and on
    the floor (None when the run measured no floor)."""

    def share(part: Data, rate: str) -> float:
        return float(part["rates"][rate]["flooded"]["rps"] / part["alone"]["rps"])

    floor = section.get("floor")
    return {
        int(rate): (
            share(section, rate),
            share(floor, rate) if floor and rate in floor["rates"] else None,
        )
        for rate in section["rates"]
    }


def flood_table(data: Data) -> tuple[list[str], list[Row], list[str]]:
    section = data["flood"]
    floor = section.get("floor")
    alone = section["alone"]
    by_rate = shares(section)

    def floor_cells(rate: int | None) -> list[Any]:
        if not floor:
            return []
        if rate is None:
            return [times(1), "-"]
        ours, theirs = by_rate[rate]
        if theirs is None:
            return ["-", "-"]
        return [times(theirs), times(ours / theirs)]

    first = ["alone", "-", alone["rps"], alone["p50"], alone["p99"], times(1), times(1)]
    rows: list[Row] = [first + floor_cells(None)]
    for rate, run in sorted(section["rates"].items(), key=lambda item: int(item[0])):
        flooded = run["flooded"]
        rows.append(
            [
                "beside the flood",
                f"{rate} ({fmt(run['flood'].get('rps', 0))} served)",
                flooded["rps"],
                flooded["p50"],
                flooded["p99"],
                times(flooded["rps"] / alone["rps"]),
                times(flooded["p99"] / alone["p99"]),
                *floor_cells(int(rate)),
            ]
        )
    header = ["10 clients", "flood R req/s", "req/s", "p50 ms", "p99 ms", "/ alone", "p99 / alone"]
    if floor:
        header += ["floor: / alone", "share / floor's"]
    tools = {run["tool"].split()[0] for run in section["rates"].values()}
    generator = {
        frozenset({"scripts/load.mjs"}): "`scripts/load.mjs --rate R`",
        frozenset({"hey"}): "`hey -q 10`, one worker per 10 req/s",
    }.get(frozenset(tools), "`hey`, or `scripts/load.mjs --rate R`")
    notes = [
        f"10 clients of one key in a closed loop, {section['seconds']} s each, alone and while "
        f"another key (100/minute) is flooded at R req/s in an open loop ({generator})."
    ]
    if floor:
        notes.append(
            "The floor, in a runtime of its own: a bare Python Worker whose clients call a "
            "minimal Python Durable Object and forward, and which answers 429 to the flooded "
            f"key without anything else (its clients alone: {fmt(floor['alone']['rps'])} "
            "req/s); `floor: / alone` is its clients' share of their throughput alone, "
            "`share / floor's` ours against it (1.00x: a flood costs the gateway's clients no "
            "more than it costs the floor's)."
        )
    return header, rows, notes
