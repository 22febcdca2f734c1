"""The KV response cache through the whole gateway on CPython (fake KV, clock, origin)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_limiter.core.http.messages import Headers, Response
from edge_limiter.gateway import OriginRequest
from edge_limiter.gateway.collapsing import LINGER_MS
from tests.examples import examples

from .fakes import FakeOrigin, answering, body_json, cut_off, harness, request, streaming

CATALOG: dict[str, Any] = {
    "name": "catalog",
    "match": {"path": "/v1/catalog/*"},
    "limits": "5/minute",
    "algorithm": "sliding_log",
    "cache": {"ttl": "5m", "default_ttl": "5m"},
}


def cached(upstream: FakeOrigin | None = None, **cache: Any) -> Any:
    route = {**CATALOG, "cache": {**CATALOG["cache"], **cache}}
    return harness(route, upstream=upstream or FakeOrigin(respond=answering()))


def test_miss_then_hit_and_the_origin_is_asked_once() -> None:
    h = cached()
    first = h.send(request("/v1/catalog/shoes"))
    assert first.status == 200 and first.headers.get("x-cache") == "MISS"
    h.clock.advance(3_000)
    second = h.send(request("/v1/catalog/shoes"))
    assert second.headers.get("x-cache") == "HIT"
    assert second.body == b"answer 1" and second.headers.get("age") == "3"
    assert len(h.origin.sent) == 1


def test_cdn_cache_control_decides_for_this_cache_and_reaches_the_client() -> None:
    # RFC 9213: browsers are told not to store, the CDN (this cache) to keep it a minute.
    fields = [("cache-control", "no-store"), ("cdn-cache-control", "max-age=60")]
    h = cached(FakeOrigin(respond=answering(headers=fields)))
    assert h.send(request("/v1/catalog/t")).headers.get("x-cache") == "MISS"
    h.clock.advance(59_000)
    hit = h.send(request("/v1/catalog/t"))
    assert hit.headers.get("x-cache") == "HIT"
    assert hit.headers.get("cache-control") == "no-store"
    assert hit.headers.get("cdn-cache-control") == "max-age=60"
    h.clock.advance(2_000)
    assert h.send(request("/v1/catalog/t")).headers.get("x-cache") == "MISS"
    # And the other way round: not kept here, whatever Cache-Control allows browsers.
    kept_out = [("cache-control", "max-age=600"), ("cdn-cache-control", "no-store")]
    h = cached(FakeOrigin(respond=answering(headers=kept_out)))
    answers = [h.send(request("/v1/catalog/u")) for _ in range(2)]
    assert [a.headers.get("x-cache") for a in answers] == ["MISS", "MISS"]
    assert h.kv.puts == [] and len(h.origin.sent) == 2


def test_a_304_carries_the_targeted_cache_fields_too() -> None:
    fields = [
        *TAGGED,
        ("cdn-cache-control", "max-age=600"),
        ("cloudflare-cdn-cache-control", "max-age=30"),
    ]
    h = cached(FakeOrigin(respond=answering(headers=fields)))
    for _ in range(2):  # on the miss, then from the hit
        answer = h.send(request("/v1/catalog/t304", headers={"if-none-match": '"v1"'}))
        assert answer.status == 304
        assert answer.headers.get("cdn-cache-control") == "max-age=600"
        assert answer.headers.get("cloudflare-cdn-cache-control") == "max-age=30"


def test_the_write_happens_after_the_response() -> None:
    h = cached()
    h.send(request("/v1/catalog/a"), flush=False)
    assert h.kv.puts == []  # nothing written on the request's path
    # Meanwhile the answer just fetched is served from memory, not fetched again.
    assert h.send(request("/v1/catalog/a"), flush=False).headers.get("x-cache") == "HIT"
    assert h.kv.puts == [] and len(h.origin.sent) == 1
    h.flush()
    assert len(h.kv.puts) == 1
    h.clock.advance(LINGER_MS + 1)  # from KV from now on
    assert h.send(request("/v1/catalog/a")).headers.get("x-cache") == "HIT"
    assert len(h.kv.gets) == 3 and len(h.origin.sent) == 1


def test_hits_do_not_consume_quota_unless_counted() -> None:
    h = cached()
    h.send(request("/v1/catalog/x"))
    answers = [h.send(request("/v1/catalog/x")) for _ in range(8)]
    assert all(a.status == 200 and a.headers.get("x-cache") == "HIT" for a in answers)
    # Not counted: no rate-limit headers claiming to describe the client.
    assert "x-ratelimit-remaining" not in answers[-1].headers
    counted = cached(count_hits=True)
    counted.send(request("/v1/catalog/x"))
    hits = [counted.send(request("/v1/catalog/x")) for _ in range(4)]
    assert [hit.headers.get("x-cache") for hit in hits] == ["HIT"] * 4
    assert hits[-1].headers.get("x-ratelimit-remaining") == "0"
    assert counted.send(request("/v1/catalog/x")).status == 429


def test_head_is_answered_from_the_get_entry_and_never_stored() -> None:
    h = cached()
    assert h.send(request("/v1/catalog/h", "HEAD")).headers.get("x-cache") == "MISS"
    assert h.kv.puts == []
    got = h.send(request("/v1/catalog/h"))
    head = h.send(request("/v1/catalog/h", "HEAD"))
    assert head.headers.get("x-cache") == "HIT" and head.body is None
    # The length a GET's body has, as an origin says it for a HEAD (never stored itself).
    assert got.body and head.headers.get("content-length") == str(len(got.body))
    assert len(h.origin.sent) == 2


def test_a_head_hit_of_an_encoded_copy_says_no_length() -> None:
    # Kept decoded (as the runtime read it) and encoded again per client: the length on
    # the wire is not the stored body's.
    h = cached(FakeOrigin(respond=answering(headers=[("content-encoding", "gzip")])))
    h.send(request("/v1/catalog/z"))
    head = h.send(request("/v1/catalog/z", "HEAD"))
    assert head.headers.get("x-cache") == "HIT" and head.headers.get("content-length") is None
    assert head.headers.get("content-encoding") == "gzip"


TAGGED = [("etag", '"v1"'), ("content-type", "text/plain"), ("cache-control", "max-age=60")]


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_hit_matching_the_clients_etag_is_a_304_without_the_body(method: str) -> None:
    h = cached(FakeOrigin(respond=answering(headers=TAGGED)))
    h.send(request("/v1/catalog/e"))
    h.clock.advance(2_000)
    answer = h.send(request("/v1/catalog/e", method, headers={"if-none-match": 'W/"v1"'}))
    assert answer.status == 304 and answer.body is None
    assert answer.headers.get("x-cache") == "HIT" and answer.headers.get("age") == "2"
    assert answer.headers.get("etag") == '"v1"'
    assert answer.headers.get("cache-control") == "max-age=60"
    assert "content-type" not in answer.headers  # a 304 describes the copy, not a body
    assert len(h.origin.sent) == 1
    stale_copy = h.send(request("/v1/catalog/e", headers={"if-none-match": '"v0"'}))
    assert stale_copy.status == 200 and stale_copy.body == b"answer 1"
    assert stale_copy.headers.get("content-type") == "text/plain"


def test_a_hit_unmodified_since_the_clients_date_is_a_304() -> None:
    modified = "Sun, 06 Nov 2022 08:49:37 GMT"
    h = cached(FakeOrigin(respond=answering(headers=[("last-modified", modified)])))
    h.send(request("/v1/catalog/d"))
    same = h.send(request("/v1/catalog/d", headers={"if-modified-since": modified}))
    assert same.status == 304 and same.headers.get("last-modified") == modified
    older = h.send(
        request("/v1/catalog/d", headers={"if-modified-since": "Sat, 05 Nov 2022 08:49:37 GMT"})
    )
    assert older.status == 200 and older.body == b"answer 1"
    assert len(h.origin.sent) == 1


def test_a_304_from_the_cache_counts_like_a_hit() -> None:
    h = cached(FakeOrigin(respond=answering(headers=TAGGED)), count_hits=True)
    h.send(request("/v1/catalog/c"))
    answer = h.send(request("/v1/catalog/c", headers={"if-none-match": '"v1"'}))
    assert answer.status == 304 and answer.headers.get("x-ratelimit-remaining") == "3"


def test_a_conditional_miss_fills_the_cache_and_still_answers_304() -> None:
    h = cached(FakeOrigin(respond=answering(headers=TAGGED)))
    answer = h.send(request("/v1/catalog/m", headers={"if-none-match": '"v1"'}))
    assert answer.status == 304 and answer.body is None
    assert answer.headers.get("x-cache") == "MISS" and answer.headers.get("etag") == '"v1"'
    assert answer.headers.get("x-ratelimit-remaining") == "4"  # a miss is counted
    # The origin was asked for the whole answer, which is now stored.
    assert not any(name == "if-none-match" for name, _ in h.origin.sent[0].headers)
    whole = h.send(request("/v1/catalog/m"))
    assert whole.headers.get("x-cache") == "HIT" and whole.body == b"answer 1"
    assert len(h.origin.sent) == 1


def test_a_conditional_miss_that_does_not_match_gets_the_whole_answer() -> None:
    h = cached(FakeOrigin(respond=answering(headers=TAGGED)))
    since = {"if-none-match": '"v0"', "if-modified-since": "Sun, 06 Nov 2022 08:49:37 GMT"}
    answer = h.send(request("/v1/catalog/n", headers=since))
    assert answer.status == 200 and answer.body == b"answer 1"
    assert not any(name.startswith("if-") for name, _ in h.origin.sent[0].headers)


def test_a_conditional_miss_whose_answer_is_not_stored_gets_it_whole() -> None:
    private = [("etag", '"v1"'), ("set-cookie", "s=1"), ("cache-control", "no-store")]
    h = cached(FakeOrigin(respond=answering(headers=private)))
    answer = h.send(request("/v1/catalog/s", headers={"if-none-match": '"v1"'}))
    assert answer.status == 200 and answer.body == b"answer 1"
    assert answer.headers.get("set-cookie") == "s=1" and h.kv.puts == []


def test_a_conditional_miss_that_may_not_be_stored_is_the_origins_to_judge() -> None:
    h = cached(FakeOrigin(respond=answering(status=304, headers=[("etag", '"v1"')])))
    head = h.send(request("/v1/catalog/h", "HEAD", headers={"if-none-match": '"v1"'}))
    assert head.status == 304 and ("if-none-match", '"v1"') in h.origin.sent[0].headers
    refused = h.send(
        request("/v1/catalog/h", headers={"if-none-match": '"v1"', "cache-control": "no-store"})
    )
    assert refused.status == 304 and ("if-none-match", '"v1"') in h.origin.sent[1].headers
    assert h.kv.puts == []  # a 304 is never a whole response to store


@pytest.mark.parametrize("field", ["if-match", "if-unmodified-since"])
def test_preconditions_that_guard_the_origin_go_to_it(field: str) -> None:
    h = cached(FakeOrigin(respond=answering(headers=TAGGED)))
    h.send(request("/v1/catalog/p"))
    value = '"v1"' if field == "if-match" else "Sun, 06 Nov 2022 08:49:37 GMT"
    answer = h.send(request("/v1/catalog/p", headers={field: value}))
    assert answer.headers.get("x-cache") == "BYPASS" and answer.body == b"answer 2"
    assert (field, value) in h.origin.sent[-1].headers


SHORT = [("cache-control", "max-age=2")]


def test_a_stale_copy_is_served_while_a_fresh_one_is_fetched() -> None:
    h = cached(FakeOrigin(respond=answering(headers=SHORT)), stale_while_revalidate="30s")
    h.send(request("/v1/catalog/r"))
    h.clock.advance(2_500)
    updating = h.send(request("/v1/catalog/r"), flush=False)
    assert updating.headers.get("x-cache") == "UPDATING" and updating.body == b"answer 1"
    assert updating.headers.get("age") == "2"
    assert len(h.origin.sent) == 1  # the refresh runs after the response
    again = h.send(request("/v1/catalog/r"), flush=False)  # one refresh at a time
    assert again.headers.get("x-cache") == "UPDATING"
    h.flush()
    assert len(h.origin.sent) == 2
    fresh = h.send(request("/v1/catalog/r"))
    assert fresh.headers.get("x-cache") == "HIT" and fresh.body == b"answer 2"


@pytest.mark.parametrize(
    "now_answers", [(410, []), (404, []), (200, [("cache-control", "no-store")])]
)
def test_a_refresh_answered_with_nothing_to_keep_retires_the_stale_copy(
    now_answers: tuple[int, list[tuple[str, str]]],
) -> None:
    # The resource is gone (or may no longer be kept): the old copy stops being served at
    # once, and the origin is not asked again by every request of the window.
    h = cached(FakeOrigin(respond=answering(headers=SHORT)), stale_while_revalidate="30s")
    h.send(request("/v1/catalog/g"))
    h.clock.advance(2_500)
    status, headers = now_answers
    h.origin.respond = answering(status, headers=headers)
    assert h.send(request("/v1/catalog/g")).headers.get("x-cache") == "UPDATING"
    after = h.send(request("/v1/catalog/g"))
    assert after.status == status and after.headers.get("x-cache") == "MISS"
    # A failing origin (a 5xx) leaves it served until its window ends.
    failing = cached(FakeOrigin(respond=answering(headers=SHORT)), stale_while_revalidate="30s")
    failing.send(request("/v1/catalog/g"))
    failing.clock.advance(2_500)
    failing.origin.respond = answering(500)
    failing.send(request("/v1/catalog/g"))
    assert failing.send(request("/v1/catalog/g")).headers.get("x-cache") == "UPDATING"


def test_only_if_cached_never_takes_a_copy_being_refreshed() -> None:
    h = cached(FakeOrigin(respond=answering(headers=SHORT)), stale_while_revalidate="30s")
    h.send(request("/v1/catalog/u"))
    h.clock.advance(2_500)
    only = h.send(request("/v1/catalog/u", headers={"cache-control": "only-if-cached"}))
    assert only.status == 504 and len(h.origin.sent) == 1  # nor starts a refresh


def test_a_refresh_whose_work_was_dropped_does_not_block_the_next() -> None:
    h = cached(FakeOrigin(respond=answering(headers=SHORT)), stale_while_revalidate="5m")
    h.send(request("/v1/catalog/d"))
    h.clock.advance(2_500)
    h.send(request("/v1/catalog/d"), flush=False)
    assert len(h.background.pending) == 1
    for dropped in h.background.pending:
        dropped.close()  # type: ignore[attr-defined]
    h.background.pending.clear()
    h.clock.advance(10_000)
    h.send(request("/v1/catalog/d"), flush=False)
    assert h.background.pending == []  # within the request timeout: taken as still running
    h.clock.advance(30_000)
    h.send(request("/v1/catalog/d"), flush=False)
    assert len(h.background.pending) == 1
    h.flush()
    assert len(h.origin.sent) == 2


def test_the_refresh_is_rate_limited_like_any_request_to_the_origin() -> None:
    h = cached(FakeOrigin(respond=answering(headers=SHORT)), stale_while_revalidate="30s")
    h.send(request("/v1/catalog/l"))  # 1 of 5
    for _ in range(4):
        h.clock.advance(2_100)
        h.send(request("/v1/catalog/l"))  # each refreshes: 5 of 5
    assert len(h.origin.sent) == 5
    h.clock.advance(2_100)
    stale = h.send(request("/v1/catalog/l"))
    assert stale.headers.get("x-cache") == "UPDATING" and stale.body == b"answer 5"
    assert len(h.origin.sent) == 5  # the sixth refresh was denied, never sent
    assert h.events("limited") or h.events("cached_denial")


def test_with_count_hits_an_updating_answer_and_its_refresh_cost_one_unit() -> None:
    h = cached(
        FakeOrigin(respond=answering(headers=SHORT)),
        stale_while_revalidate="30s",
        count_hits=True,
    )
    assert h.send(request("/v1/catalog/u")).headers.get("x-ratelimit-remaining") == "4"
    h.clock.advance(2_100)
    updating = h.send(request("/v1/catalog/u"))
    assert updating.headers.get("x-cache") == "UPDATING"
    assert updating.headers.get("x-ratelimit-remaining") == "3"
    assert len(h.origin.sent) == 2  # refreshed, and not counted a second time
    hit = h.send(request("/v1/catalog/u"))
    assert hit.headers.get("x-cache") == "HIT" and hit.headers.get("x-ratelimit-remaining") == "2"


def test_past_the_window_a_stale_copy_is_a_miss() -> None:
    h = cached(FakeOrigin(respond=answering(headers=SHORT)), stale_while_revalidate="10s")
    h.send(request("/v1/catalog/w"))
    h.clock.advance(12_000)
    late = h.send(request("/v1/catalog/w"))
    assert late.headers.get("x-cache") == "MISS" and late.body == b"answer 2"


def test_a_head_is_served_the_stale_copy_without_a_refresh() -> None:
    h = cached(FakeOrigin(respond=answering(headers=SHORT)), stale_while_revalidate="30s")
    h.send(request("/v1/catalog/x"))
    h.clock.advance(2_500)
    head = h.send(request("/v1/catalog/x", "HEAD"))
    assert head.headers.get("x-cache") == "UPDATING" and head.body is None
    assert len(h.origin.sent) == 1


def test_a_failed_refresh_keeps_the_stale_copy() -> None:
    status = [200]

    async def respond(_: OriginRequest) -> Response:
        return Response(status[0], Headers(SHORT), f"status {status[0]}".encode())

    h = cached(FakeOrigin(respond=respond), stale_while_revalidate="30s")
    h.send(request("/v1/catalog/f"))
    h.clock.advance(2_500)
    status[0] = 503
    assert h.send(request("/v1/catalog/f")).body == b"status 200"  # its refresh got 503s
    after = h.send(request("/v1/catalog/f"), flush=False)
    assert after.headers.get("x-cache") == "UPDATING" and after.body == b"status 200"
    status[0] = 200
    h.flush()
    assert h.send(request("/v1/catalog/f")).headers.get("x-cache") == "HIT"


def test_vary_keeps_one_entry_per_variant() -> None:
    h = cached(FakeOrigin(respond=answering(headers=[("vary", "Accept-Language")])))
    de = {"accept-language": "de"}
    fr = {"accept-language": "fr"}
    assert h.send(request("/v1/catalog/v", headers=de)).body == b"answer 1"
    assert h.send(request("/v1/catalog/v", headers=fr)).body == b"answer 2"
    assert h.send(request("/v1/catalog/v", headers=de)).body == b"answer 1"
    assert h.send(request("/v1/catalog/v", headers=fr)).body == b"answer 2"
    assert h.send(request("/v1/catalog/v")).headers.get("x-cache") == "MISS"  # absent differs
    assert len(h.origin.sent) == 3


def test_vary_accept_encoding_keeps_one_entry_for_every_client() -> None:
    h = cached(FakeOrigin(respond=answering(headers=[("vary", "Accept-Encoding")])))
    h.send(request("/v1/catalog/ae", headers={"accept-encoding": "gzip, deflate, br"}))
    for spelling in ("br, gzip", "identity", None):
        headers = {"accept-encoding": spelling} if spelling else {}
        hit = h.send(request("/v1/catalog/ae", headers=headers))
        assert hit.headers.get("x-cache") == "HIT" and hit.body == b"answer 1"
        assert hit.headers.get("vary") == "Accept-Encoding"  # still said to the client
    assert len(h.origin.sent) == 1


@pytest.mark.parametrize(
    "headers",
    [
        [("cache-control", "no-store")],
        [("cache-control", "private, max-age=60")],
        [("cache-control", "no-cache")],
        [("set-cookie", "session=1")],
        [("vary", "*")],
        [("cache-control", "max-age=0")],
    ],
)
def test_what_the_origin_forbids_is_never_stored(headers: list[tuple[str, str]]) -> None:
    h = cached(FakeOrigin(respond=answering(headers=headers)))
    h.send(request("/v1/catalog/n"))
    assert h.kv.puts == []
    assert h.send(request("/v1/catalog/n")).headers.get("x-cache") == "MISS"


def test_error_statuses_are_stored_only_when_configured() -> None:
    h = cached(FakeOrigin(respond=answering(status=404)))
    h.send(request("/v1/catalog/gone"))
    assert h.kv.puts == []
    configured = cached(FakeOrigin(respond=answering(status=404)), statuses=[200, 404])
    configured.send(request("/v1/catalog/gone"))
    assert configured.send(request("/v1/catalog/gone")).headers.get("x-cache") == "HIT"


def test_a_max_age_shorter_than_the_ttl_is_enforced_by_the_entry() -> None:
    h = cached(FakeOrigin(respond=answering(headers=[("cache-control", "max-age=2")])))
    h.send(request("/v1/catalog/m"))
    (_, ttl), *_ = h.kv.puts
    assert ttl == 60  # KV's minimum, longer than the entry is fresh
    h.clock.advance(1_999)
    assert h.send(request("/v1/catalog/m")).headers.get("x-cache") == "HIT"
    h.clock.advance(1)
    assert h.send(request("/v1/catalog/m")).headers.get("x-cache") == "MISS"


def test_per_key_scope_never_serves_one_client_to_another() -> None:
    h = harness(
        {
            **CATALOG,
            "key": "header:x-api-key",
            "cache": {"ttl": "5m", "default_ttl": "5m", "scope": "key"},
        },
        upstream=FakeOrigin(respond=answering()),
    )
    alice = h.send(request("/v1/catalog/me", headers={"x-api-key": "alice"}))
    bob = h.send(request("/v1/catalog/me", headers={"x-api-key": "bob"}))
    assert (alice.body, bob.body) == (b"answer 1", b"answer 2")
    again = h.send(request("/v1/catalog/me", headers={"x-api-key": "alice"}))
    assert again.body == b"answer 1" and again.headers.get("x-cache") == "HIT"
    assert not any("alice" in key for key, _ in h.kv.puts)  # keys hold a hash, not the key


def test_per_key_scope_keeps_apart_the_clients_that_share_a_key() -> None:
    # One address behind a NAT on a key = "ip" route: one rate-limit key, several users.
    h = harness(
        {**CATALOG, "cache": {"ttl": "5m", "default_ttl": "5m", "scope": "key"}},
        upstream=FakeOrigin(respond=answering()),
    )

    def get(**headers: str) -> Any:
        return h.send(request("/v1/catalog/me", headers=headers, ip="198.51.100.7"))

    alice = get(authorization="Bearer alice")
    assert get(authorization="Bearer bob").body != alice.body  # never alice's answer
    assert get(cookie="s=carol").body != alice.body
    assert get().headers.get("x-cache") == "MISS"  # no credentials: its own entry too
    again = get(authorization="Bearer alice")
    assert again.body == alice.body and again.headers.get("x-cache") == "HIT"
    # A write by alice retires every variant of the URI for that key.
    h.clock.advance(2_000)
    assert (
        h.send(
            request(
                "/v1/catalog/me",
                "PUT",
                headers={"authorization": "Bearer alice"},
                ip="198.51.100.7",
            )
        ).status
        == 200
    )
    assert get(cookie="s=carol").headers.get("x-cache") == "MISS"


def test_a_write_retires_its_callers_entry_whatever_the_origin_is_sent() -> None:
    # The key the GET was stored under is the client's; the write's answer comes back
    # after the request was readied for the origin, which set that very field (the
    # origin's own API key): the write must still find the client's entry.
    h = harness(
        {
            **CATALOG,
            "key": "header:x-api-key",
            "cache": {"ttl": "5m", "default_ttl": "5m", "scope": "key"},
        },
        upstream=FakeOrigin(respond=answering()),
        origin_headers={"X-Api-Key": "the-origins-own-key"},
    )
    field = "x-api-key"

    def send(method: str = "GET") -> Any:
        return h.send(
            request("/v1/catalog/me", method, headers={field: "alice"}, ip="198.51.100.7")
        )

    assert send().headers.get("x-cache") == "MISS"
    assert send().headers.get("x-cache") == "HIT"
    h.clock.advance(2_000)
    assert send("PUT").status == 200
    assert send().headers.get("x-cache") == "MISS"


def test_per_key_scope_keeps_apart_callers_by_every_header_a_route_keys_on() -> None:
    # The API's key travels in X-Api-Key (another route counts by it) and this route
    # counts by address: two callers behind one NAT never share an entry.
    keyed = {"name": "keyed", "match": {"path": "/v1/keyed"}, "limits": "5/minute"}
    h = harness(
        {**CATALOG, "cache": {"ttl": "5m", "default_ttl": "5m", "scope": "key"}},
        {**keyed, "key": "header:x-api-key"},
        upstream=FakeOrigin(respond=answering()),
    )

    def get(**headers: str) -> Any:
        return h.send(request("/v1/catalog/me", headers=headers, ip="198.51.100.7"))

    alice = get(**{"x-api-key": "alice"})
    mallory = get(**{"x-api-key": "mallory"})
    assert mallory.body != alice.body and mallory.headers.get("x-cache") == "MISS"
    proxied = get(**{"x-api-key": "alice", "proxy-authorization": "Basic bTpw"})
    assert proxied.headers.get("x-cache") == "MISS"
    assert get(**{"x-api-key": "alice"}).headers.get("x-cache") == "HIT"


@pytest.mark.parametrize("credential", [("authorization", "Bearer t"), ("cookie", "s=1")])
def test_credentials_never_meet_a_public_entry(credential: tuple[str, str]) -> None:
    h = cached()
    h.send(request("/v1/catalog/p"))
    private = h.send(request("/v1/catalog/p", headers=[credential]))
    assert private.headers.get("x-cache") == "BYPASS" and private.body == b"answer 2"
    assert len(h.kv.puts) == 1


def test_a_kv_failure_is_a_miss_and_is_logged() -> None:
    h = cached()
    h.kv.failing = True
    answers = [h.send(request("/v1/catalog/k"))]
    h.clock.advance(LINGER_MS + 1)  # past the answer held in memory while it is written
    answers.append(h.send(request("/v1/catalog/k")))
    assert [a.status for a in answers] == [200, 200]
    assert [a.headers.get("x-cache") for a in answers] == ["MISS", "MISS"]
    ops = {record["op"] for record in h.events("cache_error")}
    assert ops == {"get", "put"}


def test_the_query_is_normalised_and_ignored_parameters_dropped() -> None:
    h = cached(ignore_query=["utm_source"])
    h.send(request("/v1/catalog/q", query="b=2&a=%31&utm_source=x"))
    hit = h.send(request("/v1/catalog/q", query="utm_source=y&b=2&a=1"))
    assert hit.headers.get("x-cache") == "HIT"
    assert h.send(request("/v1/catalog/q", query="b=3&a=1")).headers.get("x-cache") == "MISS"
    # Another order is another request: PHP reads a_b=1 from one, a_b=2 from the other.
    assert h.send(request("/v1/catalog/q", query="a=1&b=2")).headers.get("x-cache") == "MISS"
    h.send(request("/v1/catalog/q", query="a_b=2&a.b=1"))
    other = h.send(request("/v1/catalog/q", query="a.b=1&a_b=2"))
    assert other.headers.get("x-cache") == "MISS"


def test_client_no_cache_is_honoured_only_when_allowed() -> None:
    h = cached()
    h.send(request("/v1/catalog/c"))
    busted = h.send(request("/v1/catalog/c", headers={"cache-control": "no-cache"}))
    assert busted.headers.get("x-cache") == "HIT"
    allowed = cached(allow_client_no_cache=True)
    allowed.send(request("/v1/catalog/c"))
    fresh = allowed.send(request("/v1/catalog/c", headers={"cache-control": "no-cache"}))
    assert fresh.headers.get("x-cache") == "MISS" and fresh.body == b"answer 2"
    # ... and rate limited like a miss: it counts against the 5/minute limit.
    assert fresh.headers.get("x-ratelimit-remaining") == "3"


def test_bodies_over_max_bytes_are_not_stored() -> None:
    h = cached(FakeOrigin(respond=answering(body=b"x" * 2048)), max_bytes=1024)
    h.send(request("/v1/catalog/big"))
    assert h.kv.puts == []


def test_a_streamed_body_of_unknown_length_is_measured_not_buffered() -> None:
    big = streaming(b"x" * 2048, headers=[("cache-control", "max-age=60")])
    h = cached(FakeOrigin(respond=big), max_bytes=1024)
    answer = h.send(request("/v1/catalog/chunked"))
    assert answer.status == 200 and answer.headers.get("x-cache") == "MISS"
    assert answer.body is big.bodies[0] and not big.bodies[0].whole
    assert big.bodies[0].held <= 1025 and h.kv.puts == []
    small = streaming(b"s" * 1000, headers=[("cache-control", "max-age=60")])
    h = cached(FakeOrigin(respond=small), max_bytes=1024)
    assert h.send(request("/v1/catalog/chunked")).body == b"s" * 1000
    hit = h.send(request("/v1/catalog/chunked"))
    assert hit.headers.get("x-cache") == "HIT" and hit.body == b"s" * 1000


def test_one_isolate_writes_a_key_at_most_once_a_second() -> None:
    h = cached()
    h.send(request("/v1/catalog/w"), flush=False)
    h.send(request("/v1/catalog/w"), flush=False)
    h.flush()
    assert len(h.kv.puts) == 1


def test_a_post_on_a_cached_route_is_neither_read_nor_stored() -> None:
    h = cached()
    answer = h.send(request("/v1/catalog/p", "POST", body=b"{}"))
    assert answer.status == 200 and "x-cache" not in answer.headers and h.kv.gets == []


def test_a_denied_miss_is_not_stored() -> None:
    h = cached()
    for n in range(5):
        h.send(request(f"/v1/catalog/{n}"))
    denied = h.send(request("/v1/catalog/other"))
    assert denied.status == 429 and body_json(denied)["code"] == "rate_limited"
    assert len(h.kv.puts) == 5


def test_set_cookie_on_a_hit_is_impossible_even_if_the_origin_adds_it_later() -> None:
    calls = 0

    async def respond(_: OriginRequest) -> Response:
        nonlocal calls
        calls += 1
        from edge_limiter.core.http.messages import Headers

        headers = Headers([("cache-control", "max-age=60")])
        return Response(200, headers, f"body {calls}".encode())

    h = cached(FakeOrigin(respond=respond))
    h.send(request("/v1/catalog/s"))
    hit = h.send(request("/v1/catalog/s"))
    assert "set-cookie" not in hit.headers and hit.headers.get("cache-control") == "max-age=60"


def test_an_origin_body_cut_off_is_a_502_and_never_stored() -> None:
    h = cached(FakeOrigin(respond=cut_off()))
    answer = h.send(request("/v1/catalog/shoes"))
    assert answer.status == 502
    assert body_json(answer)["code"] == "origin_body_broken"
    # It was counted: the client is told where its limit stands, as on a 504.
    assert answer.headers.get("x-ratelimit-remaining") is not None
    assert answer.headers.get("ratelimit") is not None
    h.flush()
    assert h.kv.values == {}


_FIELD_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["etag", "last-modified", "date", "cache-control", "vary", "age"]),
            _FIELD_TEXT,
        ),
        max_size=4,
    ),
    st.lists(
        st.tuples(
            st.sampled_from(
                ["if-none-match", "if-modified-since", "if-match", "cache-control", "range"]
            ),
            _FIELD_TEXT,
        ),
        max_size=4,
    ),
    st.integers(0, 400_000),
)
def test_any_validators_and_origin_fields_give_an_answer_never_an_error(
    origin_fields: list[tuple[str, str]], request_fields: list[tuple[str, str]], advance: int
) -> None:
    h = cached(FakeOrigin(respond=answering(headers=origin_fields)), stale_while_revalidate="30s")
    for method in ("GET", "GET", "HEAD"):
        answer = h.send(request("/v1/catalog/z", method, headers=request_fields))
        assert answer.status in (200, 304) or answer.status == 429
        if answer.status == 304:
            assert answer.body is None
        h.clock.advance(advance)


def test_only_if_cached_is_a_stored_copy_or_a_504_never_the_origin() -> None:
    h = cached(stale_if_error="1h")
    only = {"cache-control": "only-if-cached"}
    miss = h.send(request("/v1/catalog/o", headers=only))
    assert miss.status == 504 and body_json(miss)["code"] == "not_cached"
    assert miss.headers.get("x-cache") == "MISS"
    assert h.origin.sent == [] and h.kv.puts == [] and h.store.calls == []
    h.send(request("/v1/catalog/o"))
    hit = h.send(request("/v1/catalog/o", headers=only))
    assert hit.status == 200 and hit.headers.get("x-cache") == "HIT"
    # A copy that may not be read for this request (credentials) is not one it can get.
    private = h.send(request("/v1/catalog/o", headers={**only, "authorization": "Bearer t"}))
    assert private.status == 504
    # Past its freshness, the copy is only for an origin failing (stale-if-error).
    h.clock.advance(5 * 60_000 + 1)
    assert h.send(request("/v1/catalog/o", headers=only)).status == 504
    assert len(h.origin.sent) == 1


GETS_ONLY = {**CATALOG, "match": {"path": "/v1/catalog/*", "methods": ["GET", "HEAD"]}}
WRITES = {"name": "writes", "match": {"path": "/v1/*"}, "limits": "100/minute"}


def test_a_read_sent_before_a_write_does_not_store_its_old_answer_over_it() -> None:
    written = asyncio.Event()

    async def respond(outgoing: OriginRequest) -> Response:
        if outgoing.method == "GET":
            await written.wait()  # the origin answers the read after the write is done
            return Response(200, Headers([("cache-control", "max-age=300")]), b"OLD")
        written.set()
        return Response(200, Headers(), b"written")

    h = harness(GETS_ONLY, WRITES, upstream=FakeOrigin(respond=respond))
    read, write = asyncio.run(
        h.concurrently(request("/v1/catalog/w"), request("/v1/catalog/w", "PUT", body=b"{}"))
    )
    h.flush()
    assert (read.body, write.status) == (b"OLD", 200)
    after = h.send(request("/v1/catalog/w"))
    assert after.headers.get("x-cache") == "MISS"  # the old answer was not kept


def test_a_read_answered_before_a_write_is_not_stored_after_the_write_ends() -> None:
    # A probe's finding: the origin answered the read first, then the write; the read's
    # entry is written after its response (deferred), which came after the write had
    # cleared the URI: the old answer was served for the whole ttl (8 of 16 runs).
    h = harness(
        GETS_ONLY,
        WRITES,
        upstream=FakeOrigin(respond=answering(headers=[("cache-control", "max-age=300")])),
    )
    read = h.send(request("/v1/catalog/r"), flush=False)  # its write not yet done
    assert read.headers.get("x-cache") == "MISS"
    h.clock.advance(5)
    assert h.send(request("/v1/catalog/r", "PUT", body=b"{}")).status == 200
    assert h.kv.puts == []  # the read's deferred write ran after the PUT, and was dropped
    assert h.send(request("/v1/catalog/r")).headers.get("x-cache") == "MISS"


def test_a_purge_while_a_reads_entry_is_being_written_is_done_again_after_it() -> None:
    h = harness(
        GETS_ONLY,
        WRITES,
        upstream=FakeOrigin(respond=answering(headers=[("cache-control", "max-age=300")])),
    )
    cache = h.gateway.caches["catalog"]
    put = h.kv.put

    async def slow_put(key: str, value: bytes, ttl: int) -> None:
        await cache.purge("api.test", "/v1/catalog/p", "", None)  # lands while it writes
        await put(key, value, ttl)

    h.kv.put = slow_put  # type: ignore[method-assign]
    h.send(request("/v1/catalog/p"))
    h.kv.put = put  # type: ignore[method-assign]
    assert h.send(request("/v1/catalog/p")).headers.get("x-cache") == "MISS"


def test_a_post_made_a_delete_by_its_query_invalidates_the_bare_uri() -> None:
    h = harness(GETS_ONLY, WRITES, upstream=FakeOrigin(respond=answering()))
    h.send(request("/v1/catalog/q"))
    assert h.send(request("/v1/catalog/q")).headers.get("x-cache") == "HIT"
    deleted = h.send(request("/v1/catalog/q", "POST", query="_method=DELETE", body=b"{}"))
    assert deleted.status == 200
    assert h.origin.sent[-1].method == "DELETE"
    assert h.origin.sent[-1].url.endswith("/v1/catalog/q")
    assert h.send(request("/v1/catalog/q")).headers.get("x-cache") == "MISS"


@pytest.mark.parametrize("method", ["DELETE", "PUT", "POST", "PATCH"])
def test_a_successful_unsafe_request_invalidates_the_stored_get(method: str) -> None:
    # RFC 9111 section 4.4, whichever route takes the write.
    h = harness(GETS_ONLY, WRITES, upstream=FakeOrigin(respond=answering()))
    h.send(request("/v1/catalog/a"))
    h.send(request("/v1/catalog/b"))
    assert h.send(request("/v1/catalog/a")).headers.get("x-cache") == "HIT"
    assert h.send(request("/v1/catalog/a", method, body=b"{}")).status == 200
    assert h.send(request("/v1/catalog/a")).headers.get("x-cache") == "MISS"
    assert h.send(request("/v1/catalog/b")).headers.get("x-cache") == "HIT"  # only its URI
    assert len(h.events("cache_invalidated")) == 1


def test_a_write_whose_client_goes_away_still_invalidates_the_stored_get() -> None:
    # The writer's client goes away while the origin acts on its DELETE (the platform
    # drops such a request, unless it holds it): the stored GET is still removed. Before,
    # every reader got the old copy until it expired.
    deleting = asyncio.Event()

    async def respond(outgoing: OriginRequest) -> Response:
        if outgoing.method == "DELETE":
            await deleting.wait()
        return Response(200, Headers(), outgoing.method.encode())

    h = harness(GETS_ONLY, WRITES, upstream=FakeOrigin(respond=respond))
    h.send(request("/v1/catalog/a"))
    assert h.send(request("/v1/catalog/a")).headers.get("x-cache") == "HIT"

    async def scenario() -> Response:
        _, connection = h.connect(request("/v1/catalog/a", "DELETE"))
        while len(h.origin.sent) < 2:
            await asyncio.sleep(0)
        connection.gone = True
        deleting.set()
        for _ in range(20):  # the origin's answer arrives
            await asyncio.sleep(0)
        await connection.run()
        return await h.gateway.handle(request("/v1/catalog/a"), h.background)

    assert asyncio.run(scenario()).headers.get("x-cache") == "MISS"
    assert len(h.events("cache_invalidated")) == 1


@pytest.mark.parametrize("field", ["location", "content-location"])
def test_a_write_invalidates_the_uris_its_answer_names_on_the_same_host(field: str) -> None:
    async def respond(req: OriginRequest) -> Response:
        if req.method == "GET":
            return Response(200, Headers([("cache-control", "max-age=600")]), req.url.encode())
        named = [
            (field, "/v1/catalog/b?page=2"),  # relative: this host
            (field, "https://elsewhere.test/v1/catalog/c"),  # another host: never
        ]
        return Response(201, Headers(named[:1] if req.url.endswith("/a") else named[1:]))

    h = harness(GETS_ONLY, WRITES, upstream=FakeOrigin(respond=respond))
    for path, query in (("/v1/catalog/b", "page=2"), ("/v1/catalog/c", "")):
        h.send(request(path, query=query))
        assert h.send(request(path, query=query)).headers.get("x-cache") == "HIT"
    assert h.send(request("/v1/catalog/a", "POST", body=b"{}")).status == 201
    assert h.send(request("/v1/catalog/b", query="page=2")).headers.get("x-cache") == "MISS"
    assert h.send(request("/v1/catalog/x", "POST", body=b"{}")).status == 201
    assert h.send(request("/v1/catalog/c")).headers.get("x-cache") == "HIT"


def test_a_write_invalidates_every_variant_of_the_uri() -> None:
    varying = FakeOrigin(respond=answering(headers=[("vary", "Accept-Language")]))
    h = harness(GETS_ONLY, WRITES, upstream=varying)
    en, fr = {"accept-language": "en"}, {"accept-language": "fr"}
    assert h.send(request("/v1/catalog/v", headers=en)).body == b"answer 1"
    assert h.send(request("/v1/catalog/v", headers=fr)).body == b"answer 2"
    h.clock.advance(1_500)
    h.send(request("/v1/catalog/v", "PUT", body=b"{}"))  # answer 3
    h.clock.advance(1_500)
    again = h.send(request("/v1/catalog/v", headers=en))
    assert again.headers.get("x-cache") == "MISS" and again.body == b"answer 4"
    # The other variant stored before the write is never served again, even once a new
    # manifest stands at the URI.
    other = h.send(request("/v1/catalog/v", headers=fr))
    assert other.headers.get("x-cache") == "MISS" and other.body == b"answer 5"
    # The variants stored since share the new manifest.
    assert h.send(request("/v1/catalog/v", headers=en)).body == b"answer 4"
    assert h.send(request("/v1/catalog/v", headers=fr)).body == b"answer 5"


def test_a_failed_or_unforwarded_write_leaves_the_stored_get() -> None:
    status = [200]

    async def respond(_: OriginRequest) -> Response:
        return Response(status[0], Headers(), b"x")

    h = harness(GETS_ONLY, WRITES, upstream=FakeOrigin(respond=respond))
    h.send(request("/v1/catalog/a"))
    status[0] = 500
    assert h.send(request("/v1/catalog/a", "DELETE")).status == 500
    assert h.send(request("/v1/catalog/a")).headers.get("x-cache") == "HIT"
    assert h.kv.deletes == []
    # A query is part of the URI: another query's write leaves this one's copy.
    status[0] = 200
    h.send(request("/v1/catalog/a", "DELETE", query="v=2"))
    assert h.send(request("/v1/catalog/a")).headers.get("x-cache") == "HIT"


def test_a_write_invalidates_only_the_writers_copy_on_a_route_cached_per_key() -> None:
    keyed = {**GETS_ONLY, "cache": {"ttl": "5m", "default_ttl": "5m", "scope": "key"}}
    h = harness(keyed, WRITES, upstream=FakeOrigin(respond=answering()))
    for ip in ("198.51.100.1", "198.51.100.2"):
        h.send(request("/v1/catalog/a", ip=ip))
    h.send(request("/v1/catalog/a", "PUT", ip="198.51.100.1", body=b"{}"))
    assert h.send(request("/v1/catalog/a", ip="198.51.100.1")).headers.get("x-cache") == "MISS"
    assert h.send(request("/v1/catalog/a", ip="198.51.100.2")).headers.get("x-cache") == "HIT"


def test_a_kv_failure_on_invalidation_is_logged_never_the_writes_error() -> None:
    h = harness(GETS_ONLY, WRITES, upstream=FakeOrigin(respond=answering()))
    h.send(request("/v1/catalog/a"))
    h.kv.failing = True
    assert h.send(request("/v1/catalog/a", "DELETE")).status == 200
    assert h.events("cache_error")


def test_a_case_insensitive_route_keeps_one_copy_for_every_spelling_of_its_paths() -> None:
    """A probe's finding: with ``case_insensitive`` (an origin that reads /ITEMS/3 as
    /items/3), each spelling had its own copy, and a DELETE of one left the others
    serving the deleted resource."""
    h = harness(
        GETS_ONLY,
        WRITES,
        upstream=FakeOrigin(respond=answering()),
        paths={"case_insensitive": True},
    )
    assert h.send(request("/v1/CATALOG/Item")).headers.get("x-cache") == "MISS"
    assert h.send(request("/v1/catalog/item")).headers.get("x-cache") == "HIT"
    assert h.send(request("/v1/Catalog/ITEM", "DELETE")).status == 200
    assert h.send(request("/v1/CATALOG/Item")).headers.get("x-cache") == "MISS"
    sent = [s.url for s in h.origin.sent if s.method == "GET"]
    assert sent == ["http://origin.test/v1/CATALOG/Item"] * 2  # forwarded as sent


def test_the_admin_api_purges_one_urls_stored_answer() -> None:
    h = harness(
        GETS_ONLY, WRITES, upstream=FakeOrigin(respond=answering()), admin_token="t0ken-t0ken"
    )
    auth = {"authorization": "Bearer t0ken-t0ken", "content-type": "application/json"}

    def purge(**members: str) -> Response:
        body = json.dumps(members).encode()
        return h.send(request("/_edge-limiter/api/cache/purge", "POST", headers=auth, body=body))

    h.send(request("/v1/catalog/a", query="x=1"))
    url = "https://api.test/v1/catalog//a?x=1"  # as a client may write it: made canonical
    purged = purge(url=url)
    assert purged.status == 200 and body_json(purged)["route"] == "catalog"
    assert body_json(purged)["found"] is True
    again = purge(url=url)
    assert body_json(again)["found"] is False  # nothing stood there any more
    assert h.send(request("/v1/catalog/a", query="x=1")).headers.get("x-cache") == "MISS"
    for bad in ({"url": "/v1/catalog/a"}, {"url": "https://api.test/v2/x"}, {}):
        refused = purge(**bad)
        assert refused.status == 400, bad
    # A probe's finding: key= on a route with one copy for everyone was ignored (the
    # operator believed one key's copy purged; everyone's was).
    keyed = purge(url=url, key="k1")
    assert keyed.status == 400 and "without key" in body_json(keyed)["detail"]


def test_a_slow_kv_does_not_hold_the_writes_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("edge_limiter.gateway.routes.INVALIDATE_WAIT_S", 0.01)
    h = harness(GETS_ONLY, WRITES, upstream=FakeOrigin(respond=answering()))
    h.send(request("/v1/catalog/a"))
    stored = set(h.kv.values)
    removing = h.kv.delete

    async def scenario() -> None:
        release = asyncio.Event()

        async def slow_delete(key: str) -> None:
            await release.wait()
            await removing(key)

        h.kv.delete = slow_delete  # type: ignore[method-assign]
        answer = await h.gateway.handle(request("/v1/catalog/a", "DELETE"), h.background)
        assert answer.status == 200 and set(h.kv.values) == stored  # answered, not yet removed
        release.set()
        await h.background.run()  # finished after the answer
        assert h.kv.deletes and not set(h.kv.values) & set(h.kv.deletes)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "media", ["text/event-stream", "Text/Event-Stream; charset=utf-8", "application/x-ndjson"]
)
def test_a_live_stream_is_passed_on_as_it_comes_never_held_or_stored(media: str) -> None:
    # Server-sent events may never end: reading them to measure or keep them would hold
    # the client forever.
    events = streaming(b"data: 1\n\n", headers=[("content-type", media)])
    h = cached(FakeOrigin(respond=events))
    for _ in range(2):
        answer = h.send(request("/v1/catalog/events"))
        assert answer.headers.get("x-cache") == "MISS"
    assert [body.held for body in events.bodies] == [0, 0]  # never read by the gateway
    assert h.kv.puts == []


# --- request collapsing ---------------------------------------------------------------------


def gated(
    headers: list[tuple[str, str]] | None = None, status: int = 200
) -> tuple[asyncio.Event, FakeOrigin]:
    """An origin that answers once the test opens the gate; each body says its number."""
    gate = asyncio.Event()
    count = 0

    async def respond(outgoing: OriginRequest) -> Response:
        nonlocal count
        count += 1
        number = count
        await gate.wait()
        return Response(status, Headers(list(headers or [])), f"answer {number}".encode())

    return gate, FakeOrigin(respond=respond)


async def together(h: Any, gate: asyncio.Event, *requests: Any) -> tuple[list[Any], int]:
    """The requests at once; how many reached the origin before its first answer."""
    before = len(h.origin.sent)
    running = asyncio.ensure_future(h.concurrently(*requests))
    for _ in range(20):  # let every request get as far as it can
        await asyncio.sleep(0)
    asked = len(h.origin.sent) - before
    gate.set()
    answers = await running
    await h.background.run()
    return answers, asked


def test_concurrent_misses_of_one_uri_ask_the_origin_once() -> None:
    gate, origin = gated([("content-type", "text/plain")])
    h = cached(origin)
    answers, asked = asyncio.run(together(h, gate, *[request("/v1/catalog/hot")] * 5))
    assert asked == 1 and len(h.origin.sent) == 1
    assert [a.status for a in answers] == [200] * 5
    assert {a.body for a in answers} == {b"answer 1"}
    assert sorted(a.headers.get("x-cache") for a in answers) == ["HIT"] * 4 + ["MISS"]
    assert answers[1].headers.get("content-type") == "text/plain"
    # Those that waited were answered as hits: no quota taken.
    assert "x-ratelimit-remaining" not in answers[1].headers
    assert answers[0].headers.get("x-ratelimit-remaining") == "4"


def test_the_waiting_get_the_answer_when_the_fetching_client_goes_away() -> None:
    # The client whose request fetches the answer goes away while the origin works on it
    # (the platform drops such a request, unless it holds it): the fetch and the store go
    # on, the waiting requests get the answer once the origin gives it, and the origin is
    # asked once.
    gate, origin = gated([("content-type", "text/plain")])
    h = cached(origin)
    hot = request("/v1/catalog/left")

    async def run() -> tuple[list[Any], int]:
        _, connection = h.connect(hot)
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(h.origin.sent) == 1
        connection.gone = True
        started = h.clock.now
        waiting = asyncio.ensure_future(h.concurrently(*[request("/v1/catalog/left")] * 5))
        for _ in range(20):
            await asyncio.sleep(0)
        gate.set()
        answers = await waiting
        waited = h.clock.now - started
        await connection.run()
        await h.background.run()
        return answers, waited

    answers, waited = asyncio.run(run())
    assert len(h.origin.sent) == 1
    assert [a.headers.get("x-cache") for a in answers] == ["HIT"] * 5
    assert {a.body for a in answers} == {b"answer 1"}
    assert waited < 2_000  # their polls' worth, not the route's timeout (30 s)
    # The answer was written to KV too, as for a client that stayed.
    h.clock.advance(LINGER_MS + 1)
    assert h.send(request("/v1/catalog/left")).headers.get("x-cache") == "HIT"
    assert len(h.origin.sent) == 1


def test_only_requests_for_the_same_answer_wait_for_it() -> None:
    gate, origin = gated([("vary", "accept-language")])
    h = cached(origin)
    english = request("/v1/catalog/v", headers={"accept-language": "en"})
    german = request("/v1/catalog/v", headers={"accept-language": "de"})
    other = request("/v1/catalog/other")
    answers, asked = asyncio.run(
        together(
            h,
            gate,
            english,
            request("/v1/catalog/v", headers={"accept-language": "en"}),
            german,
            other,
        )
    )
    # The other URI went at once; the German variant waited, then went on its own.
    assert asked == 2 and len(h.origin.sent) == 3
    assert [a.headers.get("x-cache") for a in answers] == ["MISS", "HIT", "MISS", "MISS"]
    assert answers[1].body == answers[0].body and answers[2].body != answers[0].body


def test_an_answer_not_to_keep_lets_the_waiting_go_and_then_none_wait() -> None:
    gate, origin = gated([("cache-control", "no-store")])
    h = cached(origin)
    answers, asked = asyncio.run(together(h, gate, *[request("/v1/catalog/n")] * 3))
    assert asked == 1 and len(h.origin.sent) == 3  # each then asked for its own answer
    assert [a.headers.get("x-cache") for a in answers] == ["MISS"] * 3
    # A key whose answer is not stored no longer makes requests wait for each other...
    gate2, origin2 = gated([("cache-control", "no-store")])
    h.origin.respond = origin2.respond
    h.clock.advance(50_000)
    _, asked = asyncio.run(together(h, gate2, *[request("/v1/catalog/n")] * 2))
    assert asked == 2
    # ...for a minute after the last such answer.
    h.clock.advance(60_000)
    gate3, origin3 = gated([("cache-control", "no-store")])
    h.origin.respond = origin3.respond
    _, asked = asyncio.run(together(h, gate3, *[request("/v1/catalog/n")] * 2))
    assert asked == 1


def test_with_count_hits_the_waiting_requests_are_counted() -> None:
    gate, origin = gated()
    h = cached(origin, count_hits=True)
    answers, _ = asyncio.run(together(h, gate, *[request("/v1/catalog/c")] * 7))
    assert len(h.origin.sent) == 1
    assert sorted(a.status for a in answers) == [200] * 5 + [429] * 2  # 5/minute


def test_a_purge_while_waiting_sends_the_waiting_request_to_the_origin() -> None:
    gate, origin = gated()
    h = cached(origin)
    cache = h.gateway.caches["catalog"]

    async def run() -> list[Any]:
        running = asyncio.ensure_future(
            h.concurrently(request("/v1/catalog/p"), request("/v1/catalog/p"))
        )
        for _ in range(20):
            await asyncio.sleep(0)
        h.clock.advance(1)
        await cache.purge("api.test", "/v1/catalog/p", "", None)
        gate.set()
        answers = await running
        await h.background.run()
        return answers

    answers = asyncio.run(run())
    assert len(h.origin.sent) == 2  # the purge came after the first was sent
    assert [a.headers.get("x-cache") for a in answers] == ["MISS", "MISS"]


def test_a_failing_origin_lets_the_waiting_go_on_their_own() -> None:
    gate, origin = gated(status=503)
    h = cached(origin)
    answers, asked = asyncio.run(together(h, gate, *[request("/v1/catalog/f")] * 2))
    assert asked == 1 and all(a.status == 503 for a in answers)
    assert len(h.origin.sent) >= 2


def test_a_client_that_skips_the_cache_never_waits_for_another_answer() -> None:
    gate, origin = gated()
    h = cached(origin, allow_client_no_cache=True)
    fresh = request("/v1/catalog/s", headers={"cache-control": "no-cache"})
    answers, asked = asyncio.run(together(h, gate, request("/v1/catalog/s"), fresh))
    assert asked == 2 and [a.headers.get("x-cache") for a in answers] == ["MISS", "MISS"]


def test_a_client_max_age_or_min_fresh_is_honoured_where_clients_may_skip_the_cache() -> None:
    fields = [("cache-control", "max-age=60")]
    for allowed in (True, False):
        h = cached(FakeOrigin(respond=answering(headers=fields)), allow_client_no_cache=allowed)
        h.send(request("/v1/catalog/a"))
        h.clock.advance(10_000)
        young = h.send(request("/v1/catalog/a", headers={"cache-control": "max-age=5"}))
        assert young.headers.get("x-cache") == ("MISS" if allowed else "HIT")
        h.clock.advance(40_000)  # the copy (stored again if it was a miss) has 10-20 s left
        ok = h.send(request("/v1/catalog/a", headers={"cache-control": "max-age=3600"}))
        assert ok.headers.get("x-cache") == "HIT"
        lasting = h.send(request("/v1/catalog/a", headers={"cache-control": "min-fresh=30"}))
        assert lasting.headers.get("x-cache") == ("MISS" if allowed else "HIT")


def test_a_head_waits_for_the_gets_answer() -> None:
    gate, origin = gated()
    h = cached(origin)
    answers, asked = asyncio.run(
        together(h, gate, request("/v1/catalog/h"), request("/v1/catalog/h", "HEAD"))
    )
    assert asked == 1 and len(h.origin.sent) == 1
    assert [a.headers.get("x-cache") for a in answers] == ["MISS", "HIT"]
    assert answers[1].body is None


def test_each_variant_is_fetched_once_however_many_wait() -> None:
    gate, origin = gated([("vary", "accept-language")])
    h = cached(origin)
    langs = ["en", "en", "de", "de", "de", "fr", "fr"]
    herd = [request("/v1/catalog/l", headers={"accept-language": lang}) for lang in langs]
    answers, asked = asyncio.run(together(h, gate, *herd))
    assert asked == 1  # the rest waited for the first answer to learn what it varies on
    sent = [dict(s.headers).get("accept-language") for s in h.origin.sent]
    assert sorted(sent) == ["de", "en", "fr"]
    by_lang: dict[str, set[bytes]] = {}
    for lang, answer in zip(langs, answers, strict=True):
        by_lang.setdefault(lang, set()).add(answer.body)
    assert all(len(bodies) == 1 for bodies in by_lang.values())
    # Once the manifest is known, a new variant's herd is collapsed from the start.
    gate2, origin2 = gated([("vary", "accept-language")])
    h.origin.respond = origin2.respond
    herd = [request("/v1/catalog/l", headers={"accept-language": "it"}) for _ in range(4)]
    _, asked = asyncio.run(together(h, gate2, *herd))
    assert asked == 1


def test_waiting_requests_take_the_stale_copy_when_the_origin_fails_the_fetch() -> None:
    stale_ok = cached(stale_if_error="10m")
    stale_ok.origin.respond = answering(headers=[("cache-control", "max-age=1")])
    stale_ok.send(request("/v1/catalog/s"))
    stale_ok.clock.advance(2_000)
    gate, failing = gated(status=503)
    stale_ok.origin.respond = failing.respond
    answers, asked = asyncio.run(together(stale_ok, gate, *[request("/v1/catalog/s")] * 4))
    # One fill, then the one fetch the herd waited for (a GET: tried three times).
    assert asked == 1 and len(stale_ok.origin.sent) == 4
    assert [a.headers.get("x-cache") for a in answers] == ["STALE"] * 4
    assert {a.body for a in answers} == {b"answer 1"}
    assert "x-ratelimit-remaining" not in answers[1].headers  # not the leader's fields


class DrippingBody:
    """A body whose parts come ``gap_ms`` apart on the test's clock."""

    def __init__(self, clock: Any, parts: int, gap_ms: int) -> None:
        self.clock, self.parts, self.gap_ms = clock, parts, gap_ms

    async def read(self) -> bytes:
        return await self.read_at_most(1 << 30) or b""

    async def read_at_most(self, limit: int, progress: Any = None) -> bytes | None:
        for _ in range(self.parts):
            if progress is not None:
                await progress()
            self.clock.advance(self.gap_ms)
            await asyncio.sleep(0)
        data = b"x" * self.parts
        return data if len(data) <= limit else None


