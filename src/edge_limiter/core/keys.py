"""Rate-limit keys: who a request is counted against.

A key is one part or a combination of parts, each written as a short string:

==================  =========================================================
``ip``              the client IP (``CF-Connecting-IP``); IPv6 aggregated to a
                    /64 by default, because one subscriber holds a whole /64
``header:NAME``     a request header, e.g. ``header:x-api-key``
``cookie:NAME``     a cookie
``query:NAME``      a query-string parameter
``path:NAME``       a ``{NAME}`` parameter captured by the route's path pattern
``country``         ``request.cf.country``
``asn``             ``request.cf.asn``
``global``          one counter for everybody on the route
``jwt:CLAIM``       a claim of the route's verified token, by dotted path
                    (``jwt:sub``, ``jwt:org.id``; a name with dots in double
                    quotes: ``jwt:"https://example.com/plan"``; a route with
                    ``auth`` only)
``apikey``          the caller's API key record: its ``owner``, else the key's
                    SHA-256 (a route whose tier comes from ``kv:`` only)
==================  =========================================================

Client-set headers such as ``X-Forwarded-For`` only ever decide identity when a route
names them explicitly (``header:x-forwarded-for``); the default is ``ip``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from .errors import KeySpecError
from .http.messages import Request, taken_whole
from .identity.tokens import ClaimPathError, claim_at, claim_path, claim_steps
from .validation import shown

KINDS_WITH_NAME = ("header", "cookie", "query", "path", "jwt")
KINDS_PLAIN = ("ip", "country", "asn", "global", "apikey")
#: Key parts that only a verified identity gives a value (never a request's own fields).
IDENTITY_KINDS = frozenset(("jwt", "apikey"))

# Header and cookie names are RFC 9110 tokens; a query name is anything printable that
# cannot be confused with the query's own syntax; a path name is a {param} name.
_TOKEN_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_QUERY_NAME_RE = re.compile(r"^[!-~]+$")
_ENCODED_RE = re.compile(r"%[0-9A-Fa-f]{2}")
_NAME_RULES = {
    "header": (_TOKEN_RE, "a header name (letters, digits and !#$%&'*+.^_`|~-, no spaces)"),
    "cookie": (_TOKEN_RE, "a cookie name (letters, digits and !#$%&'*+.^_`|~-, no spaces)"),
    "query": (_QUERY_NAME_RE, "a query parameter name (printable, no spaces, '&', '=' or '#')"),
    "path": (re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$"), "a {param} name of match.path"),
}

#: Fields holding credentials (RFC 9110 section 11): a scheme, whitespace, then the
#: credentials. The scheme is case-insensitive and origins split on any run of
#: whitespace, so ``bearer  T1`` is ``Bearer T1`` to them.
CREDENTIAL_FIELDS = frozenset(("authorization", "proxy-authorization"))
#: Schemes in the spelling their specifications use (the IANA registry's, and common
#: ones outside it); any other scheme is counted lower-cased.
_SCHEMES = {
    name.lower(): name
    for name in (
        "Basic", "Bearer", "Digest", "Negotiate", "NTLM", "Token", "ApiKey", "DPoP",
        "HOBA", "Mutual", "OAuth", "SCRAM-SHA-1", "SCRAM-SHA-256", "vapid", "GNAP",
        "PrivateToken", "Concealed", "AWS4-HMAC-SHA256", "Key", "Splunk", "SSWS",
    )
}  # fmt: skip
#: Request fields that can identify a caller to an origin, whatever a route keys on: a
#: stored answer that is one caller's (an idempotency record, a cache entry kept per key)
#: is never handed to a request that differs in one of them (see :func:`caller_fields`).
CALLER_FIELDS = ("authorization", "cookie", "proxy-authorization")
#: Key parts that name something every caller behind one address may share: a route keyed
#: only on these counts (and scopes what it stores for) a whole NAT as one caller.
SHARED_KINDS = frozenset(("ip", "country", "asn", "global", "path"))
_CREDENTIALS_RE = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+)[ \t]+(.*)", re.DOTALL)

#: Object names longer than this, or with characters outside the safe set, are hashed.
MAX_PLAIN_NAME = 128
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:|=%/")


@dataclass(frozen=True, slots=True)
class KeyPart:
    """One part of a key: its kind and, for header/cookie/query/path, a name."""

    kind: str
    name: str = ""

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}" if self.name else self.kind


@dataclass(frozen=True, slots=True)
class KeySpec:
    """The parts a route's key is made of, and how client IPs are aggregated."""

    parts: tuple[KeyPart, ...]
    ipv4_prefix: int = 32
    ipv6_prefix: int = 64

    def compute(
        self,
        request: Request,
        path_params: dict[str, str],
        claims: Mapping[str, Any] | None = None,
        caller: str = "",
    ) -> str:
        """The key string for ``request``: parts joined by ``|``, values percent-encoded.

        ``claims`` are the verified token's (for ``jwt:`` parts), ``caller`` the API key
        record's owner or hash (for ``apikey``): only the identity stage sets them, so no
        header a client writes ever stands in for them.

        A missing header, cookie, query parameter or geo field counts as the empty value,
        so every request lacking it shares one counter (never a free pass). A header,
        cookie or parameter sent several times with different values raises
        :class:`~edge_limiter.core.errors.AmbiguousRequestError` (the gateway answers 400):
        the origin might read another of them than the one counted.
        """
        values: list[str] = []
        for part in self.parts:
            if part.kind == "jwt":
                value = claim_at(claims, part.name) if claims is not None else None
                value = value or ""
            elif part.kind == "apikey":
                value = caller
            else:
                value = self._value(part, request, path_params)
            # A path segment's bytes that are not UTF-8 come as \udcXX escapes: written
            # back as the bytes they were (%XX), never an error.
            values.append(f"{part}={quote(value, safe='', errors='surrogateescape')}")
        return "|".join(values)

    def anonymous(self, request: Request) -> str:
        """The key of a caller with no verified identity on a route whose key names one
        (``jwt:``, ``apikey``): counted by its address (aggregated as the route's ``ip``
        would be), under a label no verified caller's key starts with."""
        address = aggregate_ip(request.client.ip, self.ipv4_prefix, self.ipv6_prefix)
        return f"anonymous|ip={quote(address, safe='')}"

    def names_identity(self) -> bool:
        """Whether a part of the key is a verified identity's (``jwt:``, ``apikey``)."""
        return any(part.kind in IDENTITY_KINDS for part in self.parts)

    def _value(self, part: KeyPart, request: Request, params: dict[str, str]) -> str:
        if part.kind == "ip":
            return aggregate_ip(request.client.ip, self.ipv4_prefix, self.ipv6_prefix)
        if part.kind == "header":
            value = request.single_header(part.name) or ""
            return credentials(value) if part.name in CREDENTIAL_FIELDS else value
        if part.kind == "cookie":
            return request.cookie(part.name) or ""
        if part.kind == "query":
            return request.query_param(part.name) or ""
        if part.kind == "path":
            return params.get(part.name, "")
        if part.kind == "country":
            return request.client.country.upper()  # as request.cf writes it (and explain)
        if part.kind == "asn":
            return request.client.asn
        return ""  # global


