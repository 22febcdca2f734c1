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
- **Requests are parsed once.** A key's requests repeat the same few payloads (the same
  op, algorithm, limits and cost); their parsed form is kept by payload text.
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
- **Leases** (op ``lease``, :mod:`edge_limiter.core.ratelimit.leases`): the grant is a check of the
  granted units, stored like one. Each holder's outstanding lease (units, grant time,
  end) is kept in memory only, to cap what its next request may return: after a restart
  returns are ignored, which can only under-admit. Holders are counted per limit set as
  those seen within about one ttl (expired ones are dropped at most once per ttl).
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from ..errors import ProtocolError, StateError
from .algorithms import make_algorithm
from .algorithms.base import Algorithm
from .algorithms.leasable import Leasable
from .decision import Decision
from .lease_plan import Plan, plan_window, plans
from .leases import PACE_UNITS, grant_size, pace_ms
from .protocol import (
    DEFAULT_CLEANUP_AFTER_MS,
    MAX_SHARED_STATE_INTS,
    StoreRequest,
    algorithm_of,
    parse_row_id,
    row_id,
)
from .rule import check_all, combine, peek_all, refund_all

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

_UPSERT_ROW = (
    "INSERT INTO limits (id, state, idle_at) VALUES (?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET state = excluded.state, idle_at = excluded.idle_at"
)
_ADD_ENTRY = (
    "INSERT INTO log (id, at, cost) VALUES (?, ?, ?) "
    "ON CONFLICT(id, at) DO UPDATE SET cost = cost + excluded.cost"
)


class Sql(Protocol):
    """The SQL API of a Durable Object's storage, as :class:`KeyStore` uses it."""

    def run(self, query: str, *args: Any) -> None:
        """Execute a statement that returns no rows."""

    def rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        """Execute a query; its rows as dicts."""


class _Compiled(NamedTuple):
    op: str
    cost: int
    algorithms: tuple[Algorithm[Any], ...]
    ids: tuple[str, ...]
    write_behind_ms: int
    cleanup_after_ms: int
    stamp: bool = False
    at: int = 0


class _Held(NamedTuple):
    """A holder's outstanding lease, as the object granted it."""

    units: int
    granted_at: int
    expires_at: int
    returnable_until: int = 0
    """Until when its unused units may come back (0: ``expires_at``). For the windows,
    the end of the window they were taken in: an isolate hands back the units of a lease
    that ended unused with its next request, and the window can still take them."""
    late_until: int = 0
    """A sliding window's record: until when units that come back after the window's
    end are still taken, from that window's count (the next window still weighs it)."""

    @property
    def kept_until(self) -> int:
        """Until when the object keeps this record."""
        return max(self.expires_at, self.returnable_until, self.late_until)


class _Holders:
    """The leases outstanding on one limit set, by holder, and the holders' reported rates."""

    __slots__ = ("answered", "by_holder", "ended", "plan", "plan_index", "prune_at", "rates")

    def __init__(self) -> None:
        self.by_holder: dict[str, _Held] = {}
        self.ended: dict[str, _Held] = {}
        """A sliding window's record of a holder's grants in a window that has ended, once
        a grant of the next window took its place (``_Held.late_until``)."""
        self.prune_at = 0
        self.plan: Plan | None = None
        """A sliding window's plan for the window ``plan_index`` (None: no plan)."""
        self.plan_index = -1
        self.answered: set[str] = set()
        """The holders given their allowance of the plan (each gets it once)."""
        self.rates: dict[str, tuple[int, int]] = {}
        """Holder -> (its observed rate in units per second, when it said so)."""


#: A holder's reported rate counts for this many lease ttls after its last lease request
#: (an active holder asks at least once per ttl or window; one that went away stops
#: holding a share of the grants after this).
RATE_MEMORY_TTLS = 3

#: A ttl longer than any window: ``lease_expiry(now, WINDOW_END)`` is the window's end.
WINDOW_END = 1 << 62


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


