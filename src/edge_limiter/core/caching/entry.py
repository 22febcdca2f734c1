"""What the cache stores in KV, and its binary framing.

A stored value is::

    b"ELC1" | header length (4 bytes, big-endian) | header (JSON, ASCII) | body

The JSON header holds the status, the fields, the times and, for a vary manifest, the field
names; the body follows raw, so a large body is never copied through base64 or JSON.
:func:`decode_entry` raises :class:`~edge_limiter.core.errors.CacheEntryError` on anything
it does not fully understand (another version's framing included): the caller treats
that as a miss and the next store overwrites the value.

Times are integer milliseconds. ``fresh_until`` ends the time a copy is served as a hit;
``stale_until`` ends the time it may stand in for an origin that fails (stale-if-error);
``revalidate_until`` the time it is still served while a fresh copy is fetched
(stale-while-revalidate); ``keep_until`` the time a copy with a validator is kept to be
revalidated with a conditional request once stale. An entry stored before those fields
existed has none.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from ..errors import CacheEntryError
from .fields import FieldPairs, Fields, without_hop_by_hop
from .limits import MAX_ENTRY_HEADER_BYTES

MAGIC = b"ELC1"
_PREFIX = struct.Struct(">4sI")
#: Fields never stored: cookies are one client's, ``Age`` is recomputed on every replay,
#: and ``Content-Length`` is the platform's to set from the body actually sent (the body the
#: Worker read may have been decoded, so the origin's length need not match it).
NEVER_STORED = frozenset({"set-cookie", "age", "content-length"})


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored response, or a vary manifest (``manifest``: no response, just ``vary``)."""

    status: int
    headers: FieldPairs
    body: bytes
    stored_at: int
    fresh_until: int
    stale_until: int
    initial_age_s: int = 0
    """The origin's ``Age`` when the response was stored, carried into every replay."""
    vary: tuple[str, ...] = ()
    """The request fields the response varies on (lower case, sorted)."""
    manifest: bool = False
    revalidate_until: int = 0
    """Past ``fresh_until`` and before this, served while a fresh copy is fetched."""
    generation: str = ""
    """A manifest's: the variants it leads to are stored under keys made with it, so once
    the manifest is removed (a write to the URI, a purge) and a new one made, no variant
    stored before is reached again."""
    keep_until: int = 0
    """Until when a copy that can be revalidated (it has a validator) is kept, stale or
    not, for a conditional request to renew it (0: not kept past the windows)."""

    @property
    def expires(self) -> int:
        """When the entry stops mattering: past freshness, both stale windows and the time
        it is kept to be revalidated."""
        return max(self.fresh_until, self.stale_until, self.revalidate_until, self.keep_until)


def storable_fields(headers: Fields) -> FieldPairs:
    """``headers`` less hop-by-hop fields (and those ``Connection`` names) and :data:`NEVER_STORED`."""
    return tuple(
        (name, value)
        for name, value in without_hop_by_hop(headers)
        if name.lower() not in NEVER_STORED
    )


def vary_manifest(
    vary: tuple[str, ...],
    stored_at: int,
    fresh_until: int,
    stale_until: int,
    revalidate_until: int = 0,
    *,
    generation: str = "",
    keep_until: int = 0,
) -> Entry:
    """The entry stored at a base key to say which request fields pick the variant."""
    return Entry(
        0,
        (),
        b"",
        stored_at,
        fresh_until,
        stale_until,
        0,
        vary,
        manifest=True,
        revalidate_until=revalidate_until,
        generation=generation,
        keep_until=keep_until,
    )


def encode_entry(entry: Entry) -> bytes:
    """The bytes to put in KV; raises :class:`CacheEntryError` when the header is too large."""
    header = json.dumps(
        {
            "s": entry.status,
            "h": [list(pair) for pair in entry.headers],
            "t": entry.stored_at,
            "f": entry.fresh_until,
            "x": entry.stale_until,
            "a": entry.initial_age_s,
            "v": list(entry.vary),
            "m": entry.manifest,
            "r": entry.revalidate_until,
            "n": len(entry.body),
            **({"g": entry.generation} if entry.generation else {}),
            **({"k": entry.keep_until} if entry.keep_until else {}),
        },
        ensure_ascii=True,
        separators=(",", ":"),
    ).encode("ascii")
    if len(header) > MAX_ENTRY_HEADER_BYTES:
        raise CacheEntryError(
            f"entry header of {len(header)} bytes exceeds {MAX_ENTRY_HEADER_BYTES}"
        )
    return _PREFIX.pack(MAGIC, len(header)) + header + entry.body


