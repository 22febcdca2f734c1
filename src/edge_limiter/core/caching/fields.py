"""HTTP field lists as plain data: ``(name, value)`` pairs looked up without regard to case.

A response can carry a field more than once (``Set-Cookie`` above all), so responses are
kept as ordered pairs. A request's fields may come as a mapping (as
:class:`~edge_limiter.core.http.messages.Headers` holds them) or as pairs; both are accepted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

#: Fields as ordered ``(name, value)`` pairs, repeats kept.
FieldPairs = tuple[tuple[str, str], ...]
#: What the functions here accept: a mapping (names in any case) or ``(name, value)`` pairs.
Fields = Mapping[str, str] | Iterable[tuple[str, str]]

#: RFC 9110 ``token``: the syntax of field names, methods and directive names.
TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")

#: RFC 9110 section 7.6.1: fields that describe one connection, never a stored response.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


#: Fields a ``Connection`` may not remove from a message the gateway passes on: its
#: framing and target, and what Cloudflare's edge says of the client (a client naming
#: ``CF-Connecting-IP`` must not make itself an unknown address).
CONNECTION_KEPT = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "x-forwarded-for",
        "x-real-ip",
        "true-client-ip",
    }
)


_NO_FIELDS: frozenset[str] = frozenset()


def connection_named(value: str | None) -> frozenset[str]:
    """The fields a message's ``Connection`` value names (RFC 9110 section 7.6.1: a
    proxy removes them before passing the message on), lower case, less the hop-by-hop
    fields (the runtime's to drop: ``keep-alive``, ``upgrade``, ...), ``close``,
    :data:`CONNECTION_KEPT` and Cloudflare's ``cf-`` fields. Empty for the usual
    ``keep-alive`` or ``close``."""
    if value is None:
        return _NO_FIELDS  # the usual case (most messages have no Connection): no set made
    return frozenset(
        name
        for name in (item.lower() for item in list_items(value))
        if name not in HOP_BY_HOP
        and name != "close"
        and name not in CONNECTION_KEPT
        and not name.startswith("cf-")
        and is_token(name)
    )


def field_pairs(fields: Fields) -> FieldPairs:
    """``fields`` as a tuple of ``(name, value)`` pairs, in their order."""
    items = fields.items() if isinstance(fields, Mapping) else fields
    return tuple((str(name), str(value)) for name, value in items)


def field_values(fields: Fields, name: str) -> list[str]:
    """Every value of the field ``name`` (case-insensitive), in order."""
    wanted = name.lower()
    return [value for key, value in field_pairs(fields) if key.lower() == wanted]


def field_value(fields: Fields, name: str) -> str | None:
    """The field ``name`` as one value (repeated lines joined with ``", "``), or ``None``."""
    values = field_values(fields, name)
    return ", ".join(values) if values else None


def list_items(value: str | None) -> list[str]:
    """The items of a comma-separated field value, whitespace trimmed, empty items dropped."""
    if value is None:
        return []
    return [item.strip(" \t") for item in value.split(",") if item.strip(" \t")]


def content_length(fields: Fields) -> int | None:
    """``Content-Length`` when it is one valid number (repeats must agree), else ``None``."""
    items = set(list_items(field_value(fields, "content-length")))
    if len(items) != 1:
        return None
    (value,) = items
    if not value.isascii() or not value.isdigit() or len(value) > 15:
        return None
    return int(value)


#: Media types of answers that are live streams (Server-Sent Events, MJPEG-style
#: multipart replace, and the newline-delimited JSON of streamed completions and watch
#: APIs): never held to be measured or kept, each client gets its own as it comes.
STREAM_TYPES = frozenset(
    {
        "text/event-stream",
        "multipart/x-mixed-replace",
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "application/json-seq",
        "application/stream+json",
        "application/x-ldjson",
        "application/jsonlines",
        "application/json-lines",
        "application/x-json-stream",
        "text/x-ndjson",
    }
)


def is_stream(fields: Fields) -> bool:
    """Whether the answer's ``Content-Type`` is a live stream (:data:`STREAM_TYPES`)."""
    return is_stream_type(field_value(fields, "content-type"))


def is_stream_type(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` value names a live stream (:data:`STREAM_TYPES`)."""
    media = (content_type or "").partition(";")[0]
    return media.strip().lower() in STREAM_TYPES


def is_token(text: str) -> bool:
    """Whether ``text`` is an RFC 9110 token (a valid field name or method)."""
    return TOKEN_RE.fullmatch(text) is not None


def without_hop_by_hop(fields: Fields) -> FieldPairs:
    """``fields`` less the hop-by-hop fields and every field ``Connection`` names."""
    pairs = field_pairs(fields)
    named = {item.lower() for item in list_items(field_value(pairs, "connection"))}
    return tuple(
        (name, value)
        for name, value in pairs
        if name.lower() not in HOP_BY_HOP and name.lower() not in named
    )
