"""The identity stage on CPython, over fakes: tokens verified (with ``cryptography`` in
place of WebCrypto) before any counter is touched, keys and limits by the verified caller
and its tier, rejections counted under the client's address, the JWKS fetched a bounded
number of times, API keys looked up in KV."""

from __future__ import annotations

import json
from typing import Any

import pytest

from edge_limiter.core.http.messages import Headers, Response
from edge_limiter.core.identity.apikeys import (
    FOUND_TTL_MS,
    ApiKeyRecord,
    api_key_digest,
    encode_record,
)
from edge_limiter.core.identity.jwks import REFETCH_INTERVAL_MS
from edge_limiter.core.identity.tokens import encode_segment
from edge_limiter.gateway import OriginRequest
from edge_limiter.testing import ManualClock as FakeClock
from edge_limiter.testing import MemoryKV

from .core.identity_keys import SECRET, CryptographyVerifier, signer
from .fakes import FakeOrigin, Harness, body_json, harness, request

JWKS_URL = "https://auth.example.com/jwks"
ISSUER = "https://auth.example.com/"


class Issuer:
    """The JWKS endpoint behind the fake origin: the keys it publishes, and its calls."""

    def __init__(self, *algs: str) -> None:
        self.keys = [{**signer(alg).public_jwk, "kid": f"{alg}-1"} for alg in algs]
        self.calls = 0
        self.failing = False

    def origin(self) -> FakeOrigin:
        async def respond(request: OriginRequest) -> Response:
            if request.url == JWKS_URL:
                self.calls += 1
                if self.failing:
                    return Response(503, Headers(), b"down")
                body = json.dumps({"keys": self.keys}).encode()
                return Response(200, Headers([("cache-control", "max-age=600")]), body)
            echo = json.dumps({"url": request.url}).encode()
            return Response(200, Headers([("content-type", "application/json")]), echo)

        return FakeOrigin(respond=respond)


def token(alg: str = "RS256", kid: str | None = None, **claims: Any) -> str:
    body = {"iss": ISSUER, "aud": "api", "exp": 2_000_000_000, "sub": "u1", **claims}
    return signer(alg).token(body, kid=kid or f"{alg}-1")


def bearer(text: str, ip: str = "198.51.100.7", path: str = "/v1/x") -> Any:
    return request(path, ip=ip, headers={"authorization": f"Bearer {text}"})


AUTH = {
    "main": {
        "issuer": ISSUER,
        "audiences": ["api"],
        "algorithms": ["RS256", "ES256", "EdDSA", "HS256"],
        "jwks_url": JWKS_URL,
        "secret": "$JWT_SECRET",
    }
}
TIERS = {
    "by": "jwt:plan",
    "default": "free",
    "anonymous": "anon",
    "plans": {
        "anon": "1/minute",
        "free": "2/minute",
        "pro": "4/minute",
        "internal": "exempt",
    },
}


def route(**changes: Any) -> dict[str, Any]:
    return {
        "name": "api",
        "match": {"path": "/v1/*"},
        "limits": "3/minute",
        "algorithm": "sliding_log",
        "auth": "main",
        "key": "jwt:sub",
        **changes,
    }


def gateway(*routes: dict[str, Any], issuer: Issuer | None = None, **top: Any) -> Harness:
    issuer = issuer if issuer is not None else Issuer("RS256", "ES256", "EdDSA")
    top.setdefault("auth", AUTH)
    h = harness(
        *(routes or (route(),)),
        upstream=issuer.origin(),
        verifier=CryptographyVerifier(),
        secrets={"JWT_SECRET": SECRET},
        **top,
    )
    h.issuer = issuer  # type: ignore[attr-defined]
    return h


def statuses(h: Harness, *requests: Any) -> list[int]:
    return [h.send(r).status for r in requests]


def reached(h: Harness) -> int:
    return sum(1 for sent in h.origin.sent if sent.url != JWKS_URL)


