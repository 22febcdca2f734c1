"""The idempotency-record Durable Object: one instance per (route, caller, Idempotency-Key).

The record is one SQLite row. :meth:`IdempotencyRecords.call` is the only way in: load
the row, run the pure :func:`edge_limiter.core.idempotency.protocol.apply_stored` with
this object's clock, write or delete the row, answer: one RPC call per step, with no
``await`` between the read and the write, so claims on one key are serialised by the
object itself. An alarm deletes the record once it has expired.
"""

from __future__ import annotations

import time
from typing import Any

from workers import DurableObject

from edge_limiter.core.idempotency.protocol import apply_stored
from edge_limiter.platform.convert import absent

_SCHEMA = "CREATE TABLE IF NOT EXISTS record (id INTEGER PRIMARY KEY, value TEXT NOT NULL)"


def _now_ms() -> int:
    return int(time.time() * 1000)


class IdempotencyRecords(DurableObject):  # type: ignore[misc]
    """Holds one Idempotency-Key's record (claim, fencing token, stored response)."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.sql = ctx.storage.sql
        self.sql.exec(_SCHEMA)
        self.alarm_at: int | None = None

    def _stored(self) -> str | None:
        rows = self.sql.exec("SELECT value FROM record WHERE id = 1").toArray()
        return None if not rows or absent(rows[0]["value"]) else str(rows[0]["value"])

    async def call(self, payload: str) -> str:
        """Run one idempotency call (claim, complete, release or get) and answer it."""
        answer, new, idle_at = apply_stored(str(payload), self._stored(), _now_ms())
        if new is None:
            self.sql.exec("DELETE FROM record WHERE id = 1")
        else:
            self.sql.exec(
                "INSERT INTO record (id, value) VALUES (1, ?) "
                "ON CONFLICT(id) DO UPDATE SET value = excluded.value",
                new,
            )
            if idle_at is not None and (self.alarm_at is None or idle_at > self.alarm_at):
                # One alarm at the latest instant the record may be deleted; when it fires
                # early (the record was renewed) it re-arms itself.
                self.alarm_at = idle_at
                await self.ctx.storage.setAlarm(idle_at)
        return answer

    async def alarm(self, *_args: Any) -> None:
        """Delete the record once it is no longer live; re-arm while it is."""
        self.alarm_at = None
        stored = self._stored()
        if stored is None:
            return
        _answer, _same, idle_at = apply_stored('{"op":"get"}', stored, _now_ms())
        if idle_at is None or idle_at <= _now_ms():
            self.sql.exec("DELETE FROM record WHERE id = 1")
        else:
            self.alarm_at = idle_at
            await self.ctx.storage.setAlarm(idle_at)
