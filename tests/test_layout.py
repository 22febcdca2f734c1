"""The code's shape, as the house keeps it: short modules and functions, and a pipeline
whose stages never import one another (each reads what earlier ones put on the exchange,
or reaches a shared step through a port)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "edge_limiter"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
#: The gateway's stage modules: none imports another (the route table builds them all).
STAGES = frozenset(("admin", "cache", "front", "idempotency", "ratelimit", "upstream"))
MODULES = sorted(SRC.rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(SRC.parent))


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_module_is_over_its_bound(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_name(path)}: {lines} lines"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_function_is_over_its_bound(path: Path) -> None:
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{_name(path)}: {', '.join(long)}"


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_no_stage_imports_another(stage: str) -> None:
    tree = ast.parse((SRC / "gateway" / f"{stage}.py").read_text())
    imported = {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1
    }
    assert not imported & (STAGES - {stage}), f"gateway/{stage}.py imports {imported & STAGES}"
