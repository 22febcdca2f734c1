"""The cells of BENCHMARKS.md's tables: how a figure is written, and a table of rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Data = dict[str, Any]
Row = Sequence[Any]


def markdown_table(header: Sequence[str], rows: Sequence[Row]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(value) for value in row) + " |" for row in rows]
    return lines


def fmt(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"


def medians(rounds: int) -> str:
    return f"medians of {rounds} rounds" if rounds > 1 else "one round"


def times(ratio: float) -> str:
    return f"{ratio:.2f}x"


def signed(value: float) -> str:
    return f"{value:+.2f}"


def percent(value: float) -> str:
    return f"{value:.1%}"
