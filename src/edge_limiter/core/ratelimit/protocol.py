"""The one-call protocol between the Worker and a key's Durable Object, as pure functions.

The Worker sends a :class:`StoreRequest` (JSON text); the Durable Object decides it with
its own clock (:class:`edge_limiter.core.ratelimit.keystore.KeyStore`), writes what changed and
answers with a :class:`StoreResponse` (JSON text).

Each limit's state lives in one row keyed by :func:`row_id`, which includes the
algorithm, the limit's burst and its rate, so a config change never misreads an old row:
the old row simply goes idle and the alarm deletes it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from ..errors import ProtocolError
from ..objects import Method, json_object, malformed
from .algorithms import ALGORITHMS, Algorithm, make_algorithm
from .algorithms.base import new_tuple
from .decision import Decision, Reason
from .leases.plan import Allowance
from .rates import Limit, Rate
from .rule import combine

OPS = ("check", "peek", "refund", "reset", "lease")
#: The longest lease holder id (an isolate's random id).
MAX_HOLDER_LEN = 64
#: The cleanup alarm's default delay (``[storage] cleanup_after``).
DEFAULT_CLEANUP_AFTER_MS = 60_000
#: The largest state (in ints) a denial sends along for the isolate's deny cache.
MAX_SHARED_STATE_INTS = 64


@dataclass(frozen=True, slots=True)
class StoreRequest:
    """What the Worker asks of one key's Durable Object."""

    op: str
    algorithm: str
    limits: tuple[Limit, ...]
    cost: int = 1
    write_behind_ms: int = 0
    """0: every change is written before the answer; else at most this long after."""
    cleanup_after_ms: int = DEFAULT_CLEANUP_AFTER_MS
    """The cleanup alarm fires no sooner than this after it is armed."""
    lease_ttl_ms: int = 0
    """``lease``: how long the lease may be used (the object may end it sooner)."""
    holder: str = ""
    """``lease``: the asking isolate's random id."""
    returned: int = 0
    """``lease``: units of the holder's previous lease it gives back, never to be used."""
    returned_until: int = 0
    """``lease``, windows: the ``returnable_until`` of the grants the returned units came
    from (the object takes them back only into that same record, never into a later
    window's)."""
    min_units: int = 1
    """``lease``: the fewest units worth granting (the cost of the request waiting on it);
    for a lease, ``cost`` is the number of units wanted."""
    observed_rate: int = 0
    """``lease``: the holder's own demand for the key, in units per second as its meter
    measured it (0: not reported). The object sizes grants by each holder's share of the
    total demand it was told (:func:`edge_limiter.core.ratelimit.leases.grant_size`)."""
    stamp: bool = False
    """``check``: answer an admission with the object's clock (``StoreResponse.at``), for
    a route that may give the request back (``refund_on``)."""
    at: int = 0
    """``refund``: when the object admitted the request given back (its answer's ``at``):
    a window that has ended since keeps what it counted, and a log gives back that entry.
    0: give back from what the key holds now (an operator's refund)."""
    _text: str = field(default="", init=False, repr=False, compare=False)
    """The request's text, once written (a route sends the same few requests again and
    again: each is written once)."""

    def for_admission(self, at: int) -> StoreRequest:
        """This refund, for the request the object admitted at ``at`` (0: unknown)."""
        return replace(self, at=at) if at else self

    def to_json(self) -> str:
        """Compact JSON text for the RPC call (written once per request object)."""
        if self._text:
            return self._text
        text = self._written()
        object.__setattr__(self, "_text", text)  # frozen: a cache of its own fields
        return text

    def _written(self) -> str:
        data: dict[str, Any] = {
            "op": self.op,
            "algorithm": self.algorithm,
            "cost": self.cost,
            "limits": [
                [lim.rate.quota, lim.rate.window_ms, lim.name, lim.burst]
                + ([lim.algorithm] if lim.algorithm and lim.algorithm != self.algorithm else [])
                for lim in self.limits
            ],
        }
        if self.write_behind_ms:
            data["wb"] = self.write_behind_ms
        if self.cleanup_after_ms != DEFAULT_CLEANUP_AFTER_MS:
            data["ca"] = self.cleanup_after_ms
        if self.lease_ttl_ms:
            data["lt"] = self.lease_ttl_ms
        if self.holder:
            data["h"] = self.holder
        if self.returned:
            data["rt"] = self.returned
        if self.returned_until:
            data["rx"] = self.returned_until
        if self.min_units != 1:
            data["mn"] = self.min_units
        if self.observed_rate:
            data["or"] = self.observed_rate
        if self.stamp:
            data["sa"] = 1
        if self.at:
            data["at"] = self.at
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> StoreRequest:
        """Parse and validate; raises :class:`ProtocolError`."""
        try:
            data = json_object(text, "store request")
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
            write_behind = data.get("wb", 0)
            if not isinstance(write_behind, int) or isinstance(write_behind, bool):
                raise ProtocolError(f"bad write-behind interval {write_behind!r}")
            cleanup = data.get("ca", DEFAULT_CLEANUP_AFTER_MS)
            if not isinstance(cleanup, int) or isinstance(cleanup, bool) or cleanup < 1:
                raise ProtocolError(f"bad cleanup delay {cleanup!r}")
            ttl = _int_field(data, "lt", 0, 0, "lease ttl")
            holder = data.get("h", "")
            if not isinstance(holder, str) or len(holder) > MAX_HOLDER_LEN:
                raise ProtocolError(f"bad lease holder {holder!r}")
            returned = _int_field(data, "rt", 0, 0, "returned units")
            returned_until = _int_field(data, "rx", 0, 0, "returned units' record")
            min_units = _int_field(data, "mn", 1, 1, "minimum units")
            observed_rate = _int_field(data, "or", 0, 0, "observed rate")
            stamp = data.get("sa", 0) == 1
            at = _int_field(data, "at", 0, 0, "admission time")
            if at and op != "refund":
                raise ProtocolError(f"an admission time is for a refund, not a {op}")
            if op == "lease":
                if ttl < 1:
                    raise ProtocolError("a lease needs a ttl of at least 1 ms")
                if not holder:
                    raise ProtocolError("a lease needs a holder")
                if cost < min_units:
                    raise ProtocolError(f"a lease of {cost} is below its minimum {min_units}")
            return cls(
                op,
                algorithm,
                limits,
                cost,
                max(0, write_behind),
                cleanup,
                ttl,
                holder,
                returned,
                returned_until,
                min_units,
                observed_rate,
                stamp,
                at,
            )
        except ProtocolError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise malformed("store request", exc) from exc


