"""Verification keys: JWK, JWKS, PEM and secrets checked, and which key a token gets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from edge_limiter.core.identity.jwks import (
    DEFAULT_TTL_MS,
    MAX_TTL_MS,
    MIN_TTL_MS,
    REFETCH_INTERVAL_MS,
    RETRY_MS,
    STALE_MS,
    KeySet,
    lifetime_ms,
)
from edge_limiter.core.identity.keys import (
    MAX_UNNAMED_TRIES,
    Jwk,
    UnusableKeyError,
    keys_of,
    parse_jwk,
    parse_jwks,
    pem_key,
    secret_key,
    select_keys,
)
from edge_limiter.core.identity.tokens import TokenError, parse_token

from .identity_keys import ALGS, SECRET, signer


@pytest.mark.parametrize("alg", ALGS)
def test_each_algorithms_public_key_is_read_and_verifies_only_its_family(alg: str) -> None:
    key = parse_jwk(signer(alg).public_jwk)
    assert key.verifies(alg)
    others = {"RS256": "ES256", "PS256": "HS256", "ES256": "ES384", "ES384": "EdDSA"}
    others.update({"EdDSA": "RS256", "HS256": "RS256"})
    assert not key.verifies(others[alg])


@pytest.mark.parametrize("alg", ["RS256", "ES256", "ES384", "EdDSA"])
def test_a_pem_key_is_the_same_key_as_its_jwk(alg: str) -> None:
    from_pem = pem_key(signer(alg).public_pem)
    assert from_pem.thumbprint == parse_jwk(signer(alg).public_jwk).thumbprint


def broken(changes: dict[str, Any], alg: str = "RS256") -> str:
    jwk = {**signer(alg).public_jwk, **changes}
    with pytest.raises(UnusableKeyError) as raised:
        parse_jwk(jwk)
    return str(raised.value)


def test_unusable_keys_are_refused_saying_why() -> None:
    assert "private" in broken({"d": "AAAA"})
    assert "signatures" in broken({"use": "enc"})
    assert "verify" in broken({"key_ops": ["encrypt"]})
    assert "kty" in broken({"kty": "DSA"})
    assert "P-256 or P-384" in broken({"crv": "P-521"}, "ES256")
    assert "32 bytes" in broken({"x": "AAAA"}, "ES256")
    assert "does not fit" in broken({"alg": "ES256"})
    short = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    pem = short.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    with pytest.raises(UnusableKeyError, match="1024 bits"):
        pem_key(pem)
    with pytest.raises(UnusableKeyError, match="at least 32 bytes"):
        secret_key("short")
    with pytest.raises(UnusableKeyError, match="PEM"):
        pem_key("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----")


def test_a_key_set_keeps_its_usable_keys_and_says_which_it_left_out() -> None:
    good = {**signer("RS256").public_jwk, "kid": "a"}
    document = {"keys": [good, {"kty": "RSA", "n": "AQAB", "e": "AQAB"}, "x"]}
    keys, skipped = parse_jwks(json.dumps(document).encode())
    assert [k.kid for k in keys] == ["a"] and len(skipped) == 2
    for bad in (b"[]", b"{}", b"not json", json.dumps({"keys": [good] * 65}).encode()):
        with pytest.raises(UnusableKeyError):
            parse_jwks(bad)


def keyed(*pairs: tuple[str, str]) -> list[Jwk]:
    return [parse_jwk({**signer(alg).public_jwk, "kid": kid}) for kid, alg in pairs]


def test_a_token_gets_the_key_its_kid_names_and_no_other() -> None:
    keys = keyed(("r1", "RS256"), ("e1", "ES256"))
    token = parse_token(signer("RS256").token(kid="r1"))
    assert [k.kid for k in select_keys(token, keys)] == ["r1"]
    with pytest.raises(TokenError) as raised:
        select_keys(parse_token(signer("RS256").token(kid="r9")), keys)
    assert raised.value.code == "unknown_kid"
    # An HMAC token naming the RSA key: never checked against the public key's bytes.
    confused = parse_token(signer("HS256").token(kid="r1"))
    with pytest.raises(TokenError) as raised:
        select_keys(confused, keys)
    assert raised.value.code == "key_mismatch"


def test_a_token_that_names_no_key_tries_the_few_that_fit() -> None:
    keys = [parse_jwk(signer("RS256").public_jwk), secret_key(SECRET)]
    token = parse_token(signer("RS256").token())
    assert len(select_keys(token, keys)) == 1
    many = [parse_jwk({**signer("RS256").public_jwk, "kid": str(n)}) for n in range(5)]
    assert len(many) > MAX_UNNAMED_TRIES
    with pytest.raises(TokenError, match="names no key"):
        select_keys(token, many)
    assert len(keys_of(many)) == 1  # one key under five names


def test_key_set_lifetimes_are_bounded() -> None:
    assert lifetime_ms(None) == DEFAULT_TTL_MS
    assert lifetime_ms("max-age=10") == MIN_TTL_MS
    assert lifetime_ms("public, max-age=3600") == 3_600_000
    assert lifetime_ms("max-age=99999999") == MAX_TTL_MS
    assert lifetime_ms("s-maxage=600, max-age=60") == 600_000
    assert lifetime_ms("no-store") == MIN_TTL_MS


def test_when_a_key_set_is_fetched_again() -> None:
    keys = tuple(keyed(("r1", "RS256")))
    fresh = KeySet().asking(0).fetched(keys, "max-age=3600", 0)
    assert not fresh.due(1000) and fresh.usable(1000) == keys
    # A rotated key: once, then not again within the interval, whatever the token.
    assert not fresh.due(REFETCH_INTERVAL_MS - 1, unknown_kid=True)
    assert fresh.due(REFETCH_INTERVAL_MS, unknown_kid=True)
    # A source's own interval (refetch_after).
    assert not fresh.due(9_999, unknown_kid=True, refetch_ms=10_000)
    assert fresh.due(10_000, unknown_kid=True, refetch_ms=10_000)
    assert not fresh.due(10_000, refetch_ms=10_000)  # a known kid: only past its lifetime
    # Past its lifetime: fetched again; while that fails, served stale for a while.
    late = 3_600_000
    assert fresh.due(late)
    failing = fresh.asking(late)
    assert not failing.due(late + RETRY_MS - 1) and failing.due(late + RETRY_MS)
    assert failing.usable(late + STALE_MS - 1) == keys
    assert failing.usable(3_600_000 + STALE_MS) == ()
    # Nothing known yet: retried every RETRY_MS at most.
    empty = KeySet().asking(0)
    assert not empty.due(RETRY_MS - 1) and empty.due(RETRY_MS)


def test_a_thousand_made_up_kids_cost_one_fetch_a_minute() -> None:
    state = KeySet().asking(0).fetched(tuple(keyed(("r1", "RS256"))), "max-age=86400", 0)
    fetches = 0
    for now in range(0, 60_000, 60):  # 1,000 tokens naming unknown keys over a minute
        if state.due(now, unknown_kid=True):
            fetches += 1
            state = state.asking(now).fetched(state.keys, "max-age=86400", now)
    assert fetches == 0  # the first fetch was at 0: the next may come at 60 s
    assert state.due(60_000, unknown_kid=True)
