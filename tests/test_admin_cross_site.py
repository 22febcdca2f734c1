"""The admin API acts for its own page and for clients that are no browser, never for
another site's page: a browser attaches the operator's Basic credentials to the forms,
navigations and simple requests other pages make it send.

Every call that changes something takes its parameters in an ``application/json`` body
only (no form or simple request can send one), and a browser's ``Sec-Fetch-Site`` or
``Origin`` that names another page refuses any call but a navigation, before the
credentials are looked at."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from typing import Any

import pytest

from edge_limiter.core.control import OverridesCall
from edge_limiter.core.http.messages import Response

from .fakes import Harness, body_json, harness, request

TOKEN = "admin-secret-91ad"
BASIC = "Basic " + base64.b64encode(f"ops:{TOKEN}".encode()).decode()
BEARER = f"Bearer {TOKEN}"
#: The gateway's own origin in these tests (the fakes' requests go to https://api.test).
OWN = "https://api.test"
ROUTES: list[dict[str, Any]] = [
    {"name": "api", "match": {"path": "/v1/*"}, "limits": "2/hour", "key": "header:x-api-key"},
    {
        "name": "cached",
        "match": {"path": "/c/*"},
        "limits": "100/hour",
        "cache": {"ttl": "5m", "default_ttl": "5m"},
    },
]
CACHED_URL = "https://api.test/c/x"


def gw(**top: Any) -> Harness:
    """A gateway with a key used up, a cached answer and an override: something for each
    call to change."""
    h = harness(*ROUTES, admin_token=TOKEN, **top)
    for _ in range(3):
        h.send(request("/v1/x", headers={"x-api-key": "alice"}))
    h.send(request("/c/x"))
    assert h.send(request("/c/x")).headers.get("x-cache") == "HIT"
    body = json.dumps({"route": "api", "key": "bob", "limits": "9/hour", "reason": "plan"})
    assert send(h, "POST", "/api/overrides", body, {"content-type": "application/json"}) == 200
    return h


def send(
    h: Harness,
    method: str,
    path: str,
    body: str | bytes | None = None,
    headers: dict[str, str] | None = None,
    *,
    credentials: str | None = BEARER,
    whole: bool = False,
) -> Any:
    """A call under the prefix; its status (or, ``whole``, its response)."""
    fields = {"authorization": credentials} if credentials else {}
    fields.update(headers or {})
    path, _, query = path.partition("?")
    data = body.encode() if isinstance(body, str) else body
    answer = h.send(
        request("/_edge-limiter" + path, method, query=query, headers=fields, body=data)
    )
    return answer if whole else answer.status


def override_id(h: Harness) -> str:
    listed = asyncio.run(h.control.overrides(OverridesCall("list"))).describe()["overrides"]
    return str(listed[0]["id"])


def state(h: Harness) -> tuple[Any, ...]:
    """What the calls below could change: the key's counters, the cache, the overrides,
    the breaker (and the log lines that say a change was made)."""
    overrides = asyncio.run(h.control.overrides(OverridesCall("list"))).describe()["overrides"]
    breakers = body_json(send(h, "GET", "/api/breakers", whole=True))["breakers"]
    effects = [
        r["event"]
        for r in h.logs
        if r.get("event")
        in (
            "admin_reset",
            "admin_refund",
            "admin_override_set",
            "admin_override_deleted",
            "admin_cache_purge",
            "admin_breaker_forced",
        )
    ]
    return (
        len(h.store.calls),
        sorted(h.kv.values),
        len(h.kv.deletes),
        [o["id"] for o in overrides],
        breakers,
        effects,
    )


#: Each call that changes something, as the admin API takes it: method, path, JSON body.
CALLS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "reset": ("POST", "/api/keys/reset", {"route": "api", "key": "alice"}),
    "refund": ("POST", "/api/keys/refund", {"route": "api", "key": "alice", "cost": 1}),
    "override": (
        "POST",
        "/api/overrides",
        {"route": "api", "key": "mallory", "exempt": True, "reason": "csrf"},
    ),
    "purge": ("POST", "/api/cache/purge", {"url": CACHED_URL}),
    "breaker": ("POST", "/api/breakers/origin.test", {"state": "open"}),
    "delete": ("DELETE", "/api/overrides/{id}", None),
}
POSTS = [name for name, (method, _, _) in CALLS.items() if method == "POST"]


def asked(h: Harness, name: str) -> tuple[str, str, str | None]:
    method, path, body = CALLS[name]
    return method, path.replace("{id}", override_id(h)), json.dumps(body) if body else None


@pytest.mark.parametrize("name", list(CALLS))
def test_each_call_works_as_json_from_a_cli_or_the_page_itself(name: str) -> None:
    for fields, credentials in [
        # A CLI: the token as a Bearer, no browser's fields.
        ({}, BEARER),
        # The status page's own fetch, with the Basic credentials the browser holds.
        ({"origin": OWN, "sec-fetch-site": "same-origin", "sec-fetch-mode": "cors"}, BASIC),
        # A browser that sends no Fetch Metadata (Safari before 16.4), and an Origin
        # spelled with its default port.
        ({"origin": "https://API.test:443"}, BASIC),
        # What the user typed (a browser's own request, no page behind it).
        ({"sec-fetch-site": "none"}, BASIC),
    ]:
        h = gw()
        before = state(h)
        method, path, body = asked(h, name)
        headers = dict(fields)
        if body is not None:
            headers["content-type"] = "application/json; charset=utf-8"
        answer = send(h, method, path, body, headers, credentials=credentials, whole=True)
        assert answer.status == 200, (name, headers, body_json(answer))
        assert state(h) != before, (name, headers)


@pytest.mark.parametrize("name", POSTS)
@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "text/plain;charset=UTF-8",  # what fetch(..., {mode: "no-cors"}) sends a string as
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=----x",
        "application/json, text/plain",  # two lines, as the runtime joins them
        "text/json",
        "application/jsonx",
        "application/problem+json",
    ],
)
def test_a_change_is_taken_only_in_a_json_body(name: str, content_type: str | None) -> None:
    h = gw()
    before = state(h)
    method, path, body = asked(h, name)
    headers = {"content-type": content_type} if content_type is not None else {}
    answer = send(h, method, path, body, headers, whole=True)
    assert answer.status == 415, (name, content_type)
    problem = body_json(answer)
    assert problem["code"] == "admin_json_required"
    assert "application/json" in problem["detail"] and "e.g. {" in problem["detail"]
    assert answer.headers.get("accept-post") == "application/json"
    assert state(h) == before


@pytest.mark.parametrize("name", list(CALLS))
def test_a_change_takes_no_query_not_even_beside_a_json_body(name: str) -> None:
    # What the admin API used to take: a form of another site's page can send a query.
    legacy = {
        "reset": "route=api&key=alice",
        "refund": "route=api&key=alice&cost=1",
        "override": "route=api&key=mallory",
        "purge": f"url={CACHED_URL}",
        "breaker": "state=open",
        "delete": "really=yes",
    }[name]
    h = gw()
    before = state(h)
    method, path, body = asked(h, name)
    headers = {"content-type": "application/json"} if body else {}
    for query_body in (None, body):
        answer = send(h, method, f"{path}?{legacy}", query_body, headers, whole=True)
        assert answer.status == 400, name
        problem = body_json(answer)
        assert problem["code"] == "bad_admin_request"
        assert "takes no query" in problem["detail"]
        if method == "POST":
            assert "application/json body (e.g. {" in problem["detail"]
    assert state(h) == before


CROSS_SITE = [
    # A form's POST, as a navigation.
    {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate", "sec-fetch-dest": "document"},
    {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors"},  # fetch no-cors
    {"sec-fetch-site": "same-site", "sec-fetch-mode": "navigate"},  # a sibling subdomain
    {"sec-fetch-site": "cross-site", "origin": OWN},  # Origin and metadata disagree
    {"origin": "https://evil.example"},
    {"origin": "null"},  # a sandboxed frame, or a POST redirected across origins
    {"origin": "http://api.test"},  # another scheme
    {"origin": "https://api.test:8443"},  # another port
    {"origin": "https://api.test.evil.example"},
    {"origin": f"{OWN}, https://evil.example"},  # two lines, joined
    {"origin": f"{OWN}/"},  # not an origin
]


@pytest.mark.parametrize("name", list(CALLS))
@pytest.mark.parametrize(
    "fields", CROSS_SITE, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items())
)
def test_another_pages_request_is_refused_whatever_it_carries(
    name: str, fields: dict[str, str]
) -> None:
    h = gw()
    before = state(h)
    method, path, body = asked(h, name)
    headers = {**fields, "content-type": "application/json"} if body else fields
    for credentials in (BASIC, BEARER, None, "Basic bm9wZTpub3Bl"):
        answer = send(h, method, path, body, headers, credentials=credentials, whole=True)
        # The same answer with the right, wrong or no credentials: checked before them,
        # and no challenge (a login prompt over another site's page).
        assert answer.status == 403, (name, fields, credentials)
        assert body_json(answer)["code"] == "admin_cross_site"
        assert "www-authenticate" not in answer.headers
    assert state(h) == before
    logged = h.events("admin_cross_site")
    assert [r["credentials"] for r in logged] == [True, True, False, True]
    assert logged[0]["method"] == method and logged[0]["path"].startswith("/_edge-limiter/api")
    assert TOKEN not in json.dumps(h.logs)


def test_reads_are_navigations_or_the_pages_own_never_another_pages_fetch() -> None:
    h = gw()
    page = "/"
    # A link to the status page or an API answer from anywhere opens it (a navigation).
    navigation = {
        "sec-fetch-site": "cross-site",
        "sec-fetch-mode": "navigate",
        "sec-fetch-dest": "document",
    }
    for path in (page, "/api/config", "/api/keys?route=api&key=alice"):
        assert send(h, "GET", path, headers=navigation, credentials=BASIC) == 200, path
    # The page's own refresh and a CLI.
    own = {"sec-fetch-site": "same-origin", "sec-fetch-mode": "cors"}
    assert send(h, "GET", page, headers=own, credentials=BASIC) == 200
    assert send(h, "GET", "/api/stats") == 200
    # Another page's script, image or fetch gets nothing, with or without credentials:
    # an API answer read as a script, or a Durable Object call per image it embeds.
    for fields in (
        {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors"},
        # A frame of another site's page, the status page's buttons under a decoy.
        {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate", "sec-fetch-dest": "iframe"},
        {"sec-fetch-site": "same-site", "sec-fetch-mode": "cors", "origin": "https://a.api.test"},
        {"sec-fetch-site": "cross-site"},
        {"origin": "https://evil.example"},
    ):
        for method in ("GET", "HEAD"):
            for path in (page, "/api/config", "/api/keys?route=api&key=alice"):
                answer = send(h, method, path, headers=fields, credentials=BASIC, whole=True)
                assert answer.status == 403, (method, path, fields)


def test_no_preflight_or_answer_under_the_prefix_opens_it_to_another_origin() -> None:
    # Even where the gateway's CORS table lets that page read the routes' answers.
    cors = {"allow_origins": ["https://app.test"], "allow_credentials": True}
    h = gw(cors=cors)
    preflight = {"origin": "https://app.test", "access-control-request-method": "POST"}
    preflight["access-control-request-headers"] = "content-type"
    answers = [
        send(h, "OPTIONS", "/api/keys/reset", headers=preflight, credentials=None, whole=True),
        send(h, "OPTIONS", "/api/keys/reset", headers=preflight, whole=True),
        send(
            h,
            "POST",
            "/api/keys/reset",
            '{"route": "api", "key": "alice"}',
            {"origin": "https://app.test", "content-type": "application/json"},
            whole=True,
        ),
        send(h, "GET", "/api/config", headers={"origin": "https://app.test"}, whole=True),
        send(h, "OPTIONS", "/api/keys/reset", whole=True),  # no page: a 405 that says so
    ]
    assert [a.status for a in answers] == [403, 403, 403, 403, 405]
    for answer in answers:
        assert not [n for n, _ in answer.headers.items() if n.lower().startswith("access-control")]
    # The gateway's own answers on the routes still get them.
    denied = h.send(request("/v1/x", headers={"origin": "https://app.test", "x-api-key": "alice"}))
    assert denied.status == 429
    assert denied.headers.get("access-control-allow-origin") == "https://app.test"


def test_the_checks_hold_for_every_spelling_of_the_prefix_and_no_method_override() -> None:
    h = gw()
    before = state(h)
    reset = '{"route": "api", "key": "alice"}'
    json_type = {"content-type": "application/json"}
    cross = {"sec-fetch-site": "cross-site", **json_type}
    for path in ("/_EDGE-LIMITER/api/keys/reset", "/_edge-limiter;x=1/api/keys/reset"):
        refused = h.send(
            request(path, "POST", headers={**cross, "authorization": BASIC}, body=reset.encode())
        )
        assert refused.status == 403, path
    # A POST never becomes the DELETE it asks to be under the prefix (the routes' method
    # override is not the admin API's).
    ident = override_id(h)
    for headers, query in (({"x-http-method-override": "DELETE"}, ""), ({}, "_method=DELETE")):
        path = f"/api/overrides/{ident}" + (f"?{query}" if query else "")
        assert send(h, "POST", path, "{}", {**json_type, **headers}) in (400, 405)
    assert state(h) == before


def test_a_json_bodys_members_are_checked_as_the_query_was() -> None:
    h = gw()
    before = state(h)
    json_type = {"content-type": "application/json"}
    for path, body, said in [
        ("/api/keys/reset", "", "JSON object"),
        ("/api/keys/reset", "[]", "JSON object"),
        ("/api/keys/reset", '"route=api"', "JSON object"),
        ("/api/keys/reset", "{", "not JSON"),
        ("/api/keys/reset", '{"route": "api"}', "key is required"),
        ("/api/keys/reset", '{"route": "api", "key": 7}', "key must be a JSON string"),
        ("/api/keys/reset", '{"route": ["api"], "key": "a"}', "route must be a JSON string"),
        ("/api/keys/reset", '{"route": "api", "key": "a", "key": "b"}', "ambiguous"),
        ("/api/keys/reset", '{"route": "api", "key": "a", "cost": 1}', "unknown member(s) cost"),
        ("/api/keys/refund", '{"route": "api", "key": "alice", "cost": "1"}', "JSON integer"),
        ("/api/keys/refund", '{"route": "api", "key": "alice", "cost": true}', "JSON integer"),
        ("/api/keys/refund", '{"route": "api", "key": "alice", "cost": 1.5}', "JSON integer"),
        ("/api/keys/refund", '{"route": "api", "key": "alice", "cost": 0}', "at least 1"),
        ("/api/keys/refund", '{"route": "api", "key": "alice", "units": 3}', "units"),
        ("/api/cache/purge", "{}", "url is required"),
        ("/api/cache/purge", '{"url": "https://api.test/v1/x"}', "caches nothing"),
        ("/api/breakers/origin.test", "{}", "state must be open, closed or auto"),
        ("/api/breakers/origin.test", '{"state": "open", "for": "1h"}', "unknown member(s) for"),
        ("/api/overrides", '{"route": "api", "exempt": true}', "got nothing"),
    ]:
        answer = send(h, "POST", path, body, json_type, whole=True)
        assert answer.status == 400, (path, body)
        assert said in body_json(answer)["detail"], (path, body, body_json(answer))
    deep = b'{"route": "api", "key": ' + b"[" * 5_000 + b"]" * 5_000 + b"}"
    assert send(h, "POST", "/api/keys/reset", deep, json_type) == 400
    assert send(h, "POST", "/api/keys/reset", b" " * (64 * 1024 + 1), json_type) == 413
    assert state(h) == before


def hardened(answer: Response) -> None:
    headers = answer.headers
    assert headers.get("x-content-type-options") == "nosniff"
    assert headers.get("x-frame-options") == "DENY"
    assert headers.get("cross-origin-resource-policy") == "same-origin"
    assert "frame-ancestors 'none'" in (headers.get("content-security-policy") or "")
    assert headers.get("cache-control") == "no-store"


def test_every_answer_under_the_prefix_is_never_framed_sniffed_or_embedded() -> None:
    h = gw()
    for answer in (
        send(h, "GET", "/api/config", whole=True),
        send(h, "GET", "/", credentials=BASIC, whole=True),
        send(h, "GET", "/", credentials=None, whole=True),  # the 401
        send(h, "POST", "/api/keys/reset", "x", whole=True),  # a 415
        send(h, "POST", "/api/keys/reset", headers={"origin": "null"}, whole=True),  # a 403
        send(h, "GET", "/api/nothing", whole=True),  # a 404
        harness(*ROUTES).send(request("/_edge-limiter/api/config")),  # disabled
    ):
        hardened(answer)
        assert "default-src 'none'" in (answer.headers.get("content-security-policy") or "")


def test_the_page_runs_its_own_script_only_and_has_a_control_for_each_change() -> None:
    h = gw()
    reason = {"route": "api", "key": "eve", "exempt": True, "reason": '<script>alert(1)</script>"'}
    assert (
        send(h, "POST", "/api/overrides", json.dumps(reason), {"content-type": "application/json"})
        == 200
    )
    first, second = (send(h, "GET", "/", credentials=BASIC, whole=True) for _ in range(2))
    policy = first.headers.get("content-security-policy") or ""
    nonce = re.search(r"script-src 'nonce-([A-Za-z0-9_-]{20,})'", policy)
    assert nonce is not None, policy
    for part in (
        "default-src 'none'",
        f"style-src 'nonce-{nonce[1]}'",
        "connect-src 'self'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ):
        assert part in policy
    assert nonce[1] not in (second.headers.get("content-security-policy") or "")  # per answer
    assert first.headers.get("cross-origin-opener-policy") == "same-origin"
    html = first.body.decode() if isinstance(first.body, bytes) else ""
    # One script and one style, both the page's own; the reason is shown as text.
    assert re.findall(r"<script[^>]*>", html) == [f'<script nonce="{nonce[1]}">']
    assert re.findall(r"<style[^>]*>", html) == [f'<style nonce="{nonce[1]}">']
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in html
    assert " on" + "click=" not in html and "javascript:" not in html
    # A refresh without a script only; none that would reload what is being typed in.
    assert re.findall(r"<meta http-equiv[^>]*>", html) == [
        '<meta http-equiv="refresh" content="5">'
    ]
    assert '<noscript><meta http-equiv="refresh"' in html
    # A control for each change, each a call with a JSON body.
    for state_ in ("open", "closed", "auto"):
        assert f'data-op="breaker" data-origin="origin.test" data-state="{state_}"' in html
    listed = asyncio.run(h.control.overrides(OverridesCall("list"))).describe()["overrides"]
    for override in listed:
        assert f'data-op="delete-override" data-id="{override["id"]}"' in html
    assert '<form id="reset">' in html and '<option value="api">' in html
    assert '<form id="purge">' in html  # a route caches
    assert '"Content-Type"] = "application/json"' in html and "JSON.stringify(body)" in html
    # What the script reads again: the figures alone, no script or style of their own.
    part = send(h, "GET", "/?part=live", credentials=BASIC, whole=True)
    text = part.body.decode() if isinstance(part.body, bytes) else ""
    assert part.status == 200 and text.startswith('<section id="live">')
    assert text.endswith("</section>") and "<script" not in text and "<style" not in text
    assert f'data-id="{listed[0]["id"]}"' in text
    assert send(h, "GET", "/?part=all", credentials=BASIC) == 400
    without_cache = harness(ROUTES[0], admin_token=TOKEN)
    page = send(without_cache, "GET", "/", credentials=BASIC, whole=True)
    assert b'<form id="purge">' not in page.body
