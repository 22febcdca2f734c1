"""The schema of a pool's ``breaker`` and a ``retry`` table, and their parsers.

Both have one shape: every field checked by the schema (:meth:`Reader.settings`), then
the few rules between fields, then the settings object. A missing table is all defaults;
a bad field is reported and takes its default, so the result is always usable.
"""

from __future__ import annotations

from ..durations import format_duration
from ..resilience.breaker import (
    DEFAULT_FAILURE_RATE,
    DEFAULT_FAILURE_STATUSES,
    DEFAULT_HALF_OPEN_CALLS,
    DEFAULT_MAX_OPEN_FOR_MS,
    DEFAULT_MIN_CALLS,
    DEFAULT_OPEN_FOR_MS,
    DEFAULT_SUCCESS_THRESHOLD,
    DEFAULT_TRIAL_TIMEOUT_MS,
    DEFAULT_WINDOW,
    MAX_HALF_OPEN_CALLS,
    MAX_OPEN_FOR_MS,
    MAX_SLOW_CALL_MS,
    MAX_TRIAL_TIMEOUT_MS,
    MAX_WINDOW,
    OVERLOAD_STATUS,
    BreakerSettings,
)
from ..resilience.budget import DEFAULT_BUCKET_MS, DEFAULT_WINDOW_MS
from ..resilience.retry import (
    DEFAULT_ATTEMPTS,
    DEFAULT_BASE_MS,
    DEFAULT_BUDGET_RATIO,
    DEFAULT_CAP_MS,
    DEFAULT_MIN_PER_SECOND,
    MAX_ATTEMPTS,
    MAX_BACKOFF_MS,
    MAX_BUDGET_WINDOW_MS,
    MAX_MIN_PER_SECOND,
    RetrySettings,
)
from ..validation import Problems, shown
from .fields import Duration, Flag, Integer, Number, Ref, Statuses
from .table import Table

# fmt: off
BREAKER = Table("breaker", (
    "How a pool's origins trip and recover, each origin with a breaker of its own (closed, "
    "open, half-open), shared by every route to it and, through a Durable Object, by every "
    "isolate."
), (
    Integer("failure_rate", 1, 100, default=DEFAULT_FAILURE_RATE, unit="percent", example=25,
            doc="The share of failures among the last `window` calls that opens the breaker. "
                "Failures are timeouts, connection errors, `failure_statuses`, Cloudflare's own "
                "520-526, and calls slower than `slow_call` when it is set."),
    Integer("window", 1, MAX_WINDOW, default=DEFAULT_WINDOW, unit="calls", example=50,
            doc="How many of the latest calls the closed breaker judges by."),
    Integer("min_calls", 1, Ref("window"), default=DEFAULT_MIN_CALLS, unit="calls", example=5,
            doc="The fewest calls in the window before the breaker may open (the default is at "
                "most `window`)."),
    Duration("slow_call", 1, MAX_SLOW_CALL_MS, default_text="off", example="2s",
             doc="A success slower than this counts as a failure; it must be shorter than the "
                 "pool's longest origin `timeout` to count at all."),
    Duration("open_for", 1, MAX_OPEN_FOR_MS, default=DEFAULT_OPEN_FOR_MS, example="30s",
             doc="How long an open breaker skips its origin, doubled with each consecutive trip "
                 "up to `max_open_for`."),
    Duration("max_open_for", Ref("open_for"), MAX_OPEN_FOR_MS, default=DEFAULT_MAX_OPEN_FOR_MS,
             example="10m",
             doc="The longest an open breaker skips its origin, however often it tripped (the "
                 "default is at least `open_for`)."),
    Integer("half_open_calls", 1, MAX_HALF_OPEN_CALLS, default=DEFAULT_HALF_OPEN_CALLS,
            unit="calls", example=5,
            doc="How many trial calls go through once `open_for` has passed (at most that many "
                "at once per isolate; the others are turned away meanwhile)."),
    Integer("success_threshold", 1, Ref("half_open_calls"), default=DEFAULT_SUCCESS_THRESHOLD,
            unit="calls", example=1,
            doc="How many successful trials close the breaker; any failed trial opens it again, "
                "for longer (the default is at most `half_open_calls`)."),
    Duration("trial_timeout", 1, MAX_TRIAL_TIMEOUT_MS, default=DEFAULT_TRIAL_TIMEOUT_MS,
             default_text='"30s", or a second past the longest origin timeout', example="45s",
             doc="When a trial whose outcome never came back (its isolate went away) stops "
                 "counting. It must be longer than every origin `timeout` of the pool."),
    Statuses("failure_statuses", minimum=400, maximum=599, excluded=frozenset({OVERLOAD_STATUS}),
             repeats_refused=True, null_is_absent=True, default=DEFAULT_FAILURE_STATUSES,
             rule="a list of HTTP statuses 400..599 other than 429 (a 429 is the origin's answer "
                  "to that client, or an overload with pause_on_429: never a failure)",
             example=[500, 502, 503, 504],
             doc="The origin's own answers that count as failures. A 429 never does: it is the "
                 "origin's answer to that client (see `pause_on_429`)."),
    Flag("pause_on_429", default=False, example=True,
         doc="Whether a 429 means the whole origin is overloaded: it is then skipped, in every "
             "isolate, until its `Retry-After` (at most 5 minutes; 1 s without one), and the "
             "request is retried on the next origin. Off, a 429 is the origin's answer to that "
             "client, passed on, holding no other client back."),
))

