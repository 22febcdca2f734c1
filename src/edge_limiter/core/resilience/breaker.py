"""A circuit breaker per origin: closed / open / half-open as an explicit state machine.

Every step is a pure function of ``(state, settings, now)`` that returns a new
:class:`BreakerState`; nothing reads a clock or mutates. The state is plain data
(:func:`encode_state` / :func:`decode_state`), so a Durable Object can hold the
authoritative copy and isolates can hold snapshots of it.

The phases:

``closed``
    Calls go through. The outcomes of the last ``window`` calls are kept (a count-based
    sliding window); once it holds at least ``min_calls`` outcomes and the share of
    failures (slow successes included) reaches ``failure_rate`` percent, the breaker trips.
``open``
    Calls are refused until ``open_until``. The open duration doubles with every
    consecutive trip (``open_for * 2**(trips - 1)``) up to ``max_open_for``.
``half_open``
    Entered by the first :func:`allow` at or after ``open_until``. Exactly
    ``half_open_calls`` trial calls are admitted; ``success_threshold`` successes close the
    breaker (window cleared, trip count reset), any failure opens it again for longer.

Beside the phases, an origin that answers 429 with ``Retry-After`` is *overloaded*, not
failing: :func:`overloaded` parks it until then without counting a failure.

An operator may *force* the breaker (:func:`force`, resilience4j's FORCED_OPEN and
DISABLED): ``open`` refuses every call (an origin taken out for maintenance), ``closed``
lets every call through and counts none (an origin that must be used whatever it
answers). Neither changes the phase underneath; ``auto`` hands back to it.

Sharing one breaker between isolates (the intended use with a Durable Object):

* the Durable Object holds the authoritative state;
* an isolate keeps a copy, calls :func:`allow` on it (closed: go; open: refuse locally;
  half-open: at most ``half_open_calls`` trials of its own at once), records outcomes on
  it so a failing origin trips locally at once, and queues a :class:`Report` per call;
* the Durable Object replays a batch of reports and answers with its state; the isolate
  takes it into its copy with :func:`.shared.adopt`.

A :class:`Permit` carries the ``generation`` of the state that issued it (the count of
phase changes), so an outcome that arrives after the breaker moved on (a call admitted
while closed, reported after it tripped and went half-open) cannot decide a trial.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from ..errors import StateError
from ..validation import is_int, shown

STATE_VERSION = 1

DEFAULT_FAILURE_RATE = 50
DEFAULT_WINDOW = 20
DEFAULT_MIN_CALLS = 10
DEFAULT_OPEN_FOR_MS = 10_000
DEFAULT_MAX_OPEN_FOR_MS = 300_000
DEFAULT_HALF_OPEN_CALLS = 3
DEFAULT_SUCCESS_THRESHOLD = 2
DEFAULT_TRIAL_TIMEOUT_MS = 30_000
DEFAULT_FAILURE_STATUSES = (502, 503, 504)
#: What Cloudflare's edge answers in the origin's stead when the origin failed (520 an
#: empty or unknown answer, 521 refused, 522 connection timed out, 523 unreachable, 524 no
#: answer in time, 525 and 526 TLS): the origin's failure, whatever ``failure_statuses``
#: (which judges the origin's own answers) says, as a connection error would be.
EDGE_FAILURE_STATUSES = frozenset(range(520, 527))

MAX_WINDOW = 1_000
MAX_HALF_OPEN_CALLS = 100
MAX_OPEN_FOR_MS = 86_400_000
MAX_SLOW_CALL_MS = 600_000
MAX_TRIAL_TIMEOUT_MS = 600_000
OVERLOAD_STATUS = 429


class Phase(StrEnum):
    """Where the state machine is."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Outcome(StrEnum):
    """What one call to the origin came to (see :func:`classify`)."""

    SUCCESS = "success"
    FAILURE = "failure"
    SLOW = "slow"
    """A success slower than ``slow_call``: counted as a failure."""
    OVERLOAD = "overload"
    """A 429: the origin asks for less traffic; not counted either way."""
    BROKEN = "broken"
    """A success whose body then broke off: the latest success counted becomes a failure."""


