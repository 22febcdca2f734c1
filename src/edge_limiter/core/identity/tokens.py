"""A JSON Web Token read strictly, and the checks that need no signature.

A token is three base64url segments (RFC 7515 compact serialization): a header and a
payload that are JSON objects, and a signature over ``header.payload``. Everything an
attacker can vary is refused rather than interpreted: a token over
:data:`MAX_TOKEN_BYTES`, a segment that is not canonical base64url (padding, other
characters, bits past the last byte), JSON that is not an object, nested deeper than
:data:`MAX_JSON_DEPTH` or that names a member twice (two ``sub`` claims: which one an
origin reads is a guess), ``alg: none``, an algorithm the source does not allow, a
``crit`` header (no extension is understood here) and an unencoded payload (``b64``).

The claims are checked with time as an argument: ``exp``, ``nbf`` and ``iat`` with a
leeway, ``iss`` exactly, ``aud`` against the accepted audiences, and the claims a source
requires. A claim used as a key is read by a dotted path (``org.id``) and must be a
string or an integer.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..http import bounded_json

#: The longest token read (16 KiB): an access token with a few dozen claims is 1-2 KB;
#: a larger one is refused before any of it is decoded.
MAX_TOKEN_BYTES = 16 * 1024
#: How deep a header or payload may nest: claims are flat or a level or two deep.
MAX_JSON_DEPTH = 32
#: The algorithms a source may allow, and the key type (and curve) each needs.
ALGORITHMS: dict[str, tuple[str, str | None]] = {
    "RS256": ("RSA", None),
    "PS256": ("RSA", None),
    "ES256": ("EC", "P-256"),
    "ES384": ("EC", "P-384"),
    "EdDSA": ("OKP", "Ed25519"),
    "HS256": ("oct", None),
}
#: The claims every source requires unless it says otherwise: a token that never expires
#: is a password.
DEFAULT_REQUIRED = ("exp",)
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
#: A step of a claim's path: a bare name (printable ASCII but space, ``.``, ``"``, ``=``
#: and ``|``) or a quoted one, which may hold dots and slashes (``"https://x.com/plan"``).
_STEP = r'(?:[!#-\-/-<>-{}~]{1,64}|"[!#-<>-{}~]{1,128}")'
_STEP_RE = re.compile(_STEP)
#: A claim's path: at most 8 steps joined by ``.``.
CLAIM_PATH_RE = re.compile(rf"{_STEP}(?:\.{_STEP}){{0,7}}")


class TokenError(ValueError):
    """A token that is refused: ``code`` for logs and the client (RFC 6750's
    ``invalid_token`` either way), the message for the operator."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Token:
    """A token read and checked for form (not yet for its signature or its claims)."""

    header: Mapping[str, Any]
    claims: Mapping[str, Any]
    signing_input: bytes
    """``header.payload`` as sent: what the signature covers."""
    signature: bytes
    alg: str
    kid: str | None


def b64url_decode(segment: str, what: str) -> bytes:
    """Canonical unpadded base64url (RFC 7515 section 2): the only spelling of its bytes."""
    if not _B64URL.fullmatch(segment) or len(segment) % 4 == 1:
        raise TokenError("malformed", f"the {what} is not base64url")
    try:
        data = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError) as exc:
        raise TokenError("malformed", f"the {what} is not base64url") from exc
    if b64url_encode(data) != segment:
        # Bits past the last byte: another spelling of the same bytes.
        raise TokenError("malformed", f"the {what} is not canonical base64url")
    return data


def b64url_encode(data: bytes) -> str:
    """Unpadded base64url."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def parse_token(text: str) -> Token:
    """The token in ``text`` (the compact serialization); raises :class:`TokenError`."""
    if len(text) > MAX_TOKEN_BYTES:
        raise TokenError("too_large", f"the token is longer than {MAX_TOKEN_BYTES} bytes")
    if not text.isascii():
        raise TokenError("malformed", "the token is not ASCII")
    parts = text.split(".")
    if len(parts) != 3:
        raise TokenError("malformed", "a token has three dot-separated parts")
    header = _json_object(b64url_decode(parts[0], "header"), "header")
    claims = _json_object(b64url_decode(parts[1], "payload"), "payload")
    signature = b64url_decode(parts[2], "signature")
    alg = header.get("alg")
    if not isinstance(alg, str) or not alg:
        raise TokenError("malformed", "the header has no alg")
    if alg.lower() == "none":
        raise TokenError("alg_none", "an unsigned token (alg none) is never accepted")
    if "crit" in header:
        raise TokenError("malformed", "the header names critical extensions (crit)")
    if header.get("b64", True) is not True:
        raise TokenError("malformed", "an unencoded payload (b64 false) is not accepted")
    if not signature:
        raise TokenError("malformed", "the token has no signature")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise TokenError("malformed", "the header's kid is not a string")
    signing_input = f"{parts[0]}.{parts[1]}".encode("ascii")
    return Token(header, claims, signing_input, signature, alg, kid)


def check_algorithm(token: Token, allowed: Iterable[str]) -> str:
    """The token's ``alg`` when the source allows it; raises :class:`TokenError`."""
    if token.alg not in allowed or token.alg not in ALGORITHMS:
        raise TokenError("alg_not_allowed", f"the algorithm {token.alg!r} is not accepted")
    return token.alg


