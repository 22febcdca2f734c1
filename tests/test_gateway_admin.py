"""The admin API on CPython: authentication, every endpoint, and that it is never forwarded,
never rate limited, and never puts a secret or a raw key in a log line."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from edge_limiter.core.control import OverridesCall

from .fakes import (
    FakeClock,
    Harness,
    MemoryBreakers,
    MemoryControl,
    answering,
    body_json,
    harness,
    request,
)

TOKEN = "admin-secret-7f3c"
ROUTES: list[dict[str, Any]] = [
    {
        "name": "api",
        "match": {"path": "/v1/*"},
        "limits": "3/minute",
        "algorithm": "sliding_log",
        "key": "header:x-api-key",
    },
    {"name": "everything", "match": {"path": "*"}, "limits": "1/hour"},
]


def admin(  # type: ignore[no-untyped-def]
    h: Harness,
    path: str,
    method: str = "GET",
    token: str | None = TOKEN,
    *,
    json_body: Any = None,
    **kw: Any,
):
    """A call as a CLI makes it: the token as a Bearer, a body (``json_body``: as JSON)
    said to be JSON unless ``headers`` say otherwise."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    if json_body is not None:
        kw["body"] = json.dumps(json_body).encode()
    if kw.get("body") is not None:
        headers["content-type"] = "application/json"
    headers.update(kw.pop("headers", {}))
    path, _, query = path.partition("?")
    return h.send(request("/_edge-limiter" + path, method, query=query, headers=headers, **kw))


def gw(**top: Any) -> Harness:
    return harness(*ROUTES, admin_token=TOKEN, **top)


def test_disabled_without_a_token_and_never_forwarded() -> None:
    h = harness(*ROUTES)
    answer = h.send(request("/_edge-limiter/api/config"))
    assert answer.status == 404 and h.origin.sent == [] and h.store.calls == []
    problem = body_json(answer)
    assert problem["code"] == "admin_disabled"
    assert "EDGE_LIMITER_ADMIN_TOKEN" in problem["detail"] and "/_edge-limiter" in problem["detail"]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer wrong"},
        {"authorization": f"Bearer {TOKEN}x"},
        {"authorization": f"Basic {base64.b64encode(b'admin:wrong').decode()}"},
        {"authorization": "Basic !!!"},
        {"authorization": TOKEN},
    ],
)
def test_missing_or_wrong_credentials_get_401_and_nothing_else(headers: dict[str, str]) -> None:
    h = gw()
    answer = admin(h, "/api/config", token=None, headers=headers)
    assert answer.status == 401
    assert (answer.headers.get("www-authenticate") or "").startswith("Bearer")
    body = body_json(answer)
    assert set(body) == {"type", "title", "status", "detail", "code"}
    assert "routes" not in answer.body.decode() if isinstance(answer.body, bytes) else True
    assert h.origin.sent == [] and h.store.calls == []


def test_the_page_accepts_basic_auth_and_asks_for_it() -> None:
    h = gw()
    challenge = h.send(request("/_edge-limiter/"))
    assert challenge.status == 401 and (challenge.headers.get("www-authenticate") or "").startswith(
        "Basic"
    )
    basic = base64.b64encode(f"ops:{TOKEN}".encode()).decode()
    page = h.send(request("/_edge-limiter/", headers={"authorization": f"Basic {basic}"}))
    assert page.status == 200 and (page.headers.get("content-type") or "").startswith("text/html")
    html = page.body.decode() if isinstance(page.body, bytes) else ""
    assert "api" in html


def test_the_page_writes_limits_and_expiries_as_people_read_them() -> None:
    bursting = {"name": "b", "match": {"path": "/b"}, "algorithm": "gcra"}
    bursting["limits"] = [{"rate": "10/s", "burst": 20}]
    h = harness(bursting, admin_token=TOKEN)
    body = {"route": "b", "key": "203.0.113.9", "limits": "100/second", "expires_in": "1h"}
    assert admin(h, "/api/overrides", "POST", body=json.dumps(body).encode()).status == 200
    page = admin(h, "/")
    html = page.body.decode() if isinstance(page.body, bytes) else ""
    assert "10 per second, burst 20" in html  # the route's limit, burst included
    assert "100 per second" in html and "per 1000 ms" not in html  # the override's
    assert " UTC" in html  # its expiry as a time, not epoch milliseconds
    assert "shadow hits 5 min" in html