@pytest.mark.parametrize("alg", ["RS256", "ES256", "EdDSA", "HS256"])
def test_each_caller_is_counted_under_its_verified_subject(alg: str) -> None:
    h = gateway()
    a, b = token(alg, sub="alice"), token(alg, sub="bob")
    assert statuses(h, *(bearer(a) for _ in range(4))) == [200, 200, 200, 429]
    # Same address, another verified subject: a counter of its own.
    assert statuses(h, bearer(b)) == [200]
    assert reached(h) == 4


def test_a_missing_or_invalid_token_is_401_counted_under_the_address_and_never_forwarded() -> None:
    h = gateway()
    forged = token(sub="alice").rsplit(".", 1)[0] + ".c2ln"
    answers = [h.send(r) for r in (request(), bearer("junk"), bearer(forged))]
    assert [a.status for a in answers] == [401, 401, 401]
    first = answers[0]
    assert first.headers.get("www-authenticate") == 'Bearer error="invalid_token"'
    assert first.headers.get("content-type") == "application/problem+json"
    assert body_json(first)["code"] == "invalid_token"
    assert first.headers.get("x-ratelimit-remaining") == "2"
    # The flood of bad tokens from this address is itself limited by the route's limits.
    assert statuses(h, bearer("junk")) == [429]
    # Another address is counted apart; a valid token is counted under its subject.
    assert statuses(h, bearer("junk", ip="203.0.113.5"), bearer(token())) == [401, 200]
    assert reached(h) == 1
    reasons = [event["reason"] for event in h.events("invalid_token")]
    assert reasons[:3] == ["missing", "malformed", "bad_signature"]


def test_the_tier_comes_from_the_verified_claim_and_names_the_policy() -> None:
    h = gateway(route(tiers=True), tiers=TIERS)
    pro = token(sub="p", plan="pro")
    answers = [h.send(bearer(pro)) for _ in range(5)]
    assert [a.status for a in answers] == [200] * 4 + [429]
    assert answers[0].headers.get("ratelimit-policy") == '"pro";q=4;w=60'
    # A plan the gateway does not know is the default tier, never a better one.
    odd = token(sub="o", plan="platinum")
    assert statuses(h, *(bearer(odd) for _ in range(3))) == [200, 200, 429]
    assert h.send(bearer(token(sub="i", plan="internal"))).headers.get("x-edgelimiter-reason") == (
        "exempt"
    )


def test_a_namespaced_claim_with_dots_in_its_name_keys_and_tiers_a_caller() -> None:
    # Auth0 puts custom claims under URL names: "https://example.com/plan" is one name.
    plan, org = '"https://example.com/plan"', '"https://example.com/org"'
    h = gateway(route(tiers=True, key=[f"jwt:{org}.id"]), tiers={**TIERS, "by": f"jwt:{plan}"})
    pro = {"https://example.com/plan": "pro", "https://example.com/org": {"id": "acme"}}
    first, second = token(sub="a", **pro), token(sub="b", **pro)
    answers = [h.send(bearer(first if n % 2 else second)) for n in range(5)]
    assert [a.status for a in answers] == [200] * 4 + [429]  # one org, pro's 4/minute
    assert answers[0].headers.get("ratelimit-policy") == '"pro";q=4;w=60'
    # The name read as a path of steps ("https://example", "com/plan") is not the claim.
    nested = token(sub="c", **{"https://example": {"com/plan": "internal"}},
                   **{"https://example.com/org": {"id": "other"}})  # fmt: skip
    assert h.send(bearer(nested)).headers.get("ratelimit-policy") == '"free";q=2;w=60'


def test_a_forged_plan_claim_gets_nothing() -> None:
    h = gateway(route(tiers=True), tiers=TIERS)
    real = token(sub="f", plan="free")
    head, _payload, signature = real.split(".")
    payload = encode_segment({"iss": ISSUER, "aud": "api", "exp": 2_000_000_000, "sub": "f",
                              "plan": "internal"})  # fmt: skip
    assert statuses(h, bearer(f"{head}.{payload}.{signature}")) == [401]
    assert reached(h) == 0