def caller_fields(specs: Iterable[KeySpec], extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The fields that tell callers apart on a gateway whose routes key on ``specs``:
    :data:`CALLER_FIELDS`, ``extra`` (the fields tokens and API keys come in) and every
    header any route keys on (a header one route counts callers by is a credential on
    every route), sorted."""
    names = set(CALLER_FIELDS) | set(extra)
    for spec in specs:
        names.update(part.name for part in spec.parts if part.kind == "header")
    return tuple(sorted(names))


def shared_by_address(spec: KeySpec) -> bool:
    """Whether every caller behind one address gets the same key (no part names the
    caller itself: a header, cookie or query parameter)."""
    return all(part.kind in SHARED_KINDS for part in spec.parts)


def credentials(value: str) -> str:
    """An ``Authorization`` value as one spelling: the scheme in its usual case and one
    space before the credentials (``bearer\tT1`` and ``Bearer  T1`` are ``Bearer T1``).
    The credentials keep their case (a token is case-sensitive), and a value that is not
    a scheme followed by credentials (a bare API key) is kept as sent."""
    match = _CREDENTIALS_RE.fullmatch(value)
    if match is None:
        return value
    scheme, rest = match.groups()
    folded = scheme.lower()
    if folded == "basic":
        rest = _basic(rest)
    return f"{_SCHEMES.get(folded, folded)} {rest}"


def _basic(encoded: str) -> str:
    """``Basic`` credentials in their canonical base64. Decoders read many spellings as
    the same ``user:password``: padding left out, bits past the last byte set, characters
    outside the alphabet skipped, anything after the padding ignored. Each would be a
    counter of its own, so the credentials are decoded as Python's and PHP's lenient
    decoders do (the one Flask and Django REST framework use; Node's agrees on these) and
    encoded again. Text that decodes to nothing whole is kept as sent."""
    data = encoded.encode("ascii", "ignore")
    for padding in (b"", b"=", b"=="):
        try:
            decoded = binascii.a2b_base64(data + padding)
        except binascii.Error:
            continue
        return base64.b64encode(decoded).decode("ascii")
    return encoded


def written_as_labelled(spec: KeySpec, given: str) -> bool:
    """Whether ``given`` is written as ``--explain`` prints ``spec``'s keys: each part's
    label, ``=``, its value (``header:x-api-key=K``; a header's name in any case)."""
    items = [item.partition("=") for item in given.split("|")]
    return len(items) == len(spec.parts) and all(
        sep and (str(part) == written or (part.kind == "header" and str(part) == written.lower()))
        for (written, sep, _), part in zip(items, spec.parts, strict=True)
    )


def given_key(spec: KeySpec, given: str) -> str:
    """A key as an operator gives it, in the form the gateway computes for ``spec``.

    Either as ``--explain`` prints it (``header:x-api-key=premium_1``,
    ``path:tenant=acme|ip=203.0.113.9``), or, for a one-part key, its value alone
    (``premium_1``; an ``ip`` value is aggregated as a request's would be). Raises
    :class:`KeySpecError` saying the expected form when it is neither, so no admin call
    silently reads or resets a counter no request uses.
    """
    labels = [str(part) for part in spec.parts]
    if written_as_labelled(spec, given):
        items = [item.partition("=") for item in given.split("|")]
        values = [unquote(value, errors="surrogateescape") for _, _, value in items]
    elif len(labels) == 1:
        # A one-part key's value alone; for ``global`` (whose value is always empty) its
        # name alone too.
        values = ["" if given == "global" and labels == ["global"] else given]
    else:
        example = "|".join(f"{label}=VALUE" for label in labels)
        raise KeySpecError(f"this route's keys are written {example}, got {given!r}")
    out = []
    for part, label, written in zip(spec.parts, labels, values, strict=True):
        value = _given_address(written, spec) if part.kind == "ip" else written
        if part.kind == "header":
            _given_header(part.name, value)
            if part.name in CREDENTIAL_FIELDS:
                value = credentials(value)
        if part.kind == "global" and value:
            raise KeySpecError(
                f"a global key has no value: every request counts as 'global=' (or give "
                f"'global'), got {given!r}"
            )
        out.append(f"{label}={quote(value, safe='', errors='surrogateescape')}")
    return "|".join(out)


def _given_header(name: str, value: str) -> None:
    """Refuse a header value no request's key can be: one with whitespace around it (a
    request's is read without), or with a comma where a comma separates values (such a
    request is refused as ambiguous)."""
    if value != value.strip(" \t"):
        raise KeySpecError(
            f"{value!r} has whitespace around it: a request's {name} is read without it"
        )
    if "," in value and not taken_whole(name.lower()):
        raise KeySpecError(
            f"{value!r} holds a comma: in {name} a comma separates values, and a request "
            f"sending it is refused (ambiguous_key), so no request has this key"
        )


def _given_address(value: str, spec: KeySpec) -> str:
    """An ``ip`` value as an operator gives it, aggregated as a request's address would be:
    an address, the network it is counted as (``2001:db8::/64``), or empty (requests
    without an address). Anything else is no request's key."""
    if not value:
        return ""
    if "/" not in value:
        try:
            ipaddress.ip_address(value.strip())
        except ValueError:
            raise KeySpecError(f"{value!r} is not an IP address") from None
        return aggregate_ip(value, spec.ipv4_prefix, spec.ipv6_prefix)
    try:
        network = ipaddress.ip_network(value.strip(), strict=True)
    except ValueError:
        raise KeySpecError(f"{value!r} is not an IP address or network") from None
    prefix = spec.ipv4_prefix if network.version == 4 else spec.ipv6_prefix
    if network.prefixlen != prefix or prefix == network.max_prefixlen:
        raise KeySpecError(
            f"this route counts IPv{network.version} addresses by /{prefix}: "
            f"{value!r} is no request's key (give an address, or its /{prefix})"
        )
    return str(network)


def parse_key_part(text: object) -> KeyPart:
    """Parse ``"ip"``, ``"header:x-api-key"``, ... into a :class:`KeyPart`."""
    if not isinstance(text, str) or not text.strip():
        raise KeySpecError(f"a key part must be a non-empty string, got {shown(text)}")
    kind, sep, name = text.strip().partition(":")
    kind = kind.lower()
    if kind in KINDS_PLAIN:
        if sep:
            raise KeySpecError(f"key part {text!r}: {kind!r} takes no name")
        return KeyPart(kind)
    if kind in KINDS_WITH_NAME:
        if not name:
            example = {"cookie": "session", "query": "api_key", "path": "tenant", "jwt": "sub"}.get(
                kind, "x-api-key"
            )
            raise KeySpecError(f"key part {text!r}: {kind!r} needs a name, e.g. '{kind}:{example}'")
        if kind == "jwt":
            try:
                return KeyPart(kind, claim_path(claim_steps(name)))
            except ClaimPathError as exc:
                raise KeySpecError(f"key part {text!r}: {exc}") from None
        pattern, what = _NAME_RULES[kind]
        if not pattern.fullmatch(name) or (kind == "query" and any(c in name for c in "&=#")):
            raise KeySpecError(f"key part {text!r}: {name!r} is not {what}")
        if kind == "query" and ("+" in name or _ENCODED_RE.search(name)):
            raise KeySpecError(
                f"key part {text!r}: write the parameter's name decoded, as origins read it "
                f"({name!r} is percent-encoded or holds '+', which a query string decodes "
                "to a space, so no request's name would be this)"
            )
        if kind == "cookie" and _ENCODED_RE.search(name):
            raise KeySpecError(
                f"key part {text!r}: write the cookie's name decoded, as origins read it "
                f"({name!r} is percent-encoded: a request's cookie names are decoded before "
                "they are matched, so no request's name would be this)"
            )
        # Header names are case-insensitive; cookie, query, path and claim names are not.
        return KeyPart(kind, name.lower() if kind == "header" else name)
    known = ", ".join([*KINDS_PLAIN, *(f"{k}:NAME" for k in KINDS_WITH_NAME)])
    raise KeySpecError(f"unknown key part {text!r} (known: {known})")


#: The bits of an IPv4 address (a prefix this long counts each address alone).
IPV4_BITS = 32


def aggregate_ip(text: str, ipv4_prefix: int = 32, ipv6_prefix: int = 64) -> str:
    """The client's address, or its network when aggregated: ``2001:db8::/64``.

    An IPv4-mapped IPv6 address counts as the IPv4 address. Text that is not an IP
    (which Cloudflare never sends) is used as it is, so it still gets its own counter.
    An IPv4 address counted whole, written as Cloudflare writes it, is its own key (no
    parsing); any other is remembered for the last 4,096 addresses: parsing one costs
    more than the rest of the key, and the same clients come back.
    """
    if ipv4_prefix == IPV4_BITS and _is_dotted_quad(text):
        return text
    return _aggregated(text, ipv4_prefix, ipv6_prefix)


def _is_dotted_quad(text: str) -> bool:
    """Whether ``text`` is an IPv4 address in its one canonical spelling (four decimal
    numbers 0-255 without leading zeros), which is then what parsing would write back."""
    parts = text.split(".")
    if len(parts) != 4:
        return False
    for part in parts:
        if not (part.isascii() and part.isdigit()) or len(part) > 3:
            return False
        if (part[0] == "0" and len(part) > 1) or int(part) > 255:
            return False
    return True


@functools.lru_cache(maxsize=4096)
def _aggregated(text: str, ipv4_prefix: int, ipv6_prefix: int) -> str:
    """:func:`aggregate_ip` by parsing (remembered)."""
    try:
        addr = ipaddress.ip_address(text.strip())
    except ValueError:
        return text.strip()
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    prefix = ipv4_prefix if addr.version == 4 else ipv6_prefix
    if prefix == addr.max_prefixlen:
        return str(addr)
    network = ipaddress.ip_network(f"{addr}/{prefix}", strict=False)
    return str(network)


def object_name(route: str, key: str) -> str:
    """The Durable Object name for (route, key): bounded, deterministic, collision-free.

    Route names cannot contain ``:`` or ``#``, so ``route:key`` (short, safe keys) and
    ``route#<sha256>`` (everything else) can never collide with each other or across routes.
    """
    if len(key) <= MAX_PLAIN_NAME and _SAFE.issuperset(key):
        return f"{route}:{key}"
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{route}#{digest}"


def key_digest(key: str) -> str:
    """A short, stable hash of a rate-limit key: logs never carry the key itself."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def every_route_key(specs: Iterable[tuple[str, KeySpec]], key: str) -> str:
    """The form of ``key`` for an override of every route (``specs``: each route's name
    and key): it is compared with each request's key as stored, so it is stored in the
    form requests have (``2001:db8::1`` as the ``2001:db8::/64`` requests count it in).
    Raises :class:`KeySpecError` where routes would count it in different forms, or no
    route has keys like it."""
    routes = list(specs)
    # Written with some routes' labels: those routes judge it; else the value alone is for
    # the routes of one-part keys.
    shaped = [(name, spec) for name, spec in routes if written_as_labelled(spec, key)]
    judges = shaped or [(name, spec) for name, spec in routes if len(spec.parts) == 1]
    refusals: list[str] = []
    forms: dict[str, list[str]] = {}
    for name, spec in judges:
        try:
            counted = given_key(spec, key)
        except KeySpecError as exc:
            refusals.append(f"route {name!r}: {exc}")
            continue
        if not shaped:
            counted = unquote(counted.split("=", 1)[1], errors="surrogateescape")
        forms.setdefault(counted, []).append(name)
    if not forms:
        why = "; ".join(refusals) or "no route's key has that many parts"
        raise KeySpecError(f"no route has a key like {key!r} ({why})")
    if len(forms) > 1:
        said = "; ".join(f"{form!r} on {', '.join(names)}" for form, names in forms.items())
        raise KeySpecError(
            f"routes count {key!r} in different forms ({said}): set an override per route instead"
        )
    return next(iter(forms))
