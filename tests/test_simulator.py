"""The users' simulator (``edge_limiter.testing``): the whole gateway, deterministic."""

from __future__ import annotations

import asyncio
import gc
import warnings
from pathlib import Path

import pytest

from edge_limiter.core.errors import ConfigError
from edge_limiter.testing import (
    OriginCall,
    OriginTimeoutError,
    OriginUnreachableError,
    Reply,
    Simulator,
)
from tests.fakes import SIM_API, one_route

ROOT = Path(__file__).resolve().parents[1]
API = SIM_API


def limited(limits: str = "5/minute", **route: object) -> dict[str, object]:
    return one_route(limits=limits, **route)


def test_the_example_config_limits_logins_by_address_on_its_own_clock() -> None:
    sim = Simulator.from_file(ROOT / "edge-limiter.toml")
    login = f"{API}/v1/login"
    first = [sim.request("POST", login, ip="203.0.113.9") for _ in range(5)]
    assert [a.status for a in first] == [200] * 5
    assert first[-1].headers["ratelimit"] == '"5-per-minute";r=0;t=60, "20-per-hour";r=15;t=3600'
    denied = sim.request("POST", login, ip="203.0.113.9")
    assert denied.status == 429 and denied.headers["retry-after"] == "60"
    assert denied.headers["content-type"] == "application/problem+json"
    assert denied.json()["violated-policies"] == ["5-per-minute"]
    assert denied.forwarded == 0
    # Another client is not affected; time moves only when the test says so.
    assert sim.request("POST", login, ip="203.0.113.10").status == 200
    sim.advance("59s")
    assert sim.request("POST", login, ip="203.0.113.9").status == 429
    sim.advance(1_000)
    assert sim.request("POST", login, ip="203.0.113.9").status == 200
    # What reached the origins, as they saw it.
    assert sim.origin_calls[0].url == f"{API}/v1/login"
    assert sim.origin_calls[0].method == "POST"
    assert len(sim.origin_calls) == 7


def test_an_environment_is_laid_over_the_file() -> None:
    sim = Simulator.from_file(ROOT / "edge-limiter.toml", env="staging")
    sim.request("GET", f"{API}/v1/anything")
    assert sim.origin_calls[-1].url.startswith("https://staging.api.example.com/")


def test_the_origin_answers_as_the_test_says() -> None:
    replies: list[object] = [503, (200, {"content-type": "text/plain"}, "fine")]

    def origin(call: OriginCall) -> object:
        assert call.path == "/v1/x" and call.header("cf-connecting-ip") == "198.51.100.7"
        return replies.pop(0)

    sim = Simulator(limited(), origin=origin)  # type: ignore[arg-type]
    answer = sim.request("GET", f"{API}/v1/x")
    # A 503 to a GET is retried (backoff on the simulated clock, nothing sleeps).
    assert (answer.status, answer.text, answer.forwarded) == (200, "fine", 2)
    assert answer.headers["content-type"] == "text/plain"


@pytest.mark.parametrize(
    ("failure", "status"), [(OriginTimeoutError, 504), (OriginUnreachableError, 502)]
)
def test_origins_that_fail(failure: type[Exception], status: int) -> None:
    def origin(call: OriginCall) -> None:
        raise failure("simulated")

    sim = Simulator(limited(), origin=origin)
    answer = sim.request("POST", f"{API}/v1/x", body="{}")
    assert answer.status == status and answer.forwarded == 1  # a POST is not retried
    assert answer.json()["status"] == status


def test_a_burst_is_counted_exactly() -> None:
    sim = Simulator(limited("10/minute"))
    answers = sim.burst(40, "GET", f"{API}/v1/x")
    assert sorted(a.status for a in answers) == [200] * 10 + [429] * 30
    assert len(sim.origin_calls) == 10


def test_isolates_share_the_objects_and_keep_their_own_deny_cache() -> None:
    sim = Simulator(limited("2/minute"))
    other = sim.new_isolate()
    assert [sim.request("GET", f"{API}/v1/x").status for _ in range(2)] == [200, 200]
    assert other.request("GET", f"{API}/v1/x").status == 429  # the same key's object
    calls = sim.object_calls
    assert sim.request("GET", f"{API}/v1/x").status == 429
    assert sim.object_calls == calls  # answered from this isolate's deny cache


