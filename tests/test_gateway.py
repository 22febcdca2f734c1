"""The gateway's whole request path on CPython: canonical paths, routing, the rate-limit
stage, failure policies and the origin, over fakes of every port."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from edge_limiter.core.http import problems
from edge_limiter.core.http.messages import Headers, Response
from edge_limiter.core.ratelimit.protocol import DECIDE, StoreRequest, StoreResponse
from edge_limiter.gateway import OriginRequest
from edge_limiter.gateway.exchange import problem_response

from .fakes import (
    FailingStore,
    FakeOrigin,
    HangingStore,
    answering,
    body_json,
    hanging,
    harness,
    request,
    timing_out,
    unreachable,
)

ROUTE = {
    "name": "api",
    "match": {"path": "/v1/*"},
    "limits": "3/minute",
    "algorithm": "sliding_log",
}
LOGIN = {
    "name": "login",
    "match": {"path": "/v1/login", "methods": ["POST"]},
    "limits": "3/hour",
    "algorithm": "sliding_log",
}


def headers_of(response: Response) -> dict[str, str]:
    return dict(response.headers.items())


def test_allows_up_to_the_limit_then_429_with_headers_and_problem_body() -> None:
    h = harness(ROUTE)
    answers = [h.send(request()) for _ in range(4)]
    assert [a.status for a in answers] == [200, 200, 200, 429]
    remaining = [a.headers.get("x-ratelimit-remaining") for a in answers]
    assert remaining == ["2", "1", "0", "0"]
    denied = answers[-1]
    headers = headers_of(denied)
    assert headers["content-type"] == "application/problem+json"
    assert headers["retry-after"] == "60"
    assert headers["ratelimit-policy"] == '"3-per-minute";q=3;w=60'
    body = body_json(denied)
    assert body["violated-policies"] == ["3-per-minute"]
    assert body["code"] == "rate_limited" and body["instance"] == "/v1/x"
    assert len(h.origin.sent) == 3  # the denied request never reached the origin
    h.clock.advance(60_000)
    assert h.send(request()).status == 200


def test_denials_within_a_second_say_the_same_but_each_is_its_own_response() -> None:
    bucket = {
        "name": "b",
        "match": {"path": "/v1/*"},
        "limits": "2/minute",
        "algorithm": "token_bucket",
    }
    h = harness(bucket, logging={"denials_every": "0s"})  # a line per denial, to read each
    assert [h.send(request()).status for _ in range(2)] == [200, 200]
    first = h.send(request())
    h.clock.advance(1)  # the same whole seconds to wait: the same answer
    second = h.send(request())
    assert first.status == second.status == 429
    assert headers_of(first) == headers_of(second) and first.body == second.body
    assert first.headers is not second.headers
    first.headers.set("x-later-stage", "1")  # a later stage adding to one answer ...
    assert "x-later-stage" not in second.headers  # ... leaves the others alone
    h.clock.advance(5_000)  # five seconds later: the wait the answer gives moves with it
    third = h.send(request())
    assert (
        int(third.headers.get("retry-after") or 0) == int(first.headers.get("retry-after") or 0) - 5
    )
    assert body_json(third)["retry_after"] == body_json(first)["retry_after"] - 5
    assert body_json(h.send(request("/v1/other")))["instance"] == "/v1/other"
    denials = h.events("cached_denial") + h.events("limited")
    assert len(denials) == 4 and all(d["violated"] == ["2-per-minute"] for d in denials)


@pytest.mark.parametrize(
    "spelling",
    ["//v1/login", "///v1/login", "/v1/%6cogin", "/v1/log%69n", "/v1/./login", "/v1/x/../login"],
)
def test_no_spelling_of_a_path_dodges_its_route(spelling: str) -> None:
    h = harness(LOGIN, ROUTE)
    for _ in range(3):
        assert h.send(request("/v1/login", "POST")).status == 200
    answer = h.send(request(spelling, "POST"))
    assert answer.status == 429
    assert {sent.path for sent in h.origin.sent} == {"/v1/login"}


def test_the_origin_gets_exactly_the_canonical_path_it_was_counted_on() -> None:
    h = harness(LOGIN, ROUTE)
    h.send(request("//v1/%6cogin", "POST", query="a=1&b=%2F"))
    (sent,) = h.origin.sent
    assert sent.url == "http://origin.test/v1/login?a=1&b=%2F"
    assert sent.method == "POST"


@pytest.mark.parametrize(
    "path", ["/v1/a%2fb", "/v1/a%5Cb", "/v1/%00", "/v1/%zz", "/../v1/x", "/v1/k\\x"]
)
def test_paths_without_a_canonical_form_get_400_and_are_never_forwarded(path: str) -> None:
    h = harness(ROUTE)
    answer = h.send(request(path))
    assert answer.status == 400
    body = body_json(answer)
    assert body["code"] == "bad_path" and "canonical form" in body["detail"]
    assert h.origin.sent == [] and h.store.calls == []
    # The client is told its path; the log is not (a segment may be a route's key).
    (logged,) = h.events("bad_path")
    assert "v1" not in logged["reason"] and "<path>" in logged["reason"]


def test_a_uri_too_long_to_read_is_refused_and_a_bad_long_path_is_not_echoed_whole() -> None:
    # A probe's findings: a 1 MB path (the runtime spells each raw non-UTF-8 byte as
    # %EF%BF%BD) took over a second of the isolate to put in canonical form, and its 400
    # quoted the whole path (an answer nine times the request's size).
    h = harness(ROUTE)
    answer = h.send(request("/v1/" + "a" * 40_000))
    assert answer.status == 414 and body_json(answer)["code"] == "uri_too_long"
    answer = h.send(request("/v1/x", query="q=" + "%" * 40_000))
    assert answer.status == 414 and body_json(answer)["max_length"] == 32 * 1024
    assert h.origin.sent == [] and h.store.calls == []
    near = h.send(request("/v1/" + "a" * 30_000))
    assert near.status == 200  # Cloudflare's own bound is 32 KB: nothing it passes is refused
    long_bad = h.send(request("/v1/" + "%EF%BF%BD" * 3_000 + "/%2F"))
    assert long_bad.status == 400 and len(long_bad.body) < 1_000
    assert "cut short" in body_json(long_bad)["detail"]


def test_path_parameters_key_on_the_decoded_canonical_segment() -> None:
    tenant = {
        "name": "tenant",
        "match": {"path": "/t/{tenant}/*"},
        "limits": "2/hour",
        "key": "path:tenant",
    }
    h = harness(tenant)
    assert h.send(request("/t/acme/x")).status == 200
    assert h.send(request("/t/%61cme/y")).status == 200
    assert h.send(request("//t/acme/z")).status == 429
    assert h.send(request("/t/other/z")).status == 200
    # Bytes that are not UTF-8 are a tenant too (counted as those bytes, never a 500).
    assert h.send(request("/t/%FF/x")).status == 200
    assert h.send(request("/t/%ff/y")).status == 200
    assert h.send(request("/t/%FF/z")).status == 429
    assert h.send(request("/t/%FE/x")).status == 200  # another one


def test_a_trailing_dot_or_default_port_does_not_skip_a_host_route() -> None:
    hosted = {**LOGIN, "match": {**LOGIN["match"], "host": "api.example.test"}}
    h = harness(hosted)
    hosts = ["api.example.test", "api.example.test.", "API.Example.Test:443", "api.example.test"]
    statuses = [h.send(request("/v1/login", "POST", host=host)).status for host in hosts]
    assert statuses == [200, 200, 200, 429]


def test_case_insensitive_routes_share_one_counter() -> None:
    folded = {**LOGIN, "match": {**LOGIN["match"], "case_insensitive": True}}
    h = harness(folded)
    for path in ("/v1/login", "/V1/LOGIN", "/v1/Login"):
        assert h.send(request(path, "POST")).status == 200
    assert h.send(request("/V1/login", "POST")).status == 429
    # The origin sees the path as sent (canonical, case kept): it folds case itself.
    assert [sent.path for sent in h.origin.sent] == ["/v1/login", "/V1/LOGIN", "/v1/Login"]


def test_matrix_parameters_stripped_when_configured_and_never_forwarded() -> None:
    h = harness(LOGIN, paths={"matrix_params": "strip"})
    for _ in range(3):
        h.send(request("/v1/login;jsessionid=abc", "POST"))
    assert h.send(request("/v1/login", "POST")).status == 429
    assert {sent.path for sent in h.origin.sent} == {"/v1/login"}
    rejecting = harness(LOGIN, paths={"matrix_params": "reject"})
    assert rejecting.send(request("/v1/login;x", "POST")).status == 400


def test_keys_are_independent_and_forwarded_for_is_ignored() -> None:
    h = harness(ROUTE)
    for _ in range(3):
        h.send(request(headers={"x-forwarded-for": "10.0.0.1"}))
    assert h.send(request(headers={"x-forwarded-for": "10.9.9.9"})).status == 429
    assert h.send(request(ip="198.51.100.8")).status == 200
    assert len(set(h.store.calls)) == 2


def test_a_head_counts_on_a_get_route() -> None:
    h = harness({**ROUTE, "match": {"path": "/v1/*", "methods": ["GET"]}})
    codes = [h.send(request("/v1/a", method)).status for method in ("GET", "HEAD", "GET", "HEAD")]
    assert codes == [200, 200, 200, 429]  # 3/minute, whichever of the two
    assert [sent.method for sent in h.origin.sent] == ["GET", "HEAD", "GET"]
    assert h.send(request("/v1/a", "POST")).status == 200  # not limited: no store call
    assert h.origin.sent[-1].method == "POST"


DELETES = {
    "name": "deletes",
    "match": {"path": "/v1/items/*", "methods": ["DELETE"]},
    "limits": "2/minute",
    "algorithm": "sliding_log",
}
ITEMS = {**ROUTE, "name": "items", "limits": "100/minute"}


@pytest.mark.parametrize(
    ("how", "headers", "query", "body"),
    [
        ("header", {"x-http-method-override": "DELETE"}, "", None),
        ("x-http-method", {"x-http-method": "delete"}, "", None),
        ("query", {}, "_method=DELETE", None),
        (
            "form",
            {"content-type": "application/x-www-form-urlencoded"},
            "",
            b"id=1&_method=DELETE",
        ),
        # Spellings frameworks decode, a body of no type (Rack reads it as a form), JSON.
        ("encoded query name", {}, "%5Fmethod=DELETE", None),
        (
            "encoded form name",
            {"content-type": "application/x-www-form-urlencoded"},
            "",
            b"id=1&_metho%64=DELETE",
        ),
        ("untyped body", {}, "", b"_method=DELETE"),
        ("json", {"content-type": "application/json"}, "", b'{"_method":"DELETE"}'),
    ],
)
def test_a_post_asking_for_delete_is_counted_and_sent_as_a_delete(
    how: str, headers: dict[str, str], query: str, body: bytes | None
) -> None:
    h = harness(DELETES, ITEMS)
    codes = []
    for _ in range(3):
        post = request("/v1/items/1", "POST", query=query, headers=headers, body=body)
        codes.append(h.send(post).status)
    assert codes == [200, 200, 429], how  # the DELETE route's 2/minute, not 100/minute
    assert [sent.method for sent in h.origin.sent] == ["DELETE", "DELETE"]
    for sent in h.origin.sent:
        assert not any(name.startswith("x-http-method") for name, _ in sent.headers)
        assert sent.body == (body or b"")
        assert sent.url.endswith("/v1/items/1")  # the query's _method went with the rest


def test_method_override_refuse_and_pass() -> None:
    asking = {"x-http-method-override": "DELETE"}
    refusing = harness(DELETES, ITEMS, method_override="refuse")
    answer = refusing.send(request("/v1/items/1", "POST", headers=asking))
    assert answer.status == 400 and refusing.origin.sent == []
    problem = body_json(answer)
    assert problem["code"] == "method_override" and "Send a DELETE request" in problem["detail"]
    # The method itself, or a POST asking for POST, is no override.
    assert refusing.send(request("/v1/items/1", "DELETE")).status == 200
    same = request("/v1/items/1", "POST", headers={"x-http-method-override": "post"})
    assert refusing.send(same).status == 200
    passing = harness(DELETES, ITEMS, method_override="pass")
    for _ in range(3):
        assert passing.send(request("/v1/items/1", "POST", headers=asking)).status == 200
    assert {sent.method for sent in passing.origin.sent} == {"POST"}
    assert all(("x-http-method-override", "DELETE") in sent.headers for sent in passing.origin.sent)


def test_method_override_that_cannot_be_sent_is_a_400() -> None:
    h = harness(DELETES, ITEMS)
    several = request(
        "/v1/items/1", "POST", query="_method=PUT", headers={"x-http-method": "DELETE"}
    )
    get_with_body = request(
        "/v1/items/1",
        "POST",
        headers={"content-type": "application/x-www-form-urlencoded"},
        body=b"_method=GET",
    )
    for asking in (several, get_with_body):
        answer = h.send(asking)
        assert answer.status == 400 and body_json(answer)["code"] == "method_override"
    big = request(
        "/v1/items/1",
        "POST",
        headers={"content-type": "application/x-www-form-urlencoded"},
        body=b"a=" + b"x" * (1 << 20),
    )
    answer = h.send(big)
    assert answer.status == 413 and body_json(answer)["code"] == "form_too_large"
    assert h.origin.sent == []
    # Only a POST is taken as another method (as frameworks do).
    put = request("/v1/items/1", "PUT", headers={"x-http-method-override": "DELETE"})
    assert h.send(put).status == 200 and h.origin.sent[-1].method == "PUT"
    # And the field does not reach the origin on another method: one that honours it on
    # any method would run a DELETE counted as a PUT (or a GET whose answer is cached).
    assert "x-http-method-override" not in dict(h.origin.sent[-1].headers)
    get = request("/v1/items/1", headers={"X-HTTP-Method": "DELETE", "x-method-override": "PUT"})
    h.send(get)
    names = {name.lower() for name, _ in h.origin.sent[-1].headers}
    assert not names & {"x-http-method", "x-method-override"}


FORM = {"content-type": "application/x-www-form-urlencoded"}


def test_a_form_is_read_for_its_method_only_where_the_method_decides_the_route() -> None:
    # /v1/items/* : a DELETE route first, so the method decides; /v1/other: one route for
    # every method; /elsewhere: no route at all.
    h = harness(DELETES, ITEMS)
    big = b"a=" + b"x" * (2 << 20)
    refused = h.send(request("/v1/items/1", "POST", headers=FORM, body=big))
    assert refused.status == 413 and h.origin.sent == []
    assert "its own Content-Type" in body_json(refused)["detail"]
    for path in ("/v1/other", "/elsewhere"):
        answer = h.send(request(path, "POST", headers=FORM, body=big))
        assert answer.status == 200, path
        assert h.origin.sent[-1].method == "POST" and h.origin.sent[-1].body == big
    # Where every method is counted alike, a small form asking for DELETE goes on as it
    # came: counted on the same route either way, its body untouched.
    asking = b"id=1&_method=DELETE"
    assert h.send(request("/v1/other", "POST", headers=FORM, body=asking)).status == 200
    assert h.origin.sent[-1].method == "POST" and h.origin.sent[-1].body == asking
    assert len(h.store.calls) == 2  # the two POSTs to /v1/other; /elsewhere is unlimited
    # To refuse overrides, every form is read.
    refusing = harness(DELETES, ITEMS, method_override="refuse")
    answer = refusing.send(request("/v1/other", "POST", headers=FORM, body=asking))
    assert answer.status == 400 and refusing.origin.sent == []
    # A JSON body over the bound is not refused (JSON uploads may be large): it goes on
    # unread, as the POST it is.
    big_json = b'{"data":"' + b"x" * (2 << 20) + b'"}'
    json_type = {"content-type": "application/json"}
    answer = h.send(request("/v1/items/1", "POST", headers=json_type, body=big_json))
    assert answer.status == 200 and h.origin.sent[-1].method == "POST"
    # So does a body of no type over it (an upload sent without one): only a body
    # labelled a form is refused for its size.
    untyped = b"\x00" * (2 << 20)
    answer = h.send(request("/v1/items/1", "POST", body=untyped))
    assert answer.status == 200 and h.origin.sent[-1].body == untyped
    # A Content-Type sent twice reaches the Worker joined; Rack and PHP read the first
    # type (a probe's finding: the form's DELETE went through as a POST, uncounted).
    for twice in (
        "application/x-www-form-urlencoded, application/x-www-form-urlencoded",
        "application/x-www-form-urlencoded, text/plain",
        "text/plain, application/json",
    ):
        body = b'{"_method": "DELETE"}' if "json" in twice else b"_method=DELETE"
        answer = h.send(request("/v1/items/9", "POST", headers={"content-type": twice}, body=body))
        assert h.origin.sent[-1].method == "DELETE", twice


def test_a_form_is_read_on_a_route_that_protects_some_methods_with_idempotency() -> None:
    protected = {**ITEMS, "idempotency": {"mode": "optional"}}
    h = harness(protected)
    asking = b"id=1&_method=DELETE"
    assert h.send(request("/v1/items/1", "POST", headers=FORM, body=asking)).status == 200
    assert h.origin.sent[-1].method == "DELETE"


CORS = {"allow_origins": ["https://app.test"]}


def test_the_gateways_own_answers_allow_the_listed_page_origins() -> None:
    h = harness({**ROUTE, "limits": "1/minute"}, cors=CORS)
    page = {"origin": "https://app.test"}
    allowed = h.send(request("/v1/a", headers=page))
    # The origin's own answer keeps its CORS decision: it allowed no one.
    assert allowed.status == 200 and "access-control-allow-origin" not in allowed.headers
    denied = h.send(request("/v1/a", headers=page))
    assert denied.status == 429
    assert denied.headers.get("access-control-allow-origin") == "https://app.test"
    assert "Origin" in (denied.headers.get("vary") or "")
    exposed = denied.headers.get("access-control-expose-headers") or ""
    assert "Retry-After" in exposed and "RateLimit" in exposed
    assert "access-control-allow-credentials" not in denied.headers
    # Another page's origin, or no Origin (not a cross-origin fetch): nothing added.
    other = h.send(request("/v1/a", headers={"origin": "https://evil.test"}))
    assert other.status == 429 and "access-control-allow-origin" not in other.headers
    assert other.headers.get("vary") == "Origin"  # a listed page is told otherwise
    plain = h.send(request("/v1/a"))
    assert plain.status == 429 and "access-control-allow-origin" not in plain.headers
    # Other answers of the gateway's own too: a bad path, no route.
    bad = h.send(request("/v1/%zz", headers=page))
    assert (
        bad.status == 400 and bad.headers.get("access-control-allow-origin") == "https://app.test"
    )
    # And the platform adapter's answer to a failure of the gateway itself (a probe's
    # finding: its 500 had no CORS fields, so the page could not read it).
    failed = problem_response(problems.internal_error("ab12"))
    fields = h.gateway.with_cors("https://app.test", failed).headers
    assert fields.get("access-control-allow-origin") == "https://app.test"
    unasked = problem_response(problems.internal_error("ab13"))
    assert "access-control-allow-origin" not in h.gateway.with_cors(None, unasked).headers
    # ... but not a failure of the admin API's, in any spelling of its path: no page of
    # another origin reads an answer of the admin API's.
    for path in ("/_edge-limiter/api/config", "/_EDGE-Limiter;x/", "/_edge-limiter"):
        failed = problem_response(problems.internal_error("ab14"))
        fields = h.gateway.with_cors("https://app.test", failed, path).headers
        assert "access-control-allow-origin" not in fields, path
    for path in ("/v1/a", "/v1/%zz", "/_edge-limiterx"):
        failed = problem_response(problems.internal_error("ab15"))
        fields = h.gateway.with_cors("https://app.test", failed, path).headers
        assert fields.get("access-control-allow-origin") == "https://app.test", path


def test_a_cors_preflight_is_forwarded_uncounted_unless_the_route_lists_options() -> None:
    preflight = {"origin": "https://app.test", "access-control-request-method": "DELETE"}
    h = harness({**ROUTE, "limits": "1/minute"})
    assert [h.send(request("/v1/a", "OPTIONS", headers=preflight)).status for _ in range(5)] == [
        200
    ] * 5
    assert h.store.calls == [] and [s.method for s in h.origin.sent] == ["OPTIONS"] * 5
    # The real request is counted as ever, and its 429 reaches the page (the preflight
    # before it passed).
    assert [h.send(request("/v1/a", "DELETE")).status for _ in range(2)] == [200, 429]
    assert h.send(request("/v1/a", "OPTIONS", headers=preflight)).status == 200
    # An OPTIONS that is no preflight is counted (one with a body too); so are preflights
    # where OPTIONS is listed.
    assert h.send(request("/v1/a", "OPTIONS")).status == 429
    assert h.send(request("/v1/a", "OPTIONS", headers=preflight, body=b"x")).status == 429
    listed = harness(
        {**ROUTE, "limits": "1/minute", "match": {"path": "/v1/*", "methods": ["GET", "OPTIONS"]}}
    )
    statuses = [
        listed.send(request("/v1/a", "OPTIONS", headers=preflight)).status for _ in range(2)
    ]
    assert statuses == [200, 429]


def test_an_origin_answer_that_allows_the_page_gets_the_rate_limit_fields_exposed() -> None:
    allowing = FakeOrigin(
        respond=answering(
            headers=[
                ("access-control-allow-origin", "https://app.test"),
                ("access-control-expose-headers", "ETag"),
            ]
        )
    )
    h = harness(ROUTE, upstream=allowing, cors=CORS)
    answer = h.send(request("/v1/a", headers={"origin": "https://app.test"}))
    assert answer.headers.get("access-control-allow-origin") == "https://app.test"
    fields = (answer.headers.get("access-control-expose-headers") or "").split(", ")
    assert fields[0] == "ETag" and "RateLimit" in fields and "X-RateLimit-Remaining" in fields
    # Without a cors table nothing is touched.
    h = harness(ROUTE, upstream=allowing)
    answer = h.send(request("/v1/a", headers={"origin": "https://app.test"}))
    assert answer.headers.get("access-control-expose-headers") == "ETag"
    # Nor is an answer the origin allows another page to read.
    h = harness(ROUTE, upstream=allowing, cors=CORS)
    other = h.send(request("/v1/a", headers={"origin": "https://other.test"}))
    assert other.headers.get("access-control-allow-origin") == "https://app.test"
    assert other.headers.get("access-control-expose-headers") == "ETag"


def test_credentials_and_admin_answers() -> None:
    h = harness(
        {**ROUTE, "limits": "1/minute"},
        cors={"allow_origins": ["https://app.test"], "allow_credentials": True},
        admin_token="t0ken",
    )
    page = {"origin": "https://app.test"}
    h.send(request("/v1/a", headers=page))
    denied = h.send(request("/v1/a", headers=page))
    assert denied.headers.get("access-control-allow-credentials") == "true"
    # The admin API is never opened to other origins' pages: it refuses what they ask.
    admin = h.send(
        request("/_edge-limiter/api/config", headers={**page, "authorization": "Bearer t0ken"})
    )
    assert admin.status == 403 and "access-control-allow-origin" not in admin.headers


def test_a_clients_path_override_fields_never_reach_the_origin() -> None:
    # An origin that routes by X-Original-URL would run the login handler, uncounted.
    h = harness(LOGIN)
    sneaky = {"X-Original-URL": "/v1/login", "x-rewrite-url": "/v1/login", "x-other": "1"}
    # ... and one that reads the host or path prefix from X-Forwarded-*, another tenant's.
    sneaky |= {"X-Forwarded-Host": "other-tenant.test", "x-forwarded-prefix": "/v1/login"}
    # The other spellings of the same: RFC 7239 (Spring, Rack 3), Traefik, nginx, Envoy.
    sneaky |= {
        "Forwarded": "for=1.2.3.4;host=other-tenant.test;proto=https",
        "X-Forwarded-Uri": "/v1/login",
        "X-Original-URI": "/v1/login",
        "X-Forwarded-Path": "/v1/login",
        "X-Envoy-Original-Path": "/v1/login",
        "X-Host": "other-tenant.test",
        "X-Forwarded-Server": "other-tenant.test",
        "X-Forwarded-Port": "8443",
        "X-Forwarded-Ssl": "on",
        "X-Forwarded-Scheme": "https",
        "Front-End-Https": "on",
        "X-Url-Scheme": "https",
        "X-Scheme": "http",
        "X-Forwarded-Protocol": "ssl",
        "X-Arr-Ssl": "on",
        "X-Real-Proto": "http",
        # Spelled with "_", which CGI-style servers read as the dashed field.
        "X_Forwarded_Host": "other-tenant.test",
        "X_Original_URL": "/v1/login",
        "X_HTTP_METHOD_OVERRIDE": "DELETE",
        "X_Forwarded_Proto": "http",
        "CF_Connecting_IP": "6.6.6.6",
        "X-Original-Host": "other-tenant.test",
        "X-HTTP-Host-Override": "other-tenant.test",
    }
    for _ in range(3):
        assert h.send(request("/health", "POST", headers=sneaky)).status == 200
    for sent in h.origin.sent:
        names = {name.lower() for name, _ in sent.headers}
        assert names - {"content-length", "x-forwarded-proto"} == {"x-other"}, names


def test_a_clients_expect_field_never_reaches_the_origin() -> None:
    # The origin's interim 100 Continue would come back from the runtime's fetch as the answer.
    h = harness(ROUTE)
    asking = {"expect": "100-continue", "content-type": "application/octet-stream"}
    assert h.send(request("/v1/a", "POST", headers=asking, body=b"x" * 2000)).status == 200
    names = {name.lower() for name, _ in h.origin.sent[0].headers}
    assert "expect" not in names and "content-type" in names


def test_a_clients_proxy_credentials_never_reach_the_origin() -> None:
    # A probe's finding: Proxy-Authorization (a forward proxy's credentials) went on.
    h = harness(ROUTE)
    sent = {"proxy-authorization": "Basic c2VjcmV0", "proxy-connection": "keep-alive"}
    assert h.send(request("/v1/a", headers={**sent, "authorization": "Bearer t"})).status == 200
    names = {name.lower() for name, _ in h.origin.sent[0].headers}
    assert not names & set(sent) and "authorization" in names


@pytest.mark.parametrize(
    ("status", "said"),
    [(100, "an interim 100"), (103, "an interim 103"), (600, "status 600"), (999, "status 999")],
)
def test_an_answer_that_is_not_final_is_a_502_not_a_crash(status: int, said: str) -> None:
    roomy = {**ROUTE, "limits": "1000/minute"}
    h = harness(roomy, upstream=FakeOrigin(respond=answering(status, body=b"")))
    answer = h.send(request("/v1/a"))
    assert answer.status == 502
    problem = body_json(answer)
    # It was reached: the code says so (a probe's finding: it said origin_unreachable).
    assert problem["code"] == "origin_bad_answer"
    attempts = h.events("origin_attempt")
    assert attempts and all(said in a["detail"] for a in attempts)
    if status >= 600:
        # It answered: the attempt and the problem say so, not "could not be reached".
        assert {a["outcome"] for a in attempts} == {"bad_answer"}
        assert problem["detail"].startswith("The origin did not give a usable answer")
        assert "reached" not in problem["detail"]
    if status < 200:
        # The origin is up and acted: not sent again, and its breaker not told (a page
        # that sends Early Hints must not open it for every route).
        assert len(h.origin.sent) == 1 and attempts[0]["outcome"] == "interim_answer"
        assert [h.send(request("/v1/a")).status for _ in range(10)] == [502] * 10
        assert len(h.origin.sent) == 11
        assert h.gateway.upstream.breakers.phase("origin.test", h.clock.now) == "closed"


def test_an_ambiguous_key_value_is_a_400_naming_it() -> None:
    keyed = {**ROUTE, "key": "query:api_key"}
    h = harness(keyed)
    answer = h.send(request(query="api_key=victim&api_key=mine"))
    assert answer.status == 400
    body = body_json(answer)
    assert body["code"] == "ambiguous_key" and "'api_key'" in body["detail"]
    assert h.origin.sent == []


def test_unmatched_requests_pass_without_a_store_call() -> None:
    h = harness(ROUTE)
    answer = h.send(request("/health"))
    assert answer.status == 200 and "x-ratelimit-limit" not in answer.headers
    assert h.store.calls == [] and h.origin.sent[0].url == "http://origin.test/health"


def test_unmatched_without_default_origin_is_a_clear_404() -> None:
    h = harness({**ROUTE, "origin": "http://only.test"}, origin=None)
    answer = h.send(request("/x"))
    assert answer.status == 404
    assert "No route matches GET /x" in body_json(answer)["detail"]
    assert h.send(request("/v1/x")).status == 200
    assert h.origin.sent[0].url == "http://only.test/v1/x"


def test_shadow_route_counts_but_never_blocks() -> None:
    h = harness({**ROUTE, "shadow": True})
    answers = [h.send(request()) for _ in range(5)]
    assert all(a.status == 200 for a in answers)
    last = headers_of(answers[-1])
    assert last["x-edgelimiter-reason"] == "shadow"
    assert last["x-ratelimit-remaining"] == "0"
    assert "retry-after" not in last
    assert len(h.events("shadow")) == 2
    assert h.events("shadow")[0]["violated"] == ["3-per-minute"]  # as a 429's log line


def test_multiple_limits_and_cost() -> None:
    route = {**ROUTE, "limits": "4/second; 6/minute", "algorithm": "fixed_window", "cost": 2}
    h = harness(route)
    assert [h.send(request()).status for _ in range(3)] == [200, 200, 429]
    h.clock.advance(1_000)  # the 4/s limit starts again, the minute one does not
    third = h.send(request())
    assert third.status == 200 and third.headers.get("x-ratelimit-remaining") == "0"
    fourth = h.send(request())
    assert fourth.status == 429
    assert body_json(fourth)["violated-policies"] == ["6-per-minute"]


def test_headers_describe_what_each_limit_really_admits() -> None:
    search = {
        "name": "search",
        "match": {"path": "/v1/search"},
        "limits": "10/second; 1000/hour",
        "algorithm": "token_bucket",
        "burst": 20,
    }
    h = harness(search)
    first = headers_of(h.send(request("/v1/search")))
    assert first["x-ratelimit-limit"] == "20"
    assert first["x-ratelimit-remaining"] == "19"
    assert first["ratelimit-policy"] == (
        '"10-per-second-burst-20";q=20;w=2, "1000-per-hour";q=1000;w=3600'
    )
    assert first["ratelimit"].endswith('"1000-per-hour";r=999;t=4')


@pytest.mark.parametrize("store", [FailingStore(), HangingStore()])
def test_fail_open_forwards_with_a_signal(store: Any) -> None:
    h = harness(ROUTE, store=store, store_timeout_ms=20)
    answer = h.send(request())
    assert answer.status == 200
    assert answer.headers.get("x-edgelimiter-reason") == "store_unavailable"
    assert h.events("store_unavailable")[0]["policy"] == "open"


@pytest.mark.parametrize("store", [FailingStore(), HangingStore()])
def test_fail_closed_answers_503(store: Any) -> None:
    h = harness({**ROUTE, "on_store_error": "closed"}, store=store, store_timeout_ms=20)
    answer = h.send(request())
    assert answer.status == 503
    assert "fail closed" in body_json(answer)["detail"]
    assert answer.headers.get("x-edgelimiter-reason") == "store_unavailable"
    assert answer.headers.get("retry-after") == "1"
    assert h.origin.sent == []


@pytest.mark.parametrize("top", [{}, {"shadow": True}])
def test_a_shadow_route_admits_when_its_store_fails_even_if_it_fails_closed(
    top: dict[str, Any],
) -> None:
    route = {**ROUTE, "on_store_error": "closed", **({} if top else {"shadow": True})}
    h = harness(route, store=FailingStore(), store_timeout_ms=20, **top)
    answer = h.send(request())
    assert answer.status == 200 and len(h.origin.sent) == 1
    assert answer.headers.get("x-edgelimiter-reason") == "store_unavailable"
    assert h.events("store_unavailable")[0]["policy"] == "closed (shadow: admitted)"


def test_garbage_from_the_store_follows_the_failure_policy() -> None:
    class Garbage:
        async def call(
            self, name: str, request: StoreRequest, timeout_ms: int = 0
        ) -> StoreResponse:
            return DECIDE.decode("not json", request)  # the object answered garbage

    h = harness({**ROUTE, "on_store_error": "closed"}, store=Garbage())
    assert h.send(request()).status == 503
    assert h.events("store_unavailable")[0]["cause"].startswith("protocol")


def test_an_origin_timeout_is_a_504_and_a_network_failure_a_502() -> None:
    slow = harness({**ROUTE, "timeout": "3s"}, upstream=FakeOrigin(respond=timing_out))
    answer = slow.send(request())
    assert answer.status == 504
    body = body_json(answer)
    assert body["code"] == "origin_timeout" and body["timeout_ms"] == 3_000
    assert slow.origin.sent[0].timeout_ms == 3_000
    attempts = slow.events("origin_attempt")
    assert [a["outcome"] for a in attempts] == ["timeout"] * 3  # a GET is retried
    assert [t["outcome"] for t in body["tried"]] == ["timeout"] * 3
    # Each attempt says the timeout that ran out (what was left of the route's 3 s).
    assert all(0 < t["timeout_ms"] <= 3_000 for t in body["tried"])
    assert "timeout after" in body["detail"]
    down = harness(ROUTE, upstream=FakeOrigin(respond=unreachable))
    answer = down.send(request())
    assert answer.status == 502
    assert "unreachable" in body_json(answer)["detail"]
    # A plain origin URL is told to clients as "origin"; the operator's log names it.
    assert body_json(answer)["tried"] == [{"origin": "origin", "outcome": "unreachable"}] * 3
    assert "origin.test" not in answer.body.decode()
    assert down.events("origin_attempt")[0]["origin"] == "origin.test"
    assert harness(ROUTE).send(request()).headers.get("x-origin") == "origin"
    # The rate-limit headers are on failures too: the request was counted.
    assert answer.headers.get("x-ratelimit-remaining") == "2"
    # A POST is never retried.
    post = harness(ROUTE, upstream=FakeOrigin(respond=unreachable))
    assert post.send(request(method="POST", body=b"x")).status == 502
    assert len(post.origin.sent) == 1


def test_an_origin_that_never_answers_is_cut_off_by_the_watchdog() -> None:
    h = harness({**ROUTE, "timeout": "10ms"}, upstream=FakeOrigin(respond=hanging))
    answer = asyncio.run(asyncio.wait_for(h.gateway.handle(request()), timeout=5))
    assert answer.status == 504


def test_origin_responses_pass_through_with_the_headers_added() -> None:
    async def created(_: OriginRequest) -> Response:
        return Response(201, Headers([("location", "/v1/x/1"), ("set-cookie", "a=1")]), b"made")

    h = harness(ROUTE, upstream=FakeOrigin(respond=created))
    answer = h.send(request(method="POST", body=b'{"x":1}'))
    assert answer.status == 201 and answer.body == b"made"
    assert answer.headers.get("location") == "/v1/x/1"
    assert answer.headers.get("x-ratelimit-remaining") == "2"
    assert h.origin.sent[0].body == b'{"x":1}'


def test_logs_carry_a_hash_of_the_key_never_the_key() -> None:
    keyed = {**ROUTE, "limits": "1/minute", "key": "header:x-api-key"}
    h = harness(keyed)
    for _ in range(2):
        h.send(request(headers={"x-api-key": "sk_live_secret"}))
    (limited,) = h.events("limited") + h.events("cached_denial")
    assert "key" not in limited and len(limited["key_hash"]) == 16
    assert "sk_live_secret" not in repr(h.logs)


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_get_or_head_with_a_body_is_a_400_and_never_forwarded(method: str) -> None:
    h = harness(ROUTE)
    answer = h.send(request("/v1/login", method, body=b"{}"))
    assert answer.status == 400
    if method == "GET":
        assert body_json(answer)["code"] == "body_not_allowed"
    assert h.origin.sent == []
    # An empty body said with "Content-Length: 0" is no body: forwarded without it.
    empty = request("/v1/login", method, headers={"content-length": "00"}, body=b"")
    assert h.send(empty).status == 200
    (sent,) = h.origin.sent
    assert sent.method == method and sent.body == b"" and "content-length" not in dict(sent.headers)
    # So is an empty chunked one (a probe's finding: some clients send one); a chunked
    # body with bytes in it is still refused.
    chunked = {"transfer-encoding": "chunked"}
    assert h.send(request("/v1/login", method, headers=chunked, body=b"")).status == 200
    sent = h.origin.sent[-1]
    assert sent.body == b"" and "transfer-encoding" not in dict(sent.headers)
    full = h.send(request("/v1/login", method, headers=chunked, body=b"x"))
    assert full.status == 400 and len(h.origin.sent) == 2
