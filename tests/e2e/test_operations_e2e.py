"""The operator's tools end to end on the local runtime, with two isolates: the admin API
and its secret, overrides reaching the other isolate, the deny cache saving Durable Object
calls (counted by the local host), Analytics Engine points, and the status page in a real
headless browser (Debian's Chromium, driven by Playwright)."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote

import httpx
import pytest

from edge_limiter.tools.demo_origin import DemoOrigin
from edge_limiter.tools.local_gateway import LocalGateway

from .conftest import fresh_ip, track

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page
    from playwright.sync_api import Request as PlaywrightRequest
    from playwright.sync_api import Response as PlaywrightResponse

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
            route("cached", "1000/hour", cache={"ttl": "5m", "default_ttl": "5m"}),
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
        "cached",
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
    asked = {"route": "ops", "key": full}
    refund = admin(ops_gateway, "/api/keys/refund", "POST", json={**asked, "cost": 1}).json()
    assert refund["next_request"]["allowed"] is True
    assert call(ops_gateway.url, "/ops/x", key).status_code == 200
    assert admin(ops_gateway, "/api/keys/reset", "POST", json=asked).status_code == 200
    assert [call(ops_gateway.url, "/ops/x", key).status_code for _ in range(3)] == [200] * 3
    (origin_name,) = admin(ops_gateway, "/api/breakers").json()["breakers"]
    assert "routes" in admin(ops_gateway, "/api/stats").json()
    # An operator takes the origin out: this isolate at once, the other one after about
    # a second of its own traffic; then hands it back.
    forced = admin(ops_gateway, f"/api/breakers/{origin_name}", "POST", json={"state": "open"})
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
    admin(ops_gateway, f"/api/breakers/{origin_name}", "POST", json={"state": "auto"})
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
    # The flood is not a line per denial: at most one a second ([logging] denials_every),
    # each counting those it stands for.
    printed = [
        json.loads(line[line.index("{") :])
        for line in ops_gateway.stderr_tail(600).splitlines()
        if '"route":"abuse"' in line and re.search(r'"event":"(limited|cached_denial)"', line)
    ]
    assert 1 <= len(printed) <= elapsed + 2 < denied
    assert sum(1 + line.get("repeats", 0) for line in printed) <= denied


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


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the module's browser tests (Debian's, driven by Playwright)."""
    executable = chromium()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail(
                "Chromium is missing: scripts/test installs it as root (apt-get install chromium)"
            )
        pytest.skip("no Chromium on this machine (apt-get install chromium); CI runs this test")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def limited_digest(gw: LocalGateway, key: str) -> str:
    """Deny ``key`` once on the ops route; the hash the status page shows for it."""
    for _ in range(4):
        call(gw.url, "/ops/x", key)
    return hashlib.sha256(f"header:x-api-key={key}".encode()).hexdigest()[:16]


def test_the_status_page_in_a_real_browser(ops_gateway: LocalGateway, browser: Browser) -> None:
    from playwright.sync_api import Error as PlaywrightError

    digest = limited_digest(ops_gateway, f"page{time.time_ns()}")
    page_url = f"{ops_gateway.url}/_edge-limiter/"
    # A wrong secret: the browser is challenged again and gives up; nothing shown.
    wrong = browser.new_context(http_credentials={"username": "ops", "password": "nope"})
    try:
        refused = wrong.new_page()
        try:
            response = refused.goto(page_url)
            assert response is not None and response.status == 401
        except PlaywrightError as exc:  # Chromium may give up on the challenge instead
            assert "ERR_INVALID_AUTH_CREDENTIALS" in str(exc)
        assert "ops" not in refused.content()
    finally:
        wrong.close()
    # The right one, as a browser sends it (Basic, after the page's challenge).
    right = browser.new_context(http_credentials={"username": "ops", "password": TOKEN})
    try:
        page = right.new_page()
        blocked: list[str] = []
        page.on("console", lambda message: blocked.append(message.text))
        response = page.goto(page_url)
        assert response is not None and response.status == 200
        policy = response.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert page.title() == "edge-limiter status"
        assert page.locator("table").first.inner_text().count("ops") >= 1
        denials = page.locator("h2#denials + table")
        denials.filter(has_text=digest).wait_for(timeout=15_000)
        # It refreshes its figures itself (no reload: its controls keep what is typed in them).
        page.fill("#reset input[name=key]", "typed, not sent")
        later = limited_digest(ops_gateway, f"later{time.time_ns()}")
        time.sleep(1.1)
        call(ops_gateway.url, "/ops/x", f"flush{time.time_ns()}")  # counters go out each second
        denials.filter(has_text=later).wait_for(timeout=20_000)
        assert page.input_value("#reset input[name=key]") == "typed, not sent"
        assert page.locator('meta[http-equiv="refresh"]').count() == 0  # only in <noscript>
        assert not [text for text in blocked if "Content Security Policy" in text], blocked
    finally:
        right.close()