def test_a_slow_body_within_its_idle_bound_is_waited_for() -> None:
    # The route's timeout (5 s here) bounds the wait for the status and fields; a body
    # then takes 8 s, a part every 400 ms: those waiting keep waiting while it comes.
    gate = asyncio.Event()
    h = harness({**CATALOG, "timeout": "5s"}, upstream=FakeOrigin())

    async def respond(outgoing: OriginRequest) -> Response:
        await gate.wait()
        return Response(200, Headers([("content-length", "20")]), DrippingBody(h.clock, 20, 400))

    h.origin.respond = respond
    answers, asked = asyncio.run(together(h, gate, *[request("/v1/catalog/d")] * 3))
    assert asked == 1 and len(h.origin.sent) == 1
    assert [a.headers.get("x-cache") for a in answers] == ["MISS", "HIT", "HIT"]


def test_a_write_meanwhile_sends_later_requests_to_the_origin_at_once() -> None:
    gate, origin = gated()
    h = harness(GETS_ONLY, WRITES, upstream=origin)
    cache = h.gateway.caches["catalog"]

    async def run() -> int:
        first = asyncio.ensure_future(h.concurrently(request("/v1/catalog/w")))
        for _ in range(5):
            await asyncio.sleep(0)
        h.clock.advance(1)
        await cache.purge("api.test", "/v1/catalog/w", "", None)
        later = asyncio.ensure_future(h.concurrently(request("/v1/catalog/w")))
        for _ in range(5):
            await asyncio.sleep(0)
        asked = len(h.origin.sent)  # the later one did not wait for the doomed fetch
        gate.set()
        await first
        await later
        await h.background.run()
        return asked

    assert asyncio.run(run()) == 2


