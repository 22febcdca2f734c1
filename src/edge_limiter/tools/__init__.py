"""The ``edge-limiter`` command and the project's other tools (CPython 3.11+ only).

None of this is the Worker's: the build step (:mod:`edge_limiter.tools.build_worker`) leaves
this package out of the upload. The tools work on a checkout of the project, whose top
directory is :data:`ROOT` (``wrangler.toml``, ``edge-limiter.toml``, ``scripts/`` with the
local runtime's JavaScript, ``node_modules/``).
"""

from __future__ import annotations

from pathlib import Path

#: The project's checkout: src/edge_limiter/tools/ is three levels below it.
ROOT = Path(__file__).resolve().parents[3]
