"""Route match patterns: methods, an optional host, and a path with ``*`` and ``{param}``.

Patterns are matched against the CANONICAL path (:mod:`.canonical`), segment by segment:

- a literal segment matches itself exactly (case-sensitive unless the route says
  ``case_insensitive``); literals are written in canonical form too, so ``/v1/%6cogin`` in
  a pattern is ``/v1/login``;
- ``{name}`` matches exactly one segment and captures it, fully percent-decoded, as a path
  parameter (lower-cased when the route is case-insensitive);
- ``*`` matches exactly one segment, except as the LAST segment, where it matches
  everything that follows (zero or more segments): ``/api/*`` matches ``/api``, ``/api/``
  and ``/api/v1/users``;
- the pattern ``*`` alone matches every path.

A trailing slash is not significant for matching. Hosts match exactly (case-insensitive) or
by a leading wildcard: ``*.example.com`` matches ``a.example.com`` and ``a.b.example.com``
but not ``example.com``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .canonical import ascii_host, canonical_path, decode_segment, host_name
from .errors import PathError, PatternError
from .validation import shown

_PARAM_RE = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_HOST_LABEL_RE = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")


def path_segments(path: str) -> list[str]:
    """The segments of a canonical path (a trailing slash adds none)."""
    parts = path.split("/")[1:]
    if parts and parts[-1] == "":
        parts.pop()
    return parts


@dataclass(frozen=True, slots=True)
class PathPattern:
    """A compiled path pattern; see the module docstring for the syntax."""

    source: str
    segments: tuple[str, ...]
    params: tuple[str, ...]
    tail: bool
    case_insensitive: bool = False

    @classmethod
    def parse(cls, source: object, case_insensitive: bool = False) -> PathPattern:
        """Compile ``source``; raises :class:`PatternError` with a reason."""
        if not isinstance(source, str) or not source:
            raise PatternError(
                "a path pattern must be a non-empty string like '/v1/users/{id}', got "
                + shown(source)
            )
        if source == "*":
            return cls(source, (), (), True, case_insensitive)
        if not source.startswith("/"):
            raise PatternError(f"path pattern {source!r} must start with '/' (or be '*')")
        if "?" in source or "#" in source:
            raise PatternError(
                f"path pattern {source!r} holds a query or fragment ('?', '#'): a route "
                "matches the path only (a query parameter can be a key: key = 'query:NAME')"
            )
        parts = source.split("/")[1:]
        if parts and parts[-1] == "":
            parts.pop()  # a trailing slash is not significant
        tail = bool(parts) and parts[-1] == "*"
        if tail:
            parts.pop()
        params: list[str] = []
        segments: list[str] = []
        for part in parts:
            if part == "":
                raise PatternError(f"path pattern {source!r} has an empty segment ('//')")
            if part == "*":
                segments.append(part)
                continue
            match = _PARAM_RE.fullmatch(part)
            if match:
                if match.group(1) in params:
                    raise PatternError(
                        f"path pattern {source!r} names parameter {match.group(1)!r} twice"
                    )
                params.append(match.group(1))
                segments.append(part)
                continue
            if "{" in part or "}" in part or "*" in part:
                raise PatternError(
                    f"path pattern {source!r}: segment {part!r} must be a literal, '*' or "
                    "'{name}' (wildcards inside a segment are not supported)"
                )
            segments.append(_literal(part, source, case_insensitive))
        return cls(source, tuple(segments), tuple(params), tail, case_insensitive)

    def match(self, path: str) -> dict[str, str] | None:
        """The captured parameters if the canonical ``path`` matches, else ``None``."""
        return self.match_segments(path_segments(path))

    def match_segments(self, parts: list[str]) -> dict[str, str] | None:
        """:meth:`match` on a path already split by :func:`path_segments`."""
        count = len(self.segments)
        if len(parts) < count or (not self.tail and len(parts) != count):
            return None
        captured: dict[str, str] = {}
        fold = self.case_insensitive
        for pattern, actual in zip(self.segments, parts, strict=False):
            if pattern == "*":
                continue
            if pattern[0] == "{":
                value = decode_segment(actual)
                captured[pattern[1:-1]] = value.lower() if fold else value
            elif pattern != (actual.lower() if fold else actual):
                return None
        return captured

    def covers(self, other: PathPattern) -> bool:
        """Whether every path ``other`` matches is also matched by this pattern."""
        mine, theirs = len(self.segments), len(other.segments)
        if self.tail:
            if theirs < mine:
                return False
        elif other.tail or theirs != mine:
            return False
        return all(
            self._segment_covers(a, b, other.case_insensitive)
            for a, b in zip(self.segments, other.segments, strict=False)
        )

    def _segment_covers(self, mine: str, theirs: str, theirs_folds: bool) -> bool:
        if mine == "*" or mine[0] == "{":
            return True
        if theirs == "*" or theirs[0] == "{":
            return False
        if self.case_insensitive:
            return mine == theirs.lower()
        # A case-insensitive literal also matches other spellings, which ours does not.
        return mine == theirs and (not theirs_folds or theirs.lower() == theirs.upper())


def _literal(part: str, source: str, case_insensitive: bool) -> str:
    """A literal pattern segment in canonical form (lower-cased for a case-insensitive route)."""
    try:
        # Under a first segment, so that '..' is a dot segment here and not a climb.
        under = canonical_path("/_/" + part)
    except PathError:
        under = ""
    if under and path_segments(under) != ["_", under[3:]]:
        raise PatternError(
            f"path pattern {source!r}: segment {part!r} is a dot segment ('.' or '..'): "
            "write the path as it resolves, without it"
        )
    try:
        canonical = canonical_path("/" + part)
    except PathError as exc:
        raise PatternError(f"path pattern {source!r}: segment {part!r}: {exc}") from exc
    literal = canonical[1:]
    return literal.lower() if case_insensitive else literal


def parse_host_pattern(source: object) -> str:
    """Validate and normalise a host pattern (lower case, no trailing dot; an
    internationalised name in the ASCII form clients send, ``xn--bcher-kva.example``)."""
    if not isinstance(source, str) or not source:
        raise PatternError("a host must be a non-empty string like 'api.example.com'")
    host = source.lower().rstrip(".")
    wildcard = host.startswith("*.")
    body = host[2:] if wildcard else host
    if not body.isascii():
        try:
            body = ascii_host(body)
        except UnicodeError:
            body = ""
        host = ("*." if wildcard else "") + body
    labels = body.split(".")
    if not body or not all(_HOST_LABEL_RE.fullmatch(label) for label in labels):
        hint = "; a port is not part of the match (any port matches)" if ":" in body else ""
        raise PatternError(
            f"host {source!r} must be a host name, optionally starting with '*.' "
            f"(no scheme, port or path){hint}"
        )
    return host


def host_matches(pattern: str, host: str) -> bool:
    """Whether the canonical ``host`` (its port ignored) matches a normalised host pattern."""
    name = host_name(host)
    if pattern.startswith("*."):
        return name.endswith(pattern[1:]) and len(name) > len(pattern) - 1
    return name == pattern


def host_covers(pattern: str | None, other: str | None) -> bool:
    """Whether host pattern ``pattern`` (None: any host) matches every host ``other`` does."""
    if pattern is None:
        return True
    if other is None:
        return False
    if not pattern.startswith("*."):
        return pattern == other
    suffix = pattern[1:]  # ".example.com"
    return other.endswith(suffix) and len(other) > len(suffix)
