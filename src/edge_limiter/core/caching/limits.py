"""The limits of Workers KV that the cache is built around, and the bounds derived from them."""

from __future__ import annotations

MIB = 1024 * 1024

#: A KV key is at most 512 bytes of UTF-8; longer cache keys are hashed.
KV_MAX_KEY_BYTES = 512
#: A KV value is at most 25 MiB.
KV_MAX_VALUE_BYTES = 25 * MIB
#: KV refuses an ``expirationTtl`` under 60 seconds.
KV_MIN_EXPIRATION_TTL_S = 60

#: Room kept in every stored value for the entry's framing and JSON header (status, fields,
#: times); :func:`~edge_limiter.core.caching.entry.encode_entry` refuses a larger header.
MAX_ENTRY_HEADER_BYTES = 64 * 1024
#: The largest body a route may cache: a KV value less the room for the entry's header.
MAX_BODY_BYTES = KV_MAX_VALUE_BYTES - MAX_ENTRY_HEADER_BYTES
#: Responses whose storable fields take more than this many bytes as JSON are not stored. The
#: fields, and the Vary names taken from them, are what can grow in an entry's header, so
#: twice this plus a few numbers always fits in :data:`MAX_ENTRY_HEADER_BYTES`.
MAX_STORED_FIELD_BYTES = 24 * 1024
