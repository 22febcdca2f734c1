"""One request's trip through the gateway, and the stage interface."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ..core.config import Forwarding, Route
from ..core.errors import AmbiguousRequestError
from ..core.http import problems
from ..core.http.fields import gateway_fields
from ..core.http.messages import Headers, Request, Response
from ..core.http.problems import PROBLEM_JSON, Problem
from ..core.identity.tiers import Caller
from ..core.routing.origins import Pool
from .ports import Background

T = TypeVar("T")


def _nothing() -> None:
    """Releases nothing."""


class _NoBackground:
    """Runs nothing after the response (for callers without ``waitUntil``)."""

    def defer(self, work: Awaitable[Any]) -> None:
        close = getattr(work, "close", None)
        if close is not None:
            close()  # a coroutine that will never run: close it instead of leaking it

    def hold(self) -> Callable[[], None]:
        return _nothing


#: The background of an exchange given none (stateless: one for all).
NO_BACKGROUND = _NoBackground()

#: Where a request goes before its route is known (no stage before the route forwards).
UNROUTED = Forwarding(Pool("", ()))


@dataclass(slots=True)
class Exchange:
    """What the stages know about a request: its canonical form and what was decided.

    ``path`` and ``host`` are canonical once the stage that makes them so has run (before
    that, as received): what is matched, counted and forwarded.
    """

    request: Request
    path: str
    host: str
    now_ms: int
    forward: Forwarding
    route: Route | None = None
    params: dict[str, str] = field(default_factory=dict)
    key: str | None = None
    caller: Caller | None = None
    """Who the request is from, as the identity stage verified it (None: the route
    checks no identity); the rate limit keys and limits it by this."""
    background: Background = NO_BACKGROUND
    reached_origin: bool = False
    """Whether an origin answered (any status); False when the gateway answered itself."""
    origin_failed: bool = False
    """Whether every attempt at the origins failed (the answer is a failure)."""
    sent_unanswered: bool = False
    """Whether an attempt sent the request and got no answer (a timeout, a connection
    lost, an interim answer): the origin may have acted on it."""
    idempotency_token: int | None = None
    """The fencing token of the Idempotency-Key claim this request holds, if any."""
    private: bool = False
    """Whether the gateway answers for itself (the admin API): no CORS fields on it."""
    counted: bool = False
    """Whether the request was already counted by an earlier stage (the stale copy a
    refresh replaces was served as a hit that ``count_hits`` counted): the rate limit
    passes it on rather than count it twice."""
    finishing: bool = False
    """Whether the code running now is already work the runtime carries to its end (see
    :meth:`finish`, or work deferred after the response): it needs no hold of its own."""
    answer_broke: Callable[[], None] | None = None
    """Tells the breaker of the origin whose answer is being passed on that its body broke
    off after all (the attempt was judged by its head: a success); set by the upstream."""

    async def finish(self, work: Coroutine[Any, Any, T]) -> T:
        """``work``'s result, with ``work`` carried to its end even if the client goes away.

        The platform drops a request whose client disconnects once no work it handed to
        the runtime (``waitUntil``) is pending: nothing the request awaits completes then,
        so its handler is never resumed and no ``finally`` of it runs. Work that others
        rely on (an answer other requests wait for, a bulkhead slot or a claim to give
        back, a lease others draw on) therefore holds the request until it ends
        (:meth:`Background.hold`): no task of its own, no extra turn of the event loop.
        Inside such work, or in deferred work, this just awaits ``work``.
        """
        resolve = self.hold()
        try:
            return await work
        finally:
            self.release(resolve)

    def hold(self) -> Callable[[], None] | None:
        """Hold the request (as :meth:`finish` does, for a caller that runs its work inline:
        no coroutine around it) until :meth:`release` is given what this returns; ``None``
        when the running code is already held, or deferred."""
        if self.finishing:
            return None
        self.finishing = True
        return self.background.hold()

    def release(self, resolve: Callable[[], None] | None) -> None:
        """End a :meth:`hold` (given its ``None``: nothing to end)."""
        if resolve is not None:
            self.finishing = False
            resolve()

    def limit_key(self) -> str | Response:
        """The route's rate-limit key for the request, computed once and kept (``key``),
        or the 400 when the request gives a part of it twice. Every stage that needs the
        key reads it here: the rate limit, a cache kept per key, an idempotency record."""
        key = self.key
        if key is not None:
            return key
        route = self.route
        assert route is not None, "a key is only asked of a routed request"
        spec, caller = route.limits.key, self.caller
        try:
            if caller is None:
                key = spec.compute(self.request, self.params)
            elif caller.anonymous and spec.names_identity():
                key = spec.anonymous(self.request)
            else:
                key = spec.compute(self.request, self.params, caller.claims, caller.caller)
            self.key = key
        except AmbiguousRequestError as exc:
            return problem_response(
                problems.bad_request(
                    f"{exc}; route {route.name!r} counts requests by it, so it must have "
                    "one value.",
                    "ambiguous_key",
                    route=route.name,
                )
            )
        return key

    @property
    def route_name(self) -> str | None:
        """The matched route's name (None for unmatched requests)."""
        return self.route.name if self.route is not None else None


