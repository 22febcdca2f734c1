"""Idempotency-Key end to end on the local runtime, against an origin that counts what it
receives (the demo origin's ``n``: its request number)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import pytest

from edge_limiter.tools.demo_origin import DemoOrigin
from edge_limiter.tools.local_gateway import LocalGateway
from tests.clients import in_flight

from .conftest import fresh_ip, leave_midway

pytestmark = pytest.mark.e2e


def post(
    gw: LocalGateway, path: str, key: str | None, ip: str, body: bytes = b'{"amount":10}', **kw: Any
) -> httpx.Response:
    headers = {"cf-connecting-ip": ip, **kw.pop("headers", {})}
    if key is not None:
        headers["idempotency-key"] = key
    return httpx.post(gw.url + path, headers=headers, content=body, timeout=30, **kw)


def hits_to(origin: DemoOrigin, path: str) -> int:
    return sum(1 for method, seen in origin.hits if method == "POST" and seen == path)


def test_100_concurrent_posts_with_one_key_reach_the_origin_once(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    key, ip = str(uuid.uuid4()), fresh_ip()
    path = f"/pay/{key[:8]}"

    async def pay(client: httpx.AsyncClient) -> httpx.Response:
        headers = {"cf-connecting-ip": ip, "idempotency-key": key}
        return await client.post(path, headers=headers, content=b"pay 10")

    async def burst() -> list[httpx.Response]:
        return await in_flight([pay] * 100, base_url=gateway.url)

    answers = asyncio.run(burst())
    assert hits_to(origin, path) == 1
    winners = [
        a for a in answers if a.status_code == 200 and "idempotent-replayed" not in a.headers
    ]
    assert len(winners) == 1
    first = winners[0].json()
    for answer in answers:
        assert answer.status_code in (200, 409), answer.text
        if answer.status_code == 409:
            assert int(answer.headers["retry-after"]) >= 1
            assert answer.json()["code"] == "idempotency_in_flight"
        else:
            assert answer.json() == first  # the replay is the identical stored response
    for _ in range(3):
        retry = post(gateway, path, key, ip, b"pay 10")
        assert retry.status_code == 200 and retry.json() == first
        assert retry.headers["idempotent-replayed"] == "true"
    assert hits_to(origin, path) == 1


def test_a_holder_whose_client_goes_away_still_records_the_answer(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # The client holding the claim goes away while the origin works on its request (1 s):
    # the request goes on without it (waitUntil) and records the answer, so the retry is
    # replayed it. Before, the platform dropped the request: the retry got 409 for the
    # lock's whole time (60 s on this route), and then went to the origin a second time.
    key, ip = str(uuid.uuid4()), fresh_ip()
    path = f"/pay/{key[:8]}"
    fields = {"cf-connecting-ip": ip, "idempotency-key": key, "x-demo-delay": "1000"}
    leave_midway(gateway.url, path, method="POST", headers=fields, body=b"pay 10", after=0.3)
    deadline = time.monotonic() + 10
    while (retry := post(gateway, path, key, ip, b"pay 10")).status_code == 409:
        assert time.monotonic() < deadline, retry.text
        time.sleep(0.2)
    assert retry.status_code == 200 and retry.headers.get("idempotent-replayed") == "true"
    assert hits_to(origin, path) == 1


def test_422_400_and_identities_kept_apart(gateway: LocalGateway, origin: DemoOrigin) -> None:
    key, ip = str(uuid.uuid4()), fresh_ip()
    path = f"/pay/{key[:8]}"
    assert post(gateway, path, key, ip, b"one").status_code == 200
    mismatch = post(gateway, path, key, ip, b"two")
    assert mismatch.status_code == 422 and mismatch.json()["code"] == "idempotency_mismatch"
    missing = post(gateway, path, None, ip)
    assert missing.status_code == 400
    assert missing.json()["code"] == "idempotency_key_missing"
    assert missing.json()["header"] == "Idempotency-Key"
    for bad, code in [("", "empty"), ("x" * 300, "too_long")]:
        answer = post(gateway, path, bad, ip)
        assert answer.status_code == 400 and answer.json()["code"] == f"idempotency_key_{code}"
    # Another caller, same key value: its own record.
    other = post(gateway, path, key, fresh_ip(), b"two")
    assert other.status_code == 200 and "idempotent-replayed" not in other.headers
    assert hits_to(origin, path) == 2
    # The key sent twice (the runtime joins the lines): refused, not read as a new key.
    twice = httpx.post(
        gateway.url + path,
        headers=[("cf-connecting-ip", ip), ("idempotency-key", key), ("idempotency-key", key)],
        content=b"one",
        timeout=30,
    )
    assert twice.status_code == 400 and twice.json()["code"] == "idempotency_key_ambiguous"
    # Another caller at the same address (one scope) with other credentials: a 422, never
    # the first caller's answer.
    bearer = post(gateway, path, key, ip, b"one", headers={"authorization": "Bearer b"})
    assert bearer.status_code == 422 and bearer.json()["code"] == "idempotency_mismatch"
    assert hits_to(origin, path) == 2


def test_a_record_is_one_callers_and_one_requests(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    """Callers behind one address with another API key (a header the config keys on) or
    cookie, and the same query in another order, never get the first answer."""
    key, ip = str(uuid.uuid4()), fresh_ip()
    path = f"/pay/{key[:8]}"
    alice = {"x-api-key": "alice-key", "cookie": "sid=alice"}
    first = post(gateway, path + "?a_b=2&a.b=1", key, ip, b"one", headers=alice)
    assert first.status_code == 200
    n = first.json()["n"]
    for other in ({"x-api-key": "mallory-key"}, {"cookie": "sid=mallory"}):
        mallory = post(gateway, path + "?a_b=2&a.b=1", key, ip, b"one", headers={**alice, **other})
        assert mallory.status_code == 422, mallory.text
        assert mallory.json()["code"] == "idempotency_mismatch"
    # PHP reads a_b=1 from this one (the last of a.b and a_b wins): another request.
    reordered = post(gateway, path + "?a.b=1&a_b=2", key, ip, b"one", headers=alice)
    assert reordered.status_code == 422
    again = post(gateway, path + "?a_b=2&a.b=1", key, ip, b"one", headers=alice)
    assert again.headers["idempotent-replayed"] == "true" and again.json()["n"] == n
    assert hits_to(origin, path) == 1


def test_one_key_on_two_tenants_hosts_is_two_operations(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    key, ip = str(uuid.uuid4()), fresh_ip()
    path = f"/pay-tenant/{key[:8]}"
    a = post(gateway, path, key, ip, headers={"host": "a.tenant.test"})
    b = post(gateway, path, key, ip, headers={"host": "b.tenant.test"})
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    assert "idempotent-replayed" not in b.headers and a.json()["n"] != b.json()["n"]
    again = post(gateway, path, key, ip, headers={"host": "b.tenant.test"})
    assert again.headers["idempotent-replayed"] == "true" and again.json()["n"] == b.json()["n"]
    assert hits_to(origin, path) == 2


def test_a_record_expires_after_a_short_retention(gateway: LocalGateway) -> None:
    key, ip = str(uuid.uuid4()), fresh_ip()
    path = f"/pay-short/{key[:8]}"
    first = post(gateway, path, key, ip).json()["n"]
    assert post(gateway, path, key, ip).headers["idempotent-replayed"] == "true"
    # 2 s retention on workerd's clock, which a test cannot move: wait, with a deadline.
    deadline = time.monotonic() + 15
    while True:
        answer = post(gateway, path, key, ip)
        if "idempotent-replayed" not in answer.headers:
            break
        assert time.monotonic() < deadline, "the record never expired"
        time.sleep(0.25)
    assert answer.status_code == 200 and answer.json()["n"] != first


def test_a_rate_limited_request_keeps_no_claim(gateway: LocalGateway, origin: DemoOrigin) -> None:
    ip = fresh_ip()
    assert post(gateway, "/pay-limited/a", str(uuid.uuid4()), ip).status_code == 200
    key = str(uuid.uuid4())
    denied = post(gateway, "/pay-limited/b", key, ip)
    assert denied.status_code == 429
    time.sleep(int(denied.headers["retry-after"]))  # a real client honours Retry-After
    deadline = time.monotonic() + 10
    while (retry := post(gateway, "/pay-limited/b", key, ip)).status_code == 429:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert retry.status_code == 200 and "idempotent-replayed" not in retry.headers
    assert hits_to(origin, "/pay-limited/b") == 1


@pytest.mark.parametrize(
    ("path", "status", "forwards"),
    [
        # A timeout: the origin may still be carrying the first out, so the gateway's 504
        # is the record's and the retry is replayed it.
        ("/pay-timeout/slow/1000", 504, 1),
        # The origin's own 429 says it did not process it: the key is given back.
        ("/pay/status/429", 429, 2),
    ],
)
def test_a_failure_is_recorded_unless_the_origin_says_it_did_not_act(
    gateway: LocalGateway, origin: DemoOrigin, path: str, status: int, forwards: int
) -> None:
    key, ip = str(uuid.uuid4()), fresh_ip()
    since = hits_to(origin, path)
    assert post(gateway, path, key, ip).status_code == status
    second = post(gateway, path, key, ip)
    assert second.status_code == status
    assert ("idempotent-replayed" in second.headers) == (forwards == 1)
    assert hits_to(origin, path) - since == forwards


def test_a_stale_lock_is_taken_over_and_the_old_holders_late_result_refused(
    gateway: LocalGateway,
) -> None:
    """The first request is slow past its 1 s lock; a retry then takes the key over and is
    answered first; the first one's late result must not overwrite the retry's."""
    key, ip = str(uuid.uuid4()), fresh_ip()
    path = "/pay-takeover/order"

    async def race() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
            headers = {"cf-connecting-ip": ip, "idempotency-key": key}
            slow = {**headers, "x-demo-delay": "3000"}  # not part of the fingerprint
            old = asyncio.ensure_future(client.post(path, headers=slow, content=b"x"))
            await asyncio.sleep(1.5)  # past the 1 s lock: the next request takes the key over
            new = await client.post(path, headers=headers, content=b"x")
            return await old, new

    old, new = asyncio.run(race())
    assert old.status_code == 200 and new.status_code == 200
    assert old.json()["n"] < new.json()["n"]
    assert gateway.saw('"event":"idempotency_fenced"')
    replay = post(gateway, path, key, ip, b"x")
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json()["n"] == new.json()["n"]  # the new holder's result, not the old one's


def test_a_broken_record_store_follows_the_failure_policy(throwing_gateway: LocalGateway) -> None:
    # The "pay" route fails open: forwarded, and the response says why it was not protected.
    answer = post(throwing_gateway, "/pay/x", str(uuid.uuid4()), fresh_ip())
    assert answer.status_code == 200
    assert answer.headers["x-edgelimiter-reason"] in (
        "idempotency_unavailable",
        "store_unavailable",
    )


def test_request_bodies_above_max_request_bytes_get_413_and_are_not_forwarded(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    ip = fresh_ip()

    def chunked(size: int) -> Any:
        yield b"a" * (size - 1000)
        yield b"a" * 1000

    for body in (b"a" * 4097, chunked(6000)):
        path = f"/pay-small/{uuid.uuid4().hex[:8]}"
        refused = post(gateway, path, str(uuid.uuid4()), ip, body)  # type: ignore[arg-type]
        assert refused.status_code == 413, refused.text
        problem = refused.json()
        assert problem["code"] == "request_too_large" and problem["max_bytes"] == 4096
        assert hits_to(origin, path) == 0
    path = f"/pay-small/{uuid.uuid4().hex[:8]}"
    fits = post(gateway, path, str(uuid.uuid4()), ip, chunked(4096))  # type: ignore[arg-type]
    assert fits.status_code == 200 and fits.json()["body_bytes"] == 4096


@pytest.mark.parametrize("chunked", ["0", "1"])
def test_an_answer_too_large_to_keep_reaches_the_client_whole_and_replays_without_it(
    gateway: LocalGateway, origin: DemoOrigin, chunked: str
) -> None:
    key, ip = str(uuid.uuid4()), fresh_ip()
    path = f"/pay-small/{key[:8]}"
    query = {"pad": "300000", "chunked": chunked}
    first = post(gateway, path, key, ip, params=query)
    assert first.status_code == 200 and len(first.json()["pad"]) == 300_000
    replay = post(gateway, path, key, ip, params=query)
    assert replay.status_code == 200 and replay.content == b""
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.headers["idempotent-replayed-body"].startswith("omitted")
    assert hits_to(origin, path) == 1
