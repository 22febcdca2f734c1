"""Fixtures for the local runtime's own end-to-end tests (fixture Worker: tests/runtime_fixture)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_limiter.tools.local_gateway import LocalGateway

FIXTURE_WORKER = Path(__file__).resolve().parent.parent / "runtime_fixture"
FIXTURE_CONFIG = {"routes": [{"path": "/api", "limit": "10/second"}], "enabled": True}


def group_pids(pgid: int) -> set[int]:
    """Live processes in the process group `pgid` (the launcher's group includes workerd)."""
    found = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True, check=False)
    return {int(pid) for pid in found.stdout.split() if alive(int(pid))}


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie (exited, waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def make_gateway(**overrides: object) -> LocalGateway:
    options: dict[str, object] = {
        "durable_objects": {
            "COUNTER": "Counter",
            "BROKEN_THROW": "Counter",
            "BROKEN_HANG": "Counter",
        },
        "broken_durable_objects": {"BROKEN_THROW": "throw", "BROKEN_HANG": "hang"},
        "kv_namespaces": ["CACHE"],
    }
    options.update(overrides)
    return LocalGateway(FIXTURE_WORKER, {"FIXTURE_CONFIG": FIXTURE_CONFIG}, **options)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGateway]:
    """One runtime (state persisted under a temp dir) shared by the module's tests."""
    runtime = make_gateway(persist_dir=tmp_path_factory.mktemp("runtime-state")).start()
    try:
        yield runtime
    finally:
        pgid = runtime.pid  # restart() changes it
        runtime.stop()
        assert pgid is not None
        assert not group_pids(pgid), "processes left behind by the local runtime"