def check_claims(
    claims: Mapping[str, Any],
    now_ms: int,
    *,
    issuer: str | None = None,
    audiences: Iterable[str] = (),
    leeway_s: int = 60,
    required: Iterable[str] = DEFAULT_REQUIRED,
) -> None:
    """Raise :class:`TokenError` unless the claims hold at ``now_ms``: present where
    ``required``, ``exp`` not past, ``nbf`` and ``iat`` not ahead (each by more than
    ``leeway_s``), ``iss`` the issuer, ``aud`` (a string or a list) one of the
    ``audiences`` (where given)."""
    for name in required:
        if claim_at(claims, name, raw=True) is None:
            raise TokenError("missing_claim", f"the token has no {name!r} claim")
    now_s = now_ms / 1000
    exp = _numeric_date(claims, "exp")
    if exp is not None and now_s >= exp + leeway_s:
        raise TokenError("expired", "the token has expired")
    nbf = _numeric_date(claims, "nbf")
    if nbf is not None and now_s + leeway_s < nbf:
        raise TokenError("not_yet_valid", "the token is not valid yet (nbf)")
    iat = _numeric_date(claims, "iat")
    if iat is not None and now_s + leeway_s < iat:
        raise TokenError("not_yet_valid", "the token was issued in the future (iat)")
    if issuer is not None and claims.get("iss") != issuer:
        raise TokenError("issuer", "the token is from another issuer")
    wanted = set(audiences)
    if wanted:
        aud = claims.get("aud")
        given = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not any(isinstance(item, str) and item in wanted for item in given):
            raise TokenError("audience", "the token is for another audience")


def expires_ms(claims: Mapping[str, Any]) -> int | None:
    """When the token stops being valid (its ``exp``, in ms), or ``None``."""
    exp = _numeric_date(claims, "exp")
    return None if exp is None else int(exp * 1000)


class ClaimPathError(ValueError):
    """A claim path that cannot be read, and why."""


@functools.lru_cache(maxsize=1024)
def claim_steps(path: str) -> tuple[str, ...]:
    """The claim names along ``path``: steps joined by ``.`` (``org.id``), a step with dots
    in its name written in double quotes (``"https://example.com/plan"``, as Auth0's
    namespaced claims are). Raises :class:`ClaimPathError`, naming what is wrong."""
    if not CLAIM_PATH_RE.fullmatch(path):
        raise ClaimPathError(_path_problem(path))
    steps = tuple(step[1:-1] if step[0] == '"' else step for step in _STEP_RE.findall(path))
    if any(":/" in step for step in _STEP_RE.findall(path) if step[0] != '"'):
        # https://example.com/plan read as steps "https://example" and "com/plan".
        raise ClaimPathError(
            "a claim named by a URL has dots in its name: quote it, "
            f"\"{path}\" (steps are joined by '.')"
        )
    return steps


def claim_path(steps: Iterable[str]) -> str:
    """``steps`` written as a path, quoting only a step whose name holds a ``.``: the one
    spelling of a path (``jwt:"sub"`` is ``jwt:sub``, one counter whichever is written)."""
    return ".".join(f'"{step}"' if "." in step else step for step in steps)


def _path_problem(path: str) -> str:
    """Why ``path`` is no claim path (it failed :data:`CLAIM_PATH_RE`)."""
    if path.count('"') % 2:
        return "a quoted claim name has no closing '\"'"
    quoted = list(re.finditer(r'"[^"]*"', path))
    for match in quoted:
        start, end = match.span()
        if (start and path[start - 1] != ".") or (end < len(path) and path[end] != "."):
            return "a quoted claim name is a whole step: '.' or nothing before and after it"
        if end - start == 2:
            return "a quoted claim name is empty"
    dots = path.count(".") - sum(match.group().count(".") for match in quoted)
    if dots > 7:
        return "at most 8 steps"
    return (
        "a claim's path is names joined by '.' (sub, org.id), a name with dots in double "
        "quotes (\"https://example.com/plan\"); printable ASCII, no spaces, '=' or '|', "
        "at most 64 characters a name (128 quoted)"
    )


def claim_at(claims: Mapping[str, Any], path: str, *, raw: bool = False) -> Any:
    """The claim at ``path`` (``org.id``, ``"https://example.com/plan"``: see
    :func:`claim_steps`): a string, or an integer as its decimal text; ``None`` when
    absent or of another type (a list, an object, a boolean, a fraction). With ``raw``,
    whatever value is there."""
    node: Any = claims
    for part in claim_steps(path):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    if raw:
        return node
    if isinstance(node, str):
        return node
    if isinstance(node, int) and not isinstance(node, bool):
        return str(node)
    return None


def _numeric_date(claims: Mapping[str, Any], name: str) -> float | None:
    """A NumericDate claim (RFC 7519 section 2), ``None`` when absent."""
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TokenError("malformed", f"the {name!r} claim is not a number of seconds")
    return float(value)


class _Repeated(ValueError):
    pass


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise _Repeated(name)
        out[name] = value
    return out


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = bounded_json.loads(data, MAX_JSON_DEPTH, object_pairs_hook=_once_each)
    except _Repeated as exc:
        raise TokenError("malformed", f"the {what} names {str(exc)!r} twice") from None
    except bounded_json.JsonTooDeepError:
        raise TokenError("malformed", f"the {what} is nested too deep") from None
    except (ValueError, UnicodeDecodeError):
        raise TokenError("malformed", f"the {what} is not JSON") from None
    if not isinstance(value, dict):
        raise TokenError("malformed", f"the {what} is not a JSON object")
    return value


def encode_segment(value: Mapping[str, Any]) -> str:
    """A JSON object as a token segment (for the tests' and the simulator's tokens)."""
    return b64url_encode(json.dumps(value, separators=(",", ":")).encode())
