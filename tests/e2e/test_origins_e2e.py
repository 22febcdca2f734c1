"""Origin pools end to end on the local runtime: real origin servers on loopback that the
tests make slow, failing or dead, clients in different countries (MF-CF-Blob), and two
isolates (two copies of the Worker in one runtime) sharing the breakers' Durable Objects."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from edge_limiter.tools.demo_origin import DemoOrigin
from edge_limiter.tools.local_gateway import LocalGateway

from .conftest import fresh_ip, leave_midway, track

pytestmark = pytest.mark.e2e

NAMES = ("eu", "us", "ap", "fo-eu", "fo-us", "st-eu", "st-us", "hc-a", "hc-b", "p-a", "p-b")
NAMES += ("tiny", "lone", "slow", "drip", "pb-a", "pb-b", "ps-a", "ps-b")
NAMES += ("pe-a", "pe-b", "rs-b", "cb")
BREAKER = {"failure_rate": 50, "window": 4, "min_calls": 4, "open_for": "3s"}
#: The issue's breaker (POST traffic against a killed origin).
ISSUE_BREAKER = {"failure_rate": 50, "window": 10, "min_calls": 5, "open_for": "1m"}
RETRY = {"attempts": 3, "base": "10ms", "cap": "50ms"}
#: A request body larger than what workerd reads of it before it has a connection, and
#: small enough to be kept in memory (at most outgoing.MAX_REPLAY_BODY_BYTES).
LARGE_BODY = 256 * 1024


def region(name: str, continent: str, priority: int, **more: Any) -> dict[str, Any]:
    return {"name": name, "url": "", "continents": [continent], "priority": priority, **more}


POOLS: dict[str, Any] = {
    "geo": [region("eu", "EU", 0), region("us", "NA", 1), region("ap", "AS", 2)],
    "fo": [region("fo-eu", "EU", 0), region("fo-us", "NA", 1)],
    "stop": [region("st-eu", "EU", 0), region("st-us", "NA", 1)],
    "hc": [
        region("hc-a", "EU", 0, health={"path": "/health", "timeout": "1s", "unhealthy_after": 2}),
        region("hc-b", "NA", 1),
    ],
    "post": [region("p-a", "EU", 0), region("p-b", "NA", 1)],
    "tiny": [{"name": "tiny", "url": "", "max_in_flight": 2}],
    "lone": [{"name": "lone", "url": ""}],
    "slow": [{"name": "slow", "url": ""}],
    # Its own timeout bounds the wait for an answer's head; a body the gateway reads may
    # pause for the route's timeout (3 s here) between parts.
    "drip": [{"name": "drip", "url": "", "timeout": "300ms"}],
    # POST traffic against an origin killed (its port refuses) and one that resets the
    # connection once it has the request; a client whose upload breaks off.
    "pb": [region("pb-a", "EU", 0), region("pb-b", "NA", 1)],
    "ps": [region("ps-a", "EU", 0), region("ps-b", "NA", 1)],
    "pe": [region("pe-a", "EU", 0), region("pe-b", "NA", 1)],
    "rs": [region("rs-b", "NA", 1)],  # rs-a (a ResetOrigin) comes first: see pool_config
    "cb": [{"name": "cb", "url": ""}],
}


#: What a misbehaving origin sends, by the last segment of the path: malformed, interim,
#: out-of-range and cut-off answers. None of them may become a 500 from the gateway.
ODD_ANSWERS: dict[str, bytes] = {
    "s999": b"HTTP/1.1 999 Weird\r\nContent-Length: 2\r\n\r\nok",
    "s600": b"HTTP/1.1 600 X\r\nContent-Length: 2\r\n\r\nok",
    "s199": b"HTTP/1.1 199 X\r\nContent-Length: 2\r\n\r\nok",
    "e103": b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "s204body": b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\nok",
    "s304": b'HTTP/1.1 304 Not Modified\r\nETag: "a"\r\n\r\n',
    "http10": b"HTTP/1.0 200 OK\r\n\r\nclose-delimited",
    "ctl": b"HTTP/1.1 200 OK\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\nok",
    "utf8": "HTTP/1.1 200 OK\r\nX-U: caf\u00e9\r\nContent-Length: 2\r\n\r\nok".encode(),
    "twolengths": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
    "short": b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok",
    "garbage": b"NOT HTTP AT ALL\r\n\r\n",
    "empty": b"",
    "badgzip": b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 5\r\n\r\nnotgz",
    "cookies": b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n"
    b"Content-Length: 2\r\n\r\nok",
}


class ResetOrigin:
    """A raw socket server that reads a whole request (head and Content-Length body),
    then resets the connection without a byte of answer: the request arrived."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._reset, args=(conn,), daemon=True).start()

    def _reset(self, conn: socket.socket) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                return
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        self.requests += 1
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # RST

    def stop(self) -> None:
        self.sock.close()


