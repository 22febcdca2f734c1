"""The README's `scripts/dev` starts the gateway with the example config in front of demo origins."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def test_dev_serves_the_example_config_and_stops_cleanly(tmp_path: Path) -> None:
    env = {**os.environ, "EDGE_LIMITER_DEV_STATE": str(tmp_path / "state")}
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "dev.py"), "--port", "0", "--fresh"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
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
    try:
        assert ready.wait(120), "".join(lines)
        base = url[0]
        assert "curl" in "".join(lines)
        # The example "login" route: 5 per minute per client, sliding log.
        codes = [
            httpx.post(f"{base}/v1/login", headers={"cf-connecting-ip": "192.0.2.10"}).status_code
            for _ in range(6)
        ]
        assert codes == [200] * 5 + [429]
        answer = httpx.get(f"{base}/health")
        assert answer.status_code == 200
        assert answer.json()["origin"] == "https://api.example.com"  # the demo stand-in
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        code = process.wait(30)
        reader.join(5)
    assert code == 0, "".join(lines)
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)