def test_every_spelling_of_the_admin_prefix_is_the_admin_apis_never_forwarded() -> None:
    # An origin that folds case or drops ;params would read these as the admin path, and
    # the operator's token would go with them.
    h = gw()
    for path in ("/_EDGE-LIMITER/api/config", "/_Edge-Limiter;x=1/api/config"):
        assert h.send(request(path)).status == 401  # the admin API's, needing the token
        answer = h.send(request(path, headers={"authorization": f"Bearer {TOKEN}"}))
        assert answer.status == 200 and "routes" in body_json(answer)
    assert h.origin.sent == []
    assert h.send(request("/_edge-limiterx/y")).status != 401  # another path altogether


def test_admin_paths_are_never_rate_limited_by_user_routes() -> None:
    h = gw()
    statuses = [admin(h, "/api/config").status for _ in range(5)]
    assert statuses == [200] * 5
    assert h.store.calls == [] and h.origin.sent == []


def test_config_and_explain() -> None:
    h = gw()
    config = body_json(admin(h, "/api/config"))
    assert [r["name"] for r in config["routes"]] == ["api", "everything"]
    assert config["method_override"] == "apply" and config["matrix_params"] == "keep"
    explained = body_json(admin(h, "/api/explain?method=GET&url=https://a.test//v1/%78"))
    assert explained["route"] == "api" and explained["canonical_path"] == "/v1/x"
    assert admin(h, "/api/explain").status == 400
    # Not a request to explain: a problem for the admin call itself, never a 200.
    for url in ["%ff", "/v1/x", "ftp://a.test/v1/x", "https:///v1/x"]:
        refused = admin(h, f"/api/explain?url={url}")
        assert refused.status == 400, url
        assert "absolute URL" in body_json(refused)["detail"]
    assert admin(h, "/api/explain?method=G%20T&url=https://a.test/v1/x").status == 400
    # The explained request's own fields and client, as the config check takes them.
    keyed = body_json(
        admin(h, "/api/explain?url=https://a.test/v1/x&header=X-Api-Key:%20alice&ip=203.0.113.9")
    )
    assert keyed["key"] == "header:x-api-key=alice"
    assert admin(h, "/api/explain?url=https://a.test/v1/x&header=nocolon").status == 400
    # Query and fragment right after the host are read as such, not as the host.
    explained = body_json(admin(h, "/api/explain?url=https://a.test%3Fq=1"))
    assert explained["canonical_host"] == "a.test" and explained["canonical_path"] == "/"
    # The path the Worker is given: the runtime's URL parser resolved the dot segments.
    climbing = body_json(admin(h, "/api/explain?url=https://a.test/v1/../../v1/%2e%2e/v1/x"))
    assert climbing["route"] == "api" and climbing["canonical_path"] == "/v1/x"
    # A client no request could have is a 400, not a key.
    for bad in ("ip=notanip", "ip=999.1.1.1", "latitude=91", "longitude=east"):
        assert admin(h, f"/api/explain?url=https://a.test/v1/x&{bad}").status == 400, bad


def test_explain_orders_origins_by_the_clients_coordinates() -> None:
    pools = {
        "geo": {
            "origins": [
                {"name": "eu", "url": "https://eu.test", "lat": 50.1, "lon": 8.7},
                {"name": "us", "url": "https://us.test", "lat": 39.0, "lon": -77.5},
            ]
        }
    }
    h = harness(
        {"name": "g", "match": {"path": "/g"}, "limits": "5/s"},
        admin_token=TOKEN,
        origin=None,
        pool="geo",
        pools=pools,
    )
    near_us = "/api/explain?url=https://a.test/g&country=BR&continent=SA"
    assert body_json(admin(h, near_us))["origins"] == ["eu", "us"]  # by name: no location
    located = body_json(admin(h, near_us + "&latitude=-23.5&longitude=-46.6"))
    assert located["origins"] == ["us", "eu"]  # Sao Paulo is nearer Virginia


