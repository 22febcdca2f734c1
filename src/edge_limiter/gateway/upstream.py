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

Each origin's breaker is this isolate's copy of a shared one (:mod:`.breakers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from ..core.caching.fields import connection_named
from ..core.errors import BodyReadError
from ..core.http import problems
from ..core.http.messages import Response
from ..core.resilience.backoff import parse_retry_after, retry_delay_ms
from ..core.resilience.breaker import Outcome, Permit, Refusal, classify
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
from ..core.routing.geo import ClientLocation, order_origins
from ..core.routing.origins import Origin, Pool
from .breakers import BreakerBoard
from .exchange import Exchange, problem_response
from .outgoing import Outgoing, in_memory, origin_request, replayable_body
from .ports import (
    Background,
    ClientBodyError,
    OriginConnectError,
    OriginTimeoutError,
    OriginUnreachableError,
    Services,
)

ORIGIN_HEADER = "X-Origin"
#: The longest an origin's Retry-After may park it.
MAX_RETRY_AFTER_MS = 300_000


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
        self.outgoing = Outgoing(
            client_ip_header,
            origin_fields,
            forwarded_host=forwarded_host,
            drop_overrides=drop_overrides,
        )
        self.breakers = BreakerBoard(services)
        self.bulkheads: dict[str, Bulkhead] = {}
        self.budgets: dict[tuple[str, RetrySettings], RetryBudgetState] = {}
        # The rules of each pool's budget, built once (not per request).
        self._budget_rules: dict[RetrySettings, RetryBudget] = {}
        self.orders: dict[tuple[Any, ...], tuple[Origin, ...]] = {}

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
        if not allowed:
            self.services.log({"event": "retry_budget_exhausted", "route": exchange.route_name})
        return allowed

    async def __call__(self, exchange: Exchange) -> Response:
        services = self.services
        clock = services.clock
        forward = exchange.forward
        pool, retry = forward.pool, forward.retry
        request = exchange.request
        self.outgoing.prepare(exchange)
        order = self._order(pool, exchange)
        start = clock.now_ms()
        deadline = start + forward.timeout_ms
        claim = exchange.idempotency_token is not None
        idempotent = is_idempotent(request.method, claim)
        try:
            # Kept in memory (up to outgoing.MAX_REPLAY_BODY_BYTES) only where it may be sent
            # again: a retry of an idempotent request, or, on a pool with another origin,
            # a resend of any request that never left. Elsewhere it streams as it comes.
            if (idempotent and retry.attempts > 1) or len(order) > 1:
                replayable = await replayable_body(request)
            else:
                replayable = in_memory(request)
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
        clock = self.services.clock
        pool, retry = exchange.forward.pool, exchange.forward.retry
        tried: list[_Tried] = []
        last: Response | None = None
        # Origins that answered with a Retry-After: until when (an attempt going back to
        # one, after the next origin in the order failed too, still waits for it).
        asked: dict[str, int] = {}
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
                break
            chosen = await self._choose(
                order, position, pool, now, tried, background=exchange.background
            )
            if chosen is None:
                break
            position, origin, permit = chosen
            position += 1  # the next attempt prefers the next origin in the order
            # The first attempt goes at once (no coroutine made for it).
            if (free or counted) and not await self._waited(
                origin, permit, exchange, now, deadline, counted=0 if free else counted, asked=asked
            ):
                break
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
            if response is not None and _passed_on(outcome, pool):
                exchange.answer_broke = partial(self._broke, origin.name, pool)
                return response
            if delivery is Delivery.CLIENT_FAILED:
                # The client's upload broke off: its body is gone, and the failure is
                # its own (a 400, never an origin's 502).
                return problem_response(problems.request_body_broken())
            if response is not None:
                last = response
            if retry_after_ms:
                asked[origin.name] = clock.now_ms() + retry_after_ms
            if tried[-1].outcome == "interim_answer":
                break  # the origin answered (and acted): sending it again would act again
            free = resend_is_free(delivery) and free_left > 0
            if free:
                free_left -= 1
                continue
            counted += 1
            status = response.status if response is not None else None
            claim = exchange.idempotency_token is not None
            if counted >= attempts or not may_resend(
                exchange.request.method, claim, status, delivery
            ):
                break  # the origin may have acted: not sent again (see may_resend)
        exchange.origin_failed = True
        if last is not None:
            return last  # the origin's own failure answer, passed on
        return problem_response(self._failure(exchange, tried))

    async def _waited(
        self,
        origin: Origin,
        permit: Permit,
        exchange: Exchange,
        now: int,
        deadline: int,
        *,
        counted: int,
        asked: dict[str, int],
    ) -> bool:
        """Wait before another attempt at ``origin``: a resend that never left (``counted``
        0) goes at once, a retry after a full-jitter backoff (the Retry-After an origin
        answered with, ``asked``, holds for that same origin only). False, with ``origin``
        given back, when the route's deadline comes first."""
        services = self.services
        retry = exchange.forward.retry
        delay = 0
        if counted:
            until = asked.get(origin.name)
            wait_for = max(0, until - now) if until is not None else None
            delay = retry_delay_ms(
                counted - 1, retry.base_ms, retry.cap_ms, services.random, wait_for
            )
        if now + delay >= deadline:
            self._give_back(origin, exchange.forward.pool, permit)
            return False
        if delay > 0:
            await services.sleep(delay / 1000)
        return True

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
        clock = self.services.clock
        pool = exchange.forward.pool
        started = clock.now_ms()
        timeout_ms = min(origin.timeout_ms, max(1, deadline - started))
        response: Response | None = None
        error: str | None = None
        delivery = Delivery.SENT
        timed_out = False
        not_final: int | None = None  # a status that is no final answer (see _no_answer)
        try:
            # The origin port enforces the timeout (the platform aborts the fetch, which
            # also closes the connection): no timer of the gateway's own per request.
            response = await self.services.origin.send(
                origin_request(exchange, origin, timeout_ms, resend_if_unsent)
            )
        except (OriginUnreachableError, OriginTimeoutError, TimeoutError, ClientBodyError) as exc:
            delivery, timed_out, error = _failed_send(exc)
        except BaseException:
            # Anything else (a platform error, the request cancelled as its client went
            # away) decides nothing about the origin, but a half-open trial permit must
            # go back now, not at trial_timeout: the breaker would refuse every call
            # until then.
            self.breakers.give_back(origin.name, pool.breaker, permit)
            raise
        if response is not None and not 200 <= response.status <= 599 and response.status != 101:
            not_final = response.status
            error = _no_answer(not_final)
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
            retry_after_ms = _answered(exchange, response, origin, outcome, ended)
            if outcome is Outcome.OVERLOAD and pool.breaker.pause_on_429:
                overloaded_until = ended + min(retry_after_ms or 1_000, MAX_RETRY_AFTER_MS)
        kind = _kind(outcome, delivery, error, timed_out, not_final)
        counts = kind != "interim_answer" and counts_on_breaker(delivery)
        self._judge(exchange, origin, permit, outcome, ended, until=overloaded_until, counts=counts)
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

    def _judge(
        self,
        exchange: Exchange,
        origin: Origin,
        permit: Permit,
        outcome: Outcome,
        ended: int,
        *,
        until: int,
        counts: bool,
    ) -> None:
        """Record the attempt's outcome on the origin's breaker (unless it ``counts`` for
        nothing; ``until``: when an overload's pause ends), and sync it soon."""
        breaker = exchange.forward.pool.breaker
        if not counts:
            # The origin answered (an interim answer: it is up), or the client's own
            # upload broke off: neither says the origin failed, so neither counts (clients
            # aborting uploads must not open the breaker for everyone). Every other
            # failure counts, whatever the method and however the body was sent.
            self.breakers.give_back(origin.name, breaker, permit)
        else:
            self.breakers.record(
                origin.name,
                breaker,
                ended,
                outcome,
                permit=permit,
                overloaded_until=until,
            )
        self.breakers.sync_soon(origin.name, breaker, ended, exchange.background)

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


def _passed_on(outcome: Outcome, pool: Pool) -> bool:
    """Whether an answer with ``outcome`` goes to the client as it is (never retried): a
    success, a slow one, and a 429, which is the origin's answer to this client unless
    the pool says it means the whole origin is overloaded."""
    return outcome in (Outcome.SUCCESS, Outcome.SLOW) or (
        outcome is Outcome.OVERLOAD and not pool.breaker.pause_on_429
    )


def _kind(
    outcome: Outcome, delivery: Delivery, error: str | None, timed_out: bool, not_final: int | None
) -> str:
    """What happened at the origin, as the log and a failure's problem body say it."""
    if delivery is Delivery.CLIENT_FAILED:
        return "client_body_failed"
    if not_final is not None:
        # An interim answer; else it answered: "unreachable" would send operators astray.
        return "interim_answer" if 100 <= not_final < 200 else "bad_answer"
    return "timeout" if timed_out else ("unreachable" if error else outcome.value)


def _failed_send(exc: BaseException) -> tuple[Delivery, bool, str]:
    """How far a request went that got no answer, whether it timed out, and why (the log)."""
    if isinstance(exc, OriginConnectError):
        said = "connect timeout" if exc.timed_out else "never connected"
        return Delivery.NOT_SENT, exc.timed_out, f"{said}: {exc}"[:200]
    if isinstance(exc, OriginTimeoutError | TimeoutError):
        return Delivery.SENT, True, "timeout"
    if isinstance(exc, ClientBodyError):
        return Delivery.CLIENT_FAILED, False, f"client body: {exc}"[:200]
    return Delivery.SENT, False, f"unreachable: {exc}"[:200]


def _no_answer(status: int) -> str:
    """Why an origin's status is no answer to pass on, for the log.

    An interim answer (100 Continue, 102, 103 Early Hints) handed back as if it were the
    final one (local workerd's fetch does this), or a status HTTP does not have (600 and
    up): there is no answer to pass on, and the runtime cannot even build a response with
    that status. After an interim answer the origin is up and acted: the attempt is
    neither retried (it would act again) nor judged by the breaker (one page sending Early
    Hints must not open it for every route). A status of 600 and up is a failure like a
    5xx (``bad_answer``).
    """
    if 100 <= status < 200:
        return f"unreachable: an interim {status} answer came instead of an answer"
    return f"bad answer: status {status} (final statuses are 200 to 599) came instead of an answer"


def _answered(
    exchange: Exchange, response: Response, origin: Origin, outcome: Outcome, ended: int
) -> int | None:
    """Mark ``response`` as ``origin``'s answer; its Retry-After, when it is a failure that
    may be retried or park the origin (any other answer is passed on without reading the
    field: one platform call fewer per request)."""
    exchange.reached_origin = True
    response.headers.set(ORIGIN_HEADER, origin.label)
    if response.status != 101:  # an upgrade's fields are the runtime's
        # What the origin's Connection names is for the hop to the gateway only.
        named = connection_named(response.headers.get("connection"))
        if named:
            response.headers.discard(named)
    pause = outcome is Outcome.OVERLOAD and exchange.forward.pool.breaker.pause_on_429
    if outcome is Outcome.FAILURE or pause:
        return parse_retry_after(response.headers.get("retry-after"), ended)
    return None
