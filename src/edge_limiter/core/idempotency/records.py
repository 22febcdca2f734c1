"""The record of one idempotency key, as a state machine with fencing tokens.

A record is ``None`` (no request seen), :class:`InFlight` (a request holds the claim and is
at the origin) or :class:`Completed` (its response is stored for replay)::

    None --claim--> InFlight --complete--> Completed --(expires_at)--> as None
                       |  \\--release--> InFlight, lock ended --claim--> InFlight (new token)
                       |--(locked_until)--> taken over by the next claim (new token)
                       \\--extend--> InFlight, answered --(locked_until)--> as Completed

``extend`` is the holder saying the origin has answered (its status and fields are in the
call) while the body is still on its way, and asking for more time: the lock is extended,
and from then on the request counts as acted on. If the holder never completes (its
isolate went away mid-body), the next claim after the lock is replayed that status and
those fields, body omitted, instead of forwarding the request again.

Liveness and deletion
---------------------
A record is *live* until its lock ends (``locked_until``) or its retention ends
(``expires_at``). A record that is not live behaves exactly as an absent one, except that
the next claim continues its token counter. The Durable Object may delete it at
:func:`idle_at`, so behaviour never depends on when cleanup runs.

Fencing tokens
--------------
Each claim gets a token; :func:`complete` and :func:`release` are accepted only with the
token of the current claim, so the late result of a holder whose lock ran out and was taken
over is refused instead of overwriting the new holder's. A holder whose lock ran out but
whom nobody took over may still complete (or release) for :data:`LATE_GRACE_MS` after its
lock ended: its result is then kept, and a later retry is replayed instead of forwarded
again. The record is not deleted before that grace ends, so this never depends on when
cleanup runs. Tokens are *fencing times*: a
new claim's token is ``max(previous token + 1, now)``. Within a record that makes them
strictly increasing, and it keeps them increasing across a deletion too: a record is only
deletable once ``now`` has passed its token (``idle_at`` is at least ``token + 1``), so a
fresh record's first token (``now`` or later) is above every token the deleted one gave
out, and an old holder's token can never match a later claim. (Across a deletion this
relies on the Durable Object's clock not stepping back.)
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..caching.fields import FieldPairs, Fields, without_hop_by_hop
from ..errors import IdempotencyRecordError
from .settings import IdempotencySettings


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """The origin's response kept for replay (``body`` is ``None`` when too large to keep)."""

    status: int
    headers: FieldPairs
    body: bytes | None
    body_too_large: bool = False


@dataclass(frozen=True, slots=True)
class InFlight:
    """A request holds the claim (with ``token``) until ``locked_until``.

    ``answered`` is the origin's status and fields once the holder said they came
    (:func:`extend`), kept until ``expires_at`` in case the holder never completes.
    """

    fingerprint: str
    token: int
    locked_until: int
    created_at: int
    answered: StoredResponse | None = None
    expires_at: int = 0


@dataclass(frozen=True, slots=True)
class Completed:
    """The response of the request that held ``token``, replayed until ``expires_at``."""

    fingerprint: str
    response: StoredResponse
    completed_at: int
    expires_at: int
    token: int


Record = InFlight | Completed


class Outcome(StrEnum):
    """What a step did, or what :func:`peek` found."""

    CLAIMED = "claimed"
    """The caller holds the claim: forward the request, then complete or release."""
    IN_FLIGHT = "in_flight"
    """Another request with this key is at the origin: answer 409 with Retry-After."""
    MISMATCH = "mismatch"
    """The key was used for a different request: answer 422."""
    REPLAY = "replay"
    """Answer with the stored response."""
    COMPLETED = "completed"
    """The response is stored (or, from :func:`peek`, a response is stored)."""
    RELEASED = "released"
    """The claim was given back; the next request with the key is forwarded."""
    EXTENDED = "extended"
    """The holder's lock was extended (the origin answered, its body still coming)."""
    REFUSED = "refused"
    """The caller's token is not the live claim's: nothing changed."""
    ABSENT = "absent"
    """No live record (from :func:`peek`)."""


#: The status to answer a request whose claim came back with this outcome.
CONFLICT_STATUS = {Outcome.IN_FLIGHT: 409, Outcome.MISMATCH: 422}


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The answer to :func:`claim`."""

    outcome: Outcome
    token: int = 0
    """The caller's token when ``CLAIMED``."""
    retry_after_ms: int = 0
    """When ``IN_FLIGHT``: how long until the current claim's lock ends."""
    response: StoredResponse | None = None
    """When ``REPLAY``: the stored response."""


@dataclass(frozen=True, slots=True)
class Result:
    """The answer to :func:`complete` or :func:`release`."""

    outcome: Outcome
    reason: str = ""
    """Why it was ``REFUSED``."""


#: How long after its lock ends a claim nobody took over may still complete: the longest
#: origin timeout a route may set, so a slow answer is kept rather than forwarded twice.
LATE_GRACE_MS = 10 * 60_000


