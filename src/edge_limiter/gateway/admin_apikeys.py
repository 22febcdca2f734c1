"""The admin API's API-key records: read, set and delete the record of an API key in the
KV namespace ``[tiers] by = "kv:BINDING"`` names (stored under the key's SHA-256; the key
itself is never stored)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.config import Config
from ..core.http.messages import Response
from ..core.identity.apikeys import (
    RecordError,
    api_key_digest,
    check_api_key,
    decode_record,
    encode_record,
    record_of,
    record_plain,
)
from ..core.identity.settings import Tiers
from ..core.identity.tokens import TokenError
from .admin_calls import AdminError, example, json_answer, shown
from .ports import KeyValueStore, Services

#: How long an API key record is kept in KV (KV needs an expiry): ten years.
API_KEY_TTL_S = 10 * 365 * 86_400


def _digest(text: str) -> str:
    """An API key's SHA-256 as 64 lower-case hex digits, or a 400."""
    folded = text.strip().lower()
    if len(folded) != 64 or any(c not in "0123456789abcdef" for c in folded):
        raise AdminError(400, f"sha256 must be 64 hex digits, got {shown(text)}")
    return folded


class ApiKeys:
    """The ``/api/api-keys`` endpoints; ``forget`` drops this isolate's memory of a lookup."""

    def __init__(self, config: Config, services: Services, forget: Callable[[str], None]) -> None:
        self.config = config
        self.services = services
        self.forget = forget

    def _store(self) -> tuple[KeyValueStore, Tiers]:
        tiers = self.config.tiers
        store = self.services.kv(tiers.source) if tiers is not None and tiers.by == "kv" else None
        if store is None or tiers is None:
            raise AdminError(404, 'no API keys here: the config has no [tiers] by = "kv:..."')
        return store, tiers

    async def read(self, digest: str) -> Response:
        store, _ = self._store()
        digest = _digest(digest)
        try:
            data = await store.get(digest)
        except Exception as exc:
            raise AdminError(503, f"the API keys' KV failed: {exc!r}"[:300]) from exc
        if data is None:
            raise AdminError(404, f"no API key record under {digest}")
        try:
            record = decode_record(data)
        except RecordError as exc:
            raise AdminError(409, f"the record under {digest} is unreadable: {exc}") from exc
        return json_answer(200, {"sha256": digest, **record_plain(record)})

    async def set(self, data: Any) -> Response:
        store, tiers = self._store()
        if not isinstance(data, dict):
            raise AdminError(400, f"the body must be a JSON object ({example('/api/api-keys')})")
        fields = dict(data)
        key, digest = fields.pop("key", None), fields.pop("sha256", None)
        if (key is None) == (digest is None):
            raise AdminError(400, "give the API key as key, or its SHA-256 hex as sha256 (one)")
        if key is not None:
            if not isinstance(key, str):
                raise AdminError(400, f"key must be a JSON string, got {shown(key)}")
            try:
                digest = api_key_digest(check_api_key(key))
            except TokenError as exc:
                raise AdminError(400, f"key: {exc}") from exc
        digest = _digest(str(digest))
        try:
            record = record_of(fields)
        except RecordError as exc:
            raise AdminError(400, str(exc)) from exc
        if record.tier not in tiers.plans:
            known = ", ".join(tiers.plans)
            raise AdminError(400, f"tier {record.tier!r} is no tier of [tiers.plans] ({known})")
        try:
            await store.put(digest, encode_record(record), API_KEY_TTL_S)
        except Exception as exc:
            raise AdminError(503, f"the API keys' KV failed: {exc!r}"[:300]) from exc
        self.forget(digest)
        self.services.log({"event": "admin_api_key_set", "sha256": digest, "tier": record.tier})
        return json_answer(200, {"sha256": digest, **record_plain(record)})

    async def delete(self, digest: str) -> Response:
        store, _ = self._store()
        digest = _digest(digest)
        try:
            await store.delete(digest)
        except Exception as exc:
            raise AdminError(503, f"the API keys' KV failed: {exc!r}"[:300]) from exc
        self.forget(digest)
        self.services.log({"event": "admin_api_key_deleted", "sha256": digest})
        return json_answer(200, {"sha256": digest, "deleted": True})
