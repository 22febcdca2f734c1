"""The benchmarks' report: markdown tables printed as each section ends, every number kept
for ``--json``."""

from __future__ import annotations

from typing import Any


class Report:
    """Markdown tables, printed as each section ends, and every number for ``--json``."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def table(self, title: str, header: list[str], rows: list[list[Any]]) -> None:
        lines = [f"\n### {title}\n", "| " + " | ".join(header) + " |"]
        lines.append("|" + "---|" * len(header))
        for row in rows:
            lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
        print("\n".join(lines), flush=True)

    def note(self, text: str) -> None:
        print(f"\n{text}", flush=True)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)