def test_a_keys_state_peek_reset_and_refund() -> None:
    h = gw()
    for _ in range(3):
        h.send(request("/v1/x", headers={"x-api-key": "alice"}))
    key = "header:x-api-key=alice"
    peek = body_json(admin(h, f"/api/keys?route=api&key={key}"))
    assert peek["next_request"]["allowed"] is False
    assert peek["limits"][0]["remaining"] == 0
    assert peek["next_request"]["headers"]["Retry-After"]
    calls = len(h.store.calls)
    assert body_json(admin(h, f"/api/keys?route=api&key={key}"))["done"] == "peek"
    fresh = body_json(admin(h, "/api/keys?route=api&key=nobody-yet"))["limits"][0]
    assert fresh["available"] == fresh["limit"] == fresh["remaining"] + 1
    assert peek["limits"][0]["available"] == 0
    # The value alone names the same counter (it used to peek at one no request uses).
    bare = body_json(admin(h, "/api/keys?route=api&key=alice"))
    assert bare["key"] == key and bare["limits"] == peek["limits"]
    assert h.send(request("/v1/x", headers={"x-api-key": "alice"})).status == 429
    refund = {"route": "api", "key": key, "cost": 1}
    refunded = body_json(admin(h, "/api/keys/refund", "POST", json_body=refund))
    assert refunded["next_request"]["allowed"] is True
    assert refunded["limits"][0]["available"] == 1
    assert h.send(request("/v1/x", headers={"x-api-key": "alice"})).status == 200
    admin(h, "/api/keys/reset", "POST", json_body={"route": "api", "key": key})
    assert [h.send(request("/v1/x", headers={"x-api-key": "alice"})).status for _ in range(3)] == [
        200
    ] * 3
    assert len(h.store.calls) > calls
    assert admin(h, "/api/keys?route=nope&key=x").status == 400
    assert admin(h, "/api/keys?route=api").status == 400


def test_a_refund_or_reset_says_what_a_request_of_the_routes_cost_would_find() -> None:
    # A probe's finding: on a cost 7 route the refund's answer said remaining 8 and the
    # reset's 99 (figures for a request of one unit); the next request said 2 and 93.
    h = harness(
        {**ROUTES[0], "limits": "100/hour", "algorithm": "sliding_window", "cost": 7},
        admin_token=TOKEN,
    )
    alice = {"x-api-key": "rr"}
    while h.send(request("/v1/x", headers=alice)).status == 200:
        pass
    key = "header:x-api-key=rr"
    for op, more in (("refund", {"cost": 7}), ("reset", {})):
        asked = {"route": "api", "key": key, **more}
        said = body_json(admin(h, f"/api/keys/{op}", "POST", json_body=asked))
        headers = said["next_request"]["headers"]
        answer = h.send(request("/v1/x", headers=alice))
        assert answer.status == 200, op
        assert headers["X-RateLimit-Remaining"] == answer.headers.get("x-ratelimit-remaining")
        assert said["limits"][0]["remaining"] == int(headers["X-RateLimit-Remaining"])


def test_a_leased_buckets_peek_leaves_out_the_reserve_it_lends_to_no_one() -> None:
    # A probe's finding: on a leased token bucket (cost 3, 30/minute) a reset's and a
    # peek's answer said Remaining 27 where the next request said 26 (the reserve).
    h = harness(
        {
            **ROUTES[0],
            "limits": "30/minute",
            "algorithm": "token_bucket",
            "cost": 3,
            "leases": True,
        },
        admin_token=TOKEN,
    )
    key = "header:x-api-key=lc"
    said = body_json(admin(h, "/api/keys/reset", "POST", json_body={"route": "api", "key": key}))
    h.clock.advance(1_000)  # no lease held by this isolate any more
    answer = h.send(request("/v1/x", headers={"x-api-key": "lc"}))
    assert answer.status == 200
    told = said["next_request"]["headers"]["X-RateLimit-Remaining"]
    assert told == answer.headers.get("x-ratelimit-remaining")