class AttackerSite:
    """Another site's pages on loopback: ``GET /<name>`` serves the page registered under
    that name; ``POST /bounce?to=URL`` answers ``307`` to ``URL`` (the browser sends the
    POST on there, as a navigation, with ``Origin: null``)."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page = site.pages.get(self.path.lstrip("/"))
                body = (page or "not here").encode()
                self.send_response(200 if page is not None else 404)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                path, _, query = self.path.partition("?")
                target = dict(parse_qsl(query)).get("to", "")
                self.send_response(307 if path == "/bounce" and target else 404)
                self.send_header("location", target)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, host: str, name: str) -> str:
        return f"http://{host}:{self.port}/{name}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def attacks(
    admin: str, site: str, *, origin: str, victim: str, evil: str, cached: str
) -> dict[str, str]:
    """Pages that make the operator's browser ask the admin API for an effect, each as a
    page of another site can: with the parameters where the admin API used to take them
    (the query, or a ``text/plain`` body that reads as JSON), and in a body as well."""
    submit = "<script>document.forms[0].submit()</script>"
    # text/plain sends name=value: the name opens the JSON, the value closes a string.
    json_name = html.escape(
        json.dumps({"route": "ov", "key": evil, "exempt": True})[:-1] + ', "reason": "'
    )
    reset = html.escape(f"{admin}/api/keys/reset?route=ops&key={victim}")
    refund = quote(f"{admin}/api/keys/refund?route=ops&key={victim}&cost=3", safe="")
    purge_url = f"{admin}/api/cache/purge?url={quote(cached, safe='')}"
    return {
        # A form's usual encoding: the breaker forced open, every origin of its pool out.
        "urlencoded": f'<form method=POST action="{admin}/api/breakers/{origin}?state=open">'
        f"<input name=state value=open></form>{submit}",
        # A body that reads as JSON: an override exempting the attacker's key.
        "text-plain": f'<form method=POST enctype="text/plain" action="{admin}/api/overrides">'
        f'<input name="{json_name}" value="csrf&quot;}}"></form>{submit}',
        "multipart": f'<form method=POST enctype="multipart/form-data" action="{reset}">'
        f'<input name=route value=ops><input name=key value="{victim}"></form>{submit}',
        # A navigation that arrives as a POST from nowhere (Origin: null): a redirect.
        "navigation": f'<form method=POST action="{site}/bounce?to={refund}">'
        f"<input name=cost value=3></form>{submit}",
        # A script's request whose answer the page never reads (no CORS needed), with
        # credentials; its Content-Type is dropped (not one a no-cors request may set).
        "no-cors": f"<script>fetch({json.dumps(purge_url)}, {{method: 'POST', mode: 'no-cors', "
        "credentials: 'include', headers: {'Content-Type': 'application/json'}, "
        f"body: {json.dumps(json.dumps({'url': cached}))}}})</script>",
        # The status page in a frame of another site's page, its buttons under a decoy.
        "frame": f'<iframe name=status src="{admin}/" width=800 height=600></iframe>',
    }


def watch(page: Page, prefix: str) -> list[int | str | None]:
    """What becomes of ``page``'s requests to URLs under ``prefix``: each answer's status,
    or why the browser handed none to the page."""
    seen: list[int | str | None] = []

    def answered(response: PlaywrightResponse) -> None:
        if response.url.startswith(prefix):
            seen.append(response.status)

    def failed(request: PlaywrightRequest) -> None:
        if request.url.startswith(prefix):
            seen.append(request.failure)

    page.on("response", answered)
    page.on("requestfailed", failed)
    return seen


def refusals(gw: LocalGateway) -> list[dict[str, Any]]:
    """The admin API's refusals of other pages' requests in the runtime's recent log."""
    return [
        json.loads(line[line.index("{") :])
        for line in gw.stderr_tail(400).splitlines()
        if '"event":"admin_cross_site"' in line
    ]


