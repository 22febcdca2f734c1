"""Which stored answers an unsafe request retires (RFC 9111 section 4.4).

A ``POST``, ``PUT``, ``DELETE`` (any method that is not safe) answered with a success
changes what the origin holds at its target URI, and may change it at the URIs its answer
names in ``Location`` and ``Content-Location`` (a created resource, the resource the
answer describes): the cache forgets its copies of all three. Only a URI on the same host
as the request's may be retired: another host's answer is not this request's to retire
(else a client could empty the cache of any URI by naming it in a write's answer).
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

from ..canonical import canonical_host, runtime_path
from .fields import Fields, field_values

#: The answer's fields that name other URIs the write changed.
RELATED_FIELDS = ("location", "content-location")


def related_targets(scheme: str, host: str, path: str, fields: Fields) -> list[tuple[str, str]]:
    """The ``(path, query)`` of each URI the answer's ``Location`` and ``Content-Location``
    name (relative ones resolved against the request's ``scheme://host/path``) on the
    request's own canonical ``host``, paths as the runtime's URL parser leaves them. A
    field sent twice, or not a URI reference, names nothing."""
    base = f"{scheme}://{host}{path}"
    targets: list[tuple[str, str]] = []
    for name in RELATED_FIELDS:
        values = field_values(fields, name)
        if len(values) != 1:
            continue
        reference = values[0].strip(" \t")
        if not reference or not reference.isprintable() or " " in reference:
            continue
        try:
            parts = urlsplit(urljoin(base, reference))
        except ValueError:
            continue
        target_scheme = parts.scheme.lower()
        if target_scheme not in ("http", "https"):
            continue
        authority = parts.netloc.rpartition("@")[2]
        if canonical_host(authority, target_scheme) != host:
            continue
        target = (runtime_path(parts.path or "/"), parts.query)
        if target not in targets:
            targets.append(target)
    return targets
