"""``edge-limiter explain`` and ``simulate`` with a token or an API key: verified offline
(inline keys, a secret from the environment, ``--jwks FILE``; a record from
``--api-key-record``), then the Worker's own identity stage decides the tier, the key and
the limits; what cannot be verified offline is said, never shown as the Worker's 401."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from edge_limiter.core.identity.keys import parse_jwk, secret_key
from edge_limiter.core.identity.tokens import b64url_encode
from edge_limiter.testing import Simulator
from edge_limiter.testing.signatures import LocalVerifier
from edge_limiter.tools import check_config

from .core.identity_keys import ALGS, SECRET, signer

ISSUER = "https://auth.example.com/"
JWKS_URL = "https://auth.example.com/.well-known/jwks.json"
WRANGLER = (
    'name = "x"\nmain = "build/worker/entry.py"\ncompatibility_date = "2025-11-01"\n'
    '[[kv_namespaces]]\nbinding = "API_KEYS"\nid = "0123"\n'
)
PLANS = (
    "[tiers.plans]\n"
    'anon = "1/minute"\nfree = "2/minute"\n'
    'pro = { limits = "10/minute", routes = { search = "3/minute" } }\n'
    'internal = "exempt"\n'
)


def run(tmp_path: Path, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``edge-limiter explain|simulate ARGS`` on ``config``, in this process."""
    (tmp_path / "wrangler.toml").write_text(WRANGLER)
    (tmp_path / "edge-limiter.toml").write_text(config)
    command, *rest = args
    main = check_config.explain_main if command == "explain" else check_config.simulate_main
    files = ["--config", str(tmp_path / "edge-limiter.toml")]
    files += ["--wrangler", str(tmp_path / "wrangler.toml")]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([*rest, *files])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def explained(tmp_path: Path, config: str, *args: str) -> dict[str, Any]:
    done = run(tmp_path, config, "explain", "GET", *args, "--json")
    assert done.stderr == "", done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def jwt_config(
    keys: str,
    on_invalid: str = "anonymous",
    algorithms: tuple[str, ...] = ("RS256", "PS256", "ES256", "ES384", "EdDSA", "HS256"),
) -> str:
    return (
        'origin = "https://api.example.com"\n'
        f'[auth.main]\nissuer = "{ISSUER}"\n'
        f"algorithms = {json.dumps(list(algorithms))}\n"
        f"{keys}\n"
        '[tiers]\nby = "jwt:plan"\ndefault = "free"\nanonymous = "anon"\n'
        f"{PLANS}"
        '[[routes]]\nname = "search"\nmatch = { path = "/v1/search" }\nlimits = "30/minute"\n'
        f'auth = "main"\ntiers = true\nkey = "jwt:sub"\non_invalid = "{on_invalid}"\n'
        '[[routes]]\nname = "open"\nmatch = { path = "/open" }\nlimits = "5/minute"\n'
    )


def inline(*algs: str) -> str:
    """The source's keys: each ``alg``'s public JWK as a TOML inline table."""
    tables = []
    for alg in algs:
        jwk = {**signer(alg).public_jwk, "kid": f"{alg}-1"}
        table = ", ".join(f"{name} = {json.dumps(value)}" for name, value in jwk.items())
        tables.append(f"{{ {table} }}")
    return f"keys = [{', '.join(tables)}]"


JWKS_CONFIG = jwt_config(f'jwks_url = "{JWKS_URL}"\nsecret = "$JWT_SECRET"')
SEARCH = "https://api.example.com/v1/search"


def token(alg: str = "RS256", kid: str | None = None, **claims: Any) -> str:
    body = {"iss": ISSUER, "sub": "user-1", "plan": "pro", "exp": int(time.time()) + 3600}
    return signer(alg).token({**body, **claims}, kid=kid or f"{alg}-1")


def jwks_file(tmp_path: Path, *algs: str) -> Path:
    keys = [{**signer(alg).public_jwk, "kid": f"{alg}-1"} for alg in algs]
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": keys}))
    return path