class OddOrigin:
    """A raw socket server that sends :data:`ODD_ANSWERS` and closes the connection; a
    WebSocket upgrade it accepts, then echoes one text message (``echo:`` + the text)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                received += chunk
            target = received.split(b" ", 2)[1].decode()
            name = target.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
            if b"\r\nupgrade: websocket" in received.lower():
                self._echo_one_message(conn, received)
                return
            conn.sendall(ODD_ANSWERS.get(name, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)

    @staticmethod
    def _echo_one_message(conn: socket.socket, received: bytes) -> None:
        head, _, rest = received.partition(b"\r\n\r\n")
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
        conn.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        frame = rest
        while len(frame) < 6 or len(frame) < 6 + (frame[1] & 0x7F):
            chunk = conn.recv(65536)
            if not chunk:
                return
            frame += chunk
        length, mask = frame[1] & 0x7F, frame[2:6]  # a client's short, masked text frame
        text = bytes(b ^ mask[i % 4] for i, b in enumerate(frame[6 : 6 + length]))
        reply = b"echo:" + text
        conn.sendall(bytes([0x81, len(reply)]) + reply)

    def stop(self) -> None:
        self.sock.close()


WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def websocket_echo(base: str, path: str, ip: str) -> tuple[bytes, bytes]:
    """Open a WebSocket through the gateway, send "hello": the status line, the reply."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        key = base64.b64encode(os.urandom(16))
        sock.sendall(
            b"GET " + path.encode() + b" HTTP/1.1\r\nHost: gateway.test\r\n"
            b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Key: " + key + b"\r\nCF-Connecting-IP: " + ip.encode() + b"\r\n\r\n"
        )
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status:
            return status, b""
        mask = os.urandom(4)
        sock.sendall(
            bytes([0x81, 0x85]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(b"hello"))
        )
        while len(rest) < 2 or len(rest) < 2 + rest[1]:
            rest += sock.recv(65536)
        return status, rest[2 : 2 + rest[1]]


def pool_config(origins: dict[str, DemoOrigin], odd_url: str, reset_url: str) -> dict[str, Any]:
    pools = {}
    for pool, members in POOLS.items():
        listed = [{**member, "url": origins[member["name"]].url} for member in members]
        pools[pool] = {"breaker": BREAKER, "retry": RETRY, "origins": listed}
    pools["tiny"]["retry"] = {"attempts": 1}
    pools["rs"]["origins"].insert(0, region("rs-a", "EU", 0, url=reset_url))
    for name in ("pb", "ps", "pe", "rs", "cb"):
        pools[name]["breaker"] = ISSUE_BREAKER
    # One origin, sent once: the client's body streams to it as it comes.
    pools["cb"]["retry"] = {"attempts": 1}
    # Never tripped: each odd answer is judged alone.
    odd = {"name": "odd", "url": odd_url}
    pools["odd"] = {"breaker": {"window": 1000, "min_calls": 1000}, "origins": [odd]}
    pools["odd"]["retry"] = {"attempts": 1}

    def route(name: str, pool: str, **more: Any) -> dict[str, Any]:
        return {
            "name": name,
            "match": {"path": f"/{name}/*"},
            "limits": "10000/hour",
            "pool": pool,
            **more,
        }

    return {
        "pools": pools,
        "client_ip_header": "X-Forwarded-For",
        "forwarded_host": True,
        "origin_headers": {"X-Gateway-Key": "$GATEWAY_KEY"},
        "routes": [
            route("geo", "geo"),
            route("fo", "fo"),
            route("stop", "stop"),
            route("hc", "hc"),
            route("post", "post"),
            route("tiny", "tiny"),
            route(
                "stale", "lone", cache={"ttl": "1s", "default_ttl": "1s", "stale_if_error": "1m"}
            ),
            route("deadline", "slow", timeout="1s"),
            route("dripc", "drip", timeout="3s", cache={"ttl": "1m", "default_ttl": "1m"}),
            route("odd", "odd"),
            route("oddc", "odd", cache={"ttl": "1m", "default_ttl": "1m"}),
            route("oddi", "odd", idempotency={"mode": "optional"}),
            # Exact whatever the timing (a sliding window's estimate admits a third
            # connection when the three straddle a minute).
            route("wsl", "odd", limits="2/minute", algorithm="sliding_log"),
            route("pb", "pb"),
            route("ps", "ps"),
            route("pe", "pe"),
            route("rs", "rs"),
            # Long enough that a client going away 0.2 s in is always seen first, even on
            # a loaded machine (CI once saw a 500 ms timeout win the race).
            route("cb", "cb", timeout="5s"),
        ],
    }


