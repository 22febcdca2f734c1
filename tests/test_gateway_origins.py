"""Origin pools through the whole gateway on CPython: geo order, failover, breakers shared
between isolates, health probes, retries with jitter and budget, bulkheads, deadlines,
stale-if-error and refunds (fake origins, clock, sleep and breaker store)."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest

from edge_limiter.core.errors import ConfigError
from edge_limiter.core.http.messages import BytesBody, Headers, Response
from edge_limiter.core.resilience.breaker import BreakerSettings
from edge_limiter.core.resilience.shared import HealthReport, SyncCall
from edge_limiter.gateway import (
    ClientBodyError,
    Gateway,
    OriginConnectError,
    OriginRequest,
    OriginTimeoutError,
    OriginUnreachableError,
    Services,
)
from edge_limiter.gateway.health import probe_all

from .fakes import FETCHED, FakeOrigin, Harness, StreamedBody, body_json, harness, request

POOLS: dict[str, Any] = {
    "api": {
        "breaker": {"failure_rate": 50, "window": 4, "min_calls": 4, "open_for": "10s"},
        "retry": {"attempts": 3, "base": "100ms", "cap": "1s", "budget": 0.5},
        "origins": [
            {"name": "eu", "url": "http://eu.test", "continents": ["EU"], "countries": ["CH"]},
            {"name": "us", "url": "http://us.test", "continents": ["NA"], "priority": 1},
            {"name": "ap", "url": "http://ap.test", "continents": ["AS"], "priority": 2},
        ],
    }
}
ROUTE: dict[str, Any] = {
    "name": "api",
    "match": {"path": "/v1/*"},
    "limits": "1000/hour",
    "pool": "api",
}


class Origins:
    """Fake origins by host: each answers 200 naming itself, or fails as a test says."""

    def __init__(self) -> None:
        self.down: set[str] = set()
        self.status: dict[str, int] = {}
        self.headers: dict[str, list[tuple[str, str]]] = {}
        self.hits: list[str] = []
        self.hold: asyncio.Event | None = None

    async def respond(self, outgoing: OriginRequest) -> Response:
        host = outgoing.url.split("://", 1)[1].split("/", 1)[0].split(".")[0]
        self.hits.append(host)
        if self.hold is not None:
            await self.hold.wait()
        if host in self.down:
            raise OriginUnreachableError(f"connection refused by {host}")
        status = self.status.get(host, 200)
        return Response(status, Headers(self.headers.get(host, [])), f"from {host}".encode())


def pooled(
    origins: Origins, *routes: dict[str, Any], pools: dict[str, Any] | None = None
) -> Harness:
    return harness(
        *(routes or (ROUTE,)),
        upstream=FakeOrigin(respond=origins.respond),
        origin=None,
        pools=pools or POOLS,
    )


def from_(country: str, continent: str, path: str = "/v1/x", method: str = "GET", **kw: Any):  # type: ignore[no-untyped-def]
    req = request(path, method, **kw)
    req.client = type(req.client)(ip=req.client.ip, country=country, continent=continent)
    return req


def test_a_location_no_place_has_is_no_location_never_an_error() -> None:
    # A probe's finding: MF-CF-Blob {"latitude": "inf"} crashed the request (a 500) in
    # the distance, after its unit was taken; lower-case codes matched no origin.
    placed = {
        "api": {
            **POOLS["api"],
            "origins": [
                {**POOLS["api"]["origins"][0], "lat": 50.1, "lon": 8.7},
                {**POOLS["api"]["origins"][1], "lat": 39.0, "lon": -77.5},
                {**POOLS["api"]["origins"][2], "lat": 35.7, "lon": 139.7},
            ],
        }
    }
    origins = Origins()
    h = pooled(origins, pools=placed)
    nowhere = h.send(from_("", ""))
    for lat, lon in ((math.inf, 1.0), (-math.inf, 1.0), (200.0, 0.0), (math.nan, 3.0)):
        req = from_("", "")
        req.client = type(req.client)(ip=req.client.ip, latitude=lat, longitude=lon)
        answer = h.send(req)
        assert answer.status == 200, (lat, lon)
        assert answer.headers.get("x-origin") == nowhere.headers.get("x-origin")
    assert h.send(from_("jp", "as")).headers.get("x-origin") == "ap"


def test_clients_reach_their_regions_origin() -> None:
    origins = Origins()
    h = pooled(origins)
    cases = {("DE", "EU"): "eu", ("US", "NA"): "us", ("JP", "AS"): "ap", ("CH", "EU"): "eu"}
    for (country, continent), expected in cases.items():
        answer = h.send(from_(country, continent))
        assert answer.headers.get("x-origin") == expected
        assert answer.body == f"from {expected}".encode()
    # No location: a deterministic order (priority, then name).
    assert h.send(request()).headers.get("x-origin") == "eu"


def test_a_dead_origin_fails_over_with_no_failed_idempotent_request() -> None:
    origins = Origins()
    origins.down.add("eu")
    h = pooled(origins)
    answers = [h.send(from_("DE", "EU")) for _ in range(10)]
    assert all(a.status == 200 for a in answers)
    assert {a.headers.get("x-origin") for a in answers} == {"us"}
    # The breaker opened after 4 failures in a row: eu is skipped, not even tried.
    assert origins.hits.count("eu") == 4
    eu_attempts = [a for a in h.events("origin_attempt") if a["origin"] == "eu"]
    assert eu_attempts[-1]["breaker"] == "open"


def test_a_post_without_a_key_is_never_retried() -> None:
    origins = Origins()
    origins.down.add("eu")
    h = pooled(origins)
    answer = h.send(from_("DE", "EU", method="POST", body=b"x"))
    assert answer.status == 502
    assert origins.hits == ["eu"]
    assert body_json(answer)["tried"] == [{"origin": "eu", "outcome": "unreachable"}]


def test_the_breaker_opens_skips_and_closes_after_recovery() -> None:
    origins = Origins()
    origins.status["eu"] = 503
    h = pooled(origins)
    for _ in range(4):
        h.send(from_("DE", "EU"))
    eu_hits = origins.hits.count("eu")
    answer = h.send(from_("DE", "EU"))
    assert answer.headers.get("x-origin") == "us"
    assert origins.hits.count("eu") == eu_hits  # open: not called
    origins.status.pop("eu")
    h.clock.advance(10_000)  # the open time is over: trials go to eu
    answers = [h.send(from_("DE", "EU")) for _ in range(3)]
    assert [a.headers.get("x-origin") for a in answers] == ["eu", "eu", "eu"]
    assert h.events("origin_attempt")[-1]["breaker"] == "closed"


def test_an_outage_seen_by_one_isolate_protects_the_others() -> None:
    origins = Origins()
    origins.down.add("eu")
    a = pooled(origins)
    b = pooled(origins)
    b.gateway = Gateway(b.gateway.config, Services(**{**_services(b), "breakers": a.breakers}))
    for _ in range(4):
        a.send(from_("DE", "EU"))  # a's own breaker opens after 4 failures
    a.clock.advance(1_500)
    a.send(from_("DE", "EU"))  # eu skipped; a reports what it saw (after the response)
    assert a.breakers.calls.count("eu") >= 2
    # b's copy of eu was never synced: it refreshes it before its first decision and
    # skips eu without ever seeing it fail itself.
    for _ in range(6):
        assert b.send(from_("DE", "EU")).headers.get("x-origin") == "us"
        b.clock.advance(1_100)
    assert origins.hits.count("eu") == 4


def test_a_trip_is_reported_at_once_even_if_no_request_follows() -> None:
    origins = Origins()
    origins.down.add("eu")
    a = pooled(origins)
    for _ in range(4):
        a.send(from_("DE", "EU"))  # all within a second; the 4th trips a's breaker
    # No more traffic in a: the trip still reached the shared breaker.
    b = pooled(origins)
    b.gateway = Gateway(b.gateway.config, Services(**{**_services(b), "breakers": a.breakers}))
    assert b.send(from_("DE", "EU")).headers.get("x-origin") == "us"
    assert origins.hits.count("eu") == 4  # b never tried it


def _services(h: Harness) -> dict[str, Any]:
    services = h.gateway.services
    return {name: getattr(services, name) for name in services.__dataclass_fields__}


def test_an_unreachable_breaker_store_leaves_the_isolate_deciding_alone() -> None:
    origins = Origins()
    origins.down.add("eu")
    h = pooled(origins)
    h.breakers.failing = True
    for _ in range(6):
        assert h.send(from_("DE", "EU")).status == 200
    assert origins.hits.count("eu") == 4  # the local breaker still opened
    assert h.events("breaker_sync_error")


def test_health_probes_open_and_close_the_shared_breaker() -> None:
    origins = Origins()
    h = pooled(origins)
    settings = BreakerSettings(failure_rate=50, window=4, min_calls=4, open_for_ms=10_000)
    now = h.clock.now

    def probe(healthy: bool, at: int) -> None:
        call = SyncCall(settings, health=HealthReport(at, healthy, 2))
        asyncio.run(h.breakers.sync("eu", call))

    probe(False, now)
    probe(False, now + 1)  # two failed probes in a row: open, with no user traffic
    answer = h.send(from_("DE", "EU"))
    assert answer.headers.get("x-origin") == "us"
    assert origins.hits == ["us"]  # no user request ever reached eu
    probe(True, h.clock.now)  # recovered: the wait is over at once
    h.flush()
    h.clock.advance(1_500)
    h.send(from_("DE", "EU"))
    h.flush()
    h.clock.advance(1_500)
    assert h.send(from_("DE", "EU")).headers.get("x-origin") == "eu"


SOLO: dict[str, Any] = {
    "solo": {
        "breaker": {
            "failure_rate": 50,
            "window": 4,
            "min_calls": 2,
            "open_for": "2s",
            "half_open_calls": 1,
            "success_threshold": 1,
        },
        "retry": {"attempts": 1},
        "origins": [{"name": "eu", "url": "http://eu.test", "timeout": "3s"}],
    }
}


def test_a_half_open_breaker_sends_one_trial_while_it_hangs_across_syncs() -> None:
    # A probe's finding: while the only trial hung at the origin, each refused request's
    # sync brought back the shared state ("open, its time over"; the object hears of a
    # trial only when it ends), the copy took it and let another trial through, about one
    # a second. The refused requests were told to come back in 30 s (the breaker's own
    # bound for trials that never report), though the trial ends within the origin's 3 s.
    origins = Origins()
    origins.status["eu"] = 503
    h = pooled(origins, {**ROUTE, "pool": "solo"}, pools=SOLO)
    for _ in range(2):
        assert h.send(from_("DE", "EU")).status == 503
    assert h.events("origin_attempt")[-1]["breaker"] == "open"
    origins.status.pop("eu")
    h.clock.advance(2_000)

    async def scenario() -> None:
        origins.hold = asyncio.Event()
        trial = asyncio.create_task(h.gateway.handle(from_("DE", "EU"), h.background))
        for _ in range(5):
            await asyncio.sleep(0)
        assert origins.hits.count("eu") == 3
        for _ in range(4):
            h.clock.advance(1_100)
            refused = await h.gateway.handle(from_("DE", "EU"), h.background)
            await h.background.run()  # the sync each refusal asks for
            assert refused.status == 503
            assert 1 <= int(refused.headers.get("retry-after") or 0) <= 3
        assert origins.hits.count("eu") == 3  # no second trial
        origins.hold.set()
        assert (await trial).status == 200
        await h.background.run()

    asyncio.run(scenario())
    origins.hold = None
    answers = [h.send(from_("DE", "EU")) for _ in range(3)]
    assert [a.status for a in answers] == [200, 200, 200]  # closed by the one trial
    assert origins.hits.count("eu") == 6


def test_trials_that_end_together_close_the_breaker_for_the_next_requests() -> None:
    # Trials that succeed while a sync sent before them is out: its answer ("open, its
    # time over") must not put the copy back to trials (the next burst went mostly to the
    # fallback origin, two of six at a time to the recovered one).
    origins = Origins()
    pools = {
        "api": {
            **POOLS["api"],
            "breaker": {"failure_rate": 50, "window": 4, "min_calls": 4, "open_for": "10s"},
        }
    }
    origins.status["eu"] = 503
    h = pooled(origins, pools=pools)
    for _ in range(4):
        h.send(from_("DE", "EU"))
    origins.status.pop("eu")
    h.clock.advance(10_000)

    async def scenario() -> None:
        origins.hold = asyncio.Event()
        burst = [
            asyncio.create_task(h.gateway.handle(from_("DE", "EU"), h.background)) for _ in range(6)
        ]
        for _ in range(5):
            await asyncio.sleep(0)
        sync = asyncio.create_task(h.background.run())  # a report sent before the trials end
        await asyncio.sleep(0)
        origins.hold.set()
        answers = await asyncio.gather(*burst)
        assert [a.headers.get("x-origin") for a in answers].count("eu") == 3  # 3 trials
        await sync
        await h.background.run()

    asyncio.run(scenario())
    origins.hold = None
    origins.hits.clear()

    async def second() -> list[Response]:
        return await h.concurrently(*(from_("DE", "EU") for _ in range(6)))

    answers = asyncio.run(second())
    assert [a.headers.get("x-origin") for a in answers] == ["eu"] * 6


def test_a_health_checks_verdict_holds_at_once_in_the_isolate_that_ran_it() -> None:
    # This isolate's copy of eu's breaker is fresh (it just served a request): the cron's
    # probes opening the shared breaker are taken into it at once, not after 10 s.
    origins = Origins()
    members = [dict(member) for member in POOLS["api"]["origins"]]
    members[0]["health"] = {"path": "/health", "unhealthy_after": 2}
    h = pooled(origins, pools={"api": {**POOLS["api"], "origins": members}})
    assert h.send(from_("DE", "EU")).headers.get("x-origin") == "eu"
    origins.down.add("eu")
    for _ in range(2):
        asyncio.run(h.gateway.probe_health())
    origins.hits.clear()
    assert h.send(from_("DE", "EU")).headers.get("x-origin") == "us"
    assert origins.hits == ["us"]  # eu was not tried first


def test_an_isolate_asks_the_shared_breaker_before_a_trial_once_its_wait_ended() -> None:
    # A probe's finding: probes opened eu, its wait ran out with no traffic, and the next
    # failed probes (here in another isolate's cron, at the shared breaker) opened it
    # again. An isolate whose copy predates the end of the wait asks before it sends a
    # half-open trial, so no user request goes to eu.
    origins = Origins()
    members = [dict(member) for member in POOLS["api"]["origins"]]
    members[0]["health"] = {"path": "/health", "unhealthy_after": 2}
    breaker = {**POOLS["api"]["breaker"], "open_for": "5s"}
    h = pooled(origins, pools={"api": {**POOLS["api"], "breaker": breaker, "origins": members}})
    assert h.send(from_("DE", "EU")).headers.get("x-origin") == "eu"
    origins.down.add("eu")
    for _ in range(2):
        asyncio.run(h.gateway.probe_health())
    h.clock.advance(5_001)  # the 5 s wait is over: half-open in this isolate's copy
    settings = BreakerSettings(failure_rate=50, window=4, min_calls=4, open_for_ms=5_000)
    failed = SyncCall(settings, health=HealthReport(h.clock.now, False, 2))
    asyncio.run(h.breakers.sync("eu", failed))  # another isolate's probe
    origins.hits.clear()
    assert h.send(from_("DE", "EU")).headers.get("x-origin") == "us"
    assert origins.hits == ["us"]
    # Once the longer wait (10 s) ends too, a trial goes out as usual.
    origins.down.clear()
    h.flush()
    h.clock.advance(10_001)
    origins.hits.clear()
    assert h.send(from_("DE", "EU")).headers.get("x-origin") == "eu"


def test_backoff_is_full_jitter_within_the_cap_and_the_deadline_holds() -> None:
    origins = Origins()
    origins.down.update({"eu", "us", "ap"})
    h = pooled(origins, {**ROUTE, "timeout": "10s"})
    answer = h.send(from_("DE", "EU"))
    assert answer.status == 502
    assert len(h.sleep.waits) == 2
    assert all(0 <= wait <= 1.0 for wait in h.sleep.waits)
    assert [t["origin"] for t in body_json(answer)["tried"]] == ["eu", "us", "ap"]
    short = pooled(origins, {**ROUTE, "timeout": "50ms"})
    short.send(from_("DE", "EU"))
    assert sum(short.sleep.waits) < 0.05  # never waits past the deadline


def test_a_429_is_the_origins_answer_to_that_client_and_holds_no_one_else_back() -> None:
    # APIs limit their clients themselves: one client's 429 must not become everyone's 503.
    origins = Origins()
    origins.status["eu"] = 429
    origins.headers["eu"] = [("retry-after", "30")]
    h = pooled(origins)
    limited = h.send(from_("DE", "EU"))
    assert limited.status == 429 and limited.headers.get("x-origin") == "eu"
    assert limited.body == b"from eu" and origins.hits == ["eu"]  # not retried elsewhere
    assert h.sleep.waits == []
    origins.status.pop("eu")
    for _ in range(25):  # more than the breaker's window: a 429 is no failure
        origins.status["eu"] = 429
        assert h.send(from_("DE", "EU")).status == 429
        origins.status.pop("eu")
        assert h.send(from_("DE", "EU")).headers.get("x-origin") == "eu"


def test_a_429_parks_the_origin_until_its_retry_after_where_the_pool_says_so() -> None:
    origins = Origins()
    origins.status["eu"] = 429
    origins.headers["eu"] = [("retry-after", "30")]
    breaker = {**POOLS["api"]["breaker"], "pause_on_429": True}
    pools = {"api": {**POOLS["api"], "breaker": breaker}}
    h = pooled(origins, pools=pools)
    first = h.send(from_("DE", "EU"))
    assert first.headers.get("x-origin") == "us"
    origins.status.pop("eu")
    h.clock.advance(20_000)
    assert h.send(from_("DE", "EU")).headers.get("x-origin") == "us"
    h.clock.advance(10_001)
    assert h.send(from_("DE", "EU")).headers.get("x-origin") == "eu"


def test_an_origin_parked_by_its_429_shows_as_paused_to_the_operator() -> None:
    origins = Origins()
    origins.status["eu"] = 429
    origins.headers["eu"] = [("retry-after", "30")]
    breaker = {**POOLS["api"]["breaker"], "pause_on_429": True}
    token = "t0ken-t0ken"
    h = harness(
        ROUTE,
        upstream=FakeOrigin(respond=origins.respond),
        origin=None,
        pools={"api": {**POOLS["api"], "breaker": breaker}},
        admin_token=token,
    )
    h.send(from_("DE", "EU"))

    def phases() -> Any:
        auth = {"authorization": f"Bearer {token}"}
        answer = h.send(request("/_edge-limiter/api/breakers", headers=auth))
        return json.loads(answer.body or b"{}")["breakers"]

    assert phases()["eu"] == "paused"
    h.clock.advance(30_001)
    assert phases()["eu"] == "closed"


def test_the_bulkhead_sends_excess_to_the_next_origin_or_answers_503_at_once() -> None:
    origins = Origins()
    origins.hold = asyncio.Event()
    pools = {"one": {"origins": [{"name": "solo", "url": "http://solo.test", "max_in_flight": 2}]}}
    h = pooled(origins, {**ROUTE, "pool": "one"}, pools=pools)

    async def scenario() -> list[Response]:
        tasks = [asyncio.ensure_future(h.gateway.handle(request(), h.background)) for _ in range(4)]
        while len(origins.hits) < 2:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        done = [t for t in tasks if t.done()]
        assert origins.hold is not None
        origins.hold.set()
        await asyncio.gather(*tasks)
        return [t.result() for t in done]

    shed = asyncio.run(scenario())
    h.flush()
    assert len(origins.hits) == 2  # never more than 2 in flight
    assert [r.status for r in shed] == [503, 503]
    assert body_json(shed[0])["code"] == "origin_busy"
    busy = h.events("origin_busy")
    assert len(busy) == 2 and busy[0]["origins"] == {"solo": "bulkhead_full"}


def test_a_client_that_goes_away_gives_its_bulkhead_slot_and_outcome_back() -> None:
    # Both slots taken by requests whose clients go away while the origin works on them:
    # the platform drops such requests unless they hold it, so their attempts end, give
    # the slots back and are judged by the breaker (before: both slots were lost for the
    # isolate's life, and every later request was refused at once, "origin_busy").
    origins = Origins()
    origins.hold = asyncio.Event()
    pools = {"one": {"origins": [{"name": "solo", "url": "http://solo.test", "max_in_flight": 2}]}}
    h = pooled(origins, {**ROUTE, "pool": "one"}, pools=pools)

    async def scenario() -> list[Response]:
        connections = [h.connect(request())[1] for _ in range(2)]
        while len(origins.hits) < 2:
            await asyncio.sleep(0)
        for connection in connections:
            connection.gone = True
        assert origins.hold is not None
        origins.hold.set()
        for _ in range(20):  # the origin's answers arrive
            await asyncio.sleep(0)
        for connection in connections:
            await connection.run()
        origins.hold = None
        # Later requests, while the dropped ones are still never resumed.
        return [await h.gateway.handle(request(), h.background) for _ in range(3)]

    assert [a.status for a in asyncio.run(scenario())] == [200] * 3
    h.flush()
    assert h.gateway.upstream.bulkheads["solo"].in_flight == 0
    assert h.events("origin_busy") == []
    # Judged: two successes before the three later requests' (no window, the default 10).
    assert h.gateway.upstream.breakers.copies["solo"].state.recent == "sssss"


def test_a_sync_whose_work_was_cut_off_does_not_stop_the_next() -> None:
    # The platform ends work deferred after a response 30 s later, and then it never
    # finishes: a breaker sync cut off must not keep the copy from ever syncing again.
    origins = Origins()
    h = pooled(origins)
    h.send(from_("DE", "EU"))  # the copy, new, is refreshed before it decides
    assert h.breakers.calls == ["eu"]
    h.clock.advance(1_100)
    h.send(from_("DE", "EU"), flush=False)  # reports after the response; dropped
    h.background.discard()
    h.clock.advance(20_000)
    h.send(from_("DE", "EU"))  # the sync taken as still under way
    assert h.breakers.calls == ["eu"]
    h.clock.advance(20_000)
    h.send(from_("DE", "EU"))  # over 35 s later: refreshed before it decides
    assert h.breakers.calls.count("eu") >= 2


def test_every_origin_open_is_a_503_with_retry_after_naming_them() -> None:
    origins = Origins()
    origins.status.update({"eu": 503, "us": 503, "ap": 503})
    h = pooled(origins)
    for _ in range(8):
        h.send(from_("DE", "EU"))
    answer = h.send(from_("DE", "EU"))
    assert answer.status == 503
    body = body_json(answer)
    assert body["code"] == "origins_unavailable"
    assert {t["outcome"] for t in body["tried"]} == {"breaker_open"}
    assert 1 <= int(answer.headers.get("retry-after") or 0) <= 10
    # No attempt was made, so a line of its own says why (a probe's finding: nothing did).
    logged = h.events("origins_unavailable")[-1]
    assert logged["route"] == ROUTE["name"]
    assert logged["origins"] == {"eu": "breaker_open", "us": "breaker_open", "ap": "breaker_open"}


def test_the_retry_budget_keeps_an_outage_from_multiplying_load() -> None:
    origins = Origins()
    origins.status.update({"eu": 500})  # not a failure status: no breaker, only retries?
    pools = {
        "api": {
            **POOLS["api"],
            "breaker": {"failure_statuses": [500], "window": 100, "min_calls": 100},
            "retry": {"attempts": 3, "budget": 0.1, "min_per_second": 1},
            "origins": [POOLS["api"]["origins"][0]],
        }
    }
    h = pooled(origins, pools=pools)
    for _ in range(50):
        h.send(from_("DE", "EU"))
    # 50 requests may add at most 10% retries (plus the floor of 1 a second).
    assert len(origins.hits) <= 50 + 5 + 10
    assert h.events("retry_budget_exhausted")


def test_stale_if_error_serves_the_cached_copy_when_every_origin_fails() -> None:
    origins = Origins()
    cached = {**ROUTE, "cache": {"ttl": "1m", "default_ttl": "1m", "stale_if_error": "10m"}}
    h = pooled(origins, cached)
    assert h.send(from_("DE", "EU")).body == b"from eu"
    h.clock.advance(120_000)  # past its freshness, within stale_if_error
    origins.down.update({"eu", "us", "ap"})
    stale = h.send(from_("DE", "EU"))
    assert stale.status == 200 and stale.body == b"from eu"
    assert stale.headers.get("x-cache") == "STALE" and stale.headers.get("age") == "120"
    h.clock.advance(600_000)
    assert h.send(from_("DE", "EU")).status == 502  # past the stale window too


def test_stale_if_error_covers_an_origins_500_and_counts_the_time_spent_in_age() -> None:
    origins = Origins()
    cached = {**ROUTE, "cache": {"ttl": "1m", "default_ttl": "1m", "stale_if_error": "10m"}}
    h = pooled(origins, cached)
    h.send(from_("DE", "EU"))
    h.clock.advance(120_000)
    origins.status.update({"eu": 500, "us": 500, "ap": 500})  # RFC 5861: 500 is an error
    stale = h.send(from_("DE", "EU"))
    assert stale.status == 200 and stale.headers.get("x-cache") == "STALE"
    origins.status.clear()
    original = h.origin.respond

    async def respond(outgoing: OriginRequest) -> Response:
        h.clock.advance(3_000)  # the time the origin takes to fail
        raise OriginUnreachableError("gone")

    h.origin.respond = respond
    late = h.send(from_("DE", "EU"))
    assert late.headers.get("x-cache") == "STALE"
    tries = int(late.headers.get("age") or 0) - 120
    assert tries >= 3  # the copy's age when it leaves, the failed attempts included
    h.origin.respond = original


def test_refund_on_gives_the_quota_back_when_the_origins_fail() -> None:
    origins = Origins()
    origins.status.update({"eu": 502, "us": 502, "ap": 502})
    limited = {**ROUTE, "limits": "2/hour", "refund_on": [502], "retry": {"attempts": 1}}
    h = pooled(origins, limited)
    for _ in range(5):
        failed = h.send(from_("DE", "EU"))
        assert failed.status == 502  # refunded: never 429
        # ...and its fields say so: the unit is back.
        assert failed.headers.get("x-ratelimit-remaining") == "2"
        # Whole again at once (a probe's finding: "Remaining: 2, Reset: 1800").
        assert failed.headers.get("x-ratelimit-reset") == "0"
        assert (failed.headers.get("ratelimit") or "").endswith(";r=2;t=0")
    origins.status.clear()
    assert [h.send(from_("DE", "EU")).status for _ in range(3)] == [200, 200, 429]


class OnceBody:
    """A streamed request body, as the platform's: read into memory (then kept), or sent
    as a stream, which consumes it: after that it can be neither read nor sent again."""

    def __init__(self, data: bytes) -> None:
        self._stream: bytes | None = data
        self.data: bytes | None = None

    async def read(self) -> bytes:
        if self.data is None:
            self.data = self.send()
        return self.data

    def send(self) -> bytes:
        if self.data is not None:
            return self.data
        if self._stream is None:
            raise RuntimeError("this stream is disturbed (already read)")
        sent, self._stream = self._stream, None
        return sent


def test_a_streamed_body_is_retried_only_when_its_length_allows_keeping_it() -> None:
    # Sized (Content-Length, up to 1 MiB): read once, every attempt sends the same bytes.
    origins = Origins()
    origins.down.add("eu")
    seen: list[bytes] = []

    async def respond(outgoing: OriginRequest) -> Response:
        body = outgoing.body
        assert isinstance(body, OnceBody)
        seen.append(body.send())
        return await origins.respond(outgoing)

    h = harness(ROUTE, upstream=FakeOrigin(respond=respond), origin=None, pools=POOLS)
    sized = from_("DE", "EU", method="DELETE", headers=[("content-length", "5")])
    sized.body = OnceBody(b"hello")  # type: ignore[assignment]
    answer = h.send(sized)
    assert answer.status == 200
    assert origins.hits == ["eu", "us"]
    assert seen == [b"hello", b"hello"]
    # Unknown length (chunked): sent once, streamed; the failure is the answer, never a 500.
    origins.hits.clear()
    chunked = from_("DE", "EU", method="DELETE", headers=[("transfer-encoding", "chunked")])
    chunked.body = OnceBody(b"hello")  # type: ignore[assignment]
    answer = h.send(chunked)
    assert answer.status == 502
    assert origins.hits == ["eu"]


def test_client_ip_header_tells_origins_the_clients_address() -> None:
    h = harness(
        ROUTE, upstream=FakeOrigin(), origin=None, pools=POOLS, client_ip_header="X-Forwarded-For"
    )
    h.send(from_("DE", "EU", headers={"x-forwarded-for": "6.6.6.6", "x-real-ip": "6.6.6.6"}))
    fields = dict(h.origin.sent[-1].headers)
    assert fields["x-forwarded-for"] == "198.51.100.7"  # the client's copy is replaced
    assert fields["x-real-ip"] == "6.6.6.6"  # other fields are the origin's to judge
    nowhere = from_("DE", "EU", ip="", headers={"x-forwarded-for": "6.6.6.6"})
    h.send(nowhere)
    assert "x-forwarded-for" not in dict(h.origin.sent[-1].headers)  # no address: none sent


def test_without_client_ip_header_the_request_goes_as_the_client_sent_it() -> None:
    h = harness(ROUTE, upstream=FakeOrigin(), origin=None, pools=POOLS)
    h.send(from_("DE", "EU", headers={"x-forwarded-for": "6.6.6.6"}))
    assert dict(h.origin.sent[-1].headers)["x-forwarded-for"] == "6.6.6.6"


def test_forwarded_host_tells_origins_the_host_and_scheme_asked_for() -> None:
    h = harness(ROUTE, upstream=FakeOrigin(), origin=None, pools=POOLS, forwarded_host=True)
    forged = {"X-Forwarded-Host": "other-tenant.test", "x-forwarded-proto": "http"}
    asked = from_("DE", "EU", headers=forged)
    asked.host, asked.scheme = "API.Example.com.:8443", "https"
    assert h.send(asked).status == 200
    fields = [(name.lower(), value) for name, value in h.origin.sent[-1].headers]
    # The host as matched (lower case, no trailing dot; a port other than the scheme's
    # kept), each field once: the client's copies are replaced.
    assert [v for n, v in fields if n == "x-forwarded-host"] == ["api.example.com:8443"]
    assert [v for n, v in fields if n == "x-forwarded-proto"] == ["https"]
    plain = from_("DE", "EU")
    plain.host, plain.scheme = "api.example.com:80", "http"
    h.send(plain)
    fields = dict(h.origin.sent[-1].headers)
    assert fields["x-forwarded-host"] == "api.example.com"  # the scheme's own port
    assert fields["x-forwarded-proto"] == "http"


def test_without_forwarded_host_a_clients_forwarded_host_is_dropped() -> None:
    h = harness(ROUTE, upstream=FakeOrigin(), origin=None, pools=POOLS)
    forged = {"x-forwarded-host": "other-tenant.test", "X-Forwarded-Proto": "http"}
    asked = from_("DE", "EU", headers=forged)
    asked.scheme = "https"
    h.send(asked)
    fields = [(name.lower(), value) for name, value in h.origin.sent[-1].headers]
    assert "x-forwarded-host" not in dict(fields)
    # The scheme is the one the client used, never its claim (a Rack origin would answer a
    # forged "http" with a redirect to https, cacheable for everyone).
    assert [v for n, v in fields if n == "x-forwarded-proto"] == ["https"]
    told = harness(
        ROUTE,
        upstream=FakeOrigin(),
        origin=None,
        pools=POOLS,
        origin_headers={"X-Forwarded-Proto": "https"},
    )
    plain = from_("DE", "EU")
    plain.scheme = "http"
    told.send(plain)
    assert dict(told.origin.sent[-1].headers)["x-forwarded-proto"] == "https"  # the config's


GATEWAY_KEY = {"X-Gateway-Key": "$GATEWAY_KEY", "X-Via": "edge-limiter"}


def test_origin_headers_go_on_every_attempt_replacing_the_clients_copy() -> None:
    origins = Origins()
    origins.down.add("eu")  # one retry, to see the header on both attempts
    upstream = FakeOrigin(respond=origins.respond)
    h = harness(
        ROUTE,
        upstream=upstream,
        origin=None,
        pools=POOLS,
        origin_headers=GATEWAY_KEY,
        secrets={"GATEWAY_KEY": "s3cret"},
    )
    answer = h.send(from_("DE", "EU", headers={"x-gateway-key": "forged"}))
    assert answer.status == 200 and len(upstream.sent) == 2
    for sent in upstream.sent:
        fields = [(name.lower(), value) for name, value in sent.headers]
        assert [v for n, v in fields if n == "x-gateway-key"] == ["s3cret"]
        assert ("x-via", "edge-limiter") in fields
    # The secret is never in a log line.
    assert "s3cret" not in repr(h.logs)


def test_a_secret_the_worker_lacks_is_a_config_problem_naming_it() -> None:
    with pytest.raises(ConfigError, match="GATEWAY_KEY is not set"):
        harness(ROUTE, origin=None, pools=POOLS, origin_headers=GATEWAY_KEY)


def test_health_probes_carry_the_origin_headers() -> None:
    sent: list[OriginRequest] = []

    async def respond(outgoing: OriginRequest) -> Response:
        sent.append(outgoing)
        return Response(200, Headers(), b"ok")

    pools = {
        "api": {
            **POOLS["api"],
            "origins": [{**POOLS["api"]["origins"][0], "health": {"path": "/health"}}],
        }
    }
    h = harness(
        ROUTE,
        upstream=FakeOrigin(respond=respond),
        origin=None,
        pools=pools,
        origin_headers=GATEWAY_KEY,
        secrets={"GATEWAY_KEY": "s3cret"},
    )
    asyncio.run(probe_all(h.gateway.config, h.gateway.services, h.gateway.origin_fields))
    [probe] = sent
    assert ("x-gateway-key", "s3cret") in [(n.lower(), v) for n, v in probe.headers.items()]


def test_a_pools_own_headers_replace_the_top_levels_of_the_same_name() -> None:
    upstream = FakeOrigin(respond=Origins().respond)
    pools = {
        "api": {**POOLS["api"], "headers": {"X-Gateway-Key": "$API_KEY", "X-Team": "payments"}},
        "other": {"origins": [{"name": "solo", "url": "http://solo.test"}]},
    }
    other = {**ROUTE, "name": "other", "match": {"path": "/v2/*"}, "pool": "other"}
    h = harness(
        ROUTE,
        other,
        upstream=upstream,
        origin=None,
        pools=pools,
        origin_headers=GATEWAY_KEY,
        secrets={"GATEWAY_KEY": "s3cret", "API_KEY": "api-s3cret"},
        admin_token="admin-t0ken",
    )
    h.send(from_("DE", "EU"))
    h.send(from_("DE", "EU", "/v2/x"))
    api, solo = ({n.lower(): v for n, v in sent.headers} for sent in upstream.sent)
    # The admin API says how each value is given, never the value.
    auth = {"authorization": "Bearer admin-t0ken"}
    shown = body_json(h.send(request("/_edge-limiter/api/config", headers=auth)))
    assert shown["pool_headers"] == {
        "api": {"x-gateway-key": "$API_KEY", "x-team": "(a literal value)"}
    }
    assert shown["origin_headers"]["x-gateway-key"] == "$GATEWAY_KEY"
    assert api["x-gateway-key"] == "api-s3cret" and api["x-team"] == "payments"
    assert api["x-via"] == "edge-limiter"  # the top level's other field stays
    assert solo["x-gateway-key"] == "s3cret" and "x-team" not in solo
    # A pool's missing secret is named with the pool's table.
    with pytest.raises(ConfigError, match=r"pool 'api'.headers.x-gateway-key: the secret API_KEY"):
        harness(ROUTE, origin=None, pools=pools, origin_headers=GATEWAY_KEY)


def test_a_503_with_retry_after_is_retried_on_the_same_origin_only_after_it() -> None:
    answers = [503, 200]
    seen: list[str] = []

    async def respond(outgoing: OriginRequest) -> Response:
        seen.append(outgoing.url)
        status = answers.pop(0) if answers else 200
        return Response(status, Headers([("retry-after", "2")]), b"x")

    pools = {
        "one": {
            "retry": {"attempts": 3, "base": "10ms", "cap": "50ms"},
            "origins": [{"name": "solo", "url": "http://solo.test"}],
        }
    }
    h = harness(
        {**ROUTE, "pool": "one"}, upstream=FakeOrigin(respond=respond), origin=None, pools=pools
    )
    assert h.send(request()).status == 200
    assert len(seen) == 2 and h.sleep.waits and h.sleep.waits[0] >= 2.0  # its Retry-After
    # A Retry-After past the route's deadline: the 503 goes back at once, no wait.
    answers[:] = [503]
    late = harness(
        {**ROUTE, "pool": "one", "timeout": "1s"},
        upstream=FakeOrigin(respond=respond),
        origin=None,
        pools=pools,
    )
    assert late.send(request()).status == 503 and late.sleep.waits == []


def test_a_retry_going_back_round_the_pool_still_waits_for_that_origins_retry_after() -> None:
    # s1 asks for 2 s, s2 fails at once: the third attempt, back on s1, waits for s1's 2 s
    # (it used to wait only when the origin was the one just tried).
    seen: list[tuple[str, int]] = []
    h: Harness

    async def respond(outgoing: OriginRequest) -> Response:
        host = outgoing.url.split("://", 1)[1].split(".", 1)[0]
        seen.append((host, h.clock.now))
        if host == "s1" and len(seen) == 1:
            return Response(503, Headers([("retry-after", "2")]), b"busy")
        if host == "s2":
            return Response(503, Headers(), b"down")
        return Response(200, Headers(), b"ok")

    pools = {
        "two": {
            "retry": {"attempts": 3, "base": "10ms", "cap": "50ms", "budget": 1.0},
            "origins": [
                {"name": "s1", "url": "http://s1.test"},
                {"name": "s2", "url": "http://s2.test", "priority": 1},
            ],
        }
    }
    h = harness(
        {**ROUTE, "pool": "two"}, upstream=FakeOrigin(respond=respond), origin=None, pools=pools
    )
    assert h.send(request()).status == 200
    assert [host for host, _ in seen] == ["s1", "s2", "s1"]
    assert seen[2][1] - seen[0][1] >= 2_000


@pytest.mark.parametrize(
    ("failure", "resent"),
    [
        # No answer: refused, or reset after the whole request arrived (the runtime says
        # "Network connection lost" for both): it may have acted.
        ("refused", False),
        (503, True),  # "unable to handle the request"
        ("timeout", False),  # it may be carrying it out
        (502, False),
        (500, False),
    ],
)
def test_a_post_with_a_claim_is_sent_again_only_when_the_origin_cannot_have_acted(
    failure: object, resent: bool
) -> None:
    seen: list[str] = []

    async def respond(outgoing: OriginRequest) -> Response:
        host = outgoing.url.split("://", 1)[1].split(".", 1)[0]
        seen.append(host)
        if host == "eu":
            if failure == "refused":
                raise OriginUnreachableError("connection refused")
            if failure == "timeout":
                raise OriginTimeoutError("The operation was aborted due to timeout")
            return Response(int(str(failure)), Headers(), b"failed")
        return Response(201, Headers(), b"done")

    payments = {
        **ROUTE,
        "match": {"path": "/v1/*", "methods": ["POST"]},
        "idempotency": {"mode": "required"},
    }
    h = harness(payments, upstream=FakeOrigin(respond=respond), origin=None, pools=POOLS)
    answer = h.send(from_("DE", "EU", method="POST", headers={"idempotency-key": "k1"}, body=b"{}"))
    assert seen == (["eu", "us"] if resent else ["eu"])
    # Sent again: the next origin's answer; else the failure is the answer.
    assert (answer.status == 201) is resent


def test_uploads_the_client_abandons_never_open_the_breaker() -> None:
    # A streamed body that stops (the client went away) fails the attempt; the port says
    # so (the platform saw the client's own stream fail), and such an attempt says
    # nothing of the origin: a 400, never resent, the breaker untouched.
    origins = Origins()
    h = pooled(origins)

    async def respond(outgoing: OriginRequest) -> Response:
        if outgoing.body is not None:
            raise ClientBodyError("Network connection lost.")
        return await origins.respond(outgoing)

    h.origin.respond = respond
    for _ in range(20):
        upload = from_("DE", "EU", method="PUT", headers={"transfer-encoding": "chunked"})
        upload.body = StreamedBody(b"x" * 10)  # type: ignore[assignment]
        answer = h.send(upload)
        assert answer.status == 400 and body_json(answer)["code"] == "request_body_broken"
    # Never sent elsewhere: the body is gone.
    assert [sent.url.split(".")[0] for sent in h.origin.sent] == ["http://eu"] * 20
    assert h.gateway.upstream.breakers.phase("eu", h.clock.now) == "closed"
    assert h.events("origin_attempt")[-1]["outcome"] == "client_body_failed"
    assert h.send(from_("DE", "EU")).headers.get("x-origin") == "eu"


class StreamingOrigins:
    """Origins by host that refuse connections (the request never left), lose them after
    the request was sent, or answer 200; a streamed body is consumed by the first send,
    as the platform's is (a body in memory can be sent again)."""

    def __init__(self) -> None:
        self.refused: set[str] = set()
        self.lost: set[str] = set()
        self.hits: list[str] = []
        self.bodies: list[bytes] = []
        self.resend: list[bool] = []  # each attempt's resend_if_unsent
        self.sent: list[Any] = []  # as FakeOrigin's, for the harness

    async def send(self, outgoing: OriginRequest) -> Response:
        host = outgoing.url.split("://", 1)[1].split(".", 1)[0]
        self.hits.append(host)
        self.resend.append(outgoing.resend_if_unsent)
        body = outgoing.body
        if body is None or isinstance(body, bytes):
            data = body or b""
        elif isinstance(body, BytesBody):
            data = body.data
        else:
            assert isinstance(body, OnceBody)
            data = body.send()  # raises when a stream is sent twice
        if host in self.refused:
            raise OriginConnectError(f"connection refused by {host}")
        if host in self.lost:
            raise OriginUnreachableError("Network connection lost.")
        self.bodies.append(data)
        return Response(200, Headers(), f"from {host}".encode(), FETCHED)


