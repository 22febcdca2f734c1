"""What an isolate keeps for the operator: the deny cache, the overrides, the counters, and
the record of every decision (a log line, a data point, a counter)."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from ..core.config import Config
from ..core.control import OverridesCall, StatsCall
from ..core.errors import ProtocolError
from ..core.ratelimit.decision import Decision
from ..core.ratelimit.denycache import DenyCache
from ..core.ratelimit.overrides import ALL_ROUTES, Override, OverrideTable
from ..core.stats import DENYING_EVENTS, StatsBatch
from .ports import DEFERRED_GIVEN_UP_MS, Background, Services

#: How often an isolate sends its counters to the Control object, at most.
STATS_FLUSH_MS = 1_000
#: The most a request waits for a first load of the overrides.
FIRST_LOAD_TIMEOUT_S = 0.3
#: The most (route, key) pairs an isolate spaces the denial lines of; a key beyond them
#: gets a line per denial, as with ``denials_every = "0s"``.
MAX_SPACED_KEYS = 4_096


class Operating:
    """Per-isolate operator state, shared by every route's stages."""

    def __init__(self, config: Config, services: Services) -> None:
        self.config = config
        self.services = services
        ops = config.ops
        self.deny = DenyCache(ops.deny_cache_max_keys, max(1, ops.deny_cache_ttl_ms))
        self.deny_enabled = ops.deny_cache_ttl_ms > 0
        self.overrides = OverrideTable()
        self.overrides_loaded_at: int | None = None
        self._loading = False
        self._loading_since = 0
        self._orphans_reported: set[str] = set()
        self.stats = StatsBatch()
        self._stats_flushed_at = 0
        self._holder: str | None = None
        # (route, key hash) -> [when its last denial line was printed, denials since
        # without a line, the last one's event, when it last denied]: see _denial_line.
        self._denial_lines: dict[tuple[str, str], list[Any]] = {}
        self._denials_swept_at = 0

    @property
    def holder(self) -> str:
        """This isolate's lease holder id: random, drawn on first use (inside a request,
        where the platform's randomness is real; never at global scope)."""
        if self._holder is None:
            self._holder = secrets.token_hex(8)
        return self._holder

    # --- overrides ------------------------------------------------------------------------

    async def override_for(
        self, route: str, key: str, now: int, background: Background
    ) -> Override | None:
        """The live override for ``key`` on ``route``, reloading the list when it is old."""
        control = self.services.control
        if control is None:
            return None
        refresh = self.config.ops.overrides_refresh_ms
        if self.overrides_loaded_at is None:
            # The isolate's first request: load once, briefly, before deciding.
            try:
                await asyncio.wait_for(self.reload_overrides(now), FIRST_LOAD_TIMEOUT_S)
            except TimeoutError:
                self.overrides_loaded_at = now  # try again later, in the background
        elif now - self.overrides_loaded_at >= refresh and not self._reloading(now):
            self._loading = True
            self._loading_since = now
            background.defer(self.reload_overrides(now))
        return self.overrides.find(route, key, now)

    def _reloading(self, now: int) -> bool:
        """Whether a reload is under way: one begun :data:`DEFERRED_GIVEN_UP_MS` ago was
        cut off with the work it ran in, and no longer keeps the list from reloading."""
        return self._loading and now - self._loading_since < DEFERRED_GIVEN_UP_MS

    async def reload_overrides(self, now: int) -> None:
        control = self.services.control
        assert control is not None
        self._loading = True
        self._loading_since = now
        try:
            answer = await control.overrides(OverridesCall("list"))
            if answer.error:
                raise ProtocolError(answer.error)
            overrides = list(answer.overrides)
            self.overrides = OverrideTable(overrides)
            self.overrides_loaded_at = now
            self._report_orphans(overrides)
        except Exception as exc:  # keep the old list; try again at the next refresh
            self.overrides_loaded_at = now
            self.services.log({"event": "overrides_load_error", "error": repr(exc)[:200]})
        finally:
            self._loading = False

    def _report_orphans(self, overrides: list[Override]) -> None:
        """Log, once per isolate, each override for a route this config no longer has
        (the deploy removed or renamed it): it applies to nothing until deleted."""
        routes = {route.name for route in self.config.routes}
        for override in overrides:
            if override.route in routes or override.route == ALL_ROUTES:
                continue
            if override.id in self._orphans_reported:
                continue
            self._orphans_reported.add(override.id)
            self.services.log(
                {"event": "override_for_unknown_route", "id": override.id, "route": override.route}
            )

    def override_set(self, overrides: list[Override], now: int) -> None:
        """The admin API changed the list in this isolate: use it at once."""
        self.overrides = OverrideTable(overrides)
        self.overrides_loaded_at = now
        self.deny.clear()

    # --- decisions ------------------------------------------------------------------------

    def record(
        self,
        *,
        route: str,
        event: str,
        key_hash: str | None,
        decision: Decision | None,
        latency_ms: int,
        background: Background,
        now: int,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Count a decision, log it (allowed ones sampled), and write its data point."""
        services = self.services
        ops = self.config.ops
        self.stats.note(route, event, key_hash)
        near = False
        remaining = limit = 0
        if decision is not None:
            remaining, limit = decision.remaining, decision.limit
            near = limit > 0 and (limit - remaining) >= ops.near_limit * limit
        logged = event != "allowed" or (extra is not None and "override" in extra)
        repeats = 0
        if ops.denials_every_ms:
            if self._denial_lines and now - self._denials_swept_at >= ops.denials_every_ms:
                self._sweep_denial_lines(now)
            if logged and event in DENYING_EVENTS and key_hash:
                repeats = self._denial_line(route, key_hash, event, now)
                logged = repeats >= 0
        if logged or (ops.sample_allowed and services.random() < ops.sample_allowed):
            record: dict[str, Any] = {
                "event": event,
                "route": route,
                "key_hash": key_hash,
                "latency_ms": latency_ms,
            }
            if decision is not None:
                record.update(remaining=remaining, limit=limit, near_limit=near)
            if repeats > 0:
                record["repeats"] = repeats
            if extra:
                record.update(extra)
            services.log(record)
        if services.analytics is not None:
            used = (limit - remaining) / limit if limit else 0.0
            try:
                services.analytics.write(
                    [route, event, key_hash or "", "near_limit" if near else ""],
                    [float(latency_ms), float(remaining), float(limit), used],
                    [route],
                )
            except Exception as exc:  # analytics never fails a request
                services.log({"event": "analytics_error", "error": repr(exc)[:200]})
        self._flush_soon(now, background)

    def _denial_line(self, route: str, key_hash: str, event: str, now: int) -> int:
        """Whether this denial gets a line: -1 when its key had one within
        ``denials_every`` (it is counted, to be told by the next line), else the denials
        since that line that had none (the new line's ``repeats``)."""
        pair = (route, key_hash)
        spaced = self._denial_lines.get(pair)
        if spaced is not None and now - spaced[0] < self.config.ops.denials_every_ms:
            spaced[1] += 1
            spaced[2] = event
            spaced[3] = now
            return -1
        repeats = spaced[1] if spaced is not None else 0
        if spaced is not None or len(self._denial_lines) < MAX_SPACED_KEYS:
            self._denial_lines[pair] = [now, 0, event, now]
        return repeats

    def _sweep_denial_lines(self, now: int) -> None:
        """Print what keys with no denial for ``denials_every`` have left untold (one line
        each, standing for ``1 + repeats`` denials), and forget them: nothing counted goes
        unlogged because a flood stopped. A key still denied is left to its next line."""
        self._denials_swept_at = now
        every = self.config.ops.denials_every_ms
        quiet = [pair for pair, spaced in self._denial_lines.items() if now - spaced[3] >= every]
        for pair in quiet:
            _, untold, event, _ = self._denial_lines.pop(pair)
            if untold:
                line: dict[str, Any] = {"event": event, "route": pair[0], "key_hash": pair[1]}
                if untold > 1:
                    line["repeats"] = untold - 1
                self.services.log(line)

    async def flush_stats(self, now: int) -> None:
        """Send this isolate's counters now (before the admin API reads the totals: counts
        otherwise wait for the isolate's next decision, which may not come)."""
        batch = self._take_stats(now)
        if batch is not None:
            await self._flush(batch, now)

    def _flush_soon(self, now: int, background: Background) -> None:
        if now - self._stats_flushed_at < STATS_FLUSH_MS:
            return
        batch = self._take_stats(now)
        if batch is not None:
            background.defer(self._flush(batch, now))

    def _take_stats(self, now: int) -> StatsBatch | None:
        """The counters to send (a new batch starts), or None: none, or nowhere to send."""
        if self.services.control is None or not self.stats:
            return None
        batch, self.stats = self.stats, StatsBatch()
        self._stats_flushed_at = now
        return batch

    async def _flush(self, batch: StatsBatch, now: int) -> None:
        control = self.services.control
        assert control is not None
        try:
            await control.stats(StatsCall.add(batch, now))
        except Exception as exc:
            self.services.log({"event": "stats_flush_error", "error": repr(exc)[:200]})
