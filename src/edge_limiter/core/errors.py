"""The error classes of the core."""

from __future__ import annotations


class EdgeLimiterError(Exception):
    """Base class of every error edge-limiter raises on purpose."""


class RateParseError(EdgeLimiterError, ValueError):
    """A rate string such as ``"10/second; 1000/hour"`` could not be parsed."""


class ConfigError(EdgeLimiterError, ValueError):
    """The route configuration is invalid.

    ``problems`` lists every problem found, each already naming its route and field, so a
    user fixes the whole config in one pass instead of one error per deploy.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        header = f"invalid edge-limiter config ({count} problem{'s' if count != 1 else ''}):"
        super().__init__("\n".join([header, *(f"  - {p}" for p in self.problems)]))


class DurationError(EdgeLimiterError, ValueError):
    """A duration such as ``"30s"`` or ``"5m"`` could not be parsed or is out of range."""


class PathError(EdgeLimiterError, ValueError):
    """A request path has no canonical form (the gateway answers 400 and never forwards it).

    ``path`` is the path the message quotes (the client is shown it; a log must not be: a
    path segment may be a route's key).
    """

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path

    def without_path(self) -> str:
        """The message with the quoted path left out, for a log line."""
        text = str(self)
        return text.replace(repr(self.path), "<path>") if self.path else text

    def for_client(self, longest: int = 200) -> str:
        """The message for the client, a quoted path longer than ``longest`` cut short
        (the answer to a long path is not to be many times its size)."""
        text = str(self)
        if len(self.path) <= longest:
            return text
        return text.replace(repr(self.path), repr(self.path[:longest]) + " (cut short)")


class AmbiguousRequestError(EdgeLimiterError, ValueError):
    """A value that decides identity is sent several times with different values (400)."""


class StateError(EdgeLimiterError, ValueError):
    """Stored limiter state could not be decoded (e.g. written by an incompatible version)."""


class PatternError(EdgeLimiterError, ValueError):
    """A route's path or host pattern is malformed."""


class KeySpecError(EdgeLimiterError, ValueError):
    """A rate-limit key part such as ``"header:x-api-key"`` is malformed."""


class ProtocolError(EdgeLimiterError, ValueError):
    """A request to, or an answer from, the Durable Object is malformed."""


class BulkheadError(EdgeLimiterError, RuntimeError):
    """A bulkhead slot was released that was never acquired (a bug in the caller)."""


class BodyReadError(EdgeLimiterError, OSError):
    """A message body could not be read to its end (cut off, reset, or a broken stream)."""


class ExplainError(EdgeLimiterError, ValueError):
    """What was asked to be explained is not a request: a URL that is not absolute http(s)."""


class CacheEntryError(EdgeLimiterError, ValueError):
    """A cached entry could not be encoded or decoded; the caller treats it as a miss."""


class IdempotencyKeyError(EdgeLimiterError, ValueError):
    """A request's ``Idempotency-Key`` header is missing or unusable.

    ``code`` says which (``"missing"``, ``"empty"``, ``"too_long"``, ``"not_printable"``,
    ``"malformed"``) so the gateway can answer a 400 whose detail is the message.
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


class IdempotencyRecordError(EdgeLimiterError, ValueError):
    """A stored idempotency record could not be decoded (or encoded)."""