@pytest.fixture(scope="module")
def origins() -> Iterator[dict[str, DemoOrigin]]:
    servers = {name: DemoOrigin(name) for name in NAMES}
    try:
        yield servers
    finally:
        for server in servers.values():
            with contextlib.suppress(OSError):
                server.stop()


@pytest.fixture(scope="module")
def odd() -> Iterator[OddOrigin]:
    server = OddOrigin()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def resetting() -> Iterator[ResetOrigin]:
    server = ResetOrigin()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pools_gateway(
    worker_dir: Path,
    origins: dict[str, DemoOrigin],
    odd: OddOrigin,
    resetting: ResetOrigin,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalGateway]:
    config = pool_config(origins, odd.url, resetting.url)
    gw = LocalGateway(
        worker_dir,
        # GATEWAY_KEY stands in for a secret (`wrangler secret put`): both are env text.
        {"EDGE_LIMITER": config, "GATEWAY_KEY": GATEWAY_KEY},
        persist_dir=tmp_path_factory.mktemp("pools"),
        replicas=2,
        trigger_handlers=True,
    )
    track(gw.start())
    try:
        yield gw
    finally:
        gw.stop()


def get(base: str, path: str, country: str = "", continent: str = "", **kw: Any) -> httpx.Response:
    headers = {"cf-connecting-ip": fresh_ip(), **kw.pop("headers", {})}
    if country:
        headers["mf-cf-blob"] = json.dumps({"country": country, "continent": continent})
    return httpx.request(kw.pop("method", "GET"), base + path, headers=headers, timeout=30, **kw)


def hits(origin: DemoOrigin, prefix: str = "/") -> int:
    return sum(1 for _, path in origin.hits if path.startswith(prefix) and path != "/health")


GATEWAY_KEY = "s3cret-of-the-gateway"


@pytest.mark.parametrize("route", ["odd", "oddc", "oddi"])
def test_no_answer_of_a_misbehaving_origin_becomes_a_500(
    pools_gateway: LocalGateway, route: str
) -> None:
    for name in ODD_ANSWERS:
        method = "POST" if route == "oddi" else "GET"
        headers = {"cf-connecting-ip": fresh_ip()}
        if route == "oddi":
            headers["idempotency-key"] = f"{name}-{time.time_ns()}"
        url = f"{pools_gateway.url}/{route}/{name}"
        # Streamed and not decoded: a body the origin broke may reach the client broken.
        with httpx.stream(method, url, headers=headers, timeout=30) as answer:
            status, fields = answer.status_code, answer.headers
            text = b"" if status < 500 else answer.read()
        assert status != 500, (route, name, text[:300])
        if status in (502, 503, 504) and fields.get("x-origin") != "odd":
            # The gateway's own failure answers say what happened.
            assert fields["content-type"] == "application/problem+json", (route, name)


def test_a_websocket_is_upgraded_through_the_gateway_and_counted_per_connection(
    pools_gateway: LocalGateway,
) -> None:
    ip = fresh_ip()
    for route in ("odd", "oddc"):  # plain, and a cached route (an upgrade is never stored)
        status, reply = websocket_echo(pools_gateway.url, f"/{route}/ws", ip)
        assert b" 101 " in status and reply == b"echo:hello", (route, status)
    opened = [websocket_echo(pools_gateway.url, "/wsl/ws", ip)[0] for _ in range(3)]
    assert [b" 101 " in s for s in opened] == [True, True, False]  # 2/minute: the third
    assert b" 429 " in opened[2]


