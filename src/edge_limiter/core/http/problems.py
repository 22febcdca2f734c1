"""Every problem the gateway answers with, as RFC 9457 ``application/problem+json``.

One place builds them all, so every error a client sees has the same shape: ``type``,
``title``, ``status``, a ``detail`` a person can act on, and a machine-readable ``code``
(plus whatever members that problem carries, e.g. ``violated-policies`` on a 429).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..ratelimit.decision import Decision
from ..routing.origins import PLAIN_LABEL
from .fields import retry_after_seconds, violated_policies

PROBLEM_JSON = "application/problem+json"
#: draft-ietf-httpapi-ratelimit-headers: the problem type of a 429.
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem answer: its status, body members and extra response headers."""

    status: int
    title: str
    detail: str
    code: str
    type: str = "about:blank"
    members: dict[str, Any] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = ()

    def body(self) -> dict[str, Any]:
        """The JSON object of the body."""
        return {
            "type": self.type,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
            **self.members,
        }

    def to_json(self) -> str:
        """The body as compact JSON text."""
        return json.dumps(self.body(), separators=(",", ":"), ensure_ascii=False)


def quota_exceeded(route: str, decisions: Sequence[Decision], instance: str = "") -> Problem:
    """429: the route's limits deny the request."""
    retry = retry_after_seconds(decisions)
    limits = ", ".join(str(d.policy) for d in decisions if not d.allowed and d.policy is not None)
    members: dict[str, Any] = {
        "violated-policies": violated_policies(decisions),
        "route": route,
        "retry_after": retry,
    }
    if instance:
        members["instance"] = instance
    return Problem(
        429,
        "Too Many Requests",
        f"Rate limit exceeded on route '{route}' ({limits}); retry in {retry} s.",
        "rate_limited",
        QUOTA_EXCEEDED,
        members,
    )


def bad_request(detail: str, code: str, **members: Any) -> Problem:
    """400: the request is malformed in a way the detail names."""
    return Problem(400, "Bad Request", detail, code, members=members)


def bad_path(reason: str) -> Problem:
    """400: the path has no canonical form, so it is neither counted nor forwarded."""
    return bad_request(
        f"The request path cannot be put in canonical form: {reason}. It was not forwarded.",
        "bad_path",
    )


def uri_too_long(longest: int) -> Problem:
    """414: the path and query are longer than the gateway reads (Cloudflare's edge refuses
    a URI over 32 KB itself)."""
    return Problem(
        414,
        "URI Too Long",
        f"The request's path and query are longer than {longest} characters. It was not forwarded.",
        "uri_too_long",
        members={"max_length": longest},
    )


def idempotency_key_invalid(route: str, code: str, detail: str) -> Problem:
    """400: the Idempotency-Key header is missing where required, or malformed."""
    return bad_request(
        f"{detail} (route {route!r}).",
        f"idempotency_key_{code}",
        route=route,
        header="Idempotency-Key",
    )


def idempotency_in_flight(route: str, retry_after_s: int) -> Problem:
    """409: a request with this Idempotency-Key is still being processed."""
    return Problem(
        409,
        "Conflict",
        "A request with this Idempotency-Key is still being processed; retry in "
        f"{retry_after_s} s to get its response.",
        "idempotency_in_flight",
        members={"route": route, "retry_after": retry_after_s},
        headers=(("Retry-After", str(retry_after_s)),),
    )


def idempotency_mismatch(route: str) -> Problem:
    """422: the Idempotency-Key was already used for a different request."""
    return Problem(
        422,
        "Unprocessable Content",
        "This Idempotency-Key was already used for a different request (method, path, "
        "query, body, credentials, cookies or fingerprinted headers differ); use a new key "
        "for a new request, and send a retry with the same credentials as the first.",
        "idempotency_mismatch",
        members={"route": route},
    )


def idempotency_unavailable(route: str) -> Problem:
    """503: the idempotency records cannot be reached on a fail-closed route."""
    return Problem(
        503,
        "Service Unavailable",
        f"The idempotency records for route '{route}' are unavailable and the route is "
        "configured to fail closed (on_store_error = 'closed'); nothing was forwarded.",
        "idempotency_unavailable",
        members={"route": route},
        headers=(("Retry-After", "1"),),
    )