@pytest.mark.parametrize("alg", ["RS256", "PS256", "ES256", "ES384", "EdDSA"])
def test_a_token_verified_with_the_key_set_file_shows_its_tier_key_and_limits(
    tmp_path: Path, alg: str
) -> None:
    jwks = str(jwks_file(tmp_path, alg))
    result = explained(tmp_path, JWKS_CONFIG, SEARCH, "--token", token(alg), "--jwks", jwks)
    assert result["identity"]["token"] == "verified"
    assert result["identity"]["claims"]["sub"] == "user-1"
    assert result["tier"] == "pro"
    assert result["key"] == "jwt:sub=user-1"
    assert result["limits"] == ["3 per minute"]  # pro's on this route, not the route's 30
    assert "status" not in result


def test_a_token_whose_keys_come_from_a_jwks_url_cannot_be_verified_without_them(
    tmp_path: Path,
) -> None:
    done = run(tmp_path, JWKS_CONFIG, "explain", "GET", SEARCH, "--token", token())
    assert done.returncode == 2 and done.stdout == ""
    assert "cannot be verified offline" in done.stderr and JWKS_URL in done.stderr
    assert "--jwks" in done.stderr
    simulated = run(tmp_path, JWKS_CONFIG, "simulate", "GET", SEARCH, "--token", token())
    assert simulated.returncode == 2 and "cannot be verified offline" in simulated.stderr


def test_an_hs256_token_is_verified_with_the_secret_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hs = token("HS256")
    monkeypatch.delenv("JWT_SECRET", raising=False)
    done = run(tmp_path, JWKS_CONFIG, "explain", "GET", SEARCH, "--token", hs)
    assert done.returncode == 2
    assert "JWT_SECRET" in done.stderr and "environment variable" in done.stderr
    monkeypatch.setenv("JWT_SECRET", SECRET)
    result = explained(tmp_path, JWKS_CONFIG, SEARCH, "--token", hs)
    assert result["tier"] == "pro" and result["key"] == "jwt:sub=user-1"
    monkeypatch.setenv("JWT_SECRET", SECRET + "-but-another")
    wrong = explained(tmp_path, JWKS_CONFIG, SEARCH, "--token", hs)
    assert wrong["invalid"] == "bad_signature" and wrong["tier"] == "anon"


def test_refused_tokens_get_what_the_route_says(tmp_path: Path) -> None:
    anonymous = jwt_config(inline("ES256", "ES384"), algorithms=("ES256", "ES384"))
    forged = signer("ES384").token(
        {"iss": ISSUER, "sub": "victim", "plan": "internal", "exp": int(time.time()) + 60},
        kid="ES256-1",
    )
    expired = token("ES256", exp=int(time.time()) - 3600)
    other_issuer = token("ES256", iss="https://evil.example/")
    for bad, reason in (
        (forged, "key_mismatch"),
        (expired, "expired"),
        (other_issuer, "issuer"),
        ("not.a.token", "malformed"),
    ):
        result = explained(tmp_path, anonymous, SEARCH, "--token", bad, "--ip", "203.0.113.9")
        assert result["invalid"] == reason, bad
        assert result["tier"] == "anon" and result["limits"] == ["1 per minute"]
        assert result["key"] == "anonymous|ip=203.0.113.9"  # never the claimed sub
    rejecting = jwt_config(inline("ES256"), on_invalid="reject", algorithms=("ES256",))
    done = run(tmp_path, rejecting, "explain", "GET", SEARCH, "--token", expired, "--json")
    result = json.loads(done.stdout)
    assert done.returncode == 2
    assert result["status"] == 401 and result["error"] == "invalid_token: expired"
    assert result["key"] == "invalid_token|ip="  # counted under the address
    assert result["limits"] == ["30 per minute"] and "tier" not in result
    missing = explained(tmp_path, rejecting, SEARCH)
    assert missing["status"] == 401 and missing["invalid"] == "missing"


