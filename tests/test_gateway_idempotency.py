"""Idempotency-Key through the whole gateway on CPython: exactly-once forwarding, replays,
409 in flight, 422 on a different payload, fencing, expiry (fake store, KV, clock)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from edge_limiter.core.http.messages import Headers, Response
from edge_limiter.gateway import OriginRequest

from .fakes import (
    BrokenBody,
    FakeOrigin,
    StreamedBody,
    answering,
    body_json,
    cut_off,
    harness,
    request,
    streaming,
    timing_out,
    unreachable,
)

PAYMENTS: dict[str, Any] = {
    "name": "payments",
    "match": {"path": "/v1/payments", "methods": ["POST"]},
    "limits": "10/minute",
    "algorithm": "sliding_log",
    "idempotency": {"mode": "required"},
}


def paying(upstream: FakeOrigin | None = None, **settings: Any) -> Any:
    route = {**PAYMENTS, "idempotency": {**PAYMENTS["idempotency"], **settings}}
    return harness(route, upstream=upstream or FakeOrigin(respond=answering(201)))


def post(
    key: str | None = "k-1", body: bytes = b'{"amount":10}', ip: str = "198.51.100.7", **kw: Any
):  # type: ignore[no-untyped-def]
    headers = {"idempotency-key": key} if key is not None else {}
    headers.update(kw.pop("headers", {}))
    return request("/v1/payments", "POST", ip, headers=headers, body=body, **kw)


def test_a_retry_is_replayed_and_the_origin_sees_one_request() -> None:
    h = paying()
    first = h.send(post())
    assert first.status == 201 and first.body == b"answer 1"
    assert "idempotent-replayed" not in first.headers
    for _ in range(3):
        again = h.send(post())
        assert again.status == 201 and again.body == b"answer 1"
        assert again.headers.get("idempotent-replayed") == "true"
    assert len(h.origin.sent) == 1
    assert h.origin.sent[0].body == b'{"amount":10}'  # the body read for the fingerprint is sent


def test_replays_consume_no_quota() -> None:
    h = harness({**PAYMENTS, "limits": "1/minute"}, upstream=FakeOrigin(respond=answering(201)))
    assert h.send(post("a")).status == 201
    assert h.send(post("a")).headers.get("idempotent-replayed") == "true"
    assert h.send(post("b")).status == 429  # the quota was spent once, by the first request


def test_replays_at_the_edge_need_no_durable_object_call() -> None:
    h = paying()
    h.send(post())
    calls = len(h.records.calls)
    h.records.failing = True  # the KV copy answers alone
    replayed = h.send(post())
    assert replayed.headers.get("idempotent-replayed") == "true" and replayed.body == b"answer 1"
    assert len(h.records.calls) == calls  # not even a failed attempt


@pytest.mark.parametrize(
    ("key", "code"),
    [
        (None, "idempotency_key_missing"),
        ("", "idempotency_key_empty"),
        ("x" * 256, "idempotency_key_too_long"),
        ("caf\u00e9", "idempotency_key_not_printable"),
    ],
)
def test_a_missing_or_malformed_key_is_a_400_naming_the_header(key: str | None, code: str) -> None:
    h = paying()
    answer = h.send(post(key))
    assert answer.status == 400
    body = body_json(answer)
    assert body["code"] == code and body["header"] == "Idempotency-Key"
    assert h.origin.sent == []


def test_an_optional_key_may_be_left_out() -> None:
    h = paying(mode="optional")
    assert [h.send(post(None)).status for _ in range(2)] == [201, 201]
    assert len(h.origin.sent) == 2


def test_the_same_key_with_another_payload_is_a_422() -> None:
    h = paying()
    h.send(post(body=b'{"amount":10}'))
    answer = h.send(post(body=b'{"amount":99}'))
    assert answer.status == 422 and body_json(answer)["code"] == "idempotency_mismatch"
    assert len(h.origin.sent) == 1


def test_fingerprinted_headers_are_part_of_the_payload() -> None:
    h = paying(fingerprint_headers=["x-account"])
    h.send(post(headers={"x-account": "a"}))
    assert h.send(post(headers={"x-account": "b"})).status == 422
    assert h.send(post(headers={"x-account": "a", "x-trace": "t"})).status == 201
    # Content-Type always is: the same bytes as a form or as JSON are another request.
    form = {"content-type": "application/x-www-form-urlencoded"}
    assert h.send(post(headers={"x-account": "a", **form})).status == 422
    # ... as a media type: its spellings are one (RFC 9110 section 8.3.1).
    json_ = paying()
    json_.send(post(headers={"content-type": "application/json; charset=utf-8"}))
    same = {"content-type": 'Application/JSON ;Charset="UTF-8"'}
    assert json_.send(post(headers=same)).headers.get("idempotent-replayed") == "true"
    # A ";" inside a quoted value is part of it.
    quoted = paying()
    quoted.send(post(headers={"content-type": 'text/plain; foo="a;b"'}))
    assert quoted.send(post(headers={"content-type": 'text/plain; foo="a; b"'})).status == 422


def test_two_callers_with_one_key_value_never_meet() -> None:
    h = paying()
    assert h.send(post(ip="198.51.100.1")).body == b"answer 1"
    other = h.send(post(ip="198.51.100.2"))
    assert other.body == b"answer 2" and "idempotent-replayed" not in other.headers


def test_callers_sharing_a_rate_limit_key_never_get_each_others_answer() -> None:
    # One address (a NAT; or a missing key header): one scope. The credentials tell them
    # apart: the second caller's reuse of the value is a 422, never Alice's answer, and
    # the request is not forwarded twice.
    h = paying()
    alice = {"authorization": "Bearer alice"}
    assert h.send(post(headers=alice)).body == b"answer 1"
    bob = h.send(post(headers={"authorization": "Bearer bob"}))
    assert bob.status == 422 and body_json(bob)["code"] == "idempotency_mismatch"
    assert "credentials" in body_json(bob)["detail"]
    anonymous = h.send(post())
    assert anonymous.status == 422
    again = h.send(post(headers=alice))
    assert again.body == b"answer 1" and again.headers.get("idempotent-replayed") == "true"
    # The scheme's name in another case is the same credentials (RFC 9110).
    spelled = h.send(post(headers={"authorization": "bearer  alice "}))
    assert spelled.headers.get("idempotent-replayed") == "true"
    assert len(h.origin.sent) == 1


def test_every_field_that_can_name_the_caller_keeps_callers_apart() -> None:
    # One address for all (a NAT): Alice's answer, Set-Cookie and all, is never replayed
    # to a caller whose cookie, proxy credentials or API key (a header some route keys
    # on) differ; each gets a 422 and the origin ran once.
    keyed = {
        "name": "keyed",
        "match": {"path": "/v1/keyed"},
        "limits": "10/minute",
        "key": "header:x-api-key",
    }
    receipt = answering(201, [("set-cookie", "session=alice")], b"alice's receipt")
    h = harness(PAYMENTS, keyed, upstream=FakeOrigin(respond=receipt))
    alice = {"x-api-key": "alice-key", "cookie": "sid=a", "proxy-authorization": "Basic YTpi"}
    first = h.send(post(headers=alice))
    assert first.status == 201
    for field, value in (
        ("x-api-key", "mallory-key"),
        ("cookie", "sid=m"),
        ("proxy-authorization", "Basic bTpi"),
    ):
        mallory = h.send(post(headers={**alice, field: value}))
        assert mallory.status == 422, field
        assert "set-cookie" not in mallory.headers and b"receipt" not in (mallory.body or b"")
        without = {name: v for name, v in alice.items() if name != field}
        assert h.send(post(headers=without)).status == 422, field
    replayed = h.send(post(headers=alice))
    assert replayed.headers.get("idempotent-replayed") == "true"
    assert replayed.headers.get("set-cookie") == "session=alice"
    assert len(h.origin.sent) == 1


def test_a_header_the_operator_names_keeps_callers_apart() -> None:
    h = paying(fingerprint_headers=["x-auth-token"])
    assert h.send(post(headers={"x-auth-token": "alice"})).status == 201
    assert h.send(post(headers={"x-auth-token": "mallory"})).status == 422
    assert len(h.origin.sent) == 1


@pytest.mark.parametrize(
    ("top", "match_host", "apart"),
    [
        ({"forwarded_host": True}, None, True),
        ({}, "*.example.test", True),
        ({}, None, False),
    ],
)
def test_records_are_kept_per_host_where_the_origin_tells_hosts_apart(
    top: dict[str, Any], match_host: str | None, apart: bool
) -> None:
    route = dict(PAYMENTS)
    if match_host is not None:
        route["match"] = {**PAYMENTS["match"], "host": match_host}
    h = harness(route, upstream=FakeOrigin(respond=answering(201)), **top)
    a = h.send(post(host="tenant-a.example.test"))
    b = h.send(post(host="tenant-b.example.test"))
    assert a.status == b.status == 201
    if apart:
        # Two tenants' writes: each runs, and each retry is replayed its own answer.
        assert (a.body, b.body) == (b"answer 1", b"answer 2")
        assert "idempotent-replayed" not in b.headers
        again = h.send(post(host="tenant-b.example.test"))
        assert again.body == b"answer 2" and again.headers.get("idempotent-replayed") == "true"
        assert len(h.origin.sent) == 2
    else:
        # The origin gets the same request from either name: one operation.
        assert b.body == b"answer 1" and b.headers.get("idempotent-replayed") == "true"
        assert len(h.origin.sent) == 1


class Gate:
    """An origin that holds every request until released."""

    def __init__(self) -> None:
        self.released = asyncio.Event()
        self.count = 0

    async def respond(self, _: OriginRequest) -> Response:
        self.count += 1
        number = self.count
        await self.released.wait()
        return Response(201, Headers(), f"answer {number}".encode())


def test_a_duplicate_while_the_first_is_in_flight_gets_409_with_retry_after() -> None:
    gate = Gate()
    h = paying(FakeOrigin(respond=gate.respond), lock_timeout="45s")

    async def scenario() -> list[Response]:
        first = asyncio.ensure_future(h.gateway.handle(post(), h.background))
        await asyncio.sleep(0)  # the first holds the claim and waits at the origin
        while gate.count == 0:
            await asyncio.sleep(0)
        duplicate = await h.gateway.handle(post(), h.background)
        gate.released.set()
        return [await first, duplicate]

    first, duplicate = asyncio.run(scenario())
    h.flush()
    assert first.status == 201
    assert duplicate.status == 409
    # The first is done at the origins within the route's timeout (30 s by default) and
    # stored a moment after: sooner than its 45 s lock ends.
    assert duplicate.headers.get("retry-after") == "31"
    assert body_json(duplicate)["code"] == "idempotency_in_flight"
    assert len(h.origin.sent) == 1


def test_many_concurrent_duplicates_reach_the_origin_once() -> None:
    gate = Gate()
    h = paying(FakeOrigin(respond=gate.respond))

    async def scenario() -> list[Response]:
        tasks = [asyncio.ensure_future(h.gateway.handle(post(), h.background)) for _ in range(50)]
        while gate.count == 0:
            await asyncio.sleep(0)
        for _ in range(100):
            await asyncio.sleep(0)
        gate.released.set()
        return list(await asyncio.gather(*tasks))

    answers = asyncio.run(scenario())
    assert gate.count == 1
    assert sorted({a.status for a in answers}) == [201, 409]
    assert sum(a.status == 201 for a in answers) == 1
    h.flush()
    assert h.send(post()).body == b"answer 1"


def test_a_holder_whose_client_goes_away_completes_the_record() -> None:
    # The client holding the claim goes away while the origin works on its request (the
    # platform drops such a request, unless it holds it): the answer is still recorded,
    # so the retry is replayed it at once (before: 409 for the lock's whole time, then
    # forwarded a second time although the origin had acted).
    gate = Gate()
    h = paying(FakeOrigin(respond=gate.respond))

    async def scenario() -> Response:
        _, connection = h.connect(post())
        while gate.count == 0:
            await asyncio.sleep(0)
        connection.gone = True
        gate.released.set()
        for _ in range(20):  # the origin's answer arrives
            await asyncio.sleep(0)
        await connection.run()
        return await h.gateway.handle(post(), h.background)

    retry = asyncio.run(scenario())
    assert retry.status == 201 and retry.headers.get("idempotent-replayed") == "true"
    assert gate.count == 1 and len(h.origin.sent) == 1


def test_a_rate_limited_request_keeps_no_claim() -> None:
    h = harness({**PAYMENTS, "limits": "1/minute"}, upstream=FakeOrigin(respond=answering(201)))
    assert h.send(post("first")).status == 201
    denied = h.send(post("second"))
    assert denied.status == 429
    h.clock.advance(60_000)
    retried = h.send(post("second"))
    assert retried.status == 201 and "idempotent-replayed" not in retried.headers


@pytest.mark.parametrize("failure", ["unreachable", "timeout", "interim"])
def test_an_attempt_that_got_no_answer_is_recorded_never_sent_again(failure: str) -> None:
    # The origin may have acted (a reset after the whole request, a timeout while it
    # works, an Early Hints before its answer): the gateway's failure is the record's.
    respond = {
        "unreachable": unreachable,
        "timeout": timing_out,
        "interim": answering(103, body=b""),
    }[failure]
    upstream = FakeOrigin(respond=respond)
    h = paying(upstream)
    first = h.send(post())
    assert first.status in (502, 504)
    assert len(upstream.sent) == 1
    upstream.respond = answering(201)
    retried = h.send(post())
    assert retried.status == first.status and retried.headers.get("idempotent-replayed") == "true"
    assert len(upstream.sent) == 1
    # store_5xx = false: such a failure gives the key back (at-least-once, asked for).
    released = paying(FakeOrigin(respond=respond), store_5xx=False)
    assert released.send(post()).status in (502, 504)
    released.origin.respond = answering(201)
    assert released.send(post()).status == 201 and len(released.origin.sent) == 2


def test_a_5xx_is_stored_but_an_answer_saying_not_processed_is_released() -> None:
    upstream = FakeOrigin(respond=answering(503))
    h = paying(upstream)
    assert [h.send(post()).status for _ in range(2)] == [503, 503]
    assert len(upstream.sent) == 6  # released each time: each request tried 3 times
    stored = paying(FakeOrigin(respond=answering(500)))
    assert stored.send(post()).status == 500
    replay = stored.send(post())
    assert replay.status == 500 and replay.headers.get("idempotent-replayed") == "true"
    released = paying(FakeOrigin(respond=answering(500)), store_5xx=False)
    assert [released.send(post()).status for _ in range(2)] == [500, 500]
    assert len(released.origin.sent) == 2


def test_the_origins_429_releases_the_key_so_the_retry_goes_through() -> None:
    # The origin's own rate limit: nothing was done, and the retry is what it asks for.
    upstream = FakeOrigin(respond=answering(429, [("retry-after", "1")]))
    h = paying(upstream)
    assert h.send(post()).status == 429
    assert len(upstream.sent) == 1  # the origin's answer to this client: not retried
    upstream.respond = answering(201)
    retried = h.send(post())
    assert retried.status == 201 and "idempotent-replayed" not in retried.headers
    assert h.send(post()).headers.get("idempotent-replayed") == "true"


def test_a_stale_lock_is_taken_over_and_the_old_holders_late_result_is_refused() -> None:
    gates = [asyncio.Event(), asyncio.Event()]
    numbers = iter(range(1, 10))

    async def respond(_: OriginRequest) -> Response:
        number = next(numbers)
        await gates[number - 1].wait()
        return Response(201, Headers(), f"answer {number}".encode())

    h = paying(FakeOrigin(respond=respond), lock_timeout="2s")
    h.kv.failing = True  # keep replays on the Durable Object path

    async def scenario() -> tuple[Response, Response]:
        old = asyncio.ensure_future(h.gateway.handle(post(), h.background))
        while not h.origin.sent:
            await asyncio.sleep(0)
        h.clock.advance(2_500)  # the old holder's lock has run out
        new = asyncio.ensure_future(h.gateway.handle(post(), h.background))
        while len(h.origin.sent) < 2:
            await asyncio.sleep(0)
        gates[1].set()
        new_answer = await new
        gates[0].set()
        return await old, new_answer

    old, new = asyncio.run(scenario())
    h.flush()
    assert (old.body, new.body) == (b"answer 1", b"answer 2")
    assert h.events("idempotency_fenced")
    replay = h.send(post())
    assert replay.body == b"answer 2" and replay.headers.get("idempotent-replayed") == "true"


def test_records_expire_after_the_retention() -> None:
    h = paying(retention="2s")
    h.send(post())
    h.clock.advance(1_999)
    assert h.send(post()).headers.get("idempotent-replayed") == "true"
    h.clock.advance(1)
    fresh = h.send(post())
    assert fresh.body == b"answer 2" and "idempotent-replayed" not in fresh.headers


def test_the_edge_copy_is_trusted_only_for_the_same_fingerprint() -> None:
    h = paying()
    h.send(post(body=b"one"))
    assert h.send(post(body=b"two")).status == 422  # the Durable Object decides


def test_a_body_too_large_to_keep_is_replayed_without_it() -> None:
    h = paying(FakeOrigin(respond=answering(201, body=b"x" * 4096)), max_bytes=1024)
    assert h.send(post()).body == b"x" * 4096
    replay = h.send(post())
    assert replay.status == 201 and replay.body is None
    assert (replay.headers.get("idempotent-replayed-body") or "").startswith("omitted")


def test_a_streamed_body_too_large_to_keep_reaches_the_client_whole_and_unbuffered() -> None:
    origin = streaming(b"y" * 4096, status=201)
    h = paying(FakeOrigin(respond=origin), max_bytes=1024)
    first = h.send(post())
    # The gateway measured it without reading it whole: the client gets the stream.
    assert first.status == 201 and first.body is origin.bodies[0]
    assert not origin.bodies[0].whole and origin.bodies[0].held <= 1025
    replay = h.send(post())
    assert replay.status == 201 and replay.body is None
    assert (replay.headers.get("idempotent-replayed-body") or "").startswith("omitted")
    assert len(h.origin.sent) == 1


def test_a_streamed_body_small_enough_is_kept_and_replayed() -> None:
    h = paying(FakeOrigin(respond=streaming(b"z" * 1000, status=201)), max_bytes=1024)
    assert h.send(post()).body == b"z" * 1000
    replay = h.send(post())
    assert replay.body == b"z" * 1000 and replay.headers.get("idempotent-replayed") == "true"


@pytest.mark.parametrize("streamed", [False, True])
def test_a_request_body_over_max_request_bytes_is_refused_with_413(streamed: bool) -> None:
    h = paying(max_request_bytes=1000)
    # Typed, so it is not read as a form for a _method first (Rack reads an untyped one so).
    big = post(body=b"a" * 1001, headers={"content-type": "application/octet-stream"})
    if streamed:  # chunked: no length to go by, measured as it is read
        big.body = StreamedBody(b"a" * 1001)
    answer = h.send(big)
    assert answer.status == 413
    problem = body_json(answer)
    assert problem["code"] == "request_too_large" and problem["max_bytes"] == 1000
    assert "max_request_bytes" in problem["detail"] and problem["route"] == "payments"
    # Not forwarded, no key claimed: the same key works with a body that fits.
    assert h.origin.sent == [] and h.records.calls == []
    if streamed:
        assert isinstance(big.body, StreamedBody) and not big.body.whole
    assert h.send(post(body=b"a" * 1000)).status == 201
    assert h.origin.sent[0].body == b"a" * 1000


def test_rate_limit_state_is_not_replayed_to_the_retry() -> None:
    h = paying()
    h.send(post())
    replay = h.send(post())
    assert "x-ratelimit-remaining" not in replay.headers


def test_an_unreachable_record_store_follows_the_failure_policy() -> None:
    closed = harness(
        {**PAYMENTS, "on_store_error": "closed"}, upstream=FakeOrigin(respond=answering(201))
    )
    closed.records.failing = True
    answer = closed.send(post())
    assert answer.status == 503 and body_json(answer)["code"] == "idempotency_unavailable"
    assert closed.origin.sent == []
    opened = paying()
    opened.records.failing = True
    answer = opened.send(post())
    assert answer.status == 201
    assert answer.headers.get("x-edgelimiter-reason") == "idempotency_unavailable"


def test_other_methods_pass_through() -> None:
    h = harness(
        {**PAYMENTS, "match": {"path": "/v1/payments"}}, upstream=FakeOrigin(respond=answering())
    )
    assert h.send(request("/v1/payments", "GET")).status == 200
    assert h.records.calls == []


def test_the_edge_record_holds_no_raw_key() -> None:
    h = paying()
    h.send(post("secret-key-value"))
    assert all("secret-key-value" not in key for key, _ in h.kv.puts)
    ((key, ttl),) = h.kv.puts
    assert ttl == 86_400
    data = json.loads(h.kv.values[key][0])
    assert set(data) == {"fp", "exp", "response"}


def test_an_origin_body_cut_off_is_a_502_and_never_forwarded_again() -> None:
    h = paying(FakeOrigin(respond=cut_off(201)), lock_timeout="60s")
    first = h.send(post())
    assert first.status == 502
    assert body_json(first)["code"] == "origin_body_broken"
    assert first.headers.get("x-ratelimit-remaining") is not None  # it was counted
    # The origin acted: a retry is never forwarded again, even after the lock's end; it
    # gets the status and fields the origin answered with, its body said to be omitted.
    for wait in (0, 61_000, 3_600_000):
        h.clock.advance(wait)
        retry = h.send(post())
        assert retry.status == 201 and retry.headers.get("idempotent-replayed") == "true"
        assert "cut off" in (retry.headers.get("idempotent-replayed-body") or "")
    assert len(h.origin.sent) == 1


def test_a_request_body_that_cannot_be_read_is_a_400_with_no_claim() -> None:
    h = paying()
    broken = post()
    broken.body = BrokenBody()
    answer = h.send(broken)
    assert answer.status == 400
    assert body_json(answer)["code"] == "request_body_broken"
    assert h.send(post()).status == 201  # nothing was claimed


def test_a_live_stream_is_recorded_without_its_body_and_never_held() -> None:
    events = streaming(b"data: 1\n\n", 201, [("content-type", "text/event-stream")])
    h = paying(FakeOrigin(respond=events))
    first = h.send(post())
    assert first.status == 201 and events.bodies[0].held == 0  # streamed, not read
    replay = h.send(post())
    assert replay.status == 201 and replay.headers.get("idempotent-replayed") == "true"
    assert "live stream" in (replay.headers.get("idempotent-replayed-body") or "")
    assert len(events.bodies) == 1


def test_a_protected_post_taken_as_another_method_stays_protected() -> None:
    # The client sent a POST with a key; an override makes it a PUT, which the route
    # does not list: it is still the request the client protected.
    route = {**PAYMENTS, "match": {"path": "/v1/payments"}}
    h = harness(route, upstream=FakeOrigin(respond=answering(201)))
    asking = {"x-http-method-override": "PUT"}
    answers = [h.send(post(headers=asking)) for _ in range(2)]
    assert [a.status for a in answers] == [201, 201]
    assert answers[1].headers.get("idempotent-replayed") == "true"
    assert [sent.method for sent in h.origin.sent] == ["PUT"]


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_a_protected_put_or_delete_is_sent_once_like_a_post(method: str) -> None:
    # Idempotent by HTTP's rules, but the route protects it: the client asked for once.
    route = {**PAYMENTS, "match": {"path": "/v1/payments"}}
    route["idempotency"] = {**PAYMENTS["idempotency"], "methods": ["POST", method]}
    h = harness(route, upstream=FakeOrigin(respond=answering(502)))
    sent = request("/v1/payments", method, headers={"idempotency-key": "k"}, body=b"{}")
    assert h.send(sent).status == 502
    assert len(h.origin.sent) == 1  # not retried (a 502: the origin may have acted)
    h.origin.respond = answering(503)
    other = request("/v1/payments", method, headers={"idempotency-key": "k2"}, body=b"{}")
    h.send(other)
    assert len(h.origin.sent) == 4  # a 503 says it did not act: retried


class Trickle:
    """An answer's body that comes in parts, ``every`` ms apart on the fake clock (the
    probe's origin: its head at once, then a byte every 1.5 s), letting other requests
    run between parts."""

    def __init__(self, clock: Any, parts: int, every_ms: int) -> None:
        self.clock = clock
        self.parts = parts
        self.every_ms = every_ms
        self.sent = 0
        self.answered = False
        self.stop = asyncio.Event()  # set: the isolate goes away mid-body

    async def read(self) -> bytes:
        return await self.read_at_most(1 << 30) or b""

    async def read_at_most(self, limit: int, progress: Any = None) -> bytes | None:
        data = b""
        while self.sent < self.parts:
            if progress is not None:
                await progress()
            self.clock.advance(self.every_ms)
            for _ in range(3):
                await asyncio.sleep(0)
            if self.stop.is_set():
                await asyncio.Event().wait()  # never resumes
            data += b"a"
            self.sent += 1
        return data if len(data) <= limit else None


def trickling(h: Any, parts: int, every_ms: int) -> Trickle:
    body = Trickle(h.clock, parts, every_ms)

    async def respond(_: OriginRequest) -> Response:
        if body.answered:  # a second run (what must not happen) answers at once
            return Response(200, Headers(), b"second run")
        body.answered = True
        return Response(200, Headers([("content-type", "text/plain")]), body)

    h.origin.respond = respond
    return body


def test_an_answer_whose_body_comes_at_once_costs_no_extra_call() -> None:
    h = harness({**PAYMENTS, "idempotency": {"mode": "required"}})
    trickling(h, parts=3, every_ms=10)  # every part well within SLOW_PART_MS
    assert h.send(post()).status == 200
    assert [op for _, op in h.records.calls] == ["claim", "complete"]


def test_a_slow_but_steady_answer_keeps_its_claim_until_it_is_stored() -> None:
    # A probe's finding: the origin sent its head at once and a byte every 1.5 s (12 s in
    # all, lock_timeout 6 s, timeout 3 s); the lock ran out mid-body, a retry took the key
    # over and the payment ran a second time. The claim is now extended between parts.
    h = harness(
        {**PAYMENTS, "timeout": "3s", "idempotency": {"mode": "required", "lock_timeout": "6s"}}
    )
    body = trickling(h, parts=8, every_ms=1_500)
    h.kv.failing = True  # every retry asks the Durable Object

    async def scenario() -> tuple[Response, list[int]]:
        first = asyncio.ensure_future(h.gateway.handle(post(), h.background))
        retries = []
        for _ in range(1_000):  # bounded: a test that fails must not hang
            if first.done():
                break
            await asyncio.sleep(0)
            if body.sent in (3, 6) and len(retries) < body.sent // 3:
                retries.append((await h.gateway.handle(post(), h.background)).status)
        return await asyncio.wait_for(first, 5), retries

    first, retries = asyncio.run(scenario())
    h.flush()
    assert first.status == 200 and first.body == b"a" * 8
    assert retries == [409, 409]
    assert len(h.origin.sent) == 1
    assert ("extend" in {op for _, op in h.records.calls}) is True
    replay = h.send(post())
    assert replay.body == b"a" * 8 and replay.headers.get("idempotent-replayed") == "true"
    assert len(h.origin.sent) == 1


@pytest.mark.parametrize("gone_after", [1, 4])
def test_an_isolate_gone_mid_body_leaves_the_answers_head_never_a_second_run(
    gone_after: int,
) -> None:
    # A probe's finding on workerd: gone 2-3 s into a slow body (before the lock needed
    # extending) the head was not in the record yet, and the retry after the lock ran
    # the payment again. The head is now recorded as soon as the body is slow in coming.
    h = harness(
        {**PAYMENTS, "timeout": "3s", "idempotency": {"mode": "required", "lock_timeout": "6s"}}
    )
    body = trickling(h, parts=8, every_ms=1_500)
    h.kv.failing = True

    async def scenario() -> None:
        first = asyncio.ensure_future(h.gateway.handle(post(), h.background))
        for _ in range(1_000):
            if body.sent >= gone_after:
                break
            await asyncio.sleep(0)
        body.stop.set()  # the holder never reads on, never completes
        for _ in range(10):
            await asyncio.sleep(0)
        first.cancel()

    asyncio.run(scenario())
    h.clock.advance(20_000)  # long past the extended lock
    retry = h.send(post())
    assert len(h.origin.sent) == 1  # acted on once: not forwarded again
    assert retry.status == 200 and retry.headers.get("idempotent-replayed") == "true"
    assert (retry.headers.get("idempotent-replayed-body") or "").startswith("omitted")
    assert retry.headers.get("content-type") == "text/plain"