class Compiled(NamedTuple):
    """A store request as the object runs it: its algorithms and its rows, made once per
    payload (a key's requests repeat the same few)."""

    op: str
    cost: int
    algorithms: tuple[Algorithm[Any], ...]
    ids: tuple[str, ...]
    write_behind_ms: int
    cleanup_after_ms: int
    stamp: bool = False
    at: int = 0


def compile_request(request: StoreRequest) -> Compiled:
    """``request``'s algorithms and row ids; raises :class:`ProtocolError` for limits an
    algorithm refuses (a burst for one that takes none, say)."""
    try:
        algorithms = tuple(
            make_algorithm(algorithm_of(limit, request.algorithm), limit)
            for limit in request.limits
        )
    except ValueError as exc:
        raise ProtocolError(str(exc)) from exc
    ids = tuple(row_id(algorithm_of(limit, request.algorithm), limit) for limit in request.limits)
    return Compiled(
        request.op,
        request.cost,
        algorithms,
        ids,
        request.write_behind_ms,
        request.cleanup_after_ms,
        request.stamp,
        request.at,
    )


def shared_rows(
    algorithms: Sequence[Algorithm[Any]], states: Sequence[Any], now: int
) -> tuple[list[int] | None, ...] | None:
    """The key's states as of an answer, encoded, when small (:data:`MAX_SHARED_STATE_INTS`
    ints at most; else None): sent along for the isolate's deny cache."""
    live = [
        None if state is None else algorithm.live(state, now)
        for algorithm, state in zip(algorithms, states, strict=True)
    ]
    size = 0
    for algorithm, state in zip(algorithms, live, strict=True):
        if state is not None:
            size += algorithm.encoded_len(state)
    if size > MAX_SHARED_STATE_INTS:
        return None
    return tuple(
        None if state is None else algorithm.encode(state)
        for algorithm, state in zip(algorithms, live, strict=True)
    )


def _int_field(data: dict[str, Any], key: str, default: int, least: int, what: str) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ProtocolError(f"bad {what} {value!r}")
    return value


def _limit_from_list(item: list[Any]) -> Limit:
    quota, window_ms, name, burst, *own = item
    if burst is not None and (not isinstance(burst, int) or isinstance(burst, bool)):
        raise ProtocolError(f"bad burst {burst!r}")
    algorithm = own[0] if own else ""
    if len(own) > 1 or (algorithm and algorithm not in ALGORITHMS):
        raise ProtocolError(f"bad limit {item!r}")
    return Limit(Rate(int(quota), int(window_ms)), burst, str(name), str(algorithm))


def algorithm_of(limit: Limit, default: str) -> str:
    """The algorithm that counts ``limit``: its own, else the route's ``default``."""
    return limit.algorithm or default


