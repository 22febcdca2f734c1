"""The config schema's building blocks: one class per kind of field (the table that holds
them, and the reader that checks a config's table against them, are :mod:`.table`).

A field says once what it is: its name, kind, default, bounds, unit, whether it is
required, a paragraph for the docs, an example, and where its value lands in the parsed
config. The parser reads through it (:class:`Reader`: unknown fields, types, bounds,
defaults, durations, sizes, status and name lists, each problem naming the field), the
docs (:mod:`.docs`) and the check table and JSON (:mod:`.describe`) are written from it.
Rules between fields stay hand-written, beside the table they belong to.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from math import isfinite
from typing import TYPE_CHECKING, Any, Self

from ..caching.fields import is_token
from ..durations import format_duration, parse_duration
from ..errors import DurationError
from ..validation import Problems, is_int, shown

if TYPE_CHECKING:
    from .table import Reader, Table


class Ref:
    """A bound that is another field's value, read first (``min_calls`` <= ``window``)."""

    def __init__(self, name: str) -> None:
        self.name = name


Bound = int | Ref | None

#: What :meth:`Field.parse` gives back after recording a problem: the reader uses the default.
BAD: Any = object()


class Field:
    """One field of a table: what the docs say of it and how its value is checked.

    ``doc``: one paragraph for the docs (a table's own doc for a table). ``default``: the
    parsed value when the field is absent or refused (ms for a duration); ``default_text``
    the default as the docs say it, where it is not a plain value ("the quota").
    ``example``: a value as written in a config (a test checks it is valid), with
    ``example_with`` the fields of the same table it needs beside it. ``null_is_absent``:
    a JSON ``null`` reads as the field left out (else it is a wrong type). ``attr``: where
    the parsed value lands, a settings class's argument or a dotted path into the parsed
    object (``forward.timeout_ms`` of a route); empty, its :meth:`json_key` (``ttl_ms``
    for ``ttl``); ``None``, nowhere plainly (read and shown by hand). ``show``: the
    effective value as plain data, from the parsed object, where ``attr`` is not enough
    (the JSON of ``check-config`` and ``/api/config`` is made of these).

    Plain classes, not dataclasses: building a dataclass costs about a millisecond of a
    Worker's cold start on Pyodide.
    """

    kind = "value"

    def __init__(
        self,
        name: str,
        *,
        doc: str = "",
        default: Any = None,
        required: bool = False,
        example: Any = None,
        example_with: Mapping[str, Any] | None = None,
        default_text: str = "",
        null_is_absent: bool = False,
        attr: str | None = "",
        show: Callable[[Any], object] | None = None,
    ) -> None:
        self.name, self.doc, self.default, self.required = name, doc, default, required
        self.example, self.example_with = example, example_with or {}
        self.default_text, self.null_is_absent = default_text, null_is_absent
        self.attr, self.show = attr, show

    def but(self, **changes: Any) -> Self:
        """A copy with ``changes`` (one field declared for two tables, with two docs)."""
        other = copy.copy(self)
        vars(other).update(changes)
        return other

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        """``value`` checked (``where`` names it in problems), or :data:`BAD`."""
        raise TypeError(f"{self.name} is read by hand")

    def type_text(self) -> str:
        """The field's type as the docs say it."""
        return self.kind

    def bounds_text(self) -> str:
        """The field's bounds as the docs say them (empty: none beyond its type)."""
        return ""

    def default_shown(self) -> str:
        """The default as the docs say it."""
        if self.default_text:
            return self.default_text
        if self.required:
            return "required"
        if self.default is None:
            return "unset"
        return f"`{toml_value(self.written(self.default))}`"

    def written(self, value: Any) -> Any:
        """A parsed value as a config writes it."""
        return value

    def json_key(self) -> str:
        """The field's name in the JSON description of a parsed config."""
        return self.name

    def plain(self, value: Any) -> object:
        """A parsed value as plain JSON data."""
        if isinstance(value, frozenset):
            return sorted(value)
        if isinstance(value, tuple):
            return list(value)
        return value


def resolved(bound: Bound, got: Reader) -> int | None:
    """A bound's value: the other field's, read through ``got``, where it is one."""
    if isinstance(bound, Ref):
        value = got.get(bound.name)
        return value if isinstance(value, int) else None
    return bound


def _bound_text(bound: Bound, shown_as: Callable[[int], str] = str) -> str:
    if isinstance(bound, Ref):
        return bound.name
    return "" if bound is None else shown_as(bound)


class Flag(Field):
    """``true`` or ``false``."""

    kind = "boolean"

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        if isinstance(value, bool):
            return value
        problems.add(where, f"must be true or false, got {shown(value)}")
        return BAD


