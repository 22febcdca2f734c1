"""The config schema's building blocks: one class per kind of field, the table that holds
them, and the reader that checks one table of a config against its fields.

A field says once what it is: its name, kind, default, bounds, unit, whether it is
required, a paragraph for the docs, an example, and where its value lands in the parsed
config. The parser reads through it (:class:`Reader`: unknown fields, types, bounds,
defaults, durations, sizes, status and name lists, each problem naming the field), the
docs (:mod:`.docs`) and the check table and JSON (:mod:`.describe`) are written from it.
Rules between fields stay hand-written, beside the table they belong to.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from math import isfinite
from typing import Any, ClassVar, TypeVar

from ..caching.fields import is_token
from ..durations import format_duration, parse_duration
from ..errors import DurationError
from ..validation import Problems, is_int, shown, table, unknown_fields

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Ref:
    """A bound that is another field's value, read first (``min_calls`` <= ``window``)."""

    name: str


Bound = int | Ref | None

#: What :meth:`Field.parse` gives back after recording a problem: the reader uses the default.
BAD: Any = object()
_UNSET: Any = object()


@dataclass(frozen=True, eq=False)
class Field:
    """One field of a table: what the docs say of it and how its value is checked."""

    name: str
    _: KW_ONLY
    doc: str = ""
    """One paragraph: what the field does, for the docs (a table's own doc for a table)."""
    default: Any = None
    """The parsed value when the field is absent (or refused), e.g. ms for a duration."""
    required: bool = False
    example: Any = None
    """A value as written in a config (checked by a test to be valid)."""
    example_with: Mapping[str, Any] = field(default_factory=dict)
    """Fields of the same table the example needs beside it."""
    default_text: str = ""
    """The default as the docs say it, where it is not a plain value ("the quota")."""
    null_is_absent: bool = False
    """Whether a JSON ``null`` reads as the field left out (else it is a wrong type)."""
    attr: str | None = ""
    """Where the parsed value lands: a settings class's argument, or a dotted path into
    the parsed object (``forward.timeout_ms`` of a route); empty: its :meth:`json_key`
    (``ttl_ms`` for ``ttl``); ``None``: nowhere plainly (read and shown by hand)."""
    show: Callable[[Any], object] | None = None
    """The effective value as plain data, from the parsed object, where ``attr`` is not
    enough; the JSON of ``check-config`` and ``/api/config`` is made of these."""
    kind: ClassVar[str] = "value"

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


def _resolved(bound: Bound, got: Reader) -> int | None:
    if isinstance(bound, Ref):
        value = got.get(bound.name)
        return value if isinstance(value, int) else None
    return bound


def _bound_text(bound: Bound, shown_as: Callable[[int], str] = str) -> str:
    if isinstance(bound, Ref):
        return bound.name
    return "" if bound is None else shown_as(bound)


@dataclass(frozen=True, eq=False)
class Flag(Field):
    """``true`` or ``false``."""

    kind: ClassVar[str] = "boolean"

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        if isinstance(value, bool):
            return value
        problems.add(where, f"must be true or false, got {shown(value)}")
        return BAD


@dataclass(frozen=True, eq=False)
class Integer(Field):
    """A whole number within ``minimum..maximum`` (either may be another field)."""

    minimum: Bound = None
    maximum: Bound = None
    _: KW_ONLY
    unit: str = ""
    rule: str = ""
    """What it must be, where the usual ``an integer 1..10`` does not say it."""
    kind: ClassVar[str] = "integer"

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        low, high = _resolved(self.minimum, got), _resolved(self.maximum, got)
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


@dataclass(frozen=True, eq=False)
class Size(Integer):
    """A number of bytes."""

    unit: str = "bytes"
    kind: ClassVar[str] = "size"

    def bounds_text(self) -> str:
        return f"{_bound_text(self.minimum)}..{_bound_text(self.maximum, _size)}"


@dataclass(frozen=True, eq=False)
class Number(Field):
    """A finite number (integer or decimal) within ``minimum..maximum``."""

    minimum: float
    maximum: float
    _: KW_ONLY
    unit: str = ""
    rule: str = ""
    kind: ClassVar[str] = "number"

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


