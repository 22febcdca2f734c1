"""The answers a cached route gives from a stored entry: the copy itself (its ``Age``
reckoned now), or ``304`` when the client's validators say it holds that copy; with
the gateway's own fields for this client and ``X-Cache`` saying where it came from."""

from __future__ import annotations

from ..core.caching.conditional import not_modified, not_modified_fields
from ..core.caching.entry import Entry, age_seconds, replay_headers
from ..core.http import problems
from ..core.http.fields import GATEWAY_FIELD_NAMES, gateway_fields
from ..core.http.messages import Headers, Response
from .exchange import problem_response

CACHE_HEADER = "X-Cache"
#: ``X-Cache`` of a stale copy served while a fresh one is fetched (stale-while-revalidate).
UPDATING = "UPDATING"
#: ``X-Cache`` of a stale copy the origin said is still current (a ``304`` to the
#: conditional request the cache sent), served with the fields that ``304`` renewed.
REVALIDATED = "REVALIDATED"


def from_entry(
    method: str,
    entry: Entry,
    validators: list[tuple[str, str]],
    now: int,
    *,
    label: str,
    gateway: list[tuple[str, str]],
) -> Response:
    """The client's answer from ``entry`` (``304`` when its validators say it holds that
    copy), with the gateway's own fields for this client (those of ``gateway``: its
    rate-limit state, the origin that renewed it) and ``X-Cache: label``."""
    if validators and not_modified(validators, entry.status, entry.headers, entry.stored_at, now):
        # The client's copy is current: 304, the body not sent again.
        status = 304
        out = Headers(not_modified_fields(entry.headers))
        out.set("Age", str(age_seconds(entry, now)))
        body = None
    else:
        status = entry.status
        out = Headers(replay_headers(entry, now))
        body = _body_for(method, entry, out)
    for name, value in gateway:
        lowered = name.lower()
        if lowered == "x-origin" or lowered in GATEWAY_FIELD_NAMES:
            out.set(name, value)
    out.set(CACHE_HEADER, label)
    return Response(status, out, body)


def not_cached(route: str) -> Response:
    """``504`` for ``only-if-cached`` without a fresh copy (RFC 9111 section 5.2.1.7)."""
    response = problem_response(problems.not_cached(route))
    response.headers.set(CACHE_HEADER, "MISS")
    return response


def judged(
    validators: list[tuple[str, str]], stored: Entry, response: Response, now: int
) -> Response:
    """The origin's answer, or a ``304`` when the copy just stored matches the validators."""
    if not not_modified(validators, stored.status, stored.headers, stored.stored_at, now):
        return response
    out = Headers(not_modified_fields(stored.headers))
    for name, value in gateway_fields(response.headers.items()):
        out.set(name, value)
    origin = response.headers.get("x-origin")
    if origin is not None:
        out.set("X-Origin", origin)
    # It stands for the origin's answer (``native``): its CORS decision stands too.
    return Response(304, out, None, response.native)


def _body_for(method: str, entry: Entry, fields: Headers) -> bytes | None:
    """The stored body for a GET; for a HEAD none, and the length a GET's body would have
    (as the origin says it for a HEAD), since ``Content-Length`` is never stored.

    A body stored with a ``Content-Encoding`` is kept as the runtime read it, decoded,
    and encoded again for each client on the way out: its length on the wire is not
    known ahead, so a HEAD says none (as the runtime's own answers do).
    """
    if method == "GET":
        return entry.body or None
    encoding = fields.get("content-encoding")
    if entry.status != 204 and (encoding is None or encoding.strip().lower() == "identity"):
        fields.set("Content-Length", str(len(entry.body)))
    return None
