"""``edge-limiter check``, ``explain`` and ``simulate``: the gateway config exactly as the
Worker parses it.

    edge-limiter check [FILE] [--wrangler wrangler.toml] [--env NAME] [--json]
    edge-limiter explain METHOD URL [--config FILE] [--header "Name: value"] [--ip ADDR]
                         [--country CC --continent XX --asn N --lat LAT --lon LON]
                         [--token JWT [--jwks FILE]] [--api-key KEY [--api-key-record JSON]]
    edge-limiter simulate METHOD URL [--times N] [--every 1s] [--at ISO-TIME]
                         [--origin-status 503] [--origin-latency 2s] [--body TEXT]
                         [the options of explain]

``check`` prints the effective table of routes (match, key, limits with burst, algorithm,
shadow, failure policy, cache, idempotency, origin pool) and every warning; exits 1 listing
every error with its route and field. ``explain`` prints which route a request would hit,
its canonical path, its key, and the Durable Object it maps to; on a route with identity,
who the request is from (``--token``, ``--api-key``: verified offline, see
:mod:`.offline_identity`), its tier, and the limits that tier has there. ``simulate`` sends it
``--times`` times, ``--every`` apart, through the whole gateway on a simulated clock (no
runtime, origins that answer 200) and prints each answer's status and rate-limit fields.

``scripts/check-config`` is the one command with all three: ``[FILE]``, ``--explain METHOD
URL`` or ``--simulate METHOD URL`` (:func:`main`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from edge_limiter.core.caching.fields import is_token
from edge_limiter.core.config import Config, Route, parse_config
from edge_limiter.core.config.describe import aligned, check_json, check_report
from edge_limiter.core.durations import format_duration, parse_duration
from edge_limiter.core.errors import (
    ConfigError,
    DurationError,
    ExplainError,
)
from edge_limiter.core.explain import (
    explain,
    explained_client,
    header_line,
)
from edge_limiter.core.http.messages import Client
from edge_limiter.core.identity.apikeys import api_key_digest, encode_record
from edge_limiter.testing import DEFAULT_IP, Answer, OriginCall, Reply, Simulator, epoch_ms
from edge_limiter.tools import ROOT
from edge_limiter.tools.offline_identity import (
    RECORD_TTL_S,
    Credentials,
    check_offline,
    credential_fields,
    identifier,
    jwks_reply,
    read_jwks,
    read_record,
    worker_secrets,
)
from edge_limiter.tools.project_config import (
    ProjectConfigError,
    check_project,
    config_file,
    deployment,
    raw_config,
    read_toml,
)


def simulate(
    config: Config,
    method: str,
    url: str,
    *,
    times: int,
    every_ms: int,
    headers: list[tuple[str, str]],
    client: dict[str, Any],
    start: int,
    body: str | None = None,
    origin_status: int = 200,
    origin_latency_ms: int = 0,
    credentials: Credentials | None = None,
) -> list[dict[str, Any]]:
    """``times`` requests ``every_ms`` apart through the whole gateway on a simulated
    clock from ``start`` (in-memory Durable Objects and KV; origins that answer
    ``origin_status`` after ``origin_latency_ms``). ``credentials`` are the offline
    stand-ins of identity: secrets from the environment, ``--jwks``'s key set at its
    ``jwks_url``, ``--api-key-record`` in the tiers' namespace."""
    given = credentials if credentials is not None else Credentials()
    key_set = jwks_reply(config, given)
    key_set_calls = [0]

    def origin(call: OriginCall) -> Reply:
        reply = key_set(call.url)
        if reply is not None:
            key_set_calls[0] += 1
            return reply
        return Reply(origin_status, [("content-type", "application/json")], "{}")

    sim = Simulator(
        config,
        secrets=worker_secrets(config, given.environ),
        start=start,
        origin=origin,
        origin_latency=origin_latency_ms,
    )
    tiers = config.tiers
    if given.record is not None and given.api_key is not None and tiers is not None:
        namespace = sim.kv(tiers.source)
        if namespace is not None:
            digest = api_key_digest(given.api_key)
            asyncio.run(namespace.put(digest, encode_record(given.record), RECORD_TTL_S))
    started = sim.now_ms
    out = []
    for number in range(1, times + 1):
        if number > 1:
            sim.advance(every_ms)
        sent_at = sim.now_ms - started
        fetched_before = key_set_calls[0]
        answer = sim.request(method, url, headers=headers, body=body, **client)
        fields = answer.headers
        out.append(
            {
                "n": number,
                "at_ms": sent_at,
                "status": answer.status,
                "remaining": _number(fields.get("x-ratelimit-remaining")),
                "retry_after": _number(fields.get("retry-after")),
                "ratelimit": fields.get("ratelimit"),
                "policy": fields.get("ratelimit-policy"),
                "reason": _note(answer),
                # A key set fetched is the gateway's own call, not the request forwarded.
                "forwarded": answer.forwarded - (key_set_calls[0] - fetched_before),
                "headers": dict(answer.headers),
            }
        )
    return out


