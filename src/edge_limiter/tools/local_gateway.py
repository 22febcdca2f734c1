"""Runs the built Python Worker on local workerd, for the end-to-end tests and ``edge-limiter dev``.

`LocalGateway` starts `node scripts/local_runtime/launch.mjs SPEC.json` in its own process group,
waits for its `READY <url>` line, and stops it (and workerd with it) on exit::

    with LocalGateway("build/worker", {"EDGE_LIMITER": config}, persist_dir=tmp) as gateway:
        httpx.get(gateway.url + "/...")
        gateway.restart()  # same persist dir and port: state survives

The runtime gets what production gets: the compatibility date and flags, the vars and the
Durable Object and KV bindings of the project's ``wrangler.toml`` (or of the ``deployment``
given, e.g. ``deployment(read_toml(path), "staging")``); ``vars`` are laid over the
deployment's. ``gateway.runtime`` then holds what the Worker saw from inside. The Python is the
one the deployment's date and flags select, unless ``python=`` (or ``$EDGE_LIMITER_PYTHON``)
names the other (:mod:`edge_limiter.tools.toolchain`).

Standard library only; runs under CPython 3.11+.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from edge_limiter.tools import ROOT as REPO
from edge_limiter.tools.project_config import Deployment, deployment, read_toml
from edge_limiter.tools.toolchain import node as project_node
from edge_limiter.tools.toolchain import requested_python, with_python

LAUNCHER = REPO / "scripts" / "local_runtime" / "launch.mjs"
#: Console lines held for the echo when this process's stderr is not being read.
ECHO_BACKLOG = 10_000
DEFAULT_WORKER_DIR = REPO / "build" / "worker"

BrokenMode = Literal["throw", "hang"]


def project_deployment(env: str | None = None) -> Deployment:
    """The settings of the project's own wrangler.toml (``env``: one of its environments)."""
    return deployment(read_toml(REPO / "wrangler.toml"), env)


def _flags_for(date: str, flags: Sequence[str], python: str | None) -> tuple[str, ...]:
    """The deployment's flags, changed to select ``python`` (default: $EDGE_LIMITER_PYTHON)
    when one is asked for."""
    python = python or requested_python()
    return tuple(flags) if python is None else with_python(date, flags, python)


class LocalGatewayError(RuntimeError):
    """The local runtime did not start, or stopped unexpectedly."""