class Integer(Field):
    """A whole number within ``minimum..maximum`` (either may be another field); ``rule``
    says what it must be where the usual ``an integer 1..10`` does not."""

    kind = "integer"

    def __init__(
        self,
        name: str,
        minimum: Bound = None,
        maximum: Bound = None,
        *,
        unit: str = "",
        rule: str = "",
        **common: Any,
    ) -> None:
        super().__init__(name, **common)
        self.minimum, self.maximum, self.unit, self.rule = minimum, maximum, unit, rule

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        low, high = resolved(self.minimum, got), resolved(self.maximum, got)
        if is_int(value) and (low is None or value >= low) and (high is None or value <= high):
            return int(value)
        rule = self.rule or f"an integer {low}..{high}"
        problems.add(where, f"must be {rule}, got {shown(value)}")
        return BAD

    def type_text(self) -> str:
        return f"{self.kind} ({self.unit})" if self.unit else self.kind

    def bounds_text(self) -> str:
        low, high = _bound_text(self.minimum), _bound_text(self.maximum)
        if not high:
            return f"at least {low}" if low else ""
        return f"{low}..{high}"


def _size(count: int) -> str:
    """A number of bytes, with its size in KiB or MiB where that is a round figure."""
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            figure = count / size
            return f"{count} ({figure:g} {unit})" if figure * 100 % 1 == 0 else f"{count}"
    return str(count)


class Size(Integer):
    """A number of bytes."""

    kind = "size"

    def __init__(self, name: str, minimum: Bound, maximum: Bound, **common: Any) -> None:
        super().__init__(name, minimum, maximum, unit="bytes", **common)

    def bounds_text(self) -> str:
        return f"{_bound_text(self.minimum)}..{_bound_text(self.maximum, _size)}"


class Number(Field):
    """A finite number (integer or decimal) within ``minimum..maximum``."""

    kind = "number"

    def __init__(
        self,
        name: str,
        minimum: float,
        maximum: float,
        *,
        unit: str = "",
        rule: str = "",
        **common: Any,
    ) -> None:
        super().__init__(name, **common)
        self.minimum, self.maximum, self.unit, self.rule = minimum, maximum, unit, rule

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        if (
            not isinstance(value, bool)
            and isinstance(value, int | float)
            and isfinite(value)
            and self.minimum <= value <= self.maximum
        ):
            return float(value)
        rule = self.rule or f"a number from {self.minimum:g} to {self.maximum:g}"
        problems.add(where, f"must be {rule}, got {shown(value)}")
        return BAD

    def type_text(self) -> str:
        return f"{self.kind} ({self.unit})" if self.unit else self.kind

    def bounds_text(self) -> str:
        return f"{self.minimum:g}..{self.maximum:g}"


class Duration(Field):
    """A duration string (``"250ms"``, ``"30s"``, ``"1h30m"``), read as milliseconds;
    ``rule`` says what the field is, for the problem when a required one is missing."""

    kind = "duration"

    def __init__(
        self, name: str, minimum: Bound = 0, maximum: Bound = None, *, rule: str = "", **common: Any
    ) -> None:
        super().__init__(name, **common)
        self.minimum, self.maximum, self.rule = minimum, maximum, rule

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        if not isinstance(value, str):
            # Said here, where a TOML date or time is shown as written (see shown).
            problems.add(where, f"must be a duration string like '30s' or '5m', got {shown(value)}")
            return BAD
        low, high = resolved(self.minimum, got), resolved(self.maximum, got)
        try:
            return parse_duration(value, minimum_ms=low or 0, maximum_ms=high)
        except DurationError as exc:
            problems.add(where, str(exc))
            return BAD

    def bounds_text(self) -> str:
        low = _bound_text(self.minimum, format_duration)
        return f"{low}..{_bound_text(self.maximum, format_duration)}"

    def written(self, value: Any) -> Any:
        return format_duration(value) if isinstance(value, int) else value

    def json_key(self) -> str:
        return f"{self.name}_ms"


class Choice(Field):
    """One of a few words. ``hints``: other names people use for an option, and what to
    write instead; ``suggest``: a value that is an option but for case, ``-`` or spaces
    gets the option to write in its problem."""

    kind = "string"

    def __init__(
        self,
        name: str,
        options: tuple[str, ...],
        *,
        hints: Mapping[str, str] | None = None,
        suggest: bool = True,
        rule: str = "",
        **common: Any,
    ) -> None:
        super().__init__(name, **common)
        self.options, self.hints, self.suggest, self.rule = options, hints or {}, suggest, rule

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        if isinstance(value, str) and value in self.options:
            return value
        hint = ""
        if isinstance(value, str) and self.suggest:
            normal = "_".join(value.strip().lower().replace("-", " ").split())
            if normal in self.options:
                hint = f" (write {normal!r})"
            elif normal in self.hints:
                hint = f" ({self.hints[normal]})"
        rule = self.rule or f"one of {', '.join(self.options)}"
        problems.add(where, f"must be {rule}, got {shown(value)}{hint}")
        return BAD

    def type_text(self) -> str:
        return "one of " + ", ".join(f"`{option}`" for option in self.options if option)