#: How many of a key's latest admissions its object remembers (see :class:`_Recent`).
RECENT_ADMISSIONS = 1024


class _Recent:
    """The key's latest admissions, ``(time, units)``, whatever limits counted them:
    memory only, at most :data:`RECENT_ADMISSIONS` (a ring, 16 bytes an entry, grown as
    admissions come).

    When the key is counted under other limits than a moment ago (an override set,
    changed or deleted; a deploy that changed the route), each new limit replays what
    the key was admitted within its last windows: it starts from what it would hold had
    it counted them (:meth:`KeyStore._carried`).
    """

    __slots__ = ("costs", "next", "since", "stamps")

    def __init__(self) -> None:
        self.stamps = array("q")
        self.costs = array("q")
        self.next = 0
        """Once full: the slot the next admission overwrites (the oldest)."""
        self.since: int | None = None
        """Every admission after this instant is here (None: not known yet): when the
        object started, or the last admission the ring let go."""

    def add(self, now: int, units: int) -> None:
        stamps = self.stamps
        if len(stamps) < RECENT_ADMISSIONS:
            stamps.append(now)
            self.costs.append(units)
            return
        index = self.next
        gone = stamps[index]
        if self.since is None or gone > self.since:
            self.since = gone
        stamps[index] = now
        self.costs[index] = units
        self.next = index + 1 if index + 1 < RECENT_ADMISSIONS else 0

    def clear(self, now: int) -> None:
        self.stamps = array("q")
        self.costs = array("q")
        self.next = 0
        self.since = now

    def replay(self, algorithm: Algorithm[Any], now: int) -> tuple[Any, bool]:
        """``(state, exact)``: the state ``algorithm`` would hold now had it counted the
        admissions of its last two windows (None: none), and whether every admission of
        that span is remembered (else the state is a lower bound).

        Admissions the limit would have denied were made all the same (under other
        limits): it holds the latest of them that it can, so what it admits next waits
        for those to leave its window, not the earliest.
        """
        after = now - 2 * max(algorithm.window_ms, algorithm.limit.policy_window_ms)
        index = self.next
        stamps, costs = self.stamps, self.costs
        entries = [
            (stamps[i], costs[i])
            for i in (*range(index, len(stamps)), *range(index))
            if after < stamps[i] <= now
        ]
        exact = self.since is not None and self.since <= after
        fits, state = _replayed(algorithm, entries)
        if fits:
            return state, exact
        # The shortest start that fits: a later start leaves more room (binary search).
        low, high = 1, len(entries)
        best: Any = None
        while low <= high:
            middle = (low + high) // 2
            fits, state = _replayed(algorithm, entries[middle:])
            if fits:
                best, high = state, middle - 1
            else:
                low = middle + 1
        return best, exact


def _replayed(algorithm: Algorithm[Any], entries: list[tuple[int, int]]) -> tuple[bool, Any]:
    """Whether ``algorithm`` admits every one of ``entries`` in turn, and its state after."""
    state: Any = None
    check = algorithm.check
    for at, units in entries:
        decision, state = check(state, at, units)
        if not decision.allowed:
            return False, None
    return True, state


def _used(algorithm: Algorithm[Any], state: Any, now: int) -> int:
    """The units ``state`` holds as used now (0 for the fresh state)."""
    if state is None:
        return 0
    standing = algorithm.peek(state, now, 0)
    return standing.limit - standing.remaining


def _ints(values: list[int]) -> str:
    """A list of ints as compact JSON (several times cheaper than ``json.dumps``)."""
    return "[" + ",".join(map(str, values)) + "]"


