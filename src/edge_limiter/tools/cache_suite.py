"""Runs the HTTP cache test suite (npm http-cache-tests) against the gateway's response cache.

    .venv/bin/python -m edge_limiter.tools.cache_suite [--write-doc] [--results FILE] [--json FILE]
                                                       [--echo]
    ... --from-results FILE [--write-doc]   (classify an earlier run)
    ... --id TEST                           (one test, every request shown)

The suite is the public one behind cache-tests.fyi; the gateway runs on local workerd, and
its results are shown beside the suite's published ones.

It starts the suite's own origin (``server/server.mjs``, on a free port), builds the Worker
and runs it on local workerd with one catch-all cached route in front of that origin
(:func:`gateway_config`), runs the suite's client (``cli.mjs``) against the gateway, and
classifies every test with the suite's own code (``scripts/cache_suite_summary.mjs`` runs
``determineTestResult`` of the suite's ``lib/display.mjs``), together with the published
results of the shared caches the package ships. It prints the table and how the run stands
against ``scripts/cache_suite_exceptions.toml`` (the documented reasons for the tests the
gateway does not pass), and exits 1 when a required test fails with no reason there, or a
reason is listed for a test that passes. ``--write-doc`` writes ``docs/cache-tests.md``.

The end-to-end test ``tests/e2e/test_cache_suite_e2e.py`` runs the same steps. Node runs the
suite's server, client and summary (with ``scripts/cache_suite_transport.mjs`` loaded first:
no connection reuse, see there). Standard library only; CPython 3.11+.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from edge_limiter.core.config.parse import parse_config
from edge_limiter.tools import ROOT as REPO
from edge_limiter.tools import toolchain
from edge_limiter.tools.build_worker import build
from edge_limiter.tools.cache_suite_results import (
    DOC,
    EXCEPTIONS_FILE,
    NAME,
    PACKAGE,
    Documented,
    Outcome,
    Peer,
    Run,
    SuiteTest,
    Summary,
    blocking,
    gateway_config,
    judge,
    load_exceptions,
    measured_lines,
    render_doc,
    report,
    table,
    transport_errors,
)
from edge_limiter.tools.local_gateway import LocalGateway

#: What the tests and the suite's callers use from here (the results are
#: :mod:`edge_limiter.tools.cache_suite_results`'s).
__all__ = [
    "DOC",
    "EXCEPTIONS_FILE",
    "NAME",
    "CacheSuiteError",
    "Documented",
    "Outcome",
    "Run",
    "SuiteOrigin",
    "SuiteTest",
    "Summary",
    "blocking",
    "classify",
    "gateway_config",
    "judge",
    "load_exceptions",
    "measure",
    "measured_lines",
    "render_doc",
    "report",
    "run",
    "running_gateway",
    "summarize",
    "table",
    "transport_errors",
]

SUITE_DIR = REPO / "node_modules" / PACKAGE
SUMMARY_SCRIPT = REPO / "scripts" / "cache_suite_summary.mjs"
TRANSPORT_SCRIPT = REPO / "scripts" / "cache_suite_transport.mjs"
#: How long the suite's client may take (about 20 s here: see the doc).
CLIENT_TIMEOUT_S = 600.0


class CacheSuiteError(RuntimeError):
    """The suite could not be run (its origin, the gateway or its client failed)."""


# -- the gateway's config, checked ------------------------------------------------------------------


def check_config(config: Mapping[str, Any]) -> None:
    """Parses ``config`` as the Worker will (raises the parser's ConfigError on a problem)."""
    parse_config(config)


# -- the suite's origin and client -----------------------------------------------------------------


def _node() -> str:
    return toolchain.node()


def suite_version(suite_dir: Path = SUITE_DIR) -> str:
    """The installed suite's version (its package.json), e.g. ``0.4.5``."""
    try:
        meta = json.loads((suite_dir / "package.json").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CacheSuiteError(f"{suite_dir} is missing: run scripts/bootstrap") from exc
    return str(meta["version"])


class SuiteOrigin:
    """The suite's own origin server (``server/server.mjs``) on a free port, as a context manager.

    The server reads its settings from npm's config variables (``npm run server --port=N``
    sets ``npm_config_port``); port 0 lets the system pick a free one, which the server
    prints (``Listening on http://[::]:PORT/``). It listens on every address (the suite has no
    setting for that); only loopback is ever sent to.
    """

    def __init__(self, suite_dir: Path = SUITE_DIR, boot_timeout: float = 30.0) -> None:
        self._suite_dir = suite_dir
        self._boot_timeout = boot_timeout
        self._process: subprocess.Popen[str] | None = None
        self._tmp: str | None = None
        self._port: int | None = None
        self._listening = threading.Event()
        self.output: list[str] = []
        """What the server printed besides its port (it logs harness errors only)."""

    @property
    def url(self) -> str:
        if self._port is None:
            raise CacheSuiteError("the suite's origin is not running")
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> SuiteOrigin:
        self._tmp = tempfile.mkdtemp(prefix="cache-suite-origin-")
        env = {
            **os.environ,
            "npm_config_port": "0",
            "npm_config_protocol": "http",
            "npm_config_pidfile": str(Path(self._tmp) / "server.pid"),
            "CACHE_SUITE_EXIT_WITH_STDIN": "1",  # scripts/cache_suite_transport.mjs
        }
        self._process = subprocess.Popen(
            [_node(), "--import", TRANSPORT_SCRIPT.as_uri(), "server/server.mjs"],
            cwd=self._suite_dir,
            env=env,
            stdin=subprocess.PIPE,  # it exits when this closes (we died)
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        threading.Thread(target=self._read, daemon=True).start()
        if not self._listening.wait(self._boot_timeout) or self._port is None:
            self.stop()
            tail = "\n".join(self.output[-20:])
            raise CacheSuiteError(f"the suite's origin did not start:\n{tail}")
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            text = line.rstrip("\n")
            found = re.match(r"Listening on https?://.*:(\d+)/$", text)
            if found and self._port is None:
                self._port = int(found.group(1))
                self._listening.set()
            else:
                self.output.append(text)
        self._listening.set()  # it exited: start() stops waiting

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> SuiteOrigin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _client(
    base: str, test_id: str, suite_dir: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "npm_config_base": base.rstrip("/"),
        # What `npm run cli` sets from the suite's package.json ("config"): an empty id runs
        # every test (cli.mjs takes `undefined` for a test's id).
        "npm_config_id": test_id,
        "npm_package_config_id": test_id,
    }
    try:
        return subprocess.run(
            [_node(), "--no-warnings", "--import", TRANSPORT_SCRIPT.as_uri(), "cli.mjs"],
            cwd=suite_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CacheSuiteError(f"the suite's client took over {timeout:.0f} s") from exc


def run_one(base: str, test_id: str, suite_dir: Path = SUITE_DIR) -> str:
    """Runs one test against ``base``: the client's account of every request and response
    (headers included, colours removed) and the result."""
    done = _client(base, test_id, suite_dir, 120.0)
    return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)


def run_client(
    base: str, suite_dir: Path = SUITE_DIR, timeout: float = CLIENT_TIMEOUT_S
) -> dict[str, Any]:
    """Runs the suite's client (``cli.mjs``) against ``base``; its raw results by test id.

    The client reads npm's config variables too (``npm run cli --base=URL``). It runs every
    test, a hundred at a time (its runner's fixed chunk), each test's requests in order with
    the 3 s pauses the test asks for, and prints ``{test id: true | [kind, message]}``.
    """
    done = _client(base, "", suite_dir, timeout)
    try:
        results = json.loads(done.stdout)
    except json.JSONDecodeError:
        results = None
    if not isinstance(results, dict) or not results:
        raise CacheSuiteError(
            f"the suite's client printed no results (exit {done.returncode}):\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return results


# -- classifying ------------------------------------------------------------------------------------


def summarize(
    named: Mapping[str, Path], suite_dir: Path = SUITE_DIR, with_peers: bool = True
) -> Summary:
    """Classifies each named raw results file with the suite's own code (and, ``with_peers``,
    the published results of every shared cache the package ships)."""
    command = [_node(), str(SUMMARY_SCRIPT), str(suite_dir)]
    if with_peers:
        command.append("--peers")
    command += [f"{name}={path}" for name, path in named.items()]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CacheSuiteError(f"classifying the results failed:\n{done.stderr[-3000:]}")
    raw = json.loads(done.stdout)
    tests = {
        item["id"]: SuiteTest(
            item["id"], item["name"], item["suite"], item["kind"], tuple(item["depends_on"])
        )
        for item in raw["tests"]
    }
    results = {
        name: {
            test_id: Outcome(o["result"], o["own"], o["detail"]) for test_id, o in outcomes.items()
        }
        for name, outcomes in raw["results"].items()
    }
    peers = [Peer(p["key"], p["name"], str(p["version"]), p["type"]) for p in raw["peers"]]
    return Summary(tests, results, peers)


# -- a run ------------------------------------------------------------------------------------------


def git_commit() -> str:
    """The checkout's commit, with ``+changes`` when tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+changes" if changed else head


@contextlib.contextmanager
def running_gateway(
    worker_dir: Path | None = None, echo: bool = False
) -> Iterator[tuple[LocalGateway, SuiteOrigin]]:
    """The suite's origin and the gateway in front of it (built into a temporary directory
    unless ``worker_dir`` holds a build), both stopped on exit. ``echo``: copy the
    gateway's console to stderr."""
    with contextlib.ExitStack() as stack:
        if worker_dir is None:
            worker_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="worker-")))
            build(worker_dir)
        origin = stack.enter_context(SuiteOrigin())
        config = gateway_config(origin.url)
        check_config(config)
        gateway = stack.enter_context(
            LocalGateway(worker_dir, {"EDGE_LIMITER": config}, echo_stderr=echo)
        )
        yield gateway, origin


