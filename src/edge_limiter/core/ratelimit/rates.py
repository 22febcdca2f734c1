"""Rate strings: ``"5/minute"``, ``"100 per 10 seconds"``, ``"10/s"``, ``"1000/hour; 10000/day"``.

Several limits are separated by ``;`` (or ``,`` or ``|``, as the ``limits`` library
writes them). Units: second, minute, hour, day, week; a calendar month or year has no
fixed length, so ``"10000 per 30 days"`` says which one is meant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import RateParseError

SECOND_MS = 1_000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

_UNITS: dict[str, int] = {}
for _names, _ms in (
    (("s", "sec", "secs", "second", "seconds"), SECOND_MS),
    (("m", "min", "mins", "minute", "minutes"), MINUTE_MS),
    (("h", "hr", "hrs", "hour", "hours"), HOUR_MS),
    (("d", "day", "days"), DAY_MS),
    (("w", "wk", "wks", "week", "weeks"), 7 * DAY_MS),
):
    for _name in _names:
        _UNITS[_name] = _ms

_UNIT_WORDS = {SECOND_MS: "second", MINUTE_MS: "minute", HOUR_MS: "hour", DAY_MS: "day"}

# "<quota> (/|per) [<count>] <unit>", with free spacing: "10/s", "100 per 10 seconds".
_RATE_RE = re.compile(
    r"^\s*(?P<quota>\d+)\s*(?:/|\s+per\s+)\s*(?:(?P<count>\d+)\s*)?(?P<unit>[a-z]+)\s*$",
    # ASCII only: otherwise \d takes fullwidth or Arabic-Indic digits, which int() accepts.
    re.IGNORECASE | re.ASCII,
)

#: Between the limits of one string: ``;``, or ``,`` and ``|`` as the ``limits`` library has it.
_SEPARATORS = re.compile(r"[;,|]")

# Longer than any valid number, far shorter than the digits int() refuses to convert.
_MAX_DIGITS = 15

#: Upper bounds that keep integer arithmetic far from any overflow in JS interop.
MAX_QUOTA = 1_000_000_000
MAX_WINDOW_MS = 366 * DAY_MS


@dataclass(frozen=True, slots=True)
class Rate:
    """``quota`` requests (or cost units) per ``window_ms`` milliseconds."""

    quota: int
    window_ms: int
    name: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.quota <= MAX_QUOTA:
            raise RateParseError(f"quota must be between 1 and {MAX_QUOTA}, got {self.quota}")
        if not 1 <= self.window_ms <= MAX_WINDOW_MS:
            raise RateParseError(
                f"window must be between 1 ms and {MAX_WINDOW_MS} ms, got {self.window_ms}"
            )
        if not self.name:
            object.__setattr__(self, "name", default_policy_name(self.quota, self.window_ms))

    @property
    def window_seconds(self) -> int:
        """The window in whole seconds, rounded up (what the HTTP headers carry)."""
        return -(-self.window_ms // SECOND_MS)

    def __str__(self) -> str:
        return f"{self.quota} per {describe_window(self.window_ms)}"


@dataclass(frozen=True, slots=True)
class Limit:
    """One limit of a route: a :class:`Rate` and, for the bucket-shaped algorithms, a burst.

    ``burst`` is the bucket size (how much may pass at once); ``None`` means the quota.
    What the HTTP fields advertise is what the limit really admits from a fresh state:
    ``capacity`` units, refilled completely in ``policy_window_ms``.
    """

    rate: Rate
    burst: int | None = None
    name: str = ""
    algorithm: str = ""
    """This limit's own algorithm (a route may mix them); empty: the route's."""

    def __post_init__(self) -> None:
        if self.burst is not None and not 1 <= self.burst <= MAX_QUOTA:
            raise RateParseError(f"burst must be between 1 and {MAX_QUOTA}, got {self.burst}")
        if not self.name:
            name = self.rate.name
            if self.burst is not None and self.burst != self.rate.quota:
                name = f"{name}-burst-{self.burst}"
            object.__setattr__(self, "name", name)

    @property
    def capacity(self) -> int:
        """The most that passes at one instant: the burst, or the quota."""
        return self.rate.quota if self.burst is None else self.burst

    @property
    def policy_window_ms(self) -> int:
        """How long a drained limit takes to admit its whole capacity again."""
        quota, window = self.rate.quota, self.rate.window_ms
        if self.burst is None or self.burst == quota:
            return window
        return -(-self.burst * window // quota)

    @property
    def policy_window_seconds(self) -> int:
        """:attr:`policy_window_ms` in whole seconds, rounded up (at least 1)."""
        return max(1, -(-self.policy_window_ms // SECOND_MS))

    def __str__(self) -> str:
        if self.burst is None or self.burst == self.rate.quota:
            return str(self.rate)
        return f"{self.rate}, burst {self.burst}"


def describe_window(window_ms: int) -> str:
    """``60000`` -> ``"minute"``, ``600000`` -> ``"10 minutes"``, ``1500`` -> ``"1500 ms"``."""
    for unit_ms in (DAY_MS, HOUR_MS, MINUTE_MS, SECOND_MS):
        if window_ms % unit_ms == 0:
            count = window_ms // unit_ms
            word = _UNIT_WORDS[unit_ms]
            return word if count == 1 else f"{count} {word}s"
    return f"{window_ms} ms"


def default_policy_name(quota: int, window_ms: int) -> str:
    """A stable policy name for the IETF headers: ``"10-per-second"``, ``"100-per-10-minutes"``."""
    return f"{quota}-per-{describe_window(window_ms).replace(' ', '-')}"


def parse_rate(text: object) -> Rate:
    """Parse one rate such as ``"5/minute"`` or ``"100 per 10 seconds"``."""
    if not isinstance(text, str):
        given = "nothing" if text is None else repr(text)
        raise RateParseError(f"a rate must be a string like '10/second', got {given}")
    match = _RATE_RE.match(text)
    if match is None:
        raise RateParseError(
            f"cannot parse rate {text!r}: expected '<count>/<unit>' or "
            "'<count> per [<n>] <unit>', e.g. '10/second' or '100 per 10 minutes'"
        )
    if match.group("unit") == "M":
        raise RateParseError(
            f"cannot parse rate {text!r}: 'M' could mean a month or a minute; write "
            "'minute', or for a month the window in days, e.g. '10000 per 30 days'"
        )
    unit = match.group("unit").lower()
    unit_ms = _UNITS.get(unit)
    if unit_ms is None and unit.rstrip("s") in ("month", "mo", "year", "yr", "y"):
        raise RateParseError(
            f"cannot parse rate {text!r}: a calendar {match.group('unit')!r} has no fixed "
            "length; give the window in days, e.g. '10000 per 30 days'"
        )
    if unit_ms is None:
        raise RateParseError(
            f"cannot parse rate {text!r}: unknown unit {match.group('unit')!r} "
            "(use second, minute, hour, day or week)"
        )
    for digits in (match.group("quota"), match.group("count") or ""):
        if len(digits) > _MAX_DIGITS:
            raise RateParseError(
                f"cannot parse rate {text!r}: a number has more than {_MAX_DIGITS} digits"
            )
    quota = int(match.group("quota"))
    count = int(match.group("count")) if match.group("count") is not None else 1
    if quota < 1:
        raise RateParseError(f"cannot parse rate {text!r}: the count must be at least 1")
    if count < 1:
        raise RateParseError(f"cannot parse rate {text!r}: the window must be at least 1 unit")
    try:
        return Rate(quota, count * unit_ms)
    except RateParseError as exc:
        raise RateParseError(f"cannot parse rate {text!r}: {exc}") from exc


def parse_rates(text: str) -> tuple[Rate, ...]:
    """Parse ``"10/second; 1000/hour"`` (or ``","``, ``"|"``) into one :class:`Rate` per limit.

    Duplicate windows are refused: two limits over the same window would make one of
    them meaningless and their policy names collide.
    """
    if not isinstance(text, str):
        raise RateParseError(f"limits must be a string like '10/second; 1000/hour', got {text!r}")
    parts = _SEPARATORS.split(text)
    if not text.strip():
        raise RateParseError(f"cannot parse rates {text!r}: no limit given")
    if re.search(r"\d,\d{3}\b", text):
        raise RateParseError(
            f"cannot parse rates {text!r}: ',' separates limits; write counts without a "
            "thousands separator, e.g. '1000/hour'"
        )
    rates: list[Rate] = []
    for part in parts:
        if not part.strip():
            raise RateParseError(f"cannot parse rates {text!r}: an empty limit between separators")
        try:
            rates.append(parse_rate(part.strip()))
        except RateParseError as exc:
            # Quote the whole input, not only the part: that is what the user wrote.
            raise RateParseError(f"cannot parse rates {text!r}: {exc}") from exc
    seen: dict[int, Rate] = {}
    for rate in rates:
        if rate.window_ms in seen:
            raise RateParseError(
                f"cannot parse rates {text!r}: two limits over the same window "
                f"({seen[rate.window_ms]} and {rate})"
            )
        seen[rate.window_ms] = rate
    return tuple(rates)