class KeyStore:
    """Every limit's state for one key: decided in memory, written to ``sql``."""

    def __init__(self, sql: Sql) -> None:
        self.sql = sql
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
        self.compiled: dict[str, _Compiled] = {}
        self.lease_shapes: dict[str, _Compiled] = {}
        """Lease requests compiled by their limits alone (their other fields vary)."""
        self.alarm_at: int | None = None
        """When the cleanup alarm is set for (None: not set by this instance)."""
        self.flush_due: int | None = None
        """Write-behind: when the pending changes must be written (None: nothing pending)."""
        self.cleanup_after_ms = DEFAULT_CLEANUP_AFTER_MS
        """The latest request's cleanup delay."""
        self.leases: dict[tuple[str, ...], _Holders] = {}
        """Limit set (row ids) -> its outstanding leases (memory only)."""
        self.recent = _Recent()
        self.reconciled: tuple[str, ...] = ()
        """The limit set whose rows last took in :attr:`recent` (see :meth:`_carried`)."""
        self.reconciled_exact: frozenset[str] = frozenset()
        """Rows of :attr:`reconciled` whose replay saw every admission of its span."""

    # --- loading ------------------------------------------------------------------------

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
                    self._persist(rid, algorithm, state, _REWRITE, cost=0, now=0)
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

    def _compile_request(
        self, request: StoreRequest, key: str, into: dict[str, _Compiled] | None = None
    ) -> _Compiled:
        try:
            algorithms = tuple(
                make_algorithm(algorithm_of(limit, request.algorithm), limit)
                for limit in request.limits
            )
        except ValueError as exc:  # e.g. a burst for an algorithm that takes none
            raise ProtocolError(str(exc)) from exc
        ids = tuple(
            row_id(algorithm_of(limit, request.algorithm), limit) for limit in request.limits
        )
        for rid, algorithm in zip(ids, algorithms, strict=True):
            self.algorithms.setdefault(rid, algorithm)
        compiled = _Compiled(
            request.op,
            request.cost,
            algorithms,
            ids,
            request.write_behind_ms,
            request.cleanup_after_ms,
            request.stamp,
            request.at,
        )
        cache = self.compiled if into is None else into
        if len(cache) >= MAX_COMPILED:
            cache.clear()
        cache[key] = compiled
        return compiled

    def decide(self, payload: str, now: int) -> str:
        """Run one store request (check, peek, refund or reset); its answer as JSON text.

        Raises :class:`ProtocolError` for a payload that is not a valid request.
        """
        compiled = self.compiled.get(payload)
        if compiled is None:
            request = StoreRequest.from_json(payload)
            if request.op == "lease":
                return self._lease(request, now)
            # A refund of one admission is asked once: not kept among the compiled.
            compiled = self._compile_request(request, payload, {} if request.at else None)
        if not self.loaded:
            self._load()
            # Admissions before this object started are unknown, unless nothing was stored.
            self.recent.since = now if self.states else 0
        self.cleanup_after_ms = compiled.cleanup_after_ms
        algorithms, ids = compiled.algorithms, compiled.ids
        states_map = self.states
        stored = [states_map.get(rid) for rid in ids]
        states: Sequence[Any] = stored
        if len(states_map) > len(ids) - stored.count(None):
            # Rows of other limits of this key (an override set, changed or removed; a
            # deploy that changed the route's limits): their recent use carries over.
            # (What a peek sees is not kept: the replay is done again for the next check.)
            states = self._carried(algorithms, ids, stored, now, keep=compiled.op != "peek")
        op = compiled.op
        if op == "check":
            result = check_all(algorithms, states, now, compiled.cost)
            new_states: Sequence[Any] = result.states
        elif op == "peek":
            # A peek is the check's answer with nothing stored.
            result = check_all(algorithms, states, now, compiled.cost)
            new_states = stored
        else:
            # refund and reset answer for the next single request.
            if op == "refund":
                new_states = refund_all(algorithms, states, now, compiled.cost, compiled.at or None)
            else:
                new_states = [None] * len(algorithms)
                # A fresh allowance: units of leases granted before it may still be used
                # (an operator's reset gives the key more, never less), but not given back
                # into it, which would admit them twice.
                self.leases.pop(tuple(ids), None)
                # The key's rows of other limits go too: their use would carry back, as
                # would the admissions it remembers.
                for rid in [rid for rid in states_map if rid not in ids]:
                    self._drop(rid)
                self.recent.clear(now)
                self.reconciled, self.reconciled_exact = (), frozenset()
            result = peek_all(algorithms, new_states, now, 1)
        answer = _answer(result.decisions, result.decision)
        if op == "check":
            if result.decision.allowed and compiled.cost:
                self.recent.add(now, compiled.cost)
            if compiled.stamp and result.decision.allowed and compiled.cost:
                answer = f'{answer[:-1]},"at":{now}}}'
            if not result.decision.allowed:
                answer = _with_states(answer, algorithms, states, now)
            elif compiled.cost and result.decision.remaining < compiled.cost:
                # Admitted, and the next request like it would be denied now: the states
                # go along, so the isolate's deny cache can answer that next request.
                answer = _with_states(answer, algorithms, new_states, now)
        self._store(compiled, stored, new_states, now, carried=states)
        return answer

    def _carried(
        self,
        algorithms: Sequence[Algorithm[Any]],
        ids: Sequence[str],
        states: Sequence[Any],
        now: int,
        *,
        keep: bool,
    ) -> Sequence[Any]:
        """``states`` with the recent use of the key's other rows carried into them
        (``states`` itself when nothing is carried).

        The same key counted under other limits moments ago (before an override was set,
        changed or deleted, or before a deploy changed the route) has used what it used;
        a limit of the request's set must not start from less. Two measures of it:

        - The admissions the object remembers (:class:`_Recent`, whatever limits counted
          them): when the key comes to this limit set from another, each limit replays
          those of its last windows and starts from that state if it says more is used
          than its own row. Exact while the object has lived through them and they are
          not more than it remembers; a lower bound otherwise (a restart forgets them).
          Once replayed and kept (``keep``: the caller stores the states), the set's rows
          count every admission the replay would, so it is done once per change of set,
          not per request.
        - The other rows, for a limit whose replay did not see every admission of its
          span (the object restarted within it, or forgot the oldest): what a row of
          window ``w`` holds was used within ``w``, so it is at most what was used within
          any longer window: a limit takes the most used (up to its capacity) among the
          other rows whose window is no longer than its own, when that is more than its
          own row says, as used now. (A row of a longer window is left to the replay: its
          use may be older than this limit's window.)
        """
        out: list[Any] | None = None
        exact = self.reconciled_exact
        if tuple(ids) != self.reconciled:
            seen_all = set()
            for index, algorithm in enumerate(algorithms):
                replayed, whole = self.recent.replay(algorithm, now)
                if whole:
                    seen_all.add(ids[index])
                if replayed is not None and _used(algorithm, replayed, now) > _used(
                    algorithm, states[index], now
                ):
                    if out is None:
                        out = list(states)
                    out[index] = replayed
            exact = frozenset(seen_all)
            if keep:
                self.reconciled, self.reconciled_exact = tuple(ids), exact
        ids_set = set(ids)
        others: list[tuple[int, int]] = []  # (window, units used now)
        for rid, state in self.states.items():
            if rid in ids_set or state is None:
                continue
            other = self._algorithm_for(rid)
            if other is None:
                continue
            used = _used(other, state, now)
            if used > 0:
                others.append((other.window_ms, used))
        if not others:
            return states if out is None else out
        for index, algorithm in enumerate(algorithms):
            if ids[index] in exact:
                # Its replay saw every admission of its span: it holds all the use there
                # is (seeding the others' use as of now would only push its wait later).
                continue
            used = max(
                (units for window, units in others if window <= algorithm.window_ms), default=0
            )
            used = min(used, algorithm.capacity)
            if used <= 0:
                continue
            own = states[index] if out is None else out[index]
            if _used(algorithm, own, now) >= used:
                continue
            decision, seeded = algorithm.check(None, now, used)
            if decision.allowed:
                if out is None:
                    out = list(states)
                out[index] = seeded
        return states if out is None else out

    def _store(
        self,
        compiled: _Compiled,
        states: Sequence[Any],
        new_states: Sequence[Any],
        now: int,
        *,
        at_once: bool = False,
        carried: Sequence[Any] | None = None,
    ) -> None:
        """Keep the changed states in memory and write them (now, or write-behind unless
        ``at_once``). ``carried``: the states the request was decided from, where other
        limits' use was carried into some (:meth:`_carried`); a log such a state seeded is
        written whole, not as one entry added."""
        algorithms, ids, op = compiled.algorithms, compiled.ids, compiled.op
        states_map = self.states
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
                change = (
                    _ADD
                    if algorithm.logged
                    and op == "check"
                    and (carried is None or carried[index] is old)
                    else _REWRITE
                )
            if immediate:
                self._persist(rid, algorithm, new, change, cost=compiled.cost, now=now)
            else:
                self._pend(rid, new, change, compiled.cost)
        if changed and not immediate:
            if self.flush_due is None:
                self.flush_due = now + compiled.write_behind_ms
            elif now >= self.flush_due:
                self._write(now)

    # --- leases -------------------------------------------------------------------------

    def _lease(self, request: StoreRequest, now: int) -> str:
        """Op ``lease``: take the holder's returns back, then grant what the planner sizes.

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
            compiled = self._compile_request(request, shape, self.lease_shapes)
        ids = compiled.ids
        algorithms = tuple(a for a in compiled.algorithms if isinstance(a, Leasable))
        for algorithm in compiled.algorithms:
            if not isinstance(algorithm, Leasable):
                raise ProtocolError(f"algorithm {algorithm.name!r} cannot lease")
        if not self.loaded:
            self._load()
            # Admissions before this object started are unknown, unless nothing was stored.
            self.recent.since = now if self.states else 0
        self.cleanup_after_ms = compiled.cleanup_after_ms
        ttl, min_units = request.lease_ttl_ms, request.min_units
        holders = self.leases.get(ids)
        if holders is None:
            holders = self.leases[ids] = _Holders()
        by_holder = holders.by_holder
        rates = holders.rates
        planned = plans(
            algorithms[0].lease_plans, [algorithm.rate.window_ms for algorithm in algorithms], ttl
        )
        if now >= holders.prune_at:
            for records in (by_holder, holders.ended):
                for holder, lease in list(records.items()):
                    if lease.kept_until <= now:
                        del records[holder]
            memory = RATE_MEMORY_TTLS * ttl
            if planned:
                # A holder in a window's plan asks once a window: its rate lasts two.
                memory = max(memory, 2 * algorithms[0].rate.window_ms)
            forget_before = now - memory
            for holder, (_, seen_at) in list(rates.items()):
                if seen_at < forget_before:
                    del rates[holder]
            holders.prune_at = now + ttl
        if request.observed_rate:
            rates[request.holder] = (request.observed_rate, now)
        held_states = [self.states.get(rid) for rid in ids]
        states: Sequence[Any] = held_states
        if len(self.states) > len(ids) - held_states.count(None):
            # As for a check (a denied lease keeps nothing: the replay is done again).
            states = self._carried(algorithms, ids, states, now, keep=False)
        current: Sequence[Any] = states
        held = by_holder.pop(request.holder, None)
        if held is not None and now >= held.kept_until:
            held = None
        windows = all(algorithm.lease_records_merge for algorithm in algorithms)
        if windows and held is not None and now >= held.returnable_until:
            # Its window has ended: nothing merges into it; its units may still come
            # back (see ``_Held.late_until``), whatever this request gets.
            if held.units > 0:
                holders.ended[request.holder] = held
            held = None
        record, ended = held, False
        if (
            windows
            and request.returned
            and (held is None or held.returnable_until != request.returned_until)
        ):
            # Units of a window that ended, whose record a grant of the next one replaced.
            record, ended = holders.ended.get(request.holder), True
            if record is not None and now >= record.kept_until:
                record = None
        if (
            record is not None
            and request.returned
            and (not windows or request.returned_until == record.returnable_until)
        ):
            back = min(request.returned, record.units)
            for algorithm in algorithms:
                back = algorithm.lease_refundable(record.units, back, record.granted_at, now)
            at = None
            if windows and now >= record.returnable_until:
                # Units of a window that has ended (a lease that ended unused, handed
                # back with the holder's first request since): taken from that window's
                # count, which a sliding window still weighs, when every limit counted
                # them in the window ending then.
                at = record.returnable_until - 1
                if any(
                    record.granted_at // algorithm.rate.window_ms != at // algorithm.rate.window_ms
                    for algorithm in algorithms
                ):
                    back = 0
            if back > 0:
                current = refund_all(algorithms, current, now, back, at)
                record = record._replace(units=record.units - back)
                if ended:
                    holders.ended[request.holder] = record
                else:
                    held = record
        if planned:
            answer = self._planned(
                request, compiled, algorithms[0], holders, states=states, current=current, now=now
            )
            if isinstance(answer, str):
                return answer
            states = list(answer)
            current = states
        expires_at = min(algorithm.lease_expiry(now, ttl) for algorithm in algorithms)
        # A lease cut short (a window ends first) is worth that much less of the rate.
        wanted = max(min_units, -(-request.cost * (expires_at - now) // ttl))
        grantable = min(
            algorithm.grantable(state, now, ttl)
            for algorithm, state in zip(algorithms, current, strict=True)
        )
        others: int | None = None
        if request.observed_rate:
            # What the other holders will ask for before this lease ends: each one's rate
            # over the part of [now, expires_at) its own live lease does not cover.
            demand = 0
            for holder, (rate, _) in rates.items():
                if holder == request.holder:
                    continue
                other = by_holder.get(holder)
                covered_to = now if other is None else max(now, other.expires_at)
                if covered_to < expires_at:
                    demand += rate * (expires_at - covered_to)
            others = -(-demand // 1000)
        live = sum(1 for other in by_holder.values() if other.expires_at > now)
        until_end = min(algorithm.lease_expiry(now, WINDOW_END) for algorithm in algorithms)
        plenty = False
        if others is not None and windows and expires_at == until_end:
            # A window's lease, cut by its end: if what grows until then covers every
            # holder's demand, nobody is short, and the holder takes what is there now
            # and asks again when it runs low (rationing it would deny requests the
            # window has room for).
            growth = min(
                algorithm.lease_growth(state, now)
                for algorithm, state in zip(algorithms, current, strict=True)
            )
            plenty = wanted + others <= grantable + growth * (expires_at - now)
        granted = grant_size(wanted, grantable, live + 1, min_units, others)
        if granted >= min_units:
            result = check_all(algorithms, current, now, granted)
            if not result.decision.allowed:
                raise StateError(f"a grant of {granted} within {grantable} was denied")
            self.recent.add(now, granted)
            until = 0
            if windows:
                # The windows keep one record per holder of every grant of the window
                # (Algorithm.lease_records_merge), returnable until the window's end (the
                # shortest of the limits'); the buckets only the last grant. A record of an
                # earlier window is not merged into (its units are spent).
                until = until_end
                # Units that come back after that still count while any limit's count
                # of them matters (see ``_Held.late_until``): until the end of a longer
                # limit's window (a route's hour beside its minute), and a sliding
                # window's next window, which weighs this one.
                late = max(
                    (now // algorithm.rate.window_ms + 1) * algorithm.rate.window_ms
                    + (algorithm.rate.window_ms if algorithm.lease_late_returns else 0)
                    for algorithm in algorithms
                )
                if held is not None and held.returnable_until == until:
                    by_holder[request.holder] = _Held(
                        held.units + granted,
                        held.granted_at,
                        max(expires_at, held.expires_at),
                        until,
                        late,
                    )
                else:
                    by_holder[request.holder] = _Held(granted, now, expires_at, until, late)
            else:
                # Kept past its end: units of a lease that ended unused come back with
                # the holder's next request, refunded as far as the refill since the
                # grant has not overtaken them (``lease_refundable``), so until then.
                overtaken = min(
                    now + -(-granted * algorithm.rate.window_ms // algorithm.rate.quota)
                    for algorithm in algorithms
                )
                by_holder[request.holder] = _Held(
                    granted, now, expires_at, late_until=max(expires_at, overtaken)
                )
            # The reserve is not lent to anyone: none of it is "remaining" (the isolate's
            # headers add the units it holds to this figure).
            lent = tuple(
                d._replace(remaining=max(0, d.remaining - algorithm.lease_reserve(ttl)))
                for algorithm, d in zip(algorithms, result.decisions, strict=True)
            )
            answer = _answer(lent, result.decision)
            # A rationed holder waits for its lease's end when nothing grows grantable
            # meanwhile (a fixed window), or when the lease ends by its ttl (a bucket's,
            # or a long window's), not by its window's end. Else (a sliding window's
            # lease cut by its window's end, while the previous window slides out) it is
            # paced: it asks again after part of a ttl, so the holders share the growth a
            # few times a window, not one unit per call. (Not rationed at all when the
            # growth covers everyone: ``plenty``.)
            rationed = ""
            if granted < wanted and not plenty:
                waits = expires_at != until_end or not any(
                    algorithm.lease_supply_grows for algorithm in algorithms
                )
                if waits:
                    rationed = ',"rn":1'
                else:
                    # The growth that matters is that of the limits short of units: a
                    # route's hour with plenty left (and nothing sliding out of it) must
                    # not hold back the asks its second's growth allows.
                    pairs = list(zip(algorithms, result.states, strict=True))
                    short = [
                        (algorithm, state)
                        for algorithm, state in pairs
                        if algorithm.grantable(state, now, ttl) < PACE_UNITS
                    ]
                    growth, binding = min(
                        (
                            (algorithm.lease_growth(state, now), algorithm)
                            for algorithm, state in short or pairs
                        ),
                        key=lambda pair: pair[0],
                    )
                    total = sum(rate for rate, _ in rates.values())
                    mine = request.observed_rate
                    share = mine / total if mine and total else 1 / (live + 1)
                    # A small limit grows by few units a window: ask for a tenth of it.
                    units = max(1, min(PACE_UNITS, binding.rate.quota // 10))
                    ask_at = min(expires_at, now + pace_ms(growth, share, units))
                    rationed = f',"rn":2,"na":{ask_at}'
            returnable = f',"ru":{until}' if until else ""
            if rationed:
                # When a lease of min_units could be granted again, the reserve kept: the
                # holder's denials until then say that, not when it may ask.
                wait = max(
                    algorithm.peek(state, now, min_units + algorithm.lease_reserve(ttl)).retry_after
                    for algorithm, state in zip(algorithms, result.states, strict=True)
                )
                if wait > 0:
                    rationed += f',"gw":{wait}'
            answer = f'{answer[:-1]},"g":{granted},"x":{expires_at}{rationed}{returnable}}}'
            self._store(compiled, states, result.states, now)
            return answer
        if windows and held is not None and held.units > 0:
            by_holder[request.holder] = held  # what it still holds may come back later
        # Denied: each limit answers for the least it could grant (with its reserve), so
        # retry_after says when a lease of min_units could be granted.
        decisions = []
        for algorithm, state in zip(algorithms, current, strict=True):
            reserve = algorithm.lease_reserve(ttl)
            decision = algorithm.peek(state, now, min_units + reserve)
            if decision.allowed:
                decision = algorithm.peek(state, now, 0)
            else:
                # The reserve is not this holder's to use: none of it is "remaining".
                decision = decision._replace(remaining=max(0, decision.remaining - reserve))
            decisions.append(decision)
        answer = _with_states(_answer(decisions, combine(decisions)), algorithms, current, now)
        self._store(compiled, states, current, now)
        return answer

    def _planned(
        self,
        request: StoreRequest,
        compiled: _Compiled,
        algorithm: Leasable[Any],
        holders: _Holders,
        *,
        states: Sequence[Any],
        current: Sequence[Any],
        now: int,
    ) -> str | Sequence[Any]:
        """A sliding window's plan (:mod:`.lease_plan`): the answer for a holder in this
        window's plan, or the states to go on with (the plan, made at the window's first
        lease request, is counted in them and stored at once).

        Each holder gets its allowance once: its isolate counts its uses against it, and
        an isolate that lost track of them (its answer lost, its holding dropped) must not
        start over. A holder asking again in the window gets what the plan left, like a
        holder the plan does not know: an answer lost on the way costs that isolate the
        rest of the window, never an admission over the limit.
        """
        window = algorithm.rate.window_ms
        index = now // window
        if holders.plan_index != index:
            holders.plan_index = index
            holders.plan = None
            holders.answered.clear()
            counted, previous = algorithm.plan_counts(current[0], now)
            rates = {holder: rate for holder, (rate, _) in holders.rates.items()}
            plan = plan_window(
                now,
                window,
                algorithm.rate.quota,
                current=counted,
                previous=previous,
                rates=rates,
            )
            if plan is not None:
                holders.plan = plan
                committed = [algorithm.plan_commit(current[0], now, plan.committed)]
                taken = _used(algorithm, committed[0], now) - _used(algorithm, current[0], now)
                if taken > 0:
                    self.recent.add(now, taken)
                # Written at once even on a write-behind route: a restart that lost it
                # would plan the window's room again (write-behind's bound is a few ms of
                # admissions, not a window's).
                self._store(compiled, states, committed, now, at_once=True)
                states = current = committed
        plan = holders.plan
        allowance = None if plan is None else plan.allowances.get(request.holder)
        if allowance is None or request.holder in holders.answered:
            return current
        holders.answered.add(request.holder)
        if current[0] is not states[0]:
            self._store(compiled, states, current, now)
        decision = algorithm.peek(current[0], now, 0)
        if not decision.allowed:  # the plan's count runs ahead of the estimate: none left
            decision = decision._replace(allowed=True, remaining=0, retry_after=0, reason=None)
        answer = _answer((decision,), decision)
        listed = json.dumps(allowance.to_list(), separators=(",", ":"))
        return f'{answer[:-1]},"g":{allowance.final},"x":{allowance.end},"rn":1,"pl":{listed}}}'

    # --- writing ------------------------------------------------------------------------

    def _persist(
        self, rid: str, algorithm: Algorithm[Any], state: Any, change: int, *, cost: int, now: int
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
                self._persist(rid, algorithm, state, _REWRITE, cost=0, now=now)
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
        if not self.loaded:
            self._load()
            # Admissions before this object started are unknown, unless nothing was stored.
            self.recent.since = now if self.states else 0
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


def _answer(decisions: Sequence[Decision], combined: Decision) -> str:
    """The answer's JSON text (see :class:`~edge_limiter.core.ratelimit.protocol.StoreResponse`)."""
    del combined  # the caller combines the per-limit decisions itself
    parts = [
        f"[{'true' if d.allowed else 'false'},{d.limit},{d.remaining},"
        f"{d.reset_after},{d.retry_after}]"
        for d in decisions
    ]
    return '{"ds":[' + ",".join(parts) + "]}"


def _with_states(
    answer: str, algorithms: Sequence[Algorithm[Any]], states: Sequence[Any], now: int
) -> str:
    """Add the key's states as of the answer, when small, for the isolate's deny cache."""
    states = [
        None if state is None else algorithm.live(state, now)
        for algorithm, state in zip(algorithms, states, strict=True)
    ]
    size = 0
    for algorithm, state in zip(algorithms, states, strict=True):
        if state is not None:
            size += algorithm.encoded_len(state)
    if size > MAX_SHARED_STATE_INTS:
        return answer
    rows = [
        None if state is None else algorithm.encode(state)
        for algorithm, state in zip(algorithms, states, strict=True)
    ]
    return answer[:-1] + ',"st":' + json.dumps(rows, separators=(",", ":")) + "}"
