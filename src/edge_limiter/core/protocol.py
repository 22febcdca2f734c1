"""The one-call protocol between the Worker and a key's Durable Object, as pure functions.

The Worker sends a :class:`StoreRequest` (JSON text); the Durable Object loads the rows
it names, runs :func:`apply` with its own clock, writes back what changed and answers
with a :class:`StoreResponse` (JSON text). Keeping this pure means the whole
load-decide-store step is tested on CPython; the Durable Object only does the I/O.

Each limit's state lives in one row keyed by :func:`row_id`, which includes the
algorithm, burst and rate, so a config change never misreads an old row: the old row
simply goes idle and the alarm deletes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .algorithms import ALGORITHMS, make_algorithm
from .algorithms.base import Algorithm
from .decision import Decision, Reason
from .errors import ProtocolError, StateError
from .limiter import check_all, combine, peek_all, refund_all
from .rates import Rate

OPS = ("check", "peek", "refund", "reset")


@dataclass(frozen=True, slots=True)
class StoreRequest:
    """What the Worker asks of one key's Durable Object."""

    op: str
    algorithm: str
    rates: tuple[Rate, ...]
    burst: int | None = None
    cost: int = 1

    def to_json(self) -> str:
        """Compact JSON text for the RPC call."""
        return json.dumps(
            {
                "op": self.op,
                "algorithm": self.algorithm,
                "burst": self.burst,
                "cost": self.cost,
                "limits": [[r.quota, r.window_ms, r.name] for r in self.rates],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> StoreRequest:
        """Parse and validate; raises :class:`ProtocolError`."""
        try:
            data = json.loads(text)
            op = data["op"]
            if op not in OPS:
                raise ProtocolError(f"unknown op {op!r}")
            rates = tuple(Rate(int(q), int(w), str(n)) for q, w, n in data["limits"])
            if not rates:
                raise ProtocolError("no limits")
            algorithm = data["algorithm"]
            if algorithm not in ALGORITHMS:
                raise ProtocolError(f"unknown algorithm {algorithm!r}")
            burst = data.get("burst")
            if burst is not None and (not isinstance(burst, int) or burst < 1):
                raise ProtocolError(f"bad burst {burst!r}")
            cost = data.get("cost", 1)
            if not isinstance(cost, int) or cost < 0:
                raise ProtocolError(f"bad cost {cost!r}")
            return cls(op, algorithm, rates, burst, cost)
        except ProtocolError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"malformed store request: {exc}") from exc


def _decision_to_list(d: Decision) -> list[Any]:
    return [d.allowed, d.limit, d.remaining, d.reset_after, d.retry_after]


@dataclass(frozen=True, slots=True)
class StoreResponse:
    """What the Durable Object answers: one decision per limit, in the request's order."""

    decisions: tuple[Decision, ...]

    @property
    def decision(self) -> Decision:
        """The rule's combined decision, derived as the core combines it."""
        return combine(self.decisions)

    def to_json(self) -> str:
        """Compact JSON text for the RPC answer."""
        return json.dumps(
            {"ds": [_decision_to_list(d) for d in self.decisions]}, separators=(",", ":")
        )

    @classmethod
    def from_json(cls, text: str, rates: tuple[Rate, ...]) -> StoreResponse:
        """Parse an answer for a request over ``rates``; raises :class:`ProtocolError`."""
        try:
            data = json.loads(text)
            return cls(
                tuple(
                    _decision_from_list(item, rate)
                    for item, rate in zip(data["ds"], rates, strict=True)
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"malformed store response: {exc}") from exc


def _decision_from_list(item: list[Any], rate: Rate | None) -> Decision:
    allowed, limit, remaining, reset_after, retry_after = item
    return Decision(
        allowed=bool(allowed),
        limit=int(limit),
        remaining=int(remaining),
        reset_after=int(reset_after),
        retry_after=int(retry_after),
        reason=None if allowed else Reason.LIMITED,
        rate=rate,
    )


def row_id(algorithm: str, burst: int | None, rate: Rate) -> str:
    """The storage row of one limit's state."""
    return f"{algorithm}:{'' if burst is None else burst}:{rate.quota}/{rate.window_ms}"


@dataclass(frozen=True, slots=True)
class StoreResult:
    """The outcome of :func:`apply`: the answer and the storage changes to make."""

    response: StoreResponse
    writes: dict[str, tuple[list[int], int]] = field(default_factory=dict)
    """Row id -> (encoded state, idle_at) to upsert."""
    deletes: tuple[str, ...] = ()
    """Row ids to delete (state back to fresh)."""


def apply(request: StoreRequest, rows: dict[str, list[int]], now: int) -> StoreResult:
    """Run ``request`` against the stored ``rows`` at ``now``.

    Rows that cannot be decoded (e.g. from an incompatible version) are treated as fresh
    rather than failing every request for that key.
    """
    algorithms: list[Algorithm[Any]] = [
        make_algorithm(request.algorithm, rate, request.burst) for rate in request.rates
    ]
    ids = [row_id(request.algorithm, request.burst, rate) for rate in request.rates]
    states: list[Any] = []
    for algorithm, rid in zip(algorithms, ids, strict=True):
        data = rows.get(rid)
        try:
            states.append(algorithm.decode(data) if data is not None else None)
        except StateError:
            states.append(None)

    if request.op == "check":
        result = check_all(algorithms, states, now, request.cost)
        new_states: list[Any] = list(result.states)
    else:
        # peek answers for the request's cost; refund and reset for the next single request.
        peek_cost = 1
        if request.op == "peek":
            new_states, peek_cost = list(states), request.cost
        elif request.op == "refund":
            new_states = list(refund_all(algorithms, states, now, request.cost))
        else:  # reset
            new_states = [algorithm.reset() for algorithm in algorithms]
        result = peek_all(algorithms, new_states, now, peek_cost)
    response = StoreResponse(result.decisions)

    writes: dict[str, tuple[list[int], int]] = {}
    deletes: list[str] = []
    for algorithm, rid, old, new in zip(algorithms, ids, states, new_states, strict=True):
        if new == old and rid in rows:
            continue
        if new is None:
            if rid in rows:
                deletes.append(rid)
            continue
        writes[rid] = (algorithm.encode(new), algorithm.idle_at(new))
    return StoreResult(response, writes, tuple(deletes))
