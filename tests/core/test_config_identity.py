"""The config of identity: ``[auth.NAME]``, ``[tiers]``, a route's ``auth``, ``on_invalid``,
``tiers`` and ``group``, and the ``jwt:`` and ``apikey`` key parts: what they parse into,
and every problem naming its table and field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from edge_limiter.core.config import parse_config
from edge_limiter.core.errors import ConfigError
from edge_limiter.core.identity.settings import TokenPlace
from edge_limiter.core.keys import KeyPart

from .identity_keys import signer

ORIGIN = "https://api.example.com"


def config(**top: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "origin": ORIGIN,
        "auth": {
            "main": {
                "issuer": "https://auth.example.com/",
                "audiences": ["api"],
                "algorithms": ["RS256", "ES256"],
                "jwks_url": "https://auth.example.com/jwks",
            }
        },
        "tiers": {
            "by": "jwt:plan",
            "default": "free",
            "anonymous": "anon",
            "plans": {
                "anon": "10/hour",
                "free": "100/hour",
                "pro": {"limits": "10000/hour", "leases": True, "routes": {"search": "50/second"}},
                "internal": "exempt",
            },
        },
        "routes": [
            {
                "name": "api",
                "match": {"path": "/v1/*"},
                "limits": "20/second",
                "auth": "main",
                "tiers": True,
                "group": "search",
                "key": ["jwt:org.id", "jwt:sub"],
            }
        ],
    }
    raw.update(top)
    return raw


def problems_of(raw: dict[str, Any], **kwargs: Any) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(raw, **kwargs)
    return raised.value.problems


def test_a_source_tiers_and_a_tiered_route_parse_into_what_they_say() -> None:
    parsed = parse_config(config())
    source = parsed.auth["main"]
    assert source.token == TokenPlace("bearer")
    assert source.algorithms == {"RS256", "ES256"} and source.audiences == ("api",)
    assert source.leeway_ms == 60_000 and source.max_token_bytes == 8192
    assert source.required_claims == ("exp",) and source.refetch_after_ms == 60_000
    tiers = parsed.tiers
    assert tiers is not None and (tiers.by, tiers.source) == ("jwt", "plan")
    assert tiers.plans["internal"].exempt
    pro = tiers.plans["pro"]
    # A tier's limits are named for it in RateLimit-Policy; a route group gets its own.
    assert [limit.name for limit in pro.limits] == ["pro"] and pro.leases
    assert [str(limit) for limit in pro.limits_for("api", "search")] == ["50 per second"]
    assert [str(limit) for limit in pro.limits_for("other", None)] == ["10000 per hour"]
    route = parsed.routes[0]
    assert route.identity is not None and route.identity.tiers
    assert route.identity.on_invalid == "reject" and route.identity.group == "search"
    assert route.limits.key.parts == (KeyPart("jwt", "org.id"), KeyPart("jwt", "sub"))


def test_a_named_token_header_tells_callers_apart() -> None:
    raw = config()
    raw["auth"]["main"]["token"] = "header:Cf-Access-Jwt-Assertion"
    parsed = parse_config(raw)
    assert parsed.auth["main"].token == TokenPlace("header", "cf-access-jwt-assertion")
    assert "cf-access-jwt-assertion" in parsed.caller_fields


def test_inline_keys_and_a_secret_each_verify_only_their_algorithms() -> None:
    raw = config()
    raw["auth"]["main"] = {
        "algorithms": ["EdDSA", "ES256", "HS256"],
        "keys": [signer("EdDSA").public_pem, signer("ES256").public_jwk],
        "secret": "$JWT_SECRET",
    }
    source = parse_config(raw).auth["main"]
    assert source.secret == "JWT_SECRET" and len(source.keys) == 2


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"algorithms": ["HS256"], "jwks_url": "https://auth.example.com/jwks"},
            "auth 'main'.algorithms: HS256 needs secret = '$NAME'",
        ),
        (
            {"algorithms": ["RS256"], "jwks_url": None, "secret": "$S"},
            "auth 'main'.secret: only verifies HS256",
        ),
        (
            {"algorithms": ["RS256", "HS256"], "jwks_url": None, "secret": "$S"},
            "auth 'main'.algorithms: RS256 need a public key",
        ),
        ({"algorithms": ["none"]}, "auth 'main'.algorithms: 'none' is not one of"),
        ({"algorithms": []}, "auth 'main'.algorithms: must name at least one algorithm"),
        ({"algorithms": None}, "auth 'main'.algorithms: is required"),
        ({"jwks_url": "http://auth.example.com/jwks"}, "auth 'main'.jwks_url: must be an https"),
        ({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}, "auth 'main'.keys[0]: is a secret key"),
        ({"keys": ["not a pem"]}, "auth 'main'.keys[0]: not a PEM public key"),
        ({"token": "query:t"}, "auth 'main'.token: must be 'bearer', 'header:NAME'"),
        ({"leeway": "1h"}, "auth 'main'.leeway:"),
        ({"refetch_after": "1s"}, "auth 'main'.refetch_after: duration '1s' is shorter than 5s"),
        ({"refetch_after": "2h"}, "auth 'main'.refetch_after: duration '2h' is longer than 1h"),
        ({"max_token_bytes": 1 << 20}, "auth 'main'.max_token_bytes: must be"),
        ({"secret": "JWT_SECRET"}, "auth 'main'.secret: must be a Worker secret's name"),
        ({"issuer": ""}, "auth 'main'.issuer: must be a non-empty string"),
    ],
)
def test_a_broken_source_is_a_problem_naming_its_field(
    changes: dict[str, Any], expected: str
) -> None:
    raw = config()
    source = raw["auth"]["main"]
    for name, value in changes.items():
        if value is None:
            source.pop(name, None)
        else:
            source[name] = value
    found = problems_of(raw)
    assert any(problem.startswith(expected) for problem in found), found
    # The route naming the broken source is not told it names no source.
    assert not any("names no [auth] source" in problem for problem in found), found


def test_the_rsa_public_key_as_an_hmac_secret_is_refused() -> None:
    raw = config()
    raw["auth"]["main"] = {"algorithms": ["HS256"], "keys": [signer("RS256").public_pem]}
    found = problems_of(raw)
    assert any("HS256 needs secret" in problem for problem in found)
    assert any("keys[0]: a RSA key verifies none" in problem for problem in found)


def test_a_loopback_jwks_url_may_be_http_for_local_tests() -> None:
    for url in ("http://127.0.0.1:8080/jwks", "http://localhost/jwks", "http://[::1]:9/j"):
        raw = config()
        raw["auth"]["main"]["jwks_url"] = url
        assert parse_config(raw).auth["main"].jwks_url == url


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda raw: raw["tiers"].update(default="gold"), "config.tiers.default: names no tier"),
        (lambda raw: raw["tiers"].update(anonymous="x"), "config.tiers.anonymous: names no tier"),
        (lambda raw: raw["tiers"].update(by="plan"), "config.tiers.by: must be 'jwt:CLAIM'"),
        (lambda raw: raw["tiers"].pop("plans"), "config.tiers.plans: is required"),
        (
            lambda raw: raw["tiers"]["plans"].update(x={"leases": True}),
            "config.tiers.plans.x: names no limits",
        ),
        (
            lambda raw: raw["tiers"]["plans"].update(x="lots"),
            "config.tiers.plans.x: cannot parse rates 'lots'",
        ),
        (
            lambda raw: raw["tiers"]["plans"]["pro"]["routes"].update(nowhere="1/second"),
            "config.tiers.plans.pro.routes.nowhere: names no route or group",
        ),
        (
            lambda raw: raw["routes"][0].pop("auth"),
            "route 'api'.tiers: takes the tier from the claim 'plan'",
        ),
        (
            lambda raw: raw["routes"][0].update(auth="other"),
            "route 'api'.auth: names no [auth] source (known: main)",
        ),
        (
            lambda raw: raw["routes"][0].update(tiers=True) or raw.pop("tiers"),
            "route 'api'.tiers: is true, but the config has no [tiers] table",
        ),
        (
            lambda raw: raw["routes"][0].update(key="apikey"),
            "route 'api'.key: apikey is the caller's API key record",
        ),
        (
            lambda raw: raw["routes"][0].update(on_invalid="allow"),
            "route 'api'.on_invalid: must be one of reject, anonymous",
        ),
    ],
)
def test_tiers_and_route_problems_name_their_field(edit: Any, expected: str) -> None:
    raw = copy.deepcopy(config())
    edit(raw)
    found = problems_of(raw)
    assert any(problem.startswith(expected) for problem in found), found


def test_a_claim_key_part_needs_a_verified_token_on_its_route() -> None:
    raw = config()
    raw["routes"].append(
        {"name": "open", "match": {"path": "/v2/*"}, "limits": "5/second", "key": "jwt:sub"}
    )
    assert problems_of(raw) == [
        "route 'open'.key: jwt:sub reads a verified token's claim: set auth on this route "
        "(else any client could write the claim)"
    ]


def test_a_kv_source_must_name_a_binding_the_worker_has_where_it_is_known() -> None:
    raw = config()
    raw["tiers"]["by"] = "kv:API_KEYS"
    raw["routes"][0]["key"] = "apikey"
    del raw["routes"][0]["auth"]
    parsed = parse_config(raw)  # bindings unknown: not checked
    assert parsed.tiers is not None and parsed.tiers.source == "API_KEYS"
    assert "x-api-key" in parsed.caller_fields
    assert parse_config(raw, kv_bindings=frozenset({"CACHE", "API_KEYS"})).tiers is not None
    assert problems_of(raw, kv_bindings=frozenset({"CACHE"})) == [
        "config.tiers.by: names the KV binding 'API_KEYS', which wrangler.toml does not "
        "declare (its kv_namespaces: CACHE)"
    ]


def test_api_key_ttl_is_bounded_and_only_for_records_in_kv() -> None:
    raw = config()
    raw["tiers"]["by"] = "kv:API_KEYS"
    raw["routes"][0]["key"] = "apikey"
    del raw["routes"][0]["auth"]
    tiers = parse_config(raw).tiers
    assert tiers is not None and tiers.api_key_ttl_ms == 60_000  # as it always was
    raw["tiers"]["api_key_ttl"] = "5s"
    tiers = parse_config(raw).tiers
    assert tiers is not None and tiers.api_key_ttl_ms == 5_000
    for bad in ("0s", "500ms", "6m"):
        raw["tiers"]["api_key_ttl"] = bad
        (problem,) = problems_of(raw)
        assert problem.startswith("config.tiers.api_key_ttl"), problem
    claimed = config()
    claimed["tiers"]["api_key_ttl"] = "5s"
    assert any("api_key_ttl" in w for w in parse_config(claimed).warnings)


AUTH0_PLAN = '"https://example.com/plan"'


def test_a_claim_name_with_dots_is_quoted_in_keys_tiers_and_required_claims() -> None:
    raw = config()
    raw["routes"][0]["key"] = ['jwt:"https://example.com/org".id', 'jwt:"sub"']
    raw["tiers"]["by"] = f"jwt:{AUTH0_PLAN}"
    raw["auth"]["main"]["required_claims"] = ["exp", AUTH0_PLAN, '"sub"']
    parsed = parse_config(raw)
    key = parsed.routes[0].limits.key
    # One spelling each: a step is quoted only when its name holds a dot.
    assert key.parts == (KeyPart("jwt", '"https://example.com/org".id'), KeyPart("jwt", "sub"))
    assert parsed.tiers is not None and parsed.tiers.source == AUTH0_PLAN
    assert parsed.auth["main"].required_claims == ("exp", AUTH0_PLAN, "sub")


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ('"https://example.com/plan', "no closing"),
        ('""', "empty"),
        ('a"b.c"', "whole step"),
        ('"b.c"d', "whole step"),
        ("a.b.c.d.e.f.g.h.i", "at most 8 steps"),
        ("https://example.com/plan", 'quote it, "https://example.com/plan"'),
        ('"with space"', "no spaces"),
        ('"a=b"', "'='"),
        ("a..b", "names joined by '.'"),
    ],
)
def test_a_claim_path_is_read_strictly(path: str, says: str) -> None:
    raw = config()
    raw["routes"][0]["key"] = f"jwt:{path}"
    problems = problems_of(raw)
    assert any(p.startswith("route 'api'.key") and says in p for p in problems), problems
    tiers = config()
    tiers["tiers"]["by"] = f"jwt:{path}"
    # (A space is refused by the field's own rule first: 'jwt:CLAIM' or 'kv:BINDING'.)
    assert any(
        p.startswith("config.tiers.by") and (says in p or "'jwt:CLAIM'" in p)
        for p in problems_of(tiers)
    )
    required = config()
    required["auth"]["main"]["required_claims"] = ["exp", path]
    problems = problems_of(required)
    assert any(p.startswith("auth 'main'.required_claims[1]") and says in p for p in problems), (
        problems
    )
