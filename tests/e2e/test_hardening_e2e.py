"""Bad input end to end: at least 10,000 hypothesis-generated requests on the local runtime.

Requests are written byte by byte on a raw socket (an HTTP client library would tidy them
up first): odd and unknown methods, paths with percent-encoding, dot segments, doubled
slashes and mixed case, huge, binary and repeated headers, odd client addresses, very
long keys, malformed ``Idempotency-Key`` values, bodies a route does not expect, chunked
bodies. They go to every kind of route: each algorithm, header and path keys, the KV
cache, idempotency, a pool with its breaker, the admin API and unmatched paths.

For every answer:

- there is one, within the deadline (no hang);
- never a 500, and no other 5xx from the gateway (the origin is healthy);
- every 4xx or 5xx the gateway makes itself is ``application/problem+json`` whose
  ``status`` is the answer's and whose ``detail`` says what is wrong; the others come from
  the origin (marked by it) or, for a request that is not valid HTTP/1.1, from the runtime's
  own parser, which never reaches the Worker.

Afterwards the gateway still counts exactly: a fresh client gets its route's limit, no more.
The figures (requests, statuses) are printed for ``SECURITY.md``.

Two fuzz runs: a fixed corpus (derandomized: the same 10,200 requests every run, so a
failure reproduces as is) and a smaller one drawn anew each run from a random seed (new
cases every run; the seed is printed, and ``FUZZ_SEED=N`` sends the same requests again).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import secrets
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from edge_limiter.tools.local_gateway import LocalGateway
from edge_limiter.tools.toolchain import node
from tests.clients import in_flight

from .conftest import fresh_ip, track

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "fuzz-admin-token-77c2"
BATCH = 50
BATCHES = int(os.environ.get("FUZZ_BATCHES", "204"))  # 10,200 requests
#: The batches drawn anew each run (from a random seed, or FUZZ_SEED).
NEW_BATCHES = int(os.environ.get("FUZZ_NEW_BATCHES", "20"))  # 1,000 requests
DEADLINE_S = 20.0
ORIGIN_MARK = "x-origin"  # the gateway names the origin on every answer that came from one


@dataclass
class Tally:
    """What the generated requests got, for the report and the final assertions."""

    sent: int = 0
    statuses: collections.Counter[int] = field(default_factory=collections.Counter)
    by_source: collections.Counter[str] = field(default_factory=collections.Counter)
    malformed_sent: int = 0
    seconds: float = 0.0
    slowest: list[tuple[float, str]] = field(default_factory=list)


@pytest.fixture(scope="module")
def fast_origin() -> Iterator[str]:
    """A keep-alive Node origin that takes any body (chunked too) and marks its answers."""
    process = subprocess.Popen(
        [node(), str(ROOT / "scripts" / "bench" / "origin.mjs")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("ORIGIN "), line
    try:
        yield line.split()[1]
    finally:
        process.terminate()
        process.wait(timeout=10)


def fuzz_config(origin: str) -> dict[str, Any]:
    def route(name: str, limits: str, **more: Any) -> dict[str, Any]:
        return {"name": name, "match": {"path": f"/{name}/*"}, "limits": limits, **more}

    return {
        "origin": origin,
        "store_timeout_ms": 2000,
        "pools": {
            "main": {
                "breaker": {"failure_rate": 50, "window": 20, "min_calls": 10, "open_for": "5s"},
                "retry": {"attempts": 2, "base": "10ms", "cap": "50ms"},
                "origins": [
                    {"name": "a", "url": origin, "continents": ["EU"]},
                    {"name": "b", "url": origin, "continents": ["NA"]},
                ],
            }
        },
        "routes": [
            route("tb", "100000/hour", algorithm="token_bucket"),
            route("gcra", "100000/hour", algorithm="gcra"),
            route("log", "10000/hour", algorithm="sliding_log"),
            route("sw", "100000/hour", algorithm="sliding_window"),
            route("fw", "100000/hour", algorithm="fixed_window"),
            route("apikey", "100000/hour", key="header:x-api-key"),
            {
                "name": "tenant",
                "match": {"path": "/tenant/{tenant}/*"},
                "limits": "100000/hour",
                "key": ["path:tenant", "ip"],
            },
            route("cached", "100000/hour", cache={"ttl": "5m", "default_ttl": "5m"}),
            route(
                "pay",
                "100000/hour",
                key="header:x-api-key",
                idempotency={"mode": "required", "lock_timeout": "10s"},
            ),
            route("pooled", "100000/hour", pool="main", refund_on=[502, 503, 504]),
            route("multi", "50000/minute; 100000/hour", cost=2),
            # After the fuzz: a fresh client gets exactly this limit.
            route("exact", "5/hour", algorithm="sliding_log"),
        ],
    }


@pytest.fixture(scope="module")
def fuzz_gateway(
    worker_dir: Path, fast_origin: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalGateway]:
    gw = LocalGateway(
        worker_dir,
        {"EDGE_LIMITER": fuzz_config(fast_origin), "EDGE_LIMITER_ADMIN_TOKEN": TOKEN},
        persist_dir=tmp_path_factory.mktemp("fuzz"),
    )
    track(gw.start())
    try:
        # The config is valid and the origin reachable: the fuzz must test something.
        assert httpx.get(f"{gw.url}/unmatched", timeout=30).status_code == 200
        yield gw
    finally:
        gw.stop()


# --- generated requests ----------------------------------------------------------------


@dataclass(frozen=True)
class Generated:
    method: str
    target: str
    headers: tuple[tuple[str, bytes], ...]
    body: bytes
    chunked: bool
    malformed: bool
    """Not valid HTTP/1.1: the runtime's parser may answer it before the Worker sees it."""

    @property
    def head_size(self) -> int:
        return len(self.target) + sum(len(n) + len(v) + 4 for n, v in self.headers)

    def wire(self, host: str) -> bytes:
        lines = [f"{self.method} {self.target} HTTP/1.1".encode("latin-1")]
        lines.append(f"Host: {host}".encode())
        lines += [name.encode("latin-1") + b": " + value for name, value in self.headers]
        if self.chunked:
            lines.append(b"Transfer-Encoding: chunked")
        elif self.body or self.method in ("POST", "PUT", "PATCH"):
            lines.append(b"Content-Length: " + str(len(self.body)).encode())
        lines.append(b"Connection: close")
        head = b"\r\n".join(lines) + b"\r\n\r\n"
        if not self.chunked:
            return head + self.body
        chunks = b""
        for start in range(0, len(self.body), 7):
            piece = self.body[start : start + 7]
            chunks += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        return head + chunks + b"0\r\n\r\n"


