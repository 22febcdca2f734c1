"""Assemble the Worker's modules into build/worker/ (wrangler's [build] command).

wrangler uploads every ``*.py`` under the directory of ``main``. The project keeps the
Worker in ``src/`` and the Durable Object in a top-level ``durable_objects/``, beside
``tests/``; uploading from the project root would ship the tests. So the build copies
exactly the Worker's Python modules into one module root:

    build/worker/entry.py
    build/worker/edge_limiter/...
    build/worker/durable_objects/...
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "worker"


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


if __name__ == "__main__":
    target = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else OUT
    written = build(target)
    print(
        f"build_worker: {len(written)} modules -> {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}"
    )