def test_a_peek_of_a_key_another_limit_denies_says_what_each_limit_has_left() -> None:
    h = harness({**ROUTES[0], "limits": "2/minute; 10/hour"}, admin_token=TOKEN)
    for _ in range(2):
        h.send(request("/v1/x", headers={"x-api-key": "bob"}))
    minute, hour = body_json(admin(h, "/api/keys?route=api&key=bob"))["limits"]
    assert minute["available"] == 0
    assert hour["available"] == 8  # the denied probe took nothing from the hour (it said 9)


def test_overrides_set_list_remove_and_take_effect_at_once_in_this_isolate() -> None:
    h = gw()
    for _ in range(3):
        h.send(request("/v1/x", headers={"x-api-key": "premium_1"}))
    assert h.send(request("/v1/x", headers={"x-api-key": "premium_1"})).status == 429
    body = {"route": "api", "key": "premium_*", "limits": "10/minute", "reason": "plan"}
    created = admin(h, "/api/overrides", "POST", body=json.dumps(body).encode())
    assert created.status == 200
    (override,) = body_json(created)["overrides"]
    # Other limits: another counter, in effect at once (the deny cache was cleared).
    assert h.send(request("/v1/x", headers={"x-api-key": "premium_1"})).status == 200
    listed = body_json(admin(h, "/api/overrides"))["overrides"]
    assert [o["id"] for o in listed] == [override["id"]] and listed[0]["reason"] == "plan"
    bad = admin(h, "/api/overrides", "POST", body=b'{"route": "api", "key": "x"}')
    assert bad.status == 400 and "either limits" in body_json(bad)["detail"]
    assert admin(h, "/api/overrides", "POST", body=b"not json").status == 400
    twice = admin(h, "/api/overrides", "POST", body=b'{"route": "api", "route": "b"}')
    assert twice.status == 400 and "ambiguous: member(s) route" in body_json(twice)["detail"]
    # Nested too deep to parse safely (on Pyodide it would end the isolate): refused.
    deep = b'{"route": "api", "x": ' + b"[" * 5_000 + b"]" * 5_000 + b"}"
    refused = admin(h, "/api/overrides", "POST", body=deep)
    assert refused.status == 400 and "nested deeper than 512" in body_json(refused)["detail"]
    costly = harness({**ROUTES[0], "cost": 3}, admin_token=TOKEN)
    below = {"route": "api", "key": "k", "limits": "2/minute"}
    refused = admin(costly, "/api/overrides", "POST", body=json.dumps(below).encode())
    assert refused.status == 400 and "cost of 3" in body_json(refused)["detail"]
    huge = admin(h, "/api/overrides", "POST", body=b" " * (64 * 1024 + 1))
    assert huge.status == 413 and body_json(huge)["code"] == "admin_body_too_large"
    # A new override for the same route and key replaces it: the one asked for last applies.
    body["limits"] = "20/minute"
    again = body_json(admin(h, "/api/overrides", "POST", body=json.dumps(body).encode()))
    assert again["replaced"] == [override["id"]] and len(again["overrides"]) == 1
    assert again["overrides"][0]["limits"] == [[20, 60_000]]
    override = again["overrides"][0]
    removed = admin(h, f"/api/overrides/{override['id']}", "DELETE")
    assert body_json(removed)["deleted"] is True
    assert h.send(request("/v1/x", headers={"x-api-key": "premium_1"})).status == 429
    gone = admin(h, f"/api/overrides/{override['id']}", "DELETE")
    assert gone.status == 404 and body_json(gone)["code"] == "admin_not_found"
    assert "no override has the id" in body_json(gone)["detail"]