def test_an_anonymous_caller_goes_through_under_the_anonymous_tier_by_its_address() -> None:
    h = gateway(route(tiers=True, on_invalid="anonymous"), tiers=TIERS)
    first = h.send(request())
    assert first.status == 200 and first.headers.get("ratelimit-policy") == '"anon";q=1;w=60'
    assert statuses(h, request(), bearer("junk"), request(ip="203.0.113.5")) == [429, 429, 200]
    # A verified caller is not counted with the anonymous ones.
    assert statuses(h, bearer(token(sub="v"))) == [200]


def test_a_known_token_is_verified_once() -> None:
    h = gateway()
    verifier = h.gateway.services.verifier
    assert isinstance(verifier, CryptographyVerifier)
    text = token(sub="once")
    statuses(h, bearer(text), bearer(text), bearer(text))
    assert verifier.calls == 1


def test_unknown_kids_fetch_the_key_set_at_most_once_per_interval() -> None:
    h = gateway()
    issuer = h.issuer  # type: ignore[attr-defined]
    assert statuses(h, bearer(token())) == [200] and issuer.calls == 1
    h.clock.advance(REFETCH_INTERVAL_MS)
    for n in range(1000):
        assert h.send(bearer(token(kid=f"made-up-{n}", sub=f"s{n}"))).status in (401, 429)
    assert issuer.calls == 2  # one refetch for the first unknown kid, then none
    h.clock.advance(REFETCH_INTERVAL_MS)
    statuses(h, bearer(token(kid="made-up-again")))
    assert issuer.calls == 3


def test_a_sources_refetch_after_sets_how_soon_a_rotated_key_is_fetched() -> None:
    issuer = Issuer("RS256")
    h = gateway(issuer=issuer, auth={"main": {**AUTH["main"], "refetch_after": "10s"}})
    assert statuses(h, bearer(token())) == [200] and issuer.calls == 1
    issuer.keys = [{**signer("ES256").public_jwk, "kid": "ES256-1"}]
    h.clock.advance(9_999)
    assert statuses(h, bearer(token("ES256", sub="n"))) == [401] and issuer.calls == 1
    h.clock.advance(1)
    assert statuses(h, bearer(token("ES256", sub="n"))) == [200] and issuer.calls == 2
    # Made-up kids still cost one fetch per interval at most.
    for n in range(100):
        h.send(bearer(token(kid=f"made-up-{n}", sub=f"s{n}")))
    assert issuer.calls == 2
    h.clock.advance(10_000)
    h.send(bearer(token(kid="made-up-later")))
    assert issuer.calls == 3


def test_a_rotated_key_is_fetched_and_the_set_is_served_stale_while_the_endpoint_fails() -> None:
    issuer = Issuer("RS256")
    h = gateway(issuer=issuer)
    assert statuses(h, bearer(token())) == [200]
    issuer.keys = [{**signer("ES256").public_jwk, "kid": "ES256-1"}]
    # The provider rotated: a token naming the new key makes the set be fetched again
    # (not sooner than a minute after the last fetch).
    assert statuses(h, bearer(token("ES256", sub="n"))) == [401] and issuer.calls == 1
    h.clock.advance(REFETCH_INTERVAL_MS)
    assert statuses(h, bearer(token("ES256", sub="n"))) == [200] and issuer.calls == 2
    issuer.failing = True
    h.clock.advance(3_600_000)  # past the set's 10 minutes: due, and the endpoint fails
    assert statuses(h, bearer(token("ES256", sub="m"))) == [200]
    assert issuer.calls == 3


def test_a_fresh_isolate_takes_the_key_set_from_kv() -> None:
    issuer = Issuer("RS256")
    h = gateway(issuer=issuer)
    statuses(h, bearer(token()))
    assert issuer.calls == 1 and any(key.startswith("jwks:") for key in h.kv.values)
    other = gateway(issuer=issuer)
    other.kv.values.update(h.kv.values)
    assert statuses(other, bearer(token(sub="z"))) == [200] and issuer.calls == 1


