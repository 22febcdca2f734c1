"""Token signatures checked on CPython, where there is no WebCrypto: for the simulator and
the ``explain``/``simulate`` commands.

The gateway's ``SignatureVerifier`` port over the ``cryptography`` package (installed with
the project's tools by ``scripts/bootstrap``; the Worker itself never uses it), with the
parameters the platform's WebCrypto is given (RSA-PSS with a 32-byte salt, ECDSA's raw
``r || s``). HS256 needs only the standard library's :mod:`hmac`, so a simulation of an
HS256 source works without ``cryptography``; any other algorithm without it raises
:class:`NoCryptographyError` rather than calling a good signature bad.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from ..core.identity.keys import Jwk
from ..core.identity.tokens import TokenError, b64url_decode

try:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, utils
except ImportError:  # then HS256 only
    HAVE_CRYPTOGRAPHY = False
else:
    HAVE_CRYPTOGRAPHY = True


class NoCryptographyError(RuntimeError):
    """A public-key signature to check, and no ``cryptography`` package to check it with."""


def can_verify(alg: str) -> bool:
    """Whether signatures of ``alg`` can be checked here (HS256 always; the others with
    ``cryptography`` installed)."""
    return alg == "HS256" or HAVE_CRYPTOGRAPHY


def _int(key: Jwk, name: str) -> int:
    return int.from_bytes(b64url_decode(str(key.jwk[name]), name), "big")


def _public_key(alg: str, key: Jwk) -> Any:
    """``key`` as a ``cryptography`` public key."""
    if key.kty == "RSA":
        return rsa.RSAPublicNumbers(_int(key, "e"), _int(key, "n")).public_key()
    if key.kty == "EC":
        curve = ec.SECP256R1() if key.crv == "P-256" else ec.SECP384R1()
        return ec.EllipticCurvePublicNumbers(_int(key, "x"), _int(key, "y"), curve).public_key()
    x = b64url_decode(str(key.jwk["x"]), "x")
    return ed25519.Ed25519PublicKey.from_public_bytes(x)


def _check(alg: str, public: Any, data: bytes, signature: bytes) -> None:
    """Raise unless ``signature`` is ``public``'s over ``data`` for ``alg``."""
    if alg == "RS256":
        public.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
    elif alg == "PS256":
        pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32)
        public.verify(signature, data, pss, hashes.SHA256())
    elif alg in ("ES256", "ES384"):
        size = 32 if alg == "ES256" else 48
        if len(signature) != 2 * size:
            raise ValueError("an ECDSA signature is r || s of the curve's size")
        r = int.from_bytes(signature[:size], "big")
        s = int.from_bytes(signature[size:], "big")
        digest = hashes.SHA256() if alg == "ES256" else hashes.SHA384()
        public.verify(utils.encode_dss_signature(r, s), data, ec.ECDSA(digest))
    else:  # EdDSA
        public.verify(signature, data)


class LocalVerifier:
    """The ``SignatureVerifier`` port on CPython; ``calls`` counts the signatures checked."""

    def __init__(self) -> None:
        self.calls = 0

    async def verify(self, alg: str, key: Jwk, data: bytes, signature: bytes) -> bool:
        """Whether ``signature`` over ``data`` is ``key``'s for ``alg`` (False when the key
        cannot be used for it, as WebCrypto refuses it)."""
        self.calls += 1
        if not key.verifies(alg):
            return False
        if alg == "HS256":
            try:
                secret = b64url_decode(str(key.jwk["k"]), "secret")
            except TokenError:
                return False
            expected = hmac.new(secret, data, hashlib.sha256).digest()
            return hmac.compare_digest(expected, signature)
        if not can_verify(alg):
            raise NoCryptographyError(
                f"checking an {alg} signature on CPython needs the cryptography package "
                "(scripts/bootstrap installs it; or pip install cryptography)"
            )
        try:
            _check(alg, _public_key(alg, key), data, signature)
        except (InvalidSignature, ValueError, TypeError, TokenError):
            return False
        return True