class Text(Field):
    """A string matching ``pattern`` (a regular expression, matched whole); ``rule`` is
    what it must be, as the problems say it (``a path like '/health'``)."""

    kind = "string"

    def __init__(self, name: str, pattern: str, rule: str, **common: Any) -> None:
        super().__init__(name, **common)
        self.pattern, self.rule = re.compile(pattern), rule

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        if isinstance(value, str) and self.pattern.fullmatch(value):
            return value
        problems.add(where, f"must be {self.rule}, got {shown(value)}")
        return BAD

    def bounds_text(self) -> str:
        return self.rule


class Statuses(Field):
    """A list of HTTP status codes, read as a sorted tuple without repeats."""

    kind = "list of statuses"

    def __init__(
        self,
        name: str,
        *,
        minimum: int = 100,
        maximum: int = 599,
        excluded: frozenset[int] = frozenset(),
        non_empty: bool = False,
        repeats_refused: bool = False,
        rule: str = "",
        **common: Any,
    ) -> None:
        super().__init__(name, **common)
        self.minimum, self.maximum, self.excluded = minimum, maximum, excluded
        self.non_empty, self.repeats_refused = non_empty, repeats_refused
        self.rule = rule or (
            f"a {'non-empty ' if non_empty else ''}list of HTTP statuses {minimum}..{maximum}"
        )

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        if (
            not isinstance(value, list)
            or (self.non_empty and not value)
            or not all(
                is_int(v) and self.minimum <= v <= self.maximum and v not in self.excluded
                for v in value
            )
        ):
            problems.add(where, f"must be {self.rule}, got {shown(value)}")
            return BAD
        if self.repeats_refused and len(set(value)) != len(value):
            problems.add(where, f"names a status twice, got {shown(value)}")
        return tuple(sorted(set(value)))

    def bounds_text(self) -> str:
        but = f" except {', '.join(map(str, sorted(self.excluded)))}" if self.excluded else ""
        return f"{self.minimum}..{self.maximum}{but}"


class Names(Field):
    """A list of HTTP tokens, case-folded, sorted, each once: ``noun`` ``method`` (read
    upper-case) or ``header name`` (lower-case). ``advice``: a warning for a name that is
    legal but probably not meant."""

    def __init__(
        self,
        name: str,
        noun: str,
        *,
        advice: Callable[[str], str | None] | None = None,
        at_least_one: bool = False,
        **common: Any,
    ) -> None:
        super().__init__(name, **common)
        self.noun, self.advice, self.at_least_one = noun, advice, at_least_one

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        if not isinstance(value, list):
            problems.add(where, f"must be a list of {self.noun}s, got {shown(value)}")
            return BAD
        names: list[str] = []
        for index, item in enumerate(value):
            if not isinstance(item, str) or not is_token(item):
                problems.add(
                    f"{where}[{index}]", f"must be a {self.noun} (an HTTP token), got {shown(item)}"
                )
                continue
            name = item.upper() if self.noun == "method" else item.lower()
            if name in names:
                problems.warn(f"{where}[{index}]", f"names {shown(name)} twice")
                continue
            advice = self.advice(name) if self.advice is not None else None
            if advice is not None:
                problems.warn(f"{where}[{index}]", advice)
            names.append(name)
        if self.at_least_one and not value:
            problems.add(where, f"must name at least one {self.noun}")
        if self.at_least_one and not names:
            return BAD
        return tuple(sorted(names))

    def type_text(self) -> str:
        return f"list of {self.noun}s"


class Hand(Field):
    """A field whose value has a grammar of its own (a rate, a key, a URL), read by a
    hand-written parser beside its table; ``type`` is its type as the docs say it."""

    def __init__(self, name: str, type: str, **common: Any) -> None:
        super().__init__(name, **common)
        self.type = type

    def type_text(self) -> str:
        return self.type


class Sub(Field):
    """A field holding another table: ``many`` ``list`` (``[[routes]]``), ``map``
    (``[pools.NAME]``), or empty for one; ``type`` its type as the docs say it, where
    the table is not all it may be."""

    def __init__(
        self, name: str, table: Table, *, many: str = "", type: str = "", **common: Any
    ) -> None:
        super().__init__(name, **common)
        self.table, self.many, self.type = table, many, type

    def type_text(self) -> str:
        return self.type or {"list": "list of tables", "map": "tables by name"}.get(
            self.many, "table"
        )


def toml_value(value: Any) -> str:
    """A value written as TOML writes it (inline)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        inner = ", ".join(f"{key} = {toml_value(item)}" for key, item in value.items())
        return "{ " + inner + " }" if inner else "{}"
    raise TypeError(f"no TOML for {value!r}")