def test_reset_forgets_every_counter_in_every_isolate() -> None:
    sim = Simulator(limited("1/hour"))
    other = sim.new_isolate()
    sim.request("GET", f"{API}/v1/x")
    assert other.request("GET", f"{API}/v1/x").status == 429
    sim.reset()
    assert other.request("GET", f"{API}/v1/x").status == 200
    assert sim.request("GET", f"{API}/v1/x").status == 429


def test_the_cache_and_idempotency_keys_work_as_deployed() -> None:
    config = {
        "origin": API,
        "routes": [
            {
                "name": "get",
                "match": {"path": "/c/*"},
                "limits": "9/minute",
                "cache": {"ttl": "1m", "default_ttl": "1m"},
            },
            {
                "name": "pay",
                "match": {"path": "/pay", "methods": ["POST"]},
                "limits": "9/minute",
                "idempotency": {"mode": "required"},
            },
        ],
    }
    sim = Simulator(config)
    assert sim.request("GET", f"{API}/c/1").headers["x-cache"] == "MISS"
    sim.advance("10s")
    hit = sim.request("GET", f"{API}/c/1")
    assert (hit.headers["x-cache"], hit.headers["age"], hit.forwarded) == ("HIT", "10", 0)
    key = {"idempotency-key": '"k1"', "content-type": "application/json"}
    first = sim.request("POST", f"{API}/pay", headers=key, body='{"amount": 5}')
    again = sim.request("POST", f"{API}/pay", headers=key, body='{"amount": 5}')
    assert (first.forwarded, again.forwarded) == (1, 0)
    assert again.body == first.body and again.headers["idempotent-replayed"] == "true"
    other = sim.request("POST", f"{API}/pay", headers=key, body='{"amount": 6}')
    assert other.status == 422
    assert sim.request("POST", f"{API}/pay", body="{}").status == 400


def test_the_client_address_is_the_platforms_never_the_clients() -> None:
    sim = Simulator(limited("1/minute"))
    sim.request("GET", f"{API}/v1/x", ip="192.0.2.1")
    spoofed = {"cf-connecting-ip": "192.0.2.99", "x-forwarded-for": "192.0.2.98"}
    assert sim.request("GET", f"{API}/v1/x", ip="192.0.2.1", headers=spoofed).status == 429


def test_bad_input_is_said_plainly() -> None:
    with pytest.raises(ConfigError, match=r"route 'r'\.limits"):
        Simulator(limited("5 per fortnight"))
    sim = Simulator(limited())
    with pytest.raises(ValueError, match="only moves forward"):
        sim.advance(-1)
    with pytest.raises(ValueError, match="is not an absolute URL"):
        sim.request("GET", "/v1/x")
    with pytest.raises(ValueError, match="not an IP address"):
        sim.request("GET", f"{API}/v1/x", ip="me")
    before = sim.now_ms
    sim.advance("1s500ms")
    assert sim.now_ms - before == 1_500


def test_it_runs_inside_an_event_loop_too() -> None:
    sim = Simulator(limited("1/minute"))

    async def run() -> list[int]:
        return [(await sim.arequest("GET", f"{API}/v1/x")).status for _ in range(2)]

    assert asyncio.run(run()) == [200, 429]
    assert sim.logs[-1]["event"] == "cached_denial"


def test_misses_at_once_overlap_at_a_slow_origin_and_are_collapsed() -> None:
    sim = Simulator(
        limited("100/minute", cache={"ttl": "1m", "default_ttl": "1m"}), origin_latency="80ms"
    )
    start = sim.now_ms
    answers = sim.burst(20, "GET", f"{API}/v1/x")
    assert len(sim.origin_calls) == 1
    assert sorted(a.headers["x-cache"] for a in answers) == ["HIT"] * 19 + ["MISS"]
    # Waits that overlap do not add up: a few times the origin's 80 ms (the waiting
    # requests look again 5-50 ms apart), not 20 times it.
    assert 80 <= sim.now_ms - start <= 400


