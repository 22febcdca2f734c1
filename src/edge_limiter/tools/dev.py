"""``edge-limiter dev`` (``scripts/dev``): the gateway on localhost, on real local workerd.

By default it runs the project's own config (``edge-limiter.toml``, or the
``EDGE_LIMITER`` var of ``wrangler.toml``) with the compatibility date, flags, vars and
bindings ``wrangler.toml`` gives production, in front of local demo origins (one echo
server per origin URL the config names). Your own config in front of your own backend::

    edge-limiter dev --config my-limits.toml --origin https://api.example.com=http://127.0.0.1:3000
    edge-limiter dev --env staging --origin default=http://localhost:8080

``--origin NAME=URL`` sends the origin NAME (its URL as written in the config, its host,
a pool origin's ``name``, or ``default`` for the top-level ``origin``) to URL; origins not
mapped go to demo origins. ``GET /cdn-cgi/local/scheduled`` runs the Cron Trigger
handler (the health checks), as ``wrangler dev --test-scheduled`` does.
Counters, overrides, cached answers, idempotency records and breakers persist under
``.local/dev/`` (``--fresh`` forgets them all).
"""

from __future__ import annotations

import argparse
import io
import ipaddress
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from edge_limiter.core.config import parse_config
from edge_limiter.core.config.describe import check_table
from edge_limiter.core.http.origin_headers import merged
from edge_limiter.gateway.health import pools_of
from edge_limiter.tools import ROOT
from edge_limiter.tools.build_worker import BUNDLED_MODULE, build
from edge_limiter.tools.demo_origin import DemoOrigin
from edge_limiter.tools.local_gateway import LocalGateway
from edge_limiter.tools.project_config import (
    CONFIG_VAR,
    DEFAULT_FILE,
    Deployment,
    ProjectConfigError,
    bundled_module,
    check_project,
    config_file,
    deployment,
    raw_config,
    read_toml,
)
from edge_limiter.tools.toolchain import PYTHONS

DESCRIPTION = "The gateway on localhost, on real local workerd, in front of demo origins."


def rewrite_origins(document: Any, local: Callable[..., str]) -> Any:
    """``document`` (a config, with any ``env`` tables) with every origin URL replaced.

    ``local(url, is_default, name=None)`` gives the URL to use instead (``name``: a pool
    origin's name).
    """
    if not isinstance(document, dict):
        return document
    out = dict(document)
    if isinstance(out.get("origin"), str):
        out["origin"] = local(out["origin"], True)
    if isinstance(out.get("pools"), dict):
        out["pools"] = {
            pool_name: _local_pool(pool, local) for pool_name, pool in out["pools"].items()
        }
    if isinstance(out.get("routes"), list):
        out["routes"] = [
            {**route, "origin": local(route["origin"], False)}
            if isinstance(route, dict) and isinstance(route.get("origin"), str)
            else route
            for route in out["routes"]
        ]
    if isinstance(out.get("env"), dict):
        out["env"] = {name: rewrite_origins(table, local) for name, table in out["env"].items()}
    return out


def _local_pool(pool: Any, local: Callable[..., str]) -> Any:
    if not isinstance(pool, dict) or not isinstance(pool.get("origins"), list):
        return pool
    origins = [
        {**o, "url": local(o["url"], False, name=o.get("name"))}
        if isinstance(o, dict) and isinstance(o.get("url"), str)
        else o
        for o in pool["origins"]
    ]
    return {**pool, "origins": origins}


def dev_vars(wrangler: Path) -> dict[str, str]:
    """Secrets for local runs from ``.dev.vars`` beside wrangler.toml (as wrangler reads it)."""
    path = wrangler.parent / ".dev.vars"
    if not path.exists():
        return {}
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name and not name.startswith("#"):
            found[name.strip()] = value.strip().strip('"')
    return found


def parse_mappings(values: list[str]) -> dict[str, str]:
    """``NAME=URL`` pairs; raises SystemExit with a clear message on a malformed one."""
    mappings: dict[str, str] = {}
    for value in values:
        name, sep, url = value.partition("=")
        parts = urlsplit(url)
        if not sep or not name or parts.scheme not in ("http", "https") or not parts.netloc:
            raise SystemExit(
                f"--origin {value!r}: expected NAME=URL, e.g. default=http://127.0.0.1:3000"
            )
        mappings[name] = url.rstrip("/")
    return mappings


