"""The identity stage: who a request is from, verified before any counter is touched.

On a route with ``auth``, the request's token is verified (:mod:`edge_limiter.core.identity.verify`:
found, bounded, read strictly, its signature checked through the ``SignatureVerifier``
port, its claims checked); on a route whose tier comes from ``kv:``, its API key's record
is looked up. The caller (its claims, its API key's owner, its tier and what the tier
gives on this route) goes on the exchange for the rate limit, which keys and limits by it.

A request with no valid token or key gets what the route says: ``reject`` answers ``401``
(``WWW-Authenticate: Bearer error="invalid_token"``) through the ``rejected`` handler the
pipeline gives this stage, which counts the rejection under the client's address by the
route's own limits first (a flood of bad tokens is itself limited); nothing is forwarded.
``anonymous`` lets it through under the anonymous tier, counted by its address.

Key sets (``jwks_url``) are fetched through the origin port, kept in the isolate and in KV
(:mod:`edge_limiter.core.identity.jwks` says for how long and when to fetch again: at most
once a minute per source for tokens naming a key the set lacks), and served stale while
the endpoint fails.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

from ..core.config import Config, Route
from ..core.errors import ConfigError
from ..core.http import problems
from ..core.http.messages import Headers, Response
from ..core.identity.apikeys import (
    FOUND_TTL_MS,
    ApiKeyRecord,
    Lookups,
    RecordError,
    api_key_digest,
    check_api_key,
    decode_record,
    missing_ttl,
)
from ..core.identity.jwks import RETRY_MS, KeySet, lifetime_ms
from ..core.identity.keys import Jwk, UnusableKeyError, parse_jwks, secret_key
from ..core.identity.settings import AuthSource, Tiers
from ..core.identity.tiers import Caller, tier_limits
from ..core.identity.tokens import TokenError
from ..core.identity.verify import (
    Identity,
    VerifiedTokens,
    check_signature,
    check_token_claims,
    find_token,
    read_token,
    token_digest,
)
from ..core.keys import aggregate_ip
from .exchange import Exchange, Handler, problem_response
from .ports import KeyValueStore, OriginError, OriginRequest, Services

#: How long a JWKS endpoint may take to answer.
JWKS_TIMEOUT_MS = 5_000
#: The largest key set read (a provider's is a few KB).
MAX_JWKS_BYTES = 64 * 1024
_KV_PREFIX = "jwks:"


@dataclass(frozen=True, slots=True)
class _Stored:
    """A key set as KV keeps it for every isolate."""

    body: bytes
    cache_control: str | None
    fetched_at: int


class Identities:
    """What this isolate knows of identities, shared by every route's stage: the tokens it
    verified, each source's keys, the API key records it looked up."""

    def __init__(self, config: Config, services: Services) -> None:
        self.config = config
        self.services = services
        self.verified = VerifiedTokens()
        ttl = config.tiers.api_key_ttl_ms if config.tiers is not None else FOUND_TTL_MS
        self.lookups = Lookups(found_ttl_ms=ttl, missing_ttl_ms=missing_ttl(ttl))
        self.key_sets: dict[str, KeySet] = {}
        self.failed_at: dict[str, int] = {}
        self.jwks_fetches = 0
        """Fetches of JWKS endpoints made by this isolate (for tests and the status)."""
        self.static: dict[str, tuple[Jwk, ...]] = {}
        missing: list[str] = []
        for name, source in config.auth.items():
            keys = list(source.keys)
            if source.secret is not None:
                text = services.secret(source.secret)
                try:
                    keys.append(secret_key(text or ""))
                except UnusableKeyError as exc:
                    why = "is not set" if not text else str(exc)
                    missing.append(f"auth {name!r}.secret: the Worker secret {source.secret} {why}")
            self.static[name] = tuple(keys)
        needs_verifier = any(
            source.jwks_url or source.keys or source.secret for source in config.auth.values()
        )
        if needs_verifier and services.verifier is None:
            missing.append("auth: no signature verifier (the platform's WebCrypto) is available")
        self.api_keys: KeyValueStore | None = None
        tiers = config.tiers
        if tiers is not None and tiers.by == "kv":
            self.api_keys = services.kv(tiers.source)
            if self.api_keys is None:
                missing.append(
                    f"config.tiers.by: the Worker has no KV binding {tiers.source!r} "
                    "(add it to wrangler.toml's kv_namespaces)"
                )
        if missing:
            raise ConfigError(missing)

    # --- tokens -----------------------------------------------------------------------------

    async def verify(self, exchange: Exchange, source: AuthSource) -> Identity:
        """The request's verified identity from ``source``; raises :class:`TokenError`."""
        text = find_token(exchange.request, source.token)
        if text is None:
            raise TokenError("missing", "the request carries no token")
        if len(text) > source.max_token_bytes:
            # Before it is hashed or decoded: a 10 MB token costs nothing more.
            raise TokenError("too_large", f"the token is longer than {source.max_token_bytes}")
        now = exchange.now_ms
        digest = token_digest(source.name, text)
        known = self.verified.get(digest, now)
        if known is not None:
            return known
        token = read_token(text, source)
        if token.alg == "HS256":
            # The source's one secret, whatever key name the issuer gave it.
            keys = tuple(
                replace(key, kid=token.kid) for key in self.static[source.name] if key.kty == "oct"
            )
        else:
            keys = await self._keys(source, token.kid, now, exchange)
        verifier = self.services.verifier
        assert verifier is not None  # checked when built
        await check_signature(token, keys, verifier)
        identity = check_token_claims(token, source, now)
        self.verified.put(digest, identity, now)
        return identity

    async def _keys(
        self, source: AuthSource, kid: str | None, now: int, exchange: Exchange
    ) -> tuple[Jwk, ...]:
        static = self.static[source.name]
        if source.jwks_url is None:
            return static
        state = self.key_sets.get(source.name, KeySet())
        usable = state.usable(now)
        unknown = kid is not None and all(key.kid != kid for key in (*static, *usable))
        if usable:
            if state.due(now, unknown_kid=unknown, refetch_ms=source.refetch_after_ms):
                state = await self._refresh(source, state, now, unknown, exchange)
        else:
            failed = self.failed_at.get(source.name)
            if failed is None or now - failed >= RETRY_MS:
                state = await self._refresh(source, state, now, unknown, exchange)
        return static + state.usable(now)

    async def _refresh(
        self, source: AuthSource, state: KeySet, now: int, unknown: bool, exchange: Exchange
    ) -> KeySet:
        """The source's set once fetched again (from KV when this isolate has none and KV's
        copy is fresh); on failure, the set it had (stale, within its bound)."""
        name = source.name
        self.key_sets[name] = state.asking(now)  # no other request here fetches meanwhile
        stored: _Stored | None = None
        if not state.keys:
            stored = await self._read_kv(source)
            if stored is not None:
                copy = _from_stored(stored)
                if (
                    copy is not None
                    and now < copy.fresh_until
                    and not (
                        unknown
                        and copy.due(now, unknown_kid=True, refetch_ms=source.refetch_after_ms)
                    )
                ):
                    self.key_sets[name] = copy
                    return copy
        fetched = await self._fetch(source)
        if fetched is None:
            self.failed_at[name] = now
            fallback = _from_stored(stored) if stored is not None else None
            if not state.keys and fallback is not None and fallback.usable(now):
                # The endpoint fails, but another isolate's copy is still within its bound.
                state = fallback
            self.key_sets[name] = state.asking(now)
            return self.key_sets[name]
        body, cache_control = fetched
        keys = _public_keys(body)
        if keys is None:
            self.failed_at[name] = now
            self.services.log({"event": "jwks_unusable", "source": name})
            return self.key_sets[name]
        fresh = state.asking(now).fetched(keys, cache_control, now)
        self.key_sets[name] = fresh
        self.failed_at.pop(name, None)
        exchange.background.defer(self._write_kv(source, _Stored(body, cache_control, now)))
        return fresh

    async def _fetch(self, source: AuthSource) -> tuple[bytes, str | None] | None:
        url = source.jwks_url
        assert url is not None
        self.jwks_fetches += 1
        request = OriginRequest(
            "GET", url, Headers([("accept", "application/json")]), None, JWKS_TIMEOUT_MS
        )
        try:
            response = await self.services.origin.send(request)
            body = await response.read_body_at_most(MAX_JWKS_BYTES)
        except (OriginError, OSError, ValueError) as exc:
            self.services.log(
                {"event": "jwks_failed", "source": source.name, "error": repr(exc)[:200]}
            )
            return None
        if response.status != 200 or body is None:
            self.services.log(
                {"event": "jwks_failed", "source": source.name, "status": response.status}
            )
            return None
        return body, response.headers.get("cache-control")

    def _kv_key(self, source: AuthSource) -> str:
        url = source.jwks_url or ""
        return _KV_PREFIX + hashlib.sha256(url.encode()).hexdigest()[:32]

    async def _read_kv(self, source: AuthSource) -> _Stored | None:
        kv = self.services.cache
        if kv is None:
            return None
        try:
            data = await kv.get(self._kv_key(source))
            if data is None:
                return None
            value = json.loads(data)
            return _Stored(
                value["body"].encode(), value.get("cache_control"), int(value["fetched_at"])
            )
        except Exception as exc:  # a KV failure or a foreign value: fetch instead
            self.services.log({"event": "jwks_kv_failed", "error": repr(exc)[:200]})
            return None

    async def _write_kv(self, source: AuthSource, stored: _Stored) -> None:
        kv = self.services.cache
        if kv is None:
            return
        lifetime = lifetime_ms(stored.cache_control)
        value = {
            "body": stored.body.decode("utf-8", "replace"),
            "cache_control": stored.cache_control,
            "fetched_at": stored.fetched_at,
        }
        try:
            await kv.put(
                self._kv_key(source),
                json.dumps(value).encode(),
                max(60, (lifetime + 86_400_000) // 1000),
            )
        except Exception as exc:
            self.services.log({"event": "jwks_kv_failed", "error": repr(exc)[:200]})

    # --- API keys ---------------------------------------------------------------------------

    async def api_key(self, exchange: Exchange, tiers: Tiers) -> tuple[str, ApiKeyRecord]:
        """``(caller, record)`` of the request's API key: the caller is the record's owner
        (else the key's hash); when KV cannot be read, the record of the default tier (the
        caller counted under its own key meanwhile). Raises :class:`TokenError`
        for no key, a malformed one, or one KV holds no record of."""
        text = find_token(exchange.request, tiers.api_key)
        if text is None:
            raise TokenError("missing", "the request carries no API key")
        digest = api_key_digest(check_api_key(text))
        now = exchange.now_ms
        known, record = self.lookups.get(digest, now)
        if not known:
            assert self.api_keys is not None
            try:
                data = await self.api_keys.get(digest)
            except Exception as exc:
                self.services.log({"event": "api_key_lookup_failed", "error": repr(exc)[:200]})
                # Not remembered: counted under its own key by the default tier meanwhile.
                return f"key:{digest[:32]}", ApiKeyRecord(tiers.default)
            record = None
            if data is not None:
                try:
                    record = decode_record(data)
                except RecordError as exc:
                    self.services.log({"event": "api_key_record_unreadable", "error": str(exc)})
            self.lookups.put(digest, record, now)
        if record is None:
            raise TokenError("unknown_key", "no record of this API key")
        return (f"owner:{record.owner}" if record.owner else f"key:{digest[:32]}"), record


def _from_stored(stored: _Stored) -> KeySet | None:
    keys = _public_keys(stored.body)
    if keys is None:
        return None
    return KeySet(asked_at=stored.fetched_at).fetched(keys, stored.cache_control, stored.fetched_at)


def _public_keys(body: bytes) -> tuple[Jwk, ...] | None:
    """The usable public keys of a key set (a secret one published is no secret: left out)."""
    try:
        keys, _skipped = parse_jwks(body)
    except UnusableKeyError:
        return None
    return tuple(key for key in keys if key.kty != "oct")


class Identify:
    """The stage: verifies the route's token (and looks up its API key), puts the caller
    on the exchange, or hands a request with no valid one to ``rejected``."""

    def __init__(self, route: Route, config: Config, identities: Identities, rejected: Handler):
        assert route.identity is not None
        self.route = route
        self.identity = route.identity
        self.source = config.auth.get(route.identity.auth or "")
        tiers = config.tiers if route.identity.tiers else None
        self.tiers = tiers
        self.by_key = tiers is not None and tiers.by == "kv"
        self.identities = identities
        self.rejected = rejected
        self.log = identities.services.log

    async def __call__(self, exchange: Exchange, call_next: Handler) -> Response:
        claims: Any = None
        caller, record = "", None
        failure: str | None = None
        try:
            if self.source is not None:
                claims = (await self.identities.verify(exchange, self.source)).claims
            if self.by_key and self.tiers is not None:
                caller, record = await self.identities.api_key(exchange, self.tiers)
        except TokenError as exc:
            failure = exc.code
        route = self.route
        if failure is not None:
            self.log({"event": "invalid_token", "route": route.name, "reason": failure})
            if self.identity.on_invalid == "reject":
                spec = route.limits.key
                address = aggregate_ip(
                    exchange.request.client.ip, spec.ipv4_prefix, spec.ipv6_prefix
                )
                exchange.key = f"invalid_token|ip={address}"
                exchange.caller = None
                return await self.rejected(exchange)
            tier = None
            if self.tiers is not None:
                tier = tier_limits(self.tiers, route.name, self.identity.group)
            exchange.caller = Caller(tier=tier, anonymous=True)
            return await call_next(exchange)
        tier = None
        if self.tiers is not None:
            tier = tier_limits(
                self.tiers, route.name, self.identity.group, claims=claims, record=record
            )
        exchange.caller = Caller(claims, caller, tier)
        return await call_next(exchange)


def refusal(route: Route, config: Config) -> Handler:
    """The end of the rejected chain: the 401 (after the rate limit counted it)."""
    identity = route.identity
    tiers = config.tiers
    by_key = identity is not None and identity.tiers and tiers is not None and tiers.by == "kv"
    what = "a valid token" if identity is not None and identity.auth else "a valid API key"
    if by_key and identity is not None and identity.auth:
        what = "a valid token and API key"
    answer = problems.invalid_token(route.name, what)

    async def refuse(exchange: Exchange) -> Response:
        return problem_response(answer)

    return refuse
