"""edge-limiter dev (scripts/dev) before it starts a runtime: where each configured origin goes, a busy port."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from edge_limiter.tools.dev import OriginMap, is_loopback, rewrite_origins


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:9000", True),
        ("http://127.8.0.1", True),
        ("http://localhost:8080/api", True),
        ("http://LOCALHOST.:8080", True),
        ("http://api.localhost:3000", True),
        ("http://[::1]:9000", True),
        ("https://api.example.com", False),
        ("http://10.0.0.5:8080", False),
        ("http://localhost.example.com", False),
        ("http://0.0.0.0:80", False),
    ],
)
def test_loopback_origins(url: str, loopback: bool) -> None:
    assert is_loopback(url) is loopback


def test_an_origin_on_this_machine_is_used_as_configured() -> None:
    origins = OriginMap({"api.example.com": "http://127.0.0.1:3000"})
    try:
        document = rewrite_origins(
            {
                "origin": "http://127.0.0.1:9000",
                "routes": [{"name": "a", "origin": "https://api.example.com"}],
                "pools": {"p": {"origins": [{"name": "far", "url": "https://far.example.com"}]}},
            },
            origins,
        )
        assert document["origin"] == "http://127.0.0.1:9000"  # kept
        assert document["routes"][0]["origin"] == "http://127.0.0.1:3000"  # mapped
        demo = document["pools"]["p"]["origins"][0]["url"]
        assert is_loopback(demo) and demo == origins.demos["https://far.example.com"].url
        assert origins.local == {"http://127.0.0.1:9000"}
    finally:
        origins.stop()


def run_dev(*args: str) -> subprocess.CompletedProcess[str]:
    """edge-limiter dev with ``args``, for the ways it stops before starting the runtime."""
    return subprocess.run(
        [sys.executable, "-m", "edge_limiter.tools", "dev", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_a_busy_port_is_a_clear_error_not_a_traceback() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_dev("--port", str(port))
    assert done.returncode == 2
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr and "--port" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_secret_origin_headers_needs_is_asked_for_before_the_runtime_starts(
    tmp_path: Path,
) -> None:
    # Without it every request would be a 503; dev says which line .dev.vars lacks.
    config = tmp_path / "mine.toml"
    config.write_text(
        'origin = "http://127.0.0.1:9"\n'
        'origin_headers = { "X-Gateway-Key" = "$GATEWAY_KEY_FOR_A_TEST" }\n'
        '[[routes]]\nname = "a"\nmatch = { path = "/a" }\nlimits = "5/s"\n'
    )
    done = run_dev("--config", str(config))
    assert done.returncode == 2, done.stderr
    assert "origin_headers needs the secret GATEWAY_KEY_FOR_A_TEST" in done.stderr
    assert "GATEWAY_KEY_FOR_A_TEST=... to" in done.stderr and "Traceback" not in done.stderr
