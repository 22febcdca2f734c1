"""What a replay found, per route: tallies kept as the requests go, and the report as a
terminal table and as JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .reading import Reading

#: Keys listed per route among the most denied.
TOP_KEYS = 10
#: The pseudo-route of requests no route matched.
UNMATCHED = "(no route)"
MINUTE_MS = 60_000


class KeyTally:
    """One key's requests on one route (kept for every key: a few ints)."""

    __slots__ = ("denied", "first_denied", "in_minute", "minute", "peak", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.denied = 0
        self.first_denied = -1
        self.minute = -1
        self.in_minute = 0
        self.peak = 0

    def count(self, at_ms: int, denied: bool) -> None:
        self.requests += 1
        minute = at_ms // MINUTE_MS
        if minute != self.minute:
            self.minute, self.in_minute = minute, 0
        self.in_minute += 1
        self.peak = max(self.peak, self.in_minute)
        if denied:
            if not self.denied:
                self.first_denied = at_ms
            self.denied += 1


@dataclass
class RouteTally:
    """Everything counted for one route."""

    name: str
    requests: int = 0
    denied: int = 0
    """Would-be denials: limited, answered from the deny cache, or (shadow) reported."""
    shadow: int = 0
    """Of ``denied``: on a shadow route (admitted, reported)."""
    cache_hits: int = 0
    replayed: int = 0
    """Answered with a stored Idempotency-Key answer."""
    origin_attempts: int = 0
    reached_origin: int = 0
    """Requests that made at least one attempt at an origin."""
    unkeyed: dict[str, int] = field(default_factory=dict)
    """Key part the log does not give -> requests not replayed for it."""
    keys: dict[str, KeyTally] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    """Denied keys as shown (by their hash)."""
    minutes: dict[int, list[int]] = field(default_factory=dict)
    """Minute (epoch ms // 60000) -> [admitted, denied]."""
    statuses: dict[int, int] = field(default_factory=dict)
    """What the replay answered, by status."""

    def to_json(self) -> dict[str, Any]:
        denied_keys = sum(1 for tally in self.keys.values() if tally.denied)
        top = sorted(
            ((h, t) for h, t in self.keys.items() if t.denied),
            key=lambda item: (-item[1].denied, item[1].first_denied),
        )[:TOP_KEYS]
        replayed = self.requests - sum(self.unkeyed.values())
        return {
            "route": self.name,
            "requests": self.requests,
            "replayed_requests": replayed,
            "denied": self.denied,
            "denied_share": round(self.denied / replayed, 6) if replayed else 0.0,
            "shadow_denied": self.shadow,
            "distinct_keys": len(self.keys),
            "distinct_keys_denied": denied_keys,
            "cache_hits": self.cache_hits,
            "idempotent_replays": self.replayed,
            "origin_attempts": self.origin_attempts,
            "reached_origin": self.reached_origin,
            "origin_calls_saved": replayed - self.reached_origin,
            "not_keyed": dict(self.unkeyed),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "top_denied_keys": [
                {
                    "key": self.labels.get(digest, digest),
                    "key_hash": digest,
                    "requests": tally.requests,
                    "denied": tally.denied,
                    "first_denied": _iso(tally.first_denied),
                    "peak_per_minute": tally.peak,
                }
                for digest, tally in top
            ],
            "per_minute": [
                [_iso(minute * MINUTE_MS), counts[0], counts[1]]
                for minute, counts in sorted(self.minutes.items())
            ],
        }


def _iso(at_ms: int) -> str:
    if at_ms < 0:
        return ""
    moment = datetime.fromtimestamp(at_ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at_ms % 1000:03d}Z"


@dataclass
class Replayed:
    """One config's replay of the logs."""

    config: str
    routes: dict[str, RouteTally] = field(default_factory=dict)
    first_ms: int = -1
    last_ms: int = -1
    agreed: int = 0
    """Gateway logs: decisions the replay made as the gateway had."""
    disagreed: int = 0
    disagreements: list[str] = field(default_factory=list)
    unknown_routes: dict[str, int] = field(default_factory=dict)
    """Gateway logs: lines of routes the config does not have."""

    def route(self, name: str) -> RouteTally:
        tally = self.routes.get(name)
        if tally is None:
            tally = self.routes[name] = RouteTally(name)
        return tally

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "config": self.config,
            "from": _iso(self.first_ms),
            "to": _iso(self.last_ms),
            "routes": [tally.to_json() for tally in self.routes.values()],
        }
        if self.agreed or self.disagreed:
            out["gateway_log"] = {
                "agreed": self.agreed,
                "disagreed": self.disagreed,
                "first_disagreements": self.disagreements,
            }
        if self.unknown_routes:
            out["unknown_routes"] = dict(self.unknown_routes)
        return out


