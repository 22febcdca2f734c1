"""The per-key rate-limiter Durable Object.

One instance per (route, key). Every limit's state for that key is one row of its
SQLite storage. :meth:`RateLimiter.decide` is the only way in: load the rows, run the
pure :func:`edge_limiter.core.protocol.apply` with this object's clock, write what
changed, answer: one RPC call per request, with no ``await`` between the read and the
write, so concurrent requests for the key are serialised by the object itself.
"""

from __future__ import annotations

import json
import time
from typing import Any

from workers import DurableObject

from edge_limiter.core.protocol import StoreRequest, apply, row_id
from edge_limiter.platform.convert import absent

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS limits ("
    " id TEXT PRIMARY KEY,"
    " state TEXT NOT NULL,"
    " idle_at INTEGER NOT NULL)"
)


def _now_ms() -> int:
    return int(time.time() * 1000)


class RateLimiter(DurableObject):  # type: ignore[misc]
    """Holds every limit's counter for one key, atomically."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.sql = ctx.storage.sql
        self.sql.exec(_SCHEMA)
        self.alarm_at: int | None = None

    def _rows(self, ids: list[str]) -> dict[str, list[int]]:
        marks = ",".join("?" for _ in ids)
        cursor = self.sql.exec(f"SELECT id, state FROM limits WHERE id IN ({marks})", *ids)
        return {row["id"]: json.loads(row["state"]) for row in cursor.toArray()}

    async def decide(self, payload: str) -> str:
        """Run one store request (check, peek, refund or reset) and answer it."""
        request = StoreRequest.from_json(str(payload))
        ids = [row_id(request.algorithm, limit) for limit in request.limits]
        rows = self._rows(ids)
        result = apply(request, rows, _now_ms())
        for rid, (state, idle_at) in result.writes.items():
            self.sql.exec(
                "INSERT INTO limits (id, state, idle_at) VALUES (?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET state = excluded.state, idle_at = excluded.idle_at",
                rid,
                json.dumps(state, separators=(",", ":")),
                idle_at,
            )
        for rid in result.deletes:
            self.sql.exec("DELETE FROM limits WHERE id = ?", rid)
        if result.writes and self.alarm_at is None:
            # Storage stays bounded: the alarm deletes the rows once they are idle. One
            # alarm per cycle, not one write per request: rows that are written again
            # later are still busy when it fires, and it re-arms itself for them.
            latest = max(idle_at for _, idle_at in result.writes.values())
            self.alarm_at = latest
            await self.ctx.storage.setAlarm(latest)
        return result.response.to_json()

    async def alarm(self, *_args: Any) -> None:
        """Delete rows that no longer matter; re-arm for the rest."""
        now = _now_ms()
        self.sql.exec("DELETE FROM limits WHERE idle_at <= ?", now)
        rows = self.sql.exec("SELECT MAX(idle_at) AS latest FROM limits").toArray()
        latest: Any = rows[0]["latest"] if rows else None
        if absent(latest):  # no rows left
            self.alarm_at = None
            return
        self.alarm_at = int(latest)
        await self.ctx.storage.setAlarm(self.alarm_at)