def test_an_override_for_one_routes_key_is_stored_in_the_form_its_requests_get() -> None:
    h = gw()
    v6 = {"route": "everything", "key": "2001:db8::1", "exempt": True, "reason": "probe"}
    created = body_json(admin(h, "/api/overrides", "POST", body=json.dumps(v6).encode()))
    assert created["overrides"][0]["key"] == "ip=2001%3Adb8%3A%3A%2F64"  # its /64, as counted
    # Another address of that /64 is exempt: the 1/hour route lets it through twice.
    for _ in range(2):
        assert h.send(request("/x", ip="2001:db8::99")).status == 200
    value = {"route": "api", "key": "a b", "limits": "9/minute", "reason": "spaces"}
    stored = body_json(admin(h, "/api/overrides", "POST", body=json.dumps(value).encode()))
    assert stored["overrides"][-1]["key"] == "header:x-api-key=a%20b"
    assert stored["override"] == stored["overrides"][-1]  # the one just set, by itself
    # A key no request of that route can have is a 400, never an override that never applies.
    for key in ("notakey", "999.1.1.1", "2001:db8::/48"):
        bad = {"route": "everything", "key": key, "exempt": True, "reason": "x"}
        refused = admin(h, "/api/overrides", "POST", body=json.dumps(bad).encode())
        assert refused.status == 400, key


def test_an_override_for_every_route_must_be_in_the_form_requests_have() -> None:
    # A probe's finding: route "*" with ip=2001:db8::1 was stored as written and never
    # matched (requests count that address as its /64).
    h = gw()

    def put(key: str) -> Any:
        body = {"route": "*", "key": key, "exempt": True, "reason": "probe"}
        return admin(h, "/api/overrides", "POST", body=json.dumps(body).encode())

    stored = body_json(put("ip=2001:db8::1"))["override"]
    assert stored["key"] == "ip=2001%3Adb8%3A%3A%2F64"  # as requests count it
    assert all(h.send(request("/x", ip="2001:db8::5")).status == 200 for _ in range(3))
    refused = put("ip=not-an-ip")
    assert refused.status == 400
    assert "no route has a key like" in body_json(refused)["detail"]
    # A value alone is for every route of one-part keys (here the api key and the ip),
    # which must agree on its form: an address is no api key's form.
    split = put("2001:db8::1")
    assert split.status == 400 and "different forms" in body_json(split)["detail"]
    assert body_json(put("premium_9"))["override"]["key"] == "premium_9"
    assert all(
        h.send(request("/v1/x", headers={"x-api-key": "premium_9"})).status == 200 for _ in range(5)
    )


