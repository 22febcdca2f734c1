"""The fingerprint of a request: what must match for a retry to replay a stored response.

A key reused with a different request is a client error (422 in the IETF draft), so the
fingerprint covers the method, path, query (in the order sent, as the cache keys it),
the body's SHA-256 and ``Content-Type``, every field that can tell the origin who the
caller is (``Authorization``, ``Cookie``, ``Proxy-Authorization`` and every header a
route keys on: :func:`~edge_limiter.core.keys.caller_fields`) and the values of the
route's ``fingerprint_headers``.

The caller's fields are in it because a key is scoped to the route's rate-limit key,
which callers may share (one address behind a NAT, a missing key header): another caller
presenting the same Idempotency-Key then gets 422, never the first caller's stored
response (its ``Set-Cookie``, its receipt), and the request is still never forwarded
twice. A 422 rather than a record of its own: a retry that changed its credentials is
refused, never run a second time.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping

from ..caching.query import canonical_query
from ..keys import CALLER_FIELDS, CREDENTIAL_FIELDS

_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
#: Fields every fingerprint covers besides the headers routes key on and a route's
#: ``fingerprint_headers``: the caller's credentials and cookies, and ``Content-Type``
#: (the same bytes as a form or as JSON are another request to the origin).
ALWAYS_FINGERPRINTED = (*CALLER_FIELDS, "content-type")
_OWS = " \t"


def fingerprint(
    method: str,
    path: str,
    query: str,
    body_sha256_hex: str,
    *,
    headers: Mapping[str, str],
    names: Iterable[str],
) -> str:
    """The hex SHA-256 of an unambiguous (JSON) encoding of the request's identity.

    ``query`` is the raw query without ``?``. ``names`` are the header names to include
    (any case); a header that is absent is encoded apart from one that is empty, and
    values are trimmed of surrounding whitespace.
    """
    if not _SHA256_HEX.fullmatch(body_sha256_hex):
        raise ValueError(f"body_sha256_hex must be 64 hex digits, got {body_sha256_hex!r}")
    lowered = {str(name).lower(): str(value) for name, value in headers.items()}
    fields: list[list[str | None]] = []
    for name in sorted({name.lower() for name in names}):
        value = lowered.get(name)
        if value is not None and name in CREDENTIAL_FIELDS:
            # The scheme's name is case-insensitive (RFC 9110): "bearer t" is "Bearer t".
            scheme, _, credentials = value.strip(_OWS).partition(" ")
            value = f"{scheme.lower()} {credentials.strip(_OWS)}"
        elif value is not None and name == "content-type":
            value = media_type(value)
        fields.append([name, None if value is None else value.strip(_OWS)])
    encoded = json.dumps(
        [
            "fp-v1",
            method.upper(),
            path,
            canonical_query(query),
            body_sha256_hex.lower(),
            fields,
        ],
        ensure_ascii=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(encoded.encode("ascii")).hexdigest()


def media_type(value: str) -> str:
    """A ``Content-Type`` as one text for every spelling of the same type (RFC 9110
    section 8.3.1): type, subtype and parameter names in lower case, no space around
    ``;`` and ``=``, a quoted value unquoted (a ``;`` inside it is part of it),
    ``charset`` in lower case; ``Application/JSON ; Charset="UTF-8"`` is
    ``application/json;charset=utf-8``."""
    pieces: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in value:
        if escaped:
            current.append(char)
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
            current.append(char)
        elif char == ";" and not quoted:
            pieces.append("".join(current))
            current = []
        else:
            current.append(char)
    pieces.append("".join(current))
    kind, *params = pieces
    parts = [kind.strip(_OWS).lower()]
    for param in params:
        name, equals, given = param.partition("=")
        name = name.strip(_OWS).lower()
        if not name:
            continue
        given = given.strip(_OWS)
        if len(given) >= 2 and given[0] == given[-1] == '"':
            given = given[1:-1]
        if name == "charset":
            given = given.lower()
        # A JSON pair per parameter: "x" and "x=" stay apart, and no value can pass for
        # another parameter.
        parts.append(json.dumps([name, given if equals else None]))
    return ";".join(parts)
