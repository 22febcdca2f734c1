"""Durable Object storage as the objects' logic sees it: the runtime's SQL API behind the
core's :class:`~edge_limiter.core.objects.Sql` port, the alarm, and the object's clock.

The only code that touches ``ctx.storage``; the classes the Worker exports
(``durable_objects/``) build their logic over :class:`ObjectStorage`.
"""

from __future__ import annotations

import time
from typing import Any

from .convert import absent


def now_ms() -> int:
    """The object's clock (the runtime's, which moves only between its I/O)."""
    return int(time.time() * 1000)


def _raw(wrapped: Any) -> Any:
    """The JavaScript object under the SDK's binding wrapper: every call through the
    wrapper converts its arguments and result, which strings and ints do not need."""
    return getattr(wrapped, "_binding", wrapped)


class DurableSql:
    """The :class:`~edge_limiter.core.objects.Sql` port over ``ctx.storage.sql``."""

    def __init__(self, sql: Any) -> None:
        self.exec = sql.exec

    def run(self, query: str, *args: Any) -> None:
        self.exec(query, *args)

    def rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        result = self.exec(query, *args).toArray()
        to_py = getattr(result, "to_py", None)
        rows = to_py() if to_py is not None else result
        # A column's SQL NULL may come as JavaScript's null, which is not None.
        return [
            {key: None if absent(value) else value for key, value in row.items()} for row in rows
        ]


class ObjectStorage:
    """One Durable Object's storage: its SQL (:attr:`sql`) and its alarm."""

    def __init__(self, ctx: Any) -> None:
        self.storage = _raw(ctx.storage)
        self.sql = DurableSql(self.storage.sql)

    def arm(self, at: int) -> None:
        """Set the alarm for ``at`` without waiting: storage operations apply in order,
        and the platform holds the object's answer until they are done."""
        self.storage.setAlarm(at)

    async def set_alarm(self, at: int) -> None:
        """Set the alarm for ``at``."""
        await self.storage.setAlarm(at)