def test_the_admin_api_says_what_the_next_request_really_gets_and_refuses_what_it_would_ignore() -> (
    None
):
    h = gw()
    exempt = {"route": "api", "key": "k1", "exempt": True, "reason": "probe"}
    assert admin(h, "/api/overrides", "POST", body=json.dumps(exempt).encode()).status == 200
    for _ in range(4):
        assert h.send(request("/v1/x", headers={"x-api-key": "k1"})).status == 200
    # A probe's finding: an exempt key's peek said its next request would be denied.
    peek = body_json(admin(h, "/api/keys?route=api&key=k1"))
    assert peek["next_request"] == {"allowed": True, "headers": {"X-EdgeLimiter-Reason": "exempt"}}
    # A header's name in any case names the same key.
    assert body_json(admin(h, "/api/keys?route=api&key=header:X-Api-Key=k1"))["key"] == (
        "header:x-api-key=k1"
    )
    # On a shadow route the next request passes, reported as it stands.
    shadow = harness({**ROUTES[0], "shadow": True}, admin_token=TOKEN)
    for _ in range(4):
        shadow.send(request("/v1/x", headers={"x-api-key": "k2"}))
    told = body_json(admin(shadow, "/api/keys?route=api&key=k2"))["next_request"]
    assert told["allowed"] is True and told["headers"]["X-RateLimit-Remaining"] == "0"
    assert "Retry-After" not in told["headers"]
    assert told["headers"]["X-EdgeLimiter-Reason"] == "shadow"
    # ... and a key under its limit is told nothing of shadow (its request is not either).
    fresh = body_json(admin(shadow, "/api/keys?route=api&key=k3"))["next_request"]
    assert fresh["allowed"] is True and "X-EdgeLimiter-Reason" not in fresh["headers"]
    # A member the endpoint does not take is refused, not ignored (units=3 gave back 1).
    misspelt = admin(
        h, "/api/keys/refund", "POST", json_body={"route": "api", "key": "k1", "units": 3}
    )
    assert misspelt.status == 400 and "units" in body_json(misspelt)["detail"]
    assert "cost" in body_json(misspelt)["detail"]
    assert admin(h, "/api/explain?url=https://x.test/v1/a&lat=1").status == 400
    assert admin(h, "/api/explain?url=https://x.test/v1/a&latitude=1").status == 200
    # A JSON member given twice is refused, not taken as its last value.
    twice = b'{"route": "api", "key": "k", "limits": "5/minute", "route": "everything"}'
    refused = admin(h, "/api/overrides", "POST", body=twice)
    assert refused.status == 400 and "route" in body_json(refused)["detail"]
    missing = admin(h, "/api/overrides", "POST", body=b'{"route": "api", "exempt": true}')
    assert "got nothing" in body_json(missing)["detail"]
    # Deleting an override is logged, as setting one is.
    (listed,) = body_json(admin(h, "/api/overrides"))["overrides"]
    assert admin(h, f"/api/overrides/{listed['id']}", "DELETE").status == 200
    assert h.events("admin_override_deleted") == [
        {"event": "admin_override_deleted", "id": listed["id"]}
    ]
    # An admin URL is explained as the admin API's, never forwarded.
    explained = body_json(admin(h, "/api/explain?url=https://x.test/_Edge-Limiter/api/config"))
    assert explained["admin"] is True and explained["route"] is None
    assert "forward_to" not in explained


def test_an_override_left_for_a_route_a_deploy_removed_is_logged_once() -> None:
    clock = FakeClock()
    control = MemoryControl(clock)
    before = harness(*ROUTES, admin_token=TOKEN, clock=clock, control=control)
    body = {"route": "api", "key": "k", "limits": "9/minute", "reason": "plan"}
    set_ = body_json(admin(before, "/api/overrides", "POST", body=json.dumps(body).encode()))
    # The next deploy has no route "api": its isolates say so (a probe's finding: silence).
    after = harness(ROUTES[1], admin_token=TOKEN, clock=clock, control=control)
    for _ in range(3):
        after.send(request("/x"))
        clock.advance(20_000)
    assert after.events("override_for_unknown_route") == [
        {"event": "override_for_unknown_route", "id": set_["override"]["id"], "route": "api"}
    ]


def test_a_global_routes_counter_is_reached_by_its_name() -> None:
    h = harness(
        {"name": "all", "match": {"path": "/all"}, "limits": "1/minute", "key": "global"},
        admin_token=TOKEN,
    )
    assert [h.send(request("/all", ip=ip)).status for ip in ("1.1.1.1", "2.2.2.2")] == [200, 429]
    peek = body_json(admin(h, "/api/keys?route=all&key=global"))
    assert peek["key"] == "global=" and peek["limits"][0]["available"] == 0
    reset = {"route": "all", "key": "global"}
    assert body_json(admin(h, "/api/keys/reset", "POST", json_body=reset))["done"] == "reset"
    assert h.send(request("/all", ip="3.3.3.3")).status == 200
    exempt = {"route": "all", "key": "global", "exempt": True, "reason": "maintenance"}
    assert admin(h, "/api/overrides", "POST", body=json.dumps(exempt).encode()).status == 200
    assert h.send(request("/all", ip="4.4.4.4")).status == 200  # over 1/minute, exempt
    assert admin(h, "/api/keys?route=all&key=x").status == 400