def test_a_token_over_the_bound_is_refused_cheaply() -> None:
    h = gateway()
    assert statuses(h, bearer("a" * 10_000_000)) == [401]
    assert h.events("invalid_token")[-1]["reason"] == "too_large"


# --- API keys in KV -------------------------------------------------------------------------


def keyed(**changes: Any) -> tuple[Harness, MemoryKV]:
    clock = FakeClock()
    kv = MemoryKV(clock)
    tiers = {**TIERS, "by": "kv:API_KEYS"}
    raw = {"name": "api", "match": {"path": "/v1/*"}, "limits": "3/minute",
           "algorithm": "sliding_log", "tiers": True, "key": "apikey", **changes}  # fmt: skip
    h = harness(raw, tiers=tiers, clock=clock, named_kv={"API_KEYS": kv})
    return h, kv


def store(kv: MemoryKV, key: str, record: ApiKeyRecord) -> None:
    kv.values[api_key_digest(key)] = (encode_record(record), 1 << 62)


def with_key(key: str, ip: str = "198.51.100.7") -> Any:
    return request(ip=ip, headers={"x-api-key": key})


def test_an_api_keys_tier_comes_from_its_record_and_an_owner_shares_a_counter() -> None:
    h, kv = keyed()
    store(kv, "k-pro-1", ApiKeyRecord("pro", owner="acme"))
    store(kv, "k-pro-2", ApiKeyRecord("pro", owner="acme"))
    store(kv, "k-free", ApiKeyRecord("free"))
    pro = [h.send(with_key("k-pro-1" if n % 2 else "k-pro-2")) for n in range(5)]
    assert [a.status for a in pro] == [200] * 4 + [429]
    assert pro[0].headers.get("ratelimit-policy") == '"pro";q=4;w=60'
    assert statuses(h, *(with_key("k-free") for _ in range(3))) == [200, 200, 429]


def test_an_unknown_api_key_is_401_and_lookups_are_remembered_then_refreshed() -> None:
    h, kv = keyed()
    assert statuses(h, with_key("nope"), with_key("nope")) == [401, 401]
    assert kv.gets.count(api_key_digest("nope")) == 1  # the absence is remembered
    store(kv, "k", ApiKeyRecord("free"))
    assert statuses(h, with_key("k")) == [200]
    store(kv, "k", ApiKeyRecord("internal"))
    assert h.send(with_key("k")).headers.get("x-edgelimiter-reason") is None
    h.clock.advance(FOUND_TTL_MS)  # a change of tier takes effect within the TTL
    assert h.send(with_key("k")).headers.get("x-edgelimiter-reason") == "exempt"


def test_api_key_ttl_sets_how_long_a_record_and_its_absence_are_remembered() -> None:
    clock = FakeClock()
    kv = MemoryKV(clock)
    tiers = {**TIERS, "by": "kv:API_KEYS", "api_key_ttl": "10s"}
    raw = {"name": "api", "match": {"path": "/v1/*"}, "limits": "3/minute",
           "algorithm": "sliding_log", "tiers": True, "key": "apikey"}  # fmt: skip
    h = harness(raw, tiers=tiers, clock=clock, named_kv={"API_KEYS": kv})
    store(kv, "k", ApiKeyRecord("free"))
    assert h.send(with_key("k")).headers.get("ratelimit-policy") == '"free";q=2;w=60'
    store(kv, "k", ApiKeyRecord("internal"))
    h.clock.advance(9_999)
    assert h.send(with_key("k")).headers.get("x-edgelimiter-reason") is None  # remembered
    h.clock.advance(1)
    assert h.send(with_key("k")).headers.get("x-edgelimiter-reason") == "exempt"
    assert statuses(h, with_key("new")) == [401]
    store(kv, "new", ApiKeyRecord("pro"))
    h.clock.advance(4_999)
    assert statuses(h, with_key("new")) == [401]  # its absence, half as long
    h.clock.advance(1)
    assert h.send(with_key("new")).headers.get("ratelimit-policy") == '"pro";q=4;w=60'