def not_found(method: str, path: str) -> Problem:
    """404: no route matches and there is no default origin."""
    return Problem(
        404,
        "Not Found",
        f"No route matches {method} {path} and no default 'origin' is configured for "
        "unmatched requests.",
        "no_route",
    )


def admin_disabled(prefix: str) -> Problem:
    """404: a path under the admin prefix while no admin token is set."""
    return Problem(
        404,
        "Not Found",
        f"The admin API under {prefix} is disabled: no EDGE_LIMITER_ADMIN_TOKEN secret is "
        "set. Paths under it are never forwarded.",
        "admin_disabled",
    )


def invalid_token(route: str, what: str) -> Problem:
    """401: the route needs a valid token (or API key, ``what`` says which) and the
    request has none, or one that does not verify. Why is logged, never told the client
    (RFC 6750: ``invalid_token`` either way)."""
    return Problem(
        401,
        "Unauthorized",
        f"Route '{route}' needs {what}: the request's is missing or not valid. It was not "
        "forwarded.",
        "invalid_token",
        members={"route": route},
        headers=(("WWW-Authenticate", 'Bearer error="invalid_token"'),),
    )


def store_unavailable(route: str) -> Problem:
    """503: a fail-closed route could not reach its counters."""
    return Problem(
        503,
        "Service Unavailable",
        f"The rate-limit store for route '{route}' is unavailable and the route is "
        "configured to fail closed (on_store_error = 'closed').",
        "store_unavailable",
        members={"route": route},
        headers=(("Retry-After", "1"),),
    )


def misconfigured(problems: Sequence[str]) -> Problem:
    """503: the gateway's config is invalid; nothing is forwarded until it is fixed."""
    return Problem(
        503,
        "Gateway Misconfigured",
        "The edge-limiter config is invalid; nothing is forwarded until it is fixed.",
        "config_invalid",
        members={"problems": list(problems)},
    )


def internal_error(reference: str) -> Problem:
    """500: a bug in the gateway; the log line with ``reference`` has the traceback."""
    return Problem(
        500,
        "Internal Server Error",
        f"The gateway failed unexpectedly; the log entry {reference} says why.",
        "internal_error",
        members={"reference": reference},
    )


def _tried(origins: Sequence[dict[str, Any]]) -> str:
    """``eu (timeout after 2000 ms), us (breaker_open)``."""
    return (
        ", ".join(
            f"{item['origin']} ({item['outcome']}"
            + (f" after {item['timeout_ms']} ms)" if item.get("timeout_ms") else ")")
            for item in origins
        )
        or "none"
    )


def origin_unreachable(route: str | None, pool: str, tried: Sequence[dict[str, Any]]) -> Problem:
    """502: no origin could be reached (connection refused or reset, DNS, TLS), or it
    answered only with an interim answer (103 Early Hints) the platform took for its
    answer, or with a status HTTP does not have (600 and up): then the code is
    ``origin_bad_answer``, since the origin was reached."""
    outcomes = {item["outcome"] for item in tried}
    plain = pool == PLAIN_LABEL
    subject = "The origin" if plain else f"No origin of pool '{pool}'"
    code = "origin_unreachable"
    if outcomes == {"interim_answer"}:
        code = "origin_bad_answer"
        named = "The origin" if plain else f"The origin of pool '{pool}'"
        detail = (
            f"{named} answered with an interim response (such as 103 Early Hints) that "
            f"the platform's fetch takes for its answer, so its final answer is lost; "
            f"tried: {_tried(tried)}."
        )
    elif outcomes <= {"bad_answer", "interim_answer"}:
        code = "origin_bad_answer"
        verb = "did not give" if plain else "gave"
        detail = (
            f"{subject} {verb} a usable answer (a status outside 100-599 is no HTTP "
            f"answer); tried: {_tried(tried)}."
        )
    elif "bad_answer" in outcomes or "interim_answer" in outcomes:
        verb = "could not be reached or give" if plain else "could be reached or gave"
        detail = f"{subject} {verb} a usable answer; tried: {_tried(tried)}."
    else:
        verb = "could not be reached" if plain else "could be reached"
        detail = f"{subject} {verb}; tried: {_tried(tried)}."
    return Problem(
        502,
        "Bad Gateway",
        detail,
        code,
        members={"route": route, "pool": pool, "tried": list(tried)},
    )