ROUTES = [
    "tb",
    "gcra",
    "log",
    "sw",
    "fw",
    "apikey",
    "tenant/acme",
    "cached",
    "pay",
    "pooled",
    "multi",
    "_edge-limiter",
    "unmatched",
    "",
]
SEGMENTS = st.one_of(
    st.sampled_from(
        [
            "",
            ".",
            "..",
            "%2e",
            "%2E%2e",
            "%2f",
            "%5C",
            "%00",
            "%",
            "%zz",
            "%C3%BC",
            "%FF%FE",
            "%25",
            "TB",
            "Tb",
            "a;b=c",
            ";x",
            "~user",
            "a+b",
            "x" * 3000,
            "%ef%bc%8f",
            "keys",
            "config",
            "state",
        ]
    ),
    st.text(alphabet="abcXYZ019-._~!$&'()*+,;=:@%", max_size=12),
)
QUERIES = st.one_of(
    st.just(""),
    st.sampled_from(
        [
            "?",
            "?a=1&a=2",
            "?utm_source=x",
            "?%zz",
            "?a=%00",
            "?" + "q=1&" * 300,
            "?_method=PATCH",
            "?_method=get;_method=put",
        ]
    ),
    st.text(alphabet="abc=&%20;", max_size=20).map(lambda q: "?" + q),
)
METHODS = st.sampled_from(
    [
        "GET",
        "GET",
        "GET",
        "POST",
        "POST",
        "HEAD",
        "PUT",
        "DELETE",
        "PATCH",
        "OPTIONS",
        "PROPFIND",
        "MKCOL",
        "get",
        "Post",
        "BREW",
        "X-CUSTOM",
    ]
)
# The runtime refuses method names it does not know (501) before the Worker runs.
KNOWN_METHODS = {"GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "PROPFIND", "MKCOL"}
CLIENT_IPS = st.sampled_from(
    [
        "203.0.113.9",
        "::ffff:203.0.113.9",
        "fe80::1%eth0",
        "2001:db8::1",
        "2001:DB8:0:0:0:0:0:1",
        "",
        " ",
        "999.1.1.1",
        "1.2.3.4, 5.6.7.8",
        "not-an-ip",
        "0" * 300,
        "[::1]",
        "::",
        "0.0.0.0",
    ]
)
TEXT_VALUES = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
    st.sampled_from(["", " ", "null", "\t", "k" * 9000, '"quoted"', "a,b", "*"]),
)
IDEMPOTENCY_KEYS = st.one_of(
    st.sampled_from(
        [
            "",
            '""',
            '"ok-key-1"',
            "ok-key-1",
            '"' + "k" * 300 + '"',
            '"unterminated',
            '"a"b"',
            ":Ynl0ZXM=:",
            "1",
            '"ü"',
        ]
    ),
    st.uuids().map(lambda u: f'"{u}"'),
)
OBS_TEXT = st.binary(min_size=1, max_size=30).map(
    lambda b: bytes(c for c in b if c >= 0x20 and c != 0x7F) or b"x"
)
HEADERS = st.lists(
    st.one_of(
        st.tuples(st.just("CF-Connecting-IP"), CLIENT_IPS.map(str.encode)),
        st.tuples(st.just("X-Forwarded-For"), CLIENT_IPS.map(str.encode)),
        st.tuples(st.just("X-API-Key"), TEXT_VALUES.map(str.encode)),
        st.tuples(st.just("Idempotency-Key"), IDEMPOTENCY_KEYS.map(str.encode)),
        st.tuples(
            st.just("Authorization"),
            st.sampled_from([b"Bearer x", b"Bearer " + TOKEN.encode(), b"Basic !!!", b""]),
        ),
        st.tuples(
            st.just("Content-Type"),
            st.sampled_from(
                [
                    b"application/json",
                    b"text/plain",
                    b"multipart/form-data; boundary=",
                    b"\xff",
                    b"application/x-www-form-urlencoded",
                ]
            ),
        ),
        st.tuples(
            st.just("Cache-Control"),
            st.sampled_from(
                [b"no-cache", b"max-age=-1", b"max-age=99999999999999999999", b"no-store, no-store"]
            ),
        ),
        st.tuples(
            st.sampled_from(["X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"]),
            st.sampled_from([b"DELETE", b"get", b"PUT, DELETE", b"", b"NO SUCH", b"POST"]),
        ),
        st.tuples(st.just("X-Binary"), OBS_TEXT),
        st.tuples(st.just("X-Huge"), st.integers(1, 30_000).map(lambda n: b"h" * n)),
        st.tuples(
            # Any name but the message's framing (a Content-Length of ":n-" is a malformed
            # request, which the MALFORMED cases send on purpose, and the runtime answers).
            st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=20).filter(
                lambda name: name not in ("content-length", "transfer-encoding", "host")
            ),
            TEXT_VALUES.map(str.encode),
        ),
    ),
    max_size=8,
)
BODIES = st.one_of(
    st.just(b""),
    st.binary(max_size=200),
    st.sampled_from(
        [b"{}", b'{"a":1}', b"[", b"\x00" * 64, b"a=1&b=2", b"_method=DELETE", b"a=1&_method=get"]
    ),
    st.integers(1, 200_000).map(lambda n: b"B" * n),
)
MALFORMED = st.sampled_from(
    [
        b"GET /tb/a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n0\r\n\r\n",
        b"GET /tb/a HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\nConnection: close\r\n\r\n",
        b"GET /tb/a HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\nConnection: close\r\n\r\n",
        b"GET /tb/a\x00b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /tb/a HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\nConnection: close\r\n\r\n",
        b"GET /tb/a b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"POST /pay/a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        b"zz\r\nabc\r\n0\r\n\r\n",
        b"GET /tb/a HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n",
    ]
)