def test_a_slow_origin_times_out_on_the_simulated_clock() -> None:
    sim = Simulator(limited(timeout="1s"), origin=lambda call: Reply(200, body="late", after="3s"))
    start = sim.now_ms
    answer = sim.request("GET", f"{API}/v1/x")
    # The route's timeout covers every attempt: one that took all of it leaves no retry.
    assert (answer.status, answer.forwarded) == (504, 1)
    assert sim.now_ms - start == 1_000
    assert sim.origin_calls[0].timeout_ms == 1_000
    quick = Simulator(limited(timeout="1s"), origin=lambda call: Reply(201, after=999))
    assert quick.request("GET", f"{API}/v1/x").status == 201


def test_the_clock_starts_where_the_test_says() -> None:
    sim = Simulator(limited("2/minute", algorithm="fixed_window"), start="2026-12-01T10:00:30Z")
    assert sim.now_ms == 1_796_119_230_000
    answers = [sim.request("GET", f"{API}/v1/x") for _ in range(3)]
    assert answers[-1].status == 429 and answers[-1].headers["retry-after"] == "30"
    with pytest.raises(ValueError, match="ISO 8601"):
        Simulator(limited(), start="tomorrow")


def test_a_body_is_sent_as_clients_send_it_and_every_cookie_is_kept() -> None:
    def origin(call: OriginCall) -> Reply:
        assert call.header("content-length") == str(len(call.body))
        return Reply(
            503 if call.method == "PUT" and len(sim.origin_calls) < 3 else 200,
            [
                ("set-cookie", "a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT"),
                ("set-cookie", "b=2"),
            ],
        )

    sim = Simulator(limited(), origin=origin)
    put = sim.request("PUT", f"{API}/v1/x", body=b"{}")
    # A body of known length is kept and sent again: the PUT is retried.
    assert (put.status, put.forwarded) == (200, 3)
    assert [c.body for c in sim.origin_calls] == [b"{}"] * 3
    assert put.get_all("Set-Cookie") == ["a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT", "b=2"]
    assert put.headers.get_all("set-cookie") == put.get_all("set-cookie")


def test_an_origins_answer_keeps_its_own_cors_decision() -> None:
    cors = {"allow_origins": ["https://app.test"], "allow_credentials": True}
    sim = Simulator(limited("1/minute") | {"cors": cors})
    page = {"origin": "https://app.test"}
    forwarded = sim.request("GET", f"{API}/v1/x", headers=page)
    assert "access-control-allow-origin" not in forwarded.headers  # the origin said nothing
    denied = sim.request("GET", f"{API}/v1/x", headers=page)  # the gateway's own answer
    assert denied.headers["access-control-allow-origin"] == "https://app.test"
    assert denied.headers["access-control-allow-credentials"] == "true"


def test_the_conveniences_a_users_tests_reach_for() -> None:
    document = {
        "origin": API,
        "routes": [{"name": "r", "match": {"path": "/v1/*"}, "limits": "2/minute"}],
        "env": {"staging": {"origin": "https://staging.test"}},
    }
    # A config table as read from TOML, its environments included.
    staging = Simulator(document, env="staging", admin_token="t")
    assert staging.request("GET", f"{API}/v1/x").forwarded == 1
    assert staging.origin_calls[-1].url.startswith("https://staging.test/")
    with pytest.raises(ConfigError, match=r"has no \[env.prod\] table \(it has: staging\)"):
        Simulator(document, env="prod")
    # Fields by name in any case; every line of a field.
    answer = staging.request("GET", f"{API}/v1/x")
    assert answer.headers["X-RateLimit-Remaining"] == "0" and "RateLimit" in answer.headers
    # The admin API with the token given.
    peek = staging.admin("GET", "/api/keys?route=r&key=" + "198.51.100.7")
    assert peek.status == 200 and peek.json()["limits"][0]["remaining"] == 0
    assert (
        staging.admin("POST", "/api/keys/reset", {"route": "r", "key": "198.51.100.7"}).status
        == 200
    )
    assert staging.request("GET", f"{API}/v1/x").status == 200
    with pytest.raises(ValueError, match="admin_token"):
        Simulator(document).admin("GET", "/api/config")
    with pytest.raises(TypeError, match="milliseconds"):
        staging.advance(1.5)  # type: ignore[arg-type]