def origin_body_broken(route: str | None, origin: str) -> Problem:
    """502: the origin's answer was cut off before its body ended."""
    return Problem(
        502,
        "Bad Gateway",
        f"The origin '{origin}' answered, but its body was cut off (or stopped coming) "
        "before its end.",
        "origin_body_broken",
        members={"route": route, "origin": origin},
    )


def not_cached(route: str) -> Problem:
    """504: the client asked for a stored response only (``only-if-cached``) and none is fresh."""
    return Problem(
        504,
        "Gateway Timeout",
        f"The request asks for a stored response only (Cache-Control: only-if-cached), and "
        f"route '{route}' holds no fresh copy it may serve to it; the origin was not asked.",
        "not_cached",
        members={"route": route},
    )


def content_too_large(detail: str, code: str, limit: int, **members: Any) -> Problem:
    """413: a body above ``limit`` bytes, the most the gateway reads of it."""
    return Problem(413, "Content Too Large", detail, code, members={**members, "max_bytes": limit})


def request_too_large(route: str, limit: int) -> Problem:
    """413: an idempotent request's body is above what the route reads to fingerprint it."""
    return content_too_large(
        f"The request body is larger than {limit} bytes, the most route '{route}' accepts "
        "with an Idempotency-Key (its idempotency.max_request_bytes); it was not forwarded.",
        "request_too_large",
        limit,
        route=route,
    )


def form_too_large(limit: int) -> Problem:
    """413: a form POST too large to read for a ``_method`` override."""
    return content_too_large(
        f"The form body is larger than {limit} bytes, the most the gateway reads to see "
        "whether it asks for another method (_method); it was not forwarded. If it is not "
        "a form, send its own Content-Type (curl's -d and --data-binary label any body "
        "application/x-www-form-urlencoded unless told otherwise).",
        "form_too_large",
        limit,
    )


def request_body_broken() -> Problem:
    """400: the client's body could not be read to its end."""
    return bad_request(
        "The request body could not be read to its end (cut off or malformed framing).",
        "request_body_broken",
    )


def origin_timeout(
    route: str | None, pool: str, tried: Sequence[dict[str, Any]], timeout_ms: int
) -> Problem:
    """504: the origins did not answer within the route's timeout."""
    return Problem(
        504,
        "Gateway Timeout",
        (
            f"The origin did not answer in time (the route allows {timeout_ms} ms); "
            if pool == PLAIN_LABEL
            else f"No origin of pool '{pool}' answered in time (the route allows "
            f"{timeout_ms} ms, each origin its own timeout within it); "
        )
        + f"tried: {_tried(tried)}.",
        "origin_timeout",
        members={"route": route, "pool": pool, "tried": list(tried), "timeout_ms": timeout_ms},
    )


def origins_unavailable(
    route: str | None,
    pool: str,
    tried: Sequence[dict[str, Any]],
    retry_after_ms: int,
    busy: bool,
) -> Problem:
    """503: every origin is shed (breaker open, overloaded) or full (bulkhead), at once."""
    retry = max(1, -(-retry_after_ms // 1000))
    plain = pool == PLAIN_LABEL
    why = (
        f"at {'its' if plain else 'their'} concurrency limit"
        if busy
        else (
            "unavailable (circuit breaker open, or half-open with its trial calls out, "
            "or paused by the origin's 429)"
        )
    )
    return Problem(
        503,
        "Service Unavailable",
        f"{'The origin' if pool == PLAIN_LABEL else f'Every origin of pool {pool!r}'} is "
        f"{why}; retry in {retry} s. Origins: {_tried(tried)}.",
        "origin_busy" if busy else "origins_unavailable",
        members={"route": route, "pool": pool, "tried": list(tried), "retry_after": retry},
        headers=(("Retry-After", str(retry)),),
    )