def port_number(text: str) -> int:
    """``--port``'s value: a TCP port, or 0 for any free one (argparse says what is wrong)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {port}")
    return port


def port_free(port: int) -> bool:
    """Whether a server could listen on ``127.0.0.1:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As servers do: a port a stopped server left in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (``localhost``, ``127.0.0.0/8``, ``[::1]``)."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OriginMap:
    """Decides where each configured origin goes locally: a mapping, the configured URL
    itself when it is already on this machine, or else a demo origin (never the internet)."""

    def __init__(self, mappings: dict[str, str]) -> None:
        self.mappings = mappings
        self.used: set[str] = set()
        self.demos: dict[str, DemoOrigin] = {}
        self.routes: dict[str, str] = {}
        self.local: set[str] = set()

    def __call__(self, url: str, is_default: bool, name: str | None = None) -> str:
        host = urlsplit(url).netloc
        for alias in (url, url.rstrip("/"), host, "default" if is_default else None, name):
            if alias is not None and alias in self.mappings:
                self.used.add(alias)
                self.routes[url] = self.mappings[alias]
                return self.mappings[alias]
        if is_loopback(url):
            # Already on this machine (your own server): used as configured.
            self.routes[url] = url
            self.local.add(url)
            return url
        if url not in self.demos:
            self.demos[url] = DemoOrigin(name=url)
        self.routes[url] = self.demos[url].url
        return self.demos[url].url

    def stop(self) -> None:
        for demo in self.demos.values():
            demo.stop()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edge-limiter dev", description=DESCRIPTION)
    parser.add_argument(
        "--port", type=port_number, default=8787, help="gateway port (default 8787; 0: any free)"
    )
    parser.add_argument(
        "--wrangler", type=Path, default=ROOT / "wrangler.toml", help="wrangler config"
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="gateway config file (default: edge-limiter.toml beside the wrangler config)",
    )
    parser.add_argument("--env", default=None, help="a wrangler environment, as --env for wrangler")
    parser.add_argument(
        "--origin",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="send origin NAME (URL, host or 'default') to URL; repeatable",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="forget everything persisted first (counters, overrides, cache, records, breakers)",
    )
    parser.add_argument(
        "--python",
        choices=PYTHONS,
        default=None,
        help="run this Python rather than the one wrangler.toml selects (as EDGE_LIMITER_PYTHON)",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="do not print the Worker's logs (one JSON line per denial, origin failure, ...)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    # Line by line, also into a file or a pipe: the runtime's own lines go to stderr
    # between ours, and must not land in the middle of one.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    parser = _parser()
    args = parser.parse_args(argv)
    mappings = parse_mappings(args.origin)
    if args.port and not port_free(args.port):
        print(
            f"port {args.port} on 127.0.0.1 is in use (another edge-limiter dev?): stop it, "
            f"or pick another with --port",
            file=sys.stderr,
        )
        return 2

    check = check_project(args.wrangler, args.config, deploying=args.env)
    for warning in check.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if check.problems:
        print("the config is invalid:", file=sys.stderr)
        for problem in check.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 2
    try:
        dep = deployment(read_toml(args.wrangler), args.env)
        file = config_file(args.wrangler, args.config)
    except ProjectConfigError as exc:
        print(exc, file=sys.stderr)
        return 2

    # EDGE_LIMITER_DEV_STATE lets tests keep their state out of the project's .local/.
    persist = Path(os.environ.get("EDGE_LIMITER_DEV_STATE") or ROOT / ".local" / "dev")
    if args.fresh:
        shutil.rmtree(persist, ignore_errors=True)
    overrides: dict[str, Any] = dict(dev_vars(args.wrangler))
    missing = missing_secrets(dep, file, {**dep.vars, **overrides})
    if missing:
        names = ", ".join(missing)
        print(
            f"origin_headers needs the secret{'s' if len(missing) > 1 else ''} {names}: add "
            + ", ".join(f"{name}=..." for name in missing)
            + f" to {args.wrangler.parent / '.dev.vars'} (in production: npx wrangler secret "
            f"put {missing[0]})",
            file=sys.stderr,
        )
        return 2
    return _build_and_serve(
        args, dep, file=file, mappings=mappings, overrides=overrides, persist=persist
    )


def _build_and_serve(
    args: argparse.Namespace,
    dep: Deployment,
    *,
    file: Path | None,
    mappings: dict[str, str],
    overrides: dict[str, Any],
    persist: Path,
) -> int:
    """Build the Worker with the config's origins sent where ``mappings`` say (or to demo
    origins), then serve it until interrupted."""
    worker_dir = ROOT / "build" / "dev-worker"
    origins = OriginMap(mappings)
    try:
        build(worker_dir)
        if file is not None:
            # The same path as production: the config file bundled as a module.
            document = rewrite_origins(read_toml(file), origins)
            (worker_dir / BUNDLED_MODULE).write_text(bundled_module(document, file.name))
        else:
            overrides[CONFIG_VAR] = rewrite_origins(dep.vars[CONFIG_VAR], origins)
        unused = sorted(set(mappings) - origins.used)
        if unused:
            print(f"--origin: the config names no origin {', '.join(unused)}", file=sys.stderr)
            return 2
        gateway = LocalGateway(
            worker_dir,
            overrides,
            deployment=dep,
            persist_dir=persist,
            port=args.port,
            trigger_handlers=True,
            echo_stderr=not args.quiet,
            python=args.python,
        )
        example = file is not None and file.resolve() == (ROOT / DEFAULT_FILE).resolve()
        routes = None
        if not example or args.env:
            raw = read_toml(file) if file is not None else None
            source = file.name if file is not None else ""
            routes = check_table(parse_config(raw_config(dep, raw, source)))
        return serve(gateway, origins, persist, file, routes)
    finally:
        origins.stop()


def missing_secrets(dep: Any, file: Path | None, available: dict[str, Any]) -> list[str]:
    """The secrets ``origin_headers`` names that this local run does not have."""
    raw = read_toml(file) if file is not None else None
    config = parse_config(raw_config(dep, raw, file.name if file is not None else ""))
    # The fields each pool's origins get, as the gateway resolves them.
    headers = [h for pool in pools_of(config) for h in merged(config.origin_headers, pool.headers)]
    wanted = dict.fromkeys(h.secret for h in headers if h.secret is not None)
    return [name for name in wanted if not isinstance(available.get(name), str)]


def serve(
    gateway: LocalGateway,
    origins: OriginMap,
    persist: Path,
    file: Path | None,
    routes: str | None = None,
) -> int:
    """Run until interrupted. ``routes``: the config's route table, printed instead of the
    example's curl commands when the config is not the example."""
    try:
        gateway.start()
        url = gateway.url
        where = file.name if file is not None else f"vars.{CONFIG_VAR}"
        python = (
            f"Python {gateway.runtime.get('python')} on Pyodide {gateway.runtime.get('pyodide')}"
        )
        print(f"\nedge-limiter is running on {url} (local workerd, {python}, config: {where})")
        env = gateway.deployment.env
        print(
            f"  compatibility date {gateway.runtime.get('compatibilityDate')}"
            + (f", env {env}" if env else "")
        )
        for original, local in origins.routes.items():
            if original in origins.local:
                print(f"  origin {original}: your origin on this machine, as configured")
                continue
            kind = "demo origin" if original in origins.demos else "your origin"
            print(f"  origin {original} -> {kind} {local}")
        print(f"  state persists in {persist}/ (--fresh forgets it)")
        if str(gateway.runtime.get("bindings", {}).get("EDGE_LIMITER_ADMIN_TOKEN") or "").strip():
            print(f"  admin API and status page: {url}/_edge-limiter/ (token from .dev.vars)")
        else:
            print("  admin API: off (put EDGE_LIMITER_ADMIN_TOKEN=... in .dev.vars to enable it)")
        print()
        if routes is not None:
            print("Routes, tried in order (edge-limiter explain METHOD URL shows one request):")
            print(routes)
        else:
            _print_example_requests(url)
        print("\nCtrl-C stops the gateway and the demo origins.", flush=True)
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)
        watch(gateway)
    except KeyboardInterrupt:
        print("\nstopping", file=sys.stderr)
    finally:
        gateway.stop()
    return 0


