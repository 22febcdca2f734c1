"""Keys and tokens for the identity tests, made with maintained libraries (cryptography,
PyJWT): what real issuers would hand the gateway."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

SECRET = "a-test-secret-that-is-long-enough-0123456789"


@dataclass(frozen=True)
class Signer:
    """One algorithm's signing key and its public JWK and PEM."""

    alg: str
    private: Any
    public_jwk: dict[str, Any]
    public_pem: str

    def token(self, claims: dict[str, Any] | None = None, **header: Any) -> str:
        body = {"sub": "user-1", "exp": int(time.time()) + 3600, **(claims or {})}
        return jwt.encode(body, self.private, algorithm=self.alg, headers=header or None)


def _public(private: Any, alg: str) -> tuple[dict[str, Any], str]:
    public = private.public_key()
    algorithm = jwt.get_algorithm_by_name(alg)
    jwk = json.loads(algorithm.to_jwk(public))
    pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    return jwk, pem


@cache
def signer(alg: str) -> Signer:
    """A fresh key for ``alg`` (made once per test session)."""
    if alg == "HS256":
        jwk = {"kty": "oct", "k": jwt.utils.base64url_encode(SECRET.encode()).decode()}
        return Signer(alg, SECRET, jwk, "")
    if alg in ("RS256", "PS256"):
        private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    elif alg == "ES384":
        private = ec.generate_private_key(ec.SECP384R1())
    elif alg == "EdDSA":
        private = ed25519.Ed25519PrivateKey.generate()
    else:
        raise ValueError(alg)
    jwk, pem = _public(private, alg)
    return Signer(alg, private, jwk, pem)


ALGS = ("RS256", "PS256", "ES256", "ES384", "EdDSA", "HS256")


class CryptographyVerifier:
    """The ``SignatureVerifier`` port over ``cryptography`` (through PyJWT's algorithm
    objects), as WebCrypto is on the platform; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def verify(self, alg: str, key: Any, data: bytes, signature: bytes) -> bool:
        self.calls += 1
        algorithm = jwt.get_algorithm_by_name(alg)
        try:
            if key.kty == "oct":
                prepared: Any = jwt.utils.base64url_decode(key.jwk["k"])
            else:
                prepared = algorithm.from_jwk(json.dumps(dict(key.jwk)))
            return bool(algorithm.verify(data, prepared, signature))
        except (ValueError, TypeError, jwt.exceptions.InvalidKeyError):
            return False
