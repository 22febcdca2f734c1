"""The rate-limiting algorithms, one module each, and a registry by name.

=================  ===========================================================
``token_bucket``   burst up to ``burst``, refilled at ``quota`` per window
``gcra``           the same admission as the token bucket, stored as one time
``sliding_log``    exact rolling window, one log entry per admitted millisecond
``sliding_window`` rolling window estimated from two aligned counters
``fixed_window``   one counter per aligned window
=================  ===========================================================
"""

from __future__ import annotations

from typing import Any

from ..rates import Limit
from .base import Algorithm
from .fixed_window import FixedWindow, FixedWindowState
from .gcra import GCRA, GCRAState
from .leasable import Leasable
from .sliding_log import SlidingLog, SlidingLogState
from .sliding_window import SlidingWindowCounter, SlidingWindowState
from .token_bucket import TokenBucket, TokenBucketState

__all__ = [
    "ALGORITHMS",
    "GCRA",
    "Algorithm",
    "FixedWindow",
    "FixedWindowState",
    "GCRAState",
    "Leasable",
    "SlidingLog",
    "SlidingLogState",
    "SlidingWindowCounter",
    "SlidingWindowState",
    "TokenBucket",
    "TokenBucketState",
    "make_algorithm",
]

ALGORITHMS: dict[str, type[Algorithm[Any]]] = {
    cls.name: cls for cls in (TokenBucket, GCRA, SlidingLog, SlidingWindowCounter, FixedWindow)
}
"""Every algorithm class, keyed by its ``name``."""


def make_algorithm(name: str, limit: Limit) -> Algorithm[Any]:
    """Build the algorithm called ``name`` for ``limit``.

    Raises :class:`ValueError` for an unknown name, a burst given to an algorithm that
    takes none, or a capacity above what the algorithm supports.
    """
    cls = ALGORITHMS.get(name)
    if cls is None:
        known = ", ".join(sorted(ALGORITHMS))
        raise ValueError(f"unknown algorithm {name!r}: expected one of {known}")
    return cls(limit)