def _number(value: str | None) -> int | str | None:
    """A field's whole number as a number (``--json``), anything else as sent."""
    return int(value) if value is not None and value.isdigit() else value


def _note(answer: Answer) -> str | None:
    """Why the answer is what it is: the gateway's reason, the cache's word, a replay,
    or the code of the gateway's own problem answer."""
    fields = answer.headers
    for name in ("x-edgelimiter-reason", "x-cache"):
        if fields.get(name):
            return fields[name]
    if fields.get("idempotent-replayed") == "true":
        return "replayed"
    if fields.get("content-type", "").startswith("application/problem+json"):
        try:
            code = answer.json().get("code")
        except ValueError:
            code = None
        if code:
            return str(code)
    if answer.status >= 400 and fields.get("x-origin"):
        return f"from {fields['x-origin']}"  # the origin's own answer
    return None


def simulation_table(results: list[dict[str, Any]]) -> str:
    rows = [["#", "at", "status", "remaining", "retry-after", "origin attempts", "note"]]
    for item in results:
        rows.append(
            [
                str(item["n"]),
                format_duration(item["at_ms"]) if item["at_ms"] else "0s",
                str(item["status"]),
                "-" if item["remaining"] is None else str(item["remaining"]),
                "-" if item["retry_after"] is None else str(item["retry_after"]),
                str(item["forwarded"]),
                item["reason"] or "",
            ]
        )
    return aligned(rows)


