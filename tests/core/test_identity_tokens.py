"""Tokens read strictly, and their claims checked with time as an argument."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.identity.tokens import (
    MAX_TOKEN_BYTES,
    TokenError,
    b64url_decode,
    check_algorithm,
    check_claims,
    claim_at,
    encode_segment,
    expires_ms,
    parse_token,
)

from .identity_keys import ALGS, signer

NOW_S = 1_800_000_000
NOW = NOW_S * 1000


def forged(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"sig") -> str:
    sig = base64.urlsafe_b64encode(signature).rstrip(b"=").decode()
    return f"{encode_segment(header)}.{encode_segment(claims)}.{sig}"


def code_of(text: str) -> str:
    with pytest.raises(TokenError) as raised:
        parse_token(text)
    return raised.value.code


@pytest.mark.parametrize("alg", ALGS)
def test_a_token_of_every_algorithm_is_read(alg: str) -> None:
    text = signer(alg).token({"plan": "pro"}, kid="k1")
    token = parse_token(text)
    assert token.alg == alg and token.kid == "k1"
    assert token.claims["plan"] == "pro" and token.claims["sub"] == "user-1"
    head, payload, _ = text.split(".")
    assert token.signing_input == f"{head}.{payload}".encode()


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("a.b", "malformed"),
        ("a.b.c.d", "malformed"),
        (forged({"alg": "none"}, {"sub": "x"}), "alg_none"),
        (forged({"alg": "NoNe"}, {"sub": "x"}), "alg_none"),
        (forged({"typ": "JWT"}, {"sub": "x"}), "malformed"),
        (forged({"alg": "RS256", "crit": ["exp"]}, {}), "malformed"),
        (forged({"alg": "RS256", "b64": False}, {}), "malformed"),
        (forged({"alg": "RS256", "kid": 7}, {}), "malformed"),
        (forged({"alg": "RS256"}, {}, b""), "malformed"),
        (f"{encode_segment({'alg': 'RS256'})}.W10.c2ln", "malformed"),  # payload []
        ("eyJhbGciOiJSUzI1NiJ9.e30.c2ln=", "malformed"),  # padding
        ("eyJhbGciOiJSUzI1NiJ9.e30.c2l+", "malformed"),  # base64, not base64url
        ("eyJhbGciOiJSUzI1NiJ9.e31.c2ln", "malformed"),  # bits past the last byte
        ("eyJhbGciOiJSUzI1NiJ9.é30.c2ln", "malformed"),
        ("x" * (MAX_TOKEN_BYTES + 1), "too_large"),
    ],
)
def test_malformed_tokens_are_refused_naming_why(text: str, code: str) -> None:
    assert code_of(text) == code


def test_a_member_named_twice_is_refused() -> None:
    payload = base64.urlsafe_b64encode(b'{"sub":"a","sub":"b"}').rstrip(b"=").decode()
    assert code_of(f"{encode_segment({'alg': 'RS256'})}.{payload}.c2ln") == "malformed"


def test_a_deeply_nested_payload_is_refused_without_recursion() -> None:
    deep = b"[" * 5000 + b"]" * 5000
    payload = base64.urlsafe_b64encode(b'{"a":' + deep + b"}").rstrip(b"=").decode()
    with pytest.raises(TokenError, match="nested too deep"):
        parse_token(f"{encode_segment({'alg': 'RS256'})}.{payload}.c2ln")


def test_only_allowed_algorithms_pass() -> None:
    token = parse_token(signer("HS256").token())
    assert check_algorithm(token, ["HS256", "RS256"]) == "HS256"
    with pytest.raises(TokenError) as raised:
        check_algorithm(token, ["RS256"])
    assert raised.value.code == "alg_not_allowed"
    odd = parse_token(forged({"alg": "HS512"}, {}))
    with pytest.raises(TokenError):
        check_algorithm(odd, ["HS512"])  # not one the gateway verifies at all


def check(claims: dict[str, Any], **options: Any) -> str | None:
    try:
        check_claims(claims, NOW, **options)
    except TokenError as exc:
        return exc.code
    return None


def test_expiry_with_a_leeway() -> None:
    assert check({"exp": NOW_S + 1}) is None
    assert check({"exp": NOW_S - 59}) is None  # within the default 60 s leeway
    assert check({"exp": NOW_S - 60}) == "expired"
    assert check({"exp": NOW_S - 5}, leeway_s=0) == "expired"
    assert check({"exp": NOW_S + 0.5}, leeway_s=0) is None
    assert check({}) == "missing_claim"  # exp is required unless said otherwise
    assert check({}, required=()) is None
    for bad in ("soon", True, None, float("nan"), [1]):
        assert check({"exp": bad}) in ("malformed", "missing_claim"), bad


def test_not_before_and_issued_at_with_a_leeway() -> None:
    base = {"exp": NOW_S + 100}
    assert check({**base, "nbf": NOW_S + 60}) is None
    assert check({**base, "nbf": NOW_S + 61}) == "not_yet_valid"
    assert check({**base, "iat": NOW_S + 61}) == "not_yet_valid"
    assert check({**base, "iat": NOW_S - 10_000}) is None


def test_issuer_audience_and_required_claims() -> None:
    base = {"exp": NOW_S + 100, "iss": "https://issuer.test", "aud": ["api", "other"]}
    assert check(base, issuer="https://issuer.test", audiences=["api"]) is None
    assert check(base, issuer="https://issuer.test/") == "issuer"
    assert check(base, audiences=["web"]) == "audience"
    assert check({**base, "aud": "api"}, audiences=["api"]) is None
    assert check({**base, "aud": 7}, audiences=["api"]) == "audience"
    assert check({**base, "aud": None}, audiences=["api"]) == "audience"
    assert check(base, required=("exp", "org.id")) == "missing_claim"
    assert check({**base, "org": {"id": "o1"}}, required=("exp", "org.id")) is None


def test_a_claim_by_dotted_path() -> None:
    claims = {"sub": "u1", "org": {"id": "o1", "n": 7, "ok": True, "f": 1.5, "l": [1]}}
    assert claim_at(claims, "sub") == "u1"
    assert claim_at(claims, "org.id") == "o1"
    assert claim_at(claims, "org.n") == "7"
    for absent in ("org.ok", "org.f", "org.l", "org", "org.id.x", "nope"):
        assert claim_at(claims, absent) is None, absent
    assert expires_ms({"exp": 12.5}) == 12_500 and expires_ms({}) is None


def test_b64url_is_canonical() -> None:
    assert b64url_decode("QQ", "x") == b"A"
    for bad in ("QR", "Q", "QQ==", "Q Q"):
        with pytest.raises(TokenError):
            b64url_decode(bad, "x")


# An independent model of the claim checks, compared on random claims.
def model(claims: dict[str, Any], leeway: int, issuer: str, audiences: list[str]) -> bool:
    def number(name: str) -> float | None:
        value = claims.get(name)
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None

    if "exp" not in claims or not isinstance(claims["exp"], int):
        return False
    exp, nbf, iat = number("exp"), number("nbf"), number("iat")
    now = NOW_S
    if exp is None or not now < exp + leeway:
        return False
    if nbf is not None and nbf > now + leeway:
        return False
    if iat is not None and iat > now + leeway:
        return False
    if claims.get("iss") != issuer:
        return False
    aud = claims.get("aud")
    auds = aud if isinstance(aud, list) else [aud]
    return any(a in audiences for a in auds if isinstance(a, str))


times = st.integers(NOW_S - 200, NOW_S + 200)


@settings(max_examples=500, deadline=None)
@given(
    exp=times,
    nbf=st.one_of(st.none(), times),
    iat=st.one_of(st.none(), times),
    leeway=st.integers(0, 120),
    iss=st.sampled_from(["a", "b"]),
    aud=st.one_of(st.sampled_from(["x", "y"]), st.lists(st.sampled_from(["x", "y", "z"]))),
)
def test_the_claim_checks_agree_with_a_model(  # noqa: PLR0917 - hypothesis draws each
    exp: int, nbf: int | None, iat: int | None, leeway: int, iss: str, aud: Any
) -> None:
    claims: dict[str, Any] = {"exp": exp, "iss": iss, "aud": aud}
    if nbf is not None:
        claims["nbf"] = nbf
    if iat is not None:
        claims["iat"] = iat
    accepted = check(claims, leeway_s=leeway, issuer="a", audiences=["x"]) is None
    assert accepted == model(claims, leeway, "a", ["x"])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_token_or_a_clear_refusal(text: str) -> None:
    try:
        token = parse_token(text)
    except TokenError as exc:
        assert exc.code in ("malformed", "too_large", "alg_none") and str(exc)
    else:
        assert token.alg and token.signature


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.binary(max_size=64))
def test_random_segments_never_raise_anything_else(head: bytes, body: bytes) -> None:
    def seg(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = seg(json.dumps({"alg": "ES256"}).encode() if len(head) % 2 else head)
    with contextlib.suppress(TokenError):
        parse_token(f"{header}.{seg(body)}.{seg(head or b'x')}")
