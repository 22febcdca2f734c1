"""How long to wait before a retry: exponential backoff with full jitter, and ``Retry-After``.

Full jitter draws the whole delay at random from ``[0, min(cap, base * 2**attempt)]``, so
clients that failed together spread their retries out instead of retrying in lockstep.
The random source is an argument (a callable returning a float in ``[0, 1)``, such as
``random.Random(seed).random``); nothing here reads a clock or sleeps.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..http.dates import http_date_ms

#: A delay longer than this (about 31,700 years) is clamped: still an int JavaScript holds exactly.
MAX_DELAY_MS = 10**15

_DELAY_SECONDS = re.compile(r"\d+", re.ASCII)


def backoff_ceiling_ms(attempt: int, base_ms: int, cap_ms: int) -> int:
    """``min(cap_ms, base_ms * 2**attempt)``, without building a huge number for a large attempt."""
    if attempt < 0 or base_ms < 0 or cap_ms < 0:
        raise ValueError(f"attempt, base and cap must be >= 0, got {attempt}, {base_ms}, {cap_ms}")
    # base >= 1 shifted past the cap's bit length is already above the cap.
    shift = min(attempt, cap_ms.bit_length() + 1)
    return min(cap_ms, base_ms << shift)


def full_jitter_ms(attempt: int, base_ms: int, cap_ms: int, random: Callable[[], float]) -> int:
    """A delay drawn uniformly from the integers ``0 .. min(cap_ms, base_ms * 2**attempt)``.

    ``attempt`` counts retries from 0 (the wait before the second attempt). ``random``
    returns a float in ``[0, 1)``; a value outside that range is clamped, so a bad source
    can skew the spread but never produce a delay outside it.
    """
    ceiling = backoff_ceiling_ms(attempt, base_ms, cap_ms)
    fraction = random()
    if not fraction >= 0.0:  # also catches NaN
        fraction = 0.0
    return min(ceiling, int(min(fraction, 1.0) * (ceiling + 1)))


def parse_retry_after(value: str | None, now_ms: int) -> int | None:
    """The wait a ``Retry-After`` field asks for, in ms from ``now_ms``; ``None`` if unusable.

    RFC 9110 section 10.2.3: delay-seconds (``"120"``) or an HTTP-date. A date in the past
    is a wait of 0; anything malformed (a sign, a fraction, a bad date) is ``None``. The
    result is clamped to :data:`MAX_DELAY_MS`.
    """
    if value is None:
        return None
    text = value.strip(" \t")
    if _DELAY_SECONDS.fullmatch(text):
        # Beyond 15 digits the value is far above the clamp; do not parse a huge number.
        seconds = int(text) if len(text) <= 15 else MAX_DELAY_MS
        return min(MAX_DELAY_MS, seconds * 1000)
    at = http_date_ms(text, now_ms)
    if at is None:
        return None
    return min(MAX_DELAY_MS, max(0, at - now_ms))


def retry_delay_ms(
    attempt: int,
    base_ms: int,
    cap_ms: int,
    random: Callable[[], float],
    retry_after_ms: int | None = None,
) -> int:
    """The wait before retry number ``attempt`` (from 0): full jitter, but at least ``Retry-After``.

    When the origin sent ``Retry-After`` the wait is never shorter than it asked; whether a
    wait that long still fits the request's deadline is the caller's decision.
    """
    jitter = full_jitter_ms(attempt, base_ms, cap_ms, random)
    if retry_after_ms is None:
        return jitter
    return max(jitter, retry_after_ms)