def holding() -> Any:
    """A cache route whose answers are 1,000 bytes each, with quota to spare."""
    return harness(
        {**CATALOG, "limits": "100/minute"},
        upstream=FakeOrigin(respond=answering(body=b"x" * 1000)),
    )


def test_answers_held_in_memory_are_bounded_in_time_and_bytes() -> None:
    h = holding()
    cache = h.gateway.caches["catalog"]
    for n in range(5):
        h.send(request(f"/v1/catalog/m{n}"), flush=False)
    assert len(cache.collapsing.lingering) == 5 and cache.collapsing.lingering_bytes == 5000
    h.send(request("/v1/catalog/m0"), flush=False)  # held: a hit, no fetch
    assert len(h.origin.sent) == 5
    h.clock.advance(LINGER_MS + 1)
    h.send(request("/v1/catalog/other"))
    assert (
        list(cache.collapsing.lingering) and len(cache.collapsing.lingering) == 1
    )  # only the newest left
    assert cache.collapsing.lingering_bytes == 1000
    h.flush()


def test_the_oldest_held_answers_go_first_past_the_byte_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import edge_limiter.gateway.collapsing as stage

    monkeypatch.setattr(stage, "LINGER_MAX_BYTES", 2_500)
    h = holding()
    cache = h.gateway.caches["catalog"]
    for n in range(4):
        h.send(request(f"/v1/catalog/b{n}"), flush=False)
    assert len(cache.collapsing.lingering) == 2 and cache.collapsing.lingering_bytes == 2000
    # The newest are held (their KV writes not done yet), the oldest not.
    assert h.send(request("/v1/catalog/b3"), flush=False).headers.get("x-cache") == "HIT"
    assert h.send(request("/v1/catalog/b0"), flush=False).headers.get("x-cache") == "MISS"
    h.flush()