TWO = {
    "two": {
        "breaker": {"failure_rate": 50, "window": 10, "min_calls": 5, "open_for": "1m"},
        "origins": [{"name": "a", "url": "http://a.test"}, {"name": "b", "url": "http://b.test"}],
    }
}
POSTS = {"name": "posts", "match": {"path": "/v1/*"}, "limits": "1000/hour", "pool": "two"}


def two_origins(
    route: dict[str, Any] | None = None, pools: dict[str, Any] | None = None
) -> tuple[Harness, StreamingOrigins]:
    origins = StreamingOrigins()
    h = harness(
        route or POSTS,
        upstream=origins,  # type: ignore[arg-type]
        origin=None,
        pools=pools or TWO,
    )
    return h, origins


def post(kind: str) -> Any:
    """A POST without an Idempotency-Key: text/plain with a sized streamed body
    (``small``), ``Content-Length: 0`` (``empty``), or chunked (``chunked``)."""
    if kind == "empty":
        return request("/v1/x", "POST", headers={"content-length": "0"})
    if kind == "chunked":
        upload = request("/v1/x", "POST", headers={"transfer-encoding": "chunked"})
    else:
        upload = request(
            "/v1/x", "POST", headers={"content-type": "text/plain", "content-length": "5"}
        )
    upload.body = OnceBody(b"hello")  # type: ignore[assignment]
    return upload