@st.composite
def requests(draw: st.DrawFn) -> Generated | bytes:
    if draw(st.integers(0, 99)) < 2:
        return draw(MALFORMED)
    prefix = draw(st.sampled_from(ROUTES))
    segments = draw(st.lists(SEGMENTS, max_size=4))
    path = "/" + prefix + "".join("/" + s for s in segments)
    if draw(st.booleans()):
        path = path.replace("/", draw(st.sampled_from(["//", "/./", "/"])), 1)
    if draw(st.integers(0, 9)) == 0:
        path = path.upper()
    method = draw(METHODS)
    body = b"" if method in ("GET", "HEAD") and draw(st.booleans()) else draw(BODIES)
    return Generated(
        method=method,
        target=path + draw(QUERIES),
        headers=tuple(draw(HEADERS)),
        body=body,
        chunked=bool(body) and draw(st.booleans()),
        malformed=method not in KNOWN_METHODS,
    )


# --- a raw HTTP/1.1 client --------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


async def exchange(port: int, data: bytes, tally: Tally, head_only: bool = False) -> Answer | None:
    """Send ``data`` while reading the answer, as a browser does (a server may answer
    before it has read a body); None if the connection closed with no answer. A slow
    exchange goes on ``tally``'s list."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        with contextlib.suppress(ConnectionError):
            writer.write(data)
            await writer.drain()

    sending = asyncio.ensure_future(send())
    try:
        return await read_answer(reader, head_only)
    except (ConnectionError, asyncio.IncompleteReadError):
        return None
    finally:
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
        writer.close()
        took = time.monotonic() - started
        if took > 1.0:
            tally.slowest.append((took, repr(data[:160])))


async def read_answer(reader: asyncio.StreamReader, head_only: bool) -> Answer:
    """One HTTP/1.1 answer: the head, then a body framed by its length or its chunks."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    status = int(status_line.split()[1])
    if head_only or status in (204, 304) or 100 <= status < 200:
        return Answer(status, headers, b"")
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
        return Answer(status, headers, body)
    if "content-length" in headers:
        return Answer(status, headers, await reader.readexactly(int(headers["content-length"])))
    return Answer(status, headers, await reader.read(-1))


