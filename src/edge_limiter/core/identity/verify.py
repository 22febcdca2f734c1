"""A caller's identity from its token, step by step, with time as an argument.

    token found where the source says -> size bound -> read strictly -> algorithm allowed
    -> key selected -> signature checked (through a port) -> claims checked -> claims

Each refusal is a :class:`~.tokens.TokenError` whose ``code`` says why (for logs; the
client is told ``invalid_token`` whatever it was). A token verified once is remembered
in :class:`VerifiedTokens` (by its SHA-256, never past its ``exp``), so the hot path of a
known token is a dictionary lookup.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import AmbiguousRequestError
from ..http.messages import Request
from .keys import Jwk, select_keys
from .settings import AuthSource, TokenPlace
from .tokens import Token, TokenError, check_algorithm, check_claims, expires_ms, parse_token

#: Tokens remembered as verified, per isolate (the least recently used go first).
MAX_VERIFIED = 10_000
#: The longest a verified token is remembered, whatever its ``exp`` (a key removed from
#: the source's set stops a token it signed within this).
MAX_REMEMBERED_MS = 5 * 60_000


class SignatureVerifier(Protocol):
    """Checks a signature: the platform's WebCrypto in production, ``cryptography`` in
    the tests."""

    def verify(self, alg: str, key: Jwk, data: bytes, signature: bytes) -> Awaitable[bool]:
        """Whether ``signature`` over ``data`` is ``key``'s for ``alg`` (False, never an
        exception, when the key cannot be used for it)."""
        ...


@dataclass(frozen=True, slots=True)
class Identity:
    """A verified caller: the source that verified it and its token's claims."""

    source: str
    claims: Mapping[str, Any]
    expires_at: int | None
    """The token's ``exp`` in ms (None: it names none)."""


def find_token(request: Request, place: TokenPlace) -> str | None:
    """The credential ``request`` carries at ``place`` (None: none). Raises
    :class:`TokenError` ``malformed`` for an ``Authorization`` field that is not one
    ``Bearer`` credential, and for a field or cookie sent twice with different values
    (which one an origin reads is a guess)."""
    try:
        if place.kind == "cookie":
            return request.cookie(place.name)
        if place.kind == "header":
            return request.single_header(place.name)
        value = request.single_header("authorization")
    except AmbiguousRequestError:
        raise TokenError("malformed", "the credential is sent more than once") from None
    if value is None:
        return None
    scheme, _, rest = value.strip().partition(" ")
    token = rest.strip(" \t")
    if scheme.lower() != "bearer" or not token or " " in token or "\t" in token:
        raise TokenError("malformed", "Authorization is not one Bearer token")
    return token


def read_token(text: str, source: AuthSource) -> Token:
    """The token read strictly: within the source's size bound, well-formed, signed with
    an algorithm the source allows."""
    if len(text) > source.max_token_bytes:
        raise TokenError("too_large", f"the token is longer than {source.max_token_bytes} bytes")
    token = parse_token(text)
    check_algorithm(token, source.algorithms)
    return token


async def check_signature(token: Token, keys: Sequence[Jwk], verifier: SignatureVerifier) -> Jwk:
    """The key whose signature ``token`` carries, of ``keys``; raises :class:`TokenError`
    (``unknown_kid``, ``key_mismatch``, ``bad_signature``)."""
    for key in select_keys(token, keys):
        if await verifier.verify(token.alg, key, token.signing_input, token.signature):
            return key
    raise TokenError("bad_signature", "the signature does not verify")


def check_token_claims(token: Token, source: AuthSource, now_ms: int) -> Identity:
    """The verified token's identity once its claims hold at ``now_ms``."""
    check_claims(
        token.claims,
        now_ms,
        issuer=source.issuer,
        audiences=source.audiences,
        leeway_s=source.leeway_ms // 1000,
        required=source.required_claims,
    )
    return Identity(source.name, token.claims, expires_ms(token.claims))


def token_digest(source: str, text: str) -> str:
    """How a token is remembered: its source and its SHA-256 (never the token itself)."""
    return source + ":" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class VerifiedTokens:
    """Tokens already verified in this isolate, by :func:`token_digest`: kept until the
    token's ``exp`` (and no longer than :data:`MAX_REMEMBERED_MS`), at most ``size`` of
    them (least recently used out first)."""

    def __init__(self, size: int = MAX_VERIFIED) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[Identity, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, digest: str, now_ms: int) -> Identity | None:
        """The identity of a token verified before, while it lasts."""
        item = self._items.get(digest)
        if item is None:
            return None
        identity, until = item
        if now_ms >= until:
            del self._items[digest]
            return None
        self._items.move_to_end(digest)
        return identity

    def put(self, digest: str, identity: Identity, now_ms: int) -> None:
        """Remember a token verified at ``now_ms`` (one with no ``exp``, or past it, is
        kept for :data:`MAX_REMEMBERED_MS` at most, never past its ``exp``)."""
        until = now_ms + MAX_REMEMBERED_MS
        if identity.expires_at is not None:
            until = min(until, identity.expires_at)
        if until <= now_ms:
            return
        self._items[digest] = (identity, until)
        self._items.move_to_end(digest)
        while len(self._items) > self.size:
            self._items.popitem(last=False)