def test_a_request_released_by_a_write_stores_the_newer_answer() -> None:
    gate, origin = gated([("cache-control", "max-age=60")])
    h = harness(GETS_ONLY, WRITES, upstream=origin)
    cache = h.gateway.caches["catalog"]

    async def run() -> None:
        first = asyncio.ensure_future(h.concurrently(request("/v1/catalog/r")))
        for _ in range(3):
            await asyncio.sleep(0)
        waiting = asyncio.ensure_future(h.concurrently(request("/v1/catalog/r")))
        for _ in range(3):
            await asyncio.sleep(0)
        h.clock.advance(1)
        await cache.purge("api.test", "/v1/catalog/r", "", None)  # a write meanwhile
        for _ in range(10):
            await asyncio.sleep(0)
        gate.set()
        await first
        await waiting
        await h.background.run()

    asyncio.run(run())
    assert len(h.origin.sent) == 2  # the waiting one went on after the write...
    h.clock.advance(LINGER_MS + 1)
    after = h.send(request("/v1/catalog/r"))
    assert after.headers.get("x-cache") == "HIT"  # ...and its newer answer was kept
    assert len(h.origin.sent) == 2


def test_a_stale_copy_standing_in_answers_the_clients_validators() -> None:
    tagged = [("etag", '"s1"'), ("cache-control", "max-age=1")]
    h = cached(FakeOrigin(respond=answering(headers=tagged)), stale_if_error="10m")
    h.send(request("/v1/catalog/e"))
    h.clock.advance(2_000)
    h.origin.respond = answering(status=500)
    held = h.send(request("/v1/catalog/e", headers={"if-none-match": '"s1"'}))
    assert (held.status, held.headers.get("x-cache"), held.body) == (304, "STALE", None)
    other = h.send(request("/v1/catalog/e", headers={"if-none-match": '"s0"'}))
    assert (other.status, other.headers.get("x-cache")) == (200, "STALE")


