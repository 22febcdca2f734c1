"""The runtime shells (``durable_objects/``, over ``platform/storage.py``) and the
in-memory twins (``edge_limiter.testing``) drive the same logic through the same codec:
the same calls give the same answers and leave the same rows.

The shells run here on CPython over a stand-in of the runtime (``workers``, ``pyodide``,
``js`` and a ``ctx.storage`` whose SQL is the standard library's SQLite, answering as the
runtime does); the end-to-end tests run them on workerd itself.
"""

from __future__ import annotations

import asyncio
import importlib
import sqlite3
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from edge_limiter.core.control import OVERRIDES, STATS, OverridesCall, StatsCall
from edge_limiter.core.errors import ProtocolError
from edge_limiter.core.idempotency.protocol import CALL, IdempotencyCall
from edge_limiter.core.idempotency.records import StoredResponse
from edge_limiter.core.objects import Method
from edge_limiter.core.ratelimit.overrides import parse_override
from edge_limiter.core.ratelimit.protocol import DECIDE, StoreRequest
from edge_limiter.core.ratelimit.rates import Limit, Rate
from edge_limiter.core.resilience.breaker import BreakerSettings, Outcome, Report
from edge_limiter.core.resilience.shared import SYNC, SyncCall
from edge_limiter.core.stats import StatsBatch
from edge_limiter.testing import (
    ManualClock,
    MemoryBreakers,
    MemoryControl,
    MemoryIdempotency,
    MemoryStore,
)

T0 = 1_700_000_000_000
LIMITS = (Limit(Rate(3, 1_000)), Limit(Rate(5, 60_000)))


class _Cursor:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def toArray(self) -> list[dict[str, Any]]:
        return self.rows


class _Done:
    """What the runtime's ``setAlarm`` returns: a promise, awaited or not."""

    def __await__(self) -> Iterator[None]:
        return iter(())


class _Storage:
    """``ctx.storage``: SQL on SQLite, the alarms set kept for the test to read."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.sql = types.SimpleNamespace(exec=self._exec)
        self.alarms: list[int] = []

    def _exec(self, query: str, *args: Any) -> _Cursor:
        return _Cursor([dict(row) for row in self.db.execute(query, args)])

    def setAlarm(self, at: int) -> _Done:
        self.alarms.append(at)
        return _Done()


class _DurableObject:
    def __init__(self, ctx: Any, env: Any) -> None:
        self.ctx, self.env = ctx, env


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[ManualClock]:
    """The runtime's modules stood in for; the shells' clock is the returned one."""
    ffi = types.ModuleType("pyodide.ffi")
    ffi.JsException = type("JsException", (Exception,), {})  # type: ignore[attr-defined]
    ffi.jsnull = object()  # type: ignore[attr-defined]
    ffi.create_proxy = ffi.to_js = lambda value, **_: value  # type: ignore[attr-defined]
    pyodide = types.ModuleType("pyodide")
    pyodide.ffi = ffi  # type: ignore[attr-defined]
    workers = types.ModuleType("workers")
    workers.DurableObject = _DurableObject  # type: ignore[attr-defined]
    stand_ins = {"pyodide": pyodide, "pyodide.ffi": ffi, "js": types.ModuleType("js")}
    for name, module in {**stand_ins, "workers": workers}.items():
        monkeypatch.setitem(sys.modules, name, module)
    before = set(sys.modules)
    clock = ManualClock(T0)
    storage = importlib.import_module("edge_limiter.platform.storage")
    monkeypatch.setattr(storage.time, "time", lambda: clock.now / 1000)
    yield clock
    for name in set(sys.modules) - before:  # built on the stand-ins: not for other tests
        if name.startswith(("edge_limiter.platform", "durable_objects")):
            del sys.modules[name]


def shell(module: str, name: str) -> tuple[Any, _Storage]:
    cls = getattr(importlib.import_module(f"durable_objects.{module}"), name)
    storage = _Storage()
    return cls(types.SimpleNamespace(storage=storage), None), storage


def rows(db: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return {
        table: sorted(map(tuple, db.execute(f"SELECT * FROM {table}"))) for table in sorted(tables)
    }


def run(value: Any) -> Any:
    return asyncio.run(value) if asyncio.iscoroutine(value) else value


def through(method: Method[Any, Any], rpc: Any, request: Any) -> Any:
    """A call to a shell's RPC method as the binding makes it."""
    try:
        return method.decode(str(run(rpc(method.encode(request)))), request)
    except ProtocolError as exc:
        return exc.args


