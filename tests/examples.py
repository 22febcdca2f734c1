"""How many examples a property test draws: its own number in the full suite, a fifth of it
(at least 10) in the fast loop (``scripts/test --fast``, pytest's ``--fast``).

    @settings(max_examples=examples(300), deadline=None)

Every property still runs in the fast loop, on fewer cases; the full suite (what CI runs)
draws them all.
"""

from __future__ import annotations

#: Set by tests/conftest.py from pytest's ``--fast``, before any test module is imported.
FAST = False


def examples(n: int) -> int:
    """``n``, or in the fast loop a fifth of it (at least 10)."""
    return max(10, n // 5) if FAST else n
