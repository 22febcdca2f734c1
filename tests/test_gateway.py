"""The gateway flow on CPython, with an in-memory store that runs the real protocol.

The store below does what the Durable Object does (load rows, ``apply``, write back) with
an injected clock, so routing, keys, shadow mode and failure policies are checked here
without the runtime; tests/e2e runs the same flow on real workerd.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from edge_limiter.core.config import parse_config
from edge_limiter.core.protocol import StoreRequest, apply
from edge_limiter.core.request import RequestView
from edge_limiter.gateway import Gateway, Verdict


class MemoryStore:
    """Durable Objects in a dict: one row table per object name."""

    def __init__(self) -> None:
        self.now = 1_000_000
        self.objects: dict[str, dict[str, list[int]]] = {}
        self.calls: list[str] = []

    async def call(self, name: str, payload: str) -> str:
        self.calls.append(name)
        rows = self.objects.setdefault(name, {})
        result = apply(StoreRequest.from_json(payload), rows, self.now)
        for rid, (state, _idle) in result.writes.items():
            rows[rid] = state
        for rid in result.deletes:
            rows.pop(rid, None)
        return result.response.to_json()


class FailingStore:
    async def call(self, name: str, payload: str) -> str:
        raise RuntimeError("Durable Object reset")


class HangingStore:
    async def call(self, name: str, payload: str) -> str:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def gateway(store: Any, *routes: dict[str, Any], **top: Any) -> Gateway:
    raw = {"origin": "http://origin.test", "routes": list(routes), **top}
    return Gateway(parse_config(raw), store)


def req(
    path: str = "/v1/x", method: str = "GET", ip: str = "198.51.100.7", **kw: Any
) -> RequestView:
    return RequestView(method=method, path=path, host="api.test", client_ip=ip, **kw)


def decide(gw: Gateway, request: RequestView) -> Verdict:
    return asyncio.run(gw.decide(request))


ROUTE = {
    "name": "api",
    "match": {"path": "/v1/*"},
    "limits": "3/minute",
    "algorithm": "sliding_log",
}


def test_allows_up_to_the_limit_then_429_with_headers_and_problem_body() -> None:
    store = MemoryStore()
    gw = gateway(store, ROUTE)
    verdicts = [decide(gw, req()) for _ in range(4)]
    assert [v.action for v in verdicts] == ["forward", "forward", "forward", "respond"]
    assert [dict(v.headers)["X-RateLimit-Remaining"] for v in verdicts] == ["2", "1", "0", "0"]
    denied = verdicts[-1]
    assert denied.status == 429
    headers = dict(denied.headers)
    assert headers["Retry-After"] == "60"
    assert headers["RateLimit-Policy"] == '"3-per-minute";q=3;w=60'
    assert denied.body is not None
    assert denied.body["violated-policies"] == ["3-per-minute"]
    store.now += 60_000
    assert decide(gw, req()).action == "forward"


def test_keys_are_independent_and_forwarded_for_is_ignored() -> None:
    store = MemoryStore()
    gw = gateway(store, ROUTE)
    for _ in range(3):
        decide(gw, req(headers={"x-forwarded-for": "10.0.0.1"}))
    spoofed = decide(gw, req(headers={"x-forwarded-for": "10.9.9.9"}))
    assert spoofed.status == 429
    assert decide(gw, req(ip="198.51.100.8")).action == "forward"
    assert len(set(store.calls)) == 2


def test_unmatched_requests_pass_without_a_store_call() -> None:
    store = MemoryStore()
    verdict = decide(gateway(store, ROUTE), req(path="/health"))
    assert verdict.action == "forward" and verdict.origin == "http://origin.test"
    assert verdict.headers == [] and store.calls == []


def test_unmatched_without_default_origin_is_a_clear_404() -> None:
    route = {**ROUTE, "origin": "http://only.test"}
    verdict = decide(Gateway(parse_config({"routes": [route]}), MemoryStore()), req(path="/x"))
    assert verdict.status == 404 and verdict.body is not None
    assert "No route matches GET /x" in verdict.body["detail"]


def test_shadow_route_counts_but_never_blocks() -> None:
    store = MemoryStore()
    gw = gateway(store, {**ROUTE, "shadow": True})
    verdicts = [decide(gw, req()) for _ in range(5)]
    assert all(v.action == "forward" for v in verdicts)
    last = dict(verdicts[-1].headers)
    assert last["X-EdgeLimiter-Reason"] == "shadow"
    assert last["X-RateLimit-Remaining"] == "0"
    assert "Retry-After" not in last
    assert verdicts[-1].log is not None and verdicts[-1].log["event"] == "shadow_limited"


def test_multiple_limits_and_cost() -> None:
    store = MemoryStore()
    route = {**ROUTE, "limits": "4/second; 6/minute", "algorithm": "fixed_window", "cost": 2}
    gw = gateway(store, route)
    assert [decide(gw, req()).action for _ in range(3)] == ["forward", "forward", "respond"]
    store.now += 1_000  # the second limit (4/s) refills, the minute one does not
    third = decide(gw, req())
    assert third.action == "forward"
    assert dict(third.headers)["X-RateLimit-Remaining"] == "0"
    fourth = decide(gw, req())
    assert fourth.status == 429 and fourth.body is not None
    assert fourth.body["violated-policies"] == ["6-per-minute"]


@pytest.mark.parametrize("store", [FailingStore(), HangingStore()])
def test_fail_open_forwards_with_a_signal(store: Any) -> None:
    gw = gateway(store, ROUTE, store_timeout_ms=20)
    verdict = decide(gw, req())
    assert verdict.action == "forward"
    assert dict(verdict.headers)["X-EdgeLimiter-Reason"] == "store_unavailable"
    assert verdict.log is not None and verdict.log["event"] == "store_unavailable"


@pytest.mark.parametrize("store", [FailingStore(), HangingStore()])
def test_fail_closed_answers_503(store: Any) -> None:
    gw = gateway(store, {**ROUTE, "on_store_error": "closed"}, store_timeout_ms=20)
    verdict = decide(gw, req())
    assert verdict.status == 503
    assert verdict.body is not None and "fail closed" in verdict.body["detail"]
    assert dict(verdict.headers)["X-EdgeLimiter-Reason"] == "store_unavailable"


def test_garbage_from_the_store_follows_the_failure_policy() -> None:
    class Garbage:
        async def call(self, name: str, payload: str) -> str:
            return "not json"

    verdict = decide(gateway(Garbage(), {**ROUTE, "on_store_error": "closed"}), req())
    assert verdict.status == 503
    assert verdict.log is not None and verdict.log["cause"].startswith("protocol")