def test_a_304_on_a_miss_keeps_the_origins_cors_decision() -> None:
    h = harness(
        {**CATALOG, "cache": {"ttl": "5m", "default_ttl": "5m"}},
        upstream=FakeOrigin(respond=answering(headers=TAGGED)),
        cors={"allow_origins": ["https://app.test"]},
    )
    page = {"origin": "https://app.test", "if-none-match": '"v1"'}
    miss = h.send(request("/v1/catalog/c304", headers=page))
    assert miss.status == 304 and miss.headers.get("x-cache") == "MISS"
    assert "access-control-allow-origin" not in miss.headers  # the origin allowed no page
    hit = h.send(request("/v1/catalog/c304", headers=page))
    assert (
        hit.status == 304 and hit.headers.get("access-control-allow-origin") == "https://app.test"
    )


def test_a_client_max_age_takes_no_stale_copy() -> None:
    h = cached(
        FakeOrigin(respond=answering(headers=[("cache-control", "max-age=1")])),
        allow_client_no_cache=True,
        stale_while_revalidate="30s",
    )
    h.send(request("/v1/catalog/u"))
    h.clock.advance(2_000)
    asked = h.send(request("/v1/catalog/u", headers={"cache-control": "max-age=100"}))
    assert asked.headers.get("x-cache") == "MISS" and len(h.origin.sent) == 2
    h.clock.advance(2_000)
    plain = h.send(request("/v1/catalog/u"))
    assert plain.headers.get("x-cache") == "UPDATING"


