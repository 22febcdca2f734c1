"""Assemble the Worker's modules into build/worker/ (wrangler's [build] command).

    python3 -m edge_limiter.tools.build_worker [OUT] [--config wrangler.toml] [--config-file FILE]

wrangler runs it from ``src/`` (``[build] cwd``) with the system's ``python3``: it needs
the standard library only, no ``.venv``.

wrangler uploads every ``*.py`` under the directory of ``main``. The project keeps the
Worker in ``src/`` and the Durable Objects in a top-level ``durable_objects/``, beside
``tests/``; uploading from the project root would ship the tests. So the build copies
exactly the Worker's Python modules into one module root (never this package, the tools,
nor the users' simulator ``edge_limiter/testing.py``):

    build/worker/entry.py
    build/worker/edge_limiter/...
    build/worker/durable_objects/...
    build/worker/edge_limiter_config.py    (only with a config file)

Before that it validates the gateway config of every deployment: the ``EDGE_LIMITER``
var of ``[vars]`` and of each ``[env.NAME.vars]``, or the config file
(``edge-limiter.toml`` beside wrangler.toml, or ``--config-file``) with each of its
``[env.NAME]`` tables, which it then bundles as a module. An invalid config, a var over
Cloudflare's 5 KB limit, or both a var and a file fail the build, so ``wrangler deploy``
never ships a gateway that could only answer 503. Warnings are printed, not fatal.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from edge_limiter.tools import ROOT
from edge_limiter.tools.project_config import (
    EVERY,
    ProjectConfigError,
    bundled_module,
    check_project,
    config_file,
    read_toml,
)

OUT = ROOT / "build" / "worker"
BUNDLED_MODULE = "edge_limiter_config.py"
#: What of src/ is not the Worker's: the simulator for users' own tests (CPython only; it
#: needs the standard library's sqlite3) and the project's tools, this package.
NOT_SHIPPED = frozenset({Path("edge_limiter") / "testing", Path("edge_limiter") / "tools"})


def shipped(relative: Path) -> bool:
    """Whether the module at ``relative`` (to src/) goes into the Worker."""
    return not NOT_SHIPPED.intersection((relative, *relative.parents))


def _copy_python(src: Path, dest: Path) -> list[Path]:
    copied = []
    for path in sorted(src.rglob("*.py")):
        if "__pycache__" in path.parts or not shipped(path.relative_to(src)):
            continue
        target = dest / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        copied.append(target)
    return copied


def build(out: Path = OUT, file: Path | None = None) -> list[Path]:
    """Rebuild ``out`` from scratch (with ``file`` bundled) and return the modules written."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    modules = _copy_python(ROOT / "src", out)
    modules += _copy_python(ROOT / "durable_objects", out / "durable_objects")
    if file is not None:
        target = out / BUNDLED_MODULE
        target.write_text(bundled_module(read_toml(file), file.name), encoding="utf-8")
        modules.append(target)
    return modules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=OUT, help="module root to write")
    parser.add_argument(
        "--config", type=Path, default=ROOT / "wrangler.toml", help="wrangler config to read"
    )
    parser.add_argument(
        "--config-file",
        type=Path,
        default=None,
        help="edge-limiter config file (default: edge-limiter.toml beside the wrangler config)",
    )
    args = parser.parse_args(argv)
    # Wrangler does not tell a build command which environment it deploys: every one is
    # checked, unless CLOUDFLARE_ENV (wrangler's own way to pick one) names it.
    selected = os.environ.get("CLOUDFLARE_ENV")
    deploying = EVERY if selected is None else (selected or None)
    check = check_project(args.config, args.config_file, deploying=deploying)
    for warning in check.warnings:
        print(f"build_worker: warning: {warning}", file=sys.stderr)
    if check.problems:
        print(f"build_worker: invalid edge-limiter config ({args.config}):", file=sys.stderr)
        for problem in check.problems:
            print(f"  - {problem}", file=sys.stderr)
        if deploying == EVERY:
            print(
                "  (the build checks every wrangler environment, since it cannot tell which "
                "one is deployed; CLOUDFLARE_ENV=<name>, or CLOUDFLARE_ENV= for the top level, "
                "checks only that one)",
                file=sys.stderr,
            )
        return 1
    try:
        file = config_file(args.config, args.config_file)
    except ProjectConfigError as exc:
        print(f"build_worker: {exc}", file=sys.stderr)
        return 1
    written = build(args.out.resolve(), file)
    source = f" (config bundled from {file.name})" if file is not None else ""
    print(f"build_worker: config valid; {len(written)} modules -> {args.out}{source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
