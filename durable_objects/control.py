"""The Control Durable Object: one instance (``control``) for the operator's shared state.

It holds the per-key overrides every isolate loads, and the counters behind the status
page. Each method loads one row, runs a pure step from :mod:`edge_limiter.core.control`
and writes the row back, with no ``await`` between the read and the write.
"""

from __future__ import annotations

import time
from typing import Any

from workers import DurableObject

from edge_limiter.core.control import apply_overrides_call, apply_stats_call
from edge_limiter.platform.convert import absent

_SCHEMA = "CREATE TABLE IF NOT EXISTS control (name TEXT PRIMARY KEY, value TEXT NOT NULL)"


def _now_ms() -> int:
    return int(time.time() * 1000)


class Control(DurableObject):  # type: ignore[misc]
    """Overrides and counters, shared by every isolate."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.sql = ctx.storage.sql
        self.sql.exec(_SCHEMA)

    def _load(self, name: str) -> str | None:
        rows = self.sql.exec("SELECT value FROM control WHERE name = ?", name).toArray()
        return None if not rows or absent(rows[0]["value"]) else str(rows[0]["value"])

    def _store(self, name: str, value: str | None) -> None:
        if value is None:
            return
        self.sql.exec(
            "INSERT INTO control (name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            name,
            value,
        )

    async def overrides(self, payload: str) -> str:
        """List, set or remove overrides."""
        answer, stored = apply_overrides_call(str(payload), self._load("overrides"), _now_ms())
        self._store("overrides", stored)
        return answer

    async def stats(self, payload: str) -> str:
        """Add a batch of counters, or read the summary."""
        answer, stored = apply_stats_call(str(payload), self._load("stats"), _now_ms())
        self._store("stats", stored)
        return answer