# --- RFC 9111: freshness from the origin, revalidation, the origin's stale windows -----

LAST_MODIFIED = "Wed, 01 Jan 2020 00:00:00 GMT"


class Validating:
    """An origin whose answer carries ``fields`` (an ETag, a Last-Modified), and that
    answers a conditional request matching it with a 304 carrying ``renewed``."""

    def __init__(
        self,
        fields: list[tuple[str, str]],
        renewed: list[tuple[str, str]] | None = None,
        status: int = 200,
    ) -> None:
        self.fields = fields
        self.renewed = renewed if renewed is not None else [("cache-control", "max-age=60")]
        self.status = status
        self.full = 0

    async def respond(self, request: OriginRequest) -> Response:
        etag = dict(self.fields).get("etag")
        modified = dict(self.fields).get("last-modified")
        asked_tag = request.headers.get("if-none-match")
        asked_since = request.headers.get("if-modified-since")
        if (etag and asked_tag == etag) or (not etag and modified and asked_since == modified):
            return Response(304, Headers(list(self.renewed)), None)
        self.full += 1
        return Response(self.status, Headers(list(self.fields)), f"full {self.full}".encode())


def rfc(origin: Validating, **cache: Any) -> Any:
    """A route cached as RFC 9111 has it: no default_ttl, the origin decides."""
    route = {**CATALOG, "limits": "100/minute", "cache": {"ttl": "1h", **cache}}
    return harness(route, upstream=FakeOrigin(respond=origin.respond))


