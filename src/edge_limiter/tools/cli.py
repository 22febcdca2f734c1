"""``edge-limiter``: the project's command (installed into ``.venv`` by ``scripts/bootstrap``).

    edge-limiter check [FILE]             the config as the Worker parses it: routes, in order
    edge-limiter explain METHOD URL       which route, key and Durable Object a request gets
    edge-limiter simulate METHOD URL      requests through the whole gateway, simulated clock
    edge-limiter replay LOG... --config F  past traffic through a proposed config, with a report
    edge-limiter dev                      the gateway on localhost, on local workerd
    edge-limiter bench                    the benchmarks (BENCHMARKS.md)

``edge-limiter COMMAND --help`` says more. Each command is one module's ``main``, imported
only when it runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

#: command -> (module, function, what it does)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "check": (
        "edge_limiter.tools.check_config",
        "check_main",
        "check the config as the Worker parses it: its routes in order, or every problem",
    ),
    "explain": (
        "edge_limiter.tools.check_config",
        "explain_main",
        "which route a request hits, its canonical path, its key and its Durable Object",
    ),
    "simulate": (
        "edge_limiter.tools.check_config",
        "simulate_main",
        "send requests through the whole gateway on a simulated clock (no runtime)",
    ),
    "replay": (
        "edge_limiter.tools.replay.command",
        "main",
        "replay access logs through a proposed config: whom would it have limited",
    ),
    "dev": (
        "edge_limiter.tools.dev",
        "main",
        "the gateway on localhost, on real local workerd, in front of demo origins",
    ),
    "bench": (
        "edge_limiter.tools.bench.run",
        "main",
        "the benchmarks, each figure against a peer measured in the same run",
    ),
}
#: The maintainers' measurements, run as modules (they feed docs and tests, not a config).
MODULES = {
    "edge_limiter.tools.cache_suite": "the HTTP cache test suite against the response cache",
    "edge_limiter.tools.lease_sim": "the token-lease simulation (N isolates, one key)",
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: edge-limiter COMMAND [options]   (edge-limiter COMMAND --help)", ""]
    lines += [f"  {name:<{width}}  {about}" for name, (_, _, about) in COMMANDS.items()]
    lines += ["", "The maintainers' measurements: .venv/bin/python -m MODULE --help"]
    width = max(map(len, MODULES))
    lines += [f"  {module:<{width}}  {about}" for module, about in MODULES.items()]
    return "\n".join(lines)


def command(name: str) -> Callable[[list[str]], int]:
    """The ``main`` of the command ``name`` (KeyError if there is none)."""
    module, function, _ = COMMANDS[name]
    run: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
    return run


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] not in COMMANDS:
        print(f"edge-limiter: no command {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    return command(args[0])(args[1:])


if __name__ == "__main__":
    sys.exit(main())