@pytest.mark.parametrize("kind", ["small", "empty", "chunked"])
def test_a_dead_origin_opens_its_breaker_on_post_traffic(kind: str) -> None:
    # The finding: POSTs without a key were sent streamed, and a failure with no
    # answer and a streamed body counted neither way: 40 of 40 got 502, the breaker stayed
    # closed. Every failure of the origin counts, whatever the method and body.
    h, origins = two_origins()
    origins.lost.add("a")  # no answer, after the request may have arrived
    statuses = [h.send(post(kind)).status for _ in range(12)]
    # Not resent (the origin may have acted), but only until the breaker opens after
    # min_calls (5) failures; every later POST goes to b.
    assert statuses == [502] * 5 + [200] * 7
    assert origins.hits == ["a"] * 5 + ["b"] * 7
    assert h.gateway.upstream.breakers.phase("a", h.clock.now) == "open"
    lines = [line for line in h.events("origin_attempt") if line["origin"] == "a"]
    assert lines[-1]["outcome"] == "unreachable" and lines[-1]["breaker"] == "open"


@pytest.mark.parametrize("kind", ["small", "empty"])
def test_a_post_that_never_left_goes_to_the_next_origin(kind: str) -> None:
    # A refused connection: the request certainly never reached a, so it is sent to b
    # whatever its method; its body was kept in memory for that (a fallback exists).
    h, origins = two_origins()
    origins.refused.add("a")
    answers = [h.send(post(kind)) for _ in range(12)]
    assert [a.status for a in answers] == [200] * 12  # no client sees the dead origin
    assert origins.hits == ["a", "b"] * 5 + ["b"] * 7  # the breaker opened after 5
    assert origins.bodies == [b"" if kind == "empty" else b"hello"] * 12
    assert h.gateway.upstream.breakers.phase("a", h.clock.now) == "open"
    first = next(line for line in h.events("origin_attempt") if line["origin"] == "a")
    assert first["outcome"] == "unreachable" and first["detail"].startswith("never connected")


