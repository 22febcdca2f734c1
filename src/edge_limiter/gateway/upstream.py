"""The last stage: the request, as canonicalized and counted, to the best origin of its pool.

For each request:

1. its pool's origins are put in order for the client (:func:`order_origins`: its country,
   then its continent, then distance, then priority);
2. an attempt goes to the first origin whose circuit breaker allows a call and whose
   bulkhead (at most ``max_in_flight`` per origin in this isolate) has room; the others are
   skipped, never queued for;
3. a failure (timeout, connection error, a failure status such as 502/503/504, or a 429
   where the pool says ``pause_on_429``, which parks the origin until its ``Retry-After``)
   is recorded on the breaker whatever the method and however the body was sent (only an
   upload the client broke off counts neither way), and an
   idempotent request (GET, HEAD, OPTIONS, PUT, DELETE, or one holding an Idempotency-Key
   claim) is retried on the next origin in the order after a full-jitter backoff,
   within the route's deadline and the pool's retry budget; a POST without a claim never
   is, unless the attempt certainly never left (no connection was made): then any request
   whose body can be sent again goes to the next origin at once (see
   :func:`~edge_limiter.core.resilience.retry.resend_is_free`);
4. when every attempt failed: the last origin's own answer, or 502/503/504 saying which
   origins were tried and why (breaker-open answers carry ``Retry-After``).

Each isolate keeps its own copy of every origin's breaker and reports what it saw to the
origin's shared breaker (a Durable Object) after the response, at most about once a
second; the answer replaces its copy, so an outage one isolate sees protects the others.
If that Durable Object is unreachable, the isolate's own breaker goes on deciding alone.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..core.caching.fields import connection_named
from ..core.config import Route
from ..core.errors import BodyReadError
from ..core.http import problems
from ..core.http.messages import BytesBody, Request, Response
from ..core.http.method_override import OVERRIDE_FIELDS
from ..core.http.origin_headers import (
    FORWARDED_AS_FIELDS,
    FORWARDED_HOST_FIELDS,
    PATH_OVERRIDE_FIELDS,
)
from ..core.resilience.backoff import parse_retry_after, retry_delay_ms
from ..core.resilience.breaker import (
    BreakerDecision,
    BreakerSettings,
    BreakerState,
    Outcome,
    Permit,
    Phase,
    Refusal,
    Report,
    allow,
    classify,
    current_phase,
    overloaded,
    record,
)
from ..core.resilience.budget import RetryBudget, RetryBudgetState
from ..core.resilience.bulkhead import Bulkhead
from ..core.resilience.retry import (
    Delivery,
    RetrySettings,
    counts_on_breaker,
    delivery_of,
    is_idempotent,
    may_resend,
    resend_is_free,
)
from ..core.resilience.shared import MAX_PENDING_REPORTS, SyncCall, adopt
from ..core.routing.geo import ClientLocation, order_origins
from ..core.routing.origins import Origin, Pool
from .exchange import Exchange, problem_response
from .ports import (
    DEFERRED_GIVEN_UP_MS,
    Background,
    ClientBodyError,
    OriginConnectError,
    OriginRequest,
    OriginTimeoutError,
    OriginUnreachableError,
    Services,
)

ORIGIN_HEADER = "X-Origin"
#: How stale an isolate's copy of a shared breaker may get before it reports and refreshes
#: (after the response).
SYNC_EVERY_MS = 1_000
#: A copy older than this (a new isolate, or no traffic for a while) is refreshed before it
#: decides: one round trip, so a breaker a health probe or another isolate opened holds
#: from this isolate's first request on.
REFRESH_BEFORE_USE_MS = 10_000
#: The most a request waits for that refresh; past it, the old copy decides.
REFRESH_TIMEOUT_S = 0.2
#: The longest an origin's Retry-After may park it.
MAX_RETRY_AFTER_MS = 300_000
#: Fields dropped from every forwarded request besides those: ``Expect: 100-continue``
#: asks the origin for an interim ``100 Continue``, which the runtime's fetch takes as the
#: final answer (local workerd hands it back as the response); the client's own
#: expectation is the runtime's to answer, and the body is sent whole either way. And the
#: fields for a proxy between the client and the gateway (RFC 9110 11.7.4: a client's
#: proxy credentials are that proxy's, never the origin's).
DROPPED_FIELDS = frozenset(
    (
        *PATH_OVERRIDE_FIELDS,
        *FORWARDED_AS_FIELDS,
        "expect",
        "proxy-authorization",
        "proxy-connection",
    )
)
#: The scheme field every forwarded request carries (see ``Upstream.__call__``).
PROTO_FIELD = FORWARDED_HOST_FIELDS[1]
#: A request body is kept in memory, so that it can be sent again, up to this size (its
#: Content-Length): for retries (an idempotent request, ``attempts`` above 1), and on a
#: pool with another origin to fall back to, for any method (a request that never left,
#: its connection refused, goes to the next origin). A larger one, or one of unknown
#: length (chunked), is sent once, streamed: if its connection is refused, the client
#: gets the 502 (and the origin's breaker still counts the failure).
MAX_REPLAY_BODY_BYTES = 1 << 20


@dataclass(slots=True)
class _Copy:
    """This isolate's copy of one origin's breaker, and what it has not reported yet."""

    state: BreakerState = field(default_factory=BreakerState)
    pending: list[Report] = field(default_factory=list)
    synced_at: int = -SYNC_EVERY_MS
    syncing: bool = False
    """A sync began at ``synced_at`` and has not ended (see :meth:`busy`)."""
    settings: BreakerSettings | None = None
    """The pool's breaker settings, from the last call decided (to replay reports)."""
    urgent: bool = False
    """The copy changed phase (tripped open, or closed again): report it at once, not
    within the second, since no request may come to carry the report later."""

    def busy(self, now: int) -> bool:
        """Whether a sync is under way: one begun :data:`DEFERRED_GIVEN_UP_MS` ago was cut
        off with the work it ran in, and no longer keeps the copy from syncing."""
        return self.syncing and now - self.synced_at < DEFERRED_GIVEN_UP_MS


