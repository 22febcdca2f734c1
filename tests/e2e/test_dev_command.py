"""The README's `scripts/dev` starts the gateway with the example config in front of demo origins."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import httpx
import pytest

from edge_limiter.tools.demo_origin import DemoOrigin
from edge_limiter.tools.toolchain import PYODIDE_OF, python_of, requested_python

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def start_dev(
    tmp_path: Path,
    *options: str,
    cwd: Path = ROOT,
    wrapper: bool = False,
    logs_unread: bool = False,
) -> tuple[subprocess.Popen[str], list[str], str]:
    """Start scripts/dev with ``options``; the process, its output so far and its URL.

    ``wrapper``: through the README's ``scripts/dev`` (bootstrap, then ``edge-limiter dev``),
    run in ``cwd``; else ``python -m edge_limiter.tools dev``.
    ``logs_unread``: its stderr (the Worker's logs) on a pipe nobody reads.
    """
    env = {**os.environ, "EDGE_LIMITER_DEV_STATE": str(tmp_path / "state")}
    command = (
        [str(ROOT / "scripts" / "dev")]
        if wrapper
        else [sys.executable, "-m", "edge_limiter.tools", "dev"]
    )
    process = subprocess.Popen(
        [*command, "--port", "0", "--fresh", *options],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if logs_unread else subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    ready = threading.Event()
    url: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            match = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
            if match:
                url.append(match.group(1))
            if "Ctrl-C" in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not ready.wait(120):
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError("".join(lines))
    return process, lines, url[0]


def stop_dev(process: subprocess.Popen[str], lines: list[str]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    code = process.wait(30)
    assert code == 0, "".join(lines)
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)


def test_dev_serves_the_example_config_and_stops_cleanly(tmp_path: Path) -> None:
    process, lines, base = start_dev(tmp_path)
    try:
        assert "curl" in "".join(lines)
        assert "config: edge-limiter.toml" in "".join(lines)
        wrangler = tomllib.loads((ROOT / "wrangler.toml").read_text())
        date = wrangler["compatibility_date"]
        assert f"compatibility date {date}" in "".join(lines)
        # The Python and its Pyodide, as wrangler.toml selects them (or EDGE_LIMITER_PYTHON).
        python = requested_python() or python_of(date, wrangler["compatibility_flags"])
        assert f"Python {python}." in "".join(lines)
        assert f"on Pyodide {PYODIDE_OF[python]}" in "".join(lines)
        # The example "login" route: 5 per minute per client, sliding log.
        codes = [
            httpx.post(f"{base}/v1/login", headers={"cf-connecting-ip": "192.0.2.10"}).status_code
            for _ in range(6)
        ]
        assert codes == [200] * 5 + [429]
        # The Worker's logs are printed as they come: the denial is one JSON line.
        deadline = time.monotonic() + 10
        denial = re.compile(r'"event":"(limited|cached_denial)","route":"login"')
        while not any(denial.search(line) for line in lines):
            assert time.monotonic() < deadline, "".join(lines[-20:])
            time.sleep(0.05)
        answer = httpx.get(f"{base}/health")
        assert answer.status_code == 200
        assert answer.json()["origin"] == "https://api.example.com"  # the demo stand-in
        # The example's pool: its origins stand in locally too (never the internet).
        tenant = httpx.get(
            f"{base}/v1/tenants/acme/items", headers={"cf-connecting-ip": "192.0.2.11"}
        )
        assert tenant.status_code == 200 and tenant.headers["x-origin"] in ("eu", "us")
        # Spelled differently, the same route and counter.
        spelled = httpx.post(f"{base}//v1/%6cogin", headers={"cf-connecting-ip": "192.0.2.10"})
        assert spelled.status_code == 429
    finally:
        stop_dev(process, lines)


def test_dev_runs_your_config_and_env_in_front_of_your_origin(tmp_path: Path) -> None:
    config = tmp_path / "mine.toml"
    config.write_text(
        'origin = "https://prod.internal"\n'
        "[[routes]]\n"
        'name = "orders"\nmatch = { path = "/orders/*" }\nlimits = "2/minute"\n'
        # Exact whatever the timing: the default sliding window's estimate admits a third
        # request when the three straddle a minute (docs/algorithms.md).
        'algorithm = "sliding_log"\n'
        "[env.staging]\n"
        'origin = "https://staging.internal"\n'
    )
    with DemoOrigin("my-backend") as backend:
        process, lines, base = start_dev(
            tmp_path,
            "--config",
            str(config),
            "--env",
            "staging",
            "--origin",
            f"staging.internal={backend.url}",
        )
        try:
            output = "".join(lines)
            assert "config: mine.toml" in output and "env staging" in output
            assert f"origin https://staging.internal -> your origin {backend.url}" in output
            codes = []
            for _ in range(3):
                answer = httpx.get(f"{base}/orders/1", headers={"cf-connecting-ip": "192.0.2.20"})
                codes.append(answer.status_code)
            assert codes == [200, 200, 429]
            assert answer.headers["ratelimit-policy"] == '"2-per-minute";q=2;w=60'
            assert backend.hits == [("GET", "/orders/1"), ("GET", "/orders/1")]
        finally:
            stop_dev(process, lines)


def test_dev_runs_a_config_of_your_own_beside_the_examples_environments(tmp_path: Path) -> None:
    # Your file, named relative to where you are, with no [env.staging] table: the example
    # wrangler.toml's staging environment (EDGE_LIMITER_ENV = "staging") is then a warning
    # about `wrangler deploy --env staging`, not a reason to refuse running the top level.
    # `sliding_log`: exact whenever the two requests come (the default sliding window's
    # estimate admits a second one just after a minute turns, as docs/algorithms.md says).
    (tmp_path / "own.toml").write_text(
        'origin = "https://api.example.com"\n'
        '[[routes]]\nname = "own"\nmatch = { path = "/own/*" }\nlimits = "1/minute"\n'
        'algorithm = "sliding_log"\n'
    )
    process, lines, base = start_dev(tmp_path, "--config", "own.toml", cwd=tmp_path, wrapper=True)
    try:
        output = "".join(lines)
        assert "config: own.toml" in output
        assert "warning: `npx wrangler deploy --env staging` would fail" in output
        # Your routes, not the example's curl commands.
        assert "Routes, tried in order" in output and "Try (with the example" not in output
        assert any(line.startswith("own ") and "1 per minute" in line for line in lines)
        codes = [
            httpx.get(f"{base}/own/1", headers={"cf-connecting-ip": "192.0.2.30"}).status_code
            for _ in range(2)
        ]
        assert codes == [200, 429]
    finally:
        stop_dev(process, lines)


def test_dev_keeps_serving_when_nobody_reads_its_logs(tmp_path: Path) -> None:
    # A parent that starts scripts/dev with its stderr on a pipe it never reads: the logs
    # (one line per denial) fill the pipe, and must never stall the gateway.
    (tmp_path / "tight.toml").write_text(
        'origin = "https://api.example.com"\n'
        '[[routes]]\nname = "tight"\nmatch = { path = "/t/*" }\nlimits = "1/hour"\n'
    )
    process, _, base = start_dev(
        tmp_path, "--config", str(tmp_path / "tight.toml"), logs_unread=True
    )
    try:
        with httpx.Client(base_url=base) as client:
            ip = {"cf-connecting-ip": "192.0.2.40"}
            codes = [client.get("/t/x", headers=ip).status_code for _ in range(1500)]
        assert codes == [200] + [429] * 1499  # about 300 KB of log lines, nobody reading
    finally:
        # Not stop_dev: with its stderr full, dev's exit status is not what is tested.
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def test_dev_refuses_an_origin_mapping_the_config_does_not_name(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "edge_limiter.tools",
            "dev",
            "--origin",
            "nowhere.test=http://127.0.0.1:1",
        ],
        cwd=ROOT,
        env={**os.environ, "EDGE_LIMITER_DEV_STATE": str(tmp_path / "state")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "the config names no origin nowhere.test" in done.stderr


def _child_of(parent_pid: int, marker: bytes) -> int:
    """The pid of the process ``parent_pid`` started whose command line holds ``marker``."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (proc / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == parent_pid and marker in command:
            return int(proc.name)
    raise AssertionError(f"no {marker.decode()} under {parent_pid}")


def _runtime_of(dev_pid: int) -> int:
    """The pid (and process group) of the local runtime scripts/dev started."""
    return _child_of(dev_pid, b"launch.mjs")


def test_dev_starts_the_runtime_again_if_it_dies_and_forgets_nothing(tmp_path: Path) -> None:
    process, lines, base = start_dev(tmp_path)
    try:
        client = {"cf-connecting-ip": "192.0.2.30"}
        codes = [httpx.post(f"{base}/v1/login", headers=client).status_code for _ in range(5)]
        assert codes == [200] * 5
        os.killpg(_runtime_of(process.pid), signal.SIGKILL)  # workerd and its launcher
        deadline = time.monotonic() + 120
        while not any("running again" in line for line in lines):
            assert time.monotonic() < deadline and process.poll() is None, "".join(lines)
            time.sleep(0.2)
        assert "stopped unexpectedly" in "".join(lines)
        # Same address, and the five admitted before the crash still count.
        assert httpx.post(f"{base}/v1/login", headers=client).status_code == 429
        assert httpx.get(f"{base}/health").status_code == 200
        # workerd alone dies (its launcher lives on): noticed by its port, started again.
        restarts = sum("running again" in line for line in lines)
        os.kill(_child_of(_runtime_of(process.pid), b"workerd"), signal.SIGKILL)
        while sum("running again" in line for line in lines) == restarts:
            assert time.monotonic() < deadline + 60 and process.poll() is None, "".join(lines)
            time.sleep(0.2)
        assert httpx.post(f"{base}/v1/login", headers=client).status_code == 429
    finally:
        stop_dev(process, lines)