def test_origin_functions_answer_in_any_plain_form_or_say_what_they_may_return() -> None:
    for reply, expected in (("hello", (200, "hello")), ((418, "teapot"), (418, "teapot"))):
        sim = Simulator(limited(), origin=lambda call, r=reply: r)  # type: ignore[misc]
        answer = sim.request("GET", f"{API}/v1/x")
        assert (answer.status, answer.text) == expected
    odd = Simulator(limited(), origin=lambda call: [200])  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="an origin function returns"):
        odd.request("GET", f"{API}/v1/x")

    def broken(call: OriginCall) -> None:
        raise KeyError("the test's own bug")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no work left behind un-run
        with pytest.raises(KeyError):
            Simulator(limited(), origin=broken).request("GET", f"{API}/v1/x")
        gc.collect()


def test_async_tests_and_health_checks() -> None:
    pooled = {
        "pools": {
            "p": {
                "origins": [
                    {"name": "a", "url": "https://a.test", "health": {"path": "/health"}},
                    {"name": "b", "url": "https://b.test"},
                ]
            }
        },
        "routes": [{"name": "r", "match": {"path": "/v1/*"}, "limits": "3/minute", "pool": "p"}],
    }
    sim = Simulator(pooled, origin=lambda call: 503 if call.path == "/health" else None)
    reports = sim.health_check()
    assert [r["origin"] for r in reports] == ["a"] and reports[0]["healthy"] is False

    async def run() -> list[int]:
        return [a.status for a in await sim.aburst(4, "GET", f"{API}/v1/x")]

    assert sorted(asyncio.run(run())) == [200, 200, 200, 429]


def test_each_answer_of_a_burst_counts_its_own_attempts() -> None:
    sim = Simulator(limited("100/minute"), origin_latency="200ms")
    assert [a.forwarded for a in sim.burst(3, "GET", f"{API}/v1/x")] == [1, 1, 1]
    cached = limited("9/minute", cache={"ttl": "1m", "default_ttl": "1m"})
    herd = Simulator(cached, origin_latency="200ms").burst(4, "GET", f"{API}/v1/x")
    assert sorted(a.forwarded for a in herd) == [0, 0, 0, 1]  # the hits made none


def test_inside_an_event_loop_the_a_methods_are_awaited() -> None:
    sim = Simulator(limited("5/minute"), admin_token="t")

    async def run() -> tuple[int, int]:
        with pytest.raises(RuntimeError, match=r"await arequest\(\)"):
            sim.request("GET", f"{API}/v1/x")
        with pytest.raises(RuntimeError, match=r"await ahealth_check\(\)"):
            sim.health_check()
        answer = await sim.arequest("GET", f"{API}/v1/x")
        peek = await sim.aadmin("GET", "/api/keys?route=r&key=198.51.100.7")
        assert await sim.ahealth_check() == []  # no origin has a health check
        return answer.status, peek.json()["limits"][0]["remaining"]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert asyncio.run(run()) == (200, 3)  # what the next request would find
        gc.collect()


def test_a_burst_bucket_with_a_daily_quota_that_resets_at_midnight() -> None:
    config = {
        "origin": API,
        "routes": [
            {
                "name": "api",
                "match": {"path": "/v1/*"},
                "algorithm": "token_bucket",
                "limits": [
                    {"rate": "10/second", "burst": 20},
                    {"rate": "3/day", "algorithm": "fixed_window", "name": "daily"},
                ],
                "key": "header:x-api-key",
            }
        ],
    }
    sim = Simulator(config, start="2026-12-01T23:59:00Z")
    key = {"x-api-key": "k1"}
    answers = [sim.request("GET", f"{API}/v1/x", headers=key) for _ in range(4)]
    assert [a.status for a in answers] == [200, 200, 200, 429]
    assert answers[-1].headers["retry-after"] == "60"  # midnight UTC
    assert answers[-1].json()["violated-policies"] == ["daily"]
    assert '"daily";q=3;w=86400' in answers[-1].headers["ratelimit-policy"]
    sim.advance("1m")
    assert sim.request("GET", f"{API}/v1/x", headers=key).status == 200


