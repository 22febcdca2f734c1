"""Fields the gateway sets on every request it sends an origin (top-level
``origin_headers``, and a pool's ``headers``, which replace those of the same name).

The usual one is a shared secret, so that an origin answers only requests that came
through the gateway: a Worker's requests leave from Cloudflare's addresses, which every
other Worker shares, so an origin cannot tell the gateway by address, and a client that
reached the origin directly would pass every limit by. A value is written in the config
as it is, or as ``"$NAME"``: the Worker's secret (or var) ``NAME``, read at run time, so
the secret never sits in the config or the bundle. ``"$$..."`` is a literal value that
starts with ``$``.

Each field replaces whatever the client sent under that name. Names that frame the message
or that the runtime owns (hop-by-hop fields, ``Host``, ``Content-*``, ``Expect``,
``CF-*``) are refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ..caching.fields import HOP_BY_HOP, is_token
from ..errors import ConfigError
from ..validation import Problems, shown, table
from .method_override import OVERRIDE_FIELDS

#: A secret's or var's name, as wrangler takes it.
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Field names an origin header may not be: the message's own framing and the runtime's.
REFUSED = HOP_BY_HOP | {"host", "content-length", "content-type", "content-encoding", "expect"}
#: Fields clients send for themselves: setting one hides the client's from the origin.
CLIENTS_OWN = frozenset({"authorization", "cookie", "user-agent", "accept"})
#: Names whose literal value is most likely a secret (then the config check warns).
_SECRET_LIKE = ("auth", "key", "secret", "token", "password", "signature")
#: The longest value written in the config.
MAX_VALUE = 4096
#: The fields top-level ``forwarded_host = true`` sets on every forwarded request: the
#: host (with a port other than the scheme's) and the scheme the client asked for, which
#: the request's own ``Host`` no longer says once it is sent to the origin's URL.
FORWARDED_HOST_FIELDS = ("x-forwarded-host", "x-forwarded-proto")


#: Fields some origins take as the request's path instead of its own (IIS URL Rewrite;
#: Symfony before 3.4.14 and 4.1.3, CVE-2018-14773): a client's copy would send the
#: origin to a path that was not matched or counted. Only a proxy in front of the origin
#: may set them, and the gateway is that proxy: a client's copy is dropped.
PATH_OVERRIDE_FIELDS = (
    "x-original-url",
    "x-rewrite-url",
    "x-original-uri",  # nginx auth_request, some PHP frameworks
    "x-forwarded-uri",  # Traefik
    "x-forwarded-path",
    "x-envoy-original-path",
)
#: Fields frameworks take, behind a proxy they trust, as the host or path prefix the client
#: asked for (Rails, Django, Express, Symfony, Laravel: X-Forwarded-Host; Spring, Symfony:
#: X-Forwarded-Prefix). The gateway is that proxy and matched the request by its own host
#: and path: a client's copy would have the origin serve another host (a tenant chosen by
#: host) or path than the one counted.
FORWARDED_AS_FIELDS = (
    "x-forwarded-host",
    "x-forwarded-prefix",
    "forwarded",  # RFC 7239 host= and proto= (Spring, Rack 3 prefer it to X-Forwarded-Host)
    "x-host",
    "x-forwarded-server",
    "x-forwarded-port",
    "x-original-host",
    "x-http-host-override",
    # The scheme asked for, spelled the other ways (Rack reads X-Forwarded-Ssl first,
    # Tornado X-Scheme, gunicorn X-Forwarded-Protocol, IIS ARR X-Arr-Ssl).
    "x-forwarded-ssl",
    "x-forwarded-scheme",
    "front-end-https",
    "x-url-scheme",
    "x-scheme",
    "x-forwarded-protocol",
    "x-arr-ssl",
    "x-real-proto",
)
#: Fields that would have the origin run something other than what was matched and
#: counted: the path fields, the method-override fields, the idempotency key. Neither
#: ``origin_headers`` nor ``client_ip_header`` may set one.
NEVER_SET = frozenset((*PATH_OVERRIDE_FIELDS, *OVERRIDE_FIELDS, "idempotency-key"))
#: What ``client_ip_header`` may not be besides: the fields naming the host, prefix and
#: scheme asked for (an address there would have the origin build wrong links).
NOT_AN_ADDRESS = frozenset((*FORWARDED_AS_FIELDS, *FORWARDED_HOST_FIELDS))


@dataclass(frozen=True, slots=True)
class OriginHeader:
    """One field for origins: a literal ``value``, or the secret named ``secret``."""

    name: str
    """Lower case."""
    value: str | None = None
    secret: str | None = None
    where: str = "config.origin_headers"
    """The table it was written in (for the problem when its secret is missing)."""

    def describe(self) -> str:
        """How the config check and the admin API show it: never a secret's value."""
        return f"${self.secret}" if self.secret is not None else "(a literal value)"


