"""A table of the config (its fields in order) and the reader that checks one table of a
config against its fields: unknown fields, types, bounds and defaults, through the
field classes of :mod:`.fields`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from ..validation import Problems, table, unknown_fields
from .fields import BAD, Duration, Field, Hand, Integer, Ref, Sub, resolved

T = TypeVar("T")
_UNSET: Any = object()


class Table:
    """A table of the config: its fields in the order the docs and problems list them;
    ``title`` is how the docs name it."""

    def __init__(self, title: str, doc: str, fields: tuple[Field, ...]) -> None:
        self.title, self.doc, self.fields = title, doc, fields
        self.names = tuple(f.name for f in fields)
        self.by_name = {f.name: f for f in fields}
        #: The fields with a bound another field sets.
        self.ref_bounded = frozenset(
            f.name
            for f in fields
            if isinstance(getattr(f, "minimum", None), Ref)
            or isinstance(getattr(f, "maximum", None), Ref)
        )

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
            low, high = resolved(spec.minimum, self), resolved(spec.maximum, self)
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
