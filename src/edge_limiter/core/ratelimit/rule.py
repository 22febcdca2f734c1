"""Several limits on one key, all or nothing (``"10/second; 1000/hour"``).

A request is admitted only if every limit admits it. A denied request consumes nothing
from any limit, including the ones that would have admitted it: the states returned for
it are the ones passed in. Every algorithm only ever admits more as time passes with no
new requests, so a denied rule admits again once its slowest denying limit does: the
combined ``retry_after`` is the largest one among the limits that deny.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from .algorithms.base import Algorithm, new_tuple, validate_cost
from .decision import Decision


class RuleResult(NamedTuple):
    """The outcome of a rule: the combined decision, one decision and one state per limit.

    ``decisions[i]`` is what limit ``i`` alone decides (what :meth:`Algorithm.peek` says),
    ``states[i]`` is the state to store for it.
    """

    decision: Decision
    decisions: tuple[Decision, ...]
    states: tuple[object | None, ...]


def combine(decisions: Sequence[Decision]) -> Decision:
    """The one decision that stands for a rule's per-limit ``decisions``.

    Allowed: the limit with the least ``remaining`` (ties: the longer ``reset_after``).
    Denied: the denying limit with the largest ``retry_after`` (ties: the longer
    ``reset_after``); its decision already carries ``allowed=False`` and ``LIMITED``.
    """
    if len(decisions) == 1:
        return decisions[0]
    if not decisions:
        raise ValueError("a rule needs at least one limit")
    denied = [decision for decision in decisions if not decision.allowed]
    if denied:
        return max(denied, key=lambda d: (d.retry_after, d.reset_after))
    return min(decisions, key=lambda d: (d.remaining, -d.reset_after))


def _validate(algorithms: Sequence[Algorithm[Any]], states: Sequence[Any]) -> None:
    if not algorithms:
        raise ValueError("a rule needs at least one limit")
    if len(algorithms) != len(states):
        raise ValueError(f"got {len(algorithms)} limits but {len(states)} states")


def check_all(
    algorithms: Sequence[Algorithm[Any]],
    states: Sequence[Any | None],
    now: int,
    cost: int = 1,
) -> RuleResult:
    """Check ``cost`` at ``now`` against every limit; consume from all of them or none."""
    if len(algorithms) == 1 and len(states) == 1:
        # One limit (most routes): its own check is the rule's (it validates the cost).
        decision, state = algorithms[0].check(states[0], now, cost)
        # Built as a plain tuple: the named tuple's __new__ is a Python call (every
        # request of a route takes this path).
        return new_tuple(RuleResult, (decision, (decision,), (state,)))
    _validate(algorithms, states)
    validate_cost(cost)
    checked = [
        algorithm.check(state, now, cost)
        for algorithm, state in zip(algorithms, states, strict=True)
    ]
    # A limit's check decision equals its peek decision, allowed or not; only which
    # states to keep depends on the others.
    decisions = tuple(decision for decision, _ in checked)
    combined = combine(decisions)
    if combined.allowed:
        return RuleResult(combined, decisions, tuple(state for _, state in checked))
    # Denied: nothing is consumed, so a limit that would have admitted the request reports
    # what it still has (a cost-0 peek), not what it would have had after this request.
    unconsumed = tuple(
        decision if not decision.allowed else algorithm.peek(state, now, 0)
        for decision, algorithm, state in zip(decisions, algorithms, states, strict=True)
    )
    return RuleResult(combined, unconsumed, tuple(states))


def peek_all(
    algorithms: Sequence[Algorithm[Any]],
    states: Sequence[Any | None],
    now: int,
    cost: int = 1,
) -> RuleResult:
    """What :func:`check_all` would decide; the states come back unchanged."""
    _validate(algorithms, states)
    validate_cost(cost)
    decisions = tuple(
        algorithm.peek(state, now, cost)
        for algorithm, state in zip(algorithms, states, strict=True)
    )
    return RuleResult(combine(decisions), decisions, tuple(states))


def refund_all(
    algorithms: Sequence[Algorithm[Any]],
    states: Sequence[Any | None],
    now: int,
    cost: int = 1,
    at: int | None = None,
) -> tuple[object | None, ...]:
    """Give ``cost`` back to every limit (after an admitted request that should not count);
    ``at``: when it was admitted (``None``: unknown, give back from what is held now)."""
    _validate(algorithms, states)
    validate_cost(cost)
    return tuple(
        algorithm.refund(state, now, cost, at)
        for algorithm, state in zip(algorithms, states, strict=True)
    )
