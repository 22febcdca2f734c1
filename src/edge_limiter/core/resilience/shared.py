"""One origin's breaker shared between isolates through a Durable Object.

Each isolate keeps a copy of the breaker (:mod:`.breaker`), decides its own calls with it,
and every second or so sends the outcomes it saw to the origin's Durable Object in one
:class:`SyncCall`. The Durable Object applies them to the authoritative state with
:func:`apply_sync` and answers with that state, which the isolate adopts: an outage one
isolate sees protects the others within about a second.

The Durable Object replays every reported call as if it had admitted it itself
(:func:`~.breaker.allow` then :func:`~.breaker.record` at the call's time): while it is open
a call it would have refused does not count, and when its open time is over the next
reported calls are its half-open trials. Isolates therefore never need to agree on
generations or permits.

Active health checks feed the same state: ``unhealthy_after`` failed probes in a row open a
closed breaker at once, and a passing probe lets an open one try again (half-open) at once,
so an origin is opened before users hit it and closed when it recovers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ProtocolError, StateError
from ..objects import Method, Sql, SqlCell, json_object, malformed
from .breaker import (
    FORCED,
    BreakerSettings,
    BreakerState,
    Outcome,
    Phase,
    Report,
    allow,
    current_phase,
    decode_report,
    decode_state,
    encode_report,
    encode_state,
    force,
    open_duration_ms,
    overloaded,
    record,
)

#: How many reports an isolate keeps for one origin while its Durable Object is unreachable.
MAX_PENDING_REPORTS = 200
DEFAULT_UNHEALTHY_AFTER = 2


@dataclass(frozen=True, slots=True)
class HealthReport:
    """The result of one active health probe at ``at``."""

    at: int
    healthy: bool
    unhealthy_after: int = DEFAULT_UNHEALTHY_AFTER


@dataclass(frozen=True, slots=True)
class SharedState:
    """What the Durable Object stores: the breaker and the run of failed probes."""

    breaker: BreakerState = field(default_factory=BreakerState)
    failed_probes: int = 0


@dataclass(frozen=True, slots=True)
class SyncCall:
    """An isolate's reports (and/or one health probe) for one origin, with its settings."""

    settings: BreakerSettings
    reports: tuple[Report, ...] = ()
    health: HealthReport | None = None
    force: str | None = None
    """An operator's ``open``, ``closed`` or ``auto`` (:func:`~.breaker.force`)."""

    def to_json(self) -> str:
        """Compact JSON text for the RPC call."""
        data: dict[str, Any] = {
            "settings": encode_settings(self.settings),
            "reports": [encode_report(report) for report in self.reports],
        }
        if self.health is not None:
            data["health"] = [self.health.at, self.health.healthy, self.health.unhealthy_after]
        if self.force is not None:
            data["force"] = self.force
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SyncCall:
        """Parse and validate; raises :class:`ProtocolError`."""
        data = json_object(text, "breaker sync")
        try:
            settings = decode_settings(data["settings"])
            reports = tuple(decode_report(item) for item in data.get("reports", []))
            health = None
            if data.get("health") is not None:
                at, healthy, after = data["health"]
                if not isinstance(at, int) or not isinstance(healthy, bool) or after < 1:
                    raise ProtocolError(f"bad health report {data['health']!r}")
                health = HealthReport(at, healthy, int(after))
            forced = data.get("force")
            if forced is not None and forced not in (*FORCED, "auto"):
                raise ProtocolError(f"bad force {forced!r}")
            return cls(settings, reports, health, forced)
        except ProtocolError:
            raise
        except (ValueError, KeyError, TypeError, StateError) as exc:
            raise malformed("breaker sync", exc) from exc


def apply_reports(
    state: BreakerState, settings: BreakerSettings, reports: Iterable[Report]
) -> BreakerState:
    """The authoritative state after isolates' reports, each replayed at its own time."""
    for report in sorted(reports, key=lambda r: r.at):
        if report.outcome is Outcome.OVERLOAD and report.overloaded_until > report.at:
            until = min(report.overloaded_until, report.at + settings.max_open_for_ms)
            state = overloaded(state, report.at, until)
            continue
        decision, state = allow(state, settings, report.at)
        if decision.permit is not None:
            state = record(state, settings, report.at, report.outcome, decision.permit)
    return state