RETRY = Table("retry", (
    "How requests that failed at an origin are sent again: only idempotent ones (GET, HEAD, "
    "OPTIONS, PUT, DELETE, TRACE, or one holding an Idempotency-Key claim), each to the next "
    "origin after a full-jitter backoff `uniform(0, min(cap, base * 2**n))`, within the "
    "route's `timeout` and the pool's retry budget."
), (
    Integer("attempts", 1, MAX_ATTEMPTS, default=DEFAULT_ATTEMPTS, example=2,
            doc="Every attempt, the first included (1: never retry)."),
    Duration("base", 1, MAX_BACKOFF_MS, default=DEFAULT_BASE_MS, example="50ms",
             doc="The backoff's base: the n-th retry waits a random time up to "
                 "`min(cap, base * 2**n)`."),
    Duration("cap", 1, MAX_BACKOFF_MS, default=DEFAULT_CAP_MS,
             default_text='"2s", or `base` when longer', example="1s",
             doc="The longest wait between attempts; at least `base`."),
    Number("budget", 0, 1, default=DEFAULT_BUDGET_RATIO, unit="share", attr="budget_ratio",
           rule="a number 0..1 (the share of requests that may be retried)", example=0.1,
           doc="Retries are at most this share of the requests of the last `budget_window`, "
               "plus `min_per_second`, so an outage cannot multiply load."),
    Integer("min_per_second", 0, MAX_MIN_PER_SECOND, default=DEFAULT_MIN_PER_SECOND,
            unit="retries", example=5,
            doc="A floor of retries for each second of the budget's window, so a quiet route "
                "can still retry: a reserve over the window, as in Finagle's retry budget "
                "(after a quiet spell, 1 lets up to 10 retries go at once)."),
    Duration("budget_window", DEFAULT_BUCKET_MS, MAX_BUDGET_WINDOW_MS, default=DEFAULT_WINDOW_MS,
             example="20s",
             doc="The window the retry budget counts requests and retries over; whole seconds."),
))
# fmt: on


def parse_breaker(raw: object, where: str, problems: Problems) -> BreakerSettings:
    """The breaker table at ``where`` (``None``: all defaults); problems are recorded, never raised."""
    got = None if raw is None else BREAKER.read(raw, where, problems)
    if got is None:
        return BreakerSettings()
    return BreakerSettings(**got.settings())


def parse_retry(raw: object, where: str, problems: Problems) -> RetrySettings:
    """The retry table at ``where`` (``None``: all defaults); problems are recorded, never raised.

    ``retry = { attempts = 3, base = "100ms", cap = "2s", budget = 0.2, min_per_second = 1,
    budget_window = "10s" }``. A bad field is reported and replaced by its default.
    """
    got = None if raw is None else RETRY.read(raw, where, problems)
    if got is None:
        return RetrySettings()
    values = got.settings()
    base = values["base_ms"]
    if not got.given("cap") or got.refused("cap"):
        values["cap_ms"] = max(values["cap_ms"], base)
    elif values["cap_ms"] < base:
        problems.add(
            f"{where}.cap",
            f"must be at least base ({format_duration(base)}): the longest wait between "
            f"attempts, got {shown(got.raw.get('cap'))}",
        )
        values["cap_ms"] = base
    if values["budget_window_ms"] % DEFAULT_BUCKET_MS:
        problems.add(
            f"{where}.budget_window",
            f"must be whole seconds, got {shown(got.raw['budget_window'])}",
        )
        values["budget_window_ms"] = DEFAULT_WINDOW_MS
    attempts = values["attempts"]
    if attempts > 1 and values["budget_ratio"] == 0 and values["min_per_second"] == 0:
        problems.warn(
            where,
            "no retry can ever run: budget = 0 and min_per_second = 0 allow none (write "
            "attempts = 1 to send each request once)",
        )
    spacing = [name for name in RETRY.names if name != "attempts" and name in got.raw]
    if attempts == 1 and spacing:
        problems.warn(
            f"{where}.{spacing[0]}",
            f"has no effect: attempts = 1 sends each request once (there are no retries "
            f"for {', '.join(spacing)} to shape)",
        )
    return RetrySettings(**values)