def test_a_field_sent_on_several_lines_reaches_the_gateway_joined_as_on_the_runtime() -> None:
    # A differential probe's finding: two Cookie lines were a 400 (ambiguous_key) on
    # workerd, which joins them with ", ", and counted in the simulator.
    table = {
        "origin": "https://api.example.com",
        "routes": [
            {"name": "ck", "match": {"path": "/ck"}, "limits": "2/minute", "key": "cookie:sid"}
        ],
    }
    sim = Simulator(table)
    url = "https://api.example.com/ck"
    twice = sim.request("GET", url, headers=[("Cookie", "sid=c1"), ("Cookie", "other=1")])
    assert twice.status == 400 and twice.json()["code"] == "ambiguous_key"
    assert sim.request("GET", url, headers={"Cookie": "sid=c1; other=1"}).status == 200
    echoed = sim.request("GET", url, headers=[("X-A", "1"), ("x-a", "2"), ("Cookie", "sid=c2")])
    assert echoed.status == 200
    (call,) = [c for c in sim.origin_calls if c.header("x-a")]
    assert call.header("x-a") == "1, 2"


def test_deferred_work_starts_at_once_as_on_the_platform() -> None:
    # A differential probe's finding: the simulator ran waitUntil work after the response,
    # the platform starts it at once, and a lease refresh running while a failing request
    # was out lost the unit that request gave back (there, not here).
    table = {
        "origin": "https://api.example.com",
        "routes": [
            {
                "name": "ls",
                "match": {"path": "/ls"},
                "limits": "5/10s",
                "algorithm": "fixed_window",
                "leases": True,
                "refund_on": [503],
                "retry": {"attempts": 1},
            }
        ],
    }
    failures = iter([503, 503])
    sim = Simulator(
        table,
        origin=lambda call: next(failures, 200),
        origin_latency=50,
        start="2026-12-02T00:00:00.100Z",
    )
    statuses = []
    for _ in range(8):
        statuses.append(sim.request("GET", "https://api.example.com/ls").status)
        sim.advance(150)
    assert statuses == [503, 503] + [200] * 5 + [429]


def test_without_the_codec_the_objects_answer_the_same() -> None:
    # codec=False (the replay's) hands the objects typed messages: every answer, log line
    # and breaker the same as through the text the runtime carries.
    table = {
        "origin": "https://api.example.com",
        "routes": [
            {
                "name": "leased",
                "match": {"path": "/l/*"},
                "limits": "3/10s; 10/minute",
                "algorithm": "sliding_window",
                "leases": True,
                "refund_on": [503],
                "retry": {"attempts": 1},
            },
            {
                "name": "checked",
                "match": {"path": "/c/*"},
                "limits": "2/second; 6/minute",
                "algorithm": "token_bucket",
                "key": "ip",
                "refund_on": [503],
                "retry": {"attempts": 1},
            },
        ],
    }

    def origin(call: OriginCall) -> int:
        return 503 if call.url.endswith("/3") else 200

    runs = []
    for codec in (True, False):
        sim = Simulator(table, origin=origin, codec=codec, start="2026-12-02T00:00:00Z")
        answers = []
        for n in range(120):
            path = f"/{'lc'[n % 2]}/{n % 9}"
            answer = sim.request("GET", f"https://api.example.com{path}", ip=f"203.0.113.{n % 3}")
            answers.append((answer.status, answer.header_list, answer.forwarded))
            sim.advance(97 * (n % 4))
        runs.append((answers, sim.logs, sim._world.breakers.calls))
    assert runs[0] == runs[1]
    statuses = {status for status, _, _ in runs[0][0]}
    assert statuses == {200, 429, 503} and runs[0][2]  # denials, failures, breaker syncs