def reading_json(reading: Reading, seconds: float) -> dict[str, Any]:
    return {
        "files": reading.formats,
        "lines": reading.lines,
        "requests": reading.records,
        "malformed": reading.malformed,
        "first_malformed": reading.malformed_shown,
        "skipped": reading.skipped,
        "out_of_order_beyond_window": reading.late,
        "first_out_of_order": reading.late_shown,
        "reorder_window_ms": reading.window_ms,
        "seconds": round(seconds, 3),
    }


def report_json(runs: list[Replayed], reading: Reading, seconds: float) -> dict[str, Any]:
    """The whole report: the reading, each config's replay, and with two configs the
    difference per route (proposed less current)."""
    out: dict[str, Any] = {"reading": reading_json(reading, seconds)}
    out["proposed"] = runs[0].to_json()
    if len(runs) > 1:
        out["current"] = runs[1].to_json()
        out["difference"] = difference(out["proposed"], out["current"])
    return out


_COMPARED = ("denied", "distinct_keys_denied", "cache_hits", "idempotent_replays",
             "reached_origin", "origin_calls_saved")  # fmt: skip


def difference(proposed: dict[str, Any], current: dict[str, Any]) -> list[dict[str, Any]]:
    """Per route of either, each compared figure: proposed less current."""
    mine = {r["route"]: r for r in proposed["routes"]}
    theirs = {r["route"]: r for r in current["routes"]}
    rows = []
    for name in [*mine, *(n for n in theirs if n not in mine)]:
        a, b = mine.get(name, {}), theirs.get(name, {})
        rows.append({"route": name, **{k: a.get(k, 0) - b.get(k, 0) for k in _COMPARED}})
    return rows


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in
                  enumerate(zip(row, widths, strict=True))).rstrip()
        for row in rows
    )  # fmt: skip


def text_report(report: dict[str, Any]) -> str:
    """The report as the terminal shows it."""
    reading = report["reading"]
    lines = [
        f"read {reading['lines']} lines ({reading['requests']} requests) from "
        + ", ".join(f"{name} [{kind}]" for name, kind in reading["files"].items())
        + f" in {reading['seconds']} s",
    ]
    if reading["malformed"]:
        lines.append(f"malformed lines: {reading['malformed']} (first ones below)")
        lines += [f"  {item}" for item in reading["first_malformed"]]
    if reading["out_of_order_beyond_window"]:
        lines.append(
            f"lines out of order by more than {reading['reorder_window_ms'] // 1000} s, not "
            f"replayed: {reading['out_of_order_beyond_window']}"
        )
        lines += [f"  {item}" for item in reading["first_out_of_order"]]
    runs = [("proposed", report["proposed"])]
    if "current" in report:
        runs.append(("current", report["current"]))
    for label, run in runs:
        lines += ["", f"{label}: {run['config']}  ({run['from']} to {run['to']})"]
        rows = [["route", "requests", "denied", "share", "keys", "keys denied", "cache hits",
                 "replays", "origin saved"]]  # fmt: skip
        for r in run["routes"]:
            rows.append([
                r["route"], str(r["requests"]), str(r["denied"]), f"{r['denied_share']:.2%}",
                str(r["distinct_keys"]), str(r["distinct_keys_denied"]), str(r["cache_hits"]),
                str(r["idempotent_replays"]), str(r["origin_calls_saved"]),
            ])  # fmt: skip
        lines.append(_table(rows))
        for r in run["routes"]:
            for part, count in r["not_keyed"].items():
                lines.append(
                    f"  {r['route']}: {count} requests not replayed: the log does not give "
                    f"the key's {part}"
                )
            if r["top_denied_keys"]:
                lines.append(f"  {r['route']}: most denied keys")
                for k in r["top_denied_keys"]:
                    lines.append(
                        f"    {k['key']}  denied {k['denied']} of {k['requests']}, first at "
                        f"{k['first_denied']}, peak {k['peak_per_minute']}/min"
                    )
        if "gateway_log" in run:
            g = run["gateway_log"]
            lines.append(
                f"  the gateway's own decisions: {g['agreed']} the same, {g['disagreed']} not"
            )
            lines += [f"    {item}" for item in g["first_disagreements"]]
        for name, count in run.get("unknown_routes", {}).items():
            lines.append(f"  {count} lines of route {name!r}, which this config does not have")
    if "difference" in report:
        lines += ["", "proposed less current:"]
        rows = [["route", *(k.replace("_", " ") for k in _COMPARED)]]
        for d in report["difference"]:
            rows.append([d["route"], *(f"{d[k]:+d}" for k in _COMPARED)])
        lines.append(_table(rows))
    return "\n".join(lines)