@dataclass(frozen=True, eq=False)
class Duration(Field):
    """A duration string (``"250ms"``, ``"30s"``, ``"1h30m"``), read as milliseconds."""

    minimum: Bound = 0
    maximum: Bound = None
    _: KW_ONLY
    rule: str = ""
    """What the field is, for the problem when a required one is missing."""
    kind: ClassVar[str] = "duration"

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        if not isinstance(value, str):
            # Said here, where a TOML date or time is shown as written (see shown).
            problems.add(where, f"must be a duration string like '30s' or '5m', got {shown(value)}")
            return BAD
        low, high = _resolved(self.minimum, got), _resolved(self.maximum, got)
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


@dataclass(frozen=True, eq=False)
class Choice(Field):
    """One of a few words."""

    options: tuple[str, ...]
    _: KW_ONLY
    hints: Mapping[str, str] = field(default_factory=dict)
    """Other names people use for an option, and what to write instead."""
    suggest: bool = True
    """Whether a value that is an option but for case, ``-`` or spaces gets the option
    to write in its problem."""
    rule: str = ""
    kind: ClassVar[str] = "string"

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


@dataclass(frozen=True, eq=False)
class Text(Field):
    """A string matching ``pattern`` (a regular expression, matched whole)."""

    pattern: str
    rule: str
    """What it must be, as the problems say it (``a path like '/health'``)."""
    kind: ClassVar[str] = "string"

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        if isinstance(value, str) and re.fullmatch(self.pattern, value):
            return value
        problems.add(where, f"must be {self.rule}, got {shown(value)}")
        return BAD

    def bounds_text(self) -> str:
        return self.rule


@dataclass(frozen=True, eq=False)
class Statuses(Field):
    """A list of HTTP status codes, read as a sorted tuple without repeats."""

    _: KW_ONLY
    minimum: int = 100
    maximum: int = 599
    excluded: frozenset[int] = frozenset()
    non_empty: bool = False
    repeats_refused: bool = False
    rule: str = ""
    kind: ClassVar[str] = "list of statuses"

    def parse(self, value: Any, where: str, problems: Problems, got: Reader) -> Any:
        rule = self.rule or (
            f"a {'non-empty ' if self.non_empty else ''}list of HTTP statuses "
            f"{self.minimum}..{self.maximum}"
        )
        if (
            not isinstance(value, list)
            or (self.non_empty and not value)
            or not all(
                is_int(v) and self.minimum <= v <= self.maximum and v not in self.excluded
                for v in value
            )
        ):
            problems.add(where, f"must be {rule}, got {shown(value)}")
            return BAD
        if self.repeats_refused and len(set(value)) != len(value):
            problems.add(where, f"names a status twice, got {shown(value)}")
        return tuple(sorted(set(value)))

    def bounds_text(self) -> str:
        but = f" except {', '.join(map(str, sorted(self.excluded)))}" if self.excluded else ""
        return f"{self.minimum}..{self.maximum}{but}"


@dataclass(frozen=True, eq=False)
class Names(Field):
    """A list of HTTP tokens (methods, field names), case-folded, sorted, each once."""

    noun: str
    """``method`` (read upper-case) or ``header name`` (lower-case)."""
    _: KW_ONLY
    advice: Callable[[str], str | None] = lambda name: None
    """A warning for a name that is legal but probably not meant."""
    at_least_one: bool = False

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
            advice = self.advice(name)
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


@dataclass(frozen=True, eq=False)
class Hand(Field):
    """A field whose value has a grammar of its own (a rate, a key, a URL), read by a
    hand-written parser beside its table."""

    type: str
    """Its type as the docs say it."""

    def type_text(self) -> str:
        return self.type


@dataclass(frozen=True, eq=False)
class Sub(Field):
    """A field holding another table, a list of them, or tables by name."""

    table: Table
    _: KW_ONLY
    many: str = ""
    """``list`` (``[[routes]]``), ``map`` (``[pools.NAME]``), or empty: one table."""
    type: str = ""
    """Its type as the docs say it, where the table is not all it may be."""

    def type_text(self) -> str:
        return self.type or {"list": "list of tables", "map": "tables by name"}.get(
            self.many, "table"
        )


