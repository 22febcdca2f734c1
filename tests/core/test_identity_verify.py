"""A caller's identity from its token: found, bounded, read, its key selected, its
signature checked (here with ``cryptography``), its claims checked; verified tokens
remembered; the attacks of issue 39 refused, each for its reason."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import random
from typing import Any

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.http.messages import Client, Headers, Request
from edge_limiter.core.identity.keys import Jwk, parse_jwk
from edge_limiter.core.identity.settings import AuthSource, TokenPlace
from edge_limiter.core.identity.tokens import TokenError, encode_segment
from edge_limiter.core.identity.verify import (
    MAX_REMEMBERED_MS,
    Identity,
    VerifiedTokens,
    check_signature,
    check_token_claims,
    find_token,
    read_token,
    token_digest,
)

from .identity_keys import ALGS, SECRET, CryptographyVerifier, signer

NOW_S = 1_800_000_000
NOW = NOW_S * 1000
ISSUER = "https://auth.example.com/"


def source(**changes: Any) -> AuthSource:
    values: dict[str, Any] = {
        "name": "main",
        "token": TokenPlace("bearer"),
        "algorithms": frozenset(ALGS),
        "issuer": ISSUER,
        "audiences": ("api",),
    }
    values.update(changes)
    return AuthSource(**values)


def keys(*algs: str, kid: str = "k1") -> tuple[Jwk, ...]:
    return tuple(parse_jwk({**signer(alg).public_jwk, "kid": kid}) for alg in algs)


def claims(**changes: Any) -> dict[str, Any]:
    return {"sub": "user-1", "iss": ISSUER, "aud": "api", "exp": NOW_S + 600, **changes}


def verify(text: str, src: AuthSource, with_keys: tuple[Jwk, ...]) -> Identity:
    """Every step, as the gateway's stage runs them."""
    token = read_token(text, src)
    asyncio.run(check_signature(token, with_keys, CryptographyVerifier()))
    return check_token_claims(token, src, NOW)


def refusal(text: str, src: AuthSource | None = None, with_keys: Any = None) -> str:
    all_keys = keys(*ALGS) if with_keys is None else with_keys
    with pytest.raises(TokenError) as raised:
        verify(text, src or source(), all_keys)
    return raised.value.code


@pytest.mark.parametrize("alg", ALGS)
def test_a_token_of_every_algorithm_is_verified(alg: str) -> None:
    text = signer(alg).token(claims(plan="pro"), kid="k1")
    identity = verify(text, source(), keys(*ALGS))
    assert identity.claims["plan"] == "pro" and identity.source == "main"
    assert identity.expires_at == (NOW_S + 600) * 1000


