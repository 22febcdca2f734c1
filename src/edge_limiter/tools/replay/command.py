"""``edge-limiter replay``: past traffic through a proposed config.

    edge-limiter replay LOG... --config proposed.toml [--compare current.toml] [--env NAME]
                        [--json FILE] [--html FILE] [--format SPEC] [--host HOST]
                        [--reorder-window 60s]

Exit status: 0 with a report; 1 when a config has problems (listed as ``edge-limiter
check`` lists them) or a log cannot be read; 2 for a bad option. Never a traceback for
bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from edge_limiter.core.config import Config, parse_config
from edge_limiter.core.config.sources import apply_environment
from edge_limiter.core.durations import parse_duration
from edge_limiter.core.errors import ConfigError, DurationError
from edge_limiter.tools.project_config import ProjectConfigError, read_toml

from .driver import Replay, replay_all
from .formats import NAMES, ROLES, named_format
from .reading import REORDER_WINDOW_MS, LogError, read_logs
from .report import report_json, text_report

ABOUT = "Replay access logs through a proposed config: whom would it have limited?"
EPILOG = (
    "formats (detected from the content, gzip or plain): "
    + ", ".join(NAMES)
    + ". json:SPEC names each field, e.g. json:time=ts,url=request.url,ip=client.ip,"
    "status=status,header.x-api-key=api_key; roles: " + ", ".join(ROLES) + ", header.NAME."
)


def load_config(path: Path, env: str | None) -> Config:
    """The config in ``path`` with ``[env.NAME]`` laid over it, as the Worker parses it;
    raises ConfigError listing every problem."""
    try:
        document = read_toml(path)
    except ProjectConfigError as exc:
        raise ConfigError([str(exc)]) from None
    return parse_config(apply_environment(document, env, path.name, by_var=False))


def _problems(path: Path, problems: list[str]) -> int:
    print(f"{path}: {len(problems)} problem(s):", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edge-limiter replay", description=ABOUT, epilog=EPILOG)
    parser.add_argument("logs", nargs="+", type=Path, metavar="LOG")
    parser.add_argument("--config", type=Path, required=True, help="the proposed config")
    parser.add_argument("--compare", type=Path, help="the current config, replayed beside it")
    parser.add_argument("--env", default=None, help="the configs' [env.NAME] to lay over them")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the report as JSON")
    parser.add_argument("--html", type=Path, metavar="FILE", help="write the report as a page")
    parser.add_argument("--format", default=None, metavar="SPEC", help="the logs' format")
    parser.add_argument(
        "--host", default="", help="the host of lines that do not say (default: the first "
        "route's exact host, else gateway.test)"
    )  # fmt: skip
    parser.add_argument(
        "--reorder-window", default=None, metavar="DURATION",
        help=f"how far out of order a line may be and still replay in its place "
        f"(default {REORDER_WINDOW_MS // 1000}s)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    window = REORDER_WINDOW_MS
    if args.reorder_window is not None:
        try:
            window = parse_duration(args.reorder_window)
        except DurationError as exc:
            parser.error(f"--reorder-window: {exc}")
    configs = []
    for path in filter(None, (args.config, args.compare)):
        try:
            configs.append((path, load_config(path, args.env)))
        except ConfigError as exc:
            return _problems(path, exc.problems)
    if args.html is not None:
        try:
            from .page import _pyplot  # noqa: PLC0415

            _pyplot()
        except RuntimeError as exc:
            print(f"edge-limiter replay: {exc}", file=sys.stderr)
            return 2
    if args.format is not None:
        try:
            named_format(args.format, args.host)
        except ValueError as exc:
            parser.error(str(exc))
    started = time.perf_counter()
    try:
        records, reading = read_logs(
            args.logs, format=args.format, host=args.host, window_ms=window
        )
        runs = [Replay(config, str(path), args.host) for path, config in configs]
        asyncio.run(replay_all(records, runs))
    except LogError as exc:
        print(f"edge-limiter replay: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:  # e.g. a route needing a binding the simulator lacks
        return _problems(args.config, exc.problems)
    report = report_json([run.result for run in runs], reading, time.perf_counter() - started)
    print(text_report(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.html is not None:
        from .page import render_page  # noqa: PLC0415

        args.html.write_text(render_page(report), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