def test_a_body_that_cannot_be_kept_is_sent_once_and_still_counts() -> None:
    # Chunked (no length to go by), or above MAX_REPLAY_BODY_BYTES: streamed, so a refused
    # connection is the client's 502; the breaker counts it all the same.
    h, origins = two_origins()
    origins.refused.add("a")
    large = request("/v1/x", "POST", headers={"content-length": str((1 << 20) + 1)})
    large.body = OnceBody(b"x" * ((1 << 20) + 1))  # type: ignore[assignment]
    bodies = [post("chunked") for _ in range(4)] + [large]
    assert [h.send(b).status for b in bodies] == [502] * 5
    assert origins.hits == ["a"] * 5
    assert h.gateway.upstream.breakers.phase("a", h.clock.now) == "open"
    assert h.send(post("chunked")).status == 200 and origins.hits[-1] == "b"


def test_a_body_is_kept_in_memory_only_where_another_origin_could_take_it() -> None:
    # One origin and attempts = 1: nowhere to send it again, so it streams as it came.
    lone = {"lone": {"origins": [{"name": "a", "url": "http://a.test"}], "retry": {"attempts": 1}}}
    h, origins = two_origins({**POSTS, "pool": "lone"}, lone)
    upload = post("small")
    assert h.send(upload).status == 200
    assert upload.body._stream is None and upload.body.data is None  # sent, never read
    # Nowhere else to send it: the port need not tell a connection never made.
    assert origins.resend == [False]
    # Two origins: read into memory first (1 MiB at most), so it can go to b; the port
    # is asked to tell a refused connection while another origin is left to try.
    h, origins = two_origins()
    origins.refused.add("a")
    upload = post("small")
    assert h.send(upload).status == 200 and upload.body.data == b"hello"
    assert origins.hits == ["a", "b"] and origins.resend == [True, False]


