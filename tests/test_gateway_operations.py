"""The operator's side of the request path on CPython: global shadow, the deny cache
(checked against the Durable Object's own decisions), overrides, logs and analytics."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.config import parse_config
from edge_limiter.core.control import OverridesCall, StatsCall
from edge_limiter.core.errors import ConfigError
from edge_limiter.core.ratelimit.overrides import parse_override
from tests.examples import examples

from .fakes import Harness, harness, request

ROUTE: dict[str, Any] = {
    "name": "api",
    "match": {"path": "/v1/*"},
    "limits": "3/minute",
    "algorithm": "sliding_log",
    "key": "header:x-api-key",
}


def call(key: str = "k1", **kw: Any):  # type: ignore[no-untyped-def]
    return request("/v1/x", headers={"x-api-key": key}, **kw)


class Recorder:
    """A fake Analytics Engine dataset."""

    def __init__(self) -> None:
        self.points: list[tuple[list[str], list[float], list[str]]] = []

    def write(self, blobs: list[str], doubles: list[float], indexes: list[str]) -> None:
        self.points.append((blobs, doubles, indexes))


def with_analytics(h: Harness) -> Recorder:
    recorder = Recorder()
    object.__setattr__(h.gateway.services, "analytics", recorder)
    return recorder


def test_global_shadow_counts_and_reports_but_never_blocks() -> None:
    h = harness(ROUTE, shadow=True)
    answers = [h.send(call()) for _ in range(5)]
    assert [a.status for a in answers] == [200] * 5
    assert answers[-1].headers.get("x-edgelimiter-reason") == "shadow"
    assert len(h.events("shadow")) == 2 and len(h.store.calls) == 5


def test_the_deny_cache_answers_without_a_store_call_with_identical_headers() -> None:
    # A line per denial (`denials_every = "0s"`), to count those the deny cache answered.
    cached = harness(ROUTE, logging={"denials_every": "0s"})
    plain = harness(ROUTE, deny_cache={"enabled": False})
    for h in (cached, plain):
        for _ in range(3):
            h.send(call())
    for step in range(20):
        a, b = cached.send(call()), plain.send(call())
        assert (a.status, a.headers.items(), a.body) == (b.status, b.headers.items(), b.body)
        for h in (cached, plain):
            h.clock.advance(500)
        del step
    assert len(cached.events("cached_denial")) >= 15
    assert len(cached.store.calls) <= 3 + 20 - 15
    assert len(plain.store.calls) == 23


ALGORITHMS = ("token_bucket", "gcra", "sliding_log", "sliding_window", "fixed_window")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_last_admitted_request_primes_the_deny_cache(algorithm: str) -> None:
    """The object's answer to the request that uses a key's last unit carries the states,
    so the next request is denied here with no call at all."""
    h = harness({**ROUTE, "limits": "3/hour", "algorithm": algorithm})
    assert [h.send(call()).status for _ in range(3)] == [200, 200, 200]
    calls = len(h.store.calls)
    denied = h.send(call())
    assert denied.status == 429 and denied.headers.get("retry-after")
    assert len(h.store.calls) == calls
    assert len(h.events("cached_denial")) == 1


@settings(max_examples=examples(60), deadline=None)
@given(
    algorithm=st.sampled_from(ALGORITHMS),
    quota=st.integers(1, 4),
    window_s=st.integers(1, 20),
    second=st.booleans(),
    cost=st.integers(1, 2),
    gaps=st.lists(st.integers(0, 3_000), min_size=1, max_size=40),
)
def test_the_deny_cache_never_admits_or_denies_differently_from_the_object(
    algorithm: str, quota: int, window_s: int, second: bool, *, cost: int, gaps: list[int]
) -> None:
    """Request by request, with the cache and without it the answers are the same (status
    and every header), and the cache only ever saves calls."""
    limits = f"{quota + cost} per {window_s} seconds" + (
        f"; {quota * 10 + cost}/hour" if second else ""
    )
    route = {**ROUTE, "algorithm": algorithm, "limits": limits, "cost": cost}
    cached = harness(route)
    plain = harness(route, deny_cache={"enabled": False})
    for gap in gaps:
        for h in (cached, plain):
            h.clock.advance(gap)
        a, b = cached.send(call()), plain.send(call())
        assert a.status == b.status
        assert a.headers.items() == b.headers.items()
    assert len(cached.store.calls) <= len(plain.store.calls)


def test_the_deny_cache_is_bounded_and_forgets_after_its_longest_entry() -> None:
    h = harness({**ROUTE, "limits": "1/hour"}, deny_cache={"max_keys": 2, "max_ttl": "10s"})
    for key in ("a", "b", "c"):
        h.send(call(key))
        h.send(call(key))
    assert len(h.gateway.operating.deny) == 2
    calls = len(h.store.calls)
    h.send(call("c"))
    assert len(h.store.calls) == calls  # cached
    h.clock.advance(10_000)
    h.send(call("c"))
    assert len(h.store.calls) == calls + 1  # past max_ttl: the object is asked again


def put_override(h: Harness, **fields: Any) -> dict[str, Any]:
    algorithms = {route.name: route.limits.algorithm for route in h.gateway.config.routes}
    override = parse_override(fields, h.clock.now, algorithms)
    asyncio.run(h.control.overrides(OverridesCall("put", override)))
    return override.describe()


def test_overrides_change_limits_live_and_exempt_keys() -> None:
    h = harness(ROUTE, overrides={"refresh": "10s"})
    assert [h.send(call("premium_1")).status for _ in range(4)] == [200, 200, 200, 429]
    put_override(h, route="api", key="premium_*", limits="5/minute", reason="contract")
    put_override(h, route="*", key="internal", exempt=True, reason="health checker")
    # This isolate loaded the list on its first request; it reloads every 10 s.
    h.clock.advance(10_000)
    h.send(call("other"))  # starts the reload after the response
    statuses = [h.send(call("premium_1")).status for _ in range(3)]
    # 5/minute now, and the 3 the key used in this minute still count.
    assert statuses == [200] * 2 + [429]
    denials = [r for r in h.logs if r.get("event") in ("limited", "cached_denial")]
    assert denials[-1]["override"]  # every use of an override is in the log
    allowed = h.events("allowed")  # admitted ones too (none sampled: sample_allowed is 0)
    assert len(allowed) == 2 and {r["override"] for r in allowed} == {denials[-1]["override"]}
    exempt = [h.send(call("internal")) for _ in range(10)]
    assert all(a.status == 200 for a in exempt)
    assert exempt[-1].headers.get("x-edgelimiter-reason") == "exempt"
    assert "x-ratelimit-limit" not in exempt[-1].headers


def test_a_reload_whose_work_was_cut_off_does_not_stop_the_next() -> None:
    # The platform ends work deferred after a response 30 s later, and then it never
    # finishes: a reload cut off must not keep the list from ever reloading again.
    h = harness(ROUTE, overrides={"refresh": "10s"})
    h.send(call("a"))  # the first load
    h.clock.advance(10_000)
    h.send(call("b"), flush=False)  # starts a reload, which the runtime then drops
    h.background.discard()
    assert h.control.calls.count("overrides") == 1
    put_override(h, route="*", key="e", exempt=True, reason="cut off")
    h.clock.advance(20_000)
    h.send(call("c"))  # the reload taken as still under way
    assert h.control.calls.count("overrides") == 2  # (the put)
    h.clock.advance(20_000)
    h.send(call("d"))  # over 35 s later: reloaded after this one
    assert h.control.calls.count("overrides") == 3
    exempt = h.send(call("e"))
    assert exempt.headers.get("x-edgelimiter-reason") == "exempt"


def test_allowed_requests_are_logged_at_the_sample_rate_with_near_limit() -> None:
    h = harness(
        {**ROUTE, "limits": "10/minute"}, logging={"sample_allowed": 1.0, "near_limit": 0.8}
    )
    for _ in range(9):
        h.send(call())
    allowed = h.events("allowed")
    assert len(allowed) == 9
    assert [a["near_limit"] for a in allowed] == [False] * 7 + [True] * 2
    quiet = harness(ROUTE)  # sample_allowed defaults to 0: denials only
    for _ in range(4):
        quiet.send(call())
    assert quiet.events("allowed") == []
    # The third answer primed the deny cache: the denial is decided here, and logged.
    assert len(quiet.events("limited")) + len(quiet.events("cached_denial")) == 1


def test_every_decision_is_an_analytics_data_point() -> None:
    h = harness(ROUTE)
    recorder = with_analytics(h)
    for _ in range(4):
        h.send(call())
    events = [blobs[1] for blobs, _, _ in recorder.points]
    # The third answer primed the deny cache: the fourth is denied here.
    assert events == ["allowed", "allowed", "allowed", "cached_denial"]
    blobs, doubles, indexes = recorder.points[2]
    assert blobs[0] == "api" and blobs[3] == "near_limit" and indexes == ["api"]
    assert doubles[1:] == [0.0, 3.0, 1.0]
    assert all("k1" not in blob for blobs, _, _ in recorder.points for blob in blobs)


def test_counters_reach_the_control_object_about_once_a_second() -> None:
    h = harness(ROUTE)
    for _ in range(5):
        h.send(call())
    h.clock.advance(1_000)
    h.send(call("k2"))
    summary = asyncio.run(h.control.stats(StatsCall("get"))).summary or {}
    counts = summary["routes"]["api"]["5m"]
    assert counts["allowed"] + counts.get("limited", 0) + counts.get("cached_denial", 0) == 6
    assert summary["top_limited"][0]["limited"] == 2


def denials(h: Harness) -> list[dict[str, Any]]:
    return [line for line in h.logs if line.get("event") in ("limited", "cached_denial")]


def told(lines: list[dict[str, Any]]) -> int:
    """The denials lines stand for: each line itself and its ``repeats``."""
    return sum(1 + line.get("repeats", 0) for line in lines)


def test_a_flooded_key_gets_a_denial_line_a_second_each_counting_the_untold() -> None:
    h = harness(ROUTE)  # denials_every: 1 s by default
    analytics = with_analytics(h)
    assert [h.send(call()).status for _ in range(3)] == [200, 200, 200]
    sent = 0
    for _ in range(40):  # 40 denials 50 ms apart: 2 s of flood
        assert h.send(call()).status == 429
        sent += 1
        h.clock.advance(50)
    lines = denials(h)
    assert len(lines) == 2  # at 0 s and at 1 s; the rest are counted, not printed
    assert lines[0].get("repeats", 0) == 0 and lines[1]["repeats"] == 19
    assert told(lines) == 21  # the line at 1 s stands for itself and the 19 before it
    # Quiet for a second: the next decision of the isolate (any key) tells the rest.
    h.clock.advance(1_000)
    assert h.send(call("k2")).status == 200
    lines = denials(h)
    assert len(lines) == 3 and lines[2]["repeats"] == 18 and "latency_ms" not in lines[2]
    assert told(lines) == sent
    # Every denial is still a data point of its own.
    points = [blobs[1] for blobs, _, _ in analytics.points]
    assert points.count("limited") + points.count("cached_denial") == sent


def test_each_key_is_spaced_on_its_own_and_0s_prints_a_line_per_denial() -> None:
    spaced = harness(ROUTE)
    every = harness(ROUTE, logging={"denials_every": "0s"})
    for h in (spaced, every):
        for key in ("a", "b"):
            for _ in range(3):
                h.send(call(key))
        for _ in range(5):
            for key in ("a", "b"):
                assert h.send(call(key)).status == 429
            h.clock.advance(10)
    assert len(denials(spaced)) == 2  # one line for each key
    assert {line["key_hash"] for line in denials(spaced)} == {
        line["key_hash"] for line in denials(every)
    }
    assert len(denials(every)) == 10 and told(denials(every)) == 10
    assert all("repeats" not in line for line in denials(every))


def test_denials_every_is_checked_like_any_duration() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {"routes": [ROUTE], "origin": "https://o.test", "logging": {"denials_every": "2h"}}
        )
    assert "config.logging.denials_every" in str(caught.value)
    config = parse_config({"routes": [ROUTE], "origin": "https://o.test"})
    assert config.ops.denials_every_ms == 1_000


def test_a_key_still_denied_gets_no_second_line_within_the_interval() -> None:
    # Another key denied once first: the sweep of quiet keys then runs as the flood's
    # lines fall due (every 1 s from its first denial). The flooded key is not quiet: its
    # lines stay 1 s apart, and only once it stops is the rest printed.
    h = harness(ROUTE)
    for key in ("other", "flood"):
        for _ in range(3):
            h.send(call(key))
    assert h.send(call("other")).status == 429
    printed_at: list[int] = []
    sent = 0
    for _ in range(100):  # 4 s: a denial every 40 ms
        before = len(denials(h))
        assert h.send(call("flood")).status == 429
        sent += 1
        printed_at += [h.clock.now_ms()] * (len(denials(h)) - before)
        h.clock.advance(40)
    assert len(printed_at) == 4
    assert all(b - a >= 1_000 for a, b in pairwise(printed_at))
    h.clock.advance(1_000)
    h.send(call("calm"))
    assert told(denials(h)) == sent + 1  # the flood's untold rest, and "other"'s one
