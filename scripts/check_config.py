"""``scripts/check-config``: check the gateway config exactly as the Worker parses it.

    scripts/check-config [FILE] [--wrangler wrangler.toml] [--env NAME]
    scripts/check-config --explain METHOD URL [--header "Name: value"] [--ip ADDR]
                         [--country CC --continent XX --asn N --lat LAT --lon LON]
    scripts/check-config --simulate METHOD URL [--times N] [--every 1s] [--at ISO-TIME]
                         [--origin-status 503] [--origin-latency 2s] [--body TEXT]
                         [the same options]

Prints the effective table of routes (match, key, limits with burst, algorithm, shadow,
failure policy, cache, idempotency, origin pool) and every warning; exits 1 listing every
error with its route and field. ``--explain`` prints which route a request would hit, its
canonical path, its key, and the Durable Object it maps to. ``--simulate`` sends it
``--times`` times, ``--every`` apart, through the whole gateway on a simulated clock (no
runtime, origins that answer 200) and prints each answer's status and rate-limit fields.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "src"))

from project_config import (  # noqa: E402
    ProjectConfigError,
    check_project,
    config_file,
    deployment,
    raw_config,
    read_toml,
)

from edge_limiter.core.caching.fields import is_token  # noqa: E402
from edge_limiter.core.config import Config, parse_config  # noqa: E402
from edge_limiter.core.config.describe import aligned, check_json, check_report  # noqa: E402
from edge_limiter.core.durations import format_duration, parse_duration  # noqa: E402
from edge_limiter.core.errors import (  # noqa: E402
    ConfigError,
    DurationError,
    ExplainError,
)
from edge_limiter.core.explain import explain, explained_client, header_line  # noqa: E402
from edge_limiter.testing import DEFAULT_IP, Answer, Reply, Simulator, epoch_ms  # noqa: E402


def _secret_shown(name: str) -> str:
    """The Worker's secrets in a simulation: their names, never their values."""
    return f"<secret {name}>"


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
) -> list[dict[str, Any]]:
    """``times`` requests ``every_ms`` apart through the whole gateway on a simulated
    clock from ``start`` (in-memory Durable Objects and KV; origins that answer
    ``origin_status`` after ``origin_latency_ms``)."""
    sim = Simulator(
        config,
        secrets=_secret_shown,
        start=start,
        origin=lambda call: Reply(origin_status, [("content-type", "application/json")], "{}"),
        origin_latency=origin_latency_ms,
    )
    started = sim.now_ms
    out = []
    for number in range(1, times + 1):
        if number > 1:
            sim.advance(every_ms)
        sent_at = sim.now_ms - started
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
                "reason": _note(answer),
                "forwarded": answer.forwarded,
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
EXPLAIN_ONLY = ("header", "ip", "country", "continent", "asn", "lat", "lon")
#: The options of a simulation only.
SIMULATE_ONLY = ("times", "every", "at", "origin_status", "origin_latency", "body")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/check-config", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "file", nargs="?", type=Path, help="config file (default: edge-limiter.toml)"
    )
    parser.add_argument("--wrangler", type=Path, default=ROOT / "wrangler.toml")
    parser.add_argument("--env", default=None, help="a wrangler environment")
    parser.add_argument("--explain", nargs=2, metavar=("METHOD", "URL"))
    parser.add_argument("--header", action="append", default=[], metavar="'Name: value'")
    parser.add_argument("--ip", default="", help="the client address (CF-Connecting-IP)")
    parser.add_argument("--country", default="")
    parser.add_argument("--continent", default="")
    parser.add_argument("--asn", default="")
    parser.add_argument("--lat", default="", help="the client's latitude (request.cf)")
    parser.add_argument("--lon", default="", help="the client's longitude (request.cf)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--simulate",
        nargs=2,
        metavar=("METHOD", "URL"),
        help="send the request through the whole gateway on a simulated clock",
    )
    parser.add_argument("--times", type=int, default=None, help="--simulate: how many (1)")
    parser.add_argument(
        "--every",
        default=None,
        help="--simulate: the pause after each answer before the next request ('100ms', "
        "'1s'; default 0: the next goes as the answer comes)",
    )
    parser.add_argument(
        "--at",
        default=None,
        help="--simulate: when the first is sent, ISO 8601 ('2026-12-01T10:00:00Z') or "
        "epoch milliseconds; default now",
    )
    parser.add_argument(
        "--origin-status", type=int, default=None, help="--simulate: what origins answer (200)"
    )
    parser.add_argument(
        "--origin-latency", default=None, help="--simulate: how long they take ('0ms')"
    )
    parser.add_argument("--body", default=None, help="--simulate: the requests' body (text)")
    args = parser.parse_args(argv)
    if args.explain and args.simulate:
        parser.error("--explain and --simulate: one at a time")
    if not args.explain and not args.simulate:
        given = [f"--{name}" for name in EXPLAIN_ONLY if getattr(args, name) not in ("", [], False)]
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
    every_ms, latency_ms = durations["every"], durations["origin_latency"]
    origin_status = 200 if args.origin_status is None else args.origin_status
    if not 200 <= origin_status <= 599:
        parser.error(f"--origin-status must be a final status, 200 to 599, got {origin_status}")
    try:
        start = int(time.time() * 1000) if args.at is None else epoch_ms(args.at)
    except ValueError as exc:
        parser.error(f"--at: {exc}")

    # Problems of the wrangler environments not asked for are warnings here (the build,
    # which cannot tell which one wrangler deploys, refuses them all).
    check = check_project(args.wrangler, args.file, deploying=args.env)
    if check.problems:
        return _refused(check.problems, check.warnings, args.json)
    try:
        dep = deployment(read_toml(args.wrangler), args.env)
        path = config_file(args.wrangler, args.file)
        document = read_toml(path) if path is not None else None
        config = parse_config(raw_config(dep, document, path.name if path else ""))
    except (ProjectConfigError, ConfigError) as exc:
        return _refused([str(exc)], check.warnings, args.json)
    if args.explain or args.simulate:
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
        try:
            client = explained_client(**given)
            if args.simulate:
                method, url = args.simulate
                if not is_token(method):
                    raise ExplainError(f"{method!r} is not an HTTP method name (GET, POST, ...)")
                results = simulate(
                    config,
                    method,
                    url,
                    times=times,
                    every_ms=every_ms,
                    headers=headers,
                    client={
                        "ip": client.ip or DEFAULT_IP,
                        "country": client.country,
                        "continent": client.continent,
                        "asn": client.asn,
                        "latitude": client.latitude,
                        "longitude": client.longitude,
                    },
                    start=start,
                    body=args.body,
                    origin_status=origin_status,
                    origin_latency_ms=latency_ms,
                )
                if args.json:
                    print(json.dumps(results, indent=2))
                else:
                    print(simulation_table(results))
                return 0
            result = explain(config, args.explain[0], args.explain[1], headers, client)
        except ExplainError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            for name, value in result.items():
                print(f"{name + ':':<18}{_shown(value)}")
        return 0 if "error" not in result else 2
    where = path.name if path is not None else "vars.EDGE_LIMITER"
    if args.json:
        print(json.dumps(check_json(config, where, args.env, check.warnings), indent=2))
    else:
        print(check_report(config, where, args.env, check.warnings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
