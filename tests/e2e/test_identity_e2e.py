"""Verified identity end to end: tokens minted with PyJWT for every algorithm, verified by
the Worker with WebCrypto on real local workerd; a JWKS server on loopback that rotates
its keys during the test; the attacks of issue 39, none of which gets another caller's
counter or a better tier, and none a 500."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from edge_limiter.core.identity.tokens import encode_segment
from edge_limiter.tools.demo_origin import DemoOrigin
from edge_limiter.tools.local_gateway import LocalGateway

from ..clients import in_flight
from ..core.identity_keys import ALGS, SECRET, signer
from .conftest import fresh_ip, track

pytestmark = pytest.mark.e2e

ISSUER = "https://auth.e2e.test/"


class KeyServer:
    """A JWKS endpoint on loopback: the keys it publishes now, and when it was asked."""

    def __init__(self, *algs: str) -> None:
        self.keys = [self.jwk(alg) for alg in algs]
        self.fetched: list[float] = []
        keys_server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                keys_server.fetched.append(time.monotonic())
                body = json.dumps({"keys": keys_server.keys}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("cache-control", "max-age=600")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def jwk(alg: str, kid: str | None = None) -> dict[str, Any]:
        return {**signer(alg).public_jwk, "kid": kid or f"{alg}-1", "alg": alg}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/jwks"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


#: The source's refetch_after: short, so a rotation is seen after a short real wait.
REFETCH_MS = 5_000


def config(origin: str, jwks_url: str) -> dict[str, Any]:
    def route(name: str, limits: str, **fields: Any) -> dict[str, Any]:
        return {
            "name": name,
            "match": {"path": f"/{name}/*"},
            "limits": limits,
            "algorithm": "sliding_log",
            "auth": "main",
            "key": "jwt:sub",
            **fields,
        }

    return {
        "origin": origin,
        "auth": {
            "main": {
                "issuer": ISSUER,
                "audiences": ["api"],
                "algorithms": list(ALGS),
                "jwks_url": jwks_url,
                "secret": "$JWT_SECRET",
                # A rotation is picked up this long after the last fetch at the latest.
                "refetch_after": f"{REFETCH_MS // 1000}s",
            },
        },
        "tiers": {
            "by": "jwt:plan",
            "default": "free",
            "anonymous": "anon",
            "plans": {"anon": "1/hour", "free": "2/hour", "pro": "4/hour", "internal": "exempt"},
        },
        "routes": [
            route("me", "3/hour"),
            route("plans", "3/hour", tiers=True),
            route("anon", "3/hour", tiers=True, on_invalid="anonymous"),
        ],
    }


@pytest.fixture(scope="module")
def keys() -> Iterator[KeyServer]:
    server = KeyServer("RS256", "PS256", "ES256", "ES384", "EdDSA")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def identity_gateway(
    worker_dir: Path, origin: DemoOrigin, keys: KeyServer
) -> Iterator[LocalGateway]:
    env = {"EDGE_LIMITER": config(origin.url, keys.url), "JWT_SECRET": SECRET}
    gw = track(LocalGateway(worker_dir, env).start())
    try:
        yield gw
    finally:
        gw.stop()


def mint(alg: str = "RS256", kid: str | None = None, **claims: Any) -> str:
    body = {"iss": ISSUER, "aud": "api", "exp": int(time.time()) + 600, **claims}
    return signer(alg).token(body, kid=kid or f"{alg}-1")


def call(gw: LocalGateway, path: str, token: str | None, ip: str | None = None) -> httpx.Response:
    headers = {"cf-connecting-ip": ip or fresh_ip()}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return httpx.get(gw.url + path, headers=headers, timeout=30)


def sub() -> str:
    return f"user-{time.monotonic_ns()}"


@pytest.mark.parametrize("alg", ALGS)
def test_a_token_of_every_algorithm_is_verified_by_webcrypto(
    identity_gateway: LocalGateway, alg: str
) -> None:
    who = sub()
    answers = [call(identity_gateway, "/me/x", mint(alg, sub=who)) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [a.headers.get("x-ratelimit-remaining") for a in answers[:3]] == ["2", "1", "0"]
    # Another subject from the same address has a counter of its own.
    assert call(identity_gateway, "/me/x", mint(alg, sub=sub()), answers[0].request.headers[
        "cf-connecting-ip"]).status_code == 200  # fmt: skip


def test_the_tier_comes_from_the_verified_claim(identity_gateway: LocalGateway) -> None:
    pro = mint("ES256", sub=sub(), plan="pro")
    answers = [call(identity_gateway, "/plans/x", pro) for _ in range(5)]
    assert [a.status_code for a in answers] == [200] * 4 + [429]
    assert answers[0].headers["ratelimit-policy"] == '"pro";q=4;w=3600'
    internal = call(identity_gateway, "/plans/x", mint("EdDSA", sub=sub(), plan="internal"))
    assert internal.headers["x-edgelimiter-reason"] == "exempt"
    anonymous = [call(identity_gateway, "/anon/x", None, "198.18.0.9") for _ in range(2)]
    assert [a.status_code for a in anonymous] == [200, 429]
    assert anonymous[0].headers["ratelimit-policy"] == '"anon";q=1;w=3600'


def _hs256_with(key: bytes, claims: dict[str, Any], kid: str) -> str:
    signing_input = f"{encode_segment({'alg': 'HS256', 'kid': kid})}.{encode_segment(claims)}"
    mac = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def test_the_attacks_get_no_counter_no_tier_and_no_500(
    identity_gateway: LocalGateway, origin: DemoOrigin
) -> None:
    gw = identity_gateway
    victim = sub()
    now = int(time.time())
    good = {"iss": ISSUER, "aud": "api", "sub": victim, "exp": now + 600}
    real = mint("RS256", sub=victim, plan="free")
    head, _, signature = real.split(".")
    nested = json.dumps(good)[:-1] + ',"d":' + "[" * 10_000 + "]" * 10_000 + "}"
    attacks = {
        "alg none": f"{encode_segment({'alg': 'none'})}.{encode_segment(good)}.",
        "hs256 with the rsa public key": _hs256_with(
            signer("RS256").public_pem.encode(), good, "RS256-1"
        ),
        "other issuer": mint(sub=victim, iss="https://evil.test/"),
        "other audience": mint(sub=victim, aud="web"),
        "expired outside the leeway": mint(sub=victim, exp=now - 120),
        "unknown kid": mint(sub=victim, kid="not-published"),
        "forged plan": f"{head}.{encode_segment({**good, 'plan': 'internal'})}.{signature}",
        "nested payload": f"{encode_segment({'alg': 'RS256', 'kid': 'RS256-1'})}."
        + base64.urlsafe_b64encode(nested.encode()).rstrip(b"=").decode()
        + f".{signature}",
    }
    hits_before = len(origin.hits)
    for name, token in attacks.items():
        answer = call(gw, "/plans/x", token)
        assert answer.status_code == 401, name
        assert answer.headers["www-authenticate"] == 'Bearer error="invalid_token"', name
        assert answer.headers["content-type"] == "application/problem+json", name
    # A 10 MB token: refused (by the runtime's own header bound, or the gateway's).
    try:
        huge = call(gw, "/plans/x", "a" * 10_000_000)
        assert huge.status_code in (400, 401, 413, 431), huge.status_code
    except httpx.TransportError:
        pass  # the runtime closed the connection: no answer, and nothing forwarded
    assert len(origin.hits) == hits_before  # nothing reached the origin
    # Expired inside the leeway is still valid; the victim's counter is untouched.
    inside = call(gw, "/plans/x", mint(sub=victim, exp=now - 30))
    assert inside.status_code == 200 and inside.headers["x-ratelimit-remaining"] == "1"
    assert inside.headers["ratelimit-policy"] == '"free";q=2;w=3600'


def test_a_flood_of_bad_tokens_is_limited_by_address(identity_gateway: LocalGateway) -> None:
    ip = fresh_ip()
    codes = [call(identity_gateway, "/me/x", "not.a.token", ip).status_code for _ in range(4)]
    assert codes == [401, 401, 401, 429]
    assert call(identity_gateway, "/me/x", mint(sub=sub()), ip).status_code == 200


def test_rotation_and_a_thousand_unknown_kids_fetch_the_set_a_bounded_number_of_times(
    identity_gateway: LocalGateway, keys: KeyServer
) -> None:
    gw = identity_gateway
    keys.keys.append(KeyServer.jwk("ES256", "rot-2"))
    start = len(keys.fetched)
    first = time.monotonic()
    assert call(gw, "/me/x", mint(sub=sub())).status_code == 200
    made_up = [mint(kid=f"made-up-{n}", sub=sub()) for n in range(1000)]

    def one(token: str) -> Callable[[httpx.AsyncClient], Awaitable[int]]:
        async def send(client: httpx.AsyncClient) -> int:
            fields = {"cf-connecting-ip": "198.18.1.1", "authorization": f"Bearer {token}"}
            return (await client.get("/me/x", headers=fields)).status_code

        return send

    statuses = asyncio.run(in_flight([one(t) for t in made_up], 20, base_url=gw.url))
    assert set(statuses) <= {401, 429}, set(statuses)
    fetches = len(keys.fetched) - start
    # At most one fetch per interval (refetch_after) per source, whatever the kids.
    intervals = (time.monotonic() - first) * 1000 / REFETCH_MS
    assert fetches <= 1 + int(intervals) + 1, (fetches, intervals)
    # The provider rotates: the old key goes, a new one signs. Within refetch_after of the
    # last fetch, a token naming it waits; after it, the set is fetched again and it verifies.
    keys.keys = [KeyServer.jwk("EdDSA", "rot-3")]
    rotated = mint("EdDSA", kid="rot-3", sub=sub())
    deadline = time.monotonic() + REFETCH_MS / 1000 + 20
    status = call(gw, "/me/x", rotated).status_code
    while status != 200 and time.monotonic() < deadline:
        time.sleep(0.5)  # the runtime's real clock
        status = call(gw, "/me/x", rotated).status_code
    assert status == 200


# --- API keys: records in the API_KEYS namespace, set through the admin API ----------------

ADMIN_TOKEN = "identity-admin-token-0123456789abcdef"
#: How long an isolate remembers a record here ([tiers] api_key_ttl): short, so a change of
#: tier is seen to take effect in another isolate after a short real wait.
KEY_TTL_S = 3


def keys_config(origin: str) -> dict[str, Any]:
    def route(name: str, **fields: Any) -> dict[str, Any]:
        return {"name": name, "match": {"path": f"/{name}/*"}, "limits": "3/hour",
                "algorithm": "sliding_log", "tiers": True, "key": "apikey", **fields}  # fmt: skip

    return {
        "origin": origin,
        "tiers": {
            "by": "kv:API_KEYS",
            "default": "free",
            "anonymous": "anon",
            "api_key_ttl": f"{KEY_TTL_S}s",
            "plans": {"anon": "1/hour", "free": "2/hour", "pro": "4/hour", "internal": "exempt"},
        },
        "routes": [route("keyed"), route("open", on_invalid="anonymous")],
    }


@pytest.fixture(scope="module")
def keys_gateway(worker_dir: Path, origin: DemoOrigin) -> Iterator[LocalGateway]:
    # Two isolates sharing KV and the Durable Objects: a record is remembered in each.
    env = {"EDGE_LIMITER": keys_config(origin.url), "EDGE_LIMITER_ADMIN_TOKEN": ADMIN_TOKEN}
    gw = track(LocalGateway(worker_dir, env, replicas=2).start())
    try:
        yield gw
    finally:
        gw.stop()


def set_record(base: str, **record: Any) -> httpx.Response:
    answer = httpx.post(
        f"{base}/_edge-limiter/api/api-keys",
        json=record,
        headers={"authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer


def with_key(base: str, path: str, key: str | None, ip: str | None = None) -> httpx.Response:
    headers = {"cf-connecting-ip": ip or fresh_ip()}
    if key is not None:
        headers["x-api-key"] = key
    return httpx.get(base + path, headers=headers, timeout=30)


def test_api_keys_of_one_owner_share_the_counter_of_the_tier_their_record_names(
    keys_gateway: LocalGateway, origin: DemoOrigin
) -> None:
    base = keys_gateway.url
    owner = f"acme-{time.monotonic_ns()}"
    one, two = f"sk_one_{owner}", f"sk_two_{owner}"
    stored = set_record(base, key=one, tier="pro", owner=owner).json()
    assert stored["sha256"] == hashlib.sha256(one.encode()).hexdigest()
    set_record(base, key=two, tier="pro", owner=owner)
    # Each from its own address: the owner is counted, not the client.
    answers = [with_key(base, "/keyed/x", one if n % 2 else two) for n in range(5)]
    assert [a.status_code for a in answers] == [200] * 4 + [429]
    assert answers[0].headers["ratelimit-policy"] == '"pro";q=4;w=3600'
    # A key of another owner on the free tier has its own counter.
    other = f"sk_free_{owner}"
    set_record(base, key=other, tier="free")
    assert [with_key(base, "/keyed/x", other).status_code for _ in range(3)] == [200, 200, 429]


def test_an_unknown_key_gets_the_routes_answer(
    keys_gateway: LocalGateway, origin: DemoOrigin
) -> None:
    base = keys_gateway.url
    before = len(origin.hits)
    refused = with_key(base, "/keyed/x", f"sk_nobody_{time.monotonic_ns()}")
    assert refused.status_code == 401
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert with_key(base, "/keyed/x", None).status_code == 401
    assert len(origin.hits) == before  # nothing forwarded
    ip = fresh_ip()
    anonymous = [with_key(base, "/open/x", f"sk_made_up_{n}", ip) for n in range(2)]
    assert [a.status_code for a in anonymous] == [200, 429]  # one address, anon's 1/hour
    assert anonymous[0].headers["ratelimit-policy"] == '"anon";q=1;w=3600'


def test_a_change_of_tier_takes_effect_in_another_isolate_within_api_key_ttl(
    keys_gateway: LocalGateway,
) -> None:
    here, there = keys_gateway.url, keys_gateway.replica_urls[0]
    key = f"sk_change_{time.monotonic_ns()}"
    set_record(here, key=key, tier="free")
    assert with_key(there, "/keyed/x", key).headers["ratelimit-policy"] == '"free";q=2;w=3600'
    read_there = time.monotonic()  # the other isolate remembers "free" from here on
    set_record(here, key=key, tier="internal")
    # The isolate that made the change forgot its lookup: exempt at once.
    assert with_key(here, "/keyed/x", key).headers["x-edgelimiter-reason"] == "exempt"
    still = with_key(there, "/keyed/x", key)
    if time.monotonic() - read_there < KEY_TTL_S - 0.5:
        assert still.headers.get("x-edgelimiter-reason") is None  # remembered: still free
    # The real clock: the isolate's TTL cannot be injected on workerd (3 s here).
    time.sleep(max(0.0, read_there + KEY_TTL_S + 0.2 - time.monotonic()))
    assert with_key(there, "/keyed/x", key).headers["x-edgelimiter-reason"] == "exempt"
