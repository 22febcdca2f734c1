"""The whole gateway on real local workerd (the Pyodide wrangler.toml selects, or
``EDGE_LIMITER_PYTHON``'s), driven over HTTP with httpx."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import sqlite3
import time
import tomllib
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from edge_limiter.core.http.messages import JOINED_BY_RUNTIME
from edge_limiter.tools.build_worker import build
from edge_limiter.tools.demo_origin import DemoOrigin
from edge_limiter.tools.local_gateway import LocalGateway, project_deployment
from edge_limiter.tools.toolchain import PYODIDE_OF, python_of, requested_python, with_python
from tests.clients import in_flight

from .conftest import ROOT, fresh_ip, track

pytestmark = pytest.mark.e2e


def get(gw: LocalGateway, path: str, ip: str, method: str = "GET", **kw: object) -> httpx.Response:
    headers = {"cf-connecting-ip": ip, **kw.pop("headers", {})}  # type: ignore[dict-item]
    return httpx.request(method, gw.url + path, headers=headers, timeout=30, **kw)  # type: ignore[arg-type]


async def burst(gw: LocalGateway, path: str, ips: list[str]) -> list[tuple[str, int]]:
    """One request per entry of ``ips``, all in flight at once."""

    def one(ip: str) -> Callable[[httpx.AsyncClient], Awaitable[tuple[str, int]]]:
        async def send(client: httpx.AsyncClient) -> tuple[str, int]:
            answer = await client.get(path, headers={"cf-connecting-ip": ip})
            return ip, answer.status_code

        return send

    return await in_flight([one(ip) for ip in ips], base_url=gw.url)


def test_allowed_responses_come_from_the_origin_with_headers(gateway: LocalGateway) -> None:
    ip = fresh_ip()
    answer = get(gateway, "/small/a?x=1", ip)
    assert answer.status_code == 200
    echo = answer.json()
    assert echo["origin"] == "e2e-origin"
    assert echo["path"] == "/small/a" and echo["query"] == "x=1"
    assert answer.headers["x-ratelimit-limit"] == "3"
    assert answer.headers["x-ratelimit-remaining"] == "2"
    assert answer.headers["ratelimit-policy"] == '"3-per-hour";q=3;w=3600'
    assert answer.headers["ratelimit"].startswith('"3-per-hour";r=2;t=')
    assert "retry-after" not in answer.headers


def test_429_after_the_limit_with_headers_and_problem_body(gateway: LocalGateway) -> None:
    ip = fresh_ip()
    statuses = [get(gateway, "/small/b", ip).status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
    denied = get(gateway, "/small/b", ip)
    assert denied.status_code == 429
    assert denied.headers["content-type"] == "application/problem+json"
    retry = int(denied.headers["retry-after"])
    assert 3500 < retry <= 3600
    assert denied.headers["x-ratelimit-remaining"] == "0"
    assert int(denied.headers["x-ratelimit-reset"]) >= retry
    assert denied.headers["ratelimit"] == f'"3-per-hour";r=0;t={retry}'
    assert denied.headers["x-edgelimiter-reason"] == "limited"
    body = denied.json()
    assert body["type"] == "https://iana.org/assignments/http-problem-types#quota-exceeded"
    assert body["status"] == 429
    assert body["violated-policies"] == ["3-per-hour"]
    assert body["route"] == "small"


@pytest.mark.parametrize("path", ["/tb", "/gcra", "/log"])
def test_exactly_the_limit_is_admitted_under_200_concurrent_requests(
    gateway: LocalGateway, path: str
) -> None:
    ip = fresh_ip()
    results = asyncio.run(burst(gateway, path, [ip] * 200))
    counts = Counter(status for _, status in results)
    assert counts == {200: 50, 429: 150}


def test_a_limit_of_its_own_algorithm_ends_with_its_window(gateway: LocalGateway) -> None:
    # The route's token bucket lets 10 through at once; its second limit, a fixed window
    # of 7 an hour, stops the 8th, and says when the hour ends (a bucket of 7 an hour
    # would say about 514 s, the refill of one unit).
    ip = fresh_ip()
    results = asyncio.run(burst(gateway, "/mixed", [ip] * 9))
    assert Counter(status for _, status in results) == {200: 7, 429: 2}
    denied = get(gateway, "/mixed", ip)
    assert denied.status_code == 429
    assert denied.json()["violated-policies"] == ["7-per-hour"]
    to_the_hour = 3600 - int(time.time()) % 3600
    assert abs(int(denied.headers["retry-after"]) - to_the_hour) <= 2
    assert '"7-per-hour";q=7;w=3600' in denied.headers["ratelimit-policy"]


def test_sliding_window_counter_stays_within_its_bound(gateway: LocalGateway) -> None:
    ip = fresh_ip()
    results = asyncio.run(burst(gateway, "/sw", [ip] * 200))
    admitted = sum(1 for _, status in results if status == 200)
    # At most the quota per aligned window, so at most 2x across one window edge.
    assert 50 <= admitted <= 100
    assert all(status in (200, 429) for _, status in results)


@pytest.mark.parametrize("path", ["/tb", "/gcra", "/log", "/fw"])
def test_concurrent_keys_do_not_affect_each_other(gateway: LocalGateway, path: str) -> None:
    ips = [fresh_ip() for _ in range(4)]
    results = asyncio.run(burst(gateway, path, [ip for ip in ips for _ in range(60)]))
    admitted = Counter(ip for ip, status in results if status == 200)
    assert admitted == dict.fromkeys(ips, 50)


def test_multiple_limits_and_cost(gateway: LocalGateway) -> None:
    ip = fresh_ip()
    # cost 2 against "4/minute; 6/hour": two requests fill the minute limit.
    first = [get(gateway, "/multi", ip) for _ in range(3)]
    assert [a.status_code for a in first] == [200, 200, 429]
    assert first[1].headers["ratelimit"].startswith('"4-per-minute";r=0;')
    assert '"6-per-hour";r=2;' in first[1].headers["ratelimit"]
    assert first[2].json()["violated-policies"] == ["4-per-minute"]
    # The denied request consumed nothing from the hour limit either.
    assert '"6-per-hour";r=2;' in first[2].headers["ratelimit"]


def test_spoofed_forwarded_for_does_not_change_the_key(gateway: LocalGateway, origin) -> None:  # type: ignore[no-untyped-def]
    ip = fresh_ip()
    codes = [
        get(gateway, "/small/xff", ip, headers={"x-forwarded-for": f"10.0.0.{n}"}).status_code
        for n in range(4)
    ]
    assert codes == [200, 200, 200, 429]
    # The header itself still reaches the origin untouched.
    echo = get(gateway, "/small/xff", fresh_ip(), headers={"x-forwarded-for": "10.1.1.1"}).json()
    assert echo["headers"]["x-forwarded-for"] == "10.1.1.1"


def test_ipv6_clients_in_one_64_share_a_counter(gateway: LocalGateway) -> None:
    base = f"2001:db8:{fresh_ip().split('.')[2]}:{fresh_ip().split('.')[3]}"
    codes = [get(gateway, "/small/v6", f"{base}::{n + 1:x}").status_code for n in range(4)]
    assert codes == [200, 200, 200, 429]


def test_header_and_path_keys(gateway: LocalGateway) -> None:
    ip = fresh_ip()
    key = f"key-{time.time_ns()}"
    codes = [
        get(gateway, "/keyed", fresh_ip(), headers={"x-api-key": key}).status_code for _ in range(3)
    ]
    assert codes == [200, 200, 429]  # different IPs, one API key
    assert get(gateway, "/keyed", ip, headers={"x-api-key": key + "-other"}).status_code == 200
    tenant = f"acme{time.time_ns()}"
    codes = [get(gateway, f"/t/{tenant}/x", fresh_ip()).status_code for _ in range(3)]
    assert codes == [200, 200, 429]


def test_a_key_header_sent_twice_is_refused_not_counted_as_a_new_key(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # The runtime joins the two lines into "victim, <n>" for the Worker (and sends the
    # origin both lines, whose first it may well read): counting the joined value would
    # give every request a fresh counter for the same client.
    victim = f"key-{time.time_ns()}"
    before = len(origin.hits)
    for n in range(3):
        twice = [("cf-connecting-ip", fresh_ip()), ("x-api-key", victim), ("x-api-key", str(n))]
        answer = httpx.get(gateway.url + "/keyed", headers=twice, timeout=30)
        assert answer.status_code == 400, answer.text
        problem = answer.json()
        assert problem["code"] == "ambiguous_key" and "'x-api-key'" in problem["detail"]
    joined = get(gateway, "/keyed", fresh_ip(), headers={"x-api-key": f"{victim}, other"})
    assert joined.status_code == 400
    assert len(origin.hits) == before  # nothing forwarded
    # The same value twice is one value: it counts against that key.
    same = [("cf-connecting-ip", fresh_ip()), ("x-api-key", victim), ("x-api-key", victim)]
    codes = [httpx.get(gateway.url + "/keyed", headers=same, timeout=30).status_code]
    codes += [get(gateway, "/keyed", fresh_ip(), headers={"x-api-key": victim}).status_code]
    codes += [get(gateway, "/keyed", fresh_ip(), headers={"x-api-key": victim}).status_code]
    assert codes == [200, 200, 429]


def test_which_fields_sent_twice_reach_the_origin_as_one_line(gateway: LocalGateway) -> None:
    """What ``single_header`` relies on, on this workerd: a field in ``JOINED_BY_RUNTIME``
    sent twice reaches the origin as one joined line (the value the gateway counts); any
    other as two lines, of which the origin may read either."""
    joined = ["authorization", "user-agent", "accept-language", "referer", "from", "via"]
    apart = ["x-api-key", "x-tenant-id", "x-forwarded-for", "api-key", "x-client-id"]
    assert set(joined) <= JOINED_BY_RUNTIME and not set(apart) & JOINED_BY_RUNTIME
    lines = [("cf-connecting-ip", fresh_ip())]
    for name in joined + apart:
        lines += [(name, "a1"), (name, "b2")]
    echo = httpx.get(gateway.url + "/not-limited", headers=lines, timeout=30).json()
    received = echo["header_lines"]
    for name in joined:
        assert [v for k, v in received if k == name] == ["a1, b2"], name
    for name in apart:
        assert [v for k, v in received if k == name] == ["a1", "b2"], name


def test_a_second_cookie_line_does_not_make_a_new_key(gateway: LocalGateway) -> None:
    # Two Cookie lines reach the Worker as "sid=K, x=<n>"; Rack reads sid=K from it.
    sid = f"s{time.time_ns()}"
    for n in range(3):
        lines = [("cf-connecting-ip", fresh_ip()), ("cookie", f"sid={sid}"), ("cookie", f"x={n}")]
        answer = httpx.get(gateway.url + "/cookied", headers=lines, timeout=30)
        assert answer.status_code == 400 and answer.json()["code"] == "ambiguous_key"
    codes = [
        get(gateway, "/cookied", fresh_ip(), headers={"cookie": f"a=1; sid={sid}"}).status_code
        for _ in range(3)
    ]
    assert codes == [200, 200, 429]


@pytest.mark.parametrize("how", ["header", "query", "form", "rack-2-form", "laravel-json"])
def test_a_post_asking_to_be_a_delete_is_counted_and_sent_as_one(
    gateway: LocalGateway, how: str
) -> None:
    path = f"/del/{how}-{time.time_ns()}"
    headers = {"cf-connecting-ip": fresh_ip()}
    params, body = {}, b"id=1"
    if how == "header":
        headers["x-http-method-override"] = "DELETE"
    elif how == "query":
        params["_method"] = "delete"
    elif how == "rack-2-form":
        body += b"&[_method]=DELETE"  # Rack 2 reads it as _method
    elif how == "laravel-json":
        body = b'{"id":1,"_method":"DELETE"}'  # Laravel takes any "/json" type as JSON
        headers["content-type"] = "text/json"
    else:
        body += b"&_method=DELETE"
    if how in ("form", "rack-2-form"):
        headers["content-type"] = "application/x-www-form-urlencoded"
    answers = [
        httpx.post(gateway.url + path, headers=headers, params=params, content=body, timeout=30)
        for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [200, 200, 429]  # the DELETE route's 2/hour
    for echo in (answers[0].json(), answers[1].json()):
        assert echo["method"] == "DELETE" and echo["body_bytes"] == len(body)
        assert "x-http-method-override" not in echo["headers"]


def test_a_json_body_nested_too_deep_is_refused_and_the_isolate_lives_on(
    gateway: LocalGateway,
) -> None:
    # A probe's finding: parsing 5,000 nested arrays for their _method ran Pyodide out of
    # stack and the runtime answered nothing after it. Now measured first and refused.
    ip = fresh_ip()
    deep = b'{"_method":"DELETE","x":' + b"[" * 5_000 + b"]" * 5_000 + b"}"
    headers = {"cf-connecting-ip": ip, "content-type": "application/json"}
    answer = httpx.post(gateway.url + "/del/deep", headers=headers, content=deep, timeout=30)
    assert answer.status_code == 400 and answer.json()["code"] == "method_override"
    assert "nested deeper than 512" in answer.json()["detail"]
    # At the bound it is read (and counted as the DELETE it asks for), and the runtime
    # answers on.
    bound = b'{"_method":"DELETE","x":' + b"[" * 511 + b"]" * 511 + b"}"
    answer = httpx.post(gateway.url + "/del/deep", headers=headers, content=bound, timeout=30)
    assert answer.status_code == 200 and answer.json()["method"] == "DELETE"
    assert get(gateway, "/open", fresh_ip()).status_code == 200


def test_a_page_at_an_allowed_origin_can_read_the_429_and_the_rate_limit_fields(
    gateway: LocalGateway,
) -> None:
    ip, page = fresh_ip(), {"origin": "https://app.test"}
    answers = [get(gateway, "/small/cors", ip, headers=page) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    denied = answers[-1]
    assert denied.headers["access-control-allow-origin"] == "https://app.test"
    assert "Origin" in denied.headers["vary"]
    assert "Retry-After" in denied.headers["access-control-expose-headers"]
    # The origin's answer keeps the origin's decision (it allowed no one) ...
    assert "access-control-allow-origin" not in answers[0].headers
    # ... and one that allows the page gets the rate-limit fields exposed too.
    allowing = {"h": "access-control-allow-origin:https://app.test"}
    answer = get(
        gateway,
        "/keyed",
        fresh_ip(),
        headers={**page, "x-api-key": f"c{time.time_ns()}"},
        params=allowing,
    )
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == "https://app.test"
    assert "RateLimit" in answer.headers["access-control-expose-headers"].split(", ")
    assert answer.headers["x-ratelimit-remaining"] == "1"


def test_path_override_fields_are_dropped_before_the_origin(gateway: LocalGateway) -> None:
    sneaky = {"x-original-url": "/small/x", "x-rewrite-url": "/small/x", "x-kept": "1"}
    sneaky |= {"x-forwarded-host": "other.test", "x-forwarded-prefix": "/small"}
    sneaky |= {"forwarded": "host=other.test;proto=https", "x-forwarded-uri": "/small/x"}
    echo = get(gateway, "/not-limited", fresh_ip(), headers=sneaky).json()
    assert echo["path"] == "/not-limited" and echo["headers"]["x-kept"] == "1"
    assert "x-original-url" not in echo["headers"] and "x-rewrite-url" not in echo["headers"]
    dropped = {"x-forwarded-host", "x-forwarded-prefix", "forwarded", "x-forwarded-uri"}
    assert not dropped & set(echo["headers"])


def test_the_fields_a_connection_names_go_no_further_either_way(gateway: LocalGateway) -> None:
    # Local workerd hands the Worker both Connection fields; RFC 9110 7.6.1 has a proxy
    # drop what they name.
    named = {"connection": "x-foo, cf-connecting-ip", "x-foo": "hop", "x-kept": "1"}
    hop = [("h", "connection:keep-alive, x-hop"), ("h", "x-hop:1"), ("h", "x-stays:1")]
    answer = get(gateway, "/not-limited", fresh_ip(), headers=named, params=hop)
    echo = answer.json()
    assert echo["headers"]["x-kept"] == "1" and "x-foo" not in echo["headers"]
    assert "x-hop" not in answer.headers and answer.headers["x-stays"] == "1"


def test_an_origins_own_rate_limit_fields_stay_beside_the_gateways(gateway: LocalGateway) -> None:
    own = [
        ("h", 'ratelimit-policy:"origin-day";q=5;w=86400'),
        ("h", 'ratelimit:"origin-day";r=1;t=600'),
        ("h", "x-ratelimit-limit:5"),
        ("h", "x-ratelimit-remaining:1"),
    ]
    answer = get(gateway, "/small/a", fresh_ip(), params=own)
    assert answer.status_code == 200
    assert answer.headers["ratelimit-policy"].startswith('"origin-day";q=5;w=86400, "')
    assert answer.headers["ratelimit"].startswith('"origin-day";r=1;t=600, "')
    assert answer.headers["x-ratelimit-remaining"] == "1"  # the origin's whole set
    assert answer.headers["x-ratelimit-limit"] == "5"


def test_shadow_route_never_blocks_but_reports(gateway: LocalGateway) -> None:
    ip = fresh_ip()
    answers = [get(gateway, "/shadow", ip) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 200]
    assert answers[-1].headers["x-edgelimiter-reason"] == "shadow"
    assert answers[-1].headers["x-ratelimit-remaining"] == "0"
    assert "retry-after" not in answers[-1].headers
    assert answers[-1].json()["origin"] == "e2e-origin"


def test_an_upload_expecting_100_continue_gets_the_origins_final_answer(
    gateway: LocalGateway,
) -> None:
    # curl sends `Expect: 100-continue` with large bodies; the origin's interim 100 came
    # back from the runtime's fetch as the answer (a 500) until the field was dropped.
    asking = {"expect": "100-continue", "content-type": "application/octet-stream"}
    answer = get(gateway, "/not/limited", fresh_ip(), "POST", headers=asking, content=b"x" * 5000)
    assert answer.status_code == 200
    echo = answer.json()
    assert echo["body_bytes"] == 5000 and "expect" not in echo["headers"]
    # An interim answer the origin volunteers (103 Early Hints) is not a crash either: the
    # runtime's fetch skips it (workerd 1.20261117 on; older ones gave it back as the answer,
    # which the gateway turned into a 502 origin_bad_answer) and the final answer is forwarded.
    early = get(gateway, "/not/limited?interim=103", fresh_ip())
    assert early.status_code == 200 and early.json()["origin"] == "e2e-origin"
    # A GET that says "Content-Length: 0" (some clients always do) has no body to refuse.
    for path in ("/not/limited", "/v1/search"):
        empty = get(gateway, path, fresh_ip(), headers={"content-length": "0", "x-api-key": "e"})
        assert empty.status_code == 200, (path, empty.text[:200])
        # Nor does an empty chunked one (a probe's finding: it was a 400).
        chunked = get(gateway, path, fresh_ip(), headers={"x-api-key": "e"}, content=iter([]))
        assert chunked.status_code == 200, (path, chunked.text[:200])
    full = get(gateway, "/not/limited", fresh_ip(), content=iter([b"x"]))
    assert full.status_code == 400 and full.json()["code"] == "body_not_allowed"


def test_unmatched_routes_pass_untouched(gateway: LocalGateway, origin) -> None:  # type: ignore[no-untyped-def]
    answer = get(gateway, "/not/limited?q=1", fresh_ip(), method="POST", content=b"hello")
    assert answer.status_code == 200
    echo = answer.json()
    assert echo["method"] == "POST" and echo["path"] == "/not/limited" and echo["body_bytes"] == 5
    assert not any(name.startswith(("x-ratelimit", "ratelimit")) for name in answer.headers)
    status = get(gateway, "/status/418", fresh_ip())
    assert status.status_code == 418  # origin statuses pass through


@pytest.mark.parametrize("path", ["/not/limited", "/small/reason", "/status/299"])
def test_the_origin_answer_keeps_its_status_line_and_gains_x_origin(
    gateway: LocalGateway, path: str
) -> None:
    """The gateway adds fields to the origin's answer (X-Origin, the rate-limit fields) on a
    rebuilt response: status, reason phrase, fields and body stay the origin's."""
    answer = get(gateway, f"{path}?reason=Fine%20Thanks&h=x-extra:1", fresh_ip())
    assert answer.reason_phrase == "Fine Thanks"
    assert answer.status_code == (299 if "299" in path else 200)
    assert answer.headers["x-origin"] and answer.headers["x-extra"] == "1"
    assert answer.headers["x-demo-origin"] == "e2e-origin"
    assert answer.json()["path"] == path
    assert ("x-ratelimit-limit" in answer.headers) == path.startswith("/small/")


