"""The gateway: owns a request from arrival to response, as a pipeline of named stages.

Built once per isolate from the parsed config and the platform's services::

    canonical form -> admin -> method override -> bodiless body -> route
        route: idempotency -> cache -> rate limit -> upstream

The stages before the route are :class:`~edge_limiter.gateway.exchange.Before` steps
(:mod:`.front`, :mod:`.admin`); the route stage and each route's own chain are the route
table's (:mod:`.routes`). A stage reads what earlier ones put on the exchange and never
calls another. Nothing here touches the platform: ``edge_limiter.platform`` converts the
runtime's request into a :class:`Request` and the :class:`Response` back.
"""

from __future__ import annotations

from typing import Any

from ..core.canonical import canonical_path
from ..core.config import Config
from ..core.errors import ConfigError, PathError
from ..core.http.cors import CorsSettings, exposed, with_vary_origin
from ..core.http.messages import Request, Response
from ..core.http.origin_headers import merged, resolve_origin_headers
from .admin import Admin
from .exchange import UNROUTED, Before, Exchange
from .front import CanonicalForm, MethodOverride, bodiless_body
from .health import pools_of, probe_all
from .operations import Operating
from .ports import Background, Services
from .routes import RouteTable
from .upstream import Upstream


class Gateway:
    """Handles requests against one parsed :class:`Config`."""

    def __init__(self, config: Config, services: Services) -> None:
        self.config = config
        self.services = services
        self.operating = Operating(config, services)
        # A secret the config names but the Worker lacks is a config problem (503 saying so).
        self.origin_fields = _origin_fields(config, services)
        """The fields every request to a pool's origins carries, by pool name."""
        self.upstream = Upstream(
            services,
            config.client_ip_header,
            self.origin_fields,
            forwarded_host=config.forwarded_host,
            drop_overrides=config.method_override != "pass",
        )
        self.table = RouteTable(config, services, self.operating, self.upstream)
        self.caches = self.table.caches
        self.limiters = self.table.limiters
        self.admin = Admin(config, services, self.operating, self.table)
        front: list[Before | None] = [
            CanonicalForm(config, services),
            self.admin,
            MethodOverride(config, services) if config.method_override != "pass" else None,
            bodiless_body,
        ]
        self.front: tuple[Before, ...] = tuple(stage for stage in front if stage is not None)
        """The stages before the route, in order."""

    async def probe_health(self) -> list[dict[str, Any]]:
        """The Cron Trigger's work: probe every origin with a health check, report to its
        shared breaker, and take the verdict into this isolate's own copy at once."""
        return await probe_all(
            self.config, self.services, self.origin_fields, adopt=self.upstream.breakers.take
        )

    async def handle(self, request: Request, background: Background | None = None) -> Response:
        """The response to ``request``; never raises for a bad request or a failing origin."""
        # Canonical path and host, time and destination are filled in by the stages.
        exchange = Exchange(request, request.path, request.host, 0, UNROUTED)
        if background is not None:
            exchange.background = background
        for stage in self.front:
            answer = stage(exchange)
            if answer is not None and not isinstance(answer, Response):
                answer = await answer
            if answer is not None:
                break
        else:
            answer = await self.table(exchange)
        if exchange.private:
            return answer  # never for other origins' pages: no CORS fields
        return self.with_cors(request.headers.get("origin"), answer)

    def with_cors(
        self, origin: str | None, response: Response, path: str | None = None
    ) -> Response:
        """``response`` with the CORS fields for a page at ``origin`` (none asked: as it
        is). The platform adapter gives its own answer to a failure (an internal error)
        through here too, so a page can read it, with the request's ``path`` as received:
        an answer for the admin API never gets them, whatever it is."""
        cors = self.config.cors
        if cors is None or origin is None:
            return response
        if path is not None:
            try:
                admin = self.admin.admin_path(canonical_path(path, self.config.matrix_params))
            except PathError:
                admin = None  # no path of the admin API's: the gateway answers it as bad
            if admin is not None:
                return response
        _allow(cors, origin, response)
        return response


def _origin_fields(config: Config, services: Services) -> dict[str, tuple[tuple[str, str], ...]]:
    """For every pool the config forwards to, the fields its origins get: ``origin_headers``
    with the pool's own ``headers`` over them, secrets resolved. Raises
    :class:`ConfigError` naming every secret the Worker lacks."""
    problems: list[str] = []
    fields: dict[str, tuple[tuple[str, str], ...]] = {}
    for pool in pools_of(config):
        try:
            fields[pool.name] = resolve_origin_headers(
                merged(config.origin_headers, pool.headers), services.secret
            )
        except ConfigError as exc:
            problems.extend(p for p in exc.problems if p not in problems)
    if problems:
        raise ConfigError(problems)
    return fields


def _allow(cors: CorsSettings, origin: str, response: Response) -> None:
    """The CORS fields for a page at ``origin`` (see :mod:`edge_limiter.core.http.cors`)."""
    headers = response.headers
    allowed = headers.get("access-control-allow-origin")
    if allowed is None:
        if response.native is not None:
            return  # the origin's own answer: its CORS decision stands
        allowed = cors.allowed(origin)
        if allowed is None:
            # Not this page; a listed one is told otherwise: the answer varies by Origin.
            vary = with_vary_origin(headers.get("vary"))
            if vary is not None:
                headers.set("Vary", vary)
            return
        headers.set("Access-Control-Allow-Origin", allowed)
        if cors.allow_credentials:
            headers.set("Access-Control-Allow-Credentials", "true")
        if allowed != "*":
            vary = with_vary_origin(headers.get("vary"))
            if vary is not None:
                headers.set("Vary", vary)
    elif allowed.strip() not in ("*", origin):
        return  # the origin's answer allows another page: nothing to expose to this one
    credentials = headers.get("access-control-allow-credentials") == "true"
    fields = exposed(headers.get("access-control-expose-headers"), credentials)
    if fields is not None:
        headers.set("Access-Control-Expose-Headers", fields)
