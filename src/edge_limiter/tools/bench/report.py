"""The benchmarks' report: every section's figures, kept for ``--json`` and
``--write``, and its table printed as the section ends."""

from __future__ import annotations

from typing import Any

from edge_limiter.tools.bench.render import render_section
from edge_limiter.tools.bench.tables import SECTIONS


class Report:
    """Each section's raw figures by name (the JSON a document is written from)."""

    def __init__(self, meta: dict[str, Any] | None = None) -> None:
        self.data: dict[str, Any] = {"meta": dict(meta or {})}

    def section(self, name: str, figures: dict[str, Any]) -> None:
        """Keep one section's figures and print its table (and a table it implies)."""
        self.data[name] = figures
        shown = ("core", "step") if name == "core" else (name,)
        for table in shown:
            if table in SECTIONS:
                print("\n" + render_section(table, self.data), flush=True)