class Refusal(StrEnum):
    """Why :func:`allow` refused a call."""

    OPEN = "open"
    """The breaker is open."""
    TRIALS_IN_FLIGHT = "trials_in_flight"
    """Half-open, and every trial permit is out."""
    OVERLOADED = "overloaded"
    """The origin asked for a pause (429 with ``Retry-After``)."""
    FORCED_OPEN = "forced_open"
    """An operator took the origin out (:func:`force`)."""


#: What :func:`force` takes: ``open``, ``closed``, or ``auto`` (the breaker decides).
FORCED = ("open", "closed")


# One letter per outcome in the window: a short string is cheap to slice and to store.
_SUCCESS, _FAILURE, _SLOW = "s", "f", "w"
_LETTER = {Outcome.SUCCESS: _SUCCESS, Outcome.FAILURE: _FAILURE, Outcome.SLOW: _SLOW}


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """How one pool's breakers trip and recover. Times in ms; ``slow_call_ms`` ``None`` is off."""

    failure_rate: int = DEFAULT_FAILURE_RATE
    window: int = DEFAULT_WINDOW
    min_calls: int = DEFAULT_MIN_CALLS
    slow_call_ms: int | None = None
    open_for_ms: int = DEFAULT_OPEN_FOR_MS
    max_open_for_ms: int = DEFAULT_MAX_OPEN_FOR_MS
    half_open_calls: int = DEFAULT_HALF_OPEN_CALLS
    success_threshold: int = DEFAULT_SUCCESS_THRESHOLD
    trial_timeout_ms: int = DEFAULT_TRIAL_TIMEOUT_MS
    failure_statuses: tuple[int, ...] = DEFAULT_FAILURE_STATUSES
    pause_on_429: bool = False
    """A 429 means the whole origin is overloaded: skip it (every isolate) until its
    ``Retry-After`` and retry elsewhere. Off: a 429 is the origin's answer to that client
    (its own per-client limits), passed on, and it holds no other client back."""

    def __post_init__(self) -> None:
        if not 1 <= self.failure_rate <= 100:
            raise ValueError(f"failure_rate must be 1..100, got {self.failure_rate}")
        if not 1 <= self.min_calls <= self.window:
            raise ValueError(f"need 1 <= min_calls <= window, got {self.min_calls}, {self.window}")
        if self.slow_call_ms is not None and self.slow_call_ms < 1:
            raise ValueError(f"slow_call_ms must be positive, got {self.slow_call_ms}")
        if not 1 <= self.open_for_ms <= self.max_open_for_ms:
            raise ValueError(
                f"need 1 <= open_for_ms <= max_open_for_ms, got "
                f"{self.open_for_ms}, {self.max_open_for_ms}"
            )
        if not 1 <= self.success_threshold <= self.half_open_calls:
            raise ValueError(
                f"need 1 <= success_threshold <= half_open_calls, got "
                f"{self.success_threshold}, {self.half_open_calls}"
            )
        if self.trial_timeout_ms < 1:
            raise ValueError(f"trial_timeout_ms must be positive, got {self.trial_timeout_ms}")


@dataclass(frozen=True, slots=True)
class BreakerState:
    """One origin's breaker, as plain data. The default value is a fresh, closed breaker.

    ``recent`` holds the outcomes of the last ``window`` calls while closed, oldest first,
    one letter each (``s`` success, ``f`` failure, ``w`` slow). ``trips`` counts consecutive
    trips (reset on closing). ``open_until`` is when an open breaker may try again;
    ``issued`` and ``successes`` count half-open trial permits and their successes;
    ``trials_expire_at`` is when unreported trial permits are taken back (a trial whose
    outcome is lost must not keep the breaker half-open for ever). ``cool_down_until`` is
    the end of an overload pause; ``generation`` counts phase changes.
    """

    phase: Phase = Phase.CLOSED
    recent: str = ""
    trips: int = 0
    open_until: int = 0
    issued: int = 0
    successes: int = 0
    trials_expire_at: int = 0
    cool_down_until: int = 0
    generation: int = 0
    forced: str = ""
    """``open`` or ``closed`` while an operator forces the breaker (:func:`force`); empty
    while it decides by itself."""


@dataclass(frozen=True, slots=True)
class Permit:
    """Leave to make one call: a trial call when the breaker is half-open."""

    trial: bool
    generation: int


