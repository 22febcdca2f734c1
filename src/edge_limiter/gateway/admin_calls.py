"""What an admin call may be: each endpoint's methods, the query parameters a GET takes
and the JSON members a change takes (each of its type, each named once), the answers
that refuse the rest, and the fields that harden every admin answer (see
:mod:`edge_limiter.gateway.admin`)."""

from __future__ import annotations

import base64
import hmac
import json
from collections import Counter
from typing import Any, Protocol
from urllib.parse import parse_qsl

from ..core.errors import BodyReadError
from ..core.explain import EXPLAINED_CLIENT_PARAMS
from ..core.http import bounded_json, cross_site, problems
from ..core.http.messages import Headers, Request, Response
from ..core.ratelimit.overrides import Override
from ..core.resilience.breaker import BreakerState
from .exchange import problem_response

JSON = "application/json"


def json_answer(status: int, data: Any) -> Response:
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    headers = Headers([("content-type", JSON), ("cache-control", "no-store")])
    return Response(status, headers, body)


#: An override is a few hundred bytes of JSON; nothing larger is read.
MAX_BODY_BYTES = 64 * 1024


def fail(status: int, title: str, detail: str, code: str) -> Response:
    return problem_response(problems.Problem(status, title, detail, code))


class AdminError(Exception):
    """An admin call that cannot be done as asked."""

    def __init__(self, status: int, detail: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(detail)
        self.status = status
        self.headers = headers
        self.title = {
            400: "Bad Request",
            404: "Not Found",
            409: "Conflict",
            413: "Content Too Large",
            415: "Unsupported Media Type",
            503: "Service Unavailable",
        }.get(status, "Error")
        self.code = {
            400: "bad_admin_request",
            404: "admin_not_found",
            409: "admin_conflict",
            413: "admin_body_too_large",
            415: "admin_json_required",
        }.get(status, "admin_unavailable")


#: Each admin endpoint's methods (for the 405 answer to another method).
ENDPOINT_METHODS = {
    "/api/config": ("GET",),
    "/api/explain": ("GET",),
    "/api/keys": ("GET",),
    "/api/keys/reset": ("POST",),
    "/api/keys/refund": ("POST",),
    "/api/overrides": ("GET", "POST"),
    "/api/cache/purge": ("POST",),
    "/api/breakers": ("GET",),
    "/api/stats": ("GET",),
    "/api/api-keys": ("GET", "POST"),
}


def endpoint_methods(action: str) -> tuple[str, ...]:
    """The methods ``action`` takes; none when no endpoint has that path."""
    if action.startswith("/api/overrides/") and action.count("/") == 3:
        return ("DELETE",)
    if action.startswith("/api/breakers/") and action.count("/") == 3:
        return ("POST",)
    if action.startswith("/api/api-keys/") and action.count("/") == 3:
        return ("DELETE",)
    return ENDPOINT_METHODS.get(action, ())


def not_allowed(action: str, method: str, allowed: tuple[str, ...]) -> Response:
    """404 for a path no endpoint has; 405 with ``Allow`` for another method."""
    if not allowed:
        return fail(404, "Not Found", f"No admin endpoint {method} {action}.", "no_admin_endpoint")
    if "GET" in allowed:
        allowed = (*allowed, "HEAD")
    response = fail(
        405,
        "Method Not Allowed",
        f"{action} takes {' or '.join(allowed)}, not {method}.",
        "admin_method_not_allowed",
    )
    response.headers.set("allow", ", ".join(allowed))
    return response


class Repeated(ValueError):
    """A JSON object names a member twice."""


def once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose members are named once each: which of two ``route`` members
    was meant cannot be told (an override set on the wrong route)."""
    twice = sorted(name for name, count in Counter(n for n, _ in pairs).items() if count > 1)
    if twice:
        raise Repeated(f"member(s) {', '.join(twice)} given more than once")
    return dict(pairs)


#: The query parameters each GET endpoint takes (any other is refused).
QUERY_PARAMS = {
    "/": frozenset(("part",)),
    "/api/explain": frozenset(("url", "method", "header", *EXPLAINED_CLIENT_PARAMS)),
    "/api/keys": frozenset(("route", "key")),
    "/api/api-keys": frozenset(("sha256",)),
}

#: The members of each POST endpoint's JSON body and their JSON types (any other member is
#: refused); ``/api/overrides`` is checked by :func:`parse_override`.
MEMBERS: dict[str, dict[str, type]] = {
    "/api/keys/reset": {"route": str, "key": str},
    "/api/keys/refund": {"route": str, "key": str, "cost": int},
    "/api/cache/purge": {"url": str, "key": str},
    "/api/breakers/": {"state": str},
}

#: What each POST endpoint's body looks like, for the answers that say how to send it.
EXAMPLES = {
    "/api/keys/reset": '{"route": "login", "key": "ip=203.0.113.9"}',
    "/api/keys/refund": '{"route": "login", "key": "ip=203.0.113.9", "cost": 1}',
    "/api/cache/purge": '{"url": "https://api.example.com/v1/catalog", "key": "..."}',
    "/api/breakers/": '{"state": "open"}',
    "/api/overrides": '{"route": "search", "key": "premium_*", "limits": "100/second"}',
    "/api/api-keys": '{"key": "sk_live_...", "tier": "pro", "owner": "acme"}',
}


def endpoint(action: str) -> str:
    """The table key of ``action`` (every origin's breaker is one endpoint)."""
    return "/api/breakers/" if action.startswith("/api/breakers/") else action


def example(action: str) -> str:
    return f"e.g. {EXAMPLES[endpoint(action)]}"


def members(action: str, data: Any) -> dict[str, Any]:
    """A POST body's members, each one the endpoint takes and of its type."""
    takes = MEMBERS[endpoint(action)]
    if not isinstance(data, dict):
        raise AdminError(400, f"the body must be a JSON object ({example(action)})")
    unknown = sorted(set(data) - set(takes))
    if unknown:
        # A misspelt member is not ignored: a refund of 3 units asked as "units": 3 would
        # give back the route's cost and say done.
        raise AdminError(
            400,
            f"unknown member(s) {', '.join(unknown)}: {action} takes {', '.join(sorted(takes))}",
        )
    for name, value in data.items():
        if takes[name] is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise AdminError(400, f"{name} must be a JSON integer, got {shown(value)}")
        elif not isinstance(value, str):
            raise AdminError(400, f"{name} must be a JSON string, got {shown(value)}")
    return data


def shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:60] + "..."


#: Fields on every admin answer: never sniffed as another type, framed, or read by
#: another origin's page as a script or image (the page sets its own policy).
HARDENING = (
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("cross-origin-resource-policy", "same-origin"),
)
POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"


def hardened(response: Response) -> Response:
    headers = response.headers
    for name, value in HARDENING:
        headers.set(name, value)
    if headers.get("content-security-policy") is None:
        headers.set("content-security-policy", POLICY)
    if headers.get("cache-control") is None:
        headers.set("cache-control", "no-store")
    return response


def authorized(token: str | None, header: str | None) -> bool:
    """Whether ``header`` (a request's ``Authorization``) offers the admin ``token``: as
    a Bearer token, or as the password of HTTP Basic (a browser's); in constant time."""
    if not token:
        return False
    header = header or ""
    scheme, _, credentials = header.partition(" ")
    offered = ""
    if scheme.lower() == "bearer":
        offered = credentials.strip()
    elif scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            decoded = ""
        offered = decoded.partition(":")[2]
    # Constant time whatever the offered value: compare digests of equal length.
    return hmac.compare_digest(
        hmac.new(b"edge-limiter", offered.encode(), "sha256").digest(),
        hmac.new(b"edge-limiter", token.encode(), "sha256").digest(),
    )


def query_params(action: str, query: str) -> list[tuple[str, str]]:
    """A GET's query parameters, each one ``action`` takes and (but ``header``) given once."""
    pairs = parse_qsl(query, keep_blank_values=True)
    counts = Counter(name for name, _ in pairs if name != "header")
    twice = sorted(name for name, count in counts.items() if count > 1)
    if twice:
        # Which one was meant cannot be told: say so rather than take the last.
        raise AdminError(400, f"give each parameter once: {', '.join(twice)} came more than once")
    unknown = sorted({name for name, _ in pairs} - QUERY_PARAMS.get(action, frozenset()))
    if unknown:
        # A misspelt parameter is not ignored: the answer would be to another question.
        takes = ", ".join(sorted(QUERY_PARAMS.get(action, ()))) or "none"
        raise AdminError(400, f"unknown parameter(s) {', '.join(unknown)}: {action} takes {takes}")
    return pairs


async def json_body(request: Request, action: str) -> Any:
    """The request's body, which must be JSON said to be (``Content-Type:
    application/json``), at most :data:`MAX_BODY_BYTES`, naming each member once."""
    content_type = request.headers.get("content-type")
    if not cross_site.json_media_type(content_type):
        said = f"Content-Type: {content_type}" if content_type else "no Content-Type"
        raise AdminError(
            415,
            f"POST {action} takes an application/json body ({example(action)}), got {said}",
            headers=(("accept-post", JSON),),
        )
    try:
        raw = await request.read_body_at_most(MAX_BODY_BYTES)
    except BodyReadError as exc:
        raise AdminError(400, f"the body could not be read to its end: {exc}") from exc
    if raw is None:
        raise AdminError(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        return bounded_json.loads(raw or b"null", object_pairs_hook=once_each)
    except Repeated as exc:
        raise AdminError(400, f"the body's JSON is ambiguous: {exc}") from exc
    except ValueError as exc:
        raise AdminError(400, f"the body is not JSON: {exc}") from exc


class RouteView(Protocol):
    """What the admin API reads and asks of the routes' stages (the gateway's route table)."""

    def cache_scope(self, route: str) -> str | None:
        """What the route's cache keeps entries per (``None``: it caches nothing)."""

    async def purge(
        self, route: str, host: str, path: str, query: str, scope_key: str | None
    ) -> tuple[str, bool | None]:
        """Forget the route's cached GET answer for a URI: the KV key, whether one stood."""

    def held_units(self, route: str, key: str, override: Override | None, now: int) -> int:
        """The units this isolate's leases on the route's key still hold."""

    def adopt_breaker(self, origin: str, shared: BreakerState, now: int) -> None:
        """Take a shared breaker's state into this isolate's copy at once."""

    def forget_api_key(self, digest: str) -> None:
        """Drop this isolate's memory of the lookup of the API key with this SHA-256."""