class LocalGateway:
    """The Python Worker on real local workerd (Miniflare), as a context manager.

    Args:
        worker_dir: the built Worker dir (entry.py, edge_limiter/, durable_objects/).
        vars: env vars laid over the deployment's; dicts and lists become JSON bindings.
        deployment: the wrangler settings to run with; default: the top level of the
            project's wrangler.toml.
        persist_dir: where Durable Object (SQLite) and KV state persist; None keeps it in
            memory for the life of one start.
        port: 0 picks a free port on the first start; restart() keeps the port.
        durable_objects: {binding: Python class}; default: the deployment's.
        kv_namespaces: default: the deployment's.
        broken_durable_objects: TEST ONLY, {binding: "throw" | "hang"}.
        broken_kv_namespaces: TEST ONLY, KV bindings whose every call throws.
        replicas: copies of the Worker, each its own isolate sharing the Durable Objects
            and KV; ``replica_urls`` then lists the copies after the first.
        trigger_handlers: serve ``/cdn-cgi/local/scheduled`` (see :meth:`run_scheduled`).
        record_analytics: TEST ONLY, every Analytics Engine data point is also printed to the
            runtime's stderr as ``ANALYTICS {json}`` (locally, the dataset keeps nothing).
        compatibility_date: default: the deployment's.
        python: "3.13" or "3.14": the deployment's flags are changed to select it; default:
            ``$EDGE_LIMITER_PYTHON``, else what the deployment selects.
        extra_spec: further launch.mjs spec fields (see its header), merged last.
        boot_timeout: seconds to wait for READY.
        echo_stderr: copy the Worker's console (the runtime's stdout lines that are not the
            launcher's own, and its stderr) to this process's stderr.
    """

    def __init__(
        self,
        worker_dir: str | os.PathLike[str] = DEFAULT_WORKER_DIR,
        vars: Mapping[str, Any] | None = None,
        *,
        deployment: Deployment | None = None,
        persist_dir: str | os.PathLike[str] | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        durable_objects: Mapping[str, str] | None = None,
        kv_namespaces: Sequence[str] | None = None,
        broken_durable_objects: Mapping[str, BrokenMode] | None = None,
        broken_kv_namespaces: Sequence[str] | None = None,
        replicas: int = 1,
        trigger_handlers: bool = False,
        record_analytics: bool = False,
        compatibility_date: str | None = None,
        python: str | None = None,
        extra_spec: Mapping[str, Any] | None = None,
        boot_timeout: float = 90.0,
        echo_stderr: bool = False,
        node: str | None = None,
    ) -> None:
        dep = deployment if deployment is not None else project_deployment()
        self.deployment = dep
        date = compatibility_date or dep.compatibility_date
        self._spec: dict[str, Any] = {
            "workerDir": str(Path(worker_dir).resolve()),
            "host": host,
            "port": port,
            "compatibilityDate": date,
            "compatibilityFlags": list(_flags_for(date, dep.compatibility_flags, python)),
            "vars": {**dep.vars, **(vars or {})},
            "durableObjects": dict(
                durable_objects if durable_objects is not None else dep.durable_objects
            ),
            "kvNamespaces": list(kv_namespaces if kv_namespaces is not None else dep.kv_namespaces),
            "analyticsEngineDatasets": {
                item["binding"]: {"dataset": item.get("dataset", item["binding"])}
                for item in dep.other_bindings.get("analytics_engine_datasets", [])
            },
            "exitOnStdinEnd": True,
        }
        if persist_dir is not None:
            self._spec["persistDir"] = str(Path(persist_dir).resolve())
        if broken_durable_objects:
            self._spec["brokenDurableObjects"] = dict(broken_durable_objects)
        if broken_kv_namespaces:
            self._spec["brokenKvNamespaces"] = list(broken_kv_namespaces)
        if replicas > 1:
            self._spec["replicas"] = replicas
        if trigger_handlers:
            self._spec["triggerHandlers"] = True
        if record_analytics:
            self._spec["recordAnalytics"] = True
        self._spec.update(extra_spec or {})
        self._boot_timeout = boot_timeout
        self._echo_stderr = echo_stderr
        # Echoed lines go through a bounded queue to a writer thread: if nobody reads this
        # process's stderr, lines are dropped rather than the readers (and then the
        # runtime, writing its console into a full pipe) blocked.
        self._echo: queue.Queue[str] = queue.Queue(maxsize=ECHO_BACKLOG)
        self.echo_dropped = 0
        if echo_stderr:
            threading.Thread(target=self._write_echo, daemon=True).start()
        self._node = node or project_node()
        self._process: subprocess.Popen[str] | None = None
        self._url: str | None = None
        self._ready = threading.Event()
        self._stderr: deque[str] = deque(maxlen=400)
        self._readers: list[threading.Thread] = []
        self._spec_dir: str | None = None
        self.boot_seconds: float | None = None
        self.runtime: dict[str, Any] = {}
        self.replica_urls: list[str] = []
        """The other copies' base URLs (``replicas > 1``)."""
        self.peer_urls: dict[str, str] = {}
        """The benchmarks' JavaScript peers (``extra_spec={"peers": ...}``), by name."""
        self._probe: tuple[str, str] | None = None
        """What the Worker was given, as seen from inside it (launch.mjs's RUNTIME line)."""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        """Starts the runtime and waits until it serves requests; returns self."""
        if self._process is not None:
            raise LocalGatewayError("LocalGateway is already running")
        self._spec_dir = tempfile.mkdtemp(prefix="edge-limiter-runtime-")
        spec_path = Path(self._spec_dir) / "spec.json"
        spec_path.write_text(json.dumps(self._spec), encoding="utf-8")
        self._ready.clear()
        self._url = None
        self.replica_urls = []
        self.peer_urls = {}
        self._stderr.clear()
        started = time.monotonic()
        self._process = subprocess.Popen(
            [self._node, str(LAUNCHER), str(spec_path)],
            cwd=REPO,
            stdin=subprocess.PIPE,  # launch.mjs exits when this closes (we died)
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,  # its own process group: workerd included
        )
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        deadline = started + self._boot_timeout
        while not self._ready.wait(0.05):
            if self._process.poll() is not None:
                code = self._process.returncode
                self._join_readers()
                self._cleanup_after_exit()
                raise self._failure(f"the local runtime exited with code {code} before READY")
            if time.monotonic() > deadline:
                self._kill_group()
                self._join_readers()
                self._cleanup_after_exit()
                raise self._failure(f"the local runtime was not READY in {self._boot_timeout} s")
        self.boot_seconds = time.monotonic() - started
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (launch.mjs disposes workerd), wait; SIGKILL the process group if needed."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill_group()
        self._kill_group()  # anything left in the group (normally nothing)
        self._join_readers()
        self._cleanup_after_exit()

    def kill(self) -> None:
        """A crash: SIGKILL the whole process group at once (workerd gets no chance to tidy
        up); :meth:`start` boots it again on the same persist dir."""
        port = self.port if self.running else self._spec["port"]
        self._kill_group()
        self._join_readers()
        self._cleanup_after_exit()
        self._spec["port"] = port

    def restart(self) -> Self:
        """Stops (if it still runs) and starts again with the same spec, persist dir and
        port: also after the runtime died."""
        port = int(self._url.rsplit(":", 1)[1]) if self._url else self._spec["port"]
        self.stop()
        self._spec["port"] = port
        return self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- state -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, e.g. "http://127.0.0.1:8787" (no trailing slash)."""
        if self._url is None or not self.running:
            raise LocalGatewayError("LocalGateway is not running")
        return self._url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The launcher's pid, which is also its process group id."""
        return self._process.pid if self._process is not None else None

    def durable_object_calls(self, base: str | None = None) -> dict[str, int]:
        """How many times each Durable Object method was called, as counted by the host of
        the isolate behind ``base`` (default: the main one): ``{"RateLimiter.decide": 12}``.

        Durable Objects live in the main isolate, so its count is every isolate's calls.
        """
        calls: dict[str, int] = self.host_state(base)["calls"]
        return calls

    def host_state(self, base: str | None = None) -> dict[str, Any]:
        """What the host of the isolate behind ``base`` reports (its token-protected probe):
        the Worker's bindings and flags, ``calls`` (see :meth:`durable_object_calls`) and
        ``stackTaken``, the bytes of Pyodide's C stack in use since the boot (0 when idle)."""
        import urllib.request  # noqa: PLC0415

        if self._probe is None:
            raise LocalGatewayError("the runtime printed no probe token")
        header, token = self._probe
        request = urllib.request.Request(base or self.url, headers={header: token})
        with urllib.request.urlopen(request, timeout=30) as answer:
            state: dict[str, Any] = json.loads(answer.read())
        return state

    def run_scheduled(self, cron: str = "* * * * *") -> int:
        """Run the Worker's Cron Trigger handler once (needs ``trigger_handlers``); the status."""
        import urllib.parse  # noqa: PLC0415
        import urllib.request  # noqa: PLC0415

        query = urllib.parse.urlencode({"cron": cron})
        url = f"{self.url}/cdn-cgi/local/scheduled?{query}"
        with urllib.request.urlopen(url, timeout=60) as answer:
            answer.read()
            return int(answer.status)

    def saw(self, text: str, timeout: float = 5.0) -> bool:
        """Whether ``text`` appears in the runtime's recent stderr within ``timeout`` s.

        The Worker's console reaches us through a reader thread, a moment after the
        response: this waits for it instead of racing it.
        """
        deadline = time.monotonic() + timeout
        while text not in self.stderr_tail(400):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def stderr_tail(self, lines: int = 60) -> str:
        """The last lines the runtime wrote to stderr (the Worker's console included)."""
        return "\n".join(list(self._stderr)[-lines:])

    # -- internals ---------------------------------------------------------------------------

    def _read_stdout(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            text = line.rstrip("\n")
            if text.startswith("PROBE "):
                _, header, token = text.split(" ", 2)
                self._probe = (header, token.strip())
            elif text.startswith("REPLICA "):
                self.replica_urls.append(text.removeprefix("REPLICA ").strip().rstrip("/"))
            elif text.startswith("PEER "):
                _, name, url = text.split()
                self.peer_urls[name] = url.rstrip("/")
            elif text.startswith("RUNTIME "):
                with contextlib.suppress(ValueError):
                    self.runtime = json.loads(text.removeprefix("RUNTIME "))
            elif not self._ready.is_set() and text.startswith("READY "):
                self._url = text.removeprefix("READY ").strip().rstrip("/")
                self._ready.set()
            else:
                self._stderr.append(f"[stdout] {text}")
                if self._echo_stderr:
                    self._echo_line(text)

    def _read_stderr(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        for line in self._process.stderr:
            text = line.rstrip("\n")
            self._stderr.append(text)
            if self._echo_stderr:
                self._echo_line(text)

    def _echo_line(self, text: str) -> None:
        try:
            self._echo.put_nowait(text)
        except queue.Full:
            self.echo_dropped += 1

    def _write_echo(self) -> None:
        while True:
            text = self._echo.get()
            with contextlib.suppress(OSError, ValueError):
                print(text, file=sys.stderr, flush=True)

    def _failure(self, message: str) -> LocalGatewayError:
        tail = self.stderr_tail()
        return LocalGatewayError(f"{message}\n--- runtime stderr (last lines) ---\n{tail}")

    def _kill_group(self) -> None:
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(5)

    def _join_readers(self) -> None:
        for reader in self._readers:
            reader.join(5)
        self._readers = []

    def _cleanup_after_exit(self) -> None:
        process = self._process
        if process is not None and process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        self._process = None
        if self._spec_dir is not None:
            shutil.rmtree(self._spec_dir, ignore_errors=True)
            self._spec_dir = None

    def __repr__(self) -> str:
        state = self._url if self.running else "stopped"
        return f"LocalGateway({self._spec['workerDir']!r}, {state})"
