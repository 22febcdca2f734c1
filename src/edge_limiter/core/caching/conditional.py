"""Conditional GET and HEAD answered from a stored response (RFC 9110 section 13).

A client that already holds a copy asks ``If-None-Match: "v7"`` (or ``If-Modified-Since``);
when the stored response still matches, a cache answers ``304 Not Modified`` with no body
instead of sending the whole body again. The rules, in RFC 9110 section 13.2.2's order:

- ``If-None-Match`` is compared weakly (``W/"a"`` matches ``"a"``) with the stored ``ETag``;
  ``*`` matches any stored response. When it is present, ``If-Modified-Since`` is ignored.
- Else ``If-Modified-Since`` (one valid HTTP-date, not in the future) is compared with the
  stored ``Last-Modified``, or its ``Date``, or when it was stored (RFC 9111 section 4.3.2).
- Only a stored 2xx is answered ``304``; any other stored status ignores the conditions.

``If-Match`` and ``If-Unmodified-Since`` are meant for the origin (they guard its state):
:func:`needs_origin` sends such a request past the cache.

On a miss that may be stored, the :data:`VALIDATORS` are held back: the origin sends its
whole answer, which fills the cache, and the client still gets its ``304`` when that
answer matches (else a client that always holds a copy would never let the cache fill).

The cache revalidates its own stale copies the same way (RFC 9111 section 4.3): the
request to the origin carries :func:`revalidation_fields` (the copy's ``ETag`` as
``If-None-Match``, its ``Last-Modified`` as ``If-Modified-Since``), and a ``304`` that
:func:`freshens` the copy updates its fields (:func:`freshened_fields`) instead of
sending the body again.
"""

from __future__ import annotations

from ..http.dates import http_date_ms
from .entry import storable_fields
from .fields import FieldPairs, Fields, field_pairs, field_value, field_values

#: The stored fields a ``304`` carries (RFC 9110 section 15.4.5), ``Last-Modified`` included
#: since it guides the client's next ``If-Modified-Since``, and the targeted forms of
#: ``Cache-Control`` (RFC 9213), which a cache downstream freshens its copy with.
NOT_MODIFIED_FIELDS = frozenset(
    {
        "cache-control",
        "cdn-cache-control",
        "cloudflare-cdn-cache-control",
        "content-location",
        "date",
        "etag",
        "expires",
        "last-modified",
        "vary",
    }
)


#: The client's validators: on a miss that may be stored they are held back from the
#: origin (its full answer fills the cache) and judged here against that answer.
VALIDATORS = ("if-none-match", "if-modified-since")


def needs_origin(request_fields: Fields) -> bool:
    """Whether the request carries a precondition only the origin can judge."""
    return (
        field_value(request_fields, "if-match") is not None
        or field_value(request_fields, "if-unmodified-since") is not None
    )


def entity_tags(value: str) -> tuple[str, ...] | None:
    """The opaque tags of an entity-tag list, weakness dropped; ``("*",)`` for ``*``.

    ``None`` when the list is malformed (a tag is a quoted string, optionally after
    ``W/``; the quotes are kept, so ``"a"`` and ``W/"a"`` both give ``'"a"'``).
    """
    text = value.strip(" \t")
    if text == "*":
        return ("*",)
    tags: list[str] = []
    at, end = 0, len(text)
    while at < end:
        if text[at] in " \t,":
            at += 1
            continue
        if text.startswith("W/", at):
            at += 2
        if at >= end or text[at] != '"':
            return None
        close = text.find('"', at + 1)
        if close < 0:
            return None
        tag = text[at : close + 1]
        if not all(0x21 <= ord(char) <= 0x7E or ord(char) >= 0x80 for char in tag):
            return None
        tags.append(tag)
        at = close + 1
        if at < end and text[at] not in " \t,":
            return None
    return tuple(tags)


