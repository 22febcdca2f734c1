"""The stages before the route: the request's canonical form (and the bound on its size),
a method override, and a body on a method that cannot forward one.

Each is a :class:`~edge_limiter.gateway.exchange.Before`: it answers ``None`` to let the
request go on, a response to answer it with, or (only when it has I/O to do) an
awaitable of either, so a request that needs none of them makes no coroutine here.
"""

from __future__ import annotations

from collections.abc import Awaitable

from ..core.caching.fields import connection_named
from ..core.canonical import canonical_host, canonical_path
from ..core.config import Config
from ..core.errors import BodyReadError, PathError
from ..core.http import problems
from ..core.http.messages import Response
from ..core.http.method_override import (
    BODILESS,
    MAX_FORM_BYTES,
    MethodOverrideError,
    asked_methods,
    is_form,
    is_json,
    overridden_method,
    override_fields,
    without_override_param,
)
from .exchange import Exchange, problem_response
from .ports import Services

#: The longest path and query (together, as the runtime hands them over) a request may
#: have; Cloudflare's edge refuses a URI over 32 KB itself (414), so locally too.
MAX_URI_CHARS = 32 * 1024


class CanonicalForm:
    """The request as every later stage reads it: the fields its ``Connection`` names
    gone, its URI within :data:`MAX_URI_CHARS`, its path and host canonical."""

    def __init__(self, config: Config, services: Services) -> None:
        self.matrix_params = config.matrix_params
        self.services = services

    def __call__(self, exchange: Exchange) -> Response | None:
        request = exchange.request
        connection = request.headers.get("connection")
        if connection is not None:
            # The fields the client's Connection names are for this hop only (RFC 9110
            # 7.6.1): gone before anything reads the request, so what is counted, cached
            # and keyed is what the origin gets.
            named = connection_named(connection)
            if named:
                request.headers.discard(named)
        length = len(request.path) + len(request.query)
        if length > MAX_URI_CHARS:
            # Refused before any of it is read: canonical form and parameters cost time in
            # proportion (a 1 MB path took a second of the isolate).
            self.services.log({"event": "uri_too_long", "length": length})
            return problem_response(problems.uri_too_long(MAX_URI_CHARS))
        try:
            exchange.path = canonical_path(request.path, self.matrix_params)
        except PathError as exc:
            self.services.log({"event": "bad_path", "reason": exc.without_path()})
            return problem_response(problems.bad_path(exc.for_client()))
        exchange.host = canonical_host(request.host, request.scheme)
        return None


class MethodOverride:
    """A POST taken as the method it asks for (``X-HTTP-Method-Override``, ``_method``), or
    refused, as the config's ``method_override`` says; built only when it is not ``pass``."""

    def __init__(self, config: Config, services: Services) -> None:
        self.config = config
        self.services = services

    def __call__(self, exchange: Exchange) -> Awaitable[Response | None] | None:
        if exchange.request.method != "POST":
            return None
        return self._apply(exchange)

    async def _apply(self, exchange: Exchange) -> Response | None:
        """Apply (or refuse) what a POST asks to be taken as; ``None`` to go on.

        A form body is read for its ``_method`` only where it could matter: to refuse it,
        or where the method decides the route. Elsewhere the POST goes on as it came,
        counted as any method would be, and its body is streamed, whatever its size.
        """
        request = exchange.request
        mode = self.config.method_override
        headers = request.headers
        fields = override_fields(headers)
        form: bytes | None = None
        json_body: bytes | None = None
        content_type = headers.get("content-type")
        form_like, json_like = is_form(content_type), is_json(content_type)
        if (
            request.body is not None
            and (form_like or json_like)
            and (mode == "refuse" or self.config.method_decides(exchange.host, exchange.path))
        ):
            try:
                body = await request.read_body_at_most(MAX_FORM_BYTES)
            except BodyReadError:
                return problem_response(problems.request_body_broken())
            if body is None and form_like and content_type and content_type.strip():
                # Only a body labelled a form (among its types) is refused for its size: a
                # JSON body, or one of no type (an upload sent without one), over the
                # bound goes on unread.
                return problem_response(problems.form_too_large(MAX_FORM_BYTES))
            # A field sent twice may say both: read as either.
            json_body = body if json_like else None
            form = body if form_like else None
        asked = asked_methods(fields, request.query, form, json_body)
        if not asked:
            return None
        read = form if form is not None else json_body
        has_body = request.body is not None and (read is None or bool(read))
        try:
            wanted = overridden_method(mode, asked, has_body)
        except MethodOverrideError as exc:
            self.services.log({"event": "method_override_refused", "reason": str(exc)})
            return problem_response(problems.bad_request(str(exc), "method_override"))
        if wanted is not None:
            request.sent_as = request.method
            request.method = wanted
            request.native = None  # the runtime's request no longer describes this one
            for name in {name for name, _ in fields}:
                headers.delete(name)
            request.query = without_override_param(request.query)
        return None


def bodiless_body(exchange: Exchange) -> Awaitable[Response | None] | Response | None:
    """A body on a method the platform sends without one (GET, HEAD): an empty one is
    dropped (the request without it is the same request); any other is refused, since
    forwarding it would change the request."""
    request = exchange.request
    if request.body is None or request.method not in BODILESS:
        return None
    chunked = request.headers.get("transfer-encoding") is not None
    if chunked and request.headers.get("content-length") is None:
        return _chunked_body(exchange)
    return _without_empty_body(
        exchange, not chunked and _zero(request.headers.get("content-length"))
    )


async def _chunked_body(exchange: Exchange) -> Response | None:
    # A chunked body may still be empty (some clients send an empty one as a single last
    # chunk): read to find out, at most one byte.
    try:
        empty = await exchange.request.read_body_at_most(0) == b""
    except BodyReadError:
        return problem_response(problems.request_body_broken())
    return _without_empty_body(exchange, empty)


def _without_empty_body(exchange: Exchange, empty: bool) -> Response | None:
    request = exchange.request
    if empty:
        # An empty body said with "Content-Length: 0" (some clients send it on every
        # request), or as an empty chunked one: the request without it is the same request.
        request.body = None
        request.native = None
        request.headers.delete("content-length")
        request.headers.delete("transfer-encoding")
        return None
    # The platform's fetch cannot send one: forwarding it would change the request.
    return problem_response(
        problems.bad_request(
            f"A {request.method} request with a body cannot be forwarded as it came "
            "(the platform sends GET and HEAD without one); send it without a body.",
            "body_not_allowed",
        )
    )


def _zero(length: str | None) -> bool:
    """Whether a ``Content-Length`` says no bytes (``0``, ``00``)."""
    return length is not None and length.isascii() and length.isdigit() and int(length) == 0
