"""The schema of a route's ``key`` and address prefixes, and the key's parser."""

from __future__ import annotations

from ..caching.fields import HOP_BY_HOP
from ..errors import KeySpecError
from ..http.origin_headers import FORWARDED_AS_FIELDS, PATH_OVERRIDE_FIELDS
from ..keys import KeyPart, KeySpec, parse_key_part
from ..validation import Problems
from .fields import Hand, Integer
from .table import Reader

#: Request fields that never reach an origin: a key on one counts what nobody checks.
_NEVER_FORWARDED = HOP_BY_HOP | {"expect", *PATH_OVERRIDE_FIELDS, *FORWARDED_AS_FIELDS}

# fmt: off
KEY_FIELDS = (
    Hand("key", "key part, or a list of them", default="ip",
         example=["header:x-api-key", "ip"],
         show=lambda route: [str(part) for part in route.limits.key.parts],
         doc="Who a request is counted against: one part or a list of `ip`, `header:NAME`, "
             "`cookie:NAME`, `query:NAME`, `path:NAME` (a parameter `match.path` captures), "
             "`country`, `asn`, `jwt:CLAIM` (a claim of the route's verified token by its "
             "path, `jwt:org.id`; a name with dots in double quotes, "
             "`'jwt:\"https://example.com/plan\"'`), `apikey` (the caller's API key record's "
             "owner), or `global` alone (one counter every request shares). Requests "
             "lacking a named part share one counter; one sending it twice with different "
             "values gets `400` (`ambiguous_key`)."),
    Integer("ipv4_prefix", 1, 32, default=32, unit="bits", example=24,
            attr="limits.key.ipv4_prefix",
            doc="How IPv4 client addresses are aggregated for an `ip` key part (elsewhere a "
                "warning)."),
    Integer("ipv6_prefix", 1, 128, default=64, unit="bits", example=48,
            attr="limits.key.ipv6_prefix",
            doc="How IPv6 client addresses are aggregated for an `ip` key part (elsewhere a "
                "warning)."),
)
# fmt: on


def parse_key(got: Reader, params: tuple[str, ...], problems: Problems) -> KeySpec:
    """The route's ``key`` with its prefixes; ``params`` are those ``match.path`` captures."""
    where = got.where
    value = got.raw.get("key", "ip")
    items = value if isinstance(value, list) else [value]
    parts: list[KeyPart] = []
    if not items:
        problems.add(f"{where}.key", "must name at least one key part")
    for item in items:
        try:
            part = parse_key_part(item)
        except KeySpecError as exc:
            problems.add(f"{where}.key", str(exc))
            continue
        if part.kind == "header" and part.name.lower().replace("_", "-") in _NEVER_FORWARDED:
            problems.add(
                f"{where}.key",
                f"{part} is a field no origin ever gets (it describes the connection, or "
                "the gateway drops it): a client could send any value and get a counter "
                "of its own for free",
            )
            continue
        if part.kind == "path" and part.name not in params:
            problems.add(
                f"{where}.key",
                f"{part} names a path parameter that match.path does not capture "
                f"(it captures: {', '.join(params) or 'none'})",
            )
        parts.append(part)
    if len({str(p) for p in parts}) != len(parts):
        problems.add(f"{where}.key", "names the same key part twice")
    others = "+".join(str(part) for part in parts if part.kind != "global")
    if others and any(part.kind == "global" for part in parts):
        problems.add(
            f"{where}.key",
            "'global' is one counter for every request and cannot be combined with other "
            f"key parts: write key = 'global' for one shared counter, or drop it to count "
            f"by {others}",
        )
    v4, v6 = got.integer("ipv4_prefix"), got.integer("ipv6_prefix")
    if parts and not any(part.kind == "ip" for part in parts):
        for field in ("ipv4_prefix", "ipv6_prefix"):
            if field in got.raw:
                problems.warn(
                    f"{where}.{field}",
                    "has no effect: the route's key has no 'ip' part (it counts by "
                    f"{'+'.join(str(part) for part in parts)})",
                )
    return KeySpec(tuple(parts), v4, v6)
