"""A route's idempotency settings: the parsed ``idempotency`` table.

Its fields, their defaults and bounds are declared once, in the config schema
(:data:`edge_limiter.core.config.idempotency.IDEMPOTENCY`, which parses them and writes
their docs).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024
MODES = ("required", "optional")
DEFAULT_MODE = "optional"
DEFAULT_RETENTION_MS = 24 * 3_600_000
DEFAULT_LOCK_TIMEOUT_MS = 60_000
DEFAULT_METHODS = ("PATCH", "POST")
DEFAULT_MAX_BYTES = 1 * MIB
#: A request's body is read whole to fingerprint it (and forwarded from memory), so its
#: size is bounded: a Python Worker's isolate has 128 MB, shared by every request in it.
DEFAULT_MAX_REQUEST_BYTES = 4 * MIB
MAX_REQUEST_BYTES = 32 * MIB
#: A record lives in one row of a SQLite-backed Durable Object (at most 2 MB) with its body
#: in base64 (4 bytes per 3): 1.25 MiB of body leaves room for the fields.
MAX_BODY_BYTES = MIB + MIB // 4
MIN_RETENTION_MS = 1_000
MAX_RETENTION_MS = 30 * 86_400_000
MIN_LOCK_TIMEOUT_MS = 1_000
MAX_LOCK_TIMEOUT_MS = 15 * 60_000
#: Safe methods change nothing, so a key on them protects nothing.
SAFE_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")

#: Fields a fingerprint gains nothing from, and why (a config naming one gets a warning).
NEVER_WORTH_FINGERPRINTING = {
    "idempotency-key": "idempotency-key is the record's key: two requests with different "
    "keys never meet",
    "content-length": "content-length adds nothing: the body itself is fingerprinted",
}


#: Answers that say the origin did not process the request, so a retry is due: 408 (the
#: request did not arrive in time), 425 (too early, it might be a replay), 429 (the
#: origin's own rate limit), 503 (unable to handle it now), and Cloudflare's own answers
#: for an origin it could not reach: 521 (refused), 522 (no connection), 523 (no route),
#: 525 and 526 (no TLS handshake).
NOT_PROCESSED = frozenset({408, 425, 429, 503, 521, 522, 523, 525, 526})


@dataclass(frozen=True, slots=True)
class IdempotencySettings:
    """How one route treats ``Idempotency-Key``: the ``idempotency`` table's fields,
    durations in ms, header names lower-case and methods upper-case, each sorted."""

    mode: str = DEFAULT_MODE
    retention_ms: int = DEFAULT_RETENTION_MS
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    fingerprint_headers: tuple[str, ...] = ()
    methods: tuple[str, ...] = DEFAULT_METHODS
    store_5xx: bool = True
    max_bytes: int = DEFAULT_MAX_BYTES
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES

    @property
    def required(self) -> bool:
        """Whether a request without a key is refused."""
        return self.mode == "required"

    def applies_to(self, method: str) -> bool:
        """Whether requests with ``method`` are subject to the key."""
        return method.upper() in self.methods

    def stores_status(self, status: int) -> bool:
        """Whether a response with ``status`` completes the record (else: release the claim).

        An answer saying the origin did not process the request (:data:`NOT_PROCESSED`) is
        never stored, whatever ``store_5xx`` says: replaying it would refuse every retry
        with that key, though the retry is what it asks for (Stripe saves no result for a
        request that never began executing either).
        """
        if status in NOT_PROCESSED:
            return False
        return self.store_5xx or not 500 <= status <= 599