def test_a_token_in_a_named_header_or_cookie_goes_where_the_source_reads_it(
    tmp_path: Path,
) -> None:
    for place in ("header:cf-access-jwt-assertion", "cookie:session"):
        config = jwt_config(inline("EdDSA") + f'\ntoken = "{place}"', algorithms=("EdDSA",))
        result = explained(tmp_path, config, SEARCH, "--token", token("EdDSA"))
        assert result["tier"] == "pro" and result["key"] == "jwt:sub=user-1", place
    both = run(
        tmp_path,
        jwt_config(inline("EdDSA"), algorithms=("EdDSA",)),
        "explain",
        "GET",
        SEARCH,
        "--token",
        token("EdDSA"),
        "--header",
        "Authorization: Bearer x",
    )
    assert both.returncode == 2 and "--header Authorization" in both.stderr


def test_a_route_without_identity_says_the_token_is_not_read(tmp_path: Path) -> None:
    config = jwt_config(inline("ES256"), algorithms=("ES256",))
    result = explained(tmp_path, config, "https://api.example.com/open", "--token", token("ES256"))
    assert result["route"] == "open" and "identity" not in result
    assert any("checks no identity" in note for note in result["notes"])


KV_CONFIG = (
    'origin = "https://api.example.com"\n'
    '[tiers]\nby = "kv:API_KEYS"\ndefault = "free"\nanonymous = "anon"\n'
    f"{PLANS}"
    '[[routes]]\nname = "search"\nmatch = { path = "/v1/*" }\nlimits = "30/minute"\n'
    'tiers = true\nkey = "apikey"\n'
)
API = "https://api.example.com/v1/x"


def test_an_api_key_with_its_record_shows_its_owner_tier_and_limits(tmp_path: Path) -> None:
    record = '{"tier": "pro", "owner": "acme"}'
    one = explained(tmp_path, KV_CONFIG, API, "--api-key", "sk_one", "--api-key-record", record)
    two = explained(tmp_path, KV_CONFIG, API, "--api-key", "sk_two", "--api-key-record", record)
    assert one["key"] == two["key"] == "apikey=owner%3Aacme"  # one owner, one counter
    assert one["tier"] == "pro" and one["limits"] == ["3 per minute"]
    assert one["identity"]["record"] == {"tier": "pro", "owner": "acme"}
    own = explained(
        tmp_path, KV_CONFIG, API, "--api-key", "sk_one", "--api-key-record",
        '{"tier": "free", "limits": "7/minute"}',
    )  # fmt: skip
    assert own["tier"] == "free" and own["limits"] == ["7 per minute"]
    assert own["key"].startswith("apikey=key%3A")
    exempt = explained(
        tmp_path, KV_CONFIG, API, "--api-key", "k", "--api-key-record", '{"tier": "internal"}'
    )
    assert exempt["exempt"] is True and exempt["limits"] == []
    unknown = explained(tmp_path, KV_CONFIG, API, "--api-key", "sk_nobody")
    assert unknown["status"] == 401 and unknown["invalid"] == "unknown_key"
    assert "none given" in unknown["identity"]["record"]


def test_a_record_the_worker_would_not_read_is_refused_by_name(tmp_path: Path) -> None:
    for record, said in (
        ('{"tier": "pro", "plan": "x"}', "unknown fields plan"),
        ("{tier: pro}", "not JSON"),
        ('{"tier": "pro", "limits": "5/fortnight"}', "limits"),
    ):
        done = run(
            tmp_path, KV_CONFIG, "explain", "GET", API, "--api-key", "k",
            "--api-key-record", record,
        )  # fmt: skip
        assert done.returncode == 2 and "--api-key-record" in done.stderr, record
        assert said in done.stderr, done.stderr
    alone = run(tmp_path, KV_CONFIG, "explain", "GET", API, "--api-key-record", '{"tier": "pro"}')
    assert alone.returncode == 2 and "give the key too" in alone.stderr