def is_live(record: Record | None, now: int) -> bool:
    """Whether ``record`` still holds: a lock not yet ended, or a response not yet expired."""
    if record is None:
        return False
    if isinstance(record, InFlight):
        return now < record.locked_until or (
            record.answered is not None and now < record.expires_at
        )
    return now < record.expires_at


def idle_at(record: Record) -> int:
    """When the Durable Object may delete ``record``: once it is no longer live and ``now``
    has passed its token (so a fresh record's tokens start above it; see the module docs).
    """
    if isinstance(record, InFlight):
        return max(record.locked_until + LATE_GRACE_MS, record.expires_at, record.token + 1)
    return max(record.expires_at, record.token + 1)


def claim(
    record: Record | None, fingerprint: str, now: int, lock_timeout_ms: int
) -> tuple[ClaimResult, Record]:
    """A request with ``fingerprint`` arrives with the key; returns the answer and new record."""
    if lock_timeout_ms < 1:
        raise ValueError(f"lock_timeout_ms must be positive, got {lock_timeout_ms}")
    if record is None or not is_live(record, now):
        previous = record.token if record is not None else 0
        token = max(previous + 1, now)
        return ClaimResult(Outcome.CLAIMED, token), InFlight(
            fingerprint, token, now + lock_timeout_ms, now
        )
    if record.fingerprint != fingerprint:
        return ClaimResult(Outcome.MISMATCH), record
    if isinstance(record, InFlight):
        if now < record.locked_until:
            return ClaimResult(Outcome.IN_FLIGHT, retry_after_ms=record.locked_until - now), record
        # Answered, and its holder never completed (gone mid-body): acted on, so replayed
        # as far as it is known. The holder may still complete it (within the grace).
        return ClaimResult(Outcome.REPLAY, response=record.answered), record
    return ClaimResult(Outcome.REPLAY, response=record.response), record


def complete(
    record: Record | None, token: int, response: StoredResponse, now: int, retention_ms: int
) -> tuple[Result, Record | None]:
    """The holder of ``token`` stores its response; anyone else is refused (fenced)."""
    if retention_ms < 1:
        raise ValueError(f"retention_ms must be positive, got {retention_ms}")
    held = _held_claim(record, token, now)
    if isinstance(held, str):
        return Result(Outcome.REFUSED, held), record
    return Result(Outcome.COMPLETED), Completed(
        held.fingerprint, response, now, now + retention_ms, token
    )


def extend(
    record: Record | None,
    token: int,
    answered: StoredResponse,
    now: int,
    *,
    lock_timeout_ms: int,
    retention_ms: int,
) -> tuple[Result, Record | None]:
    """The holder of ``token`` says the origin answered (``answered``: its status and
    fields, body omitted) while the body is still coming, and keeps the claim another
    ``lock_timeout_ms``; anyone else is refused (fenced)."""
    if lock_timeout_ms < 1 or retention_ms < 1:
        raise ValueError("lock_timeout_ms and retention_ms must be positive")
    held = _held_claim(record, token, now)
    if isinstance(held, str):
        return Result(Outcome.REFUSED, held), record
    return Result(Outcome.EXTENDED), InFlight(
        held.fingerprint,
        token,
        max(held.locked_until, now + lock_timeout_ms),
        held.created_at,
        answered,
        now + retention_ms,
    )


def release(record: Record | None, token: int, now: int) -> tuple[Result, Record | None]:
    """The holder of ``token`` gives the claim back (no response to keep); others are refused.

    The record stays, with its lock ended, so the next claim continues its tokens.
    """
    held = _held_claim(record, token, now)
    if isinstance(held, str):
        return Result(Outcome.REFUSED, held), record
    # The lock and its grace both end now: the next request claims the key, and the holder
    # that gave it back can no longer complete it.
    return Result(Outcome.RELEASED), InFlight(
        held.fingerprint, token, now - LATE_GRACE_MS, held.created_at
    )


def peek(record: Record | None, now: int) -> ClaimResult:
    """What a request would find, without claiming: ``ABSENT``, ``IN_FLIGHT`` or ``COMPLETED``."""
    if record is None or not is_live(record, now):
        return ClaimResult(Outcome.ABSENT)
    if isinstance(record, InFlight):
        if now < record.locked_until:
            return ClaimResult(
                Outcome.IN_FLIGHT, record.token, retry_after_ms=record.locked_until - now
            )
        return ClaimResult(Outcome.COMPLETED, record.token, response=record.answered)
    return ClaimResult(Outcome.COMPLETED, record.token, response=record.response)


#: Time after the origin's deadline for the holder to store its answer.
STORE_MARGIN_MS = 1_000


