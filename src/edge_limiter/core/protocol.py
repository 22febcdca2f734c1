"""The one-call protocol between the Worker and a key's Durable Object, as pure functions.

The Worker sends a :class:`StoreRequest` (JSON text); the Durable Object loads the rows
it names, runs :func:`apply` with its own clock, writes back what changed and answers
with a :class:`StoreResponse` (JSON text). Keeping this pure means the whole
load-decide-store step is tested on CPython; the Durable Object only does the I/O.

Each limit's state lives in one row keyed by :func:`row_id`, which includes the
algorithm, the limit's burst and its rate, so a config change never misreads an old row:
the old row simply goes idle and the alarm deletes it.
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
from .rates import Limit, Rate

OPS = ("check", "peek", "refund", "reset")
#: The largest state (in ints) a denial sends along for the isolate's deny cache.
MAX_SHARED_STATE_INTS = 64


@dataclass(frozen=True, slots=True)
class StoreRequest:
    """What the Worker asks of one key's Durable Object."""

    op: str
    algorithm: str
    limits: tuple[Limit, ...]
    cost: int = 1

    def to_json(self) -> str:
        """Compact JSON text for the RPC call."""
        return json.dumps(
            {
                "op": self.op,
                "algorithm": self.algorithm,
                "cost": self.cost,
                "limits": [
                    [lim.rate.quota, lim.rate.window_ms, lim.name, lim.burst] for lim in self.limits
                ],
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
            limits = tuple(_limit_from_list(item) for item in data["limits"])
            if not limits:
                raise ProtocolError("no limits")
            algorithm = data["algorithm"]
            if algorithm not in ALGORITHMS:
                raise ProtocolError(f"unknown algorithm {algorithm!r}")
            cost = data.get("cost", 1)
            if not isinstance(cost, int) or isinstance(cost, bool) or cost < 0:
                raise ProtocolError(f"bad cost {cost!r}")
            return cls(op, algorithm, limits, cost)
        except ProtocolError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"malformed store request: {exc}") from exc


def _limit_from_list(item: list[Any]) -> Limit:
    quota, window_ms, name, burst = item
    if burst is not None and (not isinstance(burst, int) or isinstance(burst, bool)):
        raise ProtocolError(f"bad burst {burst!r}")
    return Limit(Rate(int(quota), int(window_ms)), burst, str(name))


def _decision_to_list(d: Decision) -> list[Any]:
    return [d.allowed, d.limit, d.remaining, d.reset_after, d.retry_after]


@dataclass(frozen=True, slots=True)
class StoreResponse:
    """What the Durable Object answers: one decision per limit, in the request's order.

    On a denial it also sends the limits' states it decided on (``rows``: each encoded, or
    ``None`` for a fresh state) when they are small, so the isolate's deny cache can answer
    the key's next requests exactly as the object would, without asking it.
    """

    decisions: tuple[Decision, ...]
    rows: tuple[list[int] | None, ...] | None = None

    @property
    def decision(self) -> Decision:
        """The rule's combined decision, derived as the core combines it."""
        return combine(self.decisions)

    def to_json(self) -> str:
        """Compact JSON text for the RPC answer."""
        data: dict[str, Any] = {"ds": [_decision_to_list(d) for d in self.decisions]}
        if self.rows is not None:
            data["st"] = list(self.rows)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, limits: tuple[Limit, ...]) -> StoreResponse:
        """Parse an answer for a request over ``limits``; raises :class:`ProtocolError`."""
        try:
            data = json.loads(text)
            decisions = tuple(
                _decision_from_list(item, limit)
                for item, limit in zip(data["ds"], limits, strict=True)
            )
            rows = None
            if data.get("st") is not None:
                rows = tuple(
                    None if row is None else [int(v) for v in row]
                    for row in _same_length(data["st"], limits)
                )
            return cls(decisions, rows)
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"malformed store response: {exc}") from exc


def _same_length(items: list[Any], limits: tuple[Limit, ...]) -> list[Any]:
    if len(items) != len(limits):
        raise ValueError(f"{len(items)} states for {len(limits)} limits")
    return items


def _decision_from_list(item: list[Any], policy: Limit | None) -> Decision:
    allowed, capacity, remaining, reset_after, retry_after = item
    return Decision(
        allowed=bool(allowed),
        limit=int(capacity),
        remaining=int(remaining),
        reset_after=int(reset_after),
        retry_after=int(retry_after),
        reason=None if allowed else Reason.LIMITED,
        policy=policy,
    )


def row_id(algorithm: str, limit: Limit) -> str:
    """The storage row of one limit's state."""
    burst = "" if limit.burst is None else limit.burst
    return f"{algorithm}:{burst}:{limit.rate.quota}/{limit.rate.window_ms}"


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
    try:
        algorithms: list[Algorithm[Any]] = [
            make_algorithm(request.algorithm, limit) for limit in request.limits
        ]
    except ValueError as exc:  # e.g. a burst for an algorithm that takes none
        raise ProtocolError(str(exc)) from exc
    ids = [row_id(request.algorithm, limit) for limit in request.limits]
    states: list[Any] = []
    for algorithm, rid in zip(algorithms, ids, strict=True):
        data = rows.get(rid)
        try:
            states.append(algorithm.decode(data) if data is not None else None)
        except StateError:
            states.append(None)

    new_states: list[Any]
    if request.op in ("check", "peek"):
        # A peek is the check's answer with nothing stored: exactly what a request of that
        # cost would get now.
        result = check_all(algorithms, states, now, request.cost)
        new_states = list(result.states) if request.op == "check" else list(states)
    else:
        # refund and reset answer for the next single request.
        if request.op == "refund":
            new_states = list(refund_all(algorithms, states, now, request.cost))
        else:  # reset
            new_states = [algorithm.reset() for algorithm in algorithms]
        result = peek_all(algorithms, new_states, now, 1)
    rows_out: tuple[list[int] | None, ...] | None = None
    if request.op == "check" and not result.decision.allowed:
        encoded = [
            None if state is None else algorithm.encode(state)
            for algorithm, state in zip(algorithms, states, strict=True)
        ]
        if sum(len(row) for row in encoded if row is not None) <= MAX_SHARED_STATE_INTS:
            rows_out = tuple(encoded)
    response = StoreResponse(result.decisions, rows_out)

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