class BreakerBoard:
    """Every origin's breaker as this isolate sees it, kept in step with the shared ones."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.copies: dict[str, _Copy] = {}

    def _copy(self, name: str) -> _Copy:
        copy = self.copies.get(name)
        if copy is None:
            copy = self.copies[name] = _Copy()
        return copy

    def take(self, origin: str, shared: BreakerState, now: int) -> None:
        """Adopt the shared breaker's state (``shared``, as its object answers) into this
        isolate's copy: a health probe's verdict holds here from the next request."""
        copy = self._copy(origin)
        copy.state = adopt(copy.state, shared, copy.settings, copy.pending)
        copy.synced_at = now

    def allow(self, origin: str, settings: BreakerSettings, now: int) -> BreakerDecision:
        copy = self._copy(origin)
        copy.settings = settings
        decision, copy.state = allow(copy.state, settings, now)
        return decision

    def give_back(self, origin: str, settings: BreakerSettings, permit: Permit) -> None:
        """Return an unused permit (a half-open trial that was never made)."""
        copy = self._copy(origin)
        copy.state = record(copy.state, settings, 0, Outcome.OVERLOAD, permit)

    def phase(self, origin: str, now: int) -> str:
        state = self._copy(origin).state
        return f"forced_{state.forced}" if state.forced else current_phase(state, now).value

    def record(
        self,
        origin: str,
        settings: BreakerSettings,
        now: int,
        outcome: Outcome,
        *,
        permit: Permit | None,
        overloaded_until: int = 0,
    ) -> None:
        copy = self._copy(origin)
        if copy.state.forced:
            # Forced by an operator: the call counts nowhere, and no report of it goes
            # out to count once its breaker decides again (``auto``).
            return
        before = current_phase(copy.state, now)
        paused_before = copy.state.cool_down_until
        if outcome is Outcome.OVERLOAD and overloaded_until > now:
            copy.state = overloaded(copy.state, now, overloaded_until)
        copy.state = record(copy.state, settings, now, outcome, permit)
        copy.pending.append(Report(now, outcome, permit, overloaded_until))
        del copy.pending[:-MAX_PENDING_REPORTS]
        if current_phase(copy.state, now) != before or copy.state.cool_down_until > paused_before:
            # A trip, a close, or a new pause: every isolate should know now, not with a
            # later request (there may be none for a while).
            copy.urgent = True

    def sync_soon(
        self, origin: str, settings: BreakerSettings, now: int, background: Background
    ) -> None:
        """Report and refresh after the response when the copy is about a second old."""
        if self.services.breakers is None:
            return
        copy = self._copy(origin)
        if copy.busy(now) or (not copy.urgent and now - copy.synced_at < SYNC_EVERY_MS):
            return
        copy.syncing = True
        copy.synced_at = now
        background.defer(self._sync(origin, settings, copy))

    async def refresh_if_old(self, origin: str, settings: BreakerSettings, now: int) -> None:
        """Refresh a copy too old to trust before it decides (see REFRESH_BEFORE_USE_MS),
        or one about to send a half-open trial on what it knew before the wait ended (a
        health probe or another isolate's trial may have opened it again since)."""
        if self.services.breakers is None:
            return
        copy = self._copy(origin)
        if copy.busy(now):
            return
        state = copy.state
        waking = (
            state.phase is Phase.OPEN
            and not state.forced
            and copy.synced_at < state.open_until <= now
        )
        if not waking and now - copy.synced_at < REFRESH_BEFORE_USE_MS:
            return
        copy.syncing = True
        copy.synced_at = now
        try:
            await asyncio.wait_for(self._sync(origin, settings, copy), REFRESH_TIMEOUT_S)
        except TimeoutError:
            copy.syncing = False

    async def _sync(self, origin: str, settings: BreakerSettings, copy: _Copy) -> None:
        assert self.services.breakers is not None
        try:
            while True:
                # A phase change recorded while a report was on its way goes out at once
                # too (the loop), not with some later request's report.
                copy.urgent = False
                reports, copy.pending = copy.pending, []
                try:
                    answer = await self.services.breakers.sync(
                        origin, SyncCall(settings, tuple(reports))
                    )
                    # What was recorded while the answer was on its way is replayed on it.
                    copy.state = adopt(copy.state, answer, settings, copy.pending)
                except Exception as exc:  # the isolate's own breaker goes on deciding alone
                    copy.pending = (reports + copy.pending)[-MAX_PENDING_REPORTS:]
                    self.services.log(
                        {"event": "breaker_sync_error", "origin": origin, "error": repr(exc)[:200]}
                    )
                    return
                if not (copy.urgent and copy.pending):
                    return
        finally:
            copy.syncing = False


@dataclass(slots=True)
class _Tried:
    """What happened at one origin (for the log and a failure's problem body)."""

    origin: str
    outcome: str
    status: int | None = None
    retry_after_ms: int = 0
    timeout_ms: int = 0
    """A timed-out attempt's own timeout (the origin's, or what was left of the route's)."""

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"origin": self.origin, "outcome": self.outcome}
        if self.status is not None:
            out["status"] = self.status
        if self.timeout_ms:
            out["timeout_ms"] = self.timeout_ms
        return out


