"""The request as an origin gets it: the fields no origin gets dropped, the gateway's own
set (the scheme, the client's address, the host asked for, ``origin_headers``), and its
body kept in memory where it may be sent again."""

from __future__ import annotations

from ..core.config import Route
from ..core.http.messages import BytesBody, Request
from ..core.http.method_override import OVERRIDE_FIELDS
from ..core.http.origin_headers import (
    FORWARDED_AS_FIELDS,
    FORWARDED_HOST_FIELDS,
    PATH_OVERRIDE_FIELDS,
)
from ..core.routing.origins import Origin
from .exchange import Exchange
from .ports import OriginRequest

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
#: The scheme field every forwarded request carries (see :meth:`Outgoing.prepare`).
PROTO_FIELD = FORWARDED_HOST_FIELDS[1]
#: A request body is kept in memory, so that it can be sent again, up to this size (its
#: Content-Length): for retries (an idempotent request, ``attempts`` above 1), and on a
#: pool with another origin to fall back to, for any method (a request that never left,
#: its connection refused, goes to the next origin). A larger one, or one of unknown
#: length (chunked), is sent once, streamed: if its connection is refused, the client
#: gets the 502 (and the origin's breaker still counts the failure).
MAX_REPLAY_BODY_BYTES = 1 << 20


class Outgoing:
    """Puts a request in the form its pool's origins get (see the module docstring)."""

    def __init__(
        self,
        client_ip_header: str | None = None,
        origin_fields: dict[str, tuple[tuple[str, str], ...]] | None = None,
        *,
        forwarded_host: bool = False,
        drop_overrides: bool = True,
    ) -> None:
        self.client_ip_header = client_ip_header
        self.forwarded_host = forwarded_host
        """Whether origins are told the host and scheme the client asked for."""
        self.dropped = DROPPED_FIELDS | frozenset(OVERRIDE_FIELDS if drop_overrides else ())
        """The client's fields no origin gets: a method override is one too wherever the
        gateway applies or refuses overrides (on a POST it was applied or refused before
        this; on another method, an origin that honours it would run a method that was
        not counted, and a cache would keep its answer for the GET)."""
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
        self.origin_fields = origin_fields or {}
        """By pool name, the fields set on every request to its origins (origin_headers)."""
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

    def prepare(self, exchange: Exchange) -> None:
        """Set the request's fields as its pool's origins get them."""
        request = exchange.request
        pool = exchange.forward.pool
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


def origin_request(
    exchange: Exchange, origin: Origin, timeout_ms: int, resend_if_unsent: bool
) -> OriginRequest:
    """The request as sent to ``origin``: its canonical path and query on the origin's URL.
    A body read from its answer (to store it) may pause for the route's timeout between
    parts, whichever origin sends it (the origin's own timeout bounds its head only)."""
    request = exchange.request
    url = origin.url + exchange.path + (f"?{request.query}" if request.query else "")
    return OriginRequest(
        request.method,
        url,
        request.headers,
        request.body,
        timeout_ms,
        request.native,
        exchange.forward.timeout_ms,
        resend_if_unsent,
    )


def in_memory(request: Request) -> bool:
    """Whether the request can be sent again as it is: no body, or one already in memory."""
    body = request.body
    return body is None or isinstance(body, BytesBody) or getattr(body, "data", None) is not None


async def replayable_body(request: Request) -> bool:
    """Whether the request can be sent again: no body, a body already in memory, or one
    small enough to read now (a streamed body can be sent only once)."""
    body = request.body
    if body is None or in_memory(request):
        return True
    length = request.headers.get("content-length")
    if length is None or not length.isdigit() or int(length) > MAX_REPLAY_BODY_BYTES:
        return False
    await body.read()  # kept by the body: every attempt sends these bytes
    return True
