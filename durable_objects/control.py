"""The Control Durable Object: one instance (``control``) for the operator's shared state,
the runtime's shell around :class:`~edge_limiter.core.control.SharedControl`.

It holds the per-key overrides every isolate loads, and the counters behind the status
page. Each method loads one row, runs a pure step and writes the row back, with no
``await`` between the read and the write.
"""

from __future__ import annotations

from typing import Any

from workers import DurableObject

from edge_limiter.core.control import SharedControl
from edge_limiter.platform.storage import ObjectStorage, now_ms


class Control(DurableObject):  # type: ignore[misc]
    """Overrides and counters, shared by every isolate."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.control = SharedControl(ObjectStorage(ctx).sql)

    async def overrides(self, payload: str) -> str:
        """List, set or remove overrides."""
        return self.control.overrides(str(payload), now_ms())

    async def stats(self, payload: str) -> str:
        """Add a batch of counters, or read the summary."""
        return self.control.stats(str(payload), now_ms())