class Upstream:
    """Sends requests to their pool's origins; see the module docstring."""

    def __init__(
        self,
        services: Services,
        client_ip_header: str | None = None,
        origin_fields: dict[str, tuple[tuple[str, str], ...]] | None = None,
        *,
        forwarded_host: bool = False,
        drop_overrides: bool = True,
    ) -> None:
        self.services = services
        self.client_ip_header = client_ip_header
        self.forwarded_host = forwarded_host
        """Whether origins are told the host and scheme the client asked for."""
        self.dropped = DROPPED_FIELDS | frozenset(OVERRIDE_FIELDS if drop_overrides else ())
        own = {
            PROTO_FIELD,
            "cf-connecting-ip",
            *([client_ip_header.lower()] if client_ip_header else []),
        }
        self._underscored = frozenset(own)
        self.underscored: dict[str, frozenset[str]] = {
            pool: frozenset({*own, *(name.lower() for name, _ in fields)})
            for pool, fields in (origin_fields or {}).items()
        }
        """By pool, the fields the gateway sets itself on requests to its origins: a
        client's copy in another spelling (``_`` for ``-``, which a CGI-style origin reads
        as the same field) is dropped; the one spelled as the gateway sets it is replaced."""
        """The client's fields no origin gets: a method override is one too wherever the
        gateway applies or refuses overrides (on a POST it was applied or refused before
        this; on another method, an origin that honours it would run a method that was
        not counted, and a cache would keep its answer for the GET)."""
        self.origin_fields = origin_fields or {}
        """By pool name, the fields set on every request to its origins (origin_headers)."""
        self.breakers = BreakerBoard(services)
        self.bulkheads: dict[str, Bulkhead] = {}
        self.budgets: dict[tuple[str, RetrySettings], RetryBudgetState] = {}
        # The rules of each pool's budget, built once (not per request).
        self._budget_rules: dict[RetrySettings, RetryBudget] = {}
        self.orders: dict[tuple[Any, ...], tuple[Origin, ...]] = {}
        self._route_fields: dict[tuple[str, str], frozenset[str]] = {}

    def _own_fields(self, pool: str, route: Route | None) -> frozenset[str]:
        """The fields a client may send to this pool's origins only in the gateway's own
        spelling: those the gateway sets, and the route's key headers (an ``x_api_key``
        that a CGI-style origin reads as ``X-Api-Key`` would reach it uncounted: the
        request was counted as lacking the key)."""
        fields = self.underscored.get(pool, self._underscored)
        if route is None:
            return fields
        cached = self._route_fields.get((pool, route.name))
        if cached is None:
            parts = route.limits.key.parts
            keys = {part.name.lower() for part in parts if part.kind == "header"}
            cached = self._route_fields[(pool, route.name)] = fields | keys
        return cached

    def _order(self, pool: Pool, exchange: Exchange) -> tuple[Origin, ...]:
        if len(pool.origins) == 1:
            return pool.origins
        client = exchange.request.client
        key = (pool.name, client.country, client.continent, client.latitude, client.longitude)
        order = self.orders.get(key)
        if order is None:
            # Read as request.cf is read: a code or coordinate no place has (lower case,
            # XX, an infinite or out-of-range latitude, as a local MF-CF-Blob may say) is
            # no location, never an error.
            where = ClientLocation.from_cf(
                {
                    "country": client.country,
                    "continent": client.continent,
                    "latitude": client.latitude,
                    "longitude": client.longitude,
                }
            )
            order = order_origins(pool.origins, where)
            if len(self.orders) > 4_096:  # bounded: a handful of locations per pool
                self.orders.clear()
            self.orders[key] = order
        return order

    def _bulkhead(self, origin: Origin) -> Bulkhead:
        bulkhead = self.bulkheads.get(origin.name)
        if bulkhead is None:
            bulkhead = self.bulkheads[origin.name] = Bulkhead(origin.max_in_flight)
        return bulkhead

    def _give_back(self, origin: Origin, pool: Pool, permit: Permit) -> None:
        """Undo a choice that will not be used: its bulkhead slot and any trial permit."""
        self._bulkhead(origin).release()
        self.breakers.give_back(origin.name, pool.breaker, permit)

    async def _choose(
        self,
        order: tuple[Origin, ...],
        start: int,
        pool: Pool,
        now: int,
        tried: list[_Tried],
        *,
        background: Background,
    ) -> tuple[int, Origin, Permit] | None:
        """The first origin from ``start`` (wrapping) that may take a call now."""
        for step in range(len(order)):
            position = (start + step) % len(order)
            origin = order[position]
            bulkhead = self._bulkhead(origin)
            if not bulkhead.try_acquire():
                tried.append(_Tried(origin.label, "bulkhead_full"))
                continue
            await self.breakers.refresh_if_old(origin.name, pool.breaker, now)
            decision = self.breakers.allow(origin.name, pool.breaker, now)
            if decision.permit is None:
                # Skipped, not called: still report and refresh it about once a second.
                self.breakers.sync_soon(origin.name, pool.breaker, now, background)
                bulkhead.release()
                refusal = decision.refusal.value if decision.refusal else "open"
                outcome = refusal if refusal in ("overloaded", "forced_open") else "breaker_open"
                wait = decision.retry_after_ms
                if decision.refusal is Refusal.FORCED_OPEN:
                    # Out for maintenance, with no end known: the pool's own open time is
                    # the wait to suggest (not a second, which invites a retry storm).
                    wait = pool.breaker.open_for_ms
                elif decision.refusal is Refusal.TRIALS_IN_FLIGHT:
                    # The trials out end within the origin's timeout (the breaker's own
                    # wait is for trials that never report back): say when they will have.
                    issued_ago = pool.breaker.trial_timeout_ms - wait
                    wait = max(1, min(wait, origin.timeout_ms - issued_ago))
                tried.append(_Tried(origin.label, outcome, retry_after_ms=wait))
                continue
            return position, origin, decision.permit
        return None

    def _budget(self, retry: RetrySettings) -> RetryBudget:
        rules = self._budget_rules.get(retry)
        if rules is None:
            rules = self._budget_rules[retry] = retry.budget()
        return rules

    def _may_retry(self, exchange: Exchange, retry: RetrySettings, now: int) -> bool:
        key = (exchange.forward.pool.name, retry)
        allowed, self.budgets[key] = self._budget(retry).try_spend(
            self.budgets.get(key, RetryBudgetState()), now
        )
        return allowed

    async def __call__(self, exchange: Exchange) -> Response:
        services = self.services
        clock = services.clock
        forward = exchange.forward
        pool, retry = forward.pool, forward.retry
        request = exchange.request
        request.headers.discard(self.dropped, self._own_fields(pool.name, exchange.route))
        # The scheme the client used, never what it claims (Rails' force_ssl would answer a
        # client's "http" with a redirect, cached for everyone); origin_headers may say
        # otherwise.
        if request.headers.get(PROTO_FIELD) != request.scheme:
            # (Cloudflare's edge sets it to the same already: then the fields stay as they
            # came, with no copy made.)
            request.headers.set(PROTO_FIELD, request.scheme)
        for name, value in self.origin_fields.get(pool.name, ()):
            request.headers.set(name, value)  # whatever the client sent under that name
        if self.client_ip_header is not None:
            # The origin learns the client's address from the gateway, never from the
            # client: whatever the client put in this field is replaced.
            ip = request.client.ip
            if ip:
                request.headers.set(self.client_ip_header, ip)
            else:
                request.headers.delete(self.client_ip_header)
        if self.forwarded_host:
            # What the client asked for, as matched (the canonical host): the request's
            # own Host names the origin once it is sent there.
            request.headers.set(FORWARDED_HOST_FIELDS[0], exchange.host)
        order = self._order(pool, exchange)
        start = clock.now_ms()
        deadline = start + forward.timeout_ms
        claim = exchange.idempotency_token is not None
        idempotent = is_idempotent(request.method, claim)
        try:
            # Kept in memory (up to MAX_REPLAY_BODY_BYTES) only where it may be sent
            # again: a retry of an idempotent request, or, on a pool with another origin,
            # a resend of any request that never left. Elsewhere it streams as it comes.
            if (idempotent and retry.attempts > 1) or len(order) > 1:
                replayable = await _replayable(request)
            else:
                replayable = _in_memory(request)
        except BodyReadError:
            return problem_response(problems.request_body_broken())
        budget_key = (pool.name, retry)
        if replayable and retry.attempts > 1:
            self.budgets[budget_key] = self._budget(retry).note_request(
                self.budgets.get(budget_key, RetryBudgetState()), start
            )
        # Each attempt holds a bulkhead slot (and maybe the breaker's half-open trial)
        # until its answer is judged: carried to its end even if the client goes away
        # meanwhile (the platform would drop the request: a slot never given back is lost
        # for the isolate's life, an outcome never recorded never opens the breaker).
        resolve = exchange.hold()
        try:
            return await self._attempts(exchange, order, deadline, replayable)
        finally:
            exchange.release(resolve)

    async def _attempts(
        self, exchange: Exchange, order: tuple[Origin, ...], deadline: int, replayable: bool
    ) -> Response:
        """The attempts at the origins in ``order`` (up to the route's ``attempts`` when
        the request can be sent again, ``replayable``; one otherwise, and resends of one
        that never left): the first answer to pass on, or the failure's (see the module
        docstring)."""
        services = self.services
        clock = services.clock
        pool, retry = exchange.forward.pool, exchange.forward.retry
        request = exchange.request
        claim = exchange.idempotency_token is not None
        tried: list[_Tried] = []
        last: Response | None = None
        # Origins that answered with a Retry-After: until when (an attempt going back to
        # one, after the next origin in the order failed too, still waits for it).
        asked_until: dict[str, int] = {}
        position = 0
        attempts = retry.attempts if replayable else 1
        counted = 0  # attempts made that count towards ``attempts``
        # Resends of a request that never left, each to another origin: its first
        # delivery, not a retry (no backoff, no budget, not one of ``attempts``).
        free_left = len(order) - 1 if replayable else 0
        free = False
        number = 0  # every attempt, for the log
        while True:
            now = clock.now_ms()
            if counted and not free and not self._may_retry(exchange, retry, now):
                services.log({"event": "retry_budget_exhausted", "route": exchange.route_name})
                break
            chosen = await self._choose(
                order, position, pool, now, tried, background=exchange.background
            )
            if chosen is None:
                break
            position, origin, permit = chosen
            position += 1  # the next attempt prefers the next origin in the order
            if free:
                if now >= deadline:
                    self._give_back(origin, pool, permit)
                    break
            elif counted:
                # Full jitter; an origin's Retry-After only holds for that same origin.
                until = asked_until.get(origin.name)
                wait_for = max(0, until - now) if until is not None else None
                delay = retry_delay_ms(
                    counted - 1, retry.base_ms, retry.cap_ms, services.random, wait_for
                )
                if now + delay >= deadline:
                    self._give_back(origin, pool, permit)
                    break
                if delay > 0:
                    await services.sleep(delay / 1000)
            try:
                response, outcome, retry_after_ms, delivery = await self._attempt(
                    exchange,
                    origin,
                    permit,
                    attempt=number,
                    deadline=deadline,
                    tried=tried,
                    resend_if_unsent=free_left > 0,
                )
            finally:
                self._bulkhead(origin).release()
            number += 1
            if response is not None and (
                outcome in (Outcome.SUCCESS, Outcome.SLOW)
                or (outcome is Outcome.OVERLOAD and not pool.breaker.pause_on_429)
            ):
                # A 429 is the origin's answer to this client unless the pool says it
                # means the whole origin is overloaded: passed on, never retried.
                exchange.answer_broke = partial(self._broke, origin.name, pool)
                return response
            if delivery is Delivery.CLIENT_FAILED:
                # The client's upload broke off: its body is gone, and the failure is
                # its own (a 400, never an origin's 502).
                return problem_response(problems.request_body_broken())
            if response is not None:
                last = response
            if retry_after_ms:
                asked_until[origin.name] = clock.now_ms() + retry_after_ms
            if tried[-1].outcome == "interim_answer":
                break  # the origin answered (and acted): sending it again would act again
            free = resend_is_free(delivery) and free_left > 0
            if free:
                free_left -= 1
                continue
            counted += 1
            if counted >= attempts or not may_resend(
                request.method,
                claim,
                response.status if response is not None else None,
                delivery,
            ):
                break  # the origin may have acted: not sent again (see may_resend)
        exchange.origin_failed = True
        if last is not None:
            return last  # the origin's own failure answer, passed on
        return problem_response(self._failure(exchange, tried))

    async def _attempt(
        self,
        exchange: Exchange,
        origin: Origin,
        permit: Permit,
        *,
        attempt: int,
        deadline: int,
        tried: list[_Tried],
        resend_if_unsent: bool = False,
    ) -> tuple[Response | None, Outcome, int | None, Delivery]:
        """One call to ``origin``: its response (None on an error), outcome, Retry-After,
        and how far the request went (:class:`Delivery`; from the status when it
        answered)."""
        services = self.services
        clock = services.clock
        pool = exchange.forward.pool
        request = exchange.request
        started = clock.now_ms()
        timeout_ms = min(origin.timeout_ms, max(1, deadline - started))
        url = origin.url + exchange.path + (f"?{request.query}" if request.query else "")
        # A body read here (to store it) may pause for the route's timeout between parts,
        # whichever origin sends it (the origin's own timeout bounds its head only).
        outgoing = OriginRequest(
            request.method,
            url,
            request.headers,
            request.body,
            timeout_ms,
            request.native,
            exchange.forward.timeout_ms,
            resend_if_unsent,
        )
        response: Response | None = None
        error: str | None = None
        interim = False
        unusable = False
        delivery = Delivery.SENT
        timed_out = False
        try:
            # The origin port enforces the timeout (the platform aborts the fetch, which
            # also closes the connection): no timer of the gateway's own per request.
            response = await services.origin.send(outgoing)
        except OriginConnectError as exc:
            delivery = Delivery.NOT_SENT
            timed_out = exc.timed_out
            said = "connect timeout" if timed_out else "never connected"
            error = f"{said}: {exc}"[:200]
        except (OriginTimeoutError, TimeoutError):
            error = "timeout"
            timed_out = True
        except OriginUnreachableError as exc:
            error = f"unreachable: {exc}"[:200]
        except ClientBodyError as exc:
            delivery = Delivery.CLIENT_FAILED
            error = f"client body: {exc}"[:200]
        except BaseException:
            # Anything else (a platform error, the request cancelled as its client went
            # away) decides nothing about the origin, but a half-open trial permit must
            # go back now, not at trial_timeout: the breaker would refuse every call
            # until then.
            self.breakers.give_back(origin.name, pool.breaker, permit)
            raise
        if response is not None and not 200 <= response.status <= 599 and response.status != 101:
            # An interim answer (100 Continue, 102, 103 Early Hints) handed back as if it
            # were the final one (local workerd's fetch does this), or a status HTTP does
            # not have (600 and up): there is no answer to pass on, and the runtime cannot
            # even build a response with that status. After an interim answer the origin
            # is up and acted: the attempt is neither retried (it would act again) nor
            # judged by the breaker (one page sending Early Hints must not open it for
            # every route). A status of 600 and up is a failure like a 5xx (``bad_answer``).
            interim = 100 <= response.status <= 199
            unusable = not interim
            said = "unreachable" if interim else "bad answer"
            error = f"{said}: {_not_final(response.status)} came instead of an answer"
            response = None
        ended = clock.now_ms()
        if response is None and delivery is not Delivery.NOT_SENT:
            # It may have reached the origin (a refused connection never did): the origin
            # may have acted on it (idempotency keeps the failure as the key's answer).
            exchange.sent_unanswered = True
        status = response.status if response is not None else None
        if response is not None:
            delivery = delivery_of(status)
        outcome = classify(status, error, ended - started, pool.breaker)
        retry_after_ms: int | None = None
        overloaded_until = 0
        if response is not None:
            exchange.reached_origin = True
            response.headers.set(ORIGIN_HEADER, origin.label)
            if response.status != 101:  # an upgrade's fields are the runtime's
                # What the origin's Connection names is for the hop to the gateway only.
                named = connection_named(response.headers.get("connection"))
                if named:
                    response.headers.discard(named)
            overload = outcome is Outcome.OVERLOAD and pool.breaker.pause_on_429
            if outcome is Outcome.FAILURE or overload:
                # Only a failure is retried or parks the origin: any other answer is passed
                # on without reading the field (one platform call fewer per request).
                retry_after_ms = parse_retry_after(response.headers.get("retry-after"), ended)
            if overload:
                pause = min(retry_after_ms or 1_000, MAX_RETRY_AFTER_MS)
                overloaded_until = ended + pause
        if interim or not counts_on_breaker(delivery):
            # The origin answered (an interim answer: it is up), or the client's own
            # upload broke off: neither says the origin failed, so neither counts (clients
            # aborting uploads must not open the breaker for everyone). Every other
            # failure counts, whatever the method and however the body was sent.
            self.breakers.give_back(origin.name, pool.breaker, permit)
        else:
            self.breakers.record(
                origin.name,
                pool.breaker,
                ended,
                outcome,
                permit=permit,
                overloaded_until=overloaded_until,
            )
        self.breakers.sync_soon(origin.name, pool.breaker, ended, exchange.background)
        kind = "timeout" if timed_out else ("unreachable" if error else outcome.value)
        if delivery is Delivery.CLIENT_FAILED:
            kind = "client_body_failed"
        elif interim:
            kind = "interim_answer"
        elif unusable:
            kind = "bad_answer"  # it answered: "unreachable" would send operators astray
        waited = timeout_ms if kind == "timeout" else 0
        tried.append(_Tried(origin.label, kind, status, timeout_ms=waited))
        if attempt or outcome is not Outcome.SUCCESS:
            # A first attempt that succeeds is the ordinary case (the access log has it);
            # every failure, and every retry, is logged.
            self._log_attempt(
                exchange,
                origin,
                attempt,
                kind=kind,
                status=status,
                latency_ms=ended - started,
                error=error,
            )
        return response, outcome, retry_after_ms, delivery

    def _broke(self, origin: str, pool: Pool) -> None:
        """The answer passed on as a success broke off mid-body: a failure of ``origin``."""
        now = self.services.clock.now_ms()
        self.breakers.record(origin, pool.breaker, now, Outcome.BROKEN, permit=None)
        self.services.log({"event": "origin_body_broken", "origin": origin})

    def _log_attempt(
        self,
        exchange: Exchange,
        origin: Origin,
        attempt: int,
        *,
        kind: str,
        status: int | None,
        latency_ms: int,
        error: str | None,
    ) -> None:
        ended = self.services.clock.now_ms()
        self.services.log(
            {
                "event": "origin_attempt",
                "route": exchange.route_name,
                "origin": origin.name,
                "attempt": attempt + 1,
                "outcome": kind,
                "status": status,
                "latency_ms": latency_ms,
                "breaker": self.breakers.phase(origin.name, ended),
                **({"detail": error} if error and error != "timeout" else {}),
            }
        )

    def _failure(self, exchange: Exchange, tried: list[_Tried]) -> problems.Problem:
        """The answer when no origin answered: which were tried, and why each failed."""
        route = exchange.route_name
        pool = exchange.forward.pool.label
        described = [t.describe() for t in tried]
        attempted = [
            t
            for t in tried
            if t.outcome in ("timeout", "unreachable", "interim_answer", "bad_answer")
        ]
        if not attempted:
            waits = [t.retry_after_ms for t in tried if t.retry_after_ms > 0]
            busy = all(t.outcome == "bulkhead_full" for t in tried)
            # No attempt was made, so no origin_attempt line says why the client got a 503.
            self.services.log(
                {
                    "event": "origin_busy" if busy else "origins_unavailable",
                    "route": route,
                    "origins": {t.origin: t.outcome for t in tried},
                }
            )
            return problems.origins_unavailable(route, pool, described, min(waits, default=0), busy)
        if attempted[-1].outcome == "timeout":
            return problems.origin_timeout(route, pool, described, exchange.forward.timeout_ms)
        return problems.origin_unreachable(route, pool, described)


def _not_final(status: int) -> str:
    """What an origin's status that is no final answer is, for the log."""
    if 100 <= status < 200:
        return f"an interim {status} answer"
    return f"status {status} (final statuses are 200 to 599)"


def _in_memory(request: Request) -> bool:
    """Whether the request can be sent again as it is: no body, or one already in memory."""
    body = request.body
    return body is None or isinstance(body, BytesBody) or getattr(body, "data", None) is not None


async def _replayable(request: Request) -> bool:
    """Whether the request can be sent again: no body, a body already in memory, or one
    small enough to read now (a streamed body can be sent only once)."""
    body = request.body
    if body is None or isinstance(body, BytesBody) or getattr(body, "data", None) is not None:
        return True
    length = request.headers.get("content-length")
    if length is None or not length.isdigit() or int(length) > MAX_REPLAY_BODY_BYTES:
        return False
    await body.read()  # kept by the body: every attempt sends these bytes
    return True