def test_breakers_and_stats() -> None:
    h = gw()
    h.send(request("/v1/x", headers={"x-api-key": "a"}))
    breakers = body_json(admin(h, "/api/breakers"))["breakers"]
    assert breakers == {"origin.test": "closed"}
    for _ in range(4):
        h.send(request("/v1/x", headers={"x-api-key": "b"}))
    h.clock.advance(1_000)
    h.send(request("/v1/x", headers={"x-api-key": "c"}))
    stats = body_json(admin(h, "/api/stats"))
    counts = stats["routes"]["api"]["5m"]
    assert counts.get("limited", 0) + counts.get("cached_denial", 0) >= 1
    assert stats["top_limited"][0]["route"] == "api"
    assert admin(h, "/api/nothing-here").status == 404
    # A known endpoint asked with another method: 405 with the methods it takes.
    for path, method, allow in [
        ("/api/keys/reset", "GET", "POST"),
        ("/api/overrides", "PUT", "GET, POST, HEAD"),
        ("/api/config", "POST", "GET, HEAD"),
        ("/api/overrides/abc", "GET", "DELETE"),
        ("/", "POST", "GET, HEAD"),
    ]:
        wrong = admin(h, path, method)
        assert wrong.status == 405 and wrong.headers.get("allow") == allow, path
        assert body_json(wrong)["code"] == "admin_method_not_allowed"
    assert admin(h, "/api/overrides/a/b", "DELETE").status == 404
    assert admin(h, "/api/config", "HEAD").status == 200  # a HEAD is its GET


def test_stats_include_the_last_decisions_of_an_isolate_gone_quiet() -> None:
    # Counters go to the Control object with a later decision at most once a second; the
    # admin API sends its own isolate's first, so a burst then silence is counted whole.
    h = gw()
    for _ in range(6):
        h.send(request("/v1/x", headers={"x-api-key": "quiet"}))
    counts = body_json(admin(h, "/api/stats"))["routes"]["api"]["5m"]
    assert sum(counts.values()) == 6


def test_no_secret_or_raw_key_ever_reaches_a_log_line() -> None:
    h = gw(logging={"sample_allowed": 1.0})
    for key in ("sk_live_abcdef", "sk_live_abcdef", "sk_live_abcdef", "sk_live_abcdef"):
        h.send(request("/v1/x", headers={"x-api-key": key, "authorization": "Bearer user-token"}))
    admin(h, "/api/config", token="wrong-token-value")
    reset = {"route": "api", "key": "header:x-api-key=sk_live_abcdef"}
    assert admin(h, "/api/keys/reset", "POST", json_body=reset).status == 200
    text = json.dumps(h.logs)
    for secret in ("sk_live_abcdef", "user-token", TOKEN, "wrong-token-value"):
        assert secret not in text
    assert h.events("allowed") and (h.events("limited") or h.events("cached_denial"))