def _valid_value(value: str) -> bool:
    """A field value the runtime sends as written: printable, no line breaks."""
    return all(ch == "\t" or " " <= ch != "\x7f" for ch in value)


def parse_origin_headers(
    raw: object, problems: Problems, where: str = "config.origin_headers"
) -> tuple[OriginHeader, ...]:
    """The top-level ``origin_headers`` table, or a pool's ``headers`` (``None``: none)."""
    if raw is None:
        return ()
    fields = table(raw, where, problems)
    if fields is None:
        return ()
    out: list[OriginHeader] = []
    seen: set[str] = set()
    for name, value in fields.items():
        here = f"{where}.{name}"
        if not isinstance(name, str) or not is_token(name):
            problems.add(where, f"names fields: {shown(name)} is not a field name")
            continue
        folded = name.lower()
        if folded in REFUSED or folded.startswith("cf-"):
            problems.add(here, "is a field the runtime or the message framing owns")
            continue
        if folded.replace("_", "-") in NEVER_SET:  # CGI-style origins read both alike
            problems.add(
                here,
                "would have origins run another path, method or request than the one "
                "matched and counted: the gateway never sends it",
            )
            continue
        if folded in seen:
            problems.add(here, "is named twice (field names are not case-sensitive)")
            continue
        seen.add(folded)
        if folded in CLIENTS_OWN:
            problems.warn(
                here,
                f"replaces every client's {name}: the origin will never see the client's own",
            )
        if not isinstance(value, str) or not value or len(value) > MAX_VALUE:
            problems.add(
                here,
                f"must be a value (at most {MAX_VALUE} characters) or '$SECRET_NAME', "
                f"got {shown(value)}",
            )
            continue
        if value.startswith("$") and not value.startswith("$$"):
            secret = value[1:]
            if not ENV_NAME_RE.fullmatch(secret):
                problems.add(here, f"'$' must be followed by a secret's name, got {shown(value)}")
                continue
            out.append(OriginHeader(folded, secret=secret, where=where))
            continue
        literal = value[1:] if value.startswith("$$") else value
        if not _valid_value(literal):
            problems.add(here, "must be printable text on one line")
            continue
        if any(word in folded for word in _SECRET_LIKE):
            problems.warn(
                here,
                "a literal value is bundled into the Worker's code; keep a secret in a "
                "secret: '$NAME' with `npx wrangler secret put NAME`",
            )
        out.append(OriginHeader(folded, value=literal, where=where))
    return tuple(out)


def merged(
    top: tuple[OriginHeader, ...], own: tuple[OriginHeader, ...]
) -> tuple[OriginHeader, ...]:
    """A pool's fields: the top level's, each replaced by the pool's own of that name."""
    names = {header.name for header in own}
    return (*(header for header in top if header.name not in names), *own)


def resolve_origin_headers(
    headers: tuple[OriginHeader, ...], secret: Callable[[str], str | None]
) -> tuple[tuple[str, str], ...]:
    """The fields with their values, secrets read through ``secret``.

    Raises :class:`ConfigError` naming every secret that is not set or holds a value no
    field may carry, and how to set it: the gateway then answers ``503`` saying so, and
    never forwards a request the origin would refuse for want of it.
    """
    out: list[tuple[str, str]] = []
    missing: list[str] = []
    for header in headers:
        if header.secret is None:
            assert header.value is not None
            out.append((header.name, header.value))
            continue
        value = secret(header.secret)
        if not value or not _valid_value(value):
            missing.append(
                f"{header.where}.{header.name}: the secret {header.secret} is "
                + ("not set" if not value else "not printable text on one line")
                + f": `npx wrangler secret put {header.secret}` (locally, a line "
                f"{header.secret}=... in .dev.vars)"
            )
            continue
        out.append((header.name, value))
    if missing:
        raise ConfigError(missing)
    return tuple(out)
