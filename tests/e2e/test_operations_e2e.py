"""The operator's tools end to end on the local runtime, with two isolates: the admin API
and its secret, overrides reaching the other isolate, the deny cache saving Durable Object
calls (counted by the local host), Analytics Engine points, and the status page in a real
headless browser (Debian's Chromium, driven by Playwright)."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from demo_origin import DemoOrigin
from local_gateway import LocalGateway

from .conftest import fresh_ip, track

pytestmark = pytest.mark.e2e

TOKEN = "e2e-admin-token-5b1d"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def config(origin: str) -> dict[str, Any]:
    def route(name: str, limits: str, **more: Any) -> dict[str, Any]:
        return {
            "name": name,
            "match": {"path": f"/{name}/*"},
            "limits": limits,
            "algorithm": "sliding_log",
            "key": "header:x-api-key",
            **more,
        }

    return {
        "origin": origin,
        "overrides": {"refresh": "1s"},
        "routes": [
            route("ops", "3/hour"),
            route("abuse", "10 per 2 seconds"),
            route("ov", "2/hour"),
            route("short", "5 per 10 seconds"),
        ],
    }


@pytest.fixture(scope="module")
def ops_gateway(
    worker_dir: Path, origin: DemoOrigin, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalGateway]:
    gw = LocalGateway(
        worker_dir,
        {"EDGE_LIMITER": config(origin.url), "EDGE_LIMITER_ADMIN_TOKEN": TOKEN},
        persist_dir=tmp_path_factory.mktemp("ops"),
        replicas=2,
        record_analytics=True,
    )
    track(gw.start())
    try:
        yield gw
    finally:
        gw.stop()


def call(base: str, path: str, key: str) -> httpx.Response:
    return httpx.get(
        base + path, headers={"x-api-key": key, "cf-connecting-ip": fresh_ip()}, timeout=30
    )


def admin(
    gw: LocalGateway,
    path: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    **kw: Any,
) -> httpx.Response:
    return httpx.request(
        method,
        f"{gw.url}/_edge-limiter{path}",
        headers=AUTH if headers is None else headers,
        timeout=30,
        **kw,
    )


def test_the_admin_api_needs_the_secret_and_is_never_forwarded(
    ops_gateway: LocalGateway, origin: DemoOrigin
) -> None:
    before = len(origin.hits)
    for headers in ({}, {"authorization": "Bearer nope"}, {"authorization": f"Bearer {TOKEN}x"}):
        answer = admin(ops_gateway, "/api/config", headers=headers)
        assert answer.status_code == 401 and answer.json()["code"] == "unauthorized"
        assert "routes" not in answer.text
    config = admin(ops_gateway, "/api/config")
    assert config.status_code == 200 and [r["name"] for r in config.json()["routes"]] == [
        "ops",
        "abuse",
        "ov",
        "short",
    ]
    assert len(origin.hits) == before
    assert TOKEN not in ops_gateway.stderr_tail(400)


def test_every_admin_endpoint(ops_gateway: LocalGateway) -> None:
    key = f"k{time.time_ns()}"
    for _ in range(4):
        call(ops_gateway.url, "/ops/x", key)
    full = f"header:x-api-key={key}"
    explained = admin(ops_gateway, "/api/explain?url=https://h.test/ops/x").json()
    assert explained["route"] == "ops"
    peek = admin(ops_gateway, f"/api/keys?route=ops&key={full}").json()
    assert peek["next_request"]["allowed"] is False
    refund = admin(ops_gateway, f"/api/keys/refund?route=ops&key={full}&cost=1", "POST").json()
    assert refund["next_request"]["allowed"] is True
    assert call(ops_gateway.url, "/ops/x", key).status_code == 200
    admin(ops_gateway, f"/api/keys/reset?route=ops&key={full}", "POST")
    assert [call(ops_gateway.url, "/ops/x", key).status_code for _ in range(3)] == [200] * 3
    (origin_name,) = admin(ops_gateway, "/api/breakers").json()["breakers"]
    assert "routes" in admin(ops_gateway, "/api/stats").json()
    # An operator takes the origin out: this isolate at once, the other one after about
    # a second of its own traffic; then hands it back.
    forced = admin(ops_gateway, f"/api/breakers/{origin_name}?state=open", "POST")
    assert forced.status_code == 200 and forced.json()["breakers"][origin_name] == "forced_open"
    out = call(ops_gateway.url, "/ops/x", f"{key}-out")
    assert out.status_code == 503 and out.json()["tried"][0]["outcome"] == "forced_open"
    other = ops_gateway.replica_urls[0]
    seen = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and 503 not in seen:
        seen.append(call(other, "/ops/x", f"{key}-{len(seen)}").status_code)
        time.sleep(0.3)
    assert seen[-1] == 503, seen
    admin(ops_gateway, f"/api/breakers/{origin_name}?state=auto", "POST")
    assert call(ops_gateway.url, "/ops/x", f"{key}-back").status_code == 200
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and seen[-1] != 200:
        seen.append(call(other, "/ops/x", f"{key}-{len(seen)}").status_code)
        time.sleep(0.3)
    assert seen[-1] == 200, seen  # the other isolate has it back too


def test_an_override_reaches_the_other_isolate_within_the_refresh(
    ops_gateway: LocalGateway,
) -> None:
    key = f"premium_{time.time_ns()}"
    other = ops_gateway.replica_urls[0]
    assert [call(other, "/ov/x", key).status_code for _ in range(3)] == [200, 200, 429]
    created = admin(
        ops_gateway,
        "/api/overrides",
        "POST",
        json={"route": "ov", "key": "premium_*", "limits": "50/hour", "reason": "e2e"},
    )
    assert created.status_code == 200
    override_id = created.json()["overrides"][0]["id"]
    started = time.monotonic()
    while call(other, "/ov/x", key).status_code != 200:
        assert time.monotonic() - started < 15, "the override never reached the other isolate"
        time.sleep(0.2)
    assert time.monotonic() - started < 12  # refresh 1 s + the deny cache's 10 s at most
    admin(ops_gateway, f"/api/overrides/{override_id}", "DELETE")


def test_a_lowered_limit_counts_what_the_key_already_used(ops_gateway: LocalGateway) -> None:
    key = f"lowered_{time.time_ns()}"
    assert call(ops_gateway.url, "/ov/x", key).status_code == 200  # 1 of 2/hour
    lowered = {"route": "ov", "key": key, "limits": "1/hour", "reason": "abuse"}
    created = admin(ops_gateway, "/api/overrides", "POST", json=lowered)
    assert created.status_code == 200
    # In effect at once here, and the request already made counts: no fresh allowance.
    denied = call(ops_gateway.url, "/ov/x", key)
    assert denied.status_code == 429 and denied.headers["x-ratelimit-limit"] == "1"
    ident = created.json()["override"]["id"]
    admin(ops_gateway, f"/api/overrides/{ident}", "DELETE")
    assert call(ops_gateway.url, "/ov/x", key).status_code == 200  # 2 of 2/hour again


def test_an_override_of_a_longer_window_that_goes_leaves_its_use_counted(
    ops_gateway: LocalGateway,
) -> None:
    # A probe's finding: 8 admitted under 8/20 s, the override deleted, and the route's
    # own 5/10 s admitted 5 more at once.
    key = f"longer_{time.time_ns()}"
    raised = {"route": "short", "key": key, "limits": "8 per 20 seconds"}
    created = admin(ops_gateway, "/api/overrides", "POST", json=raised)
    assert created.status_code == 200
    assert [call(ops_gateway.url, "/short/x", key).status_code for _ in range(9)] == [200] * 8 + [
        429
    ]
    admin(ops_gateway, f"/api/overrides/{created.json()['override']['id']}", "DELETE")
    after = call(ops_gateway.url, "/short/x", key)
    assert after.status_code == 429 and after.headers["x-ratelimit-limit"] == "5", after.headers
    full = f"header:x-api-key={key}"
    peek = admin(ops_gateway, f"/api/keys?route=short&key={full}").json()
    assert peek["next_request"]["allowed"] is False


def test_the_deny_cache_answers_an_abusive_client_without_the_durable_object(
    ops_gateway: LocalGateway,
) -> None:
    key = f"abuser{time.time_ns()}"
    before = ops_gateway.durable_object_calls().get("RateLimiter.decide", 0)
    statuses = []
    started = time.monotonic()
    with httpx.Client(base_url=ops_gateway.url, timeout=30) as client:
        while time.monotonic() - started < 2.0:  # 10x the limit: 50 a second for 2 s
            statuses.append(client.get("/abuse/x", headers={"x-api-key": key}).status_code)
            time.sleep(0.02)
    elapsed = time.monotonic() - started
    calls = ops_gateway.durable_object_calls()["RateLimiter.decide"] - before
    admitted = statuses.count(200)
    denied = statuses.count(429)
    assert admitted + denied == len(statuses) and denied > 0
    # Never more than the limit allows: 10 in any 2 s.
    assert admitted <= 10 * (int(elapsed / 2) + 1)
    # At least 90% of the denials were answered with no Durable Object call.
    assert calls - admitted <= 0.1 * denied
    assert ops_gateway.saw('"event":"cached_denial","route":"abuse"')


def test_decisions_are_analytics_engine_points(ops_gateway: LocalGateway) -> None:
    key = f"a{time.time_ns()}"
    for _ in range(4):
        call(ops_gateway.url, "/ops/x", key)
    assert ops_gateway.saw('ANALYTICS {"binding":"ANALYTICS","blobs":["ops","allowed"')
    # The third answer used the key's last unit and carried its state: the fourth request is
    # denied in the isolate, with no Durable Object call, and is a data point all the same.
    assert ops_gateway.saw('ANALYTICS {"binding":"ANALYTICS","blobs":["ops","cached_denial"')
    assert key not in ops_gateway.stderr_tail(400)  # hashes only


def chromium() -> str | None:
    return os.environ.get("EDGE_LIMITER_CHROMIUM") or shutil.which("chromium")


def test_the_status_page_in_a_real_browser(ops_gateway: LocalGateway) -> None:
    executable = chromium()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail(
                "Chromium is missing: scripts/test installs it as root (apt-get install chromium)"
            )
        pytest.skip("no Chromium on this machine (apt-get install chromium); CI runs this test")
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    key = f"page{time.time_ns()}"
    digest = hashlib.sha256(f"header:x-api-key={key}".encode()).hexdigest()[:16]
    for _ in range(4):
        call(ops_gateway.url, "/ops/x", key)  # a denial
    time.sleep(1.1)
    call(ops_gateway.url, "/ops/x", f"flush{time.time_ns()}")  # counters go out about once a second
    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=args)
        try:
            # A wrong secret: the browser is challenged again and gives up; nothing shown.
            wrong = browser.new_context(http_credentials={"username": "ops", "password": "nope"})
            refused = wrong.new_page()
            try:
                response = refused.goto(f"{ops_gateway.url}/_edge-limiter/")
                assert response is not None and response.status == 401
            except PlaywrightError as exc:  # Chromium may give up on the challenge instead
                assert "ERR_INVALID_AUTH_CREDENTIALS" in str(exc)
            assert "ops" not in refused.content()
            # The right one, as a browser sends it (Basic, after the page's challenge).
            right = browser.new_context(http_credentials={"username": "ops", "password": TOKEN})
            page = right.new_page()
            deadline = time.monotonic() + 15
            while True:
                response = page.goto(f"{ops_gateway.url}/_edge-limiter/")
                assert response is not None and response.status == 200
                table = page.locator("h2#denials + table")
                if table.count() and digest in table.inner_text():
                    break
                assert time.monotonic() < deadline, page.content()
                time.sleep(0.5)
            assert page.title() == "edge-limiter status"
            assert page.locator("table").first.inner_text().count("ops") >= 1
            # It refreshes itself.
            assert page.locator('meta[http-equiv="refresh"]').count() == 1
        finally:
            browser.close()
