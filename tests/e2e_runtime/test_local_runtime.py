"""The local runtime itself: the fixture Python Worker on real local workerd (Miniflare)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from edge_limiter.tools.local_gateway import LocalGateway, LocalGatewayError
from tests.clients import in_flight

from .conftest import FIXTURE_CONFIG, alive, command_line, group_pids

pytestmark = pytest.mark.e2e


def fresh_name() -> str:
    return f"c-{uuid.uuid4().hex[:12]}"


def test_boots_and_answers(gateway: LocalGateway) -> None:
    response = httpx.get(f"{gateway.url}/health")
    assert response.status_code == 200
    assert response.text == "ok"
    assert gateway.boot_seconds is not None


def test_json_var_reaches_the_worker_as_an_object(gateway: LocalGateway) -> None:
    response = httpx.get(f"{gateway.url}/vars")
    assert response.json() == {"FIXTURE_CONFIG": FIXTURE_CONFIG}


def test_concurrent_rpc_increments_are_exact(gateway: LocalGateway) -> None:
    name = fresh_name()
    requests = 200

    async def increment(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post(f"{gateway.url}/counter/{name}/increment")

    async def hammer() -> list[httpx.Response]:
        return await in_flight([increment] * requests, timeout=30)

    responses = asyncio.run(hammer())
    assert [r.status_code for r in responses] == [200] * requests
    # Each increment read, awaited storage, then wrote: with input gates holding, every call
    # saw a distinct predecessor.
    assert sorted(r.json()["value"] for r in responses) == list(range(1, requests + 1))
    assert httpx.get(f"{gateway.url}/counter/{name}").json()["value"] == requests


def test_sql_to_array_returns_rows_as_dicts(gateway: LocalGateway) -> None:
    body = httpx.get(f"{gateway.url}/counter/{fresh_name()}").json()
    assert body["rows"] == [{"n": 0}]


def test_kv_put_then_get(gateway: LocalGateway) -> None:
    key = fresh_name()
    assert httpx.get(f"{gateway.url}/kv/{key}").status_code == 404
    assert httpx.put(f"{gateway.url}/kv/{key}", content="hello kv").status_code == 201
    response = httpx.get(f"{gateway.url}/kv/{key}")
    assert (response.status_code, response.text) == (200, "hello kv")


def test_cf_blob_header_sets_request_cf(gateway: LocalGateway) -> None:
    blob = json.dumps({"country": "DE", "continent": "EU"})
    body = httpx.get(f"{gateway.url}/whoami", headers={"MF-CF-Blob": blob}).json()
    assert (body["country"], body["continent"]) == ("DE", "EU")
    placeholder = httpx.get(f"{gateway.url}/whoami").json()
    assert (placeholder["country"], placeholder["continent"]) == ("US", "NA")


def test_client_set_connecting_ip_reaches_the_worker(gateway: LocalGateway) -> None:
    response = httpx.get(f"{gateway.url}/whoami", headers={"CF-Connecting-IP": "203.0.113.7"})
    assert response.json()["ip"] == "203.0.113.7"


@pytest.fixture
def loopback_origin() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"origin saw {self.path}".encode()
            self.send_response(203)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_outbound_fetch_to_a_loopback_origin(gateway: LocalGateway, loopback_origin: str) -> None:
    response = httpx.get(f"{gateway.url}/proxy", params={"url": f"{loopback_origin}/hello?x=1"})
    assert response.status_code == 203
    assert response.text == "origin saw /hello?x=1"


def test_durable_object_fetch_is_forwarded(gateway: LocalGateway) -> None:
    response = httpx.get(f"{gateway.url}/counter/{fresh_name()}/do-fetch")
    assert response.text == "counter-do GET https://counter.internal/ping"


def test_durable_object_alarm_is_forwarded(gateway: LocalGateway) -> None:
    name = fresh_name()
    scheduled = httpx.post(f"{gateway.url}/counter/{name}/alarm", params={"delay_ms": 50})
    assert scheduled.json() == {"scheduled": True}
    deadline = time.monotonic() + 10
    while httpx.get(f"{gateway.url}/counter/{name}").json()["alarms"] == 0:
        assert time.monotonic() < deadline, "the alarm did not fire"
        time.sleep(0.05)


def test_worker_console_and_errors_go_to_stderr(gateway: LocalGateway) -> None:
    marker = uuid.uuid4().hex
    assert httpx.get(f"{gateway.url}/log", params={"msg": marker}).text == "logged"
    assert httpx.get(f"{gateway.url}/boom").status_code == 500
    deadline = time.monotonic() + 5
    while f"fixture-log {marker}" not in gateway.stderr_tail(200) or (
        "fixture-boom" not in gateway.stderr_tail(200)
    ):
        assert time.monotonic() < deadline, gateway.stderr_tail()
        time.sleep(0.05)


def test_broken_durable_object_throw(gateway: LocalGateway) -> None:
    started = time.monotonic()
    response = httpx.post(
        f"{gateway.url}/counter/{fresh_name()}/increment", params={"binding": "BROKEN_THROW"}
    )
    assert response.status_code == 503
    assert "broken on purpose" in response.json()["message"]
    assert time.monotonic() - started < 5


def test_broken_durable_object_hang(gateway: LocalGateway) -> None:
    started = time.monotonic()
    response = httpx.post(
        f"{gateway.url}/counter/{fresh_name()}/increment",
        params={"binding": "BROKEN_HANG"},
        timeout=10,
    )
    # The fixture Worker gives the call 0.5 s, then answers 504 itself.
    assert response.status_code == 504
    assert response.json() == {"error": "timeout"}
    assert time.monotonic() - started >= 0.5
    # The healthy binding is unaffected.
    ok = httpx.post(f"{gateway.url}/counter/{fresh_name()}/increment")
    assert ok.json() == {"value": 1}


def test_sqlite_and_kv_survive_restart(gateway: LocalGateway) -> None:
    name = fresh_name()
    for _ in range(3):
        httpx.post(f"{gateway.url}/counter/{name}/increment", params={"by": 2})
    httpx.put(f"{gateway.url}/kv/persisted-{name}", content="still here")
    url_before = gateway.url
    assert gateway.pid is not None
    old_pids = group_pids(gateway.pid)
    assert any("workerd" in command_line(pid) for pid in old_pids)

    gateway.restart()

    assert not any(alive(pid) for pid in old_pids), "old runtime processes still alive"
    assert gateway.url == url_before
    assert httpx.get(f"{gateway.url}/counter/{name}").json()["value"] == 6
    assert httpx.get(f"{gateway.url}/kv/persisted-{name}").text == "still here"


# Run with the project's root as the working directory: `python -c` imports from there.
PARENT_SCRIPT = """
import time
from tests.e2e_runtime.conftest import make_gateway
runtime = make_gateway().start()
print(runtime.pid, flush=True)
time.sleep(600)
"""


def test_runtime_exits_when_its_parent_is_killed() -> None:
    repo = Path(__file__).resolve().parents[2]
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_SCRIPT], cwd=repo, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        launcher = int(parent.stdout.readline())
        pids = group_pids(launcher)
        assert any("workerd" in command_line(pid) for pid in pids)
    finally:
        parent.kill()  # no clean-up code of the parent runs
        parent.wait()
    try:
        deadline = time.monotonic() + 15
        while any(alive(pid) for pid in pids):
            assert time.monotonic() < deadline, "the runtime outlived the process that started it"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher, signal.SIGKILL)


def test_a_broken_worker_fails_with_its_stderr(tmp_path: Path) -> None:
    (tmp_path / "entry.py").write_text("raise ImportError('fixture: cannot import')\n")
    runtime = LocalGateway(tmp_path, durable_objects={}, kv_namespaces=[], boot_timeout=60)
    with pytest.raises(LocalGatewayError, match="cannot import"):
        runtime.start()
    assert not runtime.running