def test_a_resend_of_a_request_that_never_left_is_its_first_delivery() -> None:
    # Not one of `attempts` (1 here), no backoff, no retry budget (none here): the
    # request never left, so no origin saw it. Same deadline, breakers and bulkheads.
    pools = {"two": {**TWO["two"], "retry": {"attempts": 1}}}
    h, origins = two_origins(pools=pools)
    origins.refused.add("a")
    started = h.clock.now
    assert h.send(request("/v1/x", "GET")).status == 200
    assert origins.hits == ["a", "b"] and h.clock.now == started  # no wait
    # Both refuse: each origin is tried once, then the 502 says so.
    origins.refused.add("b")
    origins.hits.clear()
    failed = h.send(post("small"))
    assert failed.status == 502 and origins.hits == ["a", "b"]
    assert [t["origin"] for t in body_json(failed)["tried"]] == ["a", "b"]
    # A budget of none: still sent on (the budget bounds retries, and this is none).
    starved = {"two": {**TWO["two"], "retry": {"budget": 0, "min_per_second": 0}}}
    h, origins = two_origins(pools=starved)
    origins.refused.add("a")
    assert [h.send(post("small")).status for _ in range(3)] == [200] * 3
    assert not h.events("retry_budget_exhausted")


def test_a_refused_connection_leaves_the_idempotency_key_free() -> None:
    # Never sent: the origin cannot have acted, so the key is released for the client's
    # retry, not kept with the failure as its answer (as after a lost connection).
    lone = {"lone": {"origins": [{"name": "a", "url": "http://a.test"}]}}
    pay = {**POSTS, "pool": "lone", "idempotency": {"mode": "required"}}
    h, origins = two_origins(pay, lone)
    keyed = [("idempotency-key", "k1"), ("content-type", "text/plain")]
    origins.refused.add("a")
    assert h.send(request("/v1/x", "POST", headers=keyed, body=b"{}")).status == 502
    origins.refused.clear()
    again = h.send(request("/v1/x", "POST", headers=keyed, body=b"{}"))
    assert again.status == 200 and origins.bodies == [b"{}"]  # forwarded, not replayed
    # A lost connection: the origin may have acted; the failure is the key's answer.
    keyed = [("idempotency-key", "k2"), ("content-type", "text/plain")]
    origins.lost.add("a")
    assert h.send(request("/v1/x", "POST", headers=keyed, body=b"{}")).status == 502
    origins.lost.clear()
    replayed = h.send(request("/v1/x", "POST", headers=keyed, body=b"{}"))
    assert replayed.status == 502 and len(origins.bodies) == 1


