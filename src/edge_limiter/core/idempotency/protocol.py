"""The one-call protocol between the Worker and a key's idempotency Durable Object.

The Worker sends an :class:`IdempotencyCall` (JSON text). The Durable Object
(:class:`RecordStore`, the object's logic) loads the key's record, runs :func:`apply_call`
with its own clock, stores the new record (or deletes it when ``None``), sets an alarm at
:func:`~.records.idle_at` to delete it later, and answers with the
:class:`IdempotencyAnswer` text. :func:`apply_stored` does all of that but the I/O, on the
stored text itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import IdempotencyRecordError, ProtocolError
from ..objects import Method, Sql, SqlCell, malformed
from .records import (
    ClaimResult,
    Outcome,
    Record,
    Result,
    StoredResponse,
    claim,
    complete,
    decode_record,
    encode_record,
    extend,
    idle_at,
    peek,
    release,
    response_from_json,
    response_to_json,
)
from .settings import DEFAULT_LOCK_TIMEOUT_MS, DEFAULT_RETENTION_MS

OPS = ("claim", "complete", "extend", "release", "get")


@dataclass(frozen=True, slots=True)
class IdempotencyCall:
    """One step the Worker asks of a key's Durable Object.

    ``claim`` needs ``fingerprint`` (and uses ``lock_timeout_ms``); ``complete`` needs
    ``token`` and ``response`` (and uses ``retention_ms``); ``extend`` needs ``token`` and
    ``response`` (the status and fields, body omitted) and uses both times; ``release``
    needs ``token``; ``get`` needs nothing. Raises :class:`ProtocolError` when a field it needs is missing.
    """

    op: str
    fingerprint: str = ""
    token: int = 0
    response: StoredResponse | None = None
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    retention_ms: int = DEFAULT_RETENTION_MS

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ProtocolError(f"unknown idempotency op {self.op!r} (known: {', '.join(OPS)})")
        for name in ("token", "lock_timeout_ms", "retention_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ProtocolError(f"{name} must be a non-negative int, got {value!r}")
        if self.lock_timeout_ms < 1 or self.retention_ms < 1:
            raise ProtocolError("lock_timeout_ms and retention_ms must be positive")
        if self.op == "claim" and not self.fingerprint:
            raise ProtocolError("a claim needs the request's fingerprint")
        if self.op in ("complete", "extend", "release") and self.token < 1:
            raise ProtocolError(f"{self.op} needs the token of the claim")
        if self.op in ("complete", "extend") and self.response is None:
            raise ProtocolError(f"{self.op} needs the response to store")

    def to_json(self) -> str:
        """Compact JSON text for the RPC call."""
        data: dict[str, Any] = {
            "op": self.op,
            "fp": self.fingerprint,
            "token": self.token,
            "lock": self.lock_timeout_ms,
            "retain": self.retention_ms,
            "response": None if self.response is None else response_to_json(self.response),
        }
        return json.dumps(data, ensure_ascii=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> IdempotencyCall:
        """Parse and validate; raises :class:`ProtocolError`."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ProtocolError("an idempotency call must be a JSON object")
            fingerprint = data.get("fp", "")
            if not isinstance(fingerprint, str):
                raise ProtocolError(f"fp must be a string, got {fingerprint!r}")
            raw_response = data.get("response")
            response = None if raw_response is None else response_from_json(raw_response)
            return cls(
                op=data["op"],
                fingerprint=fingerprint,
                token=data.get("token", 0),
                response=response,
                lock_timeout_ms=data.get("lock", DEFAULT_LOCK_TIMEOUT_MS),
                retention_ms=data.get("retain", DEFAULT_RETENTION_MS),
            )
        except ProtocolError:
            raise
        except (ValueError, TypeError, KeyError, IdempotencyRecordError) as exc:
            raise malformed("idempotency call", exc) from exc