def adopt(
    local: BreakerState,
    authoritative: BreakerState,
    settings: BreakerSettings | None = None,
    unreported: Iterable[Report] = (),
) -> BreakerState:
    """An isolate's new copy of a breaker, from the authoritative state its object answered.

    The object has heard of this isolate's calls up to the sync that brought the answer:
    ``unreported`` (the calls recorded since, with the pool's ``settings``) are replayed on
    it as the object will replay them, so a close or a trip this copy already made is not
    undone by an older answer. Trial calls are issued by each isolate and the object hears
    of them only when they end: while this copy has trials out on the opening the answer
    still describes (the same consecutive trip, not yet over there), its half-open count
    is kept, so no more than ``half_open_calls`` go out at once. A longer local overload
    pause (its own 429, not yet reported) is kept too. When the copy takes the answer's
    phase, permits issued before decide nothing after it (a new generation).
    """
    state = authoritative
    if settings is not None:
        state = apply_reports(state, settings, unreported)
    if local.cool_down_until > state.cool_down_until:
        state = replace(state, cool_down_until=local.cool_down_until)
    if (
        local.phase is Phase.HALF_OPEN
        and local.issued > local.successes
        and not local.forced
        and not state.forced
        and state.phase is not Phase.CLOSED
        and state.trips == local.trips
        and state.open_until <= local.open_until
    ):
        return replace(local, cool_down_until=state.cool_down_until)
    if state.phase is local.phase is Phase.CLOSED and state.forced == local.forced:
        # Calls admitted before keep counting in this copy's window.
        return replace(state, generation=local.generation)
    return replace(state, generation=max(local.generation, state.generation) + 1)


def apply_health(
    shared: SharedState, settings: BreakerSettings, probe: HealthReport
) -> SharedState:
    """A probe's effect: open after ``unhealthy_after`` failures in a row; a passing probe
    ends an open breaker's wait (its next calls are half-open trials)."""
    breaker = shared.breaker
    if breaker.forced:
        # Forced by an operator: probes still run (and are logged), but decide nothing.
        return SharedState(breaker, 0 if probe.healthy else shared.failed_probes + 1)
    if probe.healthy:
        if breaker.phase is Phase.OPEN and probe.at < breaker.open_until:
            breaker = replace(breaker, open_until=probe.at)
        return SharedState(breaker, 0)
    failed = shared.failed_probes + 1
    # A breaker whose wait is over is half-open (stored as open past ``open_until``, or
    # as half-open once a trial was reported): a failed probe is a failed trial there,
    # and opens it again for a longer wait, as a failed call would.
    if failed >= probe.unhealthy_after and current_phase(breaker, probe.at) is not Phase.OPEN:
        trips = breaker.trips + 1
        breaker = BreakerState(
            phase=Phase.OPEN,
            trips=trips,
            open_until=probe.at + open_duration_ms(trips, settings),
            cool_down_until=breaker.cool_down_until,
            generation=breaker.generation + 1,
        )
    return SharedState(breaker, failed)


def apply_sync(call: SyncCall, stored: SharedState) -> SharedState:
    """The Durable Object's step: reports first, then the probe."""
    shared = replace(stored, breaker=apply_reports(stored.breaker, call.settings, call.reports))
    if call.health is not None:
        shared = apply_health(shared, call.settings, call.health)
    if call.force is not None:
        shared = replace(shared, breaker=force(shared.breaker, call.force))
    return shared


def encode_shared(shared: SharedState) -> str:
    """The stored text of the Durable Object's state."""
    return json.dumps(
        {"breaker": encode_state(shared.breaker), "failed_probes": shared.failed_probes},
        separators=(",", ":"),
    )