@pytest.mark.parametrize(("status", "resent"), [(521, True), (523, True), (522, False)])
def test_the_edges_own_failure_answers_count_and_a_refused_one_is_resent(
    status: int, resent: bool
) -> None:
    # Cloudflare answers 52x in the origin's stead: a failure of the origin whatever
    # failure_statuses says (by default 502-504); 521 and 523 say it was never reached.
    seen: list[str] = []

    async def respond(outgoing: OriginRequest) -> Response:
        host = outgoing.url.split("://", 1)[1].split(".", 1)[0]
        seen.append(host)
        return Response(status if host == "a" else 201, Headers(), b"edge")

    h = harness(POSTS, upstream=FakeOrigin(respond=respond), origin=None, pools=TWO)
    answers = [h.send(post("small")).status for _ in range(6)]
    if resent:
        assert answers == [201] * 6 and seen == ["a", "b"] * 5 + ["b"]
    else:
        assert answers == [status] * 5 + [201] and seen == ["a"] * 5 + ["b"]
    assert h.gateway.upstream.breakers.phase("a", h.clock.now) == "open"


def test_an_attempt_cut_short_gives_its_trial_permit_back() -> None:
    # A platform error (or the request cancelled as its client left) decides nothing
    # about the origin, but its half-open trial permit comes back at once: kept, the
    # breaker would refuse every call until trial_timeout (30 s by default).
    origins = Origins()
    origins.status["eu"] = 503
    h = pooled(origins)
    for _ in range(4):
        h.send(from_("DE", "EU"))
    h.clock.advance(10_000)  # open_for: the next call is a trial
    broken = True

    async def respond(outgoing: OriginRequest) -> Response:
        if broken:
            raise RuntimeError("a platform error")
        return await origins.respond(outgoing)

    h.origin.respond = respond
    with pytest.raises(RuntimeError):  # the Worker's entry answers it with a 500
        h.send(from_("DE", "EU"))
    assert h.gateway.upstream.breakers.copies["eu"].state.issued == 0
    broken = False
    origins.status.clear()
    assert h.send(from_("DE", "EU")).headers.get("x-origin") == "eu"  # a trial at once


