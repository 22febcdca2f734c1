"""Who a request is from, for ``edge-limiter explain`` and ``simulate``: a token verified
offline, an API key with the record given on the command line.

The commands run no runtime, so there is no WebCrypto, no KV and no fetch:

- a token's signature is checked with ``cryptography`` (installed with the command by
  ``scripts/bootstrap``; HS256 needs only the standard library);
- a source's keys are its inline ``keys``; its ``secret = "$NAME"`` is read from the
  environment variable ``NAME``; the keys of a ``jwks_url`` come from ``--jwks FILE``
  (the key set saved, e.g. with ``curl -o jwks.json URL``). A token that needs what was
  not given cannot be verified offline, and the command says so rather than show a 401
  the Worker would not give;
- an API key's record is ``--api-key-record JSON``, what the namespace holds under the
  key's SHA-256 (``npx wrangler kv key get --binding API_KEYS --remote SHA256`` prints
  it). Without one, the key is unknown, as a key with no record is to the Worker.

Then the Worker's own identity stage (:class:`~edge_limiter.gateway.identity.Identify`)
decides, over these stand-ins, so what is shown is what the gateway would do.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_limiter.core.config import Config, Route
from edge_limiter.core.errors import ExplainError
from edge_limiter.core.explain import ExplainedCaller, Identify
from edge_limiter.core.http.messages import Headers, Request, Response
from edge_limiter.core.identity.apikeys import (
    ApiKeyRecord,
    RecordError,
    api_key_digest,
    encode_record,
    record_of,
)
from edge_limiter.core.identity.keys import UnusableKeyError, parse_jwks
from edge_limiter.core.identity.settings import AuthSource, TokenPlace
from edge_limiter.core.identity.tiers import Caller
from edge_limiter.core.identity.tokens import TokenError, parse_token
from edge_limiter.gateway import OriginRequest, Services
from edge_limiter.gateway.exchange import Exchange
from edge_limiter.gateway.identity import Identify as IdentifyStage
from edge_limiter.gateway.identity import Identities
from edge_limiter.testing import ManualClock, MemoryKV, MemoryStore, Reply
from edge_limiter.testing.signatures import LocalVerifier, can_verify

#: How long a key set from ``--jwks`` is fresh for (a run never outlives it).
JWKS_CACHE_CONTROL = "max-age=86400"
#: How long a record from ``--api-key-record`` is kept in the simulated namespace.
RECORD_TTL_S = 10 * 365 * 86_400


class OfflineError(ExplainError):
    """What was given cannot be verified offline (or makes no sense together), and why."""


@dataclass
class Credentials:
    """What the command was given to identify the request with."""

    token: str | None = None
    api_key: str | None = None
    record: ApiKeyRecord | None = None
    jwks: bytes | None = None
    """The ``--jwks`` file's bytes."""
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    @property
    def given(self) -> bool:
        return self.token is not None or self.api_key is not None


def read_record(text: str) -> ApiKeyRecord:
    """``--api-key-record``'s JSON as a record, read by the Worker's own codec."""
    try:
        value = json.loads(text)
    except ValueError:
        raise OfflineError(
            f'--api-key-record: not JSON ({text[:60]!r}); write it as {{"tier": "pro"}}'
        ) from None
    try:
        return record_of(value)
    except RecordError as exc:
        raise OfflineError(f"--api-key-record: {exc}") from None


def read_jwks(path: Path) -> bytes:
    """``--jwks``'s key set, checked as the Worker reads one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise OfflineError(f"--jwks {path}: {exc.strerror or exc}") from None
    try:
        keys, skipped = parse_jwks(data)
    except UnusableKeyError as exc:
        raise OfflineError(f"--jwks {path}: {exc}") from None
    if not keys:
        raise OfflineError(f"--jwks {path}: no usable key ({'; '.join(skipped) or 'empty'})")
    return data


def secret_names(config: Config) -> frozenset[str]:
    """The Worker secrets the config's token sources verify HS256 tokens with."""
    return frozenset(s.secret for s in config.auth.values() if s.secret is not None)


