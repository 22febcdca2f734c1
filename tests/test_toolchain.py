"""The toolchain the tools use: which Python a deployment gets, and the Node they start."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from edge_limiter.tools import toolchain
from edge_limiter.tools.toolchain import ToolchainError, python_of, with_python

ROOT = Path(__file__).resolve().parents[1]

CASES = [
    ("2025-11-01", [], "3.13"),
    ("2025-09-29", [], "3.13"),
    ("2025-09-28", ["python_workers_20250116"], "3.13"),
    ("2025-11-01", ["python_workers_314"], "3.14"),
    ("2026-09-07", [], "3.13"),
    ("2026-09-08", [], "3.14"),
    ("2026-11-24", ["no_python_workers_314"], "3.13"),
    ("2026-11-24", ["no_python_workers_314", "python_workers_314"], "3.14"),
]


@pytest.mark.parametrize(("date", "flags", "python"), CASES)
def test_the_python_follows_the_date_and_flags_as_workerd_picks_it(
    date: str, flags: list[str], python: str
) -> None:
    assert python_of(date, ["python_workers", *flags]) == python


def test_a_date_that_gives_python_312_is_refused() -> None:
    with pytest.raises(ToolchainError, match=r"3\.12"):
        python_of("2025-09-28", ["python_workers"])


@pytest.mark.parametrize("date", ["2025-11-01", "2026-11-24"])
@pytest.mark.parametrize("python", ["3.13", "3.14"])
def test_with_python_selects_it_and_keeps_every_other_flag(date: str, python: str) -> None:
    flags = ("python_workers", "disable_python_external_sdk")
    changed = with_python(date, flags, python)
    assert python_of(date, changed) == python
    assert changed[: len(flags)] == flags
    # Asking for what the date already gives adds nothing.
    if python_of(date, flags) == python:
        assert changed == flags


def test_with_python_refuses_a_python_the_host_does_not_run() -> None:
    with pytest.raises(ToolchainError, match=r"3\.12"):
        with_python("2026-11-24", ("python_workers",), "3.12")


def test_the_environment_variable_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(toolchain.PYTHON_ENV, "3.14")
    assert toolchain.requested_python() == "3.14"
    monkeypatch.setenv(toolchain.PYTHON_ENV, "")
    assert toolchain.requested_python() is None
    monkeypatch.setenv(toolchain.PYTHON_ENV, "3.9")
    with pytest.raises(ToolchainError, match="EDGE_LIMITER_PYTHON"):
        toolchain.requested_python()


def test_node_is_the_named_one_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(toolchain.NODE_ENV, "/opt/some/node")
    assert toolchain.node() == "/opt/some/node"
    monkeypatch.delenv(toolchain.NODE_ENV)
    project = ROOT / "node_modules" / ".bin" / "node"
    if project.exists():
        assert toolchain.node() == str(project)


@pytest.mark.slow
def test_the_local_host_picks_the_same_python() -> None:
    """scripts/local_runtime/python_runtime.mjs (what the host boots) agrees with python_of."""
    script = (
        'import { selectPython } from "./scripts/local_runtime/python_runtime.mjs";\n'
        f"const cases = {json.dumps(CASES)};\n"
        'console.log(JSON.stringify(cases.map(([d, f]) => selectPython(d, ["python_workers", ...f]))));\n'
    )
    done = subprocess.run(
        [toolchain.node(), "--input-type=module", "-e", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == [python for _, _, python in CASES]