def test_a_504_says_the_timeout_that_ran_out_at_each_origin() -> None:
    async def respond(outgoing: OriginRequest) -> Response:
        raise OriginTimeoutError("The operation was aborted due to timeout")

    pools = {"api": {**POOLS["api"], "origins": [{**POOLS["api"]["origins"][0], "timeout": "2s"}]}}
    h = harness(
        {**ROUTE, "timeout": "8s"}, upstream=FakeOrigin(respond=respond), origin=None, pools=pools
    )
    answer = h.send(from_("DE", "EU"))
    assert answer.status == 504
    problem = body_json(answer)
    # The origin's own 2 s ran out, not the route's 8 s: an operator raises the right one.
    assert problem["tried"][0] == {"origin": "eu", "outcome": "timeout", "timeout_ms": 2_000}
    assert "eu (timeout after 2000 ms)" in problem["detail"] and problem["timeout_ms"] == 8_000


def test_a_field_the_gateway_sets_reaches_the_origin_in_its_spelling_only() -> None:
    # Named with "_" in the config: a client's dashed or mixed copy (the same field to a
    # CGI-style server) is dropped, and a pool's own field is no other pool's business.
    pools = {"api": {**POOLS["api"], "headers": {"X-Api-Version": "2"}}}
    h = harness(
        ROUTE,
        {"name": "plain", "match": {"path": "/plain/*"}, "limits": "100/minute"},
        upstream=FakeOrigin(),
        pools=pools,
        client_ip_header="X_Client_IP",
        origin_headers={"X_Gateway_Key": "$GATEWAY_KEY"},
        secrets={"GATEWAY_KEY": "s3cret"},
    )
    forged = {
        "X-Client-IP": "6.6.6.6",
        "x-client_ip": "7.7.7.7",
        "X-Gateway-Key": "forged",
        "X_Api_Version": "client",
    }
    h.send(from_("DE", "EU", headers=forged))
    fields = [(name.lower(), value) for name, value in h.origin.sent[-1].headers]
    client = [v for n, v in fields if n.replace("_", "-") == "x-client-ip"]
    assert len(client) == 1 and client[0] not in ("6.6.6.6", "7.7.7.7")
    assert [v for n, v in fields if n.replace("_", "-") == "x-gateway-key"] == ["s3cret"]
    assert [v for n, v in fields if n.replace("_", "-") == "x-api-version"] == ["2"]
    h.send(request("/plain/x", headers={"X_Api_Version": "client"}))
    assert ("x_api_version", "client") in [(n.lower(), v) for n, v in h.origin.sent[-1].headers]