class StoreResponse(NamedTuple):
    """What the Durable Object answers: one decision per limit, in the request's order.

    On a denial it also sends the limits' states it decided on (``rows``: each encoded, or
    ``None`` for a fresh state) when they are small, so the isolate's deny cache can answer
    the key's next requests exactly as the object would, without asking it.

    A granted lease also carries ``granted`` (units, at least the request's minimum) and
    ``expires_at`` (the object's clock, ms); a denied lease is a plain denial. ``rationed``
    says the grant is the holder's share of a limit that is short (less than it asked
    for): once it is used up, the holder waits for the lease's end instead of asking again.

    A named tuple, not a dataclass: the object builds one per request, and a frozen
    dataclass cost several times as much to build (0.7 us against 0.1 on CPython).
    """

    decisions: tuple[Decision, ...]
    rows: tuple[list[int] | None, ...] | None = None
    granted: int = 0
    expires_at: int = 0
    rationed: bool = False
    returnable_until: int = 0
    """Windows: until when the units of this grant may be given back (the window's end),
    and the record to name when giving them back (``StoreRequest.returned_until``)."""
    ask_at: int = 0
    """A rationed grant on a limit whose supply grows before the lease's end (a sliding
    window's lease cut by its window's end): when the holder may ask again (the object's
    clock; :func:`~edge_limiter.core.ratelimit.leases.grant.pace_ms`), instead of at the
    lease's end."""
    allowance: Allowance | None = None
    """A sliding window's planned grant (:mod:`~edge_limiter.core.ratelimit.leases.plan`):
    the holder's units as they accrue until the window's end (``granted`` is their total)."""
    grant_wait_ms: int = 0
    """A rationed grant: how long from the answer until the object could grant the
    smallest lease again (its reserve kept), so the holder's denials until then say when
    a request will really be admitted, not when it may ask."""
    at: int = 0
    """An admission asked to be stamped (``StoreRequest.stamp``): the object's clock when
    it counted the request, for its refund."""

    @property
    def decision(self) -> Decision:
        """The rule's combined decision, derived as the core combines it."""
        return combine(self.decisions)

    def to_json(self) -> str:
        """Compact JSON text for the RPC answer (:meth:`from_json` reads it).

        Written out field by field: the object answers every request with it, and
        ``json.dumps`` of the same data cost five times as much (2 us against 0.4 on
        CPython). Only ints, booleans and lists of them are written, which need no
        escaping; the rows and a plan's allowance, rare, go through ``json.dumps``.
        """
        decisions = self.decisions
        if len(decisions) == 1:  # most routes: one limit, written without a list
            d = decisions[0]
            text = (
                f'{{"ds":[[{"true" if d.allowed else "false"},{d.limit},{d.remaining},'
                f"{d.reset_after},{d.retry_after}]]"
            )
        else:
            parts = [
                f"[{'true' if d.allowed else 'false'},{d.limit},{d.remaining},"
                f"{d.reset_after},{d.retry_after}]"
                for d in decisions
            ]
            text = '{"ds":[' + ",".join(parts) + "]"
        if self.rows is None and not self.at and not self.expires_at:
            return text + "}"  # the usual answer: the decisions, nothing else
        if self.at:
            text += f',"at":{self.at}'
        if self.rows is not None:
            text += ',"st":' + json.dumps(list(self.rows), separators=(",", ":"))
        if self.expires_at:
            text += f',"g":{self.granted},"x":{self.expires_at}'
            if self.rationed:
                text += ',"rn":2' if self.ask_at else ',"rn":1'
            if self.ask_at:
                text += f',"na":{self.ask_at}'
            if self.grant_wait_ms:
                text += f',"gw":{self.grant_wait_ms}'
            if self.returnable_until:
                text += f',"ru":{self.returnable_until}'
            if self.allowance is not None:
                text += ',"pl":' + json.dumps(self.allowance.to_list(), separators=(",", ":"))
        return text + "}"

    def read_as(self, limits: tuple[Limit, ...]) -> StoreResponse:
        """This answer as its text (:meth:`to_json`) reads for a request over ``limits``
        (:meth:`from_json`), without the text where nothing but the decisions and the
        admission's time is sent (the usual answer): each decision about its limit of
        ``limits``, a denial's reason ``limited``."""
        if self.rows is not None or self.expires_at or len(self.decisions) != len(limits):
            return StoreResponse.from_json(self.to_json(), limits)
        decisions = tuple(
            # Positional, in Decision's field order, as _decision_from_list builds it.
            Decision(
                bool(d.allowed),
                int(d.limit),
                int(d.remaining),
                int(d.reset_after),
                int(d.retry_after),
                None if d.allowed else Reason.LIMITED,
                limit,
            )
            for d, limit in zip(self.decisions, limits, strict=True)
        )
        return new_tuple(StoreResponse, (decisions, None, 0, 0, False, 0, 0, None, 0, self.at))

    @classmethod
    def from_json(cls, text: str, limits: tuple[Limit, ...]) -> StoreResponse:
        """Parse an answer for a request over ``limits``; raises :class:`ProtocolError`."""
        data = json_object(text, "store response")
        try:
            listed = data["ds"]
            if len(listed) != len(limits):
                raise ValueError(f"{len(listed)} decisions for {len(limits)} limits")
            decisions = tuple(
                _decision_from_list(item, limit) for item, limit in zip(listed, limits, strict=True)
            )
            if len(data) == 1:
                return cls(decisions)  # the usual answer: the decisions, nothing else
            rows = None
            if data.get("st") is not None:
                rows = tuple(
                    None if row is None else [int(v) for v in row]
                    for row in _same_length(data["st"], limits)
                )
            granted, expires_at = int(data.get("g", 0)), int(data.get("x", 0))
            if granted < 0 or (granted > 0) != (expires_at > 0):
                raise ValueError(f"bad lease grant {granted!r} until {expires_at!r}")
            rationed = data.get("rn", 0)
            if (
                rationed not in (0, 1, 2)
                or isinstance(rationed, bool)
                or (rationed and not granted)
            ):
                raise ValueError(f"bad rationed flag {rationed!r}")
            ask_at = int(data.get("na", 0))
            if (rationed == 2) != (ask_at > 0):
                raise ValueError(f"bad next ask time {ask_at!r} for rationed {rationed!r}")
            until = int(data.get("ru", 0))
            if until < 0 or (until and not granted):
                raise ValueError(f"bad returnable-until {until!r}")
            allowance = None
            if data.get("pl") is not None:
                allowance = Allowance.from_list(data["pl"])
                if not rationed or allowance.final != granted or allowance.end != expires_at:
                    raise ValueError(f"bad planned grant {data['pl']!r}")
            grant_wait = int(data.get("gw", 0))
            if grant_wait < 0 or (grant_wait and not rationed):
                raise ValueError(f"bad grant wait {grant_wait!r}")
            at = int(data.get("at", 0))
            if at < 0:
                raise ValueError(f"bad admission time {at!r}")
            return cls(
                decisions,
                rows,
                granted,
                expires_at,
                bool(rationed),
                until,
                ask_at,
                allowance,
                grant_wait,
                at,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise malformed("store response", exc) from exc


def checked(
    decisions: tuple[Decision, ...],
    rows: tuple[list[int] | None, ...] | None = None,
    at: int = 0,
) -> StoreResponse:
    """The answer to a check (or peek, refund, reset): its decisions, the key's states for
    the deny cache, the admission's time. Built as a plain tuple: a named tuple's
    ``__new__`` with keywords costs twice as much, on the path every request takes."""
    return new_tuple(StoreResponse, (decisions, rows, 0, 0, False, 0, 0, None, 0, at))


def _same_length(items: list[Any], limits: tuple[Limit, ...]) -> list[Any]:
    if len(items) != len(limits):
        raise ValueError(f"{len(items)} states for {len(limits)} limits")
    return items


def _decision_from_list(item: list[Any], policy: Limit | None) -> Decision:
    allowed, capacity, remaining, reset_after, retry_after = item
    # Positional, in Decision's field order: keywords cost a named tuple twice as much.
    return Decision(
        bool(allowed),
        int(capacity),
        int(remaining),
        int(reset_after),
        int(retry_after),
        None if allowed else Reason.LIMITED,
        policy,
    )


def row_id(algorithm: str, limit: Limit) -> str:
    """The storage row of one limit's state."""
    burst = "" if limit.burst is None else limit.burst
    return f"{algorithm}:{burst}:{limit.rate.quota}/{limit.rate.window_ms}"


def parse_row_id(rid: str) -> tuple[str, Limit] | None:
    """Inverse of :func:`row_id` (the limit's name is not in it); None if malformed."""
    try:
        algorithm, burst, rate = rid.split(":")
        quota, window_ms = rate.split("/")
        limit = Limit(Rate(int(quota), int(window_ms)), int(burst) if burst else None)
    except ValueError:
        return None
    return (algorithm, limit) if algorithm in ALGORITHMS else None


def _answer_of(text: str, request: StoreRequest) -> StoreResponse:
    return StoreResponse.from_json(text, request.limits)


DECIDE: Method[StoreRequest, StoreResponse] = Method(
    "decide", StoreRequest.to_json, _answer_of, typed="step"
)
"""``RateLimiter.decide``: one store request, its answer (:mod:`edge_limiter.core.objects`)."""
