"""Counters for the operator's status page: what each route decided, and who was limited.

Each isolate counts into a :class:`StatsBatch` and sends it, about once a second, to the
Control Durable Object, which keeps one bucket a minute for the last hour
(:func:`merge`) and sums them for the page (:func:`summary`). Keys appear only as hashes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

MINUTE_MS = 60_000
KEEP_MINUTES = 60
#: Per minute, how many distinct limited keys are kept (the busiest).
KEYS_PER_MINUTE = 200
EVENTS = ("allowed", "limited", "shadow", "store_unavailable", "exempt", "cached_denial")
#: The decision events that deny (a key's own decision, and the deny cache's answer).
DENYING_EVENTS = frozenset(("limited", "cached_denial"))


@dataclass(slots=True)
class StatsBatch:
    """What one isolate saw since its last flush."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    limited_keys: dict[str, int] = field(default_factory=dict)
    """``"route|key_hash"`` -> how many of its requests were limited."""

    def note(self, route: str, event: str, key_hash: str | None = None) -> None:
        per_route = self.counts.setdefault(route, {})
        per_route[event] = per_route.get(event, 0) + 1
        if key_hash is not None and event in DENYING_EVENTS:
            name = f"{route}|{key_hash}"
            self.limited_keys[name] = self.limited_keys.get(name, 0) + 1

    def __bool__(self) -> bool:
        return bool(self.counts)

    def as_data(self, at: int) -> dict[str, Any]:
        """The batch as plain data, counted as of ``at`` (what :func:`merge` reads)."""
        return {"at": at, "counts": self.counts, "keys": self.limited_keys}

    def to_json(self, at: int) -> str:
        return json.dumps(self.as_data(at), separators=(",", ":"))


def merge(stored: dict[str, Any], batch_text: str) -> dict[str, Any]:
    """The stored buckets with a batch added (buckets older than an hour dropped)."""
    batch = json.loads(batch_text)
    at = int(batch["at"])
    minute = str(at // MINUTE_MS)
    buckets: dict[str, Any] = stored.get("buckets", {})
    bucket = buckets.setdefault(minute, {"counts": {}, "keys": {}})
    for route, events in batch.get("counts", {}).items():
        per_route = bucket["counts"].setdefault(route, {})
        for event, count in events.items():
            if event in EVENTS:
                per_route[event] = per_route.get(event, 0) + int(count)
    keys = bucket["keys"]
    for name, count in batch.get("keys", {}).items():
        keys[name] = keys.get(name, 0) + int(count)
    if len(keys) > KEYS_PER_MINUTE:
        kept = sorted(keys.items(), key=lambda item: -item[1])[:KEYS_PER_MINUTE]
        bucket["keys"] = dict(kept)
    oldest = at // MINUTE_MS - KEEP_MINUTES
    stored["buckets"] = {m: b for m, b in buckets.items() if int(m) > oldest}
    return stored


def summary(stored: dict[str, Any], now: int) -> dict[str, Any]:
    """Per route, the last 5 and 60 minutes' counts; the 10 most limited keys of the hour."""
    current = now // MINUTE_MS
    routes: dict[str, dict[str, dict[str, int]]] = {}
    top: dict[str, int] = {}
    for minute, bucket in stored.get("buckets", {}).items():
        age = current - int(minute)
        if age >= KEEP_MINUTES or age < 0:
            continue
        for route, events in bucket["counts"].items():
            windows = routes.setdefault(route, {"5m": {}, "60m": {}})
            for window, span in (("5m", 5), ("60m", 60)):
                if age < span:
                    for event, count in events.items():
                        windows[window][event] = windows[window].get(event, 0) + count
        for name, count in bucket["keys"].items():
            top[name] = top.get(name, 0) + count
    busiest = sorted(top.items(), key=lambda item: (-item[1], item[0]))[:10]
    return {
        "routes": routes,
        "top_limited": [
            {"route": name.split("|", 1)[0], "key_hash": name.split("|", 1)[1], "limited": count}
            for name, count in busiest
        ],
    }