def not_modified(
    request_fields: Fields, status: int, stored_fields: Fields, stored_at: int, now_ms: int
) -> bool:
    """Whether a stored response (``status``, ``stored_fields``) answers the request with ``304``."""
    if not 200 <= status < 300:
        return False
    if_none_match = field_values(request_fields, "if-none-match")
    if if_none_match:
        wanted = entity_tags(", ".join(if_none_match))
        if wanted is None:
            return False
        if wanted == ("*",):
            return True
        etag = field_value(stored_fields, "etag")
        stored = entity_tags(etag) if etag is not None else None
        return stored is not None and len(stored) == 1 and stored[0] in wanted
    since_values = field_values(request_fields, "if-modified-since")
    if len(since_values) != 1:
        return False
    since = http_date_ms(since_values[0].strip(" \t"), now_ms)
    if since is None or since > now_ms:
        return False
    return _last_modified(stored_fields, stored_at, now_ms) <= since


def not_modified_fields(stored_fields: Fields) -> FieldPairs:
    """The stored fields a ``304`` repeats (:data:`NOT_MODIFIED_FIELDS`), in their order."""
    return tuple(
        (name, value)
        for name, value in field_pairs(stored_fields)
        if name.lower() in NOT_MODIFIED_FIELDS
    )


def _last_modified(stored_fields: Fields, stored_at: int, now_ms: int) -> int:
    """The stored response's ``Last-Modified``, else its ``Date``, else when it was stored."""
    for name in ("last-modified", "date"):
        value = field_value(stored_fields, name)
        if value is not None:
            at = http_date_ms(value.strip(" \t"), now_ms)
            if at is not None:
                return at
    return stored_at


#: Fields a ``304`` never changes in a stored answer (RFC 9111 section 3.2): they describe
#: the stored body itself (its length, coding, range and digest) or name it (``ETag``).
NOT_UPDATED = frozenset(
    {"content-encoding", "content-length", "content-md5", "content-range", "etag"}
)


def revalidation_fields(stored_fields: Fields) -> list[tuple[str, str]]:
    """The validators a conditional request for a stored answer carries: its ``ETag`` as
    ``If-None-Match`` (as written), its ``Last-Modified`` (one valid date) as
    ``If-Modified-Since``; none when it has neither (it cannot be revalidated)."""
    out: list[tuple[str, str]] = []
    etag = (field_value(stored_fields, "etag") or "").strip(" \t")
    if etag and etag != "*":
        # As the origin wrote it, quotes or not: an origin that sends an unquoted tag
        # (not RFC 9110's syntax) recognises its own.
        out.append(("If-None-Match", etag))
    modified = field_values(stored_fields, "last-modified")
    if len(modified) == 1 and http_date_ms(modified[0].strip(" \t"), 0) is not None:
        out.append(("If-Modified-Since", modified[0].strip(" \t")))
    return out


def freshens(stored_fields: Fields, answer_fields: Fields) -> bool:
    """Whether a ``304`` (``answer_fields``) is about the stored answer (RFC 9111 section
    4.3.4): a strong ``ETag`` in it must be the stored one; without one, the ``304``
    answers the validators this cache sent, which were the stored answer's."""
    etag = field_value(answer_fields, "etag")
    if etag is None:
        return True
    tags = entity_tags(etag)
    if tags is None or len(tags) != 1 or etag.strip(" \t").startswith("W/"):
        # A weak tag (or none readable) cannot tell two answers apart: it may freshen the
        # copy whose validators were sent.
        return True
    stored = field_value(stored_fields, "etag")
    return stored is not None and entity_tags(stored) == tags


def freshened_fields(stored_fields: Fields, answer_fields: Fields) -> FieldPairs:
    """The stored answer's fields updated from a ``304`` (RFC 9111 section 3.2): each field
    the ``304`` carries replaces the stored one of that name, but those never stored and
    :data:`NOT_UPDATED`."""
    update = [
        (name, value)
        for name, value in storable_fields(answer_fields)
        if name.lower() not in NOT_UPDATED
    ]
    replaced = {name.lower() for name, _ in update}
    kept = [
        (name, value) for name, value in field_pairs(stored_fields) if name.lower() not in replaced
    ]
    return (*kept, *update)