Handler = Callable[[Exchange], Awaitable[Response]]
"""The rest of the pipeline, from a stage's point of view."""


class Stage(Protocol):
    """One step of the pipeline: may answer itself, or call ``call_next`` and adjust."""

    async def __call__(self, exchange: Exchange, call_next: Handler) -> Response:
        """Handle ``exchange``."""
        ...


class Before(Protocol):
    """A stage before the route: ``None`` to let the request go on, a response to answer
    it with, or an awaitable of either when it has I/O to do (a request that needs none
    makes no coroutine)."""

    def __call__(self, exchange: Exchange) -> Response | Awaitable[Response | None] | None:
        """Look at (and maybe change) ``exchange``'s request."""
        ...


class Counting(Protocol):
    """The rate limit's count of a request, for a stage that answers the request itself
    (a cache hit on a route that counts hits): the stage reaches it through this port,
    never through the rate-limit stage."""

    async def count(self, exchange: Exchange) -> Response | list[tuple[str, str]]:
        """The answer to give instead (a 429, a 400, a fail-closed 503), or the gateway's
        fields for the answer the stage gives."""
        ...


def chain(stages: list[Stage], last: Handler) -> Handler:
    """``stages`` in order, each wrapping the rest, ending in ``last``."""
    handler = last
    for stage in reversed(stages):
        handler = _bind(stage, handler)
    return handler


def _bind(stage: Stage, call_next: Handler) -> Handler:
    async def run(exchange: Exchange) -> Response:
        return await stage(exchange, call_next)

    return run


def problem_response(problem: Problem, headers: list[tuple[str, str]] | None = None) -> Response:
    """A problem as a response: JSON body, never cached, with ``headers`` added."""
    # As Headers.set each field in turn (a later value replaces an earlier one and moves
    # last), built in one pass.
    fields = {"content-type": PROBLEM_JSON, "cache-control": "no-store"}
    for name, value in (*problem.headers, *(headers or ())):
        key = name.lower()
        fields.pop(key, None)
        fields[key] = value
    return Response(problem.status, Headers(fields.items()), problem.to_json().encode("utf-8"))


def body_broken_response(exchange: Exchange, route: str, response: Response) -> Response:
    """The 502 for an origin's answer whose body was cut off (or stalled) while the
    gateway read it: which origin, and where the client's limit stands, as the whole
    answer would have said (the rate-limit fields it already carries). The origin's
    breaker counts it as the failure it was."""
    if exchange.answer_broke is not None:
        exchange.answer_broke()
        exchange.answer_broke = None
    origin = response.headers.get("x-origin") or "origin"
    problem = problems.origin_body_broken(route, origin)
    return problem_response(problem, gateway_fields(response.headers.items()))


def log_line(record: dict[str, Any]) -> str:
    """One structured log line (JSON), as Workers Logs and ``wrangler tail`` show best."""
    return json.dumps({"logger": "edge_limiter", **record}, separators=(",", ":"))