@pytest.mark.parametrize(
    ("fields", "asked"),
    [
        ([("etag", '"v1"'), ("cache-control", "max-age=10")], ("if-none-match", '"v1"')),
        (
            [("last-modified", LAST_MODIFIED), ("cache-control", "max-age=10")],
            ("if-modified-since", LAST_MODIFIED),
        ),
    ],
)
def test_a_stale_copy_is_revalidated_and_a_304_renews_it(
    fields: list[tuple[str, str]], asked: tuple[str, str]
) -> None:
    origin = Validating(
        [*fields, ("x-test", "A")], [("cache-control", "max-age=60"), ("x-test", "B")]
    )
    h = rfc(origin)
    assert h.send(request("/v1/catalog/r")).headers.get("x-cache") == "MISS"
    h.clock.advance(11_000)
    renewed = h.send(request("/v1/catalog/r"))
    assert renewed.status == 200 and renewed.body == b"full 1"
    assert renewed.headers.get("x-cache") == "REVALIDATED"
    assert renewed.headers.get("x-test") == "B"  # the 304's fields replace the stored ones
    assert renewed.headers.get("x-ratelimit-remaining") == "98"  # a request to the origin
    conditional = h.origin.sent[-1]
    assert dict(conditional.headers).get(asked[0]) == asked[1]
    assert origin.full == 1 and len(h.origin.sent) == 2
    # Renewed for the 304's max-age: a hit, and the origin is not asked.
    h.clock.advance(59_000)
    again = h.send(request("/v1/catalog/r"))
    assert again.headers.get("x-cache") == "HIT" and again.headers.get("x-test") == "B"
    assert len(h.origin.sent) == 2