@dataclass(frozen=True, eq=False)
class Table:
    """A table of the config: its fields in the order the docs and problems list them."""

    title: str
    """How the docs name it (``cache``, ``[[routes]]``)."""
    doc: str
    fields: tuple[Field, ...]
    names: tuple[str, ...] = field(init=False)
    by_name: dict[str, Field] = field(init=False)
    ref_bounded: frozenset[str] = field(init=False)
    """The fields with a bound another field sets."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(f.name for f in self.fields))
        object.__setattr__(self, "by_name", {f.name: f for f in self.fields})
        bounded = {
            f.name
            for f in self.fields
            if isinstance(getattr(f, "minimum", None), Ref)
            or isinstance(getattr(f, "maximum", None), Ref)
        }
        object.__setattr__(self, "ref_bounded", frozenset(bounded))

    def read(self, value: object, where: str, problems: Problems) -> Reader | None:
        """A reader of ``value`` (a problem and ``None`` when it is not a table)."""
        data = table(value, where, problems)
        return None if data is None else Reader(self, data, where, problems)


class Reader:
    """One table of a config as its schema reads it: unknown fields are reported at once,
    each field is checked when first asked for (so problems come in the order a parser
    asks), and a missing or refused field gives its default."""

    def __init__(self, spec: Table, raw: Mapping[str, Any], where: str, problems: Problems) -> None:
        self.spec = spec
        self.raw = raw
        self.where = where
        self.problems = problems
        self._got: dict[str, Any] = {}
        self._refused: set[str] = set()
        unknown_fields(raw, spec.names, where, problems)

    def given(self, name: str) -> bool:
        """Whether the config writes the field (a ``null`` that means absent aside)."""
        if name not in self.raw:
            return False
        return self.raw[name] is not None or not self.spec.by_name[name].null_is_absent

    def get(self, name: str, default: Any = _UNSET) -> Any:
        """The field's value, checked (``default`` in place of the schema's, if given)."""
        if name in self._got:
            return self._got[name]
        spec = self.spec.by_name[name]
        fallback = spec.default if default is _UNSET else default
        if name in self.spec.ref_bounded and fallback is not None:
            # A default outside a bound another field sets moves inside it.
            assert isinstance(spec, Integer | Duration)
            low, high = _resolved(spec.minimum, self), _resolved(spec.maximum, self)
            if isinstance(spec.maximum, Ref) and high is not None:
                fallback = min(fallback, high)
            if isinstance(spec.minimum, Ref) and low is not None:
                fallback = max(fallback, low)
        if not self.given(name):
            if spec.required:
                rule = getattr(spec, "rule", "") or spec.doc
                self.problems.add(f"{self.where}.{name}", f"is required: {rule}")
            value = fallback
        else:
            value = spec.parse(self.raw[name], f"{self.where}.{name}", self.problems, self)
            if value is BAD:
                self._refused.add(name)
                value = fallback
        self._got[name] = value
        return value

    def sub(self, name: str) -> Reader | None:
        """A reader of the table the field holds (absent: an empty one), or ``None`` after
        the problem that it is not a table."""
        spec = self.spec.by_name[name]
        if not isinstance(spec, Sub):
            raise TypeError(f"{name} holds no table")
        return spec.table.read(self.raw.get(name, {}), f"{self.where}.{name}", self.problems)

    def refused(self, name: str) -> bool:
        """Whether the field's value was refused (a problem says why; it took its default)."""
        self.get(name)
        return name in self._refused

    def flag(self, name: str, default: Any = _UNSET) -> bool:
        return self._typed(name, default, bool)

    def integer(self, name: str, default: Any = _UNSET) -> int:
        return self._typed(name, default, int)

    def optional_integer(self, name: str) -> int | None:
        value = self.get(name)
        return None if value is None else self._typed(name, _UNSET, int)

    def ms(self, name: str, default: Any = _UNSET) -> int:
        """A duration's milliseconds."""
        return self._typed(name, default, int)

    def number(self, name: str) -> float:
        return self._typed(name, _UNSET, float)

    def text(self, name: str, default: Any = _UNSET) -> str:
        return self._typed(name, default, str)

    def optional_text(self, name: str) -> str | None:
        value = self.get(name)
        return None if value is None else self._typed(name, _UNSET, str)

    def words(self, name: str) -> tuple[Any, ...]:
        """A list field's values (statuses, names)."""
        return self._typed(name, _UNSET, tuple)

    def settings(self) -> dict[str, Any]:
        """Every field the schema checks, by its settings class's argument (``attr``)."""
        return {
            spec.attr or spec.json_key(): self.get(spec.name)
            for spec in self.spec.fields
            if spec.attr is not None and not isinstance(spec, Hand | Sub)
        }

    def _typed(self, name: str, default: Any, kind: type[T]) -> T:
        value = self._got[name] if name in self._got else self.get(name, default)
        if not isinstance(value, kind):
            raise TypeError(f"{self.where}.{name}: {value!r} is not a {kind.__name__}")
        return value


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
