"""Demo origins: plain HTTP servers on loopback that echo what reached them.

Used by ``scripts/dev`` (to have something to put the gateway in front of) and by the
end-to-end tests (to see exactly what the gateway forwarded). Standard library only.

Every request is answered ``200`` with JSON: the origin's name, the method, path, query,
headers and body size it received (the path exactly as it arrived on the request line),
and ``n``, the number of requests this origin has received so far.
A path ending in ``/status/<code>`` answers with that status instead; one ending in
``/slow/<ms>`` (or an ``X-Demo-Delay: <ms>`` header) answers after ``ms`` milliseconds; each ``h=name:value`` query parameter adds that header
to the response (for cache tests: ``?h=cache-control:max-age%3D1``).
"""

from __future__ import annotations

import json
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
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        # The request target exactly as received: never parsed as a URL, so "//x" stays a path.
        path, _, query = self.path.partition("?")
        status = 200
        number = self.server.record(self.command, path)
        # The last two segments: ".../status/503", ".../slow/2500".
        parts = path.strip("/").split("/")[-2:]
        if len(parts) == 2 and parts[0] == "status" and parts[1].isdigit():
            status = int(parts[1])
        delay = self.headers.get("x-demo-delay", "")
        if len(parts) == 2 and parts[0] == "slow" and parts[1].isdigit():
            delay = parts[1]
        if delay.isdigit():
            time.sleep(min(int(delay), 60_000) / 1000)
        payload = json.dumps(
            {
                "n": number,
                "origin": self.server.name,
                "method": self.command,
                "path": path,
                "query": query,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body_bytes": len(body),
            }
        ).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.send_header("x-demo-origin", self.server.name)
        for name, value in parse_qsl(query):
            if name == "h" and ":" in value:
                header, _, header_value = value.partition(":")
                self.send_header(header.strip(), header_value.strip())
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

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
        self._lock = threading.Lock()

    def record(self, method: str, path: str) -> int:
        with self._lock:
            self.hits.append((method, path))
            return len(self.hits)


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
