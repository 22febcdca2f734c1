"""The Worker adapter: platform request in, platform response out.

The only module of the package (with the Durable Object) that touches ``js`` and
``workers``. It turns the incoming request into a :class:`RequestView`, asks the
:class:`~edge_limiter.gateway.Gateway` for a verdict, and forwards or answers.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any
from urllib.parse import urlsplit

import js  # type: ignore[import-not-found]
from pyodide.ffi import to_js  # type: ignore[import-not-found]
from workers import Response  # type: ignore[import-not-found]

from .core.config import Config, parse_config
from .core.errors import ConfigError
from .core.request import RequestView
from .gateway import Gateway, StoreClient, Verdict, log_line

CONFIG_VAR = "EDGE_LIMITER"
STORE_BINDING = "RATE_LIMITER"
PROBLEM_JSON = "application/problem+json"

# Vars are fixed for the life of an isolate (a deploy starts new isolates), so the config
# is parsed on the first request and the result, or the error, is kept.
_config: Config | ConfigError | None = None
_seeded = False


class DurableObjectStore(StoreClient):
    """Calls ``RateLimiter.decide`` on the object named for (route, key): one RPC call."""

    def __init__(self, namespace: Any) -> None:
        self.namespace = namespace

    async def call(self, name: str, payload: str) -> str:
        stub = self.namespace.getByName(name)
        answer = await stub.decide(payload)
        return str(answer)


def _plain(value: Any) -> Any:
    """A JSON var as plain Python data, whatever wrapper the runtime handed us."""
    if isinstance(value, str):
        return json.loads(value)
    if hasattr(value, "to_py"):
        value = value.to_py()
    return json.loads(json.dumps(value))


def load_config(env: Any) -> Config | ConfigError:
    """The parsed config, or why it is invalid: parsed once per isolate."""
    global _config  # noqa: PLW0603 - one parsed config per isolate, on purpose
    if _config is None:
        _config = _parse_env_config(env)
    return _config


def _parse_env_config(env: Any) -> Config | ConfigError:
    raw = getattr(env, CONFIG_VAR, None)
    if raw is None:
        return ConfigError([f"config: the {CONFIG_VAR} var is not set (see wrangler.toml [vars])"])
    try:
        return parse_config(_plain(raw))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            return exc
        return ConfigError([f"config: the {CONFIG_VAR} var is not valid JSON: {exc}"])


def _text(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(int(value))
    return ""


def request_view(js_request: Any) -> RequestView:
    """The plain view of a platform request. Identity comes from ``CF-Connecting-IP`` only."""
    url = urlsplit(str(js_request.url))
    headers: dict[str, str] = {}
    for entry in js_request.headers.entries():
        headers[str(entry[0]).lower()] = str(entry[1])
    cf = getattr(js_request, "cf", None)
    country = continent = asn = ""
    if cf is not None and not isinstance(cf, bool):
        country = _text(getattr(cf, "country", None))
        continent = _text(getattr(cf, "continent", None))
        asn = _text(getattr(cf, "asn", None))
    return RequestView(
        method=str(js_request.method).upper(),
        path=url.path or "/",
        host=url.netloc,
        query=url.query,
        headers=headers,
        client_ip=headers.get("cf-connecting-ip", ""),
        country=country,
        continent=continent,
        asn=asn,
    )


def json_response(status: int, body: dict[str, Any], headers: list[tuple[str, str]]) -> Any:
    """A JSON problem response with extra headers."""
    all_headers = {"content-type": PROBLEM_JSON, "cache-control": "no-store"}
    for name, value in headers:
        all_headers[name] = value
    return Response(json.dumps(body), status=status, headers=all_headers)


async def forward(js_request: Any, origin: str, headers: list[tuple[str, str]]) -> Any:
    """Send the request to ``origin`` (same path and query) and add ``headers`` to the answer."""
    url = urlsplit(str(js_request.url))
    target = origin + (url.path or "/") + (f"?{url.query}" if url.query else "")
    upstream = js.Request.new(target, js_request)
    options = to_js({"redirect": "manual"}, dict_converter=js.Object.fromEntries)
    try:
        answer = await js.fetch(upstream, options)
    except Exception as exc:  # any network failure is a 502 for the client
        print(log_line({"event": "origin_error", "origin": origin, "error": str(exc)}))
        body = {
            "type": "about:blank",
            "title": "Bad Gateway",
            "status": 502,
            "detail": f"The origin could not be reached ({type(exc).__name__}).",
        }
        return json_response(502, body, headers)
    if not headers:
        return Response(answer)
    out = js.Response.new(answer.body, answer)
    for name, value in headers:
        out.headers.set(name, value)
    return Response(out)


async def handle_fetch(request: Any, env: Any) -> Any:
    """The Worker's ``fetch``: decide, then forward or answer."""
    global _seeded  # noqa: PLW0603
    if not _seeded:
        # The runtime may start every isolate with the same seed; jitter must differ.
        random.seed(os.urandom(32))
        _seeded = True
    js_request = getattr(request, "js_object", request)
    config = load_config(env)
    if isinstance(config, ConfigError):
        print(log_line({"event": "config_error", "problems": config.problems}))
        body = {
            "type": "about:blank",
            "title": "Gateway Misconfigured",
            "status": 503,
            "detail": "The edge-limiter config is invalid; nothing is forwarded until it is fixed.",
            "problems": config.problems,
        }
        return json_response(503, body, [])
    gateway = Gateway(config, DurableObjectStore(getattr(env, STORE_BINDING)))
    verdict: Verdict = await gateway.decide(request_view(js_request))
    if verdict.log is not None:
        print(log_line(verdict.log))
    if verdict.action == "respond":
        return json_response(verdict.status, verdict.body or {}, verdict.headers)
    assert verdict.origin is not None
    return await forward(js_request, verdict.origin, verdict.headers)
