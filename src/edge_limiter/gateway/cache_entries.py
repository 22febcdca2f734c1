"""A cached route's entries in Workers KV: read (a vary manifest, then the variant),
stored after the response (``waitUntil``) when the origin's answer may be kept, renewed
by a ``304``, purged; and this isolate's memory of its recent writes (KV takes one write
per second per key) and purges (an answer to a request sent before a purge is never
stored over it). KV failures are misses, logged, never errors for the client."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace

from ..core.caching.entry import Entry, decode_entry, encode_entry
from ..core.caching.keys import variant_key
from ..core.caching.policy import (
    Store,
    freshened_entry,
    kv_expiration_ttl,
    manifest_entry,
    response_entry,
    store_decision,
)
from ..core.caching.settings import CacheSettings
from ..core.errors import CacheEntryError
from ..core.http.fields import origin_fields
from ..core.http.messages import Progress, Response
from .exchange import Exchange
from .ports import KeyValueStore, Services

#: KV takes one write per second per key: this isolate skips rewriting a key sooner.
REWRITE_AFTER_MS = 1_000
RECENT = 1_024


class Entries:
    """One cached route's entries; see the module docstring."""

    def __init__(
        self,
        route: str,
        settings: CacheSettings,
        kv: KeyValueStore,
        services: Services,
        caller_fields: Iterable[str],
    ) -> None:
        self.route = route
        self.settings = settings
        self.kv = kv
        self.services = services
        self.caller_fields = tuple(caller_fields)
        self._written: OrderedDict[str, int] = OrderedDict()
        self._purged: OrderedDict[str, int] = OrderedDict()
        """When this isolate last purged each base key (a write, an admin purge): an answer
        the origin gave to a request sent before that is not stored over it."""

    async def purge(self, base: str, *, look: bool = False) -> bool | None:
        """Forget the entry at ``base``; when asked to ``look`` first, whether one stood."""
        self._written.pop(base, None)
        note(self._purged, base, self.services.clock.now_ms())
        found = (await self.kv.get(base)) is not None if look else None
        await self.kv.delete(base)
        return found

    async def forget(self, key: str) -> None:
        """Delete ``key``'s entry (a copy its origin no longer keeps)."""
        self._written.pop(key, None)
        await self.kv.delete(key)

    async def renew(
        self,
        exchange: Exchange,
        base: str,
        request_fields: list[tuple[str, str]],
        entry: Entry,
        response: Response,
        *,
        generation: str | None,
        defer: bool = True,
        since: int | None = None,
    ) -> tuple[Entry, Entry | None]:
        """The stale ``entry`` renewed by the origin's ``304`` (RFC 9111 section 4.3.4):
        the copy to answer with, and the entry stored again (``None``: the ``304`` says
        not to keep it, or the URI was written meanwhile)."""
        now = self.services.clock.now_ms()
        renewed, decision = freshened_entry(
            entry,
            origin_fields(response.headers.items()),
            self.settings,
            now,
            caller_fields=self.caller_fields,
        )
        self.services.log({"event": "cache_revalidated", "route": self.route})
        asked = since if since is not None else exchange.now_ms
        if not decision.store or self.purged_since(base, asked):
            return renewed, None
        kept = await self._keep(
            exchange,
            base,
            request_fields,
            renewed,
            decision,
            generation=generation,
            defer=defer,
            sent=asked,
            now=now,
        )
        return renewed, kept

    async def lookup(
        self, base: str, request_fields: list[tuple[str, str]], now: int
    ) -> tuple[Entry | None, str | None, tuple[str, ...]]:
        """The stored answer for this request, the generation of the vary manifest at
        ``base`` (``None``: none stands there) and the fields it names."""
        entry = await self._read(base)
        if entry is None or not entry.manifest:
            return entry, None, ()
        generation = entry.generation
        if now >= entry.expires:
            return None, None, ()
        variant = await self._read(variant_key(base, entry.vary, request_fields, generation))
        if variant is not None and variant.manifest:
            return None, generation, entry.vary
        return variant, generation, entry.vary

    async def _generation(self, base: str, now: int) -> str:
        """The generation of the vary manifest standing at ``base``, or a new one."""
        standing = await self._read(base)
        if standing is not None and standing.manifest and now < standing.expires:
            return standing.generation
        return f"{int(self.services.random() * (1 << 48)):012x}"

    async def _read(self, key: str) -> Entry | None:
        try:
            data = await self.kv.get(key)
        except Exception as exc:  # a KV failure is a miss
            self.log_failure("get", exc)
            return None
        if data is None:
            return None
        try:
            return decode_entry(data)
        except CacheEntryError as exc:
            self.log_failure("decode", exc)
            return None

    async def store(
        self,
        exchange: Exchange,
        base: str,
        request_fields: list[tuple[str, str]],
        response: Response,
        generation: str | None,
        *,
        defer: bool = True,
        since: int | None = None,
        progress: Progress | None = None,
    ) -> Entry | None:
        """Store ``response`` if it may be (written after the response, unless not
        ``defer``: already there); the entry, if any. A response that varies goes under
        the vary manifest's ``generation`` (``None``: not read; a new one if none stands).
        Not stored when this isolate purged the URI after the request was sent (``since``,
        by default when it arrived): a write done meanwhile must not be undone by the
        answer of a read that started before it (RFC 9111 section 4.4)."""
        now = exchange.now_ms
        if self.purged_since(base, since if since is not None else now):
            return None
        response_fields = origin_fields(response.headers.items())
        decision = store_decision(
            response.status,
            response_fields,
            None,
            self.settings,
            now,
            caller_fields=self.caller_fields,
        )
        if not decision.store:
            return None
        # A body of unknown length is measured as it is read, never held past max_bytes: a
        # larger one is not stored and goes to the client streamed.
        body = await response.read_body_at_most(self.settings.max_bytes, progress)
        if body is None:
            return None
        decision = replace(decision, must_measure=False)
        entry = response_entry(decision, response.status, response_fields, body, now)
        sent = since if since is not None else now
        return await self._keep(
            exchange,
            base,
            request_fields,
            entry,
            decision,
            generation=generation,
            defer=defer,
            sent=sent,
            now=now,
        )

    async def _keep(
        self,
        exchange: Exchange,
        base: str,
        request_fields: list[tuple[str, str]],
        entry: Entry,
        decision: Store,
        *,
        generation: str | None,
        defer: bool,
        sent: int,
        now: int,
    ) -> Entry | None:
        """Write ``entry`` (with its vary manifest, when it varies) after the response,
        unless not ``defer``; ``entry``, or ``None`` when it cannot be encoded."""
        writes: list[tuple[str, bytes]] = []
        try:
            if decision.vary:
                if generation is None:
                    generation = await self._generation(base, now)
                manifest = manifest_entry(decision, now, generation)
                writes.append((base, encode_entry(manifest)))
                target = variant_key(base, decision.vary, request_fields, generation)
            else:
                target = base
            writes.append((target, encode_entry(entry)))
        except CacheEntryError as exc:
            self.log_failure("encode", exc)
            return None
        writes = [(key, value) for key, value in writes if self._may_write(key, now)]
        if writes:
            ttl = kv_expiration_ttl(entry.expires, now)
            if defer:
                exchange.background.defer(self._write(writes, ttl, base, sent))
            else:
                await self._write(writes, ttl, base, sent)
        return entry

    def _may_write(self, key: str, now: int) -> bool:
        """Whether this isolate may write ``key`` now (KV: one write per second per key)."""
        last = self._written.get(key)
        if last is not None and now - last < REWRITE_AFTER_MS:
            return False
        note(self._written, key, now)
        return True

    def purged_since(self, base: str, since: int) -> bool:
        """Whether this isolate purged ``base`` at or after ``since``."""
        purged = self._purged.get(base)
        return purged is not None and purged >= since

    async def _write(
        self, writes: list[tuple[str, bytes]], ttl_s: int, base: str, since: int
    ) -> None:
        """Write an answer's entries (after the response), unless a write or purge of its
        URI came after the request was sent (``since``): the answer may be older than it.
        A purge while the writes were on their way is done again after them, since the
        store may apply the two in either order."""
        written: list[str] = []
        for key, value in writes:
            if self.purged_since(base, since):
                break
            try:
                await self.kv.put(key, value, ttl_s)
                written.append(key)
            except Exception as exc:  # a failed write is only a later miss
                self.log_failure("put", exc)
        if written and self.purged_since(base, since):
            for key in written:
                try:
                    await self.kv.delete(key)
                except Exception as exc:  # the copy expires on its own
                    self.log_failure("delete", exc)

    def log_failure(self, op: str, exc: BaseException) -> None:
        self.services.log(
            {
                "event": "cache_error",
                "route": self.route,
                "op": op,
                "error": f"{type(exc).__name__}: {str(exc)[:200]}",
            }
        )


def note(recent: OrderedDict[str, int], key: str, now: int) -> None:
    """Remember ``key`` at ``now`` among the last :data:`RECENT` keys noted."""
    recent[key] = now
    recent.move_to_end(key)
    while len(recent) > RECENT:
        recent.popitem(last=False)