def decode_entry(data: bytes) -> Entry:
    """Inverse of :func:`encode_entry`; raises :class:`CacheEntryError` on malformed data."""
    if len(data) < _PREFIX.size:
        raise CacheEntryError(f"entry of {len(data)} bytes is shorter than its framing")
    magic, size = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise CacheEntryError(f"entry has framing {magic!r}, expected {MAGIC!r}")
    if size > MAX_ENTRY_HEADER_BYTES or _PREFIX.size + size > len(data):
        raise CacheEntryError(f"entry header length {size} does not fit the entry")
    start = _PREFIX.size + size
    try:
        header = json.loads(data[_PREFIX.size : start].decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CacheEntryError(f"entry header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise CacheEntryError("entry header is not a JSON object")
    body = bytes(data[start:])
    if _int(header, "n") != len(body):
        raise CacheEntryError(f"entry body has {len(body)} bytes, header says {header['n']}")
    return Entry(
        status=_int(header, "s"),
        headers=_pairs(header.get("h")),
        body=body,
        stored_at=_int(header, "t"),
        fresh_until=_int(header, "f"),
        stale_until=_int(header, "x"),
        initial_age_s=_int(header, "a"),
        vary=_names(header.get("v")),
        manifest=_bool(header, "m"),
        revalidate_until=_int(header, "r") if "r" in header else 0,
        generation=_generation(header.get("g", "")),
        keep_until=_int(header, "k") if "k" in header else 0,
    )


def age_seconds(entry: Entry, now: int) -> int:
    """The ``Age`` of a replay at ``now``: the origin's age plus whole seconds held here."""
    return entry.initial_age_s + max(0, now - entry.stored_at) // 1000


def is_fresh(entry: Entry, now: int) -> bool:
    """Whether ``entry`` may be served as a hit at ``now``."""
    return now < entry.fresh_until


def revalidating(entry: Entry, now: int) -> bool:
    """Whether ``entry``, no longer fresh, is still served while a fresh copy is fetched."""
    return entry.fresh_until <= now < entry.revalidate_until


def usable_stale(entry: Entry, now: int) -> bool:
    """Whether ``entry``, no longer fresh, may still be served because the origin failed."""
    return entry.fresh_until <= now < entry.stale_until


def replay_headers(entry: Entry, now: int) -> list[tuple[str, str]]:
    """The fields of a response served from ``entry`` at ``now``, with its ``Age``."""
    return [*entry.headers, ("Age", str(age_seconds(entry, now)))]


def _int(header: dict[str, Any], name: str) -> int:
    value = header.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CacheEntryError(f"entry field {name!r} must be a non-negative int, got {value!r}")
    return value


def _generation(value: object) -> str:
    if not isinstance(value, str) or len(value) > 64:
        raise CacheEntryError(f"entry generation must be a short string, got {value!r}")
    return value


def _bool(header: dict[str, Any], name: str) -> bool:
    value = header.get(name)
    if not isinstance(value, bool):
        raise CacheEntryError(f"entry field {name!r} must be a bool, got {value!r}")
    return value


def _pairs(value: object) -> FieldPairs:
    if not isinstance(value, list):
        raise CacheEntryError(f"entry fields must be a list, got {type(value).__name__}")
    pairs: list[tuple[str, str]] = []
    for item in value:
        if not (
            isinstance(item, list)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], str)
        ):
            raise CacheEntryError(f"entry field must be [name, value], got {item!r}")
        pairs.append((item[0], item[1]))
    return tuple(pairs)


def _names(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CacheEntryError(f"entry vary names must be a list of strings, got {value!r}")
    return tuple(value)