def _shown(value: object) -> str:
    """An explained value as text: lists joined, a table as name=value, yes/no, none."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "none"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_shown(v)}" for k, v in value.items()) or "none"
    if isinstance(value, list | tuple):
        return ", ".join(_shown(item) for item in value) or "none"
    return str(value)


def _refused(problems: list[str], warnings: list[str], as_json: bool) -> int:
    """Exit 1 with every problem: a list on stderr, or ``--json``'s object on stdout."""
    if as_json:
        shown = {"ok": False, "problems": problems, "warnings": warnings}
        print(json.dumps(shown, indent=2))
        return 1
    print(f"{len(problems)} problem(s):", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    return 1


#: The options that describe the request to explain or simulate.
EXPLAIN_ONLY = (
    "header", "ip", "country", "continent", "asn", "lat", "lon",
    "token", "api_key", "api_key_record", "jwks",
)  # fmt: skip
#: The options of a simulation only.
SIMULATE_ONLY = ("times", "every", "at", "origin_status", "origin_latency", "body")
CHECK = "Check the gateway config exactly as the Worker parses it: its routes, in order."
EXPLAIN = "Which route a request hits, its canonical path, its key and its Durable Object."
SIMULATE = "Send a request through the whole gateway on a simulated clock (no runtime)."


def _config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wrangler", type=Path, default=ROOT / "wrangler.toml")
    parser.add_argument("--env", default=None, help="a wrangler environment")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _request_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--header", action="append", default=[], metavar="'Name: value'")
    parser.add_argument("--ip", default="", help="the client address (CF-Connecting-IP)")
    parser.add_argument("--country", default="")
    parser.add_argument("--continent", default="")
    parser.add_argument("--asn", default="")
    parser.add_argument("--lat", default="", help="the client's latitude (request.cf)")
    parser.add_argument("--lon", default="", help="the client's longitude (request.cf)")
    parser.add_argument(
        "--token",
        default=None,
        metavar="JWT",
        help="a token, sent where the route's [auth] source reads it, verified offline: "
        "inline keys, a secret from the environment variable it names, or --jwks",
    )
    parser.add_argument(
        "--jwks",
        type=Path,
        default=None,
        metavar="FILE",
        help="the key set of the source's jwks_url, saved to a file (curl -o jwks.json URL)",
    )
    parser.add_argument(
        "--api-key", default=None, metavar="KEY", help="an API key, sent where [tiers] reads it"
    )
    parser.add_argument(
        "--api-key-record",
        default=None,
        metavar="JSON",
        help='the key\'s record as KV holds it, e.g. \'{"tier": "pro", "owner": "acme"}\' '
        "(none: the key is unknown)",
    )


def _simulation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--times", type=int, default=None, help="how many requests (1)")
    parser.add_argument(
        "--every",
        default=None,
        help="the pause after each answer before the next request ('100ms', '1s'; default "
        "0: the next goes as the answer comes)",
    )
    parser.add_argument(
        "--at",
        default=None,
        help="when the first is sent, ISO 8601 ('2026-12-01T10:00:00Z') or epoch "
        "milliseconds; default now",
    )
    parser.add_argument("--origin-status", type=int, default=None, help="what origins answer (200)")
    parser.add_argument("--origin-latency", default=None, help="how long they take ('0ms')")
    parser.add_argument("--body", default=None, help="the requests' body (text)")


def _request_parser(command: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"edge-limiter {command}", description=description)
    parser.add_argument("method", metavar="METHOD", help="GET, POST, ...")
    parser.add_argument("url", metavar="URL", help="absolute, or a path on the first route's host")
    parser.add_argument(
        "--config", dest="file", type=Path, help="config file (default: edge-limiter.toml)"
    )
    _config_options(parser)
    _request_options(parser)
    return parser


def check_main(argv: list[str] | None = None) -> int:
    """``edge-limiter check``: the table of routes, or every problem."""
    parser = argparse.ArgumentParser(prog="edge-limiter check", description=CHECK)
    parser.add_argument(
        "file", nargs="?", type=Path, help="config file (default: edge-limiter.toml)"
    )
    _config_options(parser)
    return _run(parser, parser.parse_args(argv), None)


def explain_main(argv: list[str] | None = None) -> int:
    """``edge-limiter explain METHOD URL``."""
    parser = _request_parser("explain", EXPLAIN)
    return _run(parser, parser.parse_args(argv), "explain")


def simulate_main(argv: list[str] | None = None) -> int:
    """``edge-limiter simulate METHOD URL``."""
    parser = _request_parser("simulate", SIMULATE)
    _simulation_options(parser)
    return _run(parser, parser.parse_args(argv), "simulate")


def main(argv: list[str] | None = None) -> int:
    """``scripts/check-config``: check, ``--explain`` or ``--simulate`` in one command."""
    parser = argparse.ArgumentParser(
        prog="scripts/check-config", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "file", nargs="?", type=Path, help="config file (default: edge-limiter.toml)"
    )
    _config_options(parser)
    parser.add_argument("--explain", nargs=2, metavar=("METHOD", "URL"))
    _request_options(parser)
    parser.add_argument(
        "--simulate",
        nargs=2,
        metavar=("METHOD", "URL"),
        help="send the request through the whole gateway on a simulated clock",
    )
    _simulation_options(parser)
    args = parser.parse_args(argv)
    if args.explain and args.simulate:
        parser.error("--explain and --simulate: one at a time")
    if not args.explain and not args.simulate:
        given = [
            f"--{name.replace('_', '-')}"
            for name in EXPLAIN_ONLY
            if getattr(args, name) not in ("", [], False, None)
        ]
        if given:
            parser.error(f"{', '.join(given)}: only with --explain or --simulate METHOD URL")
    if not args.simulate:
        given = [
            f"--{name.replace('_', '-')}"
            for name in SIMULATE_ONLY
            if getattr(args, name) is not None
        ]
        if given:
            parser.error(f"{', '.join(given)}: only with --simulate METHOD URL")
    mode = "simulate" if args.simulate else "explain" if args.explain else None
    if mode is not None:
        args.method, args.url = args.simulate or args.explain
    return _run(parser, args, mode)


def _simulation_settings(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> dict[str, int]:
    """The simulation's options as numbers; argparse's error (exit 2) on a bad one."""
    times = 1 if args.times is None else args.times
    if not 1 <= times <= 100_000:
        parser.error(f"--times must be from 1 to 100000, got {times}")
    durations = {}
    for option in ("every", "origin_latency"):
        text = getattr(args, option)
        try:
            durations[option] = 0 if text in (None, "0") else parse_duration(text)
        except DurationError as exc:
            parser.error(f"--{option.replace('_', '-')}: {exc}")
    origin_status = 200 if args.origin_status is None else args.origin_status
    if not 200 <= origin_status <= 599:
        parser.error(f"--origin-status must be a final status, 200 to 599, got {origin_status}")
    try:
        start = int(time.time() * 1000) if args.at is None else epoch_ms(args.at)
    except ValueError as exc:
        parser.error(f"--at: {exc}")
    return {
        "times": times,
        "every_ms": durations["every"],
        "origin_latency_ms": durations["origin_latency"],
        "origin_status": origin_status,
        "start": start,
    }


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace, mode: str | None) -> int:
    """Check the config, then explain or simulate the request of ``mode`` (None: print the
    check)."""
    settings = _simulation_settings(parser, args) if mode == "simulate" else {}
    # Problems of the wrangler environments not asked for are warnings here (the build,
    # which cannot tell which one wrangler deploys, refuses them all).
    check = check_project(args.wrangler, args.file, deploying=args.env)
    if check.problems:
        return _refused(check.problems, check.warnings, args.json)
    try:
        dep = deployment(read_toml(args.wrangler), args.env)
        path = config_file(args.wrangler, args.file)
        document = read_toml(path) if path is not None else None
        config = parse_config(
            raw_config(dep, document, path.name if path else ""),
            kv_bindings=frozenset(dep.kv_namespaces),
        )
    except (ProjectConfigError, ConfigError) as exc:
        return _refused([str(exc)], check.warnings, args.json)
    if mode is not None:
        return _request(parser, args, config, settings)
    where = path.name if path is not None else "vars.EDGE_LIMITER"
    if args.json:
        print(json.dumps(check_json(config, where, args.env, check.warnings), indent=2))
    else:
        print(check_report(config, where, args.env, check.warnings))
    return 0


def _request(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    config: Config,
    settings: dict[str, int],
) -> int:
    """Explain the request ``args`` describe or, with ``settings``, simulate it."""
    headers = []
    for header in args.header:
        try:
            headers.append(header_line(header))
        except ExplainError:
            parser.error(f"--header {header!r}: expected 'Name: value'")
    given = {
        "ip": args.ip,
        "country": args.country,
        "continent": args.continent,
        "asn": args.asn,
        "latitude": args.lat,
        "longitude": args.lon,
    }
    if settings and not given["ip"]:
        given["ip"] = DEFAULT_IP  # the simulation's client, explained as it is counted
    try:
        client = explained_client(**given)
        credentials = Credentials(
            token=args.token,
            api_key=args.api_key,
            record=read_record(args.api_key_record) if args.api_key_record else None,
            jwks=read_jwks(args.jwks) if args.jwks is not None else None,
        )
        # The route first: where its token and key go, and whether they can be verified.
        route = _route_named(config, explain(config, args.method, args.url, headers, client))
        fields, notes = credential_fields(config, route, credentials, headers)
        headers += fields
        identify = None
        if route is not None and route.identity is not None:
            check_offline(config, route, credentials)
            now = settings["start"] if settings else int(time.time() * 1000)
            identify = identifier(config, credentials, now)
        result = explain(config, args.method, args.url, headers, client, identify=identify)
        if notes:
            result["notes"] = notes
        if settings:
            if not is_token(args.method):
                raise ExplainError(f"{args.method!r} is not an HTTP method name (GET, POST, ...)")
            return _simulated(
                args,
                config,
                settings,
                headers=headers,
                client=client,
                credentials=credentials,
                explained=result,
            )
    except ExplainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name, value in result.items():
            print(f"{name + ':':<18}{_shown(value)}")
    return 0 if "error" not in result else 2


def _simulated(
    args: argparse.Namespace,
    config: Config,
    settings: dict[str, int],
    *,
    headers: list[tuple[str, str]],
    client: Client,
    credentials: Credentials,
    explained: dict[str, Any],
) -> int:
    """Send the request ``settings["times"]`` times through the whole gateway and show
    the answers (and, where its route checks identity, who the caller is)."""
    results = simulate(
        config,
        args.method,
        args.url,
        times=settings["times"],
        every_ms=settings["every_ms"],
        headers=headers,
        client={
            "ip": client.ip,
            "country": client.country,
            "continent": client.continent,
            "asn": client.asn,
            "latitude": client.latitude,
            "longitude": client.longitude,
        },
        start=settings["start"],
        body=args.body,
        origin_status=settings["origin_status"],
        origin_latency_ms=settings["origin_latency_ms"],
        credentials=credentials,
    )
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    if "identity" in explained or "notes" in explained:
        print(_caller_summary(explained))
    print(simulation_table(results))
    return 0


def _route_named(config: Config, explained: dict[str, Any]) -> Route | None:
    """The route an explanation names (None: none)."""
    name = explained.get("route")
    return next((route for route in config.routes if route.name == name), None)


def _caller_summary(result: dict[str, Any]) -> str:
    """Who a simulated request is from, above its table: the identity stage's verdict, the
    tier, the key and the limits that apply."""
    lines = []
    for name in ("identity", "invalid", "tier", "key", "limits", "notes"):
        if name in result:
            lines.append(f"{name + ':':<18}{_shown(result[name])}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