def worker_secrets(config: Config, environ: Mapping[str, str]) -> Callable[[str], str | None]:
    """The Worker's secrets for a run: a token source's from the environment (unset: a
    random one, which no token verifies with), any other's name shown, never a value."""
    names = secret_names(config)
    unset = {name: secrets.token_hex(32) for name in names if not environ.get(name)}

    def secret(name: str) -> str | None:
        if name in names:
            return environ.get(name) or unset[name]
        return f"<secret {name}>"

    return secret


def _placed(place: TokenPlace, value: str) -> tuple[str, str]:
    """A credential as a request carries it at ``place``."""
    if place.kind == "cookie":
        return "Cookie", f"{place.name}={value}"
    if place.kind == "header":
        return place.name, value
    return "Authorization", f"Bearer {value}"


def credential_fields(
    config: Config, route: Route | None, given: Credentials, headers: list[tuple[str, str]]
) -> tuple[list[tuple[str, str]], list[str]]:
    """The fields that carry ``given``'s token and API key where ``route`` reads them,
    and notes on what it does not read. Raises :class:`OfflineError` for a field
    ``--header`` also sets (the request would carry it twice) or a record with no key."""
    if given.record is not None and given.api_key is None:
        raise OfflineError("--api-key-record is the record of --api-key KEY: give the key too")
    identity = route.identity if route is not None else None
    if identity is None:
        if given.given or given.jwks is not None:
            where = f"route {route.name!r}" if route is not None else "no route"
            return [], [f"{where} checks no identity: --token and --api-key are not read"]
        return [], []
    assert route is not None
    fields: list[tuple[str, str]] = []
    notes: list[str] = []
    source = config.auth.get(identity.auth or "")
    tiers = config.tiers if identity.tiers else None
    if given.token is not None:
        if source is None:
            notes.append(f"route {route.name!r} verifies no token (no auth): --token is not read")
        else:
            fields.append(_placed(source.token, given.token))
    if given.api_key is not None:
        if tiers is None or tiers.by != "kv":
            notes.append(f"route {route.name!r} looks up no API key: --api-key is not read")
        else:
            fields.append(_placed(tiers.api_key, given.api_key))
    written = {name.lower() for name, _ in headers}
    for name, _ in fields:
        if name.lower() in written:
            raise OfflineError(
                f"--header {name} and --token/--api-key both set {name}: give one of them"
            )
    return fields, notes


def check_offline(config: Config, route: Route, given: Credentials) -> None:
    """Raise :class:`OfflineError` when ``given``'s token cannot be verified here: its
    keys come from a ``jwks_url`` and no ``--jwks`` was given, its HS256 secret is not in
    the environment, or checking its algorithm needs ``cryptography``."""
    identity = route.identity
    source = config.auth.get(identity.auth or "") if identity is not None else None
    if given.jwks is not None and (source is None or source.jwks_url is None):
        what = f"auth {source.name!r} has no jwks_url" if source else "the route verifies no token"
        raise OfflineError(f"--jwks: {what}; its keys are in the config")
    if source is None or given.token is None:
        return
    try:
        token = parse_token(given.token)
    except TokenError:
        return  # refused by the stage as the Worker refuses it
    alg = token.alg
    if alg not in source.algorithms:
        return
    if alg == "HS256":
        if source.secret is not None and not given.environ.get(source.secret):
            raise OfflineError(
                f"auth {source.name!r} verifies HS256 tokens with the Worker secret "
                f"{source.secret}: set the environment variable {source.secret} to its value "
                "to verify this token offline"
            )
        return
    if not can_verify(alg):
        raise OfflineError(
            f"checking an {alg} signature offline needs the cryptography package "
            "(scripts/bootstrap installs it; or pip install cryptography)"
        )
    if source.jwks_url is not None and given.jwks is None and not _inline_fits(source, token):
        raise OfflineError(
            f"auth {source.name!r} takes its keys from {source.jwks_url}: this token cannot "
            f"be verified offline without them. Save the key set (curl -o jwks.json "
            f"{source.jwks_url}) and give --jwks jwks.json"
        )


