"""The Durable Objects in memory: each object's logic class over the standard library's
SQLite, called through its methods' codec, as the runtime's binding calls the deployed
object (:mod:`edge_limiter.core.objects`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ..core.control import (
    CONTROL_OBJECT,
    OVERRIDES,
    STATS,
    OverridesAnswer,
    OverridesCall,
    SharedControl,
    StatsAnswer,
    StatsCall,
)
from ..core.idempotency.protocol import CALL, IdempotencyAnswer, IdempotencyCall, RecordStore
from ..core.objects import Ans, Method, Req, Sql, call_text, call_typed
from ..core.ratelimit.keystore import KeyStore
from ..core.ratelimit.protocol import DECIDE, StoreRequest, StoreResponse
from ..core.resilience.breaker import BreakerState
from ..core.resilience.shared import SYNC, SharedBreaker, SyncCall
from .platform import ManualClock

Logic = TypeVar("Logic")


class SqliteSql:
    """A Durable Object's SQL API over the standard library's sqlite3 (one database)."""

    def __init__(self, path: str = ":memory:") -> None:
        import sqlite3  # noqa: PLC0415 - CPython only; never imported by the Worker

        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.statements: list[str] = []

    def run(self, query: str, *args: Any) -> None:
        self.statements.append(query)
        self.db.execute(query, args)

    def rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        self.statements.append(query)
        return [dict(row) for row in self.db.execute(query, args)]


class NoRows:
    """A Durable Object's SQL API that keeps nothing: every write goes nowhere and every
    read finds no rows. For logic whose memory is the truth while the object lives (the
    rate limiter's :class:`KeyStore`) when nothing needs to outlive the run: the
    simulator's ``keep_rows=False``, which the replay uses to hold 100,000 keys in memory
    where an SQLite database each would not fit."""

    __slots__ = ()

    def run(self, query: str, *args: Any) -> None:
        del query, args

    def rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        del query, args
        return []


_NO_ROWS = NoRows()


class MemoryObjects(Generic[Logic]):
    """Durable Objects of one class in memory: one instance of the object's logic per
    name, over its own SQLite (:class:`SqliteSql`), each call written and read through
    its method's codec (:class:`~edge_limiter.core.objects.Method`) as the runtime's
    binding does: the very logic and codec the deployed objects run.

    ``codec=False`` hands the typed messages to the logic's typed step instead, where the
    method has one (:attr:`~edge_limiter.core.objects.Method.typed`): the same answers
    without writing and reading the text, for a long run (the replay). The tests keep the
    codec on, and check that both agree."""

    def __init__(
        self,
        clock: ManualClock,
        logic: Callable[[Sql], Logic],
        sql: Callable[[], Sql] = SqliteSql,
        *,
        codec: bool = True,
    ) -> None:
        self.clock = clock
        self.logic = logic
        self.sql = sql
        self.codec = codec
        self.objects: dict[str, Logic] = {}

    def object(self, name: str) -> Logic:
        """The object named ``name`` (made on its first call, as the runtime does)."""
        found = self.objects.get(name)
        if found is None:
            found = self.objects[name] = self.logic(self.sql())
        return found

    def ask(self, name: str, method: Method[Req, Ans], request: Req) -> Ans:
        """``method`` on the object named ``name``, at the clock's time."""
        if not self.codec:
            return call_typed(self.object(name), method, request, self.clock.now)
        text = call_text(self.object(name), method, method.encode(request), self.clock.now)
        return method.decode(text, request)


class MemoryStore(MemoryObjects[KeyStore]):
    """The rate limiter's Durable Objects: a :class:`KeyStore` per object name (over
    :class:`NoRows` when ``keep_rows`` is false: memory only)."""

    def __init__(self, clock: ManualClock, *, keep_rows: bool = True, codec: bool = True) -> None:
        if keep_rows:
            super().__init__(clock, KeyStore, SqliteSql, codec=codec)
        else:
            super().__init__(clock, _memory_only, _no_rows, codec=codec)
        self.calls: list[str] = []

    def evict_idle(self) -> int:
        """Drop every object whose rows are all idle at the clock's time, with nothing
        pending (no write-behind, no outstanding lease), as the platform's alarm and
        eviction would: such an object, made afresh, decides the same. How many went."""
        now = self.clock.now
        idle = [
            name
            for name, store in self.objects.items()
            if store.flush_due is None
            and not store.dirty
            and not store.grants.by_limits
            and all(at <= now for at in store.idle.values())
        ]
        for name in idle:
            del self.objects[name]
        return len(idle)

    async def call(self, name: str, request: StoreRequest, timeout_ms: int = 0) -> StoreResponse:
        del timeout_ms
        self.calls.append(name)
        return self.ask(name, DECIDE, request)


def _no_rows() -> Sql:
    return _NO_ROWS


def _memory_only(sql: Sql) -> KeyStore:
    """A key's object that keeps its counters in memory only: over :class:`NoRows`, what
    it would write is not even encoded."""
    return KeyStore(sql, durable=False)


class MemoryIdempotency(MemoryObjects[RecordStore]):
    """The idempotency records' Durable Objects: a :class:`RecordStore` per object name
    (``failing``: every call fails, as an overloaded object's would)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock, RecordStore)
        self.calls: list[tuple[str, str]] = []
        self.failing = False

    async def call(
        self, name: str, call: IdempotencyCall, timeout_ms: int = 0
    ) -> IdempotencyAnswer:
        del timeout_ms
        self.calls.append((name, call.op))
        if self.failing:
            raise RuntimeError("Durable Object overloaded")
        return self.ask(name, CALL, call)


class MemoryBreakers(MemoryObjects[SharedBreaker]):
    """The origins' shared breakers (Durable Objects): a :class:`SharedBreaker` per origin
    (``failing``: every sync fails, as an unreachable object's would)."""

    def __init__(self, clock: ManualClock | None = None, *, codec: bool = True) -> None:
        super().__init__(clock or ManualClock(), SharedBreaker, codec=codec)
        self.calls: list[str] = []
        self.failing = False

    async def sync(self, name: str, call: SyncCall) -> BreakerState:
        self.calls.append(name)
        if self.failing:
            raise RuntimeError("breaker Durable Object unreachable")
        return self.ask(name, SYNC, call)


class MemoryControl(MemoryObjects[SharedControl]):
    """The Control Durable Object (overrides, counters): one :class:`SharedControl`."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock, SharedControl)
        self.calls: list[str] = []

    async def overrides(self, call: OverridesCall) -> OverridesAnswer:
        self.calls.append("overrides")
        return self.ask(CONTROL_OBJECT, OVERRIDES, call)

    async def stats(self, call: StatsCall) -> StatsAnswer:
        self.calls.append("stats")
        return self.ask(CONTROL_OBJECT, STATS, call)