def shown(request: Generated | bytes) -> str:
    """A failing request, with huge values cut short."""
    if isinstance(request, bytes):
        return repr(request[:300])
    headers = [(name, value[:80] + b"..." * (len(value) > 80)) for name, value in request.headers]
    return (
        f"{request.method} {request.target[:200]} headers={headers} "
        f"body={len(request.body)} bytes chunked={request.chunked}"
    )


def judge(request: Generated | bytes, answer: Answer | None, gateway: LocalGateway) -> str:
    """Where the answer came from; fails the test on an answer the gateway must not give
    (with the ``gateway``'s log lines of a 500)."""
    malformed = isinstance(request, bytes) or request.malformed
    where = request if isinstance(request, bytes) else request.method + " " + request.target[:200]
    if answer is None:
        # The runtime's parser may close the connection on a request that is not HTTP.
        assert malformed, f"no answer to {shown(request)}"
        return "runtime (closed)"
    status = answer.status
    content_type = answer.headers.get("content-type", "")
    if status == 500 and (not malformed or content_type.startswith("application/problem")):
        reference = answer.body.split(b'"reference":"')[-1][:12].decode("latin-1")
        logs = [line for line in gateway.stderr_tail(400).splitlines() if reference in line]
        raise AssertionError(f"500 for {shown(request)}: {answer.body[:300]!r}, log: {logs}")
    if ORIGIN_MARK in answer.headers:
        # The origin's own HTTP parser may refuse what the gateway passed on (Node answers
        # 431 to headers over 16 KB): that is the origin's answer, not a gateway error.
        assert status < 500, f"the healthy origin answered {status} for {where!r}"
        return "origin"
    if content_type.startswith("application/problem+json"):
        if not answer.body and not isinstance(request, bytes) and request.method == "HEAD":
            return f"gateway {status}"  # a HEAD answer has no body
        try:
            problem = json.loads(answer.body)
        except ValueError:
            raise AssertionError(
                f"{status} with a problem body that is not JSON for {shown(request)}: "
                f"{answer.headers} {answer.body[:300]!r}"
            ) from None
        assert problem["status"] == status, (where, problem)
        assert isinstance(problem.get("title"), str) and problem["title"], (where, problem)
        assert isinstance(problem.get("detail"), str) and problem["detail"], (where, problem)
        assert status < 500 or status in (502, 503, 504), (where, problem)
        return f"gateway {status}"
    if status in (200, 204, 304):
        return f"gateway {status}"  # the admin API's own answers
    # The runtime's own limits on the request line and headers answer before the Worker.
    oversized = not isinstance(request, bytes) and request.head_size > 16_384
    assert malformed or (oversized and status in (413, 414, 431)), (
        f"{status} without a problem body for {where!r}: {answer.body[:300]!r}"
    )
    return f"runtime {status}"


