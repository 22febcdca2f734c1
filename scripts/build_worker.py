"""Assemble the Worker's modules into build/worker/ (wrangler's [build] command).

wrangler uploads every ``*.py`` under the directory of ``main``. The project keeps the
Worker in ``src/`` and the Durable Object in a top-level ``durable_objects/``, beside
``tests/``; uploading from the project root would ship the tests. So the build copies
exactly the Worker's Python modules into one module root:

    build/worker/entry.py
    build/worker/edge_limiter/...
    build/worker/durable_objects/...

Before that it validates the gateway config (``[vars.EDGE_LIMITER]`` and every
``[env.NAME.vars.EDGE_LIMITER]`` of the wrangler config): an invalid config fails the
build, so ``wrangler deploy`` never ships a gateway that could only answer 503.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "worker"
CONFIG_VAR = "EDGE_LIMITER"

sys.path.insert(0, str(ROOT / "src"))

from edge_limiter.core.config import parse_config  # noqa: E402
from edge_limiter.core.errors import ConfigError  # noqa: E402


def _copy_python(src: Path, dest: Path) -> list[Path]:
    copied = []
    for path in sorted(src.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        target = dest / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        copied.append(target)
    return copied


def build(out: Path = OUT) -> list[Path]:
    """Rebuild ``out`` from scratch and return the modules written."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    modules = _copy_python(ROOT / "src", out)
    modules += _copy_python(ROOT / "durable_objects", out / "durable_objects")
    return modules


def config_problems(wrangler_toml: Path) -> list[str]:
    """Every problem of every gateway config in ``wrangler_toml`` (empty when all are valid)."""
    try:
        data = tomllib.loads(wrangler_toml.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return [f"{wrangler_toml}: {exc}"]
    sections: list[tuple[str, dict[str, Any]]] = [("vars", data.get("vars") or {})]
    for env_name, env in (data.get("env") or {}).items():
        if isinstance(env, dict) and "vars" in env:
            sections.append((f"env.{env_name}.vars", env.get("vars") or {}))
    problems: list[str] = []
    for where, variables in sections:
        if CONFIG_VAR not in variables:
            problems.append(f"[{where}] has no {CONFIG_VAR} table")
            continue
        try:
            parse_config(variables[CONFIG_VAR])
        except ConfigError as exc:
            problems += [f"[{where}.{CONFIG_VAR}] {problem}" for problem in exc.problems]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=OUT, help="module root to write")
    parser.add_argument(
        "--config", type=Path, default=ROOT / "wrangler.toml", help="wrangler config to validate"
    )
    args = parser.parse_args(argv)
    problems = config_problems(args.config)
    if problems:
        print(f"build_worker: invalid edge-limiter config in {args.config}:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    written = build(args.out.resolve())
    print(f"build_worker: config valid; {len(written)} modules -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
