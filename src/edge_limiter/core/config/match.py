"""The schema of a route's ``match`` table, and its parser."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import PatternError
from ..matching import PathPattern, parse_host_pattern
from ..validation import Problems, shown
from .fields import Flag, Hand
from .model import Match
from .table import Reader, Table

#: Methods are RFC 9110 tokens, matched as written (upper case by convention).
METHOD_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}$")
#: The methods local workerd hands to the Worker (checked one by one); others (CONNECT,
#: LINK, MKCALENDAR, made-up names) it answers itself, so a route for them draws a warning.
REACHABLE_METHODS = frozenset(
    (
        *("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PURGE"),
        *("QUERY", "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK"),
        *("SEARCH", "REPORT", "ACL", "BAN", "MKACTIVITY", "CHECKOUT", "MERGE", "NOTIFY"),
        *("SUBSCRIBE", "UNSUBSCRIBE"),
    )
)

# fmt: off
MATCH = Table("match", (
    "Which requests the route takes. Routes are tried in order and the first that matches "
    "wins; a route that an earlier one shadows completely draws a warning."
), (
    Hand("methods", 'list of methods, or "*"', null_is_absent=True, default_text="every method",
         example=["GET", "POST"], show=lambda match: sorted(match.methods or ()) or "*",
         doc='A list such as `["GET", "POST"]` (any method name, read upper-case), one method '
             'as a string, or `"*"`. `GET` takes `HEAD` too: origins answer a `HEAD` by running '
             "the `GET`, so it is counted alike."),
    Hand("path", "path pattern", required=True, example="/v1/users/{id}",
         show=lambda match: match.path.source,
         doc="Matched against the canonical path: `{name}` captures one segment (a key may "
             "count by it: `path:name`); `*` is one segment, or everything when last (`/v1/*`, "
             "which matches `/v1` itself too); `*` alone matches every path."),
    Hand("host", "host pattern", null_is_absent=True, default_text="any host",
         example="*.example.com", show=lambda match: match.host or "*",
         doc="`api.example.com` or `*.example.com` (any subdomain, not the domain itself), any "
             "port; an internationalised name may be written as it reads."),
    Flag("case_insensitive", default_text="`paths.case_insensitive`", example=True,
         show=lambda match: match.path.case_insensitive,
         doc="Match the path (and capture its parameters, lower-cased) ignoring ASCII case, for "
             "an origin that treats `/V1/LOGIN` like `/v1/login` (IIS, ASP.NET); the path is "
             "still forwarded as sent."),
))
# fmt: on


def parse_match(value: object, case_default: bool, where: str, problems: Problems) -> Match | None:
    """The route's ``match`` table (``where`` names the route), or ``None`` after a problem."""
    if not isinstance(value, Mapping):
        problems.add(
            f"{where}.match",
            "is required: a table like { path = '/v1/*' }"
            if value is None
            else f"must be a table like {{ path = '/v1/*' }}, got {shown(value)}",
        )
        return None
    before = len(problems)
    got = Reader(MATCH, value, f"{where}.match", problems)
    case_insensitive = got.flag("case_insensitive", case_default)
    path = PathPattern.parse("*")
    try:
        path = PathPattern.parse(got.raw.get("path"), case_insensitive)
    except PatternError as exc:
        problems.add(f"{where}.match.path", str(exc))
    else:
        named = [seg for seg in path.source.split("/") if re.fullmatch(r":[A-Za-z_]\w*", seg)]
        if named:
            problems.warn(
                f"{where}.match.path",
                f"{named[0]!r} is matched as written (a segment of that very text): a "
                f"parameter is written {{{named[0][1:]}}}",
            )
    methods = _methods(got.raw.get("methods"), f"{where}.match.methods", problems)
    host = None
    if got.given("host"):
        try:
            host = parse_host_pattern(got.raw["host"])
        except PatternError as exc:
            problems.add(f"{where}.match.host", str(exc))
    if len(problems) != before:
        return None
    return Match(path, methods, host)


def _methods(raw: object, where: str, problems: Problems) -> frozenset[str] | None:
    """``methods``: ``None`` for every method, else the set (``GET`` takes ``HEAD`` too)."""
    if raw == ["*"]:
        raw = "*"  # every method, as written alone
    if raw is None or raw == "*":
        return None
    listed = raw if isinstance(raw, list) else [raw]
    bad = [m for m in listed if not isinstance(m, str) or not METHOD_RE.fullmatch(m)]
    if "*" in listed:
        problems.add(where, f"'*' means every method: write methods = '*' alone, got {shown(raw)}")
        return None
    if bad or not listed:
        problems.add(
            where, f"must be '*' or a list of methods like ['GET', 'POST'], got {shown(raw)}"
        )
        return None
    methods = frozenset(str(m).upper() for m in listed)
    unusual = sorted(methods - REACHABLE_METHODS)
    if unusual:
        every = {"ALL", "ANY"} & set(unusual)
        hint = (
            f" ({', '.join(sorted(every))} is no method: every method is written methods = '*')"
            if every
            else ""
        )
        problems.warn(
            where,
            f"{', '.join(unusual)}: local workerd answers such requests itself (501, "
            f"or 500 for CONNECT) before the Worker runs, so this never matches "
            f"there{hint}",
        )
    if "GET" in methods:
        # Origins answer HEAD by running GET (RFC 9110 9.3.2): a HEAD must not
        # reach the origin uncounted where a GET is limited.
        methods |= {"HEAD"}
    return methods
