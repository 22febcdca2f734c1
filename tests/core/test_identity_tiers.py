"""Plan tiers from a claim or an API key record; the record's strict codec; the isolate's
memory of KV lookups; the keys a verified caller (or an anonymous one) is counted under."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from edge_limiter.core.http.messages import Client, Headers, Request
from edge_limiter.core.identity.apikeys import (
    FOUND_TTL_MS,
    MAX_RECORD_BYTES,
    MISSING_TTL_MS,
    ApiKeyRecord,
    Lookups,
    RecordError,
    api_key_digest,
    check_api_key,
    decode_record,
    encode_record,
)
from edge_limiter.core.identity.settings import Plan, Tiers
from edge_limiter.core.identity.tiers import named_for, tier_limits, tier_name
from edge_limiter.core.identity.tokens import TokenError
from edge_limiter.core.keys import KeySpec, parse_key_part
from edge_limiter.core.ratelimit.rates import Limit, parse_rates

NOW = 1_800_000_000_000


def limits(text: str) -> tuple[Limit, ...]:
    return tuple(Limit(rate) for rate in parse_rates(text))


def tiers(by: str = "jwt") -> Tiers:
    plans = {
        "anon": Plan("anon", limits=named_for("anon", limits("10/hour"))),
        "free": Plan("free", limits=named_for("free", limits("100/hour"))),
        "pro": Plan(
            "pro",
            limits=named_for("pro", limits("10000/hour; 100/second")),
            leases=True,
            routes={"search": named_for("pro", limits("50/second"))},
        ),
        "internal": Plan("internal", exempt=True),
    }
    return Tiers(by, "plan" if by == "jwt" else "API_KEYS", "free", "anon", plans)


def test_the_tier_comes_from_the_claim_and_an_unknown_one_is_the_default() -> None:
    assert tier_name(tiers(), claims={"plan": "pro"}) == "pro"
    # A plan the gateway does not know (or a claim of another type) is no better tier.
    for plan in ("platinum", "PRO", 1, ["pro"], {"pro": True}, None):
        assert tier_name(tiers(), claims={"plan": plan}) == "free", plan
    assert tier_name(tiers(), claims={}) == "free"
    assert tier_name(tiers(), claims=None) == "anon"


def test_the_tier_comes_from_the_record_for_a_kv_source() -> None:
    kv = tiers("kv")
    assert tier_name(kv, record=ApiKeyRecord("pro")) == "pro"
    assert tier_name(kv, record=ApiKeyRecord("gone")) == "free"
    assert tier_name(kv, record=None) == "anon"
    # A claim means nothing to a kv source.
    assert tier_name(kv, claims={"plan": "internal"}) == "anon"


def test_a_tiers_limits_on_a_route_its_group_or_every_route() -> None:
    pro = tier_limits(tiers(), "api", None, claims={"plan": "pro"})
    assert [limit.name for limit in pro.limits] == ["pro.10000-per-hour", "pro.100-per-second"]
    assert pro.leases and not pro.exempt
    grouped = tier_limits(tiers(), "other", "search", claims={"plan": "pro"})
    assert [str(limit) for limit in grouped.limits] == ["50 per second"]
    assert grouped.limits[0].name == "pro"
    assert tier_limits(tiers(), "api", None, claims={"plan": "internal"}).exempt
    anonymous = tier_limits(tiers(), "api", None, claims=None)
    assert anonymous.tier == "anon" and [lim.name for lim in anonymous.limits] == ["anon"]


def test_a_records_own_limits_replace_its_tiers_but_never_an_exemption() -> None:
    kv = tiers("kv")
    own = tier_limits(kv, "api", None, record=ApiKeyRecord("pro", "7/second"))
    assert [str(limit) for limit in own.limits] == ["7 per second"] and own.tier == "pro"
    exempt = tier_limits(kv, "api", None, record=ApiKeyRecord("internal", "7/second"))
    assert exempt.exempt and not exempt.limits


# --- the record's codec ---------------------------------------------------------------------


def test_a_record_round_trips_and_is_stored_under_the_keys_hash() -> None:
    record = ApiKeyRecord("pro", "50/second; 100000/day", "acme")
    assert decode_record(encode_record(record)) == record
    assert decode_record(b'{"tier":"free"}') == ApiKeyRecord("free")
    assert api_key_digest("k-123") == hashlib.sha256(b"k-123").hexdigest()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"not json", "not JSON"),
        (b"[]", "JSON object"),
        (b'{"tier": "pro", "admin": true}', "unknown fields admin"),
        (b'{"limits": "1/second"}', "tier must be"),
        (b'{"tier": ""}', "tier must be"),
        (b'{"tier": "a b"}', "tier must be"),
        (b'{"tier": "pro", "limits": 5}', "limits must be a string"),
        (b'{"tier": "pro", "limits": "lots"}', "limits:"),
        (b'{"tier": "pro", "limits": "1/second; 2/second"}', "same window"),
        (b'{"tier": "pro", "owner": ""}', "owner must be"),
        (b'{"tier": "pro", "owner": "a b"}', "owner must be"),
        (b'{"tier": "pro", "tier": "internal"}' + b" " * MAX_RECORD_BYTES, "larger than"),
    ],
)
def test_a_record_the_codec_cannot_read_is_refused_saying_why(data: bytes, says: str) -> None:
    with pytest.raises(RecordError, match=says):
        decode_record(data)


def test_an_api_key_must_be_a_short_printable_word() -> None:
    assert check_api_key("sk_live_0123") == "sk_live_0123"
    for bad in ("", "a b", "ключ", "x" * 257, "a\x00b"):
        with pytest.raises(TokenError):
            check_api_key(bad)


def test_lookups_are_remembered_found_and_missing_for_their_ttls() -> None:
    lookups = Lookups(size=2)
    record = ApiKeyRecord("pro")
    lookups.put("a", record, NOW)
    lookups.put("b", None, NOW)
    assert lookups.get("a", NOW + FOUND_TTL_MS - 1) == (True, record)
    assert lookups.get("a", NOW + FOUND_TTL_MS) == (False, None)
    assert lookups.get("b", NOW + MISSING_TTL_MS - 1) == (True, None)
    assert lookups.get("b", NOW + MISSING_TTL_MS) == (False, None)
    for name in ("c", "d", "e"):
        lookups.put(name, record, NOW)
    assert lookups.get("c", NOW) == (False, None)  # bounded: the oldest went
    lookups.forget("e")
    assert lookups.get("e", NOW) == (False, None) and lookups.get("d", NOW)[0]


# --- keys of verified callers ---------------------------------------------------------------


def request(ip: str = "203.0.113.9", **headers: str) -> Request:
    return Request("GET", "/v1/x", headers=Headers(headers.items()), client=Client(ip))


def spec(*parts: str) -> KeySpec:
    return KeySpec(tuple(parse_key_part(part) for part in parts))


def test_a_claim_key_reads_the_verified_claims_never_a_header() -> None:
    key = spec("jwt:org.id", "jwt:sub")
    claims: dict[str, Any] = {"sub": "u1", "org": {"id": 42}}
    assert key.compute(request(), {}, claims) == "jwt:org.id=42|jwt:sub=u1"
    # Without verified claims the parts are empty, whatever the request says.
    forged = request(**{"jwt:sub": "u1", "x-jwt-sub": "u1"})
    assert key.compute(forged, {}) == "jwt:org.id=|jwt:sub="
    assert key.names_identity() and not spec("ip").names_identity()


def test_an_api_key_part_is_its_records_owner_or_hash() -> None:
    assert spec("apikey", "ip").compute(request(), {}, caller="acme") == (
        "apikey=acme|ip=203.0.113.9"
    )


def test_an_anonymous_caller_is_counted_by_its_address_apart_from_every_verified_key() -> None:
    key = spec("jwt:sub")
    assert key.anonymous(request("2001:db8::1")) == "anonymous|ip=2001%3Adb8%3A%3A%2F64"
    assert key.anonymous(request("203.0.113.9")) == "anonymous|ip=203.0.113.9"
    # A verified caller whose sub looks like that still gets a key of its own.
    assert key.compute(request(), {}, {"sub": "anonymous|ip=203.0.113.9"}) != key.anonymous(
        request()
    )
