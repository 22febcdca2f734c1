"""Durations in config: ``"250ms"``, ``"30s"``, ``"5m"``, ``"24h"``, ``"7d"``, ``"1h30m"``.

A duration is one or more ``<digits><unit>`` parts (units ``ms``, ``s``, ``m``, ``h``,
``d``), largest unit first, with no spaces. The result is integer milliseconds, like every
time in the core.
"""

from __future__ import annotations

import re

from .errors import DurationError

_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PART_RE = re.compile(r"(\d{1,12})(ms|s|m|h|d)", re.ASCII)
_WHOLE_RE = re.compile(r"^(?:\d{1,12}(?:ms|s|m|h|d))+$", re.ASCII)


def parse_duration(text: object, *, minimum_ms: int = 0, maximum_ms: int | None = None) -> int:
    """``text`` in milliseconds; raises :class:`DurationError` naming what is wrong."""
    if not isinstance(text, str):
        raise DurationError(f"must be a duration string like '30s' or '5m', got {text!r}")
    if not _WHOLE_RE.fullmatch(text):
        suggested = _suggest(text)
        hint = f"; did you mean {suggested!r}?" if suggested else ""
        raise DurationError(
            f"cannot parse duration {text!r}: expected parts like '250ms', '30s', '5m', "
            f"'24h', '7d' (e.g. '1h30m'){hint}"
        )
    total = 0
    last_unit = None
    for digits, unit in _PART_RE.findall(text):
        unit_ms = _UNIT_MS[unit]
        if last_unit is not None and unit_ms >= last_unit:
            raise DurationError(f"cannot parse duration {text!r}: put larger units first")
        last_unit = unit_ms
        total += int(digits) * unit_ms
    if total < minimum_ms:
        raise DurationError(f"duration {text!r} is shorter than {format_duration(minimum_ms)}")
    if maximum_ms is not None and total > maximum_ms:
        raise DurationError(f"duration {text!r} is longer than {format_duration(maximum_ms)}")
    return total


_WORDS = {
    "milliseconds": "ms", "millisecond": "ms", "msec": "ms", "msecs": "ms",
    "seconds": "s", "second": "s", "secs": "s", "sec": "s",
    "minutes": "m", "minute": "m", "mins": "m", "min": "m",
    "hours": "h", "hour": "h", "hrs": "h", "hr": "h",
    "days": "d", "day": "d",
    "weeks": "w", "week": "w", "w": "w",
}  # fmt: skip
_LOOSE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)", re.ASCII)


def _suggest(text: str) -> str | None:
    """The duration a loosely written ``text`` most likely means ('1.5s', '10min', '1w',
    '1m 30s', '5 minutes'), written the way :func:`parse_duration` reads; ``None`` if
    none."""
    loose = text.strip().lower()
    parts = _LOOSE_RE.findall(loose)
    if not parts or _LOOSE_RE.sub("", loose).strip(" ,"):
        return None
    total = 0.0
    for number, word in parts:
        unit = _WORDS.get(word, word)
        if unit == "w":
            total += float(number) * 7 * _UNIT_MS["d"]
        elif unit in _UNIT_MS:
            total += float(number) * _UNIT_MS[unit]
        else:
            return None
    if total < 1 or total != int(total) or total > _MOST_SUGGESTED_MS:
        return None
    return format_duration(int(total))


#: No suggestion for a duration longer than this (a year): it is not what was meant.
_MOST_SUGGESTED_MS = 366 * 86_400_000


def format_duration(ms: int) -> str:
    """The shortest string :func:`parse_duration` reads back as ``ms``: ``90000`` -> ``1m30s``."""
    if ms == 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        count, ms = divmod(ms, _UNIT_MS[unit])
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
