"""A plain view of an incoming request: what routing and keys are computed from.

The Worker adapter builds it from the platform's request (headers, URL, ``request.cf``);
the core never sees a platform object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs


@dataclass(frozen=True, slots=True)
class RequestView:
    """The parts of a request the core decides on. Header names are lower case."""

    method: str
    path: str
    host: str = ""
    query: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    client_ip: str = ""
    """From ``CF-Connecting-IP``, which Cloudflare sets; never from ``X-Forwarded-For``."""
    country: str = ""
    continent: str = ""
    asn: str = ""

    def header(self, name: str) -> str | None:
        """A header's value, or ``None`` (names are case-insensitive)."""
        return self.headers.get(name.lower())

    def query_param(self, name: str) -> str | None:
        """The first value of a query parameter, or ``None``."""
        values = parse_qs(self.query, keep_blank_values=True).get(name)
        return values[0] if values else None

    def cookie(self, name: str) -> str | None:
        """A cookie's value from the ``Cookie`` header, or ``None``."""
        raw = self.header("cookie")
        if not raw:
            return None
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(raw)
        except CookieError:
            # Fall back to a plain split: browsers send cookies SimpleCookie rejects.
            for part in raw.split(";"):
                cookie_name, sep, value = part.strip().partition("=")
                if sep and cookie_name == name:
                    return value
            return None
        morsel = jar.get(name)
        return morsel.value if morsel is not None else None