def test_clients_reach_their_regions_origin(pools_gateway: LocalGateway) -> None:
    for (country, continent), expected in {
        ("DE", "EU"): "eu",
        ("US", "NA"): "us",
        ("JP", "AS"): "ap",
    }.items():
        answer = get(pools_gateway.url, "/geo/x", country, continent)
        assert answer.status_code == 200
        assert answer.headers["x-origin"] == expected
        assert answer.json()["origin"] == expected


def test_the_origin_learns_the_clients_address_from_the_gateway_only(
    pools_gateway: LocalGateway,
) -> None:
    ip = fresh_ip()
    answer = get(
        pools_gateway.url,
        "/geo/ip",
        "DE",
        "EU",
        headers={"cf-connecting-ip": ip, "x-forwarded-for": "6.6.6.6"},
    )
    assert answer.json()["headers"]["x-forwarded-for"] == ip  # the client's copy replaced


def test_the_origin_learns_the_host_asked_for_from_the_gateway_only(
    pools_gateway: LocalGateway,
) -> None:
    # (A forged "https" would not do here: locally Miniflare 5 makes a client's
    # X-Forwarded-Proto the scheme of the URL the Worker sees; docs/local-runtime.md.)
    forged = {"x-forwarded-host": "other-tenant.test", "x-forwarded-proto": "gopher"}
    echo = get(pools_gateway.url, "/geo/host", "DE", "EU", headers=forged).json()
    asked = urlsplit(pools_gateway.url)
    assert echo["headers"]["x-forwarded-host"] == asked.netloc  # 127.0.0.1:PORT
    assert echo["headers"]["x-forwarded-proto"] == asked.scheme == "http"
    assert [n for n, _ in echo["header_lines"]].count("x-forwarded-host") == 1


def test_origins_get_the_gateways_secret_never_a_clients(pools_gateway: LocalGateway) -> None:
    forged = {"x-gateway-key": "forged"}
    echo = get(pools_gateway.url, "/geo/secret", "DE", "EU", headers=forged).json()
    assert echo["headers"]["x-gateway-key"] == GATEWAY_KEY
    assert [v for n, v in echo["header_lines"] if n == "x-gateway-key"] == [GATEWAY_KEY]


