"""Cache keys in KV: one per response variant, never shared by two different requests.

A base key is made of, in order: a version, the route name, the method class (``GET`` for
GET and HEAD, since HEAD is answered from the GET entry), the canonical host and path as
given, the canonical query (:func:`~edge_limiter.core.caching.query.canonical_query`: in the
order sent, ignored parameters removed) and the scope: ``p`` for a public entry, or ``k`` and the
SHA-256 of the caller's rate-limit key (hashed because it may hold an API key, and KV key
names are listed in the dashboard)::

    c2|catalog|GET|api.example.com|/v1/items|sort=name&page=2|p

Every part is percent-encoded with ``|``, ``#`` and ``%`` escaped, so a separator inside a
value can never pass for a part boundary. A key longer than KV's 512 bytes becomes
``c2#<readable prefix>#<sha256 of the whole key>``, which no plain key can equal.

Vary
----
When an origin answers with ``Vary: Accept-Language``, the response depends on request
fields the base key does not hold. The gateway then stores two entries:

1. at the base key, a *vary manifest*: an entry listing the field names (``accept-language``);
2. at :func:`variant_key` (the base key plus a digest of those fields' values in this
   request), the response itself.

A lookup reads the base key: a response is served; a manifest names the fields to read
from the request, and a second read at the variant key finds the response or misses. The
values enter the key only as a SHA-256 digest (a ``Vary: Authorization`` value must never be
written into a key name), computed over an unambiguous encoding in which an absent field
differs from an empty one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from urllib.parse import quote

from .fields import Fields, field_value
from .limits import KV_MAX_KEY_BYTES
from .query import canonical_query
from .settings import CacheSettings

#: c2: queries keep their order (c1 sorted them by name, so a c1 entry may hold the answer
#: to another order of its query: never read).
KEY_VERSION = "c2"
CACHEABLE_METHODS = ("GET", "HEAD")
# Percent-encoding leaves these as they are; "|", "#" and "%" are always escaped.
_SAFE = "/:@!$'()*+,;=&"
# How much of each readable part a hashed key keeps: route, host, path.
_READABLE = (48, 64, 96)
_OWS = " \t"


def method_class(method: str) -> str:
    """``"GET"`` for GET and HEAD; raises ``ValueError`` for a method the cache never serves."""
    upper = method.upper()
    if upper not in CACHEABLE_METHODS:
        raise ValueError(f"only GET and HEAD are cached, not {method!r}")
    return "GET"


def base_key(
    settings: CacheSettings,
    *,
    route: str,
    method: str,
    host: str,
    path: str,
    query: str,
    scope_key: str | None = None,
) -> str:
    """The KV key of a request's entry (or vary manifest).

    ``host`` and ``path`` are taken as given (already canonical); ``query`` is the raw
    query without ``?``. ``scope_key`` is the caller's rate-limit key, required when the
    route's scope is ``"key"`` and ignored when it is ``"public"``.
    """
    if settings.scope == "key":
        if scope_key is None:
            raise ValueError("a route cached with scope 'key' needs the caller's rate-limit key")
        scope = "k" + _sha256(scope_key)
    else:
        scope = "p"
    parts = (
        route,
        method_class(method),
        host,
        path,
        canonical_query(query, settings.ignore_query),
        scope,
    )
    encoded = [_encode(part) for part in parts]
    plain = "|".join([KEY_VERSION, *encoded])
    return _bounded(plain, _readable(encoded[0], encoded[2], encoded[3]))


#: ``Vary`` names that never pick a variant. Cloudflare sets every incoming request's
#: ``Accept-Encoding`` to ``br, gzip`` (the client's is in ``request.cf``), local workerd
#: sends origins its own, and the runtime encodes what each client gets itself: no answer
#: depends on the client's field, and keying on it would only split entries.
VARY_IGNORED = frozenset({"accept-encoding", ""})


def normalize_vary(names: Iterable[str]) -> tuple[str, ...]:
    """Field names from ``Vary``: lower-cased, trimmed, sorted, each once, blanks and
    :data:`VARY_IGNORED` dropped."""
    return tuple(sorted({name.strip(_OWS).lower() for name in names} - VARY_IGNORED))


def variant_key(
    base: str, vary_names: Iterable[str], request_headers: Fields, generation: str = ""
) -> str:
    """The key of the response stored for ``request_headers`` under a vary manifest of
    ``generation``.

    Each named field's value is trimmed (repeated lines joined with ``", "``); an absent
    field is encoded apart from an empty one.
    """
    values: list[list[str | None]] = [["", generation]] if generation else []
    for name in normalize_vary(vary_names):
        value = field_value(request_headers, name)
        values.append([name, None if value is None else value.strip(_OWS)])
    digest = _sha256(json.dumps(values, ensure_ascii=True, separators=(",", ":")))
    # "|v" cannot end a plain base key (its last part is the scope) nor appear in a hashed one.
    return _bounded(f"{base}|v{digest}", _readable_of(base))


def _encode(part: str) -> str:
    return quote(part, safe=_SAFE, errors="surrogatepass")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _readable(route: str, host: str, path: str) -> str:
    """The start of each (already encoded) part, for a hashed key's prefix."""
    return "|".join(part[:size] for part, size in zip((route, host, path), _READABLE, strict=True))


def _bounded(plain: str, readable: str) -> str:
    """``plain`` when it fits in a KV key, else a hashed key with a readable prefix."""
    if len(plain.encode("utf-8")) <= KV_MAX_KEY_BYTES:
        return plain
    return f"{KEY_VERSION}#{readable}#{_sha256(plain)}"


def _readable_of(key: str) -> str:
    """A hashed variant key's prefix: that of its base key."""
    # Plain keys are c2|route|GET|host|path|...; hashed ones c2#route|host|path#digest.
    if key.startswith(f"{KEY_VERSION}|"):
        parts = key.split("|")
        if len(parts) >= 5:
            return _readable(parts[1], parts[3], parts[4])
    pieces = key.split("#")
    return pieces[1] if len(pieces) == 3 else ""
