"""The pure core: algorithms, rates, decisions, headers and config.

Nothing here imports ``js``, ``pyodide`` or ``workers``, reads a clock or sleeps: every
function takes ``now`` as integer milliseconds, so the same code runs on CPython in tests
and on Pyodide inside a Durable Object.
"""

from __future__ import annotations