def test_an_origins_429_goes_to_that_client_and_the_next_client_is_served(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    limited = get(pools_gateway.url, "/geo/status/429", "DE", "EU")
    assert limited.status_code == 429 and limited.headers["x-origin"] == "eu"
    assert limited.json()["origin"] == "eu"  # the origin's own answer, not retried elsewhere
    served = get(pools_gateway.url, "/geo/next", "DE", "EU")
    assert served.status_code == 200 and served.headers["x-origin"] == "eu"


def test_a_stopped_origin_fails_over_with_no_failed_idempotent_request(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    origins["st-eu"].stop()  # connection refused from now on
    answers = [get(pools_gateway.url, "/stop/x", "DE", "EU") for _ in range(12)]
    assert [a.status_code for a in answers] == [200] * 12
    assert {a.headers["x-origin"] for a in answers} == {"st-us"}


def test_the_breaker_opens_is_shared_by_the_other_isolate_and_closes_on_recovery(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    failing = origins["fo-eu"]
    failing.fail_status = 503
    main, other = pools_gateway.url, pools_gateway.replica_urls[0]
    for _ in range(4):  # each: fo-eu answers 503, the retry goes to fo-us
        assert get(main, "/fo/x", "DE", "EU").headers["x-origin"] == "fo-us"
    assert hits(failing) == 4
    assert get(main, "/fo/x", "DE", "EU").headers["x-origin"] == "fo-us"
    assert hits(failing) == 4  # open: skipped
    # The other isolate never saw fo-eu fail, and skips it too: the trip was reported
    # at once (not with a later request's report, about a second on).
    for _ in range(5):
        assert get(other, "/fo/x", "DE", "EU").headers["x-origin"] == "fo-us"
    assert hits(failing) == 4
    # Recovery: after the open time, trials reach fo-eu and close the breaker.
    failing.fail_status = None
    deadline = time.monotonic() + 15
    while get(main, "/fo/x", "DE", "EU").headers["x-origin"] != "fo-eu":
        assert time.monotonic() < deadline, "the breaker never closed"
        time.sleep(0.3)
    assert [get(main, "/fo/x", "DE", "EU").headers["x-origin"] for _ in range(3)] == ["fo-eu"] * 3


def test_health_probes_open_a_breaker_with_no_user_traffic(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    sick = origins["hc-a"]
    sick.fail_status = 503
    assert pools_gateway.run_scheduled() == 200
    assert pools_gateway.run_scheduled() == 200  # two failed probes in a row
    assert pools_gateway.saw('"event":"health_probe","origin":"hc-a","healthy":false')
    for base in (pools_gateway.url, pools_gateway.replica_urls[0]):
        assert get(base, "/hc/x", "DE", "EU").headers["x-origin"] == "hc-b"
    assert hits(sick) == 0  # no user request ever reached it
    # Its wait (3 s) runs out with no traffic: half-open. A failed probe then is a failed
    # trial: open again, for twice as long, still with no user request sent to it.
    time.sleep(3.2)
    assert pools_gateway.run_scheduled() == 200
    for base in (pools_gateway.url, pools_gateway.replica_urls[0]):
        assert get(base, "/hc/x", "DE", "EU").headers["x-origin"] == "hc-b"
    assert hits(sick) == 0
    sick.fail_status = None
    assert pools_gateway.run_scheduled() == 200  # it passes: tried again at once
    deadline = time.monotonic() + 15
    while get(pools_gateway.url, "/hc/x", "DE", "EU").headers["x-origin"] != "hc-a":
        assert time.monotonic() < deadline, "traffic never went back to hc-a"
        time.sleep(0.3)


def test_a_post_without_a_key_is_never_retried(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    origins["p-a"].fail_status = 503
    answer = get(pools_gateway.url, "/post/x", "DE", "EU", method="POST", content=b"x")
    assert answer.status_code == 503 and answer.headers["x-origin"] == "p-a"
    assert hits(origins["p-a"]) == 1 and hits(origins["p-b"]) == 0
    origins["p-a"].fail_status = None


def test_the_bulkhead_caps_requests_in_flight(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    tiny = origins["tiny"]
    tiny.delay_ms = 1_000

    async def burst() -> list[tuple[int, float]]:
        async with httpx.AsyncClient(base_url=pools_gateway.url, timeout=30) as client:

            async def one() -> tuple[int, float]:
                started = time.monotonic()
                answer = await client.get("/tiny/x", headers={"cf-connecting-ip": fresh_ip()})
                return answer.status_code, time.monotonic() - started

            return list(await asyncio.gather(*(one() for _ in range(6))))

    results = asyncio.run(burst())
    tiny.delay_ms = 0
    assert tiny.max_in_flight <= 2
    assert sorted(status for status, _ in results) == [200, 200, 503, 503, 503, 503]
    assert all(seconds < 0.8 for status, seconds in results if status == 503)  # at once


def test_clients_that_go_away_give_their_bulkhead_slots_back(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    # Two clients take both of tiny's slots and go away while it works on their requests.
    # The attempts are carried to their end (waitUntil) and give the slots back; before,
    # the platform never resumed those requests, and every later request to tiny in that
    # isolate was refused at once (503 origin_busy) for the isolate's life.
    tiny = origins["tiny"]
    tiny.delay_ms = 1_000
    leaving = [
        threading.Thread(
            target=leave_midway,
            args=(pools_gateway.url, f"/tiny/gone-{n}"),
            kwargs={"headers": {"cf-connecting-ip": fresh_ip()}, "after": 0.3},
        )
        for n in range(2)
    ]
    for thread in leaving:
        thread.start()
    for thread in leaving:
        thread.join()
    deadline = time.monotonic() + 10
    while hits(tiny, "/tiny/gone-") < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)  # tiny answers them
    tiny.delay_ms = 0
    # Their slots come back once tiny's answers are in (polled: on a loaded machine they
    # may come a little after the second); never given back, every request is refused.
    while get(pools_gateway.url, "/tiny/after").status_code != 200:
        assert time.monotonic() < deadline + 1.0, "the bulkhead's slots were never released"
        time.sleep(0.1)
    statuses = [get(pools_gateway.url, "/tiny/after").status_code for _ in range(3)]
    assert statuses == [200] * 3


def test_stale_if_error_serves_the_cached_copy(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    lone = origins["lone"]
    first = get(pools_gateway.url, "/stale/x")
    assert first.status_code == 200 and first.headers["x-cache"] == "MISS"
    deadline = time.monotonic() + 10
    while get(pools_gateway.url, "/stale/x").headers["x-cache"] != "HIT":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(1.2)  # no longer fresh (1 s), still within stale_if_error (1 m)
    lone.fail_status = 503
    stale = get(pools_gateway.url, "/stale/x")
    lone.fail_status = None
    assert stale.status_code == 200 and stale.headers["x-cache"] == "STALE"
    assert stale.json() == first.json() and int(stale.headers["age"]) >= 1


def test_every_failure_answer_arrives_within_the_route_deadline(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    origins["slow"].delay_ms = 5_000
    started = time.monotonic()
    answer = get(pools_gateway.url, "/deadline/x")
    elapsed = time.monotonic() - started
    origins["slow"].delay_ms = 0
    assert answer.status_code == 504
    body = answer.json()
    assert body["code"] == "origin_timeout" and body["tried"][0]["origin"] == "slow"
    assert elapsed < 3.5  # the 1 s deadline, not the origin's 5 s (slack for a loaded host)


def test_a_body_read_to_store_it_may_pause_for_the_routes_timeout(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    # A probe's finding: the origin's own timeout (300 ms) cut a stored body whose parts
    # came 500 ms apart, though the route's timeout (3 s) allows that pause.
    path = f"/dripc/{fresh_ip()}?drip=500"
    answer = get(pools_gateway.url, path)
    assert answer.status_code == 200, answer.text[:300]
    assert answer.headers["x-cache"] == "MISS" and answer.json()["origin"] == "drip"
    deadline = time.monotonic() + 10
    while (hit := get(pools_gateway.url, path)).headers["x-cache"] != "HIT":
        assert time.monotonic() < deadline, "the body was never stored"
        time.sleep(0.1)
    assert hit.json() == answer.json()
    # The origin's timeout still bounds the wait for the head.
    origins["drip"].delay_ms = 1_000
    started = time.monotonic()
    late = get(pools_gateway.url, f"/dripc/{fresh_ip()}")
    origins["drip"].delay_ms = 0
    assert late.status_code == 504 and late.json()["code"] == "origin_timeout"
    assert {tried["timeout_ms"] for tried in late.json()["tried"]} == {300}  # each attempt
    assert time.monotonic() - started < 2.5  # three attempts, within the route's 3 s


def attempts_at(gateway: LocalGateway, origin: str) -> list[dict[str, Any]]:
    """The gateway's origin_attempt log lines for ``origin`` (failures and retries)."""
    lines = []
    for line in gateway.stderr_tail(2_000).splitlines():
        start = line.find("{")
        if '"event":"origin_attempt"' in line and start >= 0:
            record = json.loads(line[start:])
            if record["origin"] == origin:
                lines.append(record)
    return lines


def test_post_traffic_against_a_killed_origin_opens_its_breaker_and_no_client_sees_it(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    # The issue: POSTs without a key against a pool whose first origin was killed got
    # 502 every time, and the breaker stayed closed. A refused connection never sent the
    # request: each POST goes to pb-b at once, and pb-a's breaker opens after min_calls.
    # The body is larger than what workerd (1.20261117 to 1.20261123) reads of it before it has a
    # connection (about 64 KiB through the FixedLengthStream it goes in), so how much of
    # it was taken tells a connection never made (see the next test for a small one).
    origins["pb-a"].stop()  # its port refuses from now on
    plain = {"content-type": "text/plain"}
    body = b"x" * LARGE_BODY
    answers = [
        get(pools_gateway.url, "/pb/x", "DE", "EU", method="POST", content=body, headers=plain)
        for _ in range(20)
    ]
    assert [a.status_code for a in answers] == [200] * 20  # no client-visible failure
    assert {a.headers["x-origin"] for a in answers} == {"pb-b"}
    assert hits(origins["pb-b"], "/pb/") == 20
    echo = answers[0].json()  # sent whole, with its length (the body was kept in memory)
    assert echo["method"] == "POST" and echo["body_bytes"] == LARGE_BODY
    assert echo["headers"]["content-length"] == str(LARGE_BODY)
    assert "transfer-encoding" not in echo["headers"]
    # Tried min_calls (5) times, then skipped: its breaker is open.
    assert pools_gateway.saw('"origin":"pb-a","attempt":1,"outcome":"unreachable"')
    tried = attempts_at(pools_gateway, "pb-a")
    assert len(tried) == 5, tried
    # How workerd's fetch failure was read: the body's end was never taken (the runtime
    # says only "Network connection lost." for every such failure).
    assert all(t["detail"].startswith("never connected") for t in tried), tried
    assert tried[-1]["breaker"] == "open"


def test_small_posts_against_a_killed_origin_are_not_resent_but_open_its_breaker(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    # workerd (1.20261117 to 1.20261123) reads a small body whole while it connects, so a refused
    # connection and one reset after the whole request arrived look alike (same error,
    # same body taken): the POST may have arrived and is not sent again. Its failures
    # count, and after min_calls (5) every POST goes to ps-b. (On workerd 1.20260426 the
    # body waited for the connection, and these went to ps-b at once.)
    origins["ps-a"].stop()
    plain = {"content-type": "text/plain"}
    answers = [
        get(pools_gateway.url, "/ps/x", "DE", "EU", method="POST", content=b"hello", headers=plain)
        for _ in range(20)
    ]
    statuses = [a.status_code for a in answers]
    assert statuses == [502] * 5 + [200] * 15, statuses
    assert {a.headers["x-origin"] for a in answers[5:]} == {"ps-b"}
    assert hits(origins["ps-b"], "/ps/") == 15  # each sent once
    tried = attempts_at(pools_gateway, "ps-a")
    assert [t["outcome"] for t in tried] == ["unreachable"] * 5, tried
    assert all(t["detail"].startswith("unreachable") for t in tried), tried
    assert tried[-1]["breaker"] == "open"


def test_bodiless_posts_against_a_killed_origin_fail_at_most_min_calls_times(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    # Content-Length: 0: no body whose sending shows the connection was never made, so
    # the failure may have reached the origin and is not resent; but it counts, and
    # after min_calls (5) failures every POST goes to pe-b.
    origins["pe-a"].stop()
    empty = {"content-length": "0"}
    answers = [
        get(pools_gateway.url, "/pe/x", "DE", "EU", method="POST", content=b"", headers=empty)
        for _ in range(20)
    ]
    statuses = [a.status_code for a in answers]
    assert statuses == [502] * 5 + [200] * 15, statuses
    assert {a.headers["x-origin"] for a in answers[5:]} == {"pe-b"}
    assert attempts_at(pools_gateway, "pe-a")[-1]["breaker"] == "open"


def test_an_origin_that_resets_after_taking_the_request_counts_and_is_not_resent(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin], resetting: ResetOrigin
) -> None:
    # The runtime's words are the same as for a refused connection; here the body was
    # taken, so the request may have arrived: a POST without a key is not sent again.
    before = resetting.requests
    plain = {"content-type": "text/plain"}
    answers = [
        get(pools_gateway.url, "/rs/x", "DE", "EU", method="POST", content=b"hello", headers=plain)
        for _ in range(10)
    ]
    assert [a.status_code for a in answers] == [502] * 5 + [200] * 5
    assert resetting.requests - before == 5  # each arrived whole
    assert {a.headers["x-origin"] for a in answers[5:]} == {"rs-b"}
    tried = attempts_at(pools_gateway, "rs-a")
    assert [t["outcome"] for t in tried] == ["unreachable"] * 5
    assert all(t["detail"].startswith("unreachable") for t in tried), tried
    assert tried[-1]["breaker"] == "open"


def test_uploads_that_break_off_count_neither_way(
    pools_gateway: LocalGateway, origins: dict[str, DemoOrigin]
) -> None:
    # A client that promises 100 bytes, sends 10 and goes away: the origin would wait for
    # the rest until the timeout; the client's failure, not the origin's, seen at once.
    host, port = pools_gateway.url.removeprefix("http://").split(":")
    for _ in range(7):  # more than min_calls (5)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                b"POST /cb/x HTTP/1.1\r\nHost: gateway.test\r\nContent-Type: text/plain\r\n"
                b"CF-Connecting-IP: " + fresh_ip().encode() + b"\r\n"
                b"Content-Length: 100\r\n\r\n0123456789"
            )
            time.sleep(0.2)
    deadline = time.monotonic() + 10
    while len(attempts_at(pools_gateway, "cb")) < 7:
        assert time.monotonic() < deadline, pools_gateway.stderr_tail(40)
        time.sleep(0.2)
    tried = attempts_at(pools_gateway, "cb")
    assert [t["outcome"] for t in tried] == ["client_body_failed"] * 7
    assert {t["breaker"] for t in tried} == {"closed"}
    served = get(pools_gateway.url, "/cb/x")
    assert served.status_code == 200 and served.headers["x-origin"] == "cb"
