"""API keys and their records in KV, and the isolate's memory of lookups.

A key's record is stored under the SHA-256 hex of the key (the key itself is never
stored: a leaked namespace gives no usable key) as a JSON object::

    {"tier": "pro", "limits": "50/second; 100000/day", "owner": "acme"}

``tier`` is required; ``limits`` (the key's own limits, in place of its tier's) and
``owner`` (who it counts under: two keys of one customer share a counter) are optional.
Nothing else is accepted: a record the codec cannot read is no record.

Lookups are remembered in the isolate (:class:`Lookups`): a found record for
:data:`FOUND_TTL_MS`, an absent one for :data:`MISSING_TTL_MS` (``[tiers] api_key_ttl``
sets the first, the second is half of it), so a change of tier (or a key deleted) takes
effect within a minute of KV's own propagation, and a flood of made-up keys costs one KV
read per key per half minute at most.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..errors import RateParseError
from ..ratelimit.rates import Limit, parse_rates
from .tokens import TokenError

#: The longest API key read (a generated key is 32-64 characters).
MAX_API_KEY_CHARS = 256
#: The largest record read from KV.
MAX_RECORD_BYTES = 4096
#: How long a found record is remembered in an isolate.
FOUND_TTL_MS = 60_000
#: How long "no such key" is remembered in an isolate.
MISSING_TTL_MS = 30_000
#: The bounds of ``[tiers] api_key_ttl`` (how long a found record is remembered).
MIN_KEY_TTL_MS = 1_000
MAX_KEY_TTL_MS = 300_000
#: The most lookups an isolate remembers (least recently used out first).
MAX_LOOKUPS = 10_000
TIER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
OWNER_RE = re.compile(r"^[!-~]{1,128}$")
_FIELDS = frozenset(("tier", "limits", "owner"))


class RecordError(ValueError):
    """A record that cannot be read, and why."""


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """What a key's record says: its tier, its own limits (as written), its owner."""

    tier: str
    limits: str | None = None
    owner: str | None = None

    def own_limits(self) -> tuple[Limit, ...]:
        """The key's own limits (empty: its tier's)."""
        return tuple(Limit(rate) for rate in parse_rates(self.limits)) if self.limits else ()


def api_key_digest(api_key: str) -> str:
    """Where a key's record is stored: the SHA-256 hex of the key's UTF-8 bytes."""
    return hashlib.sha256(api_key.encode("utf-8", "surrogatepass")).hexdigest()


def check_api_key(text: str) -> str:
    """The key as sent, when it can be one; raises :class:`TokenError`."""
    if not text or len(text) > MAX_API_KEY_CHARS:
        raise TokenError("too_large" if text else "malformed", "the API key is empty or too long")
    if not text.isascii() or not text.isprintable() or " " in text:
        raise TokenError("malformed", "the API key is not printable ASCII")
    return text


def decode_record(data: bytes) -> ApiKeyRecord:
    """A record as stored; raises :class:`RecordError` saying what is wrong."""
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError(f"the record is larger than {MAX_RECORD_BYTES} bytes")
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise RecordError("the record is not JSON") from None
    return record_of(value)


def record_of(value: Any) -> ApiKeyRecord:
    """A record from plain data (a KV value, an admin API body); raises :class:`RecordError`."""
    if not isinstance(value, dict):
        raise RecordError('a record is a JSON object like {"tier": "pro"}')
    unknown = sorted(str(name) for name in value if name not in _FIELDS)
    if unknown:
        raise RecordError(f"unknown fields {', '.join(unknown)} (known: tier, limits, owner)")
    tier = value.get("tier")
    if not isinstance(tier, str) or not TIER_RE.fullmatch(tier):
        raise RecordError("tier must be a tier's name (1 to 32 letters, digits, '_', '.', '-')")
    limits = value.get("limits")
    if limits is not None:
        if not isinstance(limits, str):
            raise RecordError("limits must be a string like '100/hour; 1000/day'")
        try:
            rates = parse_rates(limits)
        except RateParseError as exc:
            raise RecordError(f"limits: {exc}") from None
        if len({rate.window_ms for rate in rates}) != len(rates):
            raise RecordError("limits: two limits over the same window")
    owner = value.get("owner")
    if owner is not None and (not isinstance(owner, str) or not OWNER_RE.fullmatch(owner)):
        raise RecordError("owner must be 1 to 128 printable ASCII characters, no spaces")
    return ApiKeyRecord(tier, limits, owner)


def encode_record(record: ApiKeyRecord) -> bytes:
    """A record as stored (only the fields it has)."""
    value: dict[str, str] = {"tier": record.tier}
    if record.limits is not None:
        value["limits"] = record.limits
    if record.owner is not None:
        value["owner"] = record.owner
    return json.dumps(value, separators=(",", ":")).encode()


def record_plain(record: ApiKeyRecord) -> dict[str, str | None]:
    """A record as the admin API shows it."""
    return {"tier": record.tier, "limits": record.limits, "owner": record.owner}


def missing_ttl(found_ttl_ms: int) -> int:
    """How long "no such key" is remembered beside records kept ``found_ttl_ms``: half as
    long (a new key works sooner than a changed one), never past :data:`MISSING_TTL_MS`."""
    return max(1, min(MISSING_TTL_MS, found_ttl_ms // 2))


class Lookups:
    """KV lookups remembered in the isolate: a record for :data:`FOUND_TTL_MS`, its
    absence for :data:`MISSING_TTL_MS`, at most ``size`` of them."""

    def __init__(
        self,
        size: int = MAX_LOOKUPS,
        found_ttl_ms: int = FOUND_TTL_MS,
        missing_ttl_ms: int = MISSING_TTL_MS,
    ) -> None:
        self.size, self.found_ttl_ms, self.missing_ttl_ms = size, found_ttl_ms, missing_ttl_ms
        self._items: OrderedDict[str, tuple[ApiKeyRecord | None, int]] = OrderedDict()

    def get(self, digest: str, now_ms: int) -> tuple[bool, ApiKeyRecord | None]:
        """``(known, record)``: whether a lookup is remembered, and what it found."""
        item = self._items.get(digest)
        if item is None:
            return False, None
        record, until = item
        if now_ms >= until:
            del self._items[digest]
            return False, None
        self._items.move_to_end(digest)
        return True, record

    def put(self, digest: str, record: ApiKeyRecord | None, now_ms: int) -> None:
        """Remember what a lookup at ``now_ms`` found (``None``: no record)."""
        ttl = self.found_ttl_ms if record is not None else self.missing_ttl_ms
        self._items[digest] = (record, now_ms + ttl)
        self._items.move_to_end(digest)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def forget(self, digest: str) -> None:
        """Drop a remembered lookup (the admin API changed the record here)."""
        self._items.pop(digest, None)