def test_other_sites_pages_cannot_act_with_the_operators_credentials(
    ops_gateway: LocalGateway, browser: Browser
) -> None:
    ns = time.time_ns()
    admin_url = f"{ops_gateway.url}/_edge-limiter"
    (origin_name,) = admin(ops_gateway, "/api/breakers").json()["breakers"]
    victim, evil = f"victim{ns}", f"evil{ns}"
    limited_digest(ops_gateway, victim)  # used up: its next request is denied
    cached = f"{ops_gateway.url}/cached/{ns}"
    assert call(ops_gateway.url, f"/cached/{ns}", "c").headers["x-cache"] == "MISS"
    deadline = time.monotonic() + 10
    while call(ops_gateway.url, f"/cached/{ns}", "c").headers.get("x-cache") != "HIT":
        assert time.monotonic() < deadline, "the cached answer never became a hit"
        time.sleep(0.1)
    # One override for the page's delete button (set the way a CLI sets one).
    doomed = {"route": "ov", "key": f"doomed{ns}", "limits": "5/hour", "reason": "e2e"}
    created = admin(ops_gateway, "/api/overrides", "POST", json=doomed)
    assert created.status_code == 200
    doomed_id = created.json()["override"]["id"]

    def breaker() -> str:
        return str(admin(ops_gateway, "/api/breakers").json()["breakers"][origin_name])

    def overrides() -> list[str]:
        return [o["key"] for o in admin(ops_gateway, "/api/overrides").json()["overrides"]]

    def victim_allowed() -> bool:
        peek = admin(ops_gateway, f"/api/keys?route=ops&key={victim}").json()
        return bool(peek["next_request"]["allowed"])

    site = AttackerSite()
    context = browser.new_context()
    try:
        page = context.new_page()
        # The operator opens the status page, signing in: the browser holds the
        # credentials from now on and sends them with requests under the prefix.
        response = page.goto(admin_url.replace("://", f"://ops:{TOKEN}@") + "/")
        assert response is not None and response.status == 200
        refused_before = len(refusals(ops_gateway))
        answers: dict[str, int | str | None] = {}
        # Another site (localhost is not 127.0.0.1), and another origin of the same site.
        for host in ("localhost", "127.0.0.1"):
            site.pages = attacks(
                admin_url,
                f"http://{host}:{site.port}",
                origin=origin_name,
                victim=victim,
                evil=evil,
                cached=cached,
            )
            for name in site.pages:
                attacker = context.new_page()
                outcome = watch(attacker, admin_url)
                try:
                    attacker.goto(site.url(host, name))
                    deadline = time.monotonic() + 15
                    while not outcome and time.monotonic() < deadline:
                        attacker.wait_for_timeout(50)
                    answers[f"{host} {name}"] = outcome[0] if outcome else None
                    if name == "frame":
                        framed = attacker.frame(name="status")
                        assert framed is None or "edge-limiter" not in framed.content()
                finally:
                    attacker.close()
        # Each refused; the answer to the no-cors fetch is not even handed to the page
        # (Cross-Origin-Resource-Policy: same-origin).
        blocked = "net::ERR_BLOCKED_BY_RESPONSE.NotSameOrigin"
        for attack, answer in answers.items():
            assert answer == 403 or (attack.endswith("no-cors") and answer == blocked), answers
        # Nothing changed (asked through the API, as a CLI asks).
        assert not breaker().startswith("forced")
        assert not [key for key in overrides() if evil in key]
        assert not victim_allowed()  # neither reset nor refunded
        assert call(ops_gateway.url, f"/cached/{ns}", "c").headers["x-cache"] == "HIT"
        # ... though the browser did send the operator's credentials with them: every form
        # and navigation of either page, and everything of the same site's (a fetch or a
        # frame of another site's page went without them).
        logged = refusals(ops_gateway)[refused_before:]
        assert len(logged) == len(answers), logged
        assert sum(entry["credentials"] for entry in logged) >= 8, logged

        # The status page's own controls work, each a same-origin fetch with a JSON body.
        said = page.locator("#said")

        def click(selector: str) -> None:
            page.locator(selector).click()
            page.locator('#said[data-status="200"]').wait_for(timeout=15_000)

        button = f'button[data-op=breaker][data-origin="{origin_name}"]'
        click(f"{button}[data-state=open]")
        assert breaker() == "forced_open"
        click(f"{button}[data-state=auto]")
        assert not breaker().startswith("forced")
        page.select_option("#reset select[name=route]", "ops")
        page.fill("#reset input[name=key]", victim)
        click("#reset button[type=submit]")
        assert victim_allowed()
        page.fill("#purge input[name=url]", cached)
        click("#purge button[type=submit]")
        assert '"found": true' in said.inner_text()
        assert call(ops_gateway.url, f"/cached/{ns}", "c").headers["x-cache"] == "MISS"
        # The override set before the page was opened is on it, with its button.
        click(f'button[data-op=delete-override][data-id="{doomed_id}"]')
        assert f"doomed{ns}" not in " ".join(overrides())
    finally:
        context.close()
        site.close()