def test_state_survives_a_restart_of_the_runtime(gateway: LocalGateway) -> None:
    ip = fresh_ip()
    assert [get(gateway, "/persist", ip).status_code for _ in range(2)] == [200, 200]
    track(gateway.restart())
    assert get(gateway, "/persist", ip).status_code == 200
    assert get(gateway, "/persist", ip).status_code == 429


def test_write_behind_writes_within_its_interval_and_survives_a_restart(
    gateway: LocalGateway, persist_dir: Path
) -> None:
    # The "behind" route answers from the object's memory and writes within 100 ms, by the
    # object's own timer (no further request needed): once written, a restart keeps it.
    ip = fresh_ip()
    assert [get(gateway, "/behind", ip).status_code for _ in range(2)] == [200, 200]
    row = "gcra::5/3600000"
    deadline = time.monotonic() + 10
    while _limit_rows(persist_dir, row) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _limit_rows(persist_dir, row) >= 1
    track(gateway.restart())
    codes = [get(gateway, "/behind", ip).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]


def test_country_key_from_request_cf(gateway: LocalGateway) -> None:
    # Locally, MF-CF-Blob sets request.cf; in production Cloudflare sets it and the header
    # means nothing. Two clients in one country share the route's counter.
    country = {"mf-cf-blob": '{"country":"DE","continent":"EU"}'}
    other = {"mf-cf-blob": '{"country":"FR","continent":"EU"}'}
    codes = [get(gateway, "/geo", fresh_ip(), headers=country).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    assert get(gateway, "/geo", fresh_ip(), headers=other).status_code == 200


def _limit_rows(persist_dir: Path, row: str) -> int:
    """How many rows of Durable Object databases hold ``row``'s state (a sliding log's
    entries are rows of the ``log`` table, other states one row of ``limits``)."""
    found = 0
    for path in persist_dir.glob("do/*RateLimiter/*.sqlite"):
        if path.name == "metadata.sqlite":
            continue
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            for table in ("limits", "log"):
                query = f"SELECT COUNT(*) FROM {table} WHERE id = ?"
                found += db.execute(query, (row,)).fetchone()[0]
        except sqlite3.OperationalError:
            pass  # not created yet, or not a limiter database
        finally:
            db.close()
    return found


def test_idle_state_is_deleted_by_the_alarm(gateway: LocalGateway, persist_dir: Path) -> None:
    # Only the "idle" route stores this row. A sliding log is idle exactly one window after
    # its last entry, so the row is certainly still there right after the request.
    row = "sliding_log::5/1000"  # row_id: algorithm, burst (none), quota/window
    assert get(gateway, "/idle", fresh_ip()).status_code == 200
    assert _limit_rows(persist_dir, row) == 1
    # The row is idle 1 s after the request and the config's cleanup_after is 1 s;
    # workerd's own clock fires the alarm, which cannot be injected here, so poll with a
    # deadline.
    deadline = time.monotonic() + 20
    while _limit_rows(persist_dir, row) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert _limit_rows(persist_dir, row) == 0


@pytest.mark.parametrize("fixture", ["throwing_gateway", "hanging_gateway"])
def test_fail_open_and_fail_closed(request: pytest.FixtureRequest, fixture: str) -> None:
    gw: LocalGateway = request.getfixturevalue(fixture)
    started = time.monotonic()
    opened = get(gw, "/open", fresh_ip())
    assert opened.status_code == 200
    assert opened.headers["x-edgelimiter-reason"] == "store_unavailable"
    assert opened.json()["origin"] == "e2e-origin"
    # ... and the log says so (the Worker's console reaches the runtime's stderr).
    assert gw.saw('"event":"store_unavailable","route":"open"')
    closed = get(gw, "/closed", fresh_ip())
    assert closed.status_code == 503
    assert closed.headers["x-edgelimiter-reason"] == "store_unavailable"
    assert "fail closed" in json.loads(closed.text)["detail"]
    # Neither hangs: the store budget is 300 ms.
    assert time.monotonic() - started < 10
    # Unmatched requests never touch the store.
    assert get(gw, "/elsewhere", fresh_ip()).status_code == 200


def test_an_invalid_config_is_a_clear_503_naming_route_and_field(
    worker_dir: Path, origin: DemoOrigin
) -> None:
    bad = {
        "origin": origin.url,
        "routes": [{"name": "login", "match": {"path": "/v1/login"}, "limits": "5/fortnight"}],
    }
    with LocalGateway(worker_dir, {"EDGE_LIMITER": bad}) as gw:
        track(gw)
        answer = get(gw, "/v1/login", fresh_ip())
        assert answer.status_code == 503
        assert answer.headers["content-type"] == "application/problem+json"
        body = answer.json()
        assert body["code"] == "config_invalid"
        (problem,) = body["problems"]
        assert problem.startswith("route 'login'.limits:") and "'5/fortnight'" in problem
        assert ("GET", "/v1/login") not in origin.hits  # nothing was forwarded


def test_a_slow_origin_is_a_504_within_the_route_timeout(gateway: LocalGateway) -> None:
    started = time.monotonic()
    answer = get(gateway, "/slow/3000", fresh_ip())
    elapsed = time.monotonic() - started
    assert answer.status_code == 504
    problem = answer.json()
    assert problem["code"] == "origin_timeout" and problem["timeout_ms"] == 400
    assert elapsed < 2.5  # 400 ms timeout, well before the origin's 3 s
    assert answer.headers["x-ratelimit-limit"] == "1000"  # it was counted
    assert get(gateway, "/slow/10", fresh_ip()).status_code == 200


def test_the_timeout_bounds_the_answers_head_not_a_body_that_keeps_coming(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # The routes' timeout is 400 ms; each body comes in four pieces. 250 ms apart (750 ms
    # in all) it arrives whole, stored by the cache and by the idempotency record alike.
    for path in ("/slow-cached/steady?drip=250", "/slow-pay/steady?drip=250"):
        method = "POST" if "pay" in path else "GET"
        headers = {"idempotency-key": f'"{fresh_ip()}"'} if method == "POST" else {}
        answer = get(gateway, path, fresh_ip(), method=method, headers=headers)
        assert answer.status_code == 200, (path, answer.text[:300])
        assert answer.json()["path"].endswith("/steady"), path
    hit = get(gateway, "/slow-cached/steady?drip=250", fresh_ip())
    assert hit.status_code == 200 and hit.headers["x-cache"] == "HIT"
    # A body that stalls for longer than the timeout is not waited for without end: 502,
    # nothing stored; the idempotent request is then replayed without its body, never
    # forwarded again (the origin acted).
    stalled = get(gateway, "/slow-cached/stall?drip=900", fresh_ip())
    assert stalled.status_code == 502 and stalled.json()["code"] == "origin_body_broken"
    payer = fresh_ip()  # one caller: the idempotency scope is the rate-limit key
    key = {"idempotency-key": f'"{payer}"'}
    paid = get(gateway, "/slow-pay/stall?drip=900", payer, method="POST", headers=key)
    assert paid.status_code == 502 and paid.json()["code"] == "origin_body_broken"
    before = origin.hits.count(("POST", "/slow-pay/stall"))
    again = get(gateway, "/slow-pay/stall?drip=900", payer, method="POST", headers=key)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert origin.hits.count(("POST", "/slow-pay/stall")) == before == 1


def test_a_keyed_post_whose_answer_outlasts_its_lock_is_never_forwarded_twice(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # A probe's finding: the head came at once, the body slowly; the lock (1 s here) ran
    # out mid-body and a retry took the key over: the payment ran twice. The claim is now
    # kept while the body comes (four pieces 600 ms apart: about 1.8 s).
    payer = fresh_ip()
    key = {"idempotency-key": f'"{payer}"'}
    path = "/slow-lock/pay?drip=600"

    def first() -> httpx.Response:
        return get(gateway, path, payer, method="POST", headers=key)

    async def both() -> tuple[httpx.Response, httpx.Response]:
        loop = asyncio.get_running_loop()
        paying = loop.run_in_executor(None, first)
        await asyncio.sleep(1.25)  # past the 1 s lock, before the body's end
        retry = await loop.run_in_executor(
            None, lambda: get(gateway, path, payer, method="POST", headers=key)
        )
        return await paying, retry

    paid, retry = asyncio.run(both())
    assert paid.status_code == 200 and paid.json()["path"].endswith("/pay")
    assert retry.status_code == 409, retry.text[:300]
    assert origin.hits.count(("POST", "/slow-lock/pay")) == 1
    again = get(gateway, path, payer, method="POST", headers=key)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.content == paid.content
    assert origin.hits.count(("POST", "/slow-lock/pay")) == 1


def test_a_keyed_post_whose_runtime_dies_mid_body_is_never_forwarded_again(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # A probe's finding: the runtime killed 2-3 s into a slow body, before the claim
    # needed extending, left a record without the answer's head; the retry after the lock
    # ran the payment again. The head is now recorded as soon as the body is slow.
    payer = fresh_ip()
    key = {"idempotency-key": f'"{payer}"'}
    path = "/pay-drip/pay?drip=900"  # four pieces 900 ms apart

    async def kill_mid_body() -> None:
        loop = asyncio.get_running_loop()
        paying = loop.run_in_executor(
            None, lambda: get(gateway, path, payer, method="POST", headers=key)
        )
        await asyncio.sleep(0.6)  # real time on purpose: between the body's first pieces
        gateway.kill()
        with contextlib.suppress(httpx.HTTPError):
            await paying

    asyncio.run(kill_mid_body())
    gateway.start()
    deadline = time.monotonic() + 30
    retry = get(gateway, path, payer, method="POST", headers=key)
    while retry.status_code == 409 and time.monotonic() < deadline:  # the 4 s lock
        time.sleep(float(retry.headers.get("retry-after", "1")))
        retry = get(gateway, path, payer, method="POST", headers=key)
    assert origin.hits.count(("POST", "/pay-drip/pay")) == 1
    assert retry.status_code == 200 and retry.headers["idempotent-replayed"] == "true"
    assert retry.headers["idempotent-replayed-body"].startswith("omitted")


def test_an_unreachable_origin_is_a_502_naming_it_to_the_operator_only(
    gateway: LocalGateway,
) -> None:
    answer = get(gateway, "/dead", fresh_ip())
    assert answer.status_code == 502
    problem = answer.json()
    # A plain origin URL is never shown to clients; the log names it.
    assert problem["code"] == "origin_unreachable" and problem["pool"] == "origin"
    assert {t["outcome"] for t in problem["tried"]} == {"unreachable"}
    assert "127.0.0.1:9" not in answer.text
    assert gateway.saw('"event":"origin_attempt","route":"dead","origin":"127.0.0.1:9"')


def test_the_runtime_gets_what_wrangler_toml_gives_production(gateway: LocalGateway) -> None:
    """Compatibility date and flags, and every binding, as seen from inside the Worker."""
    wrangler = tomllib.loads((ROOT / "wrangler.toml").read_text())
    seen = gateway.runtime
    assert seen["compatibilityDate"] == wrangler["compatibility_date"]
    # python_workers is what the local host implements; every other flag reaches workerd
    # (with EDGE_LIMITER_PYTHON set, changed as little as possible to select that Python).
    flags = wrangler["compatibility_flags"]
    asked = requested_python()
    if asked:
        flags = list(with_python(wrangler["compatibility_date"], flags, asked))
    assert seen["compatibilityFlags"] == [f for f in flags if f != "python_workers"]
    # The Python and the Pyodide build production runs for that date and those flags.
    python = python_of(wrangler["compatibility_date"], flags)
    assert asked in (None, python)
    assert seen["python"].rsplit(".", 1)[0] == python
    assert seen["pyodide"] == PYODIDE_OF[python]
    # The SDK's own flags follow the date, as in production (2025-11-01: both off).
    assert seen["pythonCompatFlags"] == {
        "python_request_headers_preserve_commas": wrangler["compatibility_date"] >= "2026-02-17",
        "python_workflows_implicit_dependencies": wrangler["compatibility_date"] >= "2026-02-25",
    }
    bindings = seen["bindings"]
    for binding in wrangler["durable_objects"]["bindings"]:
        assert bindings.pop(binding["name"]) == "DurableObjectNamespace"
    for namespace in wrangler["kv_namespaces"]:
        assert bindings.pop(namespace["binding"]) == "KvNamespace"
    for dataset in wrangler.get("analytics_engine_datasets", []):
        assert bindings.pop(dataset["binding"])  # the local simulator's class
    for name in wrangler.get("vars", {}):
        assert name in bindings
    assert bindings.pop("EDGE_LIMITER") == "json"  # the tests' config, laid over the vars
    assert set(bindings) <= set(wrangler.get("vars", {}))


def test_a_bundled_config_file_with_an_environment(tmp_path: Path, origin: DemoOrigin) -> None:
    """The production path for big configs: edge-limiter.toml bundled by the build step,
    [env.staging] chosen by the EDGE_LIMITER_ENV var of wrangler.toml's [env.staging]."""
    config = tmp_path / "edge-limiter.toml"
    config.write_text(
        'origin = "http://127.0.0.1:9"\n'
        "[[routes]]\n"
        'name = "only"\nmatch = { path = "/only" }\nlimits = "1/hour"\n'
        "[env.staging]\n"
        f'origin = "{origin.url}"\n'
    )
    worker = tmp_path / "worker"
    build(worker, config)
    assert (worker / "edge_limiter_config.py").exists()
    staging = project_deployment("staging")
    with LocalGateway(worker, deployment=staging) as gw:
        track(gw)
        assert gw.runtime["bindings"]["EDGE_LIMITER_ENV"] == "text"
        assert "EDGE_LIMITER" not in gw.runtime["bindings"]  # the config is bundled
        ip = fresh_ip()
        first = get(gw, "/only", ip)
        assert first.status_code == 200 and first.json()["origin"] == "e2e-origin"
        assert get(gw, "/only", ip).status_code == 429


def test_a_missing_header_is_not_the_word_null(gateway: LocalGateway) -> None:
    """JavaScript's null reaches Python as ``jsnull``, not ``None``: a missing header must
    read as missing, never as the text "null" (which a client could send on purpose)."""
    missing = [get(gateway, "/keyed", fresh_ip()).status_code for _ in range(3)]
    assert missing[-1] == 429  # requests without the header share one counter
    assert get(gateway, "/keyed", fresh_ip(), headers={"x-api-key": "null"}).status_code == 200


def test_a_refund_that_comes_in_the_next_window_gives_it_nothing(gateway: LocalGateway) -> None:
    """A request admitted near a window's end whose 503 (a refund_on status) comes in the
    next window gives nothing back to that window: its limit holds there (a probe's
    finding: 4 passed a limit of 3). On the runtime's own clock, which this machine
    shares: nothing to inject, so the test waits for the window's last 1.5 s."""
    window = 6.0
    ip = fresh_ip()
    time.sleep((4.5 - time.time() % window) % window)
    started = time.time()
    next_window = started - started % window + window
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        slow = pool.submit(
            get, gateway, "/refunds/status/503", ip, headers={"x-demo-delay": "2500"}
        )
        time.sleep(max(0.0, next_window + 0.3 - time.time()))
        fast = [get(gateway, "/refunds/a", ip).status_code for _ in range(2)]
        assert slow.result().status_code == 503
    time.sleep(0.3)  # the refund goes out after the answer
    fast += [get(gateway, "/refunds/a", ip).status_code for _ in range(3)]
    assert time.time() < next_window + window, "the test ran past the window it checks"
    assert fast == [200, 200, 200, 429, 429]
