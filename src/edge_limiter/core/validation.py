"""Collecting config problems, so one error names every one of them with its place."""

from __future__ import annotations

import datetime
import difflib
import reprlib
from collections.abc import Mapping
from typing import Any, TypeGuard


class _TomlRepr(reprlib.Repr):
    """Values as a config writes them: ``true``, not Python's ``True``."""

    def repr_bool(self, value: bool, level: int) -> str:
        return "true" if value else "false"

    def repr_NoneType(self, value: None, level: int) -> str:
        # The field itself (a JSON config's null, or a required field left out), or null
        # inside a list or table of one.
        return "nothing (missing or null)" if level == self.maxlevel else "null"


_SHOWN = _TomlRepr()
_SHOWN.maxlevel = 3
_SHOWN.maxstring = 80
_SHOWN.maxother = 80
_SHOWN.maxlist = _SHOWN.maxdict = _SHOWN.maxtuple = 6


def shown(value: object) -> str:
    """``repr(value)`` cut to a readable size: config values can be huge or nested deeply.
    A TOML date or time is shown as written, not as Python's repr of it."""
    if isinstance(value, datetime.date | datetime.time):
        return f"{value.isoformat()} (a TOML date or time)"
    return _SHOWN.repr(value)


class Problems:
    """Problems found so far, each ``"<where>: <message>"``; warnings beside them."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.warnings: list[str] = []

    def add(self, where: str, message: str) -> None:
        """Record a problem at ``where`` (e.g. ``"route 'login'.cache.ttl"``)."""
        self.items.append(f"{where}: {message}")

    def warn(self, where: str, message: str) -> None:
        """Record something legal but probably not meant."""
        self.warnings.append(f"{where}: {message}")

    def __len__(self) -> int:
        return len(self.items)


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool (TOML and JSON both have real booleans)."""
    return isinstance(value, int) and not isinstance(value, bool)


def unknown_fields(
    raw: Mapping[str, Any], known: tuple[str, ...], where: str, problems: Problems
) -> None:
    """Report every field of ``raw`` that is not in ``known`` (with the known field it is
    most likely a misspelling of, if any)."""
    for name in sorted(set(raw) - set(known), key=str):
        close = difflib.get_close_matches(str(name).lower(), known, n=1, cutoff=0.75)
        hint = f"did you mean {close[0]!r}? " if close else ""
        problems.add(f"{where}.{name}", f"unknown field ({hint}known: {', '.join(known)})")


def table(value: object, where: str, problems: Problems) -> Mapping[str, Any] | None:
    """``value`` if it is a table, else a problem and ``None``."""
    if isinstance(value, Mapping):
        return value
    problems.add(where, f"must be a table, got {shown(value)}")
    return None
