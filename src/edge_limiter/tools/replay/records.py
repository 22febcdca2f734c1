"""One logged request as the replay sends it, and the times logs write.

A reader (:mod:`.formats`) turns each line into a :class:`LogRecord`: when the request
came, what it asked for, from where, what the origin answered, and which fields the log
kept (a key made of a field the log did not keep cannot be known: :mod:`.driver` reports
it rather than guess).
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

#: Fields every reader can fill (besides the request's own headers, each by name).
IP, COUNTRY, ASN, COOKIE = "ip", "country", "asn", "cookie"


class LogRecord:
    """One request of a log."""

    __slots__ = ("asn", "at_ms", "country", "headers", "host", "ip", "kept", "method",
                 "number", "scheme", "status", "target")  # fmt: skip

    def __init__(
        self,
        at_ms: int,
        method: str,
        target: str,
        *,
        host: str = "",
        scheme: str = "https",
        ip: str = "",
        status: int = 200,
        headers: tuple[tuple[str, str], ...] = (),
        country: str = "",
        asn: str = "",
        kept: frozenset[str] = frozenset(),
        number: int = 0,
    ) -> None:
        self.at_ms = at_ms
        self.method = method
        self.target = target
        """The path and query as the request line had them (``/v1/x?a=1``)."""
        self.host = host
        """The host the client asked for ("" when the log does not say)."""
        self.scheme = scheme
        self.ip = ip
        self.status = status
        """What the origin answered (the status the log recorded)."""
        self.headers = headers
        self.country = country
        self.asn = asn
        self.kept = kept
        """What the log keeps of a request besides its line: :data:`IP`, :data:`COUNTRY`,
        :data:`ASN` and header names in lower case (a header absent from ``headers`` but
        kept was not sent)."""
        self.number = number
        """The line's number in its file (from 1)."""

    def __repr__(self) -> str:
        return f"LogRecord({self.at_ms}, {self.method} {self.host}{self.target}, ip={self.ip})"


_MONTHS = {name: number for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}  # fmt: skip
#: ``10/Oct/2000:13:55:36 -0700`` (nginx's $time_local, Apache's %t without brackets).
_CLF_TIME = re.compile(
    r"(\d{2})/([A-Z][a-z]{2})/(\d{4}):(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))? ([+-])(\d{2})(\d{2})"
)
#: Epoch numbers by their size: seconds, milliseconds, microseconds, nanoseconds.
_SECONDS_BELOW, _MILLIS_BELOW, _MICROS_BELOW = 10**11, 10**14, 10**17


def clf_time_ms(text: str) -> int | None:
    """Epoch milliseconds of a common-log-format time (None when it is not one)."""
    found = _CLF_TIME.fullmatch(text)
    if found is None:
        return None
    day, month_name, year, hour, minute, second, fraction, sign, oh, om = found.groups()
    month = _MONTHS.get(month_name)
    if month is None:
        return None
    try:
        moment = datetime(int(year), month, int(day), int(hour), int(minute), int(second),
                          tzinfo=UTC)  # fmt: skip
    except ValueError:
        return None
    offset = (int(oh) * 60 + int(om)) * 60_000
    millis = int(moment.timestamp()) * 1000 + (int(fraction[:3].ljust(3, "0")) if fraction else 0)
    return millis - offset if sign == "+" else millis + offset


def epoch_number_ms(value: float) -> int:
    """Epoch milliseconds of a number in seconds, ms, µs or ns (told apart by size: a
    time after 1973 in seconds is over 10^8, and before 5138 under 10^11)."""
    magnitude = abs(value)
    if magnitude < _SECONDS_BELOW:
        return round(value * 1000)
    if magnitude < _MILLIS_BELOW:
        return round(value)
    if magnitude < _MICROS_BELOW:
        return round(value / 1000)
    return round(value / 1_000_000)


#: RFC 3339 with any fraction (Python 3.11's fromisoformat takes at most 6 digits).
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:?\d{2})?"
)


def time_ms(value: object) -> int | None:
    """Epoch milliseconds of a logged time: a number (seconds, ms, µs or ns since the
    epoch, as a number or digits), an RFC 3339 / ISO 8601 time (UTC unless it says), or a
    common-log-format time. None when it is none of these."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return epoch_number_ms(value) if math.isfinite(value) and abs(value) < 1e20 else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if text[0].isdigit() and len(text) > 4 and text[4] != "-":
        if text.isdigit():
            return epoch_number_ms(int(text))
        try:
            return epoch_number_ms(float(text))
        except ValueError:
            return clf_time_ms(text)
    found = _RFC3339.fullmatch(text)
    if found is None:
        return None
    date, clock, fraction, zone = found.groups()
    try:
        moment = datetime.fromisoformat(f"{date}T{clock}")
    except ValueError:
        return None
    millis = int(moment.replace(tzinfo=UTC).timestamp()) * 1000
    if fraction:
        millis += int(fraction[:3].ljust(3, "0"))
    if zone and zone not in "Zz":
        sign = -1 if zone[0] == "+" else 1
        digits = zone[1:].replace(":", "")
        millis += sign * (int(digits[:2]) * 60 + int(digits[2:])) * 60_000
    return millis