def in_flight_wait_ms(lock_left_ms: int, lock_timeout_ms: int, origin_timeout_ms: int) -> int:
    """How long a duplicate of a request in flight should wait before it asks again.

    The holder's request ends at the origins within ``origin_timeout_ms`` of its claim
    (retries included), and the claim was taken ``lock_timeout_ms - lock_left_ms`` ago, so
    its answer is stored by then (plus :data:`STORE_MARGIN_MS`); never past the lock's end,
    when the key may be taken over. At least a second.

    A claim still held past that point belongs to a request that is over at the origins
    without an answer to keep (its body was cut off, or its isolate died): it holds until
    the lock ends, so that is the wait.
    """
    elapsed = max(0, lock_timeout_ms - lock_left_ms)
    done_by = origin_timeout_ms + STORE_MARGIN_MS - elapsed
    if done_by <= 0:
        return max(1_000, lock_left_ms)
    return max(1_000, min(lock_left_ms, done_by))


def stored_response(
    status: int, headers: Fields, body: bytes | None, settings: IdempotencySettings
) -> StoredResponse:
    """The origin's response as it is kept: hop-by-hop fields dropped, a large body left out
    (``body`` is ``None`` when it was found too large without being read whole)."""
    fields = without_hop_by_hop(headers)
    if body is None or len(body) > settings.max_bytes:
        return StoredResponse(status, fields, None, body_too_large=True)
    return StoredResponse(status, fields, body)


def _held_claim(record: Record | None, token: int, now: int) -> InFlight | str:
    """The claim ``token`` holds (its lock may have ended within the grace), or why none."""
    if record is None:
        return "no claim for this key"
    if isinstance(record, Completed):
        return "the key's request is already completed"
    if record.token != token:
        return f"fenced: token {token} is not the claim's ({record.token})"
    if now >= record.locked_until + LATE_GRACE_MS:
        return "the claim's lock ended too long ago"
    return record


# --- storage -----------------------------------------------------------------------------


def encode_record(record: Record) -> str:
    """The record as compact JSON text (bodies in base64), for one storage value."""
    if isinstance(record, InFlight):
        data: dict[str, Any] = {
            "v": 1,
            "state": "in_flight",
            "fp": record.fingerprint,
            "token": record.token,
            "locked_until": record.locked_until,
            "created_at": record.created_at,
        }
        if record.answered is not None:
            data["answered"] = response_to_json(record.answered)
            data["expires_at"] = record.expires_at
    else:
        data = {
            "v": 1,
            "state": "completed",
            "fp": record.fingerprint,
            "token": record.token,
            "completed_at": record.completed_at,
            "expires_at": record.expires_at,
            "response": response_to_json(record.response),
        }
    return json.dumps(data, ensure_ascii=True, separators=(",", ":"))


def decode_record(text: str) -> Record:
    """Inverse of :func:`encode_record`; raises :class:`IdempotencyRecordError`."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("v") != 1:
            raise IdempotencyRecordError(f"not a version-1 idempotency record: {text[:80]!r}")
        state = data.get("state")
        fingerprint = _str(data, "fp")
        if state == "in_flight":
            answered = data.get("answered")
            return InFlight(
                fingerprint,
                _int(data, "token"),
                _int(data, "locked_until"),
                _int(data, "created_at"),
                None if answered is None else response_from_json(answered),
                0 if answered is None else _int(data, "expires_at"),
            )
        if state == "completed":
            return Completed(
                fingerprint,
                response_from_json(data.get("response")),
                _int(data, "completed_at"),
                _int(data, "expires_at"),
                _int(data, "token"),
            )
        raise IdempotencyRecordError(f"unknown record state {state!r}")
    except IdempotencyRecordError:
        raise
    except (ValueError, TypeError) as exc:
        raise IdempotencyRecordError(f"malformed idempotency record: {exc}") from exc


def response_to_json(response: StoredResponse) -> dict[str, Any]:
    """A stored response as JSON-able data (the body in base64)."""
    return {
        "status": response.status,
        "headers": [list(pair) for pair in response.headers],
        "body": None if response.body is None else base64.b64encode(response.body).decode("ascii"),
        "too_large": response.body_too_large,
    }


def response_from_json(data: object) -> StoredResponse:
    """Inverse of :func:`response_to_json`; raises :class:`IdempotencyRecordError`."""
    if not isinstance(data, dict):
        raise IdempotencyRecordError(f"a stored response must be an object, got {data!r}")
    headers = data.get("headers")
    if not isinstance(headers, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
        for pair in headers
    ):
        raise IdempotencyRecordError("stored response fields must be [name, value] pairs")
    raw_body = data.get("body")
    body: bytes | None = None
    if raw_body is not None:
        if not isinstance(raw_body, str):
            raise IdempotencyRecordError("a stored body must be base64 text or null")
        try:
            body = base64.b64decode(raw_body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise IdempotencyRecordError(f"a stored body is not base64: {exc}") from exc
    too_large = data.get("too_large")
    if not isinstance(too_large, bool):
        raise IdempotencyRecordError(f"too_large must be a bool, got {too_large!r}")
    return StoredResponse(
        _int(data, "status"), tuple((name, value) for name, value in headers), body, too_large
    )


def _int(data: dict[str, Any], name: str) -> int:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IdempotencyRecordError(f"{name!r} must be a non-negative int, got {value!r}")
    return value


def _str(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise IdempotencyRecordError(f"{name!r} must be a string, got {value!r}")
    return value
