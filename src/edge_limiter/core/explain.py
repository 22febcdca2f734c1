"""What the gateway would do with a request, without doing it: for the config check's
``--explain`` and the admin API's ``explain`` (a route as plain data is
:func:`~edge_limiter.core.config.describe.describe_route`)."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from .caching.fields import connection_named, is_token
from .canonical import admin_path, ascii_host, canonical_host, canonical_path, runtime_path
from .config import Config, Route
from .errors import AmbiguousRequestError, ExplainError, PathError
from .http.messages import Client, Headers, Request
from .http.method_override import (
    MethodOverrideError,
    asked_methods,
    overridden_method,
    override_fields,
    without_override_param,
)
from .identity.tiers import Caller
from .keys import object_name
from .routing.geo import ClientLocation, order_origins
from .routing.origins import CONTINENTS

#: Where an absolute URL's authority ends.
#: Where a URL's authority ends; the runtime's URL parser reads ``\`` as ``/`` in http(s).
_AUTHORITY_END = re.compile(r"[/?#\\]")
#: A host (a name, an IPv4 address or a bracketed IPv6 one) and an optional port, as a
#: URL parser takes them; no user information, spaces or controls.
_AUTHORITY_RE = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[^\s\x00-\x1f\x7f@\[\]:/]+)(?::\d{0,5})?")
_PORT_RE = re.compile(r":\d+$")
#: An authority whose every ``%`` starts an escape of two hex digits.
_ESCAPES_RE = re.compile(r"(?:[^%]|%[0-9A-Fa-f]{2})*")
#: ``request.cf.country`` / ``continent``: two letters (Cloudflare adds ``T1`` for Tor).
_CODE_RE = re.compile(r"[A-Za-z][A-Za-z0-9]")


def header_line(text: str) -> tuple[str, str]:
    """``"Name: value"`` as a field to explain a request with; raises :class:`ExplainError`."""
    name, sep, value = text.partition(":")
    if not sep or not is_token(name.strip()):
        raise ExplainError(f"a header is written 'Name: value', got {text!r}")
    if any(char in value for char in "\r\n\x00"):
        raise ExplainError(f"a header's value holds no line break and no NUL, got {text!r}")
    return name.strip(), value.strip()


#: The admin API's parameters for :func:`explained_client`.
EXPLAINED_CLIENT_PARAMS = ("ip", "country", "continent", "asn", "latitude", "longitude")


def explained_client(
    *,
    ip: str = "",
    country: str = "",
    continent: str = "",
    asn: str = "",
    latitude: str = "",
    longitude: str = "",
) -> Client:
    """The client of a request to explain, as given; raises :class:`ExplainError` for an
    address or a coordinate no request could have."""
    if ip:
        try:
            ipaddress.ip_address(ip.strip())
        except ValueError:
            raise ExplainError(
                f"{ip!r} is not an IP address (the client's CF-Connecting-IP)"
            ) from None
    if asn and not (asn.strip().isascii() and asn.strip().isdigit()):
        raise ExplainError(f"asn must be a number (request.cf.asn, e.g. 13335), got {asn!r}")
    if country and not _CODE_RE.fullmatch(country):
        raise ExplainError(
            f"country is a two-letter code as request.cf gives it (e.g. 'DE'), got {country!r}"
        )
    if continent and continent.upper() not in CONTINENTS:
        raise ExplainError(
            f"continent is one of {', '.join(sorted(CONTINENTS))} (request.cf.continent), "
            f"got {continent!r}"
        )
    coordinates: list[float | None] = []
    for name, text, bound in (("latitude", latitude, 90), ("longitude", longitude, 180)):
        if not text:
            coordinates.append(None)
            continue
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not -bound <= value <= bound:
            raise ExplainError(f"{name} must be a number from -{bound} to {bound}, got {text!r}")
        coordinates.append(value)
    return Client(
        ip=ip.strip(),
        country=country.upper(),
        continent=continent.upper(),
        asn=asn.strip(),
        latitude=coordinates[0],
        longitude=coordinates[1],
    )


@dataclass(frozen=True, slots=True)
class ExplainedCaller:
    """Who a request to explain is from, as the identity stage decided it.

    ``caller`` is what the stage puts on the exchange (None: the request is refused, 401;
    ``key`` is then what the refusal is counted under); ``reason`` why a token or key was
    refused (also when the route lets the caller in as anonymous); ``shown`` what was
    verified, for the reader (``{"auth": "main", "sub": "u1", "plan": "pro"}``)."""

    caller: Caller | None
    reason: str | None = None
    key: str | None = None
    shown: dict[str, Any] = field(default_factory=dict)


#: Decides who a request is from on a route with identity (the route, the request, the
#: path's parameters); the tools verify the token offline, the admin API gives none.
Identify = Callable[[Route, Request, dict[str, str]], ExplainedCaller]


def split_url(url: str) -> tuple[str, str, str, str]:
    """An absolute http(s) URL's scheme, authority, path (``/`` when empty) and query.

    Raises :class:`ExplainError` when it is not one (no scheme, another scheme, no host).
    """
    scheme, _, rest = url.partition("://")
    authority = _AUTHORITY_END.split(rest, maxsplit=1)[0]
    target = rest[len(authority) :]
    if scheme.lower() not in ("http", "https") or not authority:
        raise ExplainError(f"{url!r} is not an absolute URL like https://api.example.com/v1/x")
    written = authority
    if "%" in authority:
        # The runtime decodes a host's escapes (``h%41`` is ``ha``).
        try:
            authority = (
                unquote(authority, errors="strict") if _ESCAPES_RE.fullmatch(authority) else ""
            )
        except UnicodeDecodeError:
            authority = ""
    if not _AUTHORITY_RE.fullmatch(authority):
        raise ExplainError(f"{url!r}: {written!r} is not a host with an optional port")
    if authority.startswith("["):
        literal = authority[1 : authority.index("]")]
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            raise ExplainError(f"{url!r}: [{literal}] is not an IPv6 address") from None
    port = authority.rpartition(":")[2] if _PORT_RE.search(authority) else ""
    if port and not 0 < int(port) <= 65535:
        raise ExplainError(f"{url!r}: the port must be from 1 to 65535, got {port}")
    raw_path, _, query = target.partition("#")[0].partition("?")
    return scheme, authority, raw_path or "/", query


def explain(
    config: Config,
    method: str,
    url: str,
    headers: list[tuple[str, str]] | None = None,
    client: Client | None = None,
    *,
    identify: Identify | None = None,
) -> dict[str, Any]:
    """Which route ``method url`` hits, its canonical path, key and Durable Object.

    On a route with ``auth`` or ``tiers``, ``identify`` says who the request is from: the
    key and limits are then the verified caller's and its tier's (or the anonymous
    tier's, or the refusal's: ``status`` 401). Without it, ``identity`` says it was not
    checked, and a ``jwt:`` or ``apikey`` part of the key shows as empty.

    Raises :class:`ExplainError` when ``url`` is not an absolute http(s) URL with a host
    or ``method`` is not a method name: there is no request to explain. A request the
    gateway would refuse (a bad path, an ambiguous key) is explained with its status.
    """
    scheme, authority, target_path, query = split_url(url)
    # As the gateway reads them: without the fields the request's Connection names.
    given = Headers(headers or [])
    named = connection_named(given.get("connection"))
    if named:
        given.discard(named)
    # What the Worker is given: the runtime's URL parser has resolved dot segments.
    raw_path = runtime_path(target_path)
    if not is_token(method):
        raise ExplainError(f"{method!r} is not an HTTP method name (GET, POST, ...)")
    out: dict[str, Any] = {"method": method.upper(), "url": url}
    try:
        path = canonical_path(raw_path, config.matrix_params)
    except PathError as exc:
        out.update(status=400, error=f"bad_path: {exc}")
        return out
    try:
        authority = _ascii_authority(authority)
    except UnicodeError:
        out.update(status=400, error=f"bad_host: {authority!r} is not a host name")
        return out
    host = canonical_host(authority, scheme.lower())
    out.update(canonical_path=path, canonical_host=host)
    if admin_path(config.ops.admin_prefix, path) is not None:
        # Answered by the admin API (or 404 without its token set): never forwarded.
        out.update(route=None, admin=True, limited=False)
        return out
    if out["method"] == "POST" and config.method_override != "pass":
        # As the gateway takes it (a form or JSON body's _method is not given here).
        fields = override_fields(given)
        try:
            wanted = overridden_method(
                config.method_override, asked_methods(fields, query, None), False
            )
        except MethodOverrideError as exc:
            out.update(status=400, error=f"method_override: {exc}")
            return out
        if wanted is not None:
            out.update(method=wanted, sent_as="POST")
            query = without_override_param(query)
    matched = config.match(out["method"], host, path)
    if matched is None:
        if config.forward is None:
            out.update(route=None, status=404)
        else:
            out.update(route=None, forward_to=config.forward.pool.name, limited=False)
        return out
    route, params = matched
    request = Request(out["method"], raw_path, query, authority, scheme, given, client or Client())
    out.update(route=route.name, params=params)
    try:
        key, limits = _key_and_limits(route, request, params, identify, out)
    except AmbiguousRequestError as exc:
        out.update(status=400, error=f"ambiguous_key: {exc}")
        return out
    out.update(key=key, **_counted(route, key, request.client, limits))
    return out


def _key_and_limits(
    route: Route,
    request: Request,
    params: dict[str, str],
    identify: Identify | None,
    out: dict[str, Any],
) -> tuple[str, list[str]]:
    """The request's key on ``route`` and the limits it is counted under: the verified
    caller's and its tier's where the route checks identity and ``identify`` is given
    (what was found goes into ``out``)."""
    limits = [str(lim) for lim in route.limits.limits]
    if route.identity is None:
        return route.limits.key.compute(request, params), limits
    if identify is None:
        out.update(identity="not checked (no token or API key given)")
        return route.limits.key.compute(request, params), limits
    found = identify(route, request, params)
    out.update(identity=found.shown or "none")
    caller = found.caller
    if found.reason is not None:
        out.update(invalid=found.reason)
    if caller is None:
        # Refused: counted under the client's address by the route's own limits.
        out.update(status=401, error=f"invalid_token: {found.reason}")
        return found.key or "", limits
    tier = caller.tier
    if tier is not None:
        out.update(tier=tier.tier)
        if tier.exempt:
            limits = []
            out.update(exempt=True)
        elif tier.limits:
            limits = [str(lim) for lim in tier.limits]
            out.update(leases=tier.leases)
    return _caller_key(route, request, params, caller), limits


def _ascii_authority(authority: str) -> str:
    """A host written as read, in the ASCII (punycode) form the runtime (like any client)
    has it in, as the host patterns are kept; raises :class:`UnicodeError` for no name."""
    if authority.isascii():
        return authority
    name, colon, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
    return f"{ascii_host(name)}{colon}{port}"


def _counted(route: Route, key: str, where: Client, limits: list[str]) -> dict[str, Any]:
    """How the route counts ``key``, and the order its origins are tried in for ``where``."""
    order = order_origins(
        route.forward.pool.origins,
        ClientLocation(
            where.country or None, where.continent or None, where.latitude, where.longitude
        ),
    )
    return {
        "durable_object": object_name(route.name, key),
        "limits": limits,
        "algorithm": route.limits.algorithm,
        "shadow": route.limits.shadow,
        "origins": [origin.name for origin in order],
    }


def _caller_key(route: Route, request: Request, params: dict[str, str], caller: Caller) -> str:
    """The route's key for a request the identity stage let through (as the rate limit
    computes it): an anonymous caller's address on a route keyed on an identity, else
    the key with the verified claims and API key owner."""
    spec = route.limits.key
    if caller.anonymous and spec.names_identity():
        return str(spec.anonymous(request))
    return str(spec.compute(request, params, caller.claims, caller.caller))