@pytest.mark.parametrize("alg", ALGS)
def test_a_token_with_another_signature_is_refused(alg: str) -> None:
    text = signer(alg).token(claims(), kid="k1")
    head, payload, _ = text.split(".")
    # The same header and claims under another signature of the right size.
    forged_sig = base64.urlsafe_b64encode(os.urandom(len(text.split(".")[2]) * 3 // 4))
    forged = f"{head}.{payload}.{forged_sig.rstrip(b'=').decode()}"
    assert refusal(forged) in ("bad_signature", "malformed")


def test_alg_none_is_refused() -> None:
    text = f"{encode_segment({'alg': 'none'})}.{encode_segment(claims())}.c2ln"
    assert refusal(text) == "alg_none"
    unsigned = f"{encode_segment({'alg': 'none'})}.{encode_segment(claims())}."
    assert refusal(unsigned) in ("alg_none", "malformed")


def test_hs256_signed_with_the_rsa_public_keys_bytes_is_refused() -> None:
    pem = signer("RS256").public_pem.encode()
    header = {"alg": "HS256", "typ": "JWT", "kid": "k1"}
    signing_input = f"{encode_segment(header)}.{encode_segment(claims(plan='enterprise'))}"
    mac = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
    text = f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    # The key the kid names is RSA: it never verifies an HMAC token.
    assert refusal(text, with_keys=keys("RS256")) == "key_mismatch"
    # A source allowing only RS256 refuses the algorithm before any key is looked at.
    assert refusal(text, source(algorithms=frozenset({"RS256"})), keys("RS256")) == (
        "alg_not_allowed"
    )
    # Even beside a real secret, the MAC made with the public key's bytes is wrong.
    secret = parse_jwk({**signer("HS256").public_jwk, "kid": "k1"})
    assert refusal(text, with_keys=(secret,)) == "bad_signature"


def test_another_issuer_or_audience_is_refused() -> None:
    rs = signer("RS256")
    assert refusal(rs.token(claims(iss="https://evil.example/"), kid="k1")) == "issuer"
    assert refusal(rs.token(claims(aud="web"), kid="k1")) == "audience"


def test_an_expired_token_passes_within_the_leeway_only() -> None:
    rs = signer("RS256")
    inside = rs.token(claims(exp=NOW_S - 30), kid="k1")
    outside = rs.token(claims(exp=NOW_S - 61), kid="k1")
    assert verify(inside, source(), keys("RS256")).claims["sub"] == "user-1"
    assert refusal(outside) == "expired"
    assert refusal(inside, source(leeway_ms=0)) == "expired"


def test_an_unknown_kid_is_refused_as_such() -> None:
    text = signer("ES256").token(claims(), kid="rotated-away")
    assert refusal(text, with_keys=keys("ES256")) == "unknown_kid"


def test_a_token_over_the_sources_bound_is_refused_before_it_is_read() -> None:
    text = signer("RS256").token(claims(pad="x" * 9000), kid="k1")
    assert refusal(text) == "too_large"
    assert refusal("x" * 10_000_000) == "too_large"
    assert verify(text, source(max_token_bytes=16 * 1024), keys("RS256")).claims["pad"]


def test_a_deeply_nested_payload_is_refused() -> None:
    deep = {"a": []}
    node: Any = deep["a"]
    for _ in range(100):
        node.append([])
        node = node[0]
    text = jwt.encode({**claims(), "deep": deep}, SECRET, algorithm="HS256")
    assert refusal(text) == "malformed"


def test_required_claims_are_checked() -> None:
    text = signer("EdDSA").token(claims(), kid="k1")
    assert refusal(text, source(required_claims=("exp", "org.id"))) == "missing_claim"


# --- where the token is -----------------------------------------------------------------


def request(*headers: tuple[str, str]) -> Request:
    return Request("GET", "/v1/x", headers=Headers(headers), client=Client("203.0.113.9"))


def test_the_token_is_found_where_the_source_says() -> None:
    bearer = TokenPlace("bearer")
    assert find_token(request(("authorization", "Bearer abc")), bearer) == "abc"
    assert find_token(request(("authorization", "bearer  abc ")), bearer) == "abc"
    assert find_token(request(), bearer) is None
    for bad in ("Basic YTpi", "Bearer", "Bearer a b", "abc"):
        with pytest.raises(TokenError):
            find_token(request(("authorization", bad)), bearer)
    with pytest.raises(TokenError):
        find_token(request(("authorization", "Bearer a"), ("authorization", "Bearer b")), bearer)
    header = TokenPlace("header", "cf-access-jwt-assertion")
    assert find_token(request(("Cf-Access-Jwt-Assertion", "t1")), header) == "t1"
    cookie = TokenPlace("cookie", "session")
    assert find_token(request(("cookie", "a=1; session=t2")), cookie) == "t2"


# --- verified tokens remembered -------------------------------------------------------------


def test_a_verified_token_is_remembered_until_its_exp_and_never_longer() -> None:
    remembered = VerifiedTokens(size=3)
    soon = Identity("main", {"sub": "a"}, NOW + 10_000)
    digest = token_digest("main", "token-a")
    remembered.put(digest, soon, NOW)
    assert remembered.get(digest, NOW + 9_999) is soon
    assert remembered.get(digest, NOW + 10_000) is None and len(remembered) == 0
    late = Identity("main", {"sub": "b"}, NOW + 86_400_000)
    remembered.put(digest, late, NOW)
    assert remembered.get(digest, NOW + MAX_REMEMBERED_MS - 1) is late
    assert remembered.get(digest, NOW + MAX_REMEMBERED_MS) is None
    remembered.put(digest, Identity("main", {}, NOW - 1), NOW)  # past its exp already
    assert remembered.get(digest, NOW) is None


def test_the_memory_of_verified_tokens_is_bounded_least_recent_first() -> None:
    remembered = VerifiedTokens(size=2)
    identity = Identity("main", {}, None)
    for name in ("a", "b"):
        remembered.put(name, identity, NOW)
    assert remembered.get("a", NOW) is identity  # a is now the most recent
    remembered.put("c", identity, NOW)
    assert remembered.get("b", NOW) is None and remembered.get("a", NOW) is identity
    assert len(remembered) == 2
    # Another source's digest of the same token is another entry.
    assert token_digest("main", "t") != token_digest("other", "t")


# --- the claim checks against an independent model ------------------------------------------


def model_accepts(values: dict[str, Any], leeway_s: int, required: tuple[str, ...]) -> bool:
    """What RFC 7519 section 4.1 says, written plainly and separately."""
    for name in required:
        if name not in values:
            return False
    for name in ("exp", "nbf", "iat"):
        value = values.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return False
    if "exp" in values and not values["exp"] + leeway_s > NOW_S:
        return False
    if "nbf" in values and values["nbf"] > NOW_S + leeway_s:
        return False
    if "iat" in values and values["iat"] > NOW_S + leeway_s:
        return False
    if values.get("iss") != ISSUER:
        return False
    aud = values.get("aud")
    listed = aud if isinstance(aud, list) else [aud]
    return "api" in [item for item in listed if isinstance(item, str)]


moments = st.integers(NOW_S - 400, NOW_S + 400)
maybe = st.one_of(st.none(), moments, st.sampled_from(["soon", True, 1.5e300]))


@settings(max_examples=600, deadline=None)
@given(
    exp=maybe,
    nbf=maybe,
    iat=maybe,
    iss=st.sampled_from([ISSUER, ISSUER.rstrip("/"), None]),
    aud=st.one_of(st.sampled_from(["api", "web", None]), st.lists(st.sampled_from(["api", "x"]))),
    leeway_s=st.integers(0, 300),
    required=st.sampled_from([(), ("exp",), ("exp", "sub"), ("nbf",)]),
)
def test_the_sources_claim_checks_agree_with_a_model(  # noqa: PLR0917 - drawn
    exp: Any, nbf: Any, iat: Any, iss: Any, aud: Any, leeway_s: int, required: tuple[str, ...]
) -> None:
    values = {"exp": exp, "nbf": nbf, "iat": iat, "iss": iss, "aud": aud, "sub": "u"}
    values = {name: value for name, value in values.items() if value is not None}
    src = source(leeway_ms=leeway_s * 1000, required_claims=required)
    token = read_token(jwt.encode(values, SECRET, algorithm="HS256"), src)
    try:
        check_token_claims(token, src, NOW)
        accepted = True
    except TokenError:
        accepted = False
    # A huge float exp is a number to both: the model takes only ints, so skip those.
    if any(isinstance(values.get(n), float) for n in ("exp", "nbf", "iat")):
        return
    assert accepted == model_accepts(values, leeway_s, required)


# --- the verifier fuzzed with malformed tokens -----------------------------------------------


def _mutations(rng: random.Random, text: str) -> str:
    choice = rng.randrange(9)
    chars = list(text)
    if choice == 0 and chars:  # flip one character
        at = rng.randrange(len(chars))
        chars[at] = rng.choice("AZaz09-_.=+/ \x00é")
    elif choice == 1:  # cut somewhere
        return text[: rng.randrange(len(text) + 1)]
    elif choice == 2:  # swap segments
        parts = text.split(".")
        rng.shuffle(parts)
        return ".".join(parts)
    elif choice == 3:  # another header
        header = rng.choice(
            [
                {"alg": "none"},
                {"alg": "HS256", "kid": "k1"},
                {"alg": "RS256", "kid": ["k1"]},
                {"alg": "RS256", "crit": ["x"]},
                {"alg": "ES256", "kid": "k1", "b64": False},
                {"alg": "EdDSA"},
                [],
            ]
        )
        segment = base64.urlsafe_b64encode(json.dumps(header).encode()).rstrip(b"=").decode()
        return ".".join([segment, *text.split(".")[1:]])
    elif choice == 4:  # another payload, same signature
        payload = rng.choice([claims(plan="enterprise"), claims(sub="admin"), {"a": 1}, "x", 7])
        segment = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
        parts = [*text.split("."), ""]
        return ".".join([parts[0], segment, *parts[2:]])
    elif choice == 5:  # extra dots
        return text + "." * rng.randrange(1, 4)
    elif choice == 6:  # random bytes as segments
        return ".".join(
            base64.urlsafe_b64encode(rng.randbytes(rng.randrange(0, 80))).rstrip(b"=").decode()
            for _ in range(3)
        )
    elif choice == 7:  # padding
        return text + "=" * rng.randrange(1, 3)
    else:  # duplicated member in the payload
        parts = [*text.split("."), "", ""]
        raw = b'{"sub":"user-1","sub":"admin","exp":%d}' % (NOW_S + 600)
        return ".".join([parts[0], base64.urlsafe_b64encode(raw).rstrip(b"=").decode(), parts[2]])
    return "".join(chars)


def test_the_verifier_fuzzed_with_malformed_tokens_refuses_them_clearly() -> None:
    seed = int(os.environ.get("IDENTITY_FUZZ_SEED", random.randrange(1 << 30)))
    print(f"identity fuzz seed: {seed} (IDENTITY_FUZZ_SEED={seed} to replay)")
    rng = random.Random(seed)
    valid = [signer(alg).token(claims(), kid="k1") for alg in ALGS]
    all_keys = keys(*ALGS)
    accepted_changed = 0
    for round_ in range(1500):
        original = rng.choice(valid)
        text = _mutations(rng, original)
        for _ in range(rng.randrange(0, 3)):
            text = _mutations(rng, text)
        try:
            identity = verify(text, source(), all_keys)
        except TokenError as exc:
            assert exc.code and str(exc), (seed, round_, text)
            continue
        # Accepted: then it says what a valid token said (a mutation that changed nothing
        # the signature covers, such as one that kept the token whole).
        assert identity.claims == claims(), (seed, round_, text)
        accepted_changed += text != original
    assert accepted_changed == 0, seed
