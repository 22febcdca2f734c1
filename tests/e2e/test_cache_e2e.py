"""The KV response cache end to end on the local runtime (KV writes happen after the
response, so a test waits for the hit with a deadline)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from urllib.parse import quote

import httpx
import pytest

from edge_limiter.gateway.collapsing import LINGER_MS
from edge_limiter.tools.demo_origin import DemoOrigin
from edge_limiter.tools.local_gateway import LocalGateway

from .conftest import fresh_ip, leave_midway

pytestmark = pytest.mark.e2e


def get(
    gw: LocalGateway, path: str, ip: str = "", method: str = "GET", **headers: str
) -> httpx.Response:
    sent = {
        "cf-connecting-ip": ip or fresh_ip(),
        **{k.replace("_", "-"): v for k, v in headers.items()},
    }
    return httpx.request(method, gw.url + path, headers=sent, timeout=30)


def until_hit(gw: LocalGateway, path: str, **headers: str) -> httpx.Response:
    """The first answer served from the cache (the write lands after the response)."""
    deadline = time.monotonic() + 10
    while (answer := get(gw, path, **headers)).headers.get("x-cache") != "HIT":
        assert time.monotonic() < deadline, f"{path} never became a hit: {answer.headers}"
        time.sleep(0.1)
    return answer


def unique(prefix: str = "/cached") -> str:
    return f"{prefix}/{uuid.uuid4().hex[:12]}"


def origin_gets(origin: DemoOrigin, path: str) -> int:
    return sum(1 for method, seen in origin.hits if seen == path)


def test_miss_then_hit_and_the_origin_counts_one(gateway: LocalGateway, origin: DemoOrigin) -> None:
    path = unique()
    first = get(gateway, path)
    assert first.status_code == 200 and first.headers["x-cache"] == "MISS"
    hit = until_hit(gateway, path)
    assert hit.json() == first.json() and "age" in hit.headers
    assert origin_gets(origin, path) == 1


def test_a_query_in_another_order_is_another_entry(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # PHP reads a_b=2 from the first and a_b=1 from the second (a.b is a_b, the last wins).
    path = unique()
    stored = until_hit(gateway, path + "?a_b=2&a.b=1")
    other = get(gateway, path + "?a.b=1&a_b=2")
    assert other.headers["x-cache"] == "MISS" and other.json() != stored.json()
    # The same order, escaped otherwise, is the same entry.
    assert get(gateway, path + "?a%5Fb=2&a%2eb=1").headers["x-cache"] == "HIT"
    assert origin_gets(origin, path) == 2


def test_an_answer_with_a_latin_1_field_is_passed_on_as_sent_and_never_stored(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # A probe's finding: the hit said U+FFFD where the origin sent the byte E9 (the
    # runtime hands the Worker such bytes so); the miss had passed the byte on.
    path = unique()
    latin = f"{path}?h=x-file:r%C3%A9sum%C3%A9"  # the demo origin sends fields in Latin-1
    answers = [get(gateway, latin) for _ in range(3)]
    for answer in answers:
        assert answer.status_code == 200 and answer.headers["x-cache"] == "MISS"
        assert dict(answer.headers.raw)[b"x-file"] == b"r\xe9sum\xe9"
    assert origin_gets(origin, path) == 3


def test_head_is_served_from_the_get_entry(gateway: LocalGateway, origin: DemoOrigin) -> None:
    path = unique()
    get(gateway, path)
    hit = until_hit(gateway, path)
    head = get(gateway, path, method="HEAD")
    assert head.status_code == 200 and head.headers["x-cache"] == "HIT" and head.content == b""
    assert head.headers["content-length"] == str(len(hit.content))
    assert origin_gets(origin, path) == 1


def test_server_sent_events_reach_the_client_as_they_come(gateway: LocalGateway) -> None:
    # The origin sends two events and holds the stream open for 10 s: a gateway that read
    # the body to measure or keep it would hold them back until then.
    url = gateway.url + unique() + "?events=2"
    with httpx.stream("GET", url, headers={"cf-connecting-ip": fresh_ip()}, timeout=5) as answer:
        assert answer.headers["content-type"] == "text/event-stream"
        assert answer.headers["x-cache"] == "MISS"
        received = b""
        for chunk in answer.iter_raw():
            received += chunk
            if received.count(b"\n\n") >= 2:
                break
    assert b"data: event 0" in received and b"data: event 1" in received


def test_a_successful_delete_makes_the_next_get_a_miss(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    path = unique()
    get(gateway, path)
    until_hit(gateway, path)
    assert get(gateway, path, method="DELETE").status_code == 200
    assert get(gateway, path).headers["x-cache"] == "MISS"  # removed before the answer
    assert origin_gets(origin, path) == 3  # GET, DELETE, GET


def test_a_delete_whose_client_goes_away_still_removes_the_stored_get(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # The writer resets its connection 0.3 s into the origin's 1 s answer: the request goes
    # on without it (waitUntil) and removes the stored GET. Before, the platform dropped
    # it and every reader got the old copy until it expired.
    path = unique("/herd")
    get(gateway, path)
    until_hit(gateway, path)
    fields = {"cf-connecting-ip": fresh_ip(), "x-demo-delay": "1000"}
    leave_midway(gateway.url, path, method="DELETE", headers=fields, after=0.3)
    deadline = time.monotonic() + 10
    while not any(method == "DELETE" and seen == path for method, seen in origin.hits):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # The origin answers it a second after it arrived; the removal follows its answer
    # (polled: on a loaded machine a fixed wait may end before it).
    time.sleep(1.0)
    while get(gateway, path).headers["x-cache"] != "MISS":
        assert time.monotonic() < deadline + 1.0, "the stored GET was never removed"
        time.sleep(0.1)


def test_a_hit_answers_a_matching_etag_with_a_304(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    path = unique()
    tagged = path + "?h=" + quote('etag:"v1"', safe="")
    get(gateway, tagged)
    until_hit(gateway, tagged)
    current = get(gateway, tagged, if_none_match='W/"v1"')
    assert current.status_code == 304 and current.content == b""
    assert current.headers["x-cache"] == "HIT" and current.headers["etag"] == '"v1"'
    changed = get(gateway, tagged, if_none_match='"v0"')
    assert changed.status_code == 200 and changed.json()["path"] == path
    assert origin_gets(origin, path) == 1


def test_a_conditional_miss_answers_304_and_fills_the_cache(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    path = unique()
    tagged = path + "?h=" + quote('etag:"v2"', safe="")
    first = get(gateway, tagged, if_none_match='"v2"')
    assert first.status_code == 304 and first.headers["x-cache"] == "MISS"
    assert first.content == b"" and first.headers["etag"] == '"v2"'
    whole = until_hit(gateway, tagged)
    assert whole.status_code == 200 and "if-none-match" not in whole.json()["headers"]
    assert origin_gets(origin, path) == 1


def test_vary_gives_each_variant_its_own_entry(gateway: LocalGateway) -> None:
    path = unique() + "?h=vary:accept-language"
    de = get(gateway, path, accept_language="de").json()
    fr = get(gateway, path, accept_language="fr").json()
    assert de["n"] != fr["n"]
    assert until_hit(gateway, path, accept_language="de").json()["n"] == de["n"]
    assert until_hit(gateway, path, accept_language="fr").json()["n"] == fr["n"]


def test_vary_accept_encoding_is_one_entry_since_the_runtime_picks_the_encoding(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    path = unique()
    varying = path + "?h=" + quote("vary:accept-encoding", safe="")
    first = get(gateway, varying, accept_encoding="identity").json()
    other = until_hit(gateway, varying, accept_encoding="gzip, deflate")
    assert other.json()["n"] == first["n"] and origin_gets(origin, path) == 1
    # Why that is right: the origin is asked with the runtime's own Accept-Encoding,
    # whatever the client sent (if this changes, keys.VARY_IGNORED must too).
    seen = {
        get(gateway, unique("/free"), accept_encoding=sent).json()["headers"].get("accept-encoding")
        for sent in ("identity", "gzip", "zstd")
    }
    assert len(seen) == 1 and first["headers"].get("accept-encoding") in seen


@pytest.mark.parametrize(
    "header",
    ["cache-control:no-store", "cache-control:private", "set-cookie:session=1", "vary:*"],
)
def test_what_the_origin_forbids_is_not_cached(
    gateway: LocalGateway, origin: DemoOrigin, header: str
) -> None:
    path = unique() + "?h=" + quote(header, safe="")
    for _ in range(3):
        assert get(gateway, path).headers["x-cache"] == "MISS"
        time.sleep(0.2)
    assert origin_gets(origin, path.split("?")[0]) == 3


def test_cdn_cache_control_decides_over_cache_control(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # The demo origin says Cache-Control: max-age=60 itself; these add to it.
    kept = unique() + "?h=" + quote("cache-control:no-store", safe="")
    kept += "&h=" + quote("cdn-cache-control:max-age=60", safe="")
    get(gateway, kept)
    hit = until_hit(gateway, kept)
    assert hit.headers["cdn-cache-control"] == "max-age=60"
    assert "no-store" in hit.headers["cache-control"]
    out = unique() + "?h=" + quote("cdn-cache-control:no-store", safe="")
    for _ in range(3):
        assert get(gateway, out).headers["x-cache"] == "MISS"
        time.sleep(0.2)
    assert origin_gets(origin, out.split("?")[0]) == 3


def test_concurrent_misses_ask_the_origin_once(gateway: LocalGateway, origin: DemoOrigin) -> None:
    # One slow answer for six requests at once: five wait for it in the isolate (each on
    # its own timers: the runtime lets no request resume in another's) and are answered
    # from it, without asking the origin or taking quota (3/hour here).
    path = unique()
    ip = fresh_ip()

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            return list(
                await asyncio.gather(
                    *(
                        client.get(
                            gateway.url + path,
                            headers={"cf-connecting-ip": ip, "x-demo-delay": "400"},
                        )
                        for _ in range(6)
                    )
                )
            )

    answers = asyncio.run(run())
    assert [a.status_code for a in answers] == [200] * 6
    assert sorted(a.headers["x-cache"] for a in answers) == ["HIT"] * 5 + ["MISS"]
    assert len({a.content for a in answers}) == 1
    assert origin_gets(origin, path) == 1


def test_a_client_that_goes_away_still_fetches_the_answer_others_wait_for(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # The origin answers after 1.5 s; the client whose miss fetches it goes away at 0.5 s,
    # and five more ask at 0.7 s. The fetch and the store go on without that client
    # (waitUntil): the five get the answer when the origin gives it, from one origin call.
    # (Without that, the platform dropped the request: the five waited out the route's
    # timeout, 3 s, and then each asked the origin.)
    path = unique("/herd")
    delay = {"x-demo-delay": "1500"}
    sent = time.monotonic()
    leaving = threading.Thread(
        target=leave_midway,
        args=(gateway.url, path),
        kwargs={"headers": {"cf-connecting-ip": fresh_ip(), **delay}, "after": 0.5},
    )
    leaving.start()
    time.sleep(0.7)

    async def run() -> list[tuple[httpx.Response, float]]:
        async with httpx.AsyncClient(timeout=30) as client:

            async def one() -> tuple[httpx.Response, float]:
                answer = await client.get(
                    gateway.url + path, headers={"cf-connecting-ip": fresh_ip(), **delay}
                )
                return answer, time.monotonic() - sent

            return list(await asyncio.gather(*(one() for _ in range(5))))

    answers = asyncio.run(run())
    leaving.join()
    assert [a.headers["x-cache"] for a, _ in answers] == ["HIT"] * 5
    assert len({a.content for a, _ in answers}) == 1
    # The origin's answer comes at 1.5 s; dropped, the fetch would have left them waiting
    # out the 3 s timeout and asking again (5 s and more).
    assert all(at < 4.0 for _, at in answers), [round(at, 2) for _, at in answers]
    assert origin_gets(origin, path) == 1
    # Written to KV as well: a hit once the copy held in memory is gone.
    time.sleep(LINGER_MS / 1000 + 0.2)
    assert get(gateway, path).headers["x-cache"] == "HIT"
    assert origin_gets(origin, path) == 1


def test_a_max_age_shorter_than_the_ttl_expires_the_entry(gateway: LocalGateway) -> None:
    path = unique() + "?h=" + quote("cache-control:max-age=2", safe="")
    first = get(gateway, path).json()["n"]
    assert until_hit(gateway, path).json()["n"] == first
    deadline = time.monotonic() + 15
    while (answer := get(gateway, path)).headers["x-cache"] == "HIT":
        assert time.monotonic() < deadline
        time.sleep(0.25)
    assert answer.json()["n"] != first  # KV kept it 60 s; the entry's own expiry said no


def test_a_stale_copy_is_served_while_the_runtime_fetches_a_fresh_one(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    path = unique("/swr")
    short = path + "?h=" + quote("cache-control:max-age=1", safe="")
    first = get(gateway, short).json()["n"]
    assert until_hit(gateway, short).json()["n"] == first
    deadline = time.monotonic() + 15
    while (answer := get(gateway, short)).headers["x-cache"] == "HIT":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert answer.headers["x-cache"] == "UPDATING" and answer.json()["n"] == first
    # The refresh ran after that response (waitUntil): a fresh copy replaces the old.
    while (fresh := get(gateway, short)).headers["x-cache"] != "HIT" or fresh.json()["n"] == first:
        assert time.monotonic() < deadline, fresh.headers
        time.sleep(0.1)
    assert origin_gets(origin, path) >= 2


def test_per_key_entries_never_cross_clients(gateway: LocalGateway) -> None:
    path = unique("/mine")
    alice = get(gateway, path, x_api_key="alice").json()["n"]
    assert until_hit(gateway, path, x_api_key="alice").json()["n"] == alice
    bob = get(gateway, path, x_api_key="bob")
    assert bob.headers["x-cache"] == "MISS" and bob.json()["n"] != alice


def test_hits_do_not_consume_quota_unless_configured(gateway: LocalGateway) -> None:
    ip = fresh_ip()
    path = unique()
    get(gateway, path, ip)
    until_hit(gateway, path)
    for _ in range(5):  # the route allows 3 an hour: hits are free
        assert get(gateway, path, ip).status_code == 200
    counted = unique("/counted")
    get(gateway, counted, ip)
    until_hit(gateway, counted)  # from other addresses: fresh_ip() each time
    statuses = [get(gateway, counted, ip).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_a_kv_failure_is_a_miss(throwing_gateway: LocalGateway, origin: DemoOrigin) -> None:
    path = unique()
    answers = [get(throwing_gateway, path) for _ in range(2)]
    # The answer just fetched is held in memory while its KV write is on its way (2 s):
    # the write failing changes nothing for that while. Past it, a miss each time. (The
    # runtime's own clock: nothing can be injected into it.)
    time.sleep(LINGER_MS / 1000 + 0.2)
    answers += [get(throwing_gateway, path) for _ in range(1)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert [a.headers["x-cache"] for a in answers] == ["MISS", "HIT", "MISS"]
    assert origin_gets(origin, path) == 2
    assert throwing_gateway.saw('"event":"cache_error"')


def test_a_chunked_answer_is_measured_while_read_and_only_a_small_one_stored(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # The route keeps at most 4,096 bytes; neither answer says its length.
    big, small = unique("/cached-small"), unique("/cached-small")
    first = get(gateway, big + "?chunked=1&pad=200000")
    assert first.status_code == 200 and first.headers["x-cache"] == "MISS"
    assert len(first.json()["pad"]) == 200_000  # the client got it whole
    assert until_hit(gateway, small + "?chunked=1&pad=1000").json()["pad"] == "x" * 1000
    again = get(gateway, big + "?chunked=1&pad=200000")
    assert again.headers["x-cache"] == "MISS" and len(again.json()["pad"]) == 200_000
    assert origin_gets(origin, big) == 2 and origin_gets(origin, small) == 1
