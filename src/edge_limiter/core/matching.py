"""Route match patterns: methods, an optional host, and a path with ``*`` and ``{param}``.

Path patterns are matched segment by segment:

- a literal segment matches itself exactly (case-sensitive, as URLs are);
- ``{name}`` matches exactly one non-empty segment and captures it as a path parameter;
- ``*`` matches exactly one non-empty segment, except as the LAST segment, where it matches
  everything that follows (zero or more segments): ``/api/*`` matches ``/api``, ``/api/``
  and ``/api/v1/users``;
- the pattern ``*`` alone matches every path.

Hosts match exactly (case-insensitive) or by a leading wildcard: ``*.example.com``
matches ``a.example.com`` and ``a.b.example.com`` but not ``example.com``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import PatternError

_PARAM_RE = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")


@dataclass(frozen=True, slots=True)
class PathPattern:
    """A compiled path pattern; see the module docstring for the syntax."""

    source: str
    segments: tuple[str, ...]
    params: tuple[str, ...]
    tail: bool

    @classmethod
    def parse(cls, source: str) -> PathPattern:
        """Compile ``source``; raises :class:`PatternError` with a reason."""
        if not isinstance(source, str) or not source:
            raise PatternError("a path pattern must be a non-empty string like '/v1/users/{id}'")
        if source == "*":
            return cls(source, (), (), True)
        if not source.startswith("/"):
            raise PatternError(f"path pattern {source!r} must start with '/' (or be '*')")
        parts = list(source.split("/")[1:])
        if parts and parts[-1] == "":
            parts = parts[:-1]  # a trailing slash is not significant
        tail = bool(parts) and parts[-1] == "*"
        if tail:
            parts = parts[:-1]
        params: list[str] = []
        for part in parts:
            if part == "":
                raise PatternError(f"path pattern {source!r} has an empty segment ('//')")
            if part == "*":
                continue
            match = _PARAM_RE.match(part)
            if match:
                if match.group(1) in params:
                    raise PatternError(
                        f"path pattern {source!r} names parameter {match.group(1)!r} twice"
                    )
                params.append(match.group(1))
            elif "{" in part or "}" in part or "*" in part:
                raise PatternError(
                    f"path pattern {source!r}: segment {part!r} must be a literal, '*' or "
                    "'{name}' (wildcards inside a segment are not supported)"
                )
        return cls(source, tuple(parts), tuple(params), tail)

    def match(self, path: str) -> dict[str, str] | None:
        """The captured parameters if ``path`` matches, else ``None``."""
        parts = path.split("/")[1:] if path.startswith("/") else path.split("/")
        if parts and parts[-1] == "":
            parts = parts[:-1]
        if len(parts) < len(self.segments) or (not self.tail and len(parts) != len(self.segments)):
            return None
        captured: dict[str, str] = {}
        for pattern, actual in zip(self.segments, parts, strict=False):
            if pattern == "*":
                if not actual:
                    return None
            elif pattern.startswith("{"):
                if not actual:
                    return None
                captured[pattern[1:-1]] = actual
            elif pattern != actual:
                return None
        return captured


def parse_host_pattern(source: str) -> str:
    """Validate and normalise a host pattern (lower case)."""
    if not isinstance(source, str) or not source:
        raise PatternError("a host must be a non-empty string like 'api.example.com'")
    host = source.lower()
    body = host[2:] if host.startswith("*.") else host
    if not body or "*" in body or "/" in body or ":" in body:
        raise PatternError(
            f"host {source!r} must be a host name, optionally starting with '*.' "
            "(no scheme, port or path)"
        )
    return host


def host_matches(pattern: str, host: str) -> bool:
    """Whether ``host`` (port ignored) matches a normalised host pattern."""
    name = host.lower().rsplit(":", 1)[0] if host.count(":") == 1 else host.lower()
    if pattern.startswith("*."):
        return name.endswith(pattern[1:]) and len(name) > len(pattern) - 1
    return name == pattern