def _print_example_requests(url: str) -> None:
    """What to try against the example config."""
    print("Try (with the example config):")
    print(
        f"  curl -i -X POST {url}/v1/login            # 5/minute per IP (sliding_log); 6th is 429"
    )
    print(f"  curl -i -X POST {url}//v1/%6cogin         # the same route: paths are canonical")
    print(f"  curl -i -H 'x-api-key: k1' {url}/v1/search   # token bucket: 20 at once, 10/s")
    print(f"  curl -i {url}/v1/tenants/acme/items         # gcra keyed on tenant + IP")
    print(f"  curl -i -X POST {url}/v1/reports          # cost 10 of 60/minute")
    print(f"  curl -i {url}/v1/catalog/shoes             # cached in KV: the 2nd is X-Cache: HIT")
    print(
        f"  curl -i -X POST -H 'x-api-key: k1' -H 'Idempotency-Key: order-1' -d '{{}}' "
        f"{url}/v1/payments   # again: replayed"
    )
    print(f"  curl -i {url}/health                       # no route: forwarded untouched")
    print(f"  curl -i {url}/cdn-cgi/local/scheduled    # run the health checks (cron)")
    print(
        f'  curl -i -H \'MF-CF-Blob: {{"country":"DE","continent":"EU"}}\' '
        f"{url}/v1/tenants/acme/items   # from Germany: X-Origin: eu (else us)"
    )


def refuses(port: int) -> bool:
    """Whether nothing listens on ``127.0.0.1:port`` any more (a busy server still counts
    as listening: only a refused connection says it is gone)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def watch(gateway: LocalGateway, every_s: float = 1.0, refused_after: int = 3) -> None:
    """Until interrupted: if the runtime dies, say why and start it again on the same port
    (the counters persist on disk, so nothing admitted is forgotten). The runtime is dead
    when its launcher exited, or when workerd alone died and its port refuses connections
    ``refused_after`` checks in a row."""
    refused = 0
    while True:
        time.sleep(every_s)
        if gateway.running:
            refused = refused + 1 if refuses(gateway.port) else 0
            if refused < refused_after:
                continue
        refused = 0
        print(
            "\nthe local runtime stopped unexpectedly; starting it again (counters persist). "
            f"Its last output:\n{gateway.stderr_tail(20)}",
            file=sys.stderr,
            flush=True,
        )
        gateway.restart()
        print(f"edge-limiter is running again on {gateway.url}", flush=True)


def _interrupt(*_args: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