def _inline_fits(source: AuthSource, token: Any) -> bool:
    """Whether one of the source's inline keys is the one the token needs."""
    return any(
        key.verifies(token.alg) and (token.kid is None or key.kid == token.kid)
        for key in source.keys
    )


def jwks_reply(config: Config, given: Credentials) -> Callable[[str], Reply | None]:
    """What a ``jwks_url`` answers in a run: ``--jwks``'s set (None for any other URL)."""
    urls = {s.jwks_url for s in config.auth.values() if s.jwks_url is not None}

    def reply(url: str) -> Reply | None:
        if url not in urls:
            return None
        if given.jwks is None:
            return Reply(503, body="no key set given (--jwks)")
        return Reply(200, [("cache-control", JWKS_CACHE_CONTROL)], given.jwks)

    return reply


def shown_identity(route: Route, config: Config, given: Credentials, caller: Caller | None) -> Any:
    """What the stage found, for the reader: the verified token's claims, the API key's
    hash and record."""
    shown: dict[str, Any] = {}
    identity = route.identity
    if identity is not None and identity.auth:
        shown["auth"] = identity.auth
        if caller is not None and caller.claims is not None:
            shown["token"] = "verified"
            shown["claims"] = dict(caller.claims)
        else:
            shown["token"] = "none" if given.token is None else "not valid"
    if config.tiers is not None and config.tiers.by == "kv" and identity and identity.tiers:
        if given.api_key is None:
            shown["api_key"] = "none"
        else:
            shown["api_key_sha256"] = api_key_digest(given.api_key)
            record = given.record
            shown["record"] = (
                "none given (--api-key-record): unknown, as a key KV holds no record of"
                if record is None
                else json.loads(encode_record(record))
            )
    return shown


class _KeySets:
    """The origin port of an explanation: only a ``jwks_url`` is ever fetched."""

    def __init__(self, reply: Callable[[str], Reply | None]) -> None:
        self.reply = reply

    async def send(self, request: OriginRequest) -> Response:
        answer = self.reply(request.url) or Reply(502)
        body = answer.body.encode() if isinstance(answer.body, str) else bytes(answer.body)
        fields = answer.headers
        pairs = list(fields.items()) if isinstance(fields, Mapping) else list(fields)
        return Response(int(answer.status), Headers(pairs), body)


def identifier(config: Config, given: Credentials, now_ms: int) -> Identify:
    """Who a request is from, as the Worker's identity stage decides it over the offline
    stand-ins (for :func:`~edge_limiter.core.explain.explain`)."""
    clock = ManualClock(now_ms)
    logs: list[dict[str, Any]] = []
    namespace = MemoryKV(clock)
    tiers = config.tiers
    if given.record is not None and given.api_key is not None:
        value = encode_record(given.record)
        asyncio.run(namespace.put(api_key_digest(given.api_key), value, RECORD_TTL_S))
    services = Services(
        store=MemoryStore(clock),
        origin=_KeySets(jwks_reply(config, given)),
        clock=clock,
        log=logs.append,
        secret=worker_secrets(config, given.environ),
        verifier=LocalVerifier(),
        kv=lambda name: namespace if tiers is not None and name == tiers.source else None,
    )
    identities = Identities(config, services)

    def identify(route: Route, request: Request, params: dict[str, str]) -> ExplainedCaller:
        seen: dict[str, Any] = {}

        async def rejected(exchange: Exchange) -> Response:
            seen["key"] = exchange.key
            return Response(401)

        async def through(exchange: Exchange) -> Response:
            seen["caller"] = exchange.caller
            return Response(200)

        stage = IdentifyStage(route, config, identities, rejected)
        exchange = Exchange(
            request, request.path, request.host, now_ms, route.forward, route=route, params=params
        )
        del logs[:]
        asyncio.run(stage(exchange, through))
        reasons = [line.get("reason") for line in logs if line.get("event") == "invalid_token"]
        caller = seen.get("caller")
        return ExplainedCaller(
            caller,
            reason=str(reasons[-1]) if reasons else None,
            key=seen.get("key"),
            shown=shown_identity(route, config, given, caller),
        )

    return identify