@dataclass(frozen=True, slots=True)
class BreakerDecision:
    """What :func:`allow` decided: a permit, or how long to wait and why not."""

    permit: Permit | None
    retry_after_ms: int = 0
    refusal: Refusal | None = None

    @property
    def allowed(self) -> bool:
        """Whether the call may go ahead."""
        return self.permit is not None


@dataclass(frozen=True, slots=True)
class Report:
    """One outcome an isolate reports to the authoritative breaker.

    ``at`` is when the call ended; ``permit`` the permit it ran under (``None``: whatever
    the current phase is); ``overloaded_until`` the end of the pause an :attr:`Outcome.OVERLOAD`
    asks for (0 for none).
    """

    at: int
    outcome: Outcome
    permit: Permit | None = None
    overloaded_until: int = 0


# --- settings ---------------------------------------------------------------------------


# --- classifying ------------------------------------------------------------------------


def classify(
    status: int | None, error: str | None, duration_ms: int, settings: BreakerSettings
) -> Outcome:
    """What a call came to: ``error`` is a timeout or connection error, ``status`` the answer.

    No answer at all (an error, or neither an error nor a status) is a failure, as is a
    status in ``failure_statuses`` or :data:`EDGE_FAILURE_STATUSES`; 429 is an overload;
    anything else is a success, or :attr:`Outcome.SLOW` when it took longer than
    ``slow_call_ms``.
    """
    if error is not None or status is None:
        return Outcome.FAILURE
    if status == OVERLOAD_STATUS:
        return Outcome.OVERLOAD
    if status in settings.failure_statuses or status in EDGE_FAILURE_STATUSES:
        return Outcome.FAILURE
    if settings.slow_call_ms is not None and duration_ms > settings.slow_call_ms:
        return Outcome.SLOW
    return Outcome.SUCCESS


# --- the state machine ------------------------------------------------------------------


def open_duration_ms(trips: int, settings: BreakerSettings) -> int:
    """How long the ``trips``-th consecutive trip keeps the breaker open.

    ``open_for * 2**(trips - 1)``, capped at ``max_open_for``; the exponent is bounded first
    so a long outage never builds a huge integer.
    """
    cap = settings.max_open_for_ms
    # Past this many doublings any open_for >= 1 already exceeds the cap.
    exponent = min(max(0, trips - 1), cap.bit_length() + 1)
    return min(cap, settings.open_for_ms << exponent)


def current_phase(state: BreakerState, now: int) -> Phase:
    """The phase a call at ``now`` would see (an open breaker past ``open_until`` is half-open)."""
    if state.phase is Phase.OPEN and now >= state.open_until:
        return Phase.HALF_OPEN
    return state.phase


def allow(
    state: BreakerState, settings: BreakerSettings, now: int
) -> tuple[BreakerDecision, BreakerState]:
    """May a call start at ``now``? The decision and the state to keep.

    Closed: permitted. Open before ``open_until``: refused, ``retry_after_ms`` until then.
    Open at or after ``open_until``: the breaker goes half-open. Half-open: a trial permit
    while fewer than ``half_open_calls`` are out, else refused. An overload pause refuses
    every call until it ends, whatever the phase. A forced breaker does as it is told.
    """
    if state.forced:
        if state.forced == "open":
            return BreakerDecision(None, 0, Refusal.FORCED_OPEN), state
        return BreakerDecision(Permit(False, state.generation)), state
    if now < state.cool_down_until:
        wait = state.cool_down_until - now
        if state.phase is Phase.OPEN and now < state.open_until:
            wait = max(wait, state.open_until - now)
        return BreakerDecision(None, wait, Refusal.OVERLOADED), state
    if state.phase is Phase.CLOSED:
        return BreakerDecision(Permit(False, state.generation)), state
    if state.phase is Phase.OPEN:
        if now < state.open_until:
            return BreakerDecision(None, state.open_until - now, Refusal.OPEN), state
        state = replace(
            state,
            phase=Phase.HALF_OPEN,
            issued=0,
            successes=0,
            trials_expire_at=now + settings.trial_timeout_ms,
            generation=state.generation + 1,
        )
    if state.issued >= settings.half_open_calls:
        if now < state.trials_expire_at:
            wait = state.trials_expire_at - now
            return BreakerDecision(None, wait, Refusal.TRIALS_IN_FLIGHT), state
        # Every permit is out and none came back in time: take back the unreported ones.
        state = replace(state, issued=state.successes)
    state = replace(
        state, issued=state.issued + 1, trials_expire_at=now + settings.trial_timeout_ms
    )
    return BreakerDecision(Permit(True, state.generation)), state


