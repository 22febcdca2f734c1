"""A small SQLite-backed Durable Object: the local runtime's tests drive it over RPC."""

from __future__ import annotations

import json
import time
from typing import Any

from workers import DurableObject, Response


class Counter(DurableObject):
    """Named counters in SQLite, plus a log of fired alarms."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        sql = self.ctx.storage.sql
        sql.exec(
            "CREATE TABLE IF NOT EXISTS counter (name TEXT PRIMARY KEY, value INTEGER NOT NULL)"
        )
        sql.exec("CREATE TABLE IF NOT EXISTS alarm_log (fired_at_ms INTEGER NOT NULL)")

    def _value(self) -> int:
        rows = self.ctx.storage.sql.exec("SELECT value FROM counter WHERE name = 'main'").toArray()
        return int(rows[0]["value"]) if rows else 0

    async def increment(self, payload: str) -> str:
        """Read, await storage, then write: exact only if input gates hold across the await."""
        by = int(json.loads(payload)["by"])
        current = self._value()
        await self.ctx.storage.get("unrelated-key")
        self.ctx.storage.sql.exec(
            "INSERT INTO counter (name, value) VALUES ('main', ?) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            current + by,
        )
        return json.dumps({"value": current + by})

    async def read(self) -> str:
        """The counter and the number of fired alarms, as JSON."""
        rows = self.ctx.storage.sql.exec("SELECT COUNT(*) AS n FROM alarm_log").toArray()
        return json.dumps({"value": self._value(), "alarms": int(rows[0]["n"]), "rows": rows})

    async def schedule_alarm(self, delay_ms: int) -> str:
        """Sets an alarm `delay_ms` from now."""
        await self.ctx.storage.setAlarm(int(time.time() * 1000) + int(delay_ms))
        return json.dumps({"scheduled": True})

    async def alarm(self, alarm_info: Any = None) -> None:
        self.ctx.storage.sql.exec(
            "INSERT INTO alarm_log (fired_at_ms) VALUES (?)", int(time.time() * 1000)
        )

    async def fetch(self, request: Any) -> Response:
        return Response(f"counter-do {request.method} {request.url}")
