"""One key's counters as its Durable Object keeps them: memory first, SQLite behind it.

:class:`KeyStore` is the whole of the rate-limiter Durable Object except the platform calls
(``durable_objects/rate_limiter.py`` only hands it the SQL API and the clock), so every
step of it runs on CPython against the standard library's ``sqlite3`` in the tests.

What it does per request, and why (the per-request costs measured on workerd are in
``BENCHMARKS.md``):

- **Rows live in memory while the object lives.** They are read once, on the first
  request, and memory is the truth from then on: one object per key means nothing else
  writes them. Every change is still written before the answer leaves (the platform holds
  the answer until the write is durable), so a restart loses nothing.
- **Requests are parsed once per isolate.** A key's requests repeat the same few payloads
  (the same op, algorithm, limits and cost), and so do every key's of one route; their
  parsed form is kept by payload text, by each object and by the isolate for all its
  objects (:class:`CompiledPayloads`): an object made for a new key parses nothing its
  isolate has seen.
- **The sliding log is stored one entry per row** (``log`` table), appended to and pruned
  in batches, so its step is O(1) amortized in the quota, like every other algorithm's
  one-row step.
- **The alarm is armed rarely**: cleanup waits at least ``[storage] cleanup_after`` (a
  minute by default) after the alarm is armed, so short
  windows (``100000/minute`` goes idle within a millisecond) do not re-arm it per request.
  Storage stays bounded: idle rows are deleted when it fires, and none are left once every
  key is idle.
- **Write-behind, opt-in per route** (``write_behind = "50ms"``): memory answers at once
  and changes are written at most that long after, in one batch. A restart of the object
  (a deploy, an eviction, a crash) forgets the admissions of at most that last interval;
  that is the trade the platform's own rate-limiting binding makes, offered as a choice.
- **Leases** (op ``lease``, :mod:`.leases`): the grant is a check of the granted units,
  stored like one; the grant side (:class:`~.leases.grant.Grants`) keeps each holder's
  outstanding lease in memory only.
- **The carry** (:mod:`.carry`): a key counted under other limits than a moment ago
  starts each new limit from what it used under the old ones.

Each step's answer is a typed :class:`~.protocol.StoreResponse`, written as text by its
codec (:meth:`~.protocol.StoreResponse.to_json`) once, at the end of :meth:`KeyStore.decide`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import ProtocolError, StateError
from ..objects import Sql
from .algorithms import make_algorithm
from .algorithms.base import Algorithm, new_tuple
from .algorithms.leasable import Leasable
from .carry import Carry
from .leases.grant import Grants
from .protocol import (
    DEFAULT_CLEANUP_AFTER_MS,
    Compiled,
    StoreRequest,
    StoreResponse,
    checked,
    compile_request,
    parse_row_id,
    shared_rows,
)
from .rule import check_all, peek_all, refund_all

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS limits ("
    " id TEXT PRIMARY KEY, state TEXT NOT NULL, idle_at INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS log ("
    " id TEXT NOT NULL, at INTEGER NOT NULL, cost INTEGER NOT NULL, PRIMARY KEY (id, at))",
)
#: A sliding log's expired rows are deleted once this many entries were added since.
LOG_PRUNE_EVERY = 256
#: Parsed payloads kept (a key sees a handful: one per op and cost of its route).
MAX_COMPILED = 64
#: Parsed payloads an isolate keeps for all its objects (a handful per route and override).
MAX_SHARED_COMPILED = 1024

_UPSERT_ROW = (
    "INSERT INTO limits (id, state, idle_at) VALUES (?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET state = excluded.state, idle_at = excluded.idle_at"
)
_ADD_ENTRY = (
    "INSERT INTO log (id, at, cost) VALUES (?, ?, ?) "
    "ON CONFLICT(id, at) DO UPDATE SET cost = cost + excluded.cost"
)


#: A row's change: a log entry added, or the row (or whole log) written as memory holds it.
_ADD, _REWRITE = 1, 2


class _Dirty:
    """Write-behind: what memory holds that storage does not yet, for one row id."""

    __slots__ = ("adds", "rewrite")

    def __init__(self) -> None:
        self.rewrite = False
        """Write the row (or replace all of a log's rows) as memory holds it."""
        self.adds: list[tuple[int, int]] = []
        """A log: the (timestamp, cost) entries added since the last write."""


def _ints(values: list[int]) -> str:
    """A list of ints as compact JSON (several times cheaper than ``json.dumps``)."""
    return "[" + ",".join(map(str, values)) + "]"


class CompiledPayloads:
    """The payloads an isolate's objects were sent, parsed and compiled, by text: shared
    by every :class:`KeyStore` of the isolate, since a route sends all its keys the same
    few. A compiled payload is plain immutable data (its algorithms hold only their limit's
    constants), so objects may share it. Bounded: all dropped when full."""

    __slots__ = ("by_text", "most")

    def __init__(self, most: int = MAX_SHARED_COMPILED) -> None:
        self.most = most
        self.by_text: dict[str, Compiled] = {}

    def get(self, payload: str) -> Compiled | None:
        return self.by_text.get(payload)

    def keep(self, payload: str, compiled: Compiled) -> None:
        if len(self.by_text) >= self.most:
            self.by_text.clear()
        self.by_text[payload] = compiled


#: The isolate's parsed payloads (module state: one per isolate, as the platform runs it).
SHARED_COMPILED = CompiledPayloads()


class KeyStore:
    """Every limit's state for one key: decided in memory, written to ``sql``."""

    # Slots: an isolate (or the replay's simulator) may hold many thousands, each one
    # object fewer for the garbage collector to walk.
    __slots__ = (
        "alarm_at",
        "algorithms",
        "carry",
        "cleanup_after_ms",
        "compiled",
        "dirty",
        "durable",
        "flush_due",
        "grants",
        "idle",
        "lease_shapes",
        "loaded",
        "recent",
        "sql",
        "states",
        "unpruned",
    )

    def __init__(self, sql: Sql, *, durable: bool = True) -> None:
        self.sql = sql
        self.durable = durable
        """Whether changes are written to ``sql`` (False: memory only, for a twin over
        storage that keeps nothing: nothing is encoded to be thrown away)."""
        for statement in SCHEMA:
            sql.run(statement)
        self.loaded = False
        self.states: dict[str, Any] = {}
        """Row id -> decoded state, for every stored row (memory is the truth)."""
        self.algorithms: dict[str, Algorithm[Any]] = {}
        self.idle: dict[str, int] = {}
        """Row id -> when it goes idle (may be deleted)."""
        self.dirty: dict[str, _Dirty] = {}
        self.unpruned: dict[str, int] = {}
        """Log id -> entries added since its expired rows were last deleted."""
        self.compiled: dict[str, Compiled] = {}
        self.lease_shapes: dict[str, Compiled] = {}
        """Lease requests compiled by their limits alone (their other fields vary)."""
        self.alarm_at: int | None = None
        """When the cleanup alarm is set for (None: not set by this instance)."""
        self.flush_due: int | None = None
        """Write-behind: when the pending changes must be written (None: nothing pending)."""
        self.cleanup_after_ms = DEFAULT_CLEANUP_AFTER_MS
        """The latest request's cleanup delay."""
        self.grants = Grants()
        """The outstanding leases, by limit set (memory only)."""
        self.carry = Carry()
        self.recent = self.carry.recent
        """The key's latest admissions (the carry's, read on every admission)."""

    # --- loading ------------------------------------------------------------------------

    def _loaded(self, now: int) -> None:
        """Load the rows once, on the first request (or alarm) of this instance."""
        if not self.loaded:
            self._load()
            # Admissions before this object started are unknown, unless nothing was stored.
            self.recent.since = now if self.states else 0

    def _load(self) -> None:
        """Read every row once; rows that cannot be decoded are dropped at the next write."""
        self.loaded = True
        for row in self.sql.rows("SELECT id, state, idle_at FROM limits"):
            rid = str(row["id"])
            algorithm = self._algorithm_for(rid)
            try:
                if algorithm is None:
                    raise StateError(f"unknown row id {rid!r}")
                state = algorithm.decode(json.loads(row["state"]))
            except (StateError, ValueError, TypeError):
                self._forget(rid)
                continue
            if algorithm.logged:
                # A log stored as one row (before the log table): move it to rows.
                self.sql.run("DELETE FROM limits WHERE id = ?", rid)
                if len(state):
                    self.states[rid] = state
                    self.idle[rid] = algorithm.idle_at(state)
                    self._persist(rid, algorithm, state, _REWRITE, 0, 0)
                continue
            self.states[rid] = state
            self.idle[rid] = int(row["idle_at"])
        entries: dict[str, list[tuple[int, int]]] = {}
        for row in self.sql.rows("SELECT id, at, cost FROM log ORDER BY id, at"):
            entries.setdefault(str(row["id"]), []).append((int(row["at"]), int(row["cost"])))
        for rid, log in entries.items():
            algorithm = self._algorithm_for(rid)
            if rid in self.states:
                continue  # a log migrated from one row above replaces these
            try:
                if algorithm is None or not algorithm.logged:
                    raise StateError(f"{rid!r} is not a sliding log")
                state = algorithm.decode([value for entry in log for value in entry])
            except StateError:
                self.sql.run("DELETE FROM log WHERE id = ?", rid)
                continue
            self.states[rid] = state
            self.idle[rid] = algorithm.idle_at(state)

    def _algorithm_for(self, rid: str) -> Algorithm[Any] | None:
        algorithm = self.algorithms.get(rid)
        if algorithm is None:
            parsed = parse_row_id(rid)
            if parsed is None:
                return None
            try:
                algorithm = make_algorithm(*parsed)
            except ValueError:
                return None
            self.algorithms[rid] = algorithm
        return algorithm

    def _drop(self, rid: str) -> None:
        """Delete one row of the key, its log entries included, from memory and storage."""
        self.states.pop(rid, None)
        self.idle.pop(rid, None)
        self.dirty.pop(rid, None)
        self.unpruned.pop(rid, None)
        self.sql.run("DELETE FROM limits WHERE id = ?", rid)
        self.sql.run("DELETE FROM log WHERE id = ?", rid)

    def _forget(self, rid: str) -> None:
        self.sql.run("DELETE FROM limits WHERE id = ?", rid)
        self.states.pop(rid, None)
        self.idle.pop(rid, None)

    # --- requests -----------------------------------------------------------------------

    def _compile(self, request: StoreRequest, key: str, cache: dict[str, Compiled]) -> Compiled:
        """``request`` compiled, kept in ``cache`` under ``key``."""
        return self._adopt(compile_request(request), key, cache)

    def _adopt(self, compiled: Compiled, key: str, cache: dict[str, Compiled]) -> Compiled:
        """``compiled`` kept in ``cache`` under ``key``, its rows' algorithms known."""
        for rid, algorithm in zip(compiled.ids, compiled.algorithms, strict=True):
            self.algorithms.setdefault(rid, algorithm)
        if len(cache) >= MAX_COMPILED:
            cache.clear()
        cache[key] = compiled
        return compiled

    def decide(self, payload: str, now: int) -> str:
        """The object's step: one store request (check, peek, refund, reset or lease) as
        JSON text in, its answer as JSON text out (:mod:`.protocol` is the codec).

        Raises :class:`ProtocolError` for a payload that is not a valid request.
        """
        compiled = self._compiled(payload, None)
        if isinstance(compiled, StoreRequest):  # a lease
            return self._lease(compiled, now).to_json()
        return self.answer(compiled, now).to_json()

    def step(self, request: StoreRequest, now: int) -> StoreResponse:
        """:meth:`decide` on the typed request: its answer as the codec reads it for
        ``request`` (``StoreResponse.from_json(decide(request.to_json(), now),
        request.limits)``), without writing and reading the text (``DECIDE.typed``; the
        in-memory twin's calls, when it runs without the codec)."""
        compiled = self._compiled(request.to_json(), request)
        if isinstance(compiled, StoreRequest):
            return self._lease(compiled, now).read_as(request.limits)
        return self.answer(compiled, now).read_as(request.limits)

    def _compiled(self, payload: str, request: StoreRequest | None) -> Compiled | StoreRequest:
        """The payload's compiled form (kept by this object and the isolate), or the
        request itself for a lease (compiled by :meth:`_lease`). ``request``: the payload's
        own typed request, if the caller has it (else it is parsed from the text)."""
        compiled = self.compiled.get(payload)
        if compiled is not None:
            return compiled
        compiled = SHARED_COMPILED.get(payload)
        if compiled is not None:
            return self._adopt(compiled, payload, self.compiled)
        if request is None:
            request = StoreRequest.from_json(payload)
        if request.op == "lease":
            return request
        if request.at:
            # A refund of one admission is asked once: not kept among the compiled.
            return self._compile(request, payload, {})
        compiled = self._compile(request, payload, self.compiled)
        SHARED_COMPILED.keep(payload, compiled)
        return compiled

    def answer(self, compiled: Compiled, now: int) -> StoreResponse:
        """Check, peek, refund or reset: the answer to ``compiled`` at ``now``. (The check,
        which every request of a route makes, is written out here, with no helper.)"""
        if not self.loaded:
            self._loaded(now)
        self.cleanup_after_ms = compiled.cleanup_after_ms
        algorithms, op, ids = compiled.algorithms, compiled.op, compiled.ids
        states_map = self.states
        stored = [states_map.get(rid) for rid in ids]
        states: Sequence[Any] = stored
        if len(states_map) > len(ids) - stored.count(None):
            # What a peek sees is not kept: the replay is done again for the next check.
            states = self._carried(compiled, stored, now, keep=op != "peek")
        if op == "check":
            result = check_all(algorithms, states, now, compiled.cost)
            self.store(compiled, stored, result.states, now, carried=states)
            decision, cost = result.decision, compiled.cost
            if not decision.allowed:
                # The key's states go along, for the isolate's deny cache.
                return checked(result.decisions, shared_rows(algorithms, states, now))
            if not cost:
                return checked(result.decisions)
            self.recent.add(now, cost)
            at = now if compiled.stamp else 0  # for the refund of this admission
            if decision.remaining < cost:
                # Admitted, and the next request like it would be denied now: the states
                # go along, so the isolate's deny cache can answer that next request.
                return checked(result.decisions, shared_rows(algorithms, result.states, now), at)
            # The usual answer, built as checked() builds it, without the call.
            return new_tuple(
                StoreResponse, (result.decisions, None, 0, 0, False, 0, 0, None, 0, at)
            )
        if op == "peek":
            # A peek is the check's answer with nothing stored.
            return checked(check_all(algorithms, states, now, compiled.cost).decisions)
        # refund and reset answer for the next single request.
        new_states: Sequence[Any]
        if op == "refund":
            new_states = refund_all(algorithms, states, now, compiled.cost, compiled.at or None)
        else:
            new_states = [None] * len(algorithms)
            self._reset(ids, now)
        self.store(compiled, stored, new_states, now, carried=states)
        return checked(peek_all(algorithms, new_states, now, 1).decisions)

    def held_states(
        self, compiled: Compiled, now: int, *, keep: bool
    ) -> tuple[Sequence[Any], Sequence[Any]]:
        """The stored states of ``compiled``'s rows, and the states to decide from: those,
        or where the key's other rows hold use, with that use carried in (``keep``: the
        caller stores what it decides, so the replay is done once; see :meth:`_carried`)."""
        states_map, ids = self.states, compiled.ids
        stored = [states_map.get(rid) for rid in ids]
        if len(states_map) > len(ids) - stored.count(None):
            return stored, self._carried(compiled, stored, now, keep=keep)
        return stored, stored

    def _carried(
        self, compiled: Compiled, stored: Sequence[Any], now: int, *, keep: bool
    ) -> Sequence[Any]:
        """``stored`` with the use of the key's rows of other limits carried in (an
        override set, changed or removed; a deploy that changed the route's limits):
        see :meth:`~.carry.Carry.carried`."""
        return self.carry.carried(
            compiled.algorithms,
            compiled.ids,
            stored,
            now,
            rows=self.states,
            algorithm_for=self._algorithm_for,
            keep=keep,
        )

    def admitted(self, now: int, units: int) -> None:
        """``units`` were taken from the key at ``now`` (the carry remembers them)."""
        self.recent.add(now, units)

    def _reset(self, ids: tuple[str, ...], now: int) -> None:
        """An operator's reset: a fresh allowance, nothing of the key's other rows or
        admissions carried into it."""
        # Units of leases granted before it may still be used (an operator's reset gives
        # the key more, never less), but not given back into it, which would admit them
        # twice.
        self.grants.forget(ids)
        # The key's rows of other limits go too: their use would carry back, as would
        # the admissions it remembers.
        for rid in [rid for rid in self.states if rid not in ids]:
            self._drop(rid)
        self.carry.reset(now)

    def store(
        self,
        compiled: Compiled,
        states: Sequence[Any],
        new_states: Sequence[Any],
        now: int,
        *,
        at_once: bool = False,
        carried: Sequence[Any] | None = None,
    ) -> None:
        """Keep the changed states in memory and write them (now, or write-behind unless
        ``at_once``). ``carried``: the states the request was decided from, where other
        limits' use was carried into some (:meth:`held_states`); a log such a state seeded is
        written whole, not as one entry added."""
        algorithms, ids, op = compiled.algorithms, compiled.ids, compiled.op
        states_map = self.states
        durable = self.durable
        immediate = at_once or compiled.write_behind_ms <= 0
        changed = False
        for index, new in enumerate(new_states):
            old = states[index]
            if new is old:
                continue
            changed = True
            rid = ids[index]
            algorithm = algorithms[index]
            if new is None:
                del states_map[rid]
                self.idle.pop(rid, None)
                change = _REWRITE
            else:
                states_map[rid] = new
                self.idle[rid] = algorithm.idle_at(new)
                if not durable:
                    continue
                change = (
                    _ADD
                    if algorithm.logged
                    and op == "check"
                    and (carried is None or carried[index] is old)
                    else _REWRITE
                )
            if not durable:
                continue
            if immediate:
                self._persist(rid, algorithm, new, change, compiled.cost, now)
            else:
                self._pend(rid, new, change, compiled.cost)
        if changed and durable and not immediate:
            if self.flush_due is None:
                self.flush_due = now + compiled.write_behind_ms
            elif now >= self.flush_due:
                self._write(now)

    # --- leases -------------------------------------------------------------------------

    def _lease(self, request: StoreRequest, now: int) -> StoreResponse:
        """Op ``lease``, handed to the grant side (:class:`~.leases.grant.Grants`).

        Lease payloads differ per holder and per return, so they are parsed every time and
        compiled by their limits only (the op's own fields come from ``request``).
        """
        shape = StoreRequest(
            "lease",
            request.algorithm,
            request.limits,
            write_behind_ms=request.write_behind_ms,
            cleanup_after_ms=request.cleanup_after_ms,
        ).to_json()
        compiled = self.lease_shapes.get(shape)
        if compiled is None:
            compiled = self._compile(request, shape, self.lease_shapes)
        leased = tuple(a for a in compiled.algorithms if isinstance(a, Leasable))
        for algorithm in compiled.algorithms:
            if not isinstance(algorithm, Leasable):
                raise ProtocolError(f"algorithm {algorithm.name!r} cannot lease")
        self._loaded(now)
        self.cleanup_after_ms = compiled.cleanup_after_ms
        return self.grants.lease(self, request, compiled, leased, now)

    # --- writing ------------------------------------------------------------------------

    def _persist(  # noqa: PLR0917 - positional: called on every admission, keywords cost
        self, rid: str, algorithm: Algorithm[Any], state: Any, change: int, cost: int, now: int
    ) -> None:
        """Write one row's change: ``_ADD`` (a log entry of ``cost`` at the log's newest
        time) or ``_REWRITE`` (the row, or the whole log, as memory holds it)."""
        sql = self.sql
        if not algorithm.logged:
            if state is None:
                sql.run("DELETE FROM limits WHERE id = ?", rid)
            else:
                sql.run(_UPSERT_ROW, rid, _ints(algorithm.encode(state)), self.idle[rid])
            return
        if change == _ADD:
            self._add_entry(rid, algorithm, state.newest, cost, now)
            return
        sql.run("DELETE FROM log WHERE id = ?", rid)
        self.unpruned[rid] = 0
        if state is not None:
            for stamp, entry_cost in state.entries:
                sql.run(_ADD_ENTRY, rid, stamp, entry_cost)

    def _add_entry(
        self, rid: str, algorithm: Algorithm[Any], stamp: int, cost: int, now: int
    ) -> None:
        self.sql.run(_ADD_ENTRY, rid, stamp, cost)
        added = self.unpruned.get(rid, 0) + 1
        if added >= LOG_PRUNE_EVERY:
            # Rows outside the window are never needed again (``now``, not the newest
            # entry's time, in case the clock went back).
            self.sql.run("DELETE FROM log WHERE id = ? AND at <= ?", rid, now - algorithm.window_ms)
            added = 0
        self.unpruned[rid] = added

    def _pend(self, rid: str, state: Any, change: int, cost: int) -> None:
        """Write-behind: remember the change for the next :meth:`flush`."""
        dirty = self.dirty.get(rid)
        if dirty is None:
            dirty = self.dirty[rid] = _Dirty()
        if change == _ADD and not dirty.rewrite:
            dirty.adds.append((state.newest, cost))
        else:
            dirty.rewrite = True
            dirty.adds.clear()

    def flush(self, now: int) -> None:
        """Write every pending change now (write-behind's timer; the alarm)."""
        if self.dirty:
            self._write(now)
        self.flush_due = None

    def _write(self, now: int) -> None:
        """Write-behind's batch: each pending row as memory holds it now."""
        for rid, dirty in self.dirty.items():
            algorithm = self.algorithms[rid]
            state = self.states.get(rid)
            if dirty.rewrite or state is None:
                self._persist(rid, algorithm, state, _REWRITE, 0, now)
                continue
            for stamp, cost in dirty.adds:
                self._add_entry(rid, algorithm, stamp, cost, now)
        self.dirty.clear()
        self.flush_due = None

    # --- cleanup ------------------------------------------------------------------------

    def alarm_wanted(self, now: int) -> int | None:
        """When to arm the cleanup alarm, if it should be armed now (else None)."""
        if self.alarm_at is not None or not self.idle:
            return None
        self.alarm_at = max(min(self.idle.values()), now + self.cleanup_after_ms)
        return self.alarm_at

    def cleanup(self, now: int) -> int | None:
        """The alarm: write what is pending, delete idle rows and expired log rows.

        Returns when to fire next (None: no rows are left, storage is empty).
        """
        self._loaded(now)
        self.flush(now)
        for rid, idle_at in list(self.idle.items()):
            if idle_at <= now:
                self._drop(rid)
        for rid, state in self.states.items():
            algorithm = self.algorithms.get(rid)
            if algorithm is not None and algorithm.logged and state is not None:
                self.sql.run(
                    "DELETE FROM log WHERE id = ? AND at <= ?", rid, now - algorithm.window_ms
                )
                self.unpruned[rid] = 0
        self.alarm_at = None
        return self.alarm_wanted(now)
