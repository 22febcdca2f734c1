"""Every origin's circuit breaker as this isolate sees it, kept in step with the shared ones.

Each isolate keeps its own copy of every origin's breaker and reports what it saw to the
origin's shared breaker (a Durable Object) after the response, at most about once a
second; the answer replaces its copy, so an outage one isolate sees protects the others.
If that Durable Object is unreachable, the isolate's own breaker goes on deciding alone.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..core.resilience.breaker import (
    BreakerDecision,
    BreakerSettings,
    BreakerState,
    Outcome,
    Permit,
    Phase,
    Report,
    allow,
    current_phase,
    overloaded,
    record,
)
from ..core.resilience.shared import MAX_PENDING_REPORTS, SyncCall, adopt
from .ports import DEFERRED_GIVEN_UP_MS, Background, Services

#: How stale an isolate's copy of a shared breaker may get before it reports and refreshes
#: (after the response).
SYNC_EVERY_MS = 1_000
#: A copy older than this (a new isolate, or no traffic for a while) is refreshed before it
#: decides: one round trip, so a breaker a health probe or another isolate opened holds
#: from this isolate's first request on.
REFRESH_BEFORE_USE_MS = 10_000
#: The most a request waits for that refresh; past it, the old copy decides.
REFRESH_TIMEOUT_S = 0.2


@dataclass(slots=True)
class _Copy:
    """This isolate's copy of one origin's breaker, and what it has not reported yet."""

    state: BreakerState = field(default_factory=BreakerState)
    pending: list[Report] = field(default_factory=list)
    synced_at: int = -SYNC_EVERY_MS
    syncing: bool = False
    """A sync began at ``synced_at`` and has not ended (see :meth:`busy`)."""
    settings: BreakerSettings | None = None
    """The pool's breaker settings, from the last call decided (to replay reports)."""
    urgent: bool = False
    """The copy changed phase (tripped open, or closed again): report it at once, not
    within the second, since no request may come to carry the report later."""

    def busy(self, now: int) -> bool:
        """Whether a sync is under way: one begun :data:`DEFERRED_GIVEN_UP_MS` ago was cut
        off with the work it ran in, and no longer keeps the copy from syncing."""
        return self.syncing and now - self.synced_at < DEFERRED_GIVEN_UP_MS


class BreakerBoard:
    """Every origin's breaker as this isolate sees it, kept in step with the shared ones."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.copies: dict[str, _Copy] = {}

    def _copy(self, name: str) -> _Copy:
        copy = self.copies.get(name)
        if copy is None:
            copy = self.copies[name] = _Copy()
        return copy

    def take(self, origin: str, shared: BreakerState, now: int) -> None:
        """Adopt the shared breaker's state (``shared``, as its object answers) into this
        isolate's copy: a health probe's verdict holds here from the next request."""
        copy = self._copy(origin)
        copy.state = adopt(copy.state, shared, copy.settings, copy.pending)
        copy.synced_at = now

    def allow(self, origin: str, settings: BreakerSettings, now: int) -> BreakerDecision:
        copy = self._copy(origin)
        copy.settings = settings
        decision, copy.state = allow(copy.state, settings, now)
        return decision

    def give_back(self, origin: str, settings: BreakerSettings, permit: Permit) -> None:
        """Return an unused permit (a half-open trial that was never made)."""
        copy = self._copy(origin)
        copy.state = record(copy.state, settings, 0, Outcome.OVERLOAD, permit)

    def phase(self, origin: str, now: int) -> str:
        state = self._copy(origin).state
        return f"forced_{state.forced}" if state.forced else current_phase(state, now).value

    def record(
        self,
        origin: str,
        settings: BreakerSettings,
        now: int,
        outcome: Outcome,
        *,
        permit: Permit | None,
        overloaded_until: int = 0,
    ) -> None:
        copy = self._copy(origin)
        if copy.state.forced:
            # Forced by an operator: the call counts nowhere, and no report of it goes
            # out to count once its breaker decides again (``auto``).
            return
        before = current_phase(copy.state, now)
        paused_before = copy.state.cool_down_until
        if outcome is Outcome.OVERLOAD and overloaded_until > now:
            copy.state = overloaded(copy.state, now, overloaded_until)
        copy.state = record(copy.state, settings, now, outcome, permit)
        copy.pending.append(Report(now, outcome, permit, overloaded_until))
        del copy.pending[:-MAX_PENDING_REPORTS]
        if current_phase(copy.state, now) != before or copy.state.cool_down_until > paused_before:
            # A trip, a close, or a new pause: every isolate should know now, not with a
            # later request (there may be none for a while).
            copy.urgent = True

    def sync_soon(
        self, origin: str, settings: BreakerSettings, now: int, background: Background
    ) -> None:
        """Report and refresh after the response when the copy is about a second old."""
        if self.services.breakers is None:
            return
        copy = self._copy(origin)
        if copy.busy(now) or (not copy.urgent and now - copy.synced_at < SYNC_EVERY_MS):
            return
        copy.syncing = True
        copy.synced_at = now
        background.defer(self._sync(origin, settings, copy))

    async def refresh_if_old(self, origin: str, settings: BreakerSettings, now: int) -> None:
        """Refresh a copy too old to trust before it decides (see REFRESH_BEFORE_USE_MS),
        or one about to send a half-open trial on what it knew before the wait ended (a
        health probe or another isolate's trial may have opened it again since)."""
        if self.services.breakers is None:
            return
        copy = self._copy(origin)
        if copy.busy(now):
            return
        state = copy.state
        waking = (
            state.phase is Phase.OPEN
            and not state.forced
            and copy.synced_at < state.open_until <= now
        )
        if not waking and now - copy.synced_at < REFRESH_BEFORE_USE_MS:
            return
        copy.syncing = True
        copy.synced_at = now
        try:
            await asyncio.wait_for(self._sync(origin, settings, copy), REFRESH_TIMEOUT_S)
        except TimeoutError:
            copy.syncing = False

    async def _sync(self, origin: str, settings: BreakerSettings, copy: _Copy) -> None:
        assert self.services.breakers is not None
        try:
            while True:
                # A phase change recorded while a report was on its way goes out at once
                # too (the loop), not with some later request's report.
                copy.urgent = False
                reports, copy.pending = copy.pending, []
                try:
                    answer = await self.services.breakers.sync(
                        origin, SyncCall(settings, tuple(reports))
                    )
                    # What was recorded while the answer was on its way is replayed on it.
                    copy.state = adopt(copy.state, answer, settings, copy.pending)
                except Exception as exc:  # the isolate's own breaker goes on deciding alone
                    copy.pending = (reports + copy.pending)[-MAX_PENDING_REPORTS:]
                    self.services.log(
                        {"event": "breaker_sync_error", "origin": origin, "error": repr(exc)[:200]}
                    )
                    return
                if not (copy.urgent and copy.pending):
                    return
        finally:
            copy.syncing = False
