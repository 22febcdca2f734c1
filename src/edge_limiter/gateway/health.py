"""Active health checks: probe every origin that has a ``health`` table, feed its breaker.

Run at every Cron Trigger (``[triggers] crons`` in wrangler.toml). Each probe is a ``GET``
of the origin's health path with its own timeout; its result goes to the origin's shared
breaker (:func:`~edge_limiter.core.resilience.shared.apply_health`), so an origin failing
its probes is opened before users hit it, and one that passes again is tried again at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..core.config import Config
from ..core.http.messages import Headers
from ..core.resilience.breaker import BreakerState
from ..core.resilience.shared import HealthReport, SyncCall
from ..core.routing.origins import Origin, Pool
from .ports import OriginError, OriginRequest, Services

PROBE_HEADER = "X-EdgeLimiter-Health-Check"


def pools_of(config: Config) -> list[Pool]:
    """Every distinct pool the config forwards to."""
    return config.pools()


async def probe(
    origin: Origin,
    pool: Pool,
    services: Services,
    origin_headers: tuple[tuple[str, str], ...] = (),
    adopt: Callable[[str, BreakerState, int], None] | None = None,
) -> dict[str, Any]:
    """Probe one origin and report to its breaker; what happened, for the log. ``adopt``
    takes the shared breaker's answer (origin, state, time) into this isolate's copy.

    The probe carries ``origin_headers`` like every request to an origin (an origin that
    answers only the gateway must answer its probes too)."""
    health = origin.health
    assert health is not None
    started = services.clock.now_ms()
    request = OriginRequest(
        "GET",
        origin.url + health.path,
        Headers([(PROBE_HEADER, "1"), *origin_headers]),
        None,
        health.timeout_ms,
    )
    status: int | None = None
    error = ""
    try:
        response = await asyncio.wait_for(
            services.origin.send(request), timeout=health.timeout_ms / 1000 + 0.25
        )
        status = response.status
    except (OriginError, TimeoutError) as exc:
        error = type(exc).__name__
    healthy = status is not None and health.healthy(status)
    ended = services.clock.now_ms()
    result: dict[str, Any] = {
        "event": "health_probe",
        "origin": origin.name,
        "healthy": healthy,
        "status": status,
        "latency_ms": ended - started,
    }
    if error:
        result["error"] = error
    if services.breakers is not None:
        call = SyncCall(pool.breaker, health=HealthReport(ended, healthy, health.unhealthy_after))
        try:
            answer = await services.breakers.sync(origin.name, call)
            if adopt is not None:
                adopt(origin.name, answer, ended)
        except Exception as exc:
            result["report_error"] = repr(exc)[:200]
    return result


async def probe_all(
    config: Config,
    services: Services,
    origin_fields: dict[str, tuple[tuple[str, str], ...]] | None = None,
    adopt: Callable[[str, BreakerState, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Probe every origin with a health check, all at once; one log record each. Probes
    carry the fields requests to that origin carry (``origin_fields`` by pool name)."""
    by_pool = origin_fields or {}
    probes = [
        probe(origin, pool, services, by_pool.get(pool.name, ()), adopt)
        for pool in pools_of(config)
        for origin in pool.origins
        if origin.health is not None
    ]
    results = list(await asyncio.gather(*probes))
    for result in results:
        services.log(result)
    return results
