"""The keys a token may be verified with: JWK (RFC 7517), PEM, or a shared secret.

Every key becomes one public JWK (a private member such as ``d`` is dropped: a key set
that publishes one is refused outright), checked for what verification needs: an RSA
modulus of at least 2048 bits, an EC point of the curve's size, an Ed25519 key of 32
bytes, a secret of at least 32 bytes. A key's type (and curve) fixes the one algorithm
family it verifies: an HMAC token is never checked against a public key's bytes (the
classic confusion), an ``alg`` a key names is the only one it takes, and a key meant for
encryption (``use: enc``) verifies nothing.

A PEM key is a SubjectPublicKeyInfo (``-----BEGIN PUBLIC KEY-----``) read with a small
DER walker: RSA, EC P-256 and P-384, and Ed25519.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .tokens import ALGORITHMS, Token, TokenError, b64url_decode, b64url_encode

MIN_RSA_BITS = 2048
MIN_SECRET_BYTES = 32
#: The most keys a set may hold (a provider publishes a handful).
MAX_KEYS = 64
#: The most keys a token that names none (no ``kid``) is tried against.
MAX_UNNAMED_TRIES = 4
_CURVE_BYTES = {"P-256": 32, "P-384": 48}
_PRIVATE_MEMBERS = frozenset(("d", "p", "q", "dp", "dq", "qi", "oth"))
_PUBLIC_MEMBERS = {
    "RSA": ("n", "e"),
    "EC": ("crv", "x", "y"),
    "OKP": ("crv", "x"),
    "oct": ("k",),
}


class UnusableKeyError(ValueError):
    """A key (or key set) that cannot be used, and why."""


@dataclass(frozen=True, slots=True)
class Jwk:
    """One verification key as a public JWK, with what selects it."""

    kty: str
    jwk: Mapping[str, Any]
    """The members WebCrypto imports (public ones only)."""
    kid: str | None = None
    alg: str | None = None
    crv: str | None = None
    thumbprint: str = field(init=False, compare=False)
    """RFC 7638's thumbprint: the key's name in caches and logs (never a secret's bytes:
    an oct key's is a hash of them)."""

    def __post_init__(self) -> None:
        required = {name: self.jwk[name] for name in _PUBLIC_MEMBERS[self.kty]}
        required["kty"] = self.kty
        canonical = json.dumps(required, sort_keys=True, separators=(",", ":"))
        thumbprint = b64url_encode(hashlib.sha256(canonical.encode()).digest())
        object.__setattr__(self, "thumbprint", thumbprint)

    def verifies(self, alg: str) -> bool:
        """Whether this key may verify a token signed with ``alg``."""
        kty, curve = ALGORITHMS.get(alg, ("", None))
        if kty != self.kty or (curve is not None and curve != self.crv):
            return False
        return self.alg is None or self.alg == alg


def parse_jwk(data: Mapping[str, Any]) -> Jwk:
    """One JWK, checked; raises :class:`UnusableKeyError` saying what is wrong."""
    kty = data.get("kty")
    if kty not in _PUBLIC_MEMBERS:
        raise UnusableKeyError(f"kty must be RSA, EC, OKP or oct, got {kty!r}")
    if kty != "oct" and _PRIVATE_MEMBERS & set(data):
        raise UnusableKeyError(
            "the key holds private members (d, p, q, ...): publish the public key only"
        )
    use = data.get("use")
    if use is not None and use != "sig":
        raise UnusableKeyError(f"the key is for {use!r}, not for signatures")
    ops = data.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        raise UnusableKeyError("the key's key_ops do not include verify")
    kid, alg = data.get("kid"), data.get("alg")
    if kid is not None and not isinstance(kid, str):
        raise UnusableKeyError("kid must be a string")
    if alg is not None and alg not in ALGORITHMS:
        raise UnusableKeyError(f"alg {alg!r} is not one of {', '.join(ALGORITHMS)}")
    members: dict[str, Any] = {"kty": kty}
    for name in _PUBLIC_MEMBERS[kty]:
        value = data.get(name)
        if not isinstance(value, str) or not value:
            raise UnusableKeyError(f"a {kty} key needs {name!r}")
        members[name] = value
    crv = members.get("crv")
    try:
        if kty == "RSA":
            bits = int.from_bytes(b64url_decode(members["n"], "modulus"), "big").bit_length()
            if bits < MIN_RSA_BITS:
                raise UnusableKeyError(
                    f"an RSA key of {bits} bits is too short (at least {MIN_RSA_BITS})"
                )
            b64url_decode(members["e"], "exponent")
        elif kty == "EC":
            size = _CURVE_BYTES.get(str(crv))
            if size is None:
                raise UnusableKeyError(f"crv must be P-256 or P-384, got {crv!r}")
            for name in ("x", "y"):
                if len(b64url_decode(members[name], name)) != size:
                    raise UnusableKeyError(f"{name} of a {crv} key must be {size} bytes")
        elif kty == "OKP":
            if crv != "Ed25519":
                raise UnusableKeyError(f"crv must be Ed25519, got {crv!r}")
            if len(b64url_decode(members["x"], "x")) != 32:
                raise UnusableKeyError("x of an Ed25519 key must be 32 bytes")
        elif len(b64url_decode(members["k"], "k")) < MIN_SECRET_BYTES:
            raise UnusableKeyError(f"a secret must be at least {MIN_SECRET_BYTES} bytes")
    except TokenError as exc:
        raise UnusableKeyError(str(exc).replace("the ", "", 1)) from None
    if alg is not None and not Jwk(kty, members, crv=crv).verifies(alg):
        raise UnusableKeyError(f"alg {alg} does not fit a {kty} key")
    return Jwk(kty, members, kid, alg, crv if isinstance(crv, str) else None)


def parse_jwks(data: bytes) -> tuple[tuple[Jwk, ...], list[str]]:
    """The usable keys of a JWKS document, and why each other one was left out; raises
    :class:`UnusableKeyError` when the document is no key set at all."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UnusableKeyError("the key set is not JSON") from exc
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise UnusableKeyError('the key set is not a JSON object with a "keys" list')
    if len(keys) > MAX_KEYS:
        raise UnusableKeyError(f"the key set holds {len(keys)} keys, more than {MAX_KEYS}")
    usable: list[Jwk] = []
    skipped: list[str] = []
    for index, item in enumerate(keys):
        if not isinstance(item, dict):
            skipped.append(f"keys[{index}]: not an object")
            continue
        try:
            usable.append(parse_jwk(item))
        except UnusableKeyError as exc:
            skipped.append(f"keys[{index}]: {exc}")
    return tuple(usable), skipped


def secret_key(secret: str, kid: str | None = None) -> Jwk:
    """An HMAC key from a Worker secret's text (its UTF-8 bytes)."""
    return parse_jwk({"kty": "oct", "k": b64url_encode(secret.encode()), "kid": kid})


def select_keys(token: Token, keys: Sequence[Jwk]) -> list[Jwk]:
    """The keys to try for ``token``: the one its ``kid`` names (a token naming a key the
    set lacks gets none: :class:`TokenError` ``unknown_kid``), else every key that fits
    its algorithm. Raises ``key_mismatch`` when the named key cannot verify that
    algorithm (an HMAC token against an RSA key)."""
    if token.kid is not None:
        named = [key for key in keys if key.kid == token.kid]
        if not named:
            raise TokenError("unknown_kid", "the token names a key the source does not have")
        fitting = [key for key in named if key.verifies(token.alg)]
        if not fitting:
            raise TokenError("key_mismatch", f"the named key does not verify {token.alg}")
        return fitting
    fitting = [key for key in keys if key.verifies(token.alg)]
    if not fitting:
        raise TokenError("key_mismatch", f"no key of the source verifies {token.alg}")
    if len(fitting) > MAX_UNNAMED_TRIES:
        # Each try is a signature check: a token that names no key may not make many.
        raise TokenError("unknown_kid", "the token names no key (kid), and the source has many")
    return fitting


# --- PEM ----------------------------------------------------------------------------------

_PEM = re.compile(
    r"-----BEGIN PUBLIC KEY-----\s*(?P<body>[A-Za-z0-9+/=\s]+?)\s*-----END PUBLIC KEY-----"
)
_RSA = "1.2.840.113549.1.1.1"
_EC = "1.2.840.10045.2.1"
_CURVES = {"1.2.840.10045.3.1.7": "P-256", "1.3.132.0.34": "P-384"}
_ED25519 = "1.3.101.112"


def pem_key(text: str, kid: str | None = None) -> Jwk:
    """A ``PUBLIC KEY`` PEM block as a JWK; raises :class:`UnusableKeyError` saying why not."""
    match = _PEM.search(text)
    if match is None:
        raise UnusableKeyError("not a PEM public key (-----BEGIN PUBLIC KEY----- ...)")
    try:
        der = base64.b64decode("".join(match.group("body").split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise UnusableKeyError("the PEM body is not base64") from exc
    try:
        algorithm, parameters, key = _spki(der)
    except (IndexError, ValueError) as exc:
        raise UnusableKeyError(f"the PEM key is not a SubjectPublicKeyInfo: {exc}") from None
    jwk: dict[str, Any]
    if algorithm == _RSA:
        modulus, exponent = _rsa_public(key)
        jwk = {"kty": "RSA", "n": b64url_encode(modulus), "e": b64url_encode(exponent)}
    elif algorithm == _EC:
        curve = _CURVES.get(parameters or "")
        if curve is None:
            raise UnusableKeyError("the PEM key's curve is not P-256 or P-384")
        size = _CURVE_BYTES[curve]
        if len(key) != 1 + 2 * size or key[0] != 4:
            raise UnusableKeyError("the PEM key's EC point is not uncompressed")
        jwk = {
            "kty": "EC",
            "crv": curve,
            "x": b64url_encode(key[1 : 1 + size]),
            "y": b64url_encode(key[1 + size :]),
        }
    elif algorithm == _ED25519:
        jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url_encode(key)}
    else:
        raise UnusableKeyError("the PEM key is not RSA, EC or Ed25519")
    if kid is not None:
        jwk["kid"] = kid
    return parse_jwk(jwk)


def _der(data: bytes, at: int) -> tuple[int, bytes, int]:
    """The DER element at ``at``: its tag, its contents, and where the next one starts."""
    tag = data[at]
    length = data[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 4:
            raise ValueError("bad length")
        length = int.from_bytes(data[at : at + count], "big")
        at += count
    end = at + length
    if end > len(data):
        raise ValueError("truncated")
    return tag, data[at:end], end


def _oid(contents: bytes) -> str:
    first = contents[0]
    parts = [first // 40, first % 40] if first < 80 else [2, first - 80]
    value = 0
    for byte in contents[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    return ".".join(str(part) for part in parts)


def _spki(der: bytes) -> tuple[str, str | None, bytes]:
    tag, spki, _ = _der(der, 0)
    if tag != 0x30:
        raise ValueError("not a SEQUENCE")
    tag, algorithm, after = _der(spki, 0)
    if tag != 0x30:
        raise ValueError("no AlgorithmIdentifier")
    tag, oid, rest = _der(algorithm, 0)
    if tag != 0x06:
        raise ValueError("no algorithm OID")
    parameters = None
    if rest < len(algorithm) and algorithm[rest] == 0x06:
        parameters = _oid(_der(algorithm, rest)[1])
    tag, bits, _ = _der(spki, after)
    if tag != 0x03 or not bits or bits[0] != 0:
        raise ValueError("no key BIT STRING")
    return _oid(oid), parameters, bits[1:]


def _rsa_public(key: bytes) -> tuple[bytes, bytes]:
    tag, sequence, _ = _der(key, 0)
    if tag != 0x30:
        raise ValueError("no RSAPublicKey")
    tag, modulus, after = _der(sequence, 0)
    tag_e, exponent, _ = _der(sequence, after)
    if tag != 0x02 or tag_e != 0x02:
        raise ValueError("no modulus or exponent")
    return modulus.lstrip(b"\x00"), exponent.lstrip(b"\x00")


def keys_of(items: Iterable[Jwk]) -> tuple[Jwk, ...]:
    """The keys, each once (by thumbprint)."""
    seen: dict[str, Jwk] = {}
    for key in items:
        seen.setdefault(key.thumbprint, key)
    return tuple(seen.values())