def record(
    state: BreakerState,
    settings: BreakerSettings,
    now: int,
    outcome: Outcome,
    permit: Permit | None = None,
) -> BreakerState:
    """The state after a call that ended at ``now`` with ``outcome``.

    ``permit`` is the permit the call ran under; an outcome from an earlier generation, or
    an ordinary call's outcome arriving while half-open, is stale and ignored. Without a
    permit the outcome applies to the current phase. Outcomes are ignored while open, and
    while half-open with no trial out. An :attr:`Outcome.OVERLOAD` counts neither way; a
    trial that met one hands its permit back. A forced breaker counts nothing.
    """
    if state.phase is Phase.OPEN or state.forced:
        return state
    half_open = state.phase is Phase.HALF_OPEN
    if permit is not None and (permit.generation != state.generation or permit.trial != half_open):
        return state
    if half_open and state.issued <= state.successes:
        return state  # no trial is out, so this is no trial's outcome
    if outcome is Outcome.OVERLOAD:
        if half_open:
            return replace(state, issued=state.issued - 1)
        return state
    failed = outcome is not Outcome.SUCCESS
    if outcome is Outcome.BROKEN:
        if half_open:
            return _trip(state, settings, now)
        # The success the head was counted as was a failure: counted once, as a failure.
        at = state.recent.rfind(_SUCCESS)
        recent = (
            state.recent[:at] + _FAILURE + state.recent[at + 1 :]
            if at >= 0
            else (state.recent + _FAILURE)[-settings.window :]
        )
        return _judged(state, settings, now, recent)
    if half_open:
        if failed:
            return _trip(state, settings, now)
        successes = state.successes + 1
        if successes >= settings.success_threshold:
            return BreakerState(
                cool_down_until=state.cool_down_until, generation=state.generation + 1
            )
        return replace(state, successes=successes)
    recent = (state.recent + _LETTER[outcome])[-settings.window :]
    return _judged(state, settings, now, recent)


def _judged(state: BreakerState, settings: BreakerSettings, now: int, recent: str) -> BreakerState:
    """The closed breaker with ``recent`` as its window: tripped when it fails enough."""
    failures = len(recent) - recent.count(_SUCCESS)
    if len(recent) >= settings.min_calls and failures * 100 >= settings.failure_rate * len(recent):
        return _trip(state, settings, now)
    if recent == state.recent:
        return state  # a full window of successes meeting one more: nothing changes
    return replace(state, recent=recent)


def _trip(state: BreakerState, settings: BreakerSettings, now: int) -> BreakerState:
    trips = state.trips + 1
    return BreakerState(
        phase=Phase.OPEN,
        trips=trips,
        open_until=now + open_duration_ms(trips, settings),
        cool_down_until=state.cool_down_until,
        generation=state.generation + 1,
    )


def force(state: BreakerState, forced: str) -> BreakerState:
    """The breaker forced ``open`` or ``closed`` by an operator, or back to deciding by
    itself (``auto``); raises ``ValueError`` for anything else."""
    if forced not in (*FORCED, "auto"):
        raise ValueError(f"a breaker is forced 'open', 'closed' or 'auto', got {forced!r}")
    wanted = "" if forced == "auto" else forced
    if wanted == state.forced:
        return state
    # A new generation: permits issued before the change decide nothing after it.
    return replace(state, forced=wanted, generation=state.generation + 1)


def overloaded(state: BreakerState, now: int, until_ms: int) -> BreakerState:
    """Skip the origin until ``until_ms`` (from its ``Retry-After``) without counting a failure.

    A pause never shortens one already in force. The caller bounds ``until_ms`` (a hostile
    ``Retry-After`` of a year should not park an origin for a year); :func:`record_many`
    caps it at ``max_open_for``.
    """
    if until_ms <= now or until_ms <= state.cool_down_until:
        return state
    return replace(state, cool_down_until=until_ms)


