"""The ``Idempotency-Key`` request field, and the Durable Object that keeps its record.

draft-ietf-httpapi-idempotency-key-header defines the field as an RFC 8941 sf-string
(``Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"``); Stripe's clients send the
bare value (``Idempotency-Key: 8e03978e-...``). Both are accepted and give the same key.
"""

from __future__ import annotations

import hashlib
import json
import re

from ..errors import IdempotencyKeyError

MAX_KEY_LENGTH = 255
# Used with fullmatch: "$" would also match before a trailing newline.
_PRINTABLE = re.compile(r"[\x20-\x7e]*")
_OWS = " \t"
# Route names as the config allows them; anything else only enters the name hashed.
_ROUTE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def parse_idempotency_key(header_value: str | None) -> str:
    """The key a request carries; raises :class:`IdempotencyKeyError` saying what to fix.

    ``header_value`` is the field value (``None`` when the field is absent). Surrounding
    whitespace is ignored; the key is 1 to 255 printable ASCII characters (0x20-0x7E).
    """
    if header_value is None:
        raise IdempotencyKeyError(
            "missing",
            "this request needs an Idempotency-Key header: a unique value per operation, "
            "such as a UUID, reused only when retrying that operation",
        )
    text = header_value.strip(_OWS)
    if not _PRINTABLE.fullmatch(text):
        raise IdempotencyKeyError(
            "not_printable",
            "the Idempotency-Key must be printable ASCII (0x20-0x7E), such as a UUID",
        )
    if ", " in text and not text.startswith('"'):
        # The runtime joins a field sent twice into one value with ", ", while the origin
        # may get both lines: which one it acts on would be a guess.
        raise IdempotencyKeyError(
            "ambiguous",
            "the Idempotency-Key header came more than once (or its value holds ', '): "
            'send it once; a key holding ", " must be a quoted string ("a, b")',
        )
    key = _sf_string(text) if text.startswith('"') else text
    if not key:
        raise IdempotencyKeyError("empty", "the Idempotency-Key header is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise IdempotencyKeyError(
            "too_long",
            f"the Idempotency-Key is {len(key)} characters long; at most {MAX_KEY_LENGTH} "
            "are allowed (a UUID is 36)",
        )
    return key


def scoped_name(route: str, identity_key: str, idempotency_key: str, host: str = "") -> str:
    """The Durable Object name of one caller's key on one route (on one ``host``, where
    the origin tells hosts apart; empty: any host).

    Two callers using the same key value get different names, since the caller's
    identity (their rate-limit key) is part of it. The name is ``idem:<route>#<sha256>``:
    bounded, free of anything a caller sent, and collision-free because the digest covers
    an unambiguous encoding of every part.
    """
    parts = ["idem-v1", route, identity_key, idempotency_key]
    if host:
        parts.append(host)
    digest = hashlib.sha256(json.dumps(parts, ensure_ascii=True).encode("ascii")).hexdigest()
    if _ROUTE_RE.fullmatch(route):
        return f"idem:{route}#{digest}"
    return f"idem#{digest}"


def _sf_string(text: str) -> str:
    """The content of an RFC 8941 sf-string; ``text`` starts with a quote and is printable."""
    out: list[str] = []
    index = 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            escaped = text[index + 1 : index + 2]
            if escaped not in ('"', "\\"):
                raise IdempotencyKeyError(
                    "malformed",
                    'in a quoted Idempotency-Key only \\" and \\\\ may follow a backslash',
                )
            out.append(escaped)
            index += 2
            continue
        if char == '"':
            if index != len(text) - 1:
                raise IdempotencyKeyError(
                    "malformed", "the quoted Idempotency-Key has text after its closing quote"
                )
            return "".join(out)
        out.append(char)
        index += 1
    raise IdempotencyKeyError("malformed", "the quoted Idempotency-Key has no closing quote")
