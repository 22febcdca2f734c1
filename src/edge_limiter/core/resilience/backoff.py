"""How long to wait before a retry: exponential backoff with full jitter, and ``Retry-After``.

Full jitter draws the whole delay at random from ``[0, min(cap, base * 2**attempt)]``, so
clients that failed together spread their retries out instead of retrying in lockstep.
The random source is an argument (a callable returning a float in ``[0, 1)``, such as
``random.Random(seed).random``); nothing here reads a clock or sleeps.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date

#: A delay longer than this (about 31,700 years) is clamped: still an int JavaScript holds exactly.
MAX_DELAY_MS = 10**15

# RFC 9110 section 5.6.7: IMF-fixdate, plus the obsolete RFC 850 and asctime forms a
# recipient must still accept. Day names are checked for spelling, not for consistency.
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_LONG_DAY = r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_MONTH = r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = r"(\d\d:\d\d:\d\d)"
_IMF_FIXDATE = re.compile(rf"{_DAY}, (\d\d) {_MONTH} (\d{{4}}) {_TIME} GMT", re.ASCII)
_RFC850_DATE = re.compile(rf"{_LONG_DAY}, (\d\d)-{_MONTH}-(\d\d) {_TIME} GMT", re.ASCII)
_ASCTIME_DATE = re.compile(rf"{_DAY} {_MONTH} ([ \d]\d) {_TIME} (\d{{4}})", re.ASCII)
_DELAY_SECONDS = re.compile(r"\d+", re.ASCII)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MS_PER_DAY = 86_400_000
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_LAST_ORDINAL = date.max.toordinal()


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
    at = _http_date_ms(text, now_ms)
    if at is None:
        return None
    return min(MAX_DELAY_MS, max(0, at - now_ms))


def _http_date_ms(text: str, now_ms: int) -> int | None:
    """An HTTP-date as ms since the epoch, or ``None``."""
    match = _IMF_FIXDATE.fullmatch(text)
    if match:
        day, month, year, clock = match.groups()
        return _epoch_ms(int(year), month, int(day), clock)
    match = _RFC850_DATE.fullmatch(text)
    if match:
        day, month, short_year, clock = match.groups()
        return _epoch_ms(_full_year(int(short_year), now_ms), month, int(day), clock)
    match = _ASCTIME_DATE.fullmatch(text)
    if match:
        month, day, clock, year = match.groups()
        return _epoch_ms(int(year), month, int(day.strip()), clock)
    return None


def _full_year(short_year: int, now_ms: int) -> int:
    """The year within 50 years of ``now_ms`` that ends in ``short_year``.

    RFC 9110: a two-digit year that would be more than 50 years ahead is the most recent
    past year with the same digits; so the century is the one that lands in the 100 years
    ending 50 years from now.
    """
    this_year = _year_of(now_ms)
    year = this_year - this_year % 100 + short_year
    if year > this_year + 50:
        year -= 100
    elif year <= this_year - 50:
        year += 100
    return year


def _year_of(ms: int) -> int:
    """The UTC calendar year of an epoch time (clamped to years 1..9999), without a clock."""
    ordinal = _EPOCH_ORDINAL + ms // _MS_PER_DAY
    return date.fromordinal(min(max(1, ordinal), _LAST_ORDINAL)).year


def _epoch_ms(year: int, month: str, day: int, clock: str) -> int | None:
    """The instant (``clock`` is ``"HH:MM:SS"``) as ms since the epoch, or ``None`` if impossible."""
    try:
        # ``date`` checks the day against the month's length (years 1..9999).
        days = date(year, _MONTHS.index(month) + 1, day).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        return None
    hour, minute, second = (int(part) for part in clock.split(":"))
    if hour > 23 or minute > 59 or second > 60:
        return None
    # A leap second (":60") is read as the last second of its minute.
    return days * _MS_PER_DAY + ((hour * 60 + minute) * 60 + min(second, 59)) * 1000


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