def test_a_key_header_reaches_the_origin_only_as_it_was_counted() -> None:
    # A probe's finding: on a header:x-api-key route, x_api_key: REAL was counted as a
    # request without the key (the shared counter of keyless requests), and a WSGI origin
    # read it as X-Api-Key: REAL: twice the key's quota. The other spellings are dropped.
    keyed = {**ROUTE, "key": "header:x-api-key", "limits": "2/minute"}
    h = pooled(Origins(), keyed)
    sent = h.send(from_("DE", "EU", headers={"x_api_key": "REAL", "X-Api_Key": "R2"}))
    assert sent.status == 200
    fields = [name.lower() for name, _ in h.origin.sent[-1].headers]
    assert not [name for name in fields if name.replace("_", "-") == "x-api-key"]
    both = h.send(from_("DE", "EU", headers={"x_api_key": "REAL", "x-api-key": "rnd1"}))
    assert both.status == 200
    fields = [(n.lower(), v) for n, v in h.origin.sent[-1].headers]
    assert [v for n, v in fields if n.replace("_", "-") == "x-api-key"] == ["rnd1"]


@pytest.mark.parametrize("algorithm", ["fixed_window", "sliding_window", "sliding_log"])
def test_a_refund_that_comes_after_its_window_gives_nothing_of_a_later_one(algorithm: str) -> None:
    """A probe's finding: a request admitted at 9 s of a 10 s window, whose 503 came in the
    next window (or, for a log, after its entry had left the window), gave its unit back
    to the newer requests: 6 passed a limit of 5 in one window."""
    route = {
        "name": "r",
        "match": {"path": "/r"},
        "limits": "5/10s",
        "algorithm": algorithm,
        "refund_on": [503],
        "timeout": "30s",
        "retry": {"attempts": 1},
    }
    h = harness(route)
    h.clock.advance(10_000 - h.clock.now % 10_000 + 9_000)  # 9 s into a window
    release = asyncio.Event()

    async def respond(outgoing: OriginRequest) -> Response:
        if outgoing.url.endswith("/r?slow"):
            await release.wait()
            return Response(503, Headers([]), b"failed")
        return Response(200, Headers([]), b"ok")

    h.origin.respond = respond

    async def scenario() -> list[int]:
        slow = asyncio.ensure_future(h.gateway.handle(request("/r", query="slow"), h.background))
        while not h.origin.sent:  # admitted at 9 s, and at the origin
            await asyncio.sleep(0)
        h.clock.advance(1_300)  # 10.3 s: the next window
        statuses = [(await h.gateway.handle(request("/r"), h.background)).status for _ in range(4)]
        h.clock.advance(9_200)  # 19.5 s: the slow one fails, past its log entry's window too
        release.set()
        assert (await slow).status == 503
        await h.background.run()  # the refund
        statuses += [(await h.gateway.handle(request("/r"), h.background)).status for _ in range(3)]
        await h.background.run()
        return statuses

    assert asyncio.run(scenario()) == [200] * 5 + [429, 429]


def test_the_fields_a_connection_names_go_no_further_either_way() -> None:
    """A probe's finding: ``Connection: X-Foo`` left X-Foo on the request the origin got,
    and the origin's ``Connection: keep-alive, X-Hop`` left X-Hop on the client's answer
    (RFC 9110 7.6.1: a proxy removes what Connection names). The request is read without
    them from the start, so a key named there is counted as missing, as the origin gets it."""

    async def respond(outgoing: OriginRequest) -> Response:
        fields = [
            ("content-type", "text/plain"),
            ("connection", "keep-alive, X-Hop, Content-Type"),
            ("x-hop", "for the gateway only"),
            ("x-kept", "yes"),
        ]
        return Response(200, Headers(fields), b"ok")

    keyed = {**ROUTE, "key": "header:x-api-key", "limits": "2/minute"}
    h = pooled(Origins(), keyed)
    h.origin.respond = respond
    named = {
        "Connection": "close, X-Foo, x-api-key, CF-Connecting-IP, X-Forwarded-For, Host",
        "X-Foo": "secret",
        "X-Api-Key": "K1",
        "CF-Connecting-IP": "203.0.113.9",
        "X-Forwarded-For": "203.0.113.9",
        "X-Bar": "stays",
    }
    answers = [h.send(from_("DE", "EU", headers=named)) for _ in range(2)]
    assert [a.status for a in answers] == [200, 200]
    fields = {name.lower(): value for name, value in h.origin.sent[-1].headers}
    assert "x-foo" not in fields and "x-api-key" not in fields
    assert fields["x-bar"] == "stays" and fields["cf-connecting-ip"] == "203.0.113.9"
    # Counted as the origin got it: without the key (the keyless requests' counter).
    unnamed = {"X-Api-Key": "K1"}
    assert h.send(from_("DE", "EU", headers=unnamed)).status == 200  # K1's own quota
    assert h.send(from_("DE", "EU")).status == 429  # the keyless counter had the two
    answer = {name.lower(): value for name, value in answers[0].headers.items()}
    assert "x-hop" not in answer and answer["x-kept"] == "yes"
    assert answer["content-type"] == "text/plain"  # framing stays whatever it says


def test_an_origins_own_rate_limit_fields_are_kept_beside_the_gateways() -> None:
    """A probe's finding: an origin that limits too (its own 429, or its own fields on a
    200) had its RateLimit fields replaced by the gateway's, which told a client about to
    meet the origin's limit that thousands remained."""
    said = {"remaining": "3"}

    async def respond(outgoing: OriginRequest) -> Response:
        fields = [
            ("content-type", "text/plain"),
            ("ratelimit-policy", '"origin-hour";q=10;w=3600'),
            ("ratelimit", f'"origin-hour";r={said["remaining"]};t=600'),
            ("x-ratelimit-limit", "10"),
            ("x-ratelimit-remaining", said["remaining"]),
            ("x-ratelimit-reset", "600"),
        ]
        return Response(200, Headers(fields), b"ok")

    h = pooled(Origins(), {**ROUTE, "limits": "100/minute"})
    h.origin.respond = respond
    fields = {n.lower(): v for n, v in h.send(from_("DE", "EU")).headers.items()}
    assert fields["ratelimit-policy"] == '"origin-hour";q=10;w=3600, "100-per-minute";q=100;w=60'
    assert fields["ratelimit"].startswith('"origin-hour";r=3;t=600, "100-per-minute";r=99;')
    # The one-value fields: the limit the client meets first (the origin's 3 left).
    assert (fields["x-ratelimit-limit"], fields["x-ratelimit-remaining"]) == ("10", "3")
    assert fields["x-ratelimit-reset"] == "600"
    said["remaining"] = "500"  # the origin's has more left: the gateway's say it
    fields = {n.lower(): v for n, v in h.send(from_("DE", "EU")).headers.items()}
    assert (fields["x-ratelimit-limit"], fields["x-ratelimit-remaining"]) == ("100", "98")


def test_an_answer_whose_body_breaks_off_counts_as_a_failure_of_its_origin() -> None:
    # Judged by its head, the attempt was a success; the cache then read its body and it
    # broke off: a failure of that origin, so enough of them open its breaker and the
    # next origin takes over (before, such answers counted as successes for ever).
    from edge_limiter.core.http.messages import Headers as Fields

    from .fakes import BrokenBody

    class Breaking(Origins):
        async def respond(self, outgoing: OriginRequest) -> Response:
            answer = await super().respond(outgoing)
            if answer.body == b"from eu":
                return Response(200, Fields([("content-type", "text/plain")]), BrokenBody())
            return answer

    origins = Breaking()
    cached = {**ROUTE, "cache": {"ttl": "1m", "default_ttl": "1m"}}
    h = pooled(origins, cached)
    eu = request("/v1/x", country="CH")
    answers = [h.send(eu).status for _ in range(6)]
    assert answers[:4] == [502] * 4
    assert h.events("origin_body_broken")[0]["origin"] == "eu"
    assert h.send(eu).body == b"from us"  # eu's breaker is open: the next origin answers
