"""Leases as a route sees them: which algorithms may lease, the default ttl, the reserve
a ttl keeps, and a leased route's decisions as its requests get them."""

from __future__ import annotations

from collections.abc import Sequence

from ..algorithms import ALGORITHMS, Leasable
from ..decision import Decision
from ..rates import Limit

LEASABLE = frozenset(name for name, cls in ALGORITHMS.items() if issubclass(cls, Leasable))
"""The algorithms a route may lease."""

#: A route's lease ttl when it sets none, by algorithm family (see :func:`default_ttl`).
DEFAULT_TTL_MS = {"window": 1_000, "bucket": 500}


def default_ttl(algorithm: str) -> int:
    """The default lease ttl (ms) for ``algorithm``.

    Every holder asks at least once per ttl, so with ``n`` isolates a key costs at least
    ``n * 1000 / ttl`` calls a second. The window algorithms end a lease with its window
    anyway, so a long ttl costs nothing there: 1 s. The bucket algorithms keep ``ttl`` of
    refill out of every grant (:func:`lease_reserve_ok`), so a longer ttl costs burst and,
    once the limit binds, admits as much as it did but never lends out that reserve: 500 ms
    keeps half a second of refill back, which :func:`lease_reserve_ok` requires the burst
    to exceed.
    """
    cls = ALGORITHMS.get(algorithm)
    if cls is None:
        raise ValueError(f"unknown algorithm {algorithm!r}")
    return DEFAULT_TTL_MS["window" if algorithm.endswith("window") else "bucket"]


def lease_reserve_ok(limit: Limit, algorithm: str, ttl_ms: int) -> str | None:
    """Why a lease of ``ttl_ms`` cannot be used on ``limit`` (None: it can), for the config.

    The bucket algorithms keep ``ttl_ms`` of refill out of every grant; a ttl whose reserve
    leaves less than one unit of the burst could never grant anything.
    """
    cls = ALGORITHMS.get(algorithm)
    if cls is None:
        return f"unknown algorithm {algorithm!r}"
    if not issubclass(cls, Leasable):
        leasable = ", ".join(sorted(LEASABLE))
        return f"algorithm {algorithm!r} cannot lease (leasable: {leasable})"
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 1:
        return f"a lease ttl must be at least 1 ms, got {ttl_ms!r}"
    try:
        limiter = cls(limit)
    except ValueError:
        # The limit itself is refused where it is written (a burst the algorithm does not
        # take, say): nothing to say about leasing it.
        return None
    reserve = limiter.lease_reserve(ttl_ms)
    if limit.capacity - reserve < 1:
        # Any ttl keeps at least one unit back, and a ttl of at most this keeps one.
        longest = (limit.capacity - 1) * limit.rate.window_ms // limit.rate.quota
        if longest < 1:
            return (
                f"every lease keeps at least 1 unit of {limit} in reserve whatever the "
                f"ttl, and it holds {limit.capacity}: leases need a burst of at least 2 "
                "(or leave them off)"
            )
        return (
            f"a lease ttl of {ttl_ms} ms would keep {reserve} of the {limit.capacity} "
            f"units of {limit} in reserve, leaving none to lease; use a ttl of at most "
            f"{longest} ms or a larger burst"
        )
    return None


def lease_reserves(limits: Sequence[Limit], algorithm: str, ttl_ms: int) -> list[int]:
    """Each limit's reserve on a leased route (units no lease takes: see
    :meth:`~edge_limiter.core.ratelimit.algorithms.base.Algorithm.lease_reserve`), 0 for the windows."""
    cls = ALGORITHMS.get(algorithm)
    if cls is None or not issubclass(cls, Leasable):
        return [0] * len(limits)
    return [cls(limit).lease_reserve(ttl_ms) for limit in limits]


def without_reserve(
    decisions: tuple[Decision, ...], reserves: Sequence[int], asked: int = 0
) -> tuple[Decision, ...]:
    """The object's decisions on a peek as a leased route's requests get them: a peek for
    the request's cost and ``asked`` units more (the largest of the ``reserves``) admits
    exactly when a lease would be granted, and says when (a lease leaves a bucket's
    reserve untouched); the reserve, lent to no one, is not ``remaining``."""
    out = []
    for decision, reserve in zip(decisions, reserves, strict=True):
        if decision.allowed:
            remaining = decision.remaining + asked - reserve
        else:  # nothing taken: what the limit holds, less its reserve
            remaining = decision.remaining - reserve
        out.append(decision._replace(remaining=max(0, remaining)))
    return tuple(out)
