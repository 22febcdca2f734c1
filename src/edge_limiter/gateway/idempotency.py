"""The idempotency stage: Idempotency-Key with exactly-once forwarding.

For the methods a route names (POST and PATCH by default), a request carrying an
``Idempotency-Key`` (draft-ietf-httpapi-idempotency-key-header, Stripe's semantics):

1. is answered from the edge copy in KV when its completed record is there and its
   fingerprint matches (no Durable Object call, no quota);
2. else claims the key in the key's Durable Object (the source of truth): a completed
   record is replayed (``Idempotent-Replayed: true``), a claim in flight is a 409 with
   ``Retry-After``, a different request under the same key is a 422;
3. holding the claim, goes through the rate limit and to the origin (to the end, and the
   record completed, even if its client goes away meanwhile). A request that is
   not forwarded (rate limited, or the origin failed before answering), or answered with a
   status saying it was not processed (408, 425, the origin's own 429), releases the claim,
   so its retry is forwarded; so does a 5xx unless the route stores them;
4. the origin's response is stored in the record (fenced by the claim's token: a holder
   whose lock ran out cannot overwrite its successor's result) before the client gets it,
   and copied to KV after the response. Once the body is slow in coming, the record
   takes the answer's status and fields at once, and the claim is extended while the
   body comes (``_Holding``): a retry is never forwarded again, even if this isolate
   goes away mid-body.

Replays and conflicts never consume rate-limit quota: the claim comes before the rate
limit, and a denied request gives its claim back.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable
from typing import Any

from ..core.caching.fields import is_stream_type
from ..core.config import Route
from ..core.errors import BodyReadError, IdempotencyKeyError, IdempotencyRecordError, ProtocolError
from ..core.http import problems
from ..core.http.fields import REASON_HEADER, origin_fields
from ..core.http.messages import SLOW_PART_MS, Headers, Response
from ..core.idempotency.fingerprint import ALWAYS_FINGERPRINTED, fingerprint
from ..core.idempotency.keys import parse_idempotency_key, scoped_name
from ..core.idempotency.protocol import IdempotencyAnswer, IdempotencyCall
from ..core.idempotency.records import (
    STORE_MARGIN_MS,
    Outcome,
    StoredResponse,
    in_flight_wait_ms,
    response_from_json,
    response_to_json,
    stored_response,
)
from ..core.idempotency.settings import IdempotencySettings
from ..core.keys import CALLER_FIELDS
from .exchange import Exchange, Handler, body_broken_response, problem_response
from .ports import IdempotencyStore, KeyValueStore, Services

KEY_HEADER = "idempotency-key"
REPLAYED_HEADER = "Idempotent-Replayed"
BODY_OMITTED_HEADER = "Idempotent-Replayed-Body"
EDGE_PREFIX = "i1|"
#: KV's shortest expiration; the edge copy's own expiry time is what is trusted.
KV_MIN_TTL_S = 60


def replay(stored: StoredResponse) -> Response:
    """The response a retry gets: the stored one, marked as a replay."""
    headers = Headers([pair for pair in stored.headers if pair[0].lower() != "content-length"])
    headers.set(REPLAYED_HEADER, "true")
    if stored.body_too_large:
        headers.set(
            BODY_OMITTED_HEADER,
            "omitted; larger than the route's idempotency.max_bytes, a live stream, or cut "
            "off on its way from the origin",
        )
    return Response(stored.status, headers, stored.body or None)


class Idempotency:
    """Exactly-once forwarding for requests carrying an Idempotency-Key; see the module."""

    def __init__(
        self,
        route: Route,
        settings: IdempotencySettings,
        store: IdempotencyStore,
        kv: KeyValueStore | None,
        services: Services,
        *,
        caller_fields: Iterable[str] = CALLER_FIELDS,
        by_host: bool = False,
    ) -> None:
        self.route = route
        self.settings = settings
        self.store = store
        self.kv = kv
        self.services = services
        self.timeout_ms = route.failure.store_timeout_ms
        self.fingerprinted = tuple(
            sorted({*ALWAYS_FINGERPRINTED, *caller_fields, *settings.fingerprint_headers})
        )
        """The request fields in a fingerprint: the caller's (``Config.caller_fields``),
        ``Content-Type`` and the route's own."""
        self.by_host = by_host
        """Whether a record is kept per canonical host: the origin can tell hosts apart
        (``forwarded_host``, or the route matches a host pattern), so the same key sent to
        two hosts is two operations."""

    async def __call__(self, exchange: Exchange, call_next: Handler) -> Response:
        request = exchange.request
        settings = self.settings
        sent_as = request.sent_as
        if not settings.applies_to(request.method) and not (
            # A POST taken as a PUT (an override) is still the POST the client protected.
            sent_as is not None and settings.applies_to(sent_as)
        ):
            return await call_next(exchange)
        raw = request.headers.get(KEY_HEADER)
        if raw is None and not settings.required:
            return await call_next(exchange)
        try:
            key = parse_idempotency_key(raw)
        except IdempotencyKeyError as exc:
            return problem_response(
                problems.idempotency_key_invalid(self.route.name, exc.code, str(exc))
            )
        identity = exchange.limit_key()
        if isinstance(identity, Response):
            return identity
        try:
            body = await request.read_body_at_most(settings.max_request_bytes)
        except BodyReadError:
            return problem_response(problems.request_body_broken())
        if body is None:
            return problem_response(
                problems.request_too_large(self.route.name, settings.max_request_bytes)
            )
        present = {
            name: value
            for name in self.fingerprinted
            if (value := request.headers.get(name)) is not None
        }
        print_ = fingerprint(
            request.method,
            exchange.path,
            request.query,
            hashlib.sha256(body).hexdigest(),
            headers=present,
            names=self.fingerprinted,
        )
        name = scoped_name(self.route.name, identity, key, exchange.host if self.by_host else "")

        edge = await self._edge_replay(name, print_, exchange.now_ms)
        if edge is not None:
            return edge
        # The claim, the request and the record's completion (or the claim's release) are
        # carried to their end even if the client goes away meanwhile (the platform would
        # drop the request): else the key stays locked for the lock's whole time, its
        # retries get 409, and then one is forwarded again although the origin acted.
        return await exchange.finish(self._claimed(exchange, call_next, name, print_))

    async def _claimed(
        self, exchange: Exchange, call_next: Handler, name: str, print_: str
    ) -> Response:
        """Claim the key, and holding the claim, forward the request and record its answer."""
        settings = self.settings
        # The object's clock starts the lock no earlier than this (for _Holding).
        claimed_at = self.services.clock.now_ms()
        try:
            answer = await self._call(
                name, IdempotencyCall("claim", print_, lock_timeout_ms=settings.lock_timeout_ms)
            )
        except (Exception, asyncio.CancelledError) as exc:
            return await self._unavailable(exchange, call_next, exc)
        if answer.outcome is Outcome.REPLAY and answer.response is not None:
            return replay(answer.response)
        if answer.outcome is Outcome.IN_FLIGHT:
            wait_ms = in_flight_wait_ms(
                answer.retry_after_ms, settings.lock_timeout_ms, exchange.forward.timeout_ms
            )
            seconds = max(1, -(-wait_ms // 1000))
            return problem_response(problems.idempotency_in_flight(self.route.name, seconds))
        if answer.outcome is Outcome.MISMATCH:
            return problem_response(problems.idempotency_mismatch(self.route.name))
        if answer.outcome is not Outcome.CLAIMED:
            return await self._unavailable(
                exchange, call_next, ProtocolError(f"unexpected claim answer {answer.outcome}")
            )

        token = answer.token
        exchange.idempotency_token = token
        response = await call_next(exchange)
        if (
            not exchange.reached_origin
            and exchange.sent_unanswered
            and settings.stores_status(response.status)
        ):
            # Sent, and no answer came (a timeout, a connection lost, an interim answer):
            # the origin may have acted, so the gateway's failure answer is the record's
            # (under store_5xx, as an origin's 5xx would be): a retry is replayed it,
            # never forwarded again.
            body = await response.read_body_at_most(settings.max_bytes)
            await self._complete(exchange, name, print_, token, response, body=body)
            return response
        if not exchange.reached_origin or not settings.stores_status(response.status):
            # Not forwarded (the rate limit, an open breaker, a full bulkhead), or the
            # origin says it did not process the request (its own 429, a 503): give the
            # key back for the retry.
            await self._release(name, token)
            return response
        try:
            # A body above max_bytes is not kept (the record says so), and not held in
            # memory either: the client gets it streamed. A live stream (server-sent
            # events) is not read at all: it may never end.
            data = None
            if not is_stream_type(response.headers.get("content-type")):
                holding = _Holding(
                    self,
                    name,
                    token,
                    response,
                    locked_until=claimed_at + settings.lock_timeout_ms,
                    idle_ms=exchange.forward.timeout_ms,
                )
                data = await response.read_body_at_most(settings.max_bytes, holding.progress)
        except BodyReadError as exc:
            # The origin acted but its answer was cut off (or stalled): the record keeps
            # its status and fields without a body, as for a body too large to keep, so a
            # retry is replayed that much and never forwarded again (exactly once).
            self._log("idempotency_error", op="origin_body", error=repr(exc))
            await self._complete(exchange, name, print_, token, response, body=None)
            return body_broken_response(exchange, self.route.name, response)
        await self._complete(exchange, name, print_, token, response, body=data)
        return response

    async def _complete(
        self,
        exchange: Exchange,
        name: str,
        print_: str,
        token: int,
        response: Response,
        *,
        body: bytes | None,
    ) -> None:
        """Store ``response`` (its ``body`` as read, ``None``: not kept) under the claim
        ``token`` holds, and copy it to the edge."""
        settings = self.settings
        fields = origin_fields(response.headers.items())
        kept = stored_response(response.status, fields, body, settings)
        try:
            done = await self._call(
                name,
                IdempotencyCall(
                    "complete", token=token, response=kept, retention_ms=settings.retention_ms
                ),
            )
        except (Exception, asyncio.CancelledError) as exc:
            self._log("idempotency_error", op="complete", error=repr(exc))
            return
        if done.outcome is Outcome.COMPLETED:
            self._copy_to_edge(exchange, name, print_, kept)
        else:
            # Fenced: our lock ran out and another request holds (or completed) the key.
            self._log("idempotency_fenced", reason=done.reason)

    async def _call(self, name: str, call: IdempotencyCall) -> IdempotencyAnswer:
        return await self.store.call(name, call, self.timeout_ms)

    async def _release(self, name: str, token: int) -> None:
        try:
            await self._call(name, IdempotencyCall("release", token=token))
        except (Exception, asyncio.CancelledError) as exc:
            # The claim then ends with its lock: a retry before that gets 409.
            self._log("idempotency_error", op="release", error=repr(exc))

    async def _unavailable(
        self, exchange: Exchange, call_next: Handler, exc: BaseException
    ) -> Response:
        fail_open = self.route.failure.fail_open
        self._log(
            "idempotency_unavailable",
            cause=type(exc).__name__,
            policy="open" if fail_open else "closed",
        )
        if not fail_open:
            return problem_response(problems.idempotency_unavailable(self.route.name))
        response = await call_next(exchange)
        response.headers.set(REASON_HEADER, "idempotency_unavailable")
        return response

    async def _edge_replay(self, name: str, print_: str, now: int) -> Response | None:
        if self.kv is None:
            return None
        try:
            data = await self.kv.get(EDGE_PREFIX + name)
        except Exception as exc:  # KV is only a shortcut: the Durable Object decides
            self._log("idempotency_edge_error", op="get", error=repr(exc))
            return None
        if data is None:
            return None
        try:
            record: dict[str, Any] = json.loads(data)
            if record["fp"] != print_ or now >= int(record["exp"]):
                return None
            return replay(response_from_json(record["response"]))
        except (ValueError, KeyError, TypeError, IdempotencyRecordError):
            return None

    def _copy_to_edge(
        self, exchange: Exchange, name: str, print_: str, kept: StoredResponse
    ) -> None:
        if self.kv is None:
            return
        expires = exchange.now_ms + self.settings.retention_ms
        record = {"fp": print_, "exp": expires, "response": response_to_json(kept)}
        data = json.dumps(record, separators=(",", ":")).encode()
        ttl = max(KV_MIN_TTL_S, -(-self.settings.retention_ms // 1000))
        exchange.background.defer(self._put(EDGE_PREFIX + name, data, ttl))

    async def _put(self, key: str, data: bytes, ttl_s: int) -> None:
        assert self.kv is not None
        try:
            await self.kv.put(key, data, ttl_s)
        except Exception as exc:
            self._log("idempotency_edge_error", op="put", error=repr(exc))

    def _log(self, event: str, **fields: Any) -> None:
        self.services.log({"event": event, "route": self.route.name, **fields})


class _Holding:
    """Keeps a claim while the origin's answer's body is read (a slow but steady body may
    outlast the lock): checked between parts of the body, no timer of its own.

    Each part comes within ``idle_ms`` of the last (else the read fails, and the record is
    completed at once), so whenever the lock would end before the next part could come
    and be stored, the lock is extended (``extend``, with the answer's status and fields:
    from then on the key is never forwarded again, even if this isolate goes away before
    it completes the record). The first ``extend`` comes sooner: as soon as a part is
    :data:`SLOW_PART_MS` late (the body reader awaits ``progress`` then), so that the
    record holds the head while the body comes.
    """

    __slots__ = (
        "idle_ms",
        "locked_until",
        "name",
        "recorded",
        "response",
        "since",
        "stage",
        "token",
    )

    def __init__(
        self,
        stage: Idempotency,
        name: str,
        token: int,
        response: Response,
        *,
        locked_until: int,
        idle_ms: int,
    ) -> None:
        self.stage = stage
        self.name = name
        self.token = token
        self.response = response
        self.locked_until = locked_until
        self.idle_ms = idle_ms
        self.since = stage.services.clock.now_ms()
        """When the answer's head came."""
        self.recorded = False
        """Whether the record holds the head (status and fields) yet."""

    async def progress(self) -> None:
        stage = self.stage
        now = stage.services.clock.now_ms()
        # The head goes into the record as soon as the body is slow in coming (a body
        # that comes at once is stored whole a moment later: no call for it), and the
        # lock is extended before it would end.
        slow = not self.recorded and now - self.since >= SLOW_PART_MS
        if not slow and self.locked_until - now > self.idle_ms + STORE_MARGIN_MS:
            return
        settings = stage.settings
        fields = origin_fields(self.response.headers.items())
        head = stored_response(self.response.status, fields, None, settings)
        call = IdempotencyCall(
            "extend",
            token=self.token,
            response=head,
            lock_timeout_ms=settings.lock_timeout_ms,
            retention_ms=settings.retention_ms,
        )
        try:
            done = await stage._call(self.name, call)
        except (Exception, asyncio.CancelledError) as exc:
            stage._log("idempotency_error", op="extend", error=repr(exc))
            self.locked_until = now + self.idle_ms + STORE_MARGIN_MS + 1_000  # again in 1 s
            self.since = now + 1_000  # and the head too, not before every part
            return
        if done.outcome is Outcome.EXTENDED:
            self.recorded = True
            self.locked_until = max(self.locked_until, now + settings.lock_timeout_ms)
        else:
            stage._log("idempotency_fenced", reason=done.reason)
            self.locked_until = now + (1 << 62)  # another holds the key: nothing to keep
