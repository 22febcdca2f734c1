"""CORS for the gateway's own answers, and its fields exposed to browser code.

A browser's ``fetch`` from another origin sees a response only if it carries
``Access-Control-Allow-Origin`` for the page's origin; otherwise the page gets a network
error, not the ``429`` and its ``Retry-After``. The origin sets that field on its own
answers, but the gateway's answers (``429``, ``503``, the other problems, cache hits of
responses stored without it) never came from the origin. With the config's ``cors``
table, the gateway adds the field to its own answers for the origins listed, and to
every response that allows a page's origin it adds the rate-limit fields to
``Access-Control-Expose-Headers`` (browser code reads only the fields listed there).
The origin's own answers keep its CORS decision: one that does not allow the page's
origin is not made to.

    cors = { allow_origins = ["https://app.example.com", "https://*.preview.example.com"],
             allow_credentials = false }

An origin may start its host with ``*.``: any subdomain (one label or more) of the rest,
with the same scheme and port, not the rest itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from ..caching.fields import list_items
from ..validation import shown
from .messages import HeaderMap

#: The fields the gateway adds that browser code may want to read.
EXPOSED = (
    "RateLimit",
    "RateLimit-Policy",
    "Retry-After",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "X-EdgeLimiter-Reason",
    "X-Cache",
    "Idempotent-Replayed",
)


@dataclass(frozen=True, slots=True)
class CorsSettings:
    """Which page origins the gateway's own answers allow."""

    allow_origins: frozenset[str]
    """Origins as browsers send them (``https://app.example.com``, lower case), or ``*``."""
    allow_credentials: bool = False
    """Whether the answers allow credentials (cookies); needs explicit origins."""
    wildcards: tuple[tuple[str, str], ...] = ()
    """``https://*.example.com`` as (``https://``, ``.example.com``): scheme, and what the
    rest of the origin ends with (the port included)."""

    def allowed(self, origin: str) -> str | None:
        """The ``Access-Control-Allow-Origin`` value for a page at ``origin``, if allowed."""
        folded = origin.lower()
        if folded in self.allow_origins:
            return origin
        for scheme, suffix in self.wildcards:
            if (
                folded.startswith(scheme)
                and folded.endswith(suffix)
                and len(folded) > len(scheme) + len(suffix)
                and ":" not in folded[len(scheme) : -len(suffix)]
                and "/" not in folded[len(scheme) :]
            ):
                return origin
        if "*" in self.allow_origins:
            return "*"
        return None


def exposed(current: str | None, credentials: bool) -> str | None:
    """``Access-Control-Expose-Headers`` with the gateway's fields added to ``current``,
    or ``None`` when it already exposes them (``*`` exposes every field, but not when
    credentials are allowed: then it is a field named ``*``)."""
    names = list_items(current)
    if "*" in names and not credentials:
        return None
    present = {name.lower() for name in names}
    missing = [name for name in EXPOSED if name.lower() not in present]
    if not missing:
        return None
    return ", ".join([*names, *missing])


def with_vary_origin(current: str | None) -> str | None:
    """``Vary`` naming ``Origin`` too (the answer depends on it), or ``None`` if it does."""
    items = list_items(current)
    if any(item == "*" or item.lower() == "origin" for item in items):
        return None
    return ", ".join([*items, "Origin"])


def origin_problem(item: object) -> str | None:
    """Why ``item`` is not an origin ``allow_origins`` may list, or ``None``."""
    if item == "*":
        return None
    if not isinstance(item, str):
        return f"must be an origin like 'https://app.example.com', got {shown(item)}"
    parts = urlsplit(item.replace("://*.", "://wildcard.", 1))
    if item.count("*") > (1 if "://*." in item else 0):
        return f"may hold '*' only as its host's first label ('https://*.example.com'), got {shown(item)}"
    if "://*." in item and "." not in parts.hostname.partition(".")[2]:  # type: ignore[union-attr]
        return f"a '*.' must be followed by a domain of two labels or more, got {shown(item)}"
    if (
        parts.scheme not in ("http", "https")
        or not parts.netloc
        or parts.path
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        return (
            "must be an origin: scheme and host (and port), no path, like "
            f"'https://app.example.com', got {shown(item)}"
        )
    return None


def is_preflight(method: str, headers: HeaderMap) -> bool:
    """Whether a request is a CORS preflight (the Fetch standard's: ``OPTIONS`` with
    ``Origin`` and ``Access-Control-Request-Method``)."""
    return (
        method == "OPTIONS"
        and bool((headers.get("access-control-request-method") or "").strip())
        and headers.get("origin") is not None
    )