def test_a_client_holding_the_copy_gets_a_304_after_the_revalidation() -> None:
    h = rfc(Validating([("etag", '"v1"'), ("cache-control", "max-age=10")]))
    h.send(request("/v1/catalog/c"))
    h.clock.advance(11_000)
    answer = h.send(request("/v1/catalog/c", headers={"if-none-match": '"v1"'}))
    assert answer.status == 304 and answer.headers.get("x-cache") == "REVALIDATED"
    assert answer.body is None


def test_a_304_about_another_copy_is_not_served_the_request_goes_again_counted_once() -> None:
    origin = Validating([("etag", '"v1"'), ("cache-control", "max-age=10")], [("etag", '"v2"')])
    h = rfc(origin)
    h.send(request("/v1/catalog/o"))
    h.clock.advance(11_000)
    answer = h.send(request("/v1/catalog/o"))
    assert answer.status == 200 and answer.body == b"full 2"
    assert answer.headers.get("x-cache") == "MISS"
    assert answer.headers.get("x-ratelimit-remaining") == "98"
    assert len(h.origin.sent) == 3 and "if-none-match" not in dict(h.origin.sent[-1].headers)


def test_no_cache_answers_are_kept_and_revalidated_every_time() -> None:
    origin = Validating([("etag", '"n"'), ("cache-control", "no-cache")], [])
    h = rfc(origin)
    h.send(request("/v1/catalog/n"))
    for _ in range(3):
        answer = h.send(request("/v1/catalog/n"))
        assert answer.headers.get("x-cache") == "REVALIDATED" and answer.body == b"full 1"
    assert origin.full == 1 and len(h.origin.sent) == 4


def test_an_answer_without_freshness_or_validator_is_not_kept() -> None:
    h = rfc(Validating([("content-type", "text/plain")]))
    for _ in range(2):
        assert h.send(request("/v1/catalog/none")).headers.get("x-cache") == "MISS"
    assert len(h.origin.sent) == 2


def test_heuristic_freshness_only_for_heuristically_cacheable_statuses() -> None:
    # The Date is when the answer is made; Last-Modified ten days before it.
    fields = [("last-modified", LAST_MODIFIED)]
    ok = rfc(Validating(fields))
    ok.send(request("/v1/catalog/h"))
    assert ok.send(request("/v1/catalog/h")).headers.get("x-cache") == "HIT"
    failing = rfc(Validating(fields, status=503), statuses=[200, 503])
    failing.send(request("/v1/catalog/h"))
    assert failing.send(request("/v1/catalog/h")).headers.get("x-cache") == "MISS"


def test_the_origins_own_stale_if_error_is_honoured_with_no_window_on_the_route() -> None:
    state = {"up": True}

    async def respond(_: OriginRequest) -> Response:
        if state["up"]:
            fields = [("cache-control", "max-age=1, stale-if-error=60")]
            return Response(200, Headers(fields), b"kept")
        return Response(503, Headers(), b"down")

    h = harness({**CATALOG, "cache": {"ttl": "1h"}}, upstream=FakeOrigin(respond=respond))
    h.send(request("/v1/catalog/s"))
    state["up"] = False
    h.clock.advance(2_000)
    stale = h.send(request("/v1/catalog/s"))
    assert stale.status == 200 and stale.body == b"kept"
    assert stale.headers.get("x-cache") == "STALE"
    h.clock.advance(60_000)
    assert h.send(request("/v1/catalog/s")).status == 503


def test_must_revalidate_forbids_a_stale_copy_even_where_the_route_allows_one() -> None:
    state = {"up": True}

    async def respond(_: OriginRequest) -> Response:
        if state["up"]:
            return Response(200, Headers([("cache-control", "max-age=1, must-revalidate")]), b"x")
        return Response(503, Headers(), b"down")

    h = harness(
        {**CATALOG, "cache": {"ttl": "1h", "stale_if_error": "10m"}},
        upstream=FakeOrigin(respond=respond),
    )
    h.send(request("/v1/catalog/m"))
    state["up"] = False
    h.clock.advance(2_000)
    assert h.send(request("/v1/catalog/m")).status == 503


def test_a_stale_while_revalidate_refresh_is_conditional() -> None:
    origin = Validating(
        [("etag", '"w"'), ("cache-control", "max-age=10, stale-while-revalidate=60")],
        [("cache-control", "max-age=100")],
    )
    h = rfc(origin)
    h.send(request("/v1/catalog/w"))
    h.clock.advance(11_000)
    served = h.send(request("/v1/catalog/w"))
    assert served.headers.get("x-cache") == "UPDATING"
    h.flush()
    assert dict(h.origin.sent[-1].headers).get("if-none-match") == '"w"'
    assert origin.full == 1
    h.clock.advance(50_000)  # renewed for 100 s by the 304
    assert h.send(request("/v1/catalog/w")).headers.get("x-cache") == "HIT"


def test_concurrent_requests_for_a_stale_copy_revalidate_once() -> None:
    gate = asyncio.Event()
    origin = Validating([("etag", '"g"'), ("cache-control", "max-age=10")])

    async def respond(req: OriginRequest) -> Response:
        if req.headers.get("if-none-match"):
            await gate.wait()
        return await origin.respond(req)

    h = harness(
        {**CATALOG, "limits": "100/minute", "cache": {"ttl": "1h"}},
        upstream=FakeOrigin(respond=respond),
    )
    h.send(request("/v1/catalog/g"))
    h.clock.advance(11_000)
    stale = [request("/v1/catalog/g") for _ in range(5)]  # five clients' own requests
    answers, asked = asyncio.run(together(h, gate, *stale))
    assert asked == 1 and {a.body for a in answers} == {b"full 1"}
    assert sorted(a.headers.get("x-cache") for a in answers) == ["HIT"] * 4 + ["REVALIDATED"]
    conditional = [s for s in h.origin.sent if dict(s.headers).get("if-none-match")]
    assert len(conditional) == 1 and origin.full == 1


def test_a_clients_no_cache_renews_the_stored_copy_by_asking_the_origin() -> None:
    origin = Validating([("etag", '"r"'), ("cache-control", "max-age=600")])
    h = rfc(origin, allow_client_no_cache=True)
    h.send(request("/v1/catalog/reload"))
    reload = h.send(request("/v1/catalog/reload", headers={"cache-control": "no-cache"}))
    assert reload.headers.get("x-cache") == "REVALIDATED" and reload.body == b"full 1"
    assert dict(h.origin.sent[-1].headers).get("if-none-match") == '"r"'
    assert origin.full == 1 and len(h.origin.sent) == 2
