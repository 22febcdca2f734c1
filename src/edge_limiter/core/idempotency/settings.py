"""A route's idempotency settings, and their strict parser.

In the config a route honours ``Idempotency-Key`` with a table::

    idempotency = { mode = "required", retention = "24h", lock_timeout = "60s",
                    fingerprint_headers = ["x-client-version"], methods = ["POST", "PATCH"],
                    store_5xx = true, max_bytes = 1048576, max_request_bytes = 4194304 }

Every field is optional. The parser records every problem in a
:class:`~edge_limiter.core.validation.Problems` and never raises; a bad field takes its
default, so the rest of the route is still checked in the same pass.
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
    """How one route treats ``Idempotency-Key``."""

    mode: str = DEFAULT_MODE
    """``"required"``: a request without a key is refused (400); ``"optional"``: passed on."""
    retention_ms: int = DEFAULT_RETENTION_MS
    """How long a completed response is replayed for its key."""
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    """How long a claim holds before another request may take it over.

    Set it above the origin's timeout: a holder whose lock has run out cannot store its
    response any more.
    """
    fingerprint_headers: tuple[str, ...] = ()
    """Request fields (lower case) that, with method, path, query and body, identify a request."""
    methods: tuple[str, ...] = DEFAULT_METHODS
    """The methods the key applies to (upper case)."""
    store_5xx: bool = True
    """Whether a 5xx from the origin is stored and replayed (else the claim is released)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """The largest body stored; a larger one is recorded as too large, without the body."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """The largest request body accepted (it is read whole to fingerprint it); a larger one
    is refused with 413 and not forwarded."""

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
