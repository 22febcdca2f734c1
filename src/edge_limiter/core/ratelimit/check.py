"""A route's way of counting its requests (its limits, or an override's), made once per
isolate: the algorithms, the requests its keys' objects are asked, and the deny cache's
replay of a denial from the states the object sent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import StateError
from .algorithms import Algorithm, make_algorithm
from .decision import Decision
from .denycache import shifted
from .leases.policy import lease_reserve_ok
from .protocol import StoreRequest, algorithm_of
from .rates import Limit
from .rule import check_all


@dataclass(frozen=True, slots=True)
class Check:
    """One way of counting a route's requests: its limits, encoded once."""

    limits: tuple[Limit, ...]
    algorithms: tuple[Algorithm[Any], ...]
    request: StoreRequest
    refund: StoreRequest
    payload: str
    """The check's text: what identifies it in the deny cache and the leases."""
    lease_ttl_ms: int = 0
    """0: every request is checked by the object; else it leases units for this long."""

    @classmethod
    def of(
        cls,
        algorithm: str,
        limits: tuple[Limit, ...],
        cost: int,
        storing: tuple[int, int],
        lease_ttl_ms: int = 0,
        *,
        refunds: bool = False,
    ) -> Check:
        """``storing``: the store requests' write-behind interval and cleanup delay.
        ``lease_ttl_ms``: the route's lease ttl, used when every limit can lease with it
        (an override's limits may not: those are checked per request). ``refunds``: the
        route gives some requests back (``refund_on``), so each admission is stamped with
        the object's clock, for its refund."""
        if lease_ttl_ms and any(lease_reserve_ok(lim, algorithm, lease_ttl_ms) for lim in limits):
            lease_ttl_ms = 0
        request = StoreRequest("check", algorithm, limits, cost, *storing, stamp=refunds)
        return cls(
            limits,
            tuple(make_algorithm(algorithm_of(limit, algorithm), limit) for limit in limits),
            request,
            StoreRequest("refund", algorithm, limits, cost, *storing),
            request.to_json(),
            lease_ttl_ms,
        )

    def replay(
        self,
        rows: tuple[list[int] | None, ...] | None,
        decisions: tuple[Decision, ...],
        now: int,
        denied_at: int,
    ) -> tuple[Decision, ...]:
        """The object's decisions at ``now``, recomputed from the states it sent with its
        answer at ``denied_at`` (which no admission has changed since); without them, its
        decisions shifted in time."""
        if rows is None:
            return shifted(decisions, now - denied_at)
        try:
            states = [
                None if row is None else algorithm.decode(row)
                for algorithm, row in zip(self.algorithms, rows, strict=True)
            ]
        except (StateError, ValueError):
            return shifted(decisions, now - denied_at)
        return check_all(self.algorithms, states, now, self.request.cost).decisions