def test_a_failing_kv_counts_the_key_under_the_default_tier() -> None:
    h, kv = keyed()
    kv.failing = True
    assert statuses(h, *(with_key("k1") for _ in range(3))) == [200, 200, 429]
    assert h.events("api_key_lookup_failed")


# --- the admin API's API key records ---------------------------------------------------------


def admin(h: Harness, method: str, path: str, body: Any = None, query: str = "") -> Response:
    headers = {"authorization": "Bearer admin-secret"}
    data = None
    if body is not None:
        headers["content-type"] = "application/json"
        data = json.dumps(body).encode()
    return h.send(request(f"/_edge-limiter{path}", method, query=query, headers=headers, body=data))


def keyed_with_admin() -> tuple[Harness, MemoryKV]:
    clock = FakeClock()
    kv = MemoryKV(clock)
    tiers = {**TIERS, "by": "kv:API_KEYS"}
    raw = {"name": "api", "match": {"path": "/v1/*"}, "limits": "3/minute",
           "algorithm": "sliding_log", "tiers": True, "key": "apikey"}  # fmt: skip
    h = harness(raw, tiers=tiers, clock=clock, named_kv={"API_KEYS": kv},
                admin_token="admin-secret")  # fmt: skip
    return h, kv


def test_the_admin_api_sets_reads_and_deletes_a_keys_record_taking_effect_here_at_once() -> None:
    h, kv = keyed_with_admin()
    assert statuses(h, with_key("sk_1")) == [401]  # unknown (and remembered so)
    done = admin(h, "POST", "/api/api-keys", {"key": "sk_1", "tier": "pro", "owner": "acme"})
    assert done.status == 200
    digest = body_json(done)["sha256"]
    assert digest == api_key_digest("sk_1") and digest in kv.values
    assert "sk_1" not in json.dumps(list(kv.values))  # the key itself is never stored
    read = admin(h, "GET", "/api/api-keys", query=f"sha256={digest}")
    assert body_json(read) == {"sha256": digest, "tier": "pro", "limits": None, "owner": "acme"}
    # This isolate forgot its "no such key": the new record counts at once.
    assert h.send(with_key("sk_1")).headers.get("ratelimit-policy") == '"pro";q=4;w=60'
    assert admin(h, "DELETE", f"/api/api-keys/{digest}").status == 200
    assert statuses(h, with_key("sk_1")) == [401]
    assert admin(h, "GET", "/api/api-keys", query=f"sha256={digest}").status == 404


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"key": "k", "tier": "gold"}, "no tier of [tiers.plans]"),
        ({"tier": "pro"}, "give the API key as key"),
        ({"key": "k", "sha256": "ab" * 32, "tier": "pro"}, "give the API key as key"),
        ({"sha256": "xyz", "tier": "pro"}, "sha256 must be 64 hex digits"),
        ({"key": "k", "tier": "pro", "admin": True}, "unknown fields admin"),
        ({"key": "k", "tier": "pro", "limits": "lots"}, "limits:"),
        ({"key": "a b", "tier": "pro"}, "key:"),
    ],
)
def test_a_bad_record_is_refused_saying_why(body: dict[str, Any], says: str) -> None:
    h, kv = keyed_with_admin()
    answer = admin(h, "POST", "/api/api-keys", body)
    assert answer.status == 400 and says in body_json(answer)["detail"]
    assert not kv.values


def test_without_kv_tiers_the_admin_has_no_api_keys() -> None:
    h = harness(route(auth=None, key="ip"), admin_token="admin-secret")
    assert admin(h, "GET", "/api/api-keys", query="sha256=" + "0" * 64).status == 404