def record_many(
    state: BreakerState, settings: BreakerSettings, reports: Iterable[Report]
) -> BreakerState:
    """Apply a batch of isolates' reports in time order (each at its own ``at``).

    An overload report also starts a pause of at most ``max_open_for``.
    """
    for report in sorted(reports, key=lambda r: r.at):
        if report.outcome is Outcome.OVERLOAD and report.overloaded_until > report.at:
            until = min(report.overloaded_until, report.at + settings.max_open_for_ms)
            state = overloaded(state, report.at, until)
        state = record(state, settings, report.at, report.outcome, report.permit)
    return state


# --- storage ----------------------------------------------------------------------------


_PHASES = {phase.value: phase for phase in Phase}
_OUTCOMES = {outcome.value: outcome for outcome in Outcome}
_STATE_INTS = (
    "trips",
    "open_until",
    "issued",
    "successes",
    "trials_expire_at",
    "cool_down_until",
    "generation",
)


def encode_state(state: BreakerState) -> dict[str, Any]:
    """The state as a JSON-able dict (zero fields left out, so a quiet breaker stays tiny)."""
    data: dict[str, Any] = {"v": STATE_VERSION, "phase": state.phase.value}
    if state.recent:
        data["recent"] = state.recent
    if state.forced:
        data["forced"] = state.forced
    for name in _STATE_INTS:
        value = getattr(state, name)
        if value:
            data[name] = value
    return data


def decode_state(data: object) -> BreakerState:
    """Inverse of :func:`encode_state`; raises :class:`StateError` on anything else."""
    if not isinstance(data, Mapping) or data.get("v") != STATE_VERSION:
        raise StateError(f"breaker state must be a dict with v={STATE_VERSION}, got {shown(data)}")
    unknown = set(data) - {"v", "phase", "recent", "forced", *_STATE_INTS}
    if unknown:
        raise StateError(f"breaker state has unknown fields {sorted(map(str, unknown))}")
    raw_phase = data.get("phase")
    if not isinstance(raw_phase, str) or raw_phase not in _PHASES:
        raise StateError(f"breaker state has an unknown phase {shown(raw_phase)}")
    phase = _PHASES[raw_phase]
    recent = data.get("recent", "")
    if not isinstance(recent, str) or set(recent) - {_SUCCESS, _FAILURE, _SLOW}:
        raise StateError(f"breaker state has a malformed window {shown(recent)}")
    ints: dict[str, int] = {}
    for name in _STATE_INTS:
        value = data.get(name, 0)
        if not is_int(value) or value < 0:
            raise StateError(f"breaker state field {name} must be an int >= 0, got {shown(value)}")
        ints[name] = int(value)
    if ints["successes"] > ints["issued"]:
        raise StateError("breaker state has more trial successes than trial permits")
    forced = data.get("forced", "")
    if forced not in ("", *FORCED):
        raise StateError(f"breaker state has an unknown forced value {shown(forced)}")
    return BreakerState(phase=phase, recent=recent, forced=str(forced), **ints)


def encode_report(report: Report) -> list[Any]:
    """A report as a short JSON-able list, for the batch an isolate sends."""
    permit: list[Any] | None = None
    if report.permit is not None:
        permit = [report.permit.generation, report.permit.trial]
    return [report.at, report.outcome.value, permit, report.overloaded_until]


def decode_report(data: object) -> Report:
    """Inverse of :func:`encode_report`; raises :class:`StateError` on anything else."""
    if not isinstance(data, (list, tuple)) or len(data) != 4:
        raise StateError(f"a breaker report must be a list of 4 items, got {shown(data)}")
    at, outcome, raw_permit, until = data
    if not is_int(at) or not is_int(until) or at < 0 or until < 0:
        raise StateError(f"a breaker report needs times as ints >= 0, got {shown(data)}")
    if not isinstance(outcome, str) or outcome not in _OUTCOMES:
        raise StateError(f"a breaker report has an unknown outcome {shown(outcome)}")
    parsed = _OUTCOMES[outcome]
    permit = None
    if raw_permit is not None:
        if (
            not isinstance(raw_permit, (list, tuple))
            or len(raw_permit) != 2
            or not is_int(raw_permit[0])
            or not isinstance(raw_permit[1], bool)
        ):
            raise StateError(f"a breaker report has a malformed permit {shown(raw_permit)}")
        permit = Permit(bool(raw_permit[1]), int(raw_permit[0]))
    return Report(int(at), parsed, permit, int(until))