@dataclass(frozen=True, slots=True)
class IdempotencyAnswer:
    """What the Durable Object answers: the step's outcome and what goes with it."""

    outcome: Outcome
    token: int = 0
    retry_after_ms: int = 0
    response: StoredResponse | None = None
    reason: str = ""

    def to_json(self) -> str:
        """Compact JSON text for the RPC answer."""
        data: dict[str, Any] = {"outcome": self.outcome.value}
        if self.token:
            data["token"] = self.token
        if self.retry_after_ms:
            data["retry_after_ms"] = self.retry_after_ms
        if self.response is not None:
            data["response"] = response_to_json(self.response)
        if self.reason:
            data["reason"] = self.reason
        return json.dumps(data, ensure_ascii=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> IdempotencyAnswer:
        """Parse an answer; raises :class:`ProtocolError`."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ProtocolError("an idempotency answer must be a JSON object")
            token = data.get("token", 0)
            retry_after_ms = data.get("retry_after_ms", 0)
            reason = data.get("reason", "")
            for value in (token, retry_after_ms):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ProtocolError(f"bad number in answer: {value!r}")
            if not isinstance(reason, str):
                raise ProtocolError(f"bad reason in answer: {reason!r}")
            raw_response = data.get("response")
            return cls(
                outcome=Outcome(data["outcome"]),
                token=token,
                retry_after_ms=retry_after_ms,
                response=None if raw_response is None else response_from_json(raw_response),
                reason=reason,
            )
        except ProtocolError:
            raise
        except (ValueError, TypeError, KeyError, IdempotencyRecordError) as exc:
            raise malformed("idempotency answer", exc) from exc


def apply_call(call: IdempotencyCall, record: Record | None, now: int) -> tuple[str, Record | None]:
    """Run ``call`` on ``record`` at ``now``: the answer's JSON text and the record to store."""
    new: Record | None
    if call.op == "claim":
        claimed, new = claim(record, call.fingerprint, now, call.lock_timeout_ms)
        answer = _from_claim(claimed)
    elif call.op == "complete":
        if call.response is None:  # IdempotencyCall refuses this; narrows the type
            raise ProtocolError("complete needs the response to store")
        done, new = complete(record, call.token, call.response, now, call.retention_ms)
        answer = _from_result(done)
    elif call.op == "extend":
        if call.response is None:  # IdempotencyCall refuses this; narrows the type
            raise ProtocolError("extend needs the answer's status and fields")
        done, new = extend(
            record,
            call.token,
            call.response,
            now,
            lock_timeout_ms=call.lock_timeout_ms,
            retention_ms=call.retention_ms,
        )
        answer = _from_result(done)
    elif call.op == "release":
        done, new = release(record, call.token, now)
        answer = _from_result(done)
    else:  # get
        answer, new = _from_claim(peek(record, now)), record
    return answer.to_json(), new


def apply_stored(
    call_text: str, stored: str | None, now: int
) -> tuple[str, str | None, int | None]:
    """:func:`apply_call` on stored text: the answer, the text to store and when to delete it.

    The second and third items are ``None`` when the record is to be deleted. A stored
    record that cannot be decoded is treated as absent, so its key is usable again rather
    than stuck; a fresh claim's token (``now`` or later) still exceeds the token of every
    claim whose lock has ended. Raises :class:`ProtocolError` when ``call_text`` is
    malformed.
    """
    call = IdempotencyCall.from_json(call_text)
    record: Record | None = None
    if stored is not None:
        try:
            record = decode_record(stored)
        except IdempotencyRecordError:
            record = None
    answer, new = apply_call(call, record, now)
    if new is None:
        return answer, None, None
    return answer, encode_record(new), idle_at(new)


def _from_claim(result: ClaimResult) -> IdempotencyAnswer:
    return IdempotencyAnswer(result.outcome, result.token, result.retry_after_ms, result.response)


def _from_result(result: Result) -> IdempotencyAnswer:
    return IdempotencyAnswer(result.outcome, reason=result.reason)


def _answer_of(text: str, call: IdempotencyCall) -> IdempotencyAnswer:
    del call
    return IdempotencyAnswer.from_json(text)


CALL: Method[IdempotencyCall, IdempotencyAnswer] = Method(
    "call", IdempotencyCall.to_json, _answer_of
)
"""``IdempotencyRecords.call``: one step, its answer (:mod:`edge_limiter.core.objects`)."""


class RecordStore:
    """The idempotency-record Durable Object's logic: one key's record in one row.

    :meth:`call` is the only way in: load the row, run :func:`apply_stored` with the
    object's clock, write or delete the row, answer, with nothing between the read and the
    write, so claims on one key are serialised by the object itself. The alarm deletes
    the record once it has expired (:meth:`alarm_wanted`, :meth:`alarm`).
    """

    def __init__(self, sql: Sql) -> None:
        self.record = SqlCell(sql, "record")
        self.alarm_at: int | None = None
        """When the alarm is set for (None: not set by this instance)."""
        self._wanted: int | None = None

    def call(self, payload: str, now: int) -> str:
        """Run one idempotency call (claim, complete, extend, release or get); its answer."""
        answer, new, idle_at = apply_stored(payload, self.record.get(), now)
        if new is None:
            self.record.delete()
            return answer
        self.record.put(new)
        if idle_at is not None and (self.alarm_at is None or idle_at > self.alarm_at):
            # One alarm at the latest instant the record may be deleted; when it fires
            # early (the record was renewed) it re-arms itself.
            self.alarm_at = self._wanted = idle_at
        return answer

    def alarm_wanted(self) -> int | None:
        """When to set the alarm, if the last call moved it (else None)."""
        wanted, self._wanted = self._wanted, None
        return wanted

    def alarm(self, now: int) -> int | None:
        """The alarm: delete the record once it is no longer live; while it is, when to
        fire again."""
        self.alarm_at = None
        stored = self.record.get()
        if stored is None:
            return None
        _answer, _same, idle_at = apply_stored(IdempotencyCall("get").to_json(), stored, now)
        if idle_at is None or idle_at <= now:
            self.record.delete()
            return None
        self.alarm_at = idle_at
        return idle_at