def decode_shared(text: str | None) -> SharedState:
    """Inverse of :func:`encode_shared`; unreadable text is a fresh state (closed)."""
    if not text:
        return SharedState()
    try:
        data = json.loads(text)
        failed = data.get("failed_probes", 0)
        if not isinstance(failed, int) or failed < 0:
            return SharedState(decode_state(data["breaker"]))
        return SharedState(decode_state(data["breaker"]), failed)
    except (ValueError, KeyError, TypeError, StateError):
        return SharedState()


def encode_settings(settings: BreakerSettings) -> dict[str, Any]:
    """The settings as plain JSON data."""
    return {
        "failure_rate": settings.failure_rate,
        "window": settings.window,
        "min_calls": settings.min_calls,
        "slow_call_ms": settings.slow_call_ms,
        "open_for_ms": settings.open_for_ms,
        "max_open_for_ms": settings.max_open_for_ms,
        "half_open_calls": settings.half_open_calls,
        "success_threshold": settings.success_threshold,
        "trial_timeout_ms": settings.trial_timeout_ms,
        "failure_statuses": list(settings.failure_statuses),
    }


def decode_settings(data: Mapping[str, Any]) -> BreakerSettings:
    """Inverse of :func:`encode_settings`; raises ``ValueError`` or ``TypeError`` when invalid."""
    ints = {
        name: data[name]
        for name in (
            "failure_rate",
            "window",
            "min_calls",
            "open_for_ms",
            "max_open_for_ms",
            "half_open_calls",
            "success_threshold",
            "trial_timeout_ms",
        )
    }
    for name, value in ints.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
    slow = data.get("slow_call_ms")
    if slow is not None and (isinstance(slow, bool) or not isinstance(slow, int)):
        raise TypeError(f"slow_call_ms must be an int or null, got {slow!r}")
    statuses = tuple(int(status) for status in data.get("failure_statuses", ()))
    return BreakerSettings(slow_call_ms=slow, failure_statuses=statuses, **ints)


def state_to_json(state: BreakerState) -> str:
    """The Durable Object's answer: the authoritative breaker."""
    return json.dumps({"state": encode_state(state)}, separators=(",", ":"))


def state_from_json(text: str) -> BreakerState:
    """Parse the Durable Object's answer; raises :class:`ProtocolError`."""
    try:
        return decode_state(json_object(text, "breaker answer")["state"])
    except (ValueError, KeyError, TypeError, StateError) as exc:
        raise malformed("breaker answer", exc) from exc


def _state_of(text: str, call: SyncCall) -> BreakerState:
    del call
    return state_from_json(text)


SYNC: Method[SyncCall, BreakerState] = Method(
    "sync", SyncCall.to_json, _state_of, typed="sync_call"
)
"""``OriginBreaker.sync``: an isolate's reports, the authoritative breaker
(:mod:`edge_limiter.core.objects`)."""


class SharedBreaker:
    """The origin breaker Durable Object's logic: one origin's shared state in one row.

    :meth:`sync` applies an isolate's reports (or the Cron Trigger's health probe) with
    :func:`apply_sync`, stores the result and answers with the authoritative breaker,
    which the isolate adopts.
    """

    def __init__(self, sql: Sql) -> None:
        self.state = SqlCell(sql, "breaker")
        self.shared: SharedState | None = None
        """The stored state as last read or written: memory is the truth while the
        object lives (nothing else writes its row), so it is read once."""

    def sync(self, payload: str, now: int) -> str:
        """Apply one :class:`SyncCall` (its text); the authoritative state's text."""
        return state_to_json(self.sync_call(SyncCall.from_json(payload), now))

    def sync_call(self, call: SyncCall, now: int) -> BreakerState:
        """:meth:`sync` on the typed call: the authoritative state itself (``SYNC.typed``,
        for the in-memory twin without the codec)."""
        del now  # every report and probe carries its own time
        stored = self.shared
        if stored is None:
            stored = decode_shared(self.state.get())
        shared = apply_sync(call, stored)
        self.state.put(encode_shared(shared))
        self.shared = shared  # once stored: a failed write leaves memory as storage is
        return shared.breaker
