"""The idempotency-record Durable Object: the runtime's shell around
:class:`~edge_limiter.core.idempotency.protocol.RecordStore`.

One instance per (route, caller, Idempotency-Key). ``call`` is the only way in: one RPC
call per step, with no ``await`` between the record's read and its write, so claims on
one key are serialised by the object itself. An alarm deletes the record once it has
expired.
"""

from __future__ import annotations

from typing import Any

from workers import DurableObject

from edge_limiter.core.idempotency.protocol import RecordStore
from edge_limiter.platform.storage import ObjectStorage, now_ms


class IdempotencyRecords(DurableObject):  # type: ignore[misc]
    """Holds one Idempotency-Key's record (claim, fencing token, stored response)."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.storage = ObjectStorage(ctx)
        self.records = RecordStore(self.storage.sql)

    async def call(self, payload: str) -> str:
        """Run one idempotency call (claim, complete, extend, release or get) and answer it."""
        answer = self.records.call(str(payload), now_ms())
        alarm_at = self.records.alarm_wanted()
        if alarm_at is not None:
            await self.storage.set_alarm(alarm_at)
        return answer

    async def alarm(self, *_args: Any) -> None:
        """Delete the record once it is no longer live; re-arm while it is."""
        next_at = self.records.alarm(now_ms())
        if next_at is not None:
            await self.storage.set_alarm(next_at)
