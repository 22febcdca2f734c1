"""The Worker's ``fetch``: convert, hand to the gateway (built once per isolate), convert back."""

from __future__ import annotations

import json
import os
import random
import traceback
from typing import Any

from ..core.config import parse_config
from ..core.config.sources import CONFIG_VAR, ENV_VAR, select_config
from ..core.errors import ConfigError
from ..core.http import problems
from ..gateway import Gateway, Services, log_line, problem_response
from .bindings import (
    AnalyticsDataset,
    DurableObjectBreakers,
    DurableObjectControl,
    DurableObjectIdempotency,
    DurableObjectStore,
    FetchOrigin,
    KvStore,
    SystemClock,
    WaitUntil,
)
from .convert import to_js_response, to_request

STORE_BINDING = "RATE_LIMITER"
IDEMPOTENCY_BINDING = "IDEMPOTENCY"
BREAKERS_BINDING = "BREAKERS"
CONTROL_BINDING = "CONTROL"
ANALYTICS_BINDING = "ANALYTICS"
#: The admin API's bearer secret (`npx wrangler secret put EDGE_LIMITER_ADMIN_TOKEN`).
ADMIN_TOKEN_VAR = "EDGE_LIMITER_ADMIN_TOKEN"
CACHE_BINDING = "CACHE"

# Bindings and vars are fixed for the life of an isolate (a deploy starts new isolates),
# so the gateway (or why the config is invalid) is built on the first request and kept.
_gateway: Gateway | ConfigError | None = None


def _log(record: dict[str, Any]) -> None:
    print(log_line(record))


def _plain(value: Any) -> Any:
    """A JSON var as plain Python data, whatever wrapper the runtime handed us."""
    if isinstance(value, str):
        return json.loads(value)
    if hasattr(value, "to_py"):
        value = value.to_py()
    return json.loads(json.dumps(value))


def raw_config(env: Any) -> dict[str, Any]:
    """The raw config from the var or the bundled file; raises :class:`ConfigError`."""
    var = getattr(env, CONFIG_VAR, None)
    if var is not None:
        try:
            var = _plain(var)
        except (TypeError, ValueError) as exc:
            raise ConfigError([f"config: the {CONFIG_VAR} var is not valid JSON: {exc}"]) from exc
    try:
        import edge_limiter_config as bundled  # noqa: PLC0415
    except ImportError:
        document, source = None, ""
    else:
        document, source = bundled.document(), bundled.SOURCE
    env_name = getattr(env, ENV_VAR, None)
    return select_config(var, document, source, str(env_name) if env_name else None)


def _binding(env: Any, name: str) -> Any:
    """The runtime's own binding object. The SDK wraps each binding so that every call
    converts its arguments and result; the gateway passes only strings, numbers and
    buffers, which cross as they are, so it skips the wrapper (a measured ~0.1 ms per
    Durable Object call)."""
    binding = getattr(env, name, None)
    return getattr(binding, "_binding", binding)


def _verifier() -> Any:
    # Imported only where a config verifies tokens: it reaches for crypto.subtle.
    from .crypto import WebCryptoVerifier  # noqa: PLC0415

    return WebCryptoVerifier()


def _kv(env: Any, name: str) -> KvStore | None:
    """The KV namespace bound as ``name`` (None when the Worker has none)."""
    binding = _binding(env, name)
    return KvStore(binding) if binding is not None else None


def _text_var(env: Any, name: str) -> str | None:
    """The Worker's secret or text var ``name`` (None when unset or not text)."""
    value = getattr(env, name, None)
    return value if isinstance(value, str) and value else None


def build_gateway(env: Any) -> Gateway | ConfigError:
    """The gateway for this isolate's ``env``, or the config's problems."""
    try:
        config = parse_config(raw_config(env))
    except ConfigError as exc:
        return exc
    for warning in config.warnings:
        _log({"event": "config_warning", "warning": warning})
    kv = _binding(env, CACHE_BINDING)
    records = _binding(env, IDEMPOTENCY_BINDING)
    breakers = _binding(env, BREAKERS_BINDING)
    control = _binding(env, CONTROL_BINDING)
    analytics = _binding(env, ANALYTICS_BINDING)
    token = getattr(env, ADMIN_TOKEN_VAR, None)
    services = Services(
        store=DurableObjectStore(_binding(env, STORE_BINDING)),
        origin=FetchOrigin(),
        clock=SystemClock(),
        log=_log,
        cache=KvStore(kv) if kv is not None else None,
        idempotency=DurableObjectIdempotency(records) if records is not None else None,
        breakers=DurableObjectBreakers(breakers) if breakers is not None else None,
        control=DurableObjectControl(control) if control is not None else None,
        analytics=AnalyticsDataset(analytics) if analytics is not None else None,
        admin_token=str(token) if isinstance(token, str) and token else None,
        secret=lambda name: _text_var(env, name),
        verifier=_verifier() if config.auth else None,
        kv=lambda name: _kv(env, name),
    )
    try:
        return Gateway(config, services)
    except ConfigError as exc:
        return exc


def gateway_for(env: Any) -> Gateway | ConfigError:
    """This isolate's gateway, built on first use."""
    global _gateway  # noqa: PLW0603 - one gateway per isolate, on purpose
    if _gateway is None:
        # The runtime may start every isolate with the same seed; jitter must differ.
        random.seed(os.urandom(32))
        _gateway = build_gateway(env)
    return _gateway


async def handle_scheduled(env: Any) -> None:
    """The Worker's ``scheduled`` handler (Cron Triggers): probe the origins' health."""
    gateway = gateway_for(env)
    if isinstance(gateway, ConfigError):
        _log({"event": "config_error", "problems": gateway.problems})
        return
    await gateway.probe_health()


async def handle_fetch(request: Any, env: Any, ctx: Any = None) -> Any:
    """The Worker's ``fetch`` handler."""
    gateway = gateway_for(env)
    js_request = getattr(request, "js_object", request)
    if isinstance(gateway, ConfigError):
        _log({"event": "config_error", "problems": gateway.problems})
        return to_js_response(problem_response(problems.misconfigured(gateway.problems)))
    try:
        background = WaitUntil(ctx) if ctx is not None else None
        response = await gateway.handle(to_request(js_request), background)
        return to_js_response(response)
    except Exception as exc:  # a bug: answer with a problem and log the traceback
        reference = os.urandom(6).hex()
        _log(
            {
                "event": "internal_error",
                "reference": reference,
                "error": repr(exc),
                "traceback": traceback.format_exc(limit=20),
            }
        )
        failed = problem_response(problems.internal_error(reference))
        return to_js_response(
            gateway.with_cors(_origin_of(js_request), failed, _path_of(js_request))
        )


def _origin_of(js_request: Any) -> str | None:
    """The request's ``Origin`` field (None when absent or unreadable)."""
    try:
        origin = js_request.headers.get("origin")
    except Exception:  # a request too broken to read: no CORS fields
        return None
    return origin if isinstance(origin, str) else None


def _path_of(js_request: Any) -> str | None:
    """The request's path as the runtime received it (None when unreadable)."""
    try:
        url = str(js_request.url)
    except Exception:  # a request too broken to read
        return None
    rest = url.partition("://")[2]
    return "/" + rest.partition("/")[2].partition("?")[0]