def test_an_operator_forces_an_origins_breaker_in_every_isolate() -> None:
    pools = {
        "two": {
            "origins": [
                {"name": "eu", "url": "https://eu.test", "priority": 0},
                {"name": "us", "url": "https://us.test", "priority": 1},
            ]
        }
    }
    route = {"name": "g", "match": {"path": "/g"}, "limits": "1000/s"}
    clock = FakeClock()
    breakers = MemoryBreakers()
    here, there = (
        harness(
            route,
            admin_token=TOKEN,
            origin=None,
            pool="two",
            pools=pools,
            clock=clock,
            breakers=breakers,
        )
        for _ in range(2)
    )
    assert there.send(request("/g")).headers.get("x-origin") == "eu"
    # eu out for maintenance: this isolate at once, the other with its next refresh.
    forced = admin(here, "/api/breakers/eu", "POST", json_body={"state": "open"})
    assert forced.status == 200 and body_json(forced)["breakers"]["eu"] == "forced_open"
    assert here.send(request("/g")).headers.get("x-origin") == "us"
    clock.advance(10_000)
    assert there.send(request("/g")).headers.get("x-origin") == "us"
    # Both out: a 503 suggesting the pool's open time (10 s by default), not 1 s, since
    # maintenance has no end the gateway knows.
    admin(here, "/api/breakers/us", "POST", json_body={"state": "open"})
    out = here.send(request("/g"))
    assert out.status == 503 and out.headers.get("retry-after") == "10"
    admin(here, "/api/breakers/us", "POST", json_body={"state": "auto"})
    # Forced closed: used whatever it answers (its failures open nothing).
    admin(here, "/api/breakers/eu", "POST", json_body={"state": "closed"})
    here.origin.respond = answering(503)
    assert all(here.send(request("/g")).status == 503 for _ in range(30))
    assert body_json(admin(here, "/api/breakers"))["breakers"]["eu"] == "forced_closed"
    assert (
        body_json(admin(here, "/api/breakers/eu", "POST", json_body={"state": "auto"}))["breakers"][
            "eu"
        ]
        == "closed"
    )
    # What it answered while forced counts nowhere once its breaker decides again (a
    # probe's finding: those failures tripped it at the next request and the next sync,
    # while the admin API said closed).
    here.origin.respond = answering(200)
    clock.advance(2_000)
    there.send(request("/g"))  # its copy (still forced open) refreshes after this one
    for isolate in (here, there, here):
        for _ in range(3):
            answer = isolate.send(request("/g"))
            assert answer.status == 200 and answer.headers.get("x-origin") == "eu"
        clock.advance(2_000)
    assert body_json(admin(here, "/api/breakers"))["breakers"]["eu"] == "closed"
    assert admin(here, "/api/breakers/nope", "POST", json_body={"state": "open"}).status == 404
    assert admin(here, "/api/breakers/eu", "POST", json_body={"state": "sideways"}).status == 400
    assert admin(here, "/api/breakers/eu", "GET").headers.get("allow") == "POST"
    # A member given twice is refused, not taken as its last value.
    twice = admin(here, "/api/breakers/eu", "POST", body=b'{"state": "closed", "state": "open"}')
    assert twice.status == 400 and "state" in body_json(twice)["detail"]
    assert (
        body_json(admin(here, "/api/breakers/e%75", "POST", json_body={"state": "auto"}))["origin"]
        == "eu"
    )
    assert here.events("admin_breaker_forced")[0]["state"] == "open"


def test_the_one_plain_origin_is_forced_by_the_name_clients_are_told_too() -> None:
    # A probe's finding: a 503 names a plain origin "origin" (its address is never shown
    # to clients), and the breakers endpoint knew it only by its host.
    h = harness(ROUTES[0], admin_token=TOKEN)
    forced = admin(h, "/api/breakers/origin", "POST", json_body={"state": "open"})
    assert forced.status == 200 and body_json(forced)["origin"] == "origin.test"
    assert body_json(admin(h, "/api/breakers"))["breakers"]["origin.test"] == "forced_open"
    answer = h.send(request("/v1/x", headers={"x-api-key": "k1"}))
    assert answer.status == 503 and body_json(answer)["tried"][0]["origin"] == "origin"


def test_a_fresh_isolates_peek_sees_the_overrides_set_elsewhere() -> None:
    import asyncio

    from edge_limiter.core.ratelimit.overrides import parse_override

    h = gw()
    # Set through another isolate: this one has not loaded the list (no request yet).
    override = parse_override(
        {"route": "api", "key": "header:x-api-key=vip", "limits": "50/minute"},
        h.clock.now,
        {"api": "sliding_log", "everything": "gcra"},
    )
    asyncio.run(h.control.overrides(OverridesCall("put", override)))
    peek = body_json(admin(h, "/api/keys?route=api&key=vip"))
    assert peek["override"]["id"] == override.id
    assert peek["limits"][0]["limit"] == 50
