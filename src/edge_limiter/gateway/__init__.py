"""The gateway's request path: a pipeline of stages over small platform interfaces."""

from __future__ import annotations

from .exchange import Exchange, Handler, Stage, log_line, problem_response
from .pipeline import Gateway
from .ports import (
    Background,
    ClientBodyError,
    Clock,
    Origin,
    OriginConnectError,
    OriginError,
    OriginRequest,
    OriginTimeoutError,
    OriginUnreachableError,
    RateLimitStore,
    Services,
)

__all__ = [
    "Background",
    "ClientBodyError",
    "Clock",
    "Exchange",
    "Gateway",
    "Handler",
    "Origin",
    "OriginConnectError",
    "OriginError",
    "OriginRequest",
    "OriginTimeoutError",
    "OriginUnreachableError",
    "RateLimitStore",
    "Services",
    "Stage",
    "log_line",
    "problem_response",
]