def fuzz(gateway: LocalGateway, batches: int, drawn_from: int | None) -> Tally:
    """Send ``batches`` batches of generated requests to ``gateway``, judging every answer.

    ``drawn_from`` None: the fixed corpus (derandomized, the same requests every run);
    else the seed the requests are drawn from.
    """
    tally = Tally()
    port = gateway.port
    host = f"127.0.0.1:{port}"

    @settings(
        max_examples=batches,
        deadline=None,
        derandomize=drawn_from is None,
        database=None,
        # Each example is 50 requests to a live runtime: report the first failure as it is.
        phases=[Phase.explicit, Phase.generate],
        print_blob=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(batch=st.lists(requests(), min_size=BATCH, max_size=BATCH))
    def send(batch: list[Generated | bytes]) -> None:
        async def run() -> list[Answer | None]:
            calls = [
                exchange(port, item, tally)
                if isinstance(item, bytes)
                else exchange(port, item.wire(host), tally, head_only=item.method == "HEAD")
                for item in batch
            ]
            return await asyncio.wait_for(asyncio.gather(*calls), DEADLINE_S)

        started = time.monotonic()
        answers = asyncio.run(run())
        tally.seconds += time.monotonic() - started
        for item, answer in zip(batch, answers, strict=True):
            source = judge(item, answer, gateway)
            tally.sent += 1
            tally.malformed_sent += isinstance(item, bytes) or item.malformed
            tally.by_source[source.split()[0]] += 1
            if answer is not None:
                tally.statuses[answer.status] += 1

    (send if drawn_from is None else seed(drawn_from)(send))()
    return tally


def still_counts_exactly(gateway: LocalGateway) -> None:
    """A fresh client gets exactly the ``exact`` route's limit (5/hour), and the runtime lives."""
    ip = fresh_ip()
    statuses = [
        httpx.get(f"{gateway.url}/exact/x", headers={"cf-connecting-ip": ip}).status_code
        for _ in range(7)
    ]
    assert statuses == [200] * 5 + [429] * 2
    assert gateway.running


def print_tally(name: str, tally: Tally) -> None:
    print(
        f"\n{name}: {tally.sent} requests ({tally.malformed_sent} not valid HTTP/1.1), "
        f"in {tally.seconds:.0f} s of sending, answered by {dict(tally.by_source)}, "
        f"statuses {dict(sorted(tally.statuses.items()))}",
        file=sys.stderr,
    )
    for took, request in sorted(tally.slowest, reverse=True)[:10]:
        print(f"slow: {took:.1f} s {request}", file=sys.stderr)


def test_a_fixed_corpus_of_generated_requests_gets_no_500_and_leaves_counting_exact(
    fuzz_gateway: LocalGateway,
) -> None:
    tally = fuzz(fuzz_gateway, BATCHES, None)
    assert tally.sent >= BATCH * BATCHES >= 10_000 or "FUZZ_BATCHES" in os.environ, tally.sent
    print_tally("fuzz (fixed corpus)", tally)
    still_counts_exactly(fuzz_gateway)


def test_requests_drawn_anew_each_run_get_no_500_and_leave_counting_exact(
    fuzz_gateway: LocalGateway,
) -> None:
    drawn_from = int(os.environ.get("FUZZ_SEED") or secrets.randbits(32))
    print(f"\nfuzz seed: {drawn_from} (FUZZ_SEED={drawn_from} sends the same)", file=sys.stderr)
    try:
        tally = fuzz(fuzz_gateway, NEW_BATCHES, drawn_from)
    except Exception as exc:
        exc.add_note(f"fuzz seed {drawn_from}: FUZZ_SEED={drawn_from} sends the same requests")
        raise
    assert tally.sent >= BATCH * NEW_BATCHES, tally.sent
    print_tally(f"fuzz (seed {drawn_from})", tally)
    still_counts_exactly(fuzz_gateway)


# --- load ------------------------------------------------------------------------------

LOAD_KEYS = 100
LOAD_PER_KEY = 100
LOAD_LIMIT = 60
LOAD_IN_FLIGHT = 100
EXACT = ("token_bucket", "gcra", "sliding_log", "fixed_window")


class BrokenOrigin(socketserver.ThreadingTCPServer):
    """An origin on loopback that answers by path (see :class:`_BrokenOriginHandler`) and
    keeps the path of every request it got."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _BrokenOriginHandler)
        self.paths: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _BrokenOriginHandler(socketserver.StreamRequestHandler):
    """Answers by path: ``/garbage`` with bytes that are not HTTP, ``/cut`` with a 200 whose
    body stops at 10 of its 1,000 announced bytes, then closes the connection."""

    server: BrokenOrigin

    def handle(self) -> None:
        request_line = self.rfile.readline().decode("latin-1")
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass
        path = request_line.split(" ")[1] if " " in request_line else "/"
        self.server.paths.append(path)
        if "/garbage" in path:
            self.wfile.write(b"this is not HTTP at all\r\n\r\n\x00\xff")
        else:
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            self.wfile.write(head + b"content-length: 1000\r\n\r\n" + b"0123456789")
        self.wfile.flush()


@pytest.fixture(scope="module")
def broken_origin() -> Iterator[BrokenOrigin]:
    server = BrokenOrigin()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def load_config(origin: str, broken: str = "http://127.0.0.1:9") -> dict[str, Any]:
    def on_broken(name: str, **more: Any) -> dict[str, Any]:
        return {
            "name": name,
            "match": {"path": f"/{name}/*"},
            "limits": "1000/hour",
            "origin": broken,
            "timeout": "5s",
            "retry": {"attempts": 1},
            **more,
        }

    return {
        "origin": origin,
        # A busy machine must not turn a slow object call into a fail-open admission.
        "store_timeout_ms": 10_000,
        "routes": [
            {
                "name": f"load-{algorithm}",
                "match": {"path": f"/load/{algorithm}"},
                # Per day: a bucket refills one unit every 24 minutes, never during the test.
                "limits": f"{LOAD_LIMIT}/day",
                "algorithm": algorithm,
                "key": "header:x-api-key",
            }
            for algorithm in EXACT
        ]
        + [
            {
                "name": "crash",
                "match": {"path": "/crash"},
                "limits": "40/hour",
                "algorithm": "sliding_log",
                "key": "header:x-api-key",
            }
        ]
        + [
            {
                "name": "crash-pay",
                "match": {"path": "/crash-pay/*"},
                "limits": "1000/hour",
                "key": "header:x-api-key",
                "idempotency": {"mode": "required"},
            },
            on_broken("broken"),
            on_broken("broken-cached", cache={"ttl": "5m", "default_ttl": "5m"}),
            on_broken(
                "broken-pay",
                key="header:x-api-key",
                idempotency={"mode": "required", "lock_timeout": "30s"},
            ),
        ],
    }


def key_algorithm(key: str) -> str:
    return EXACT[int(key.rsplit("-", 1)[1]) % len(EXACT)]


def workerd_rss_kb(gw: LocalGateway) -> int:
    """The resident memory of every process in the runtime's group (node and workerd)."""
    assert gw.pid is not None
    total = 0
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != gw.pid:  # the process group id
                continue
            rss_line = next(
                line
                for line in (status.parent / "status").read_text().splitlines()
                if line.startswith("VmRSS:")
            )
        except (OSError, StopIteration, IndexError, ValueError):
            continue
        total += int(rss_line.split()[1])
    return total


@pytest.fixture(scope="module")
def load_gateway(
    worker_dir: Path,
    fast_origin: str,
    broken_origin: BrokenOrigin,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalGateway]:
    gw = LocalGateway(
        worker_dir,
        {"EDGE_LIMITER": load_config(fast_origin, broken_origin.url)},
        persist_dir=tmp_path_factory.mktemp("load"),
    )
    track(gw.start())
    try:
        yield gw
    finally:
        gw.stop()


async def _drive(base: str, calls: list[tuple[str, str]], senders: int) -> list[int | str]:
    """Send (path, key) calls, ``senders`` at a time; each one's status or error name."""

    def call(path: str, key: str) -> Callable[[httpx.AsyncClient], Awaitable[int | str]]:
        async def send(client: httpx.AsyncClient) -> int | str:
            try:
                response = await client.get(path, headers={"x-api-key": key})
            except httpx.HTTPError as exc:
                return type(exc).__name__
            return response.status_code

        return send

    return await in_flight([call(path, key) for path, key in calls], senders, base_url=base)


def test_10000_requests_over_100_keys_at_100_in_flight_admit_exactly(
    load_gateway: LocalGateway,
) -> None:
    before_kb = workerd_rss_kb(load_gateway)
    day_before = time.time() // 86_400
    calls = [
        (f"/load/{EXACT[k % len(EXACT)]}", f"load-key-{k}")
        for _ in range(LOAD_PER_KEY)
        for k in range(LOAD_KEYS)
    ]
    statuses = asyncio.run(_drive(load_gateway.url, calls, LOAD_IN_FLIGHT))
    admitted: collections.Counter[str] = collections.Counter()
    other: collections.Counter[int | str] = collections.Counter()
    for (_, key), status in zip(calls, statuses, strict=True):
        if status == 200:
            admitted[key] += 1
        elif status != 429:
            other[status] += 1
    after_kb = workerd_rss_kb(load_gateway)
    print(
        f"\nload: {len(calls)} requests, {LOAD_KEYS} keys, {LOAD_IN_FLIGHT} in flight: "
        f"{sum(admitted.values())} admitted, {dict(other) or 'no'} transport errors, "
        f"runtime RSS {before_kb // 1024} -> "
        f"{after_kb // 1024} MB",
        file=sys.stderr,
    )
    # A connection the runtime drops leaves its request unanswered (it may have been
    # counted): allowed, rarely, and never as an extra admission.
    unanswered = collections.Counter(
        key for (_, key), status in zip(calls, statuses, strict=True) if isinstance(status, str)
    )
    assert not {s for s in other if not isinstance(s, str)}, f"other answers: {dict(other)}"
    assert sum(unanswered.values()) <= len(calls) // 100, f"unanswered: {dict(other)}"
    # A fixed window admits its quota again in a new day (UTC): only then may it admit more.
    new_day = time.time() // 86_400 != day_before
    wrong = {
        key: (count, unanswered[key])
        for key, count in admitted.items()
        if not LOAD_LIMIT - unanswered[key] <= count <= LOAD_LIMIT
        and not (new_day and key_algorithm(key) == "fixed_window")
    }
    assert len(admitted) == LOAD_KEYS and not wrong, wrong
    # Bounded: 10,000 requests and 100 keys' objects do not take the runtime past 1.5 GB
    # (it boots at about 0.25 GB; `edge-limiter bench` measures the growth: its memory section).
    assert after_kb < 1_500_000, f"runtime RSS {after_kb} kB"
    # Nor do they take Pyodide's C stack: npm Pyodide 0.28.2 leaks 16 bytes of it per
    # stack-switching call (about 100-200 bytes a request: 1-2 MB here, and a 5 MB stack
    # killed the isolate after 80,000-110,000 requests). The host gives them back (see
    # guardStack in scripts/local_runtime/host.mjs); a loop step of background work still
    # running when the probe comes may hold a few bytes.
    taken = load_gateway.host_state()["stackTaken"]
    assert taken < 16 * 1024, f"{taken} bytes of the C stack still taken after the load"


def test_a_crash_mid_load_loses_no_admission_and_the_restart_admits_no_extra(
    load_gateway: LocalGateway,
) -> None:
    """SIGKILL the runtime while 100 requests are in flight, boot it again on the same
    storage: what was admitted before the kill is still counted, so each key gets at most
    its limit across the crash, and at least its limit minus the requests whose answer the
    crash swallowed (they may have been counted, never more than once)."""
    keys = [f"crash-key-{k}" for k in range(20)]
    limit = 40
    first = [("/crash", key) for _ in range(15) for key in keys]  # 15 per key, all admitted
    assert set(asyncio.run(_drive(load_gateway.url, first, 50))) == {200}
    # An idempotent request completed before the kill.
    pay = {"idempotency-key": '"before-the-crash"', "x-api-key": "payer"}
    paid = httpx.post(f"{load_gateway.url}/crash-pay/1", headers=pay, content=b"{}", timeout=30)
    assert paid.status_code == 200 and "idempotent-replayed" not in paid.headers
    # Enough that the kill lands while they are in flight, even on a fast machine; at most
    # 35 of the limit of 40 per key with the first 15.
    mid = [("/crash", key) for _ in range(20) for key in keys]

    async def crash_mid_load() -> list[int | str]:
        task = asyncio.ensure_future(_drive(load_gateway.url, mid, 100))
        await asyncio.sleep(0.3)  # real time on purpose: a crash while requests are in flight
        load_gateway.kill()
        return await task

    during = asyncio.run(crash_mid_load())
    track(load_gateway.start())
    # Its record survived: the retry is replayed, not forwarded again.
    replay = httpx.post(f"{load_gateway.url}/crash-pay/1", headers=pay, content=b"{}", timeout=30)
    assert replay.status_code == 200 and replay.headers["idempotent-replayed"] == "true"
    admitted_before = dict.fromkeys(keys, 15)
    unanswered: collections.Counter[str] = collections.Counter()
    for (_, key), status in zip(mid, during, strict=True):
        if status == 200:
            admitted_before[key] += 1
        elif status != 429:
            unanswered[key] += 1
    assert unanswered, "the kill came after the load ended; nothing was in flight"
    rest = [("/crash", key) for _ in range(limit) for key in keys]
    after = asyncio.run(_drive(load_gateway.url, rest, 50))
    admitted_after: collections.Counter[str] = collections.Counter()
    dropped = 0
    for (_, key), status in zip(rest, after, strict=True):
        if isinstance(status, str):
            # A connection the runtime drops (rarely, under load, as in the 10,000-request
            # test): that request may have been counted, so it widens the lower bound only.
            unanswered[key] += 1
            dropped += 1
            continue
        assert status in (200, 429), status
        admitted_after[key] += status == 200
    assert dropped <= len(rest) // 100, f"{dropped} of {len(rest)} requests got no answer"
    for key in keys:
        total = admitted_before[key] + admitted_after[key]
        assert total <= limit, (key, admitted_before[key], admitted_after[key])
        assert total >= limit - unanswered[key], (key, total, unanswered[key])
    print(
        f"\ncrash: {len(mid)} requests sent around a SIGKILL: "
        f"{sum(1 for status in during if status == 200)} answered 200 before it, "
        f"{sum(unanswered.values())} got no answer; after the restart each key admitted what "
        "was left of its limit (never more; fewer by at most its unanswered requests)",
        file=sys.stderr,
    )


def test_an_origin_that_answers_garbage_or_cuts_its_body_off(
    load_gateway: LocalGateway, broken_origin: BrokenOrigin
) -> None:
    """Garbage instead of HTTP is a 502; a body cut off mid-way is never cached or kept for
    an idempotent replay (502 ``origin_body_broken``), and a retry of the idempotent request
    is never forwarded again (its status and fields are replayed)."""
    base = load_gateway.url
    garbage = httpx.get(f"{base}/broken/garbage", timeout=30)
    assert garbage.status_code == 502, (garbage.headers, garbage.content[:300])
    assert garbage.json()["code"] == "origin_unreachable"
    cached = httpx.get(f"{base}/broken-cached/cut", timeout=30)
    assert cached.status_code == 502
    assert cached.json()["code"] == "origin_body_broken"
    headers = {"idempotency-key": '"cut-1"', "x-api-key": "payer"}
    paid = httpx.post(f"{base}/broken-pay/cut", headers=headers, content=b"{}", timeout=30)
    assert paid.status_code == 502
    assert paid.json()["code"] == "origin_body_broken"
    retry = httpx.post(f"{base}/broken-pay/cut", headers=headers, content=b"{}", timeout=30)
    # The origin acted: the retry is replayed its status and fields, never forwarded again.
    assert retry.status_code == 200 and retry.headers["idempotent-replayed"] == "true"
    assert "cut off" in retry.headers["idempotent-replayed-body"]
    # Streamed straight through, the body is the runtime's to end: locally workerd ends it
    # early (an empty chunked body, status 200), or the connection breaks. Never padded,
    # never stored: each request goes to the origin again and is cut again.
    reached = broken_origin.paths.count
    before = reached("/broken/cut")
    answered: list[int | str] = []
    for _ in range(2):
        try:
            cut = httpx.get(f"{base}/broken/cut", timeout=30)
        except httpx.HTTPError as exc:
            answered.append(type(exc).__name__)
            continue
        answered.append(cut.status_code)
        assert cut.status_code == 200 and len(cut.content) < 1000, cut.headers
    assert reached("/broken/cut") - before == 2, (answered, broken_origin.paths[-5:])
    # And the gateway is fine afterwards.
    assert httpx.get(f"{base}/load/gcra", headers={"x-api-key": "after-broken"}).status_code == 200
