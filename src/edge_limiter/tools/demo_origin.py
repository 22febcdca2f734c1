"""Demo origins: plain HTTP servers on loopback that echo what reached them.

Used by ``edge-limiter dev`` (to have something to put the gateway in front of) and by the
end-to-end tests (to see exactly what the gateway forwarded). Standard library only.

Every request is answered ``200`` with JSON: the origin's name, the method, path, query,
headers (and each header line as received, repeated ones included) and body size it received (the path exactly as it arrived on the request line),
and ``n``, the number of requests this origin has received so far.
A path ending in ``/status/<code>`` answers with that status instead; one ending in
``/slow/<ms>`` (or an ``X-Demo-Delay: <ms>`` header) answers after ``ms`` milliseconds; each ``h=name:value`` query parameter adds that header
to the response (for cache tests: ``?h=cache-control:max-age%3D1``), ``reason=text``
sets the status line's reason phrase, ``interim=103`` (or ``102``) sends that interim
answer before the final one, ``events=N`` answers N server-sent events and holds the
stream open, ``pad=N`` adds N bytes to the JSON (a ``"pad"``
member), ``drip=MS`` sends the body in four pieces MS milliseconds apart, and
``chunked=1`` sends the answer chunked (no ``Content-Length``). Request
bodies are read whether they come with a length or chunked.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qsl


class _Handler(BaseHTTPRequestHandler):
    server: _OriginServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; without this, Nagle + delayed ACK add ~40 ms.
    disable_nagle_algorithm = True

    def _answer(self) -> None:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            body = self._read_chunked()
        else:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
        # The request target exactly as received: never parsed as a URL, so "//x" stays a path.
        path, _, query = self.path.partition("?")
        status = self.server.fail_status or 200
        number = self.server.record(self.command, path)
        # The last two segments: ".../status/503", ".../slow/2500".
        parts = path.strip("/").split("/")[-2:]
        if len(parts) == 2 and parts[0] == "status" and parts[1].isdigit():
            status = int(parts[1])
        delay = self.headers.get("x-demo-delay", "") or str(self.server.delay_ms or "")
        if len(parts) == 2 and parts[0] == "slow" and parts[1].isdigit():
            delay = parts[1]
        try:
            if delay.isdigit():
                time.sleep(min(int(delay), 60_000) / 1000)
            self._respond(status, number, path, query, body)
        finally:
            self.server.leave()

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailer fields
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def _respond(self, status: int, number: int, path: str, query: str, body: bytes) -> None:
        options = dict(parse_qsl(query))
        answer: dict[str, object] = {
            "n": number,
            "origin": self.server.name,
            "method": self.command,
            "path": path,
            "query": query,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "header_lines": [[k.lower(), v] for k, v in self.headers.items()],
            "body_bytes": len(body),
        }
        pad = options.get("pad", "")
        if pad.isdigit():
            answer["pad"] = "x" * min(int(pad), 64 << 20)
        payload = json.dumps(answer).encode()
        if options.get("events", "").isdigit():
            self._events(int(options["events"]))
            return
        chunked = options.get("chunked") == "1"
        interim = options.get("interim", "")
        if interim in ("102", "103"):
            # An interim answer first (103 Early Hints, 102 Processing), then the final one.
            self.send_response_only(int(interim))
            self.send_header("link", "</style.css>; rel=preload; as=style")
            self.end_headers()
        self.send_response(status, options.get("reason"))
        self.send_header("content-type", "application/json")
        if chunked:
            self.send_header("transfer-encoding", "chunked")
        else:
            self.send_header("content-length", str(len(payload)))
        self.send_header("x-demo-origin", self.server.name)
        for name, value in parse_qsl(query):
            if name == "h" and ":" in value:
                header, _, header_value = value.partition(":")
                self.send_header(header.strip(), header_value.strip())
        self.end_headers()
        if self.command == "HEAD":
            return
        drip = options.get("drip", "")
        if not chunked and drip.isdigit():
            # The body in four pieces, ``drip`` ms apart (a slow but steady answer).
            quarter = -(-len(payload) // 4)
            for start in range(0, len(payload), quarter):
                if start:
                    time.sleep(min(int(drip), 60_000) / 1000)
                self.wfile.write(payload[start : start + quarter])
                self.wfile.flush()
            return
        if not chunked:
            self.wfile.write(payload)
            return
        for start in range(0, len(payload), 16384):
            chunk = payload[start : start + 16384]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")

    def _events(self, count: int) -> None:
        """Server-sent events: ``count`` events at once, then the stream held open (as a
        live one is) for up to 10 s or until the client goes."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "max-age=60")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for number in range(count):
                event = f"data: event {number}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            time.sleep(10)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client went

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _answer

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the gateway logs what matters."""


class _OriginServer(ThreadingHTTPServer):
    daemon_threads = True
    # One thread per connection; a deep listen backlog so bursts of hundreds of new
    # connections never wait for SYN retransmits (the default backlog is 5).
    request_queue_size = 1024

    def __init__(self, name: str, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.name = name
        self.hits: list[tuple[str, str]] = []
        self.fail_status: int | None = None
        self.delay_ms = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def record(self, method: str, path: str) -> int:
        with self._lock:
            self.hits.append((method, path))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return len(self.hits)

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away (a gateway timeout) is no error worth a traceback."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class DemoOrigin:
    """One echo origin on ``127.0.0.1``; a context manager that stops it on exit."""

    def __init__(self, name: str = "demo", port: int = 0) -> None:
        self._server = _OriginServer(name, port)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def hits(self) -> list[tuple[str, str]]:
        """Every (method, path) that reached this origin, in order."""
        with self._server._lock:
            return list(self._server.hits)

    @property
    def fail_status(self) -> int | None:
        """When set, every request is answered with this status (an origin in trouble)."""
        return self._server.fail_status

    @fail_status.setter
    def fail_status(self, status: int | None) -> None:
        self._server.fail_status = status

    @property
    def delay_ms(self) -> int:
        """How long every answer waits (a slow origin)."""
        return self._server.delay_ms

    @delay_ms.setter
    def delay_ms(self, ms: int) -> None:
        self._server.delay_ms = ms

    @property
    def max_in_flight(self) -> int:
        """The most requests this origin has had in progress at once."""
        return self._server.max_in_flight

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> DemoOrigin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
