"""The shared circuit breaker of one origin: one Durable Object per origin name.

Isolates send what they saw (and the Cron Trigger its health probes) in one
:meth:`OriginBreaker.sync` call; the object applies it with the pure
:func:`edge_limiter.core.resilience.shared.apply_sync`, stores the result in one SQLite
row and answers with the authoritative breaker, which the isolate adopts.
"""

from __future__ import annotations

from typing import Any

from workers import DurableObject

from edge_limiter.core.resilience.shared import (
    SyncCall,
    apply_sync,
    decode_shared,
    encode_shared,
    state_to_json,
)
from edge_limiter.platform.convert import absent

_SCHEMA = "CREATE TABLE IF NOT EXISTS breaker (id INTEGER PRIMARY KEY, value TEXT NOT NULL)"


class OriginBreaker(DurableObject):  # type: ignore[misc]
    """Holds one origin's breaker state, shared by every isolate."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.sql = ctx.storage.sql
        self.sql.exec(_SCHEMA)

    def _stored(self) -> str | None:
        rows = self.sql.exec("SELECT value FROM breaker WHERE id = 1").toArray()
        return None if not rows or absent(rows[0]["value"]) else str(rows[0]["value"])

    async def sync(self, payload: str) -> str:
        """Apply an isolate's reports (or a health probe); answer the authoritative state."""
        shared = apply_sync(SyncCall.from_json(str(payload)), decode_shared(self._stored()))
        self.sql.exec(
            "INSERT INTO breaker (id, value) VALUES (1, ?) "
            "ON CONFLICT(id) DO UPDATE SET value = excluded.value",
            encode_shared(shared),
        )
        return state_to_json(shared.breaker)