def test_the_rate_limiter_and_its_twin_answer_alike(runtime: ManualClock) -> None:
    limiter, storage = shell("rate_limiter", "RateLimiter")
    twin = MemoryStore(runtime)
    requests = [
        StoreRequest("check", "fixed_window", LIMITS),
        StoreRequest("check", "gcra", LIMITS, 2, stamp=True),
        StoreRequest("peek", "fixed_window", LIMITS),
        StoreRequest("refund", "fixed_window", LIMITS, at=T0 + 1),
        StoreRequest("lease", "fixed_window", LIMITS, 2, lease_ttl_ms=300, holder="iso"),
        StoreRequest("check", "sliding_log", LIMITS),
        StoreRequest("reset", "gcra", LIMITS),
        StoreRequest("lease", "sliding_log", LIMITS, 1, lease_ttl_ms=300, holder="iso"),
    ]
    for step in range(30):
        request = requests[step % len(requests)]
        runtime.advance(37)
        ours = through(DECIDE, limiter.decide, request)
        try:
            theirs = asyncio.run(twin.call("k", request))
        except ProtocolError as exc:
            theirs = exc.args
        assert ours == theirs, (step, request.op)
    assert rows(storage.db) == rows(twin.object("k").sql.db)
    # The shell armed the cleanup alarm its key store asked for, once.
    assert storage.alarms == [limiter.store.alarm_at] and storage.alarms[0] > T0
    runtime.advance(120_000)
    run(limiter.alarm())
    twin.object("k").cleanup(runtime.now)
    assert rows(storage.db) == rows(twin.object("k").sql.db) == {"limits": [], "log": []}


def test_the_idempotency_records_and_their_twin_answer_alike(runtime: ManualClock) -> None:
    records, storage = shell("idempotency", "IdempotencyRecords")
    twin = MemoryIdempotency(runtime)
    response = StoredResponse(201, (("content-type", "application/json"),), b"{}")
    claim = IdempotencyCall("claim", "fp", lock_timeout_ms=1_000, retention_ms=60_000)
    answers = []
    for call in (claim, claim, IdempotencyCall("get")):
        runtime.advance(10)
        ours = through(CALL, records.call, call)
        assert ours == asyncio.run(twin.call("r", call))
        answers.append(ours)
    done = IdempotencyCall("complete", token=answers[0].token, response=response)
    assert through(CALL, records.call, done) == asyncio.run(twin.call("r", done))
    assert rows(storage.db) == rows(twin.object("r").record.sql.db)
    # Armed when the record may first go, moved on as it lives longer; deleted then.
    assert len(storage.alarms) == 2 and storage.alarms[-1] == twin.object("r").alarm_at
    runtime.now = storage.alarms[-1]
    run(records.alarm())
    twin.object("r").alarm(runtime.now)
    assert rows(storage.db) == rows(twin.object("r").record.sql.db) == {"record": []}


def test_the_breaker_and_its_twin_answer_alike(runtime: ManualClock) -> None:
    breaker, storage = shell("breaker", "OriginBreaker")
    twin = MemoryBreakers(runtime)
    settings = BreakerSettings(failure_rate=50, window=4, min_calls=4, open_for_ms=10_000)
    for n in range(6):
        call = SyncCall(settings, (Report(T0 + n, Outcome.FAILURE),))
        assert through(SYNC, breaker.sync, call) == asyncio.run(twin.sync("eu", call))
    assert rows(storage.db) == rows(twin.object("eu").state.sql.db)


def test_the_control_object_and_its_twin_answer_alike(runtime: ManualClock) -> None:
    control, storage = shell("control", "Control")
    twin = MemoryControl(runtime)
    override = parse_override(
        {"route": "api", "key": "k", "limits": "9/minute"}, T0, {"api": "fixed_window"}
    )
    batch = StatsBatch({"api": {"allowed": 2, "limited": 1}}, {"api|h": 1})
    for call in (
        OverridesCall("put", override),
        OverridesCall("list"),
        OverridesCall("delete", id="nobody"),
    ):
        assert through(OVERRIDES, control.overrides, call) == asyncio.run(twin.overrides(call))
    for stats in (StatsCall.add(batch, T0), StatsCall("get")):
        assert through(STATS, control.stats, stats) == asyncio.run(twin.stats(stats))
    assert rows(storage.db) == rows(twin.object("control").stored_stats.sql.db)
