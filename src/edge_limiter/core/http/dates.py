"""HTTP-dates (RFC 9110 section 5.6.7), read strictly and without a clock.

IMF-fixdate (``Sun, 06 Nov 1994 08:49:37 GMT``) and the two obsolete forms a recipient
must still accept (RFC 850 and asctime). Anything else is not a date: the callers decide
what that means (an unusable ``Retry-After``, an ignored ``If-Modified-Since``).
"""

from __future__ import annotations

import re
from datetime import date

# RFC 9110 section 5.6.7: IMF-fixdate, plus the obsolete RFC 850 and asctime forms a
# recipient must still accept. Day names are checked for spelling, not for consistency.
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_LONG_DAY = r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_MONTH = r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = r"(\d\d:\d\d:\d\d)"
_IMF_FIXDATE = re.compile(rf"{_DAY}, (\d\d) {_MONTH} (\d{{4}}) {_TIME} GMT", re.ASCII)
_RFC850_DATE = re.compile(rf"{_LONG_DAY}, (\d\d)-{_MONTH}-(\d\d) {_TIME} GMT", re.ASCII)
_ASCTIME_DATE = re.compile(rf"{_DAY} {_MONTH} ([ \d]\d) {_TIME} (\d{{4}})", re.ASCII)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MS_PER_DAY = 86_400_000
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_LAST_ORDINAL = date.max.toordinal()


def http_date_ms(text: str, now_ms: int) -> int | None:
    """An HTTP-date as ms since the epoch, or ``None`` when ``text`` is not one.

    ``now_ms`` places an RFC 850 date's two-digit year (within 50 years of it).
    """
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