def measure(gateway: LocalGateway) -> tuple[dict[str, Any], float]:
    """Runs the suite's client against a running gateway: its raw results and seconds taken."""
    started = time.monotonic()
    raw = run_client(gateway.url)
    return raw, time.monotonic() - started


def classify(raw: dict[str, Any], seconds: float) -> Run:
    """The client's raw results ``raw``, classified beside the published peers."""
    with tempfile.TemporaryDirectory(prefix="cache-suite-") as tmp:
        path = Path(tmp) / "results.json"
        path.write_text(json.dumps(raw), encoding="utf-8")
        summary = summarize({NAME: path})
    return Run(
        summary=summary,
        raw=raw,
        seconds=seconds,
        version=suite_version(),
        commit=git_commit(),
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
    )


def run(worker_dir: Path | None = None, echo: bool = False) -> Run:
    """Runs the whole suite against a fresh gateway and classifies it beside the peers."""
    with running_gateway(worker_dir, echo) as (gateway, _origin):
        raw, seconds = measure(gateway)
    return classify(raw, seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m edge_limiter.tools.cache_suite", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--write-doc", action="store_true", help=f"write {DOC.relative_to(REPO)}")
    parser.add_argument("--results", type=Path, help="write the client's raw results here")
    parser.add_argument("--json", type=Path, help="write the classified results here")
    parser.add_argument(
        "--from-results", type=Path, help="classify an earlier --results file instead of running"
    )
    parser.add_argument("--worker-dir", type=Path, help="a built Worker to run (default: build)")
    parser.add_argument("--echo", action="store_true", help="copy the gateway's logs to stderr")
    parser.add_argument("--id", help="run this one test and show its requests and responses")
    args = parser.parse_args(argv)
    exceptions = load_exceptions()
    if args.id is not None:
        with running_gateway(args.worker_dir, args.echo) as (gateway, _origin):
            print(run_one(gateway.url, args.id))
        return 0
    try:
        if args.from_results is not None:
            result = classify(json.loads(args.from_results.read_text(encoding="utf-8")), 0.0)
        else:
            result = run(args.worker_dir, args.echo)
    except CacheSuiteError as exc:
        print(f"cache_suite: {exc}", file=sys.stderr)
        return 2
    if args.results is not None:
        args.results.write_text(json.dumps(result.raw, indent=2) + "\n", encoding="utf-8")
    if args.json is not None:
        classified = {
            test_id: {"result": o.result, "own": o.own, "detail": o.detail}
            for test_id, o in sorted(result.summary.results[NAME].items())
        }
        args.json.write_text(json.dumps(classified, indent=2) + "\n", encoding="utf-8")
    print(report(result, exceptions))
    if args.write_doc:
        DOC.parent.mkdir(exist_ok=True)
        DOC.write_text(render_doc(result, exceptions), encoding="utf-8")
        print(f"wrote {DOC.relative_to(REPO)}")
    return 0 if judge(result.summary, NAME, exceptions).ok else 1


if __name__ == "__main__":
    sys.exit(main())
