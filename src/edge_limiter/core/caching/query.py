"""Canonical query strings: two queries an origin must read alike give the same text.

The parameters keep the order they were sent in: origins read it (PHP's ``a.b`` and
``a_b`` are one name, of which the last wins; ``a[]`` is numbered in order; Rack groups
``f[][k]``/``f[][v]`` by their order), so two queries that differ only in order are two
entries and two fingerprints. A query is split on ``&`` into parameters and each parameter on its first ``=`` into a
name and a value (a ``;`` is part of the value; a parameter holding one is never
ignored: see :func:`canonical_query`). ``?a`` and ``?a=`` stay apart (the value is absent
in one and empty in the other), empty parameters (``a=1&&b=2``) are dropped and repeated parameters are kept.

Each name and value is normalised only in ways RFC 3986 section 6.2.2 calls equivalent:
hex digits of an escape are upper-cased, escapes of unreserved characters are decoded
(``%41`` is ``A``), and characters a URL parser would escape anyway (spaces, non-ASCII) are
escaped as UTF-8. Everything an origin may read differently stays apart: ``+`` and ``%2B``
and ``%20``, ``=`` and ``%3D``, ``'`` and ``%27``. A part with a malformed escape (``%zz``),
or whose escapes are not UTF-8 (``%a0``), is kept exactly as sent: JavaScript's decoder
refuses it and Express then reads it as written. Normalised parts never contain one, so
the two kinds never meet.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote_to_bytes

from .settings import ALL_PARAMS

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# What a WHATWG URL parser leaves unescaped in a query: unreserved, sub-delims, ":@/?".
_RAW_OK = _UNRESERVED | frozenset("!$&'()*+,;=:@/?")
_HEX = frozenset("0123456789ABCDEFabcdef")

#: One parameter: its normalised name and value (``None``: no ``=`` at all).
Param = tuple[str, str | None]


def normalize_part(text: str) -> str:
    """One name or value in normal form (see the module docstring)."""
    if not _well_formed(text) or not _decodes(text):
        return text
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "%":
            pair = text[index + 1 : index + 3]
            decoded = chr(int(pair, 16))
            out.append(decoded if decoded in _UNRESERVED else "%" + pair.upper())
            index += 3
            continue
        if char in _RAW_OK:
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
        index += 1
    return "".join(out)


def query_params(query: str) -> list[Param]:
    """The parameters of ``query`` (without the leading ``?``), normalised, in their order."""
    params: list[Param] = []
    for item in query.split("&"):
        if not item:
            continue
        name, sep, value = item.partition("=")
        params.append((normalize_part(name), normalize_part(value) if sep else None))
    return params


def canonical_query(query: str, ignore: Iterable[str] = ()) -> str:
    """``query`` normalised, without the ``ignore``d names, in the order it was sent.

    Nothing is reordered, not even parameters of different names: every framework reads
    a query in order, and several let a later name change what an earlier one meant
    (PHP folds ``a.b`` into ``a_b`` and numbers ``a[]`` after the highest ``a[N]`` so
    far; Rack starts a new hash of ``f[][k]`` when ``k`` comes again). Keeping the order,
    and changing a name or value only where every decoder decodes it alike, two queries
    share a canonical text only if every origin reads the same parameters from both
    (property-tested against models of PHP, Rack, Django, Express, ASP.NET Core, Spring,
    Go and Starlette).

    ``ignore`` names are compared in normal form, so ``utm_source`` also drops
    ``utm%5Fsource``; ``"*"`` among them drops the whole query. A parameter holding a
    ``;`` is never left out: Rack 2 (hence Rails) reads ``utm=1;x=2`` as ``utm`` and
    ``x``, other servers as a ``utm`` of ``1;x=2``. Leaving it out would key
    ``?utm=1;x=2`` as no query (a Rack origin answers by ``x``), leaving only ``utm=1``
    out would key it as ``?x=2`` (the others answer as for no ``x``): either way one
    request could store its answer for another URL. Kept whole, it is its own entry under
    both readings.
    """
    ignored = {normalize_part(name) for name in ignore}
    if ALL_PARAMS in ignored:
        return ""
    if ignored:
        query = "&".join(
            item
            for item in query.split("&")
            if ";" in item or normalize_part(item.partition("=")[0]) not in ignored
        )
    kept = query_params(query)
    return "&".join(name if value is None else f"{name}={value}" for name, value in kept)


def _decodes(text: str) -> bool:
    """Whether ``text``'s escapes decode to UTF-8: where they do not, JavaScript's
    ``decodeURIComponent`` throws and qs (Express) reads the text as it came, so even the
    case of its hex digits tells two parameters apart."""
    if "%" not in text:
        return True
    try:
        unquote_to_bytes(text).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _well_formed(text: str) -> bool:
    """Whether every ``%`` in ``text`` starts an escape of two hex digits."""
    index = text.find("%")
    while index != -1:
        pair = text[index + 1 : index + 3]
        if len(pair) != 2 or not set(pair) <= _HEX:
            return False
        index = text.find("%", index + 3)
    return True
