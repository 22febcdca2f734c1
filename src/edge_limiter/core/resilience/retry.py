"""When to retry a call to an origin, and how often: settings, their parser, idempotency.

Only a request that is safe to send twice is retried: one whose method is idempotent
(RFC 9110 section 9.2.2), or one that holds an ``Idempotency-Key`` claim, which makes the
gateway answer a duplicate from its record instead of running it again. A POST or PATCH
without a claim is never retried: the first attempt may have taken effect even though its
answer was lost. Except when it certainly never left: an attempt whose connection was never
established (:attr:`Delivery.NOT_SENT`) may go to another origin whatever the method.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .budget import DEFAULT_BUCKET_MS, DEFAULT_WINDOW_MS, RetryBudget

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})

DEFAULT_ATTEMPTS = 3
DEFAULT_BASE_MS = 100
DEFAULT_CAP_MS = 2_000
DEFAULT_BUDGET_RATIO = 0.2
DEFAULT_MIN_PER_SECOND = 1

MAX_ATTEMPTS = 10
MAX_BACKOFF_MS = 60_000
MAX_BUDGET_WINDOW_MS = 300_000
MAX_MIN_PER_SECOND = 1_000


@dataclass(frozen=True, slots=True)
class RetrySettings:
    """How a pool retries. ``attempts`` counts every attempt, the first included (1: never retry)."""

    attempts: int = DEFAULT_ATTEMPTS
    base_ms: int = DEFAULT_BASE_MS
    cap_ms: int = DEFAULT_CAP_MS
    budget_ratio: float = DEFAULT_BUDGET_RATIO
    min_per_second: int = DEFAULT_MIN_PER_SECOND
    budget_window_ms: int = DEFAULT_WINDOW_MS

    def budget(self) -> RetryBudget:
        """The retry budget these settings describe (buckets of one second)."""
        return RetryBudget(
            self.budget_ratio, self.min_per_second, self.budget_window_ms, DEFAULT_BUCKET_MS
        )


class Delivery(StrEnum):
    """How far the request of an attempt that got no usable answer went."""

    NOT_SENT = "not_sent"
    """The connection to the origin was never established (refused, DNS, TLS, connect
    timeout): no byte of the request reached it. It failed, and it cannot have acted."""
    SENT = "sent"
    """The request may have reached the origin (a timeout, a connection lost after it
    was sent, a failure answer): it failed, and it may have acted."""
    CLIENT_FAILED = "client_failed"
    """The client's own body broke off while it was being sent (an upload that ended
    early): says nothing about the origin."""


def counts_on_breaker(delivery: Delivery) -> bool:
    """Whether a failed attempt counts against the origin's breaker: every failure of the
    origin does, whatever the method and however the body was sent; only a failure the
    client caused (its body broke off) counts neither way, or clients aborting uploads
    would open the breaker for everyone."""
    return delivery is not Delivery.CLIENT_FAILED


def resend_is_free(delivery: Delivery) -> bool:
    """Whether sending the request again after this attempt is its first delivery rather
    than a retry: it never left (:attr:`Delivery.NOT_SENT`), so no origin saw it and no
    load was added. Such a resend needs no backoff, spends no retry budget and is not one
    of ``attempts``; the gateway sends it to the next origin of the pool (each at most
    once), within the same deadline, breakers and bulkheads."""
    return delivery is Delivery.NOT_SENT


#: Statuses Cloudflare's edge answers with when it never got a connection to the origin
#: (521 refused, 523 unreachable, 525 TLS handshake failed, 526 invalid certificate): the
#: request never reached it. (522, a connection timed out, is also given when the origin
#: took the request but did not acknowledge it in time: not certain, so not here.)
NEVER_CONNECTED = frozenset({521, 523, 525, 526})


def delivery_of(status: int | None) -> Delivery:
    """How far a request went whose attempt ended with ``status`` (``None``: no answer
    at all, judged as possibly sent)."""
    return Delivery.NOT_SENT if status in NEVER_CONNECTED else Delivery.SENT


#: Answers that say the origin did not act on the request (RFC 9110: 503 the server is
#: unable to handle it now, 408 it did not get it in time, 425 it would not risk a replay,
#: 429 it refused it; and Cloudflare's 521, 522, 523, 525, 526: the origin was never
#: reached): an attempt ending so may be sent again whatever the method.
NOT_ACTED = frozenset({408, 425, 429, 503, 521, 522, 523, 525, 526})


def may_resend(
    method: str,
    holds_idempotency_claim: bool,
    status: int | None,
    delivery: Delivery = Delivery.SENT,
) -> bool:
    """Whether a request whose attempt just failed (with ``status``, ``None`` when no
    answer came; ``delivery``: how far it went) may go to an origin again.

    One that never left (:attr:`Delivery.NOT_SENT`, or a :data:`NEVER_CONNECTED` status)
    may, whatever its method: no origin can have acted on it. One whose client's body
    broke off may not: that body is gone. A request holding an Idempotency-Key claim (a POST, a PATCH, or a PUT or DELETE the
    route protects) is sent again only when the origin says it did not act on it
    (:data:`NOT_ACTED`); one without, when its method is idempotent.
    After a timeout, a 500, 502 or 504 the origin may have carried it out, and another
    origin (another region, with records of its own) would carry it out again; so may one
    that dropped the connection with no answer: the runtime says "Network connection
    lost" alike for a connection refused and for one reset after the whole request
    arrived, so a refused connection is told apart by other means (the platform adapter
    sees whether fetch ever took the body: :attr:`Delivery.NOT_SENT`). The gateway's
    claim makes the client's own retry safe, not a second send.
    """
    if delivery is Delivery.CLIENT_FAILED:
        return False
    if delivery is Delivery.NOT_SENT or delivery_of(status) is Delivery.NOT_SENT:
        return True
    if holds_idempotency_claim:
        # The client asked for exactly once, whatever the method (a PUT or DELETE it
        # protects too): sent again only when the origin says it did not act.
        return status is not None and status in NOT_ACTED
    return method.upper() in IDEMPOTENT_METHODS


def is_idempotent(method: str, holds_idempotency_claim: bool) -> bool:
    """Whether a request may be sent to the origin again after a failed attempt.

    True for GET, HEAD, OPTIONS, PUT, DELETE and TRACE, and for any request holding an
    ``Idempotency-Key`` claim; a POST, PATCH or other method without a claim never.
    """
    return holds_idempotency_claim or method.upper() in IDEMPOTENT_METHODS