def test_simulate_counts_the_verified_caller_under_its_tier(tmp_path: Path) -> None:
    jwks = str(jwks_file(tmp_path, "RS256"))
    done = run(
        tmp_path, JWKS_CONFIG, "simulate", "GET", SEARCH, "--token", token(), "--jwks", jwks,
        "--times", "4", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert [r["status"] for r in results] == [200, 200, 200, 429]
    assert results[0]["policy"] == '"pro";q=3;w=60'
    assert [r["forwarded"] for r in results] == [1, 1, 1, 0]  # the key set fetch not counted
    text = run(
        tmp_path, JWKS_CONFIG, "simulate", "GET", SEARCH, "--token", token(), "--jwks", jwks,
    )  # fmt: skip
    assert "tier:             pro" in text.stdout and "jwt:sub=user-1" in text.stdout


def test_simulate_of_a_config_with_identity_and_no_token_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It raised a ConfigError (no verifier, the secret's placeholder too short) before.
    monkeypatch.delenv("JWT_SECRET", raising=False)
    done = run(tmp_path, JWKS_CONFIG, "simulate", "GET", SEARCH, "--times", "2", "--json")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert [r["status"] for r in results] == [200, 429]  # the anonymous tier's 1/minute
    assert results[0]["policy"] == '"anon";q=1;w=60'


def test_simulate_an_api_key_with_its_record(tmp_path: Path) -> None:
    done = run(
        tmp_path, KV_CONFIG, "simulate", "GET", API, "--api-key", "sk_one",
        "--api-key-record", '{"tier": "free"}', "--times", "3", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [r["status"] for r in json.loads(done.stdout)] == [200, 200, 429]
    unknown = run(tmp_path, KV_CONFIG, "simulate", "GET", API, "--api-key", "x", "--json")
    assert [r["status"] for r in json.loads(unknown.stdout)] == [401]


def test_the_simulator_verifies_tokens_and_reads_records_the_admin_api_stores() -> None:
    config = {
        "origin": "https://api.example.com",
        "tiers": {
            "by": "kv:API_KEYS",
            "default": "free",
            "plans": {"free": "1/minute", "pro": "3/minute"},
        },
        "routes": [
            {"name": "api", "match": {"path": "/v1/*"}, "limits": "9/minute", "tiers": True,
             "key": "apikey"},
        ],
    }  # fmt: skip
    sim = Simulator(config, admin_token="t" * 32)
    stored = sim.admin("POST", "/api/api-keys", {"key": "sk_a", "tier": "pro", "owner": "acme"})
    assert stored.status in (200, 201), stored.text
    sim.admin("POST", "/api/api-keys", {"key": "sk_b", "tier": "pro", "owner": "acme"})
    statuses = [
        sim.request("GET", API, headers={"x-api-key": key}).status
        for key in ("sk_a", "sk_b", "sk_a", "sk_b")
    ]
    assert statuses == [200, 200, 200, 429]  # two keys of one owner share pro's 3/minute
    namespace = sim.kv("API_KEYS")
    assert namespace is not None and len(namespace.values) == 2
    assert sim.kv("OTHER") is None


@pytest.mark.parametrize("alg", ALGS)
def test_the_local_verifier_checks_what_webcrypto_checks(alg: str) -> None:
    from edge_limiter.core.identity.tokens import parse_token

    verifier = LocalVerifier()
    parsed = parse_token(token(alg))
    key = (
        secret_key(SECRET)
        if alg == "HS256"
        else parse_jwk({**signer(alg).public_jwk, "kid": f"{alg}-1"})
    )

    def check(data: bytes, signature: bytes, with_key: Any = key, as_alg: str = alg) -> bool:
        return asyncio.run(verifier.verify(as_alg, with_key, data, signature))

    assert check(parsed.signing_input, parsed.signature)
    assert not check(parsed.signing_input + b"x", parsed.signature)
    flipped = bytes([parsed.signature[0] ^ 1]) + parsed.signature[1:]
    assert not check(parsed.signing_input, flipped)
    other = "ES256" if alg != "ES256" else "ES384"
    assert not check(parsed.signing_input, parsed.signature, as_alg=other)  # not this key's
    if alg == "RS256":
        # HS256 "signed" with the RSA key's public bytes is never checked against them.
        fake = secret_key(b64url_encode(json.dumps(signer(alg).public_jwk).encode())[:64])
        assert not check(parsed.signing_input, parsed.signature, with_key=fake)
