"""The gateway's configuration: frozen model objects and the strict parser that builds them.

See :mod:`.parse` for the accepted fields; every problem in a config is collected and
raised as ONE :class:`~edge_limiter.core.errors.ConfigError` naming route and field.
"""

from __future__ import annotations

from .model import Config, FailurePolicy, Forwarding, Match, Operations, RateLimitPolicy, Route
from .parse import parse_config

__all__ = [
    "Config",
    "FailurePolicy",
    "Forwarding",
    "Match",
    "Operations",
    "RateLimitPolicy",
    "Route",
    "parse_config",
]
