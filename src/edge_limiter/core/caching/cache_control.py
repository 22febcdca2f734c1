"""``Cache-Control`` (RFC 9111 section 5.2) parsed into a small frozen object.

The parser never raises: a field value is whatever a client or an origin sent. It splits
on commas outside quoted strings, lower-cases directive names, unquotes values
(``max-age="60"`` is read like ``max-age=60``, as section 5.2 asks) and skips items that
are not ``token[=value]``. Repeated field lines are passed joined with ``", "`` (which is
what the platform's ``headers.get`` returns), so two lines read like one.

Delta-seconds follow section 1.2.2: a value too large is read as 2147483648. An invalid
one (``max-age=soon``, ``max-age=-1``) is read as 0, so the response counts as stale
(section 4.2.1 encourages that), and when a directive is repeated the smallest value wins:
the most restrictive reading is the safe one for a shared cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fields import is_token

#: Section 1.2.2: the value a cache uses for delta-seconds it cannot represent.
DELTA_SECONDS_CAP = 2_147_483_648

_SECONDS_DIRECTIVES = (
    "max-age",
    "s-maxage",
    "stale-if-error",
    "stale-while-revalidate",
    "min-fresh",
)
_SPACE = " \t"


@dataclass(frozen=True, slots=True)
class CacheControl:
    """The directives of one ``Cache-Control`` field value.

    Second-valued directives are ``None`` when absent. ``directives`` keeps every item that
    parsed, names lower-cased and values unquoted (``None`` for a bare name), extension
    directives included.
    """

    no_store: bool = False
    no_cache: bool = False
    private: bool = False
    public: bool = False
    must_revalidate: bool = False
    proxy_revalidate: bool = False
    only_if_cached: bool = False
    max_age: int | None = None
    s_maxage: int | None = None
    stale_if_error: int | None = None
    stale_while_revalidate: int | None = None
    min_fresh: int | None = None
    """A request's ``min-fresh`` (RFC 9111 section 5.2.1.3)."""
    directives: tuple[tuple[str, str | None], ...] = ()

    def has(self, name: str) -> bool:
        """Whether the directive ``name`` (any case) is present."""
        wanted = name.lower()
        return any(key == wanted for key, _ in self.directives)


def parse_cache_control(value: str | None) -> CacheControl:
    """Parse a ``Cache-Control`` field value (``None``: the field is absent)."""
    if not value:
        return CacheControl()
    return directives_of(split_directives(value))


def split_directives(value: str) -> tuple[tuple[str, str | None], ...]:
    """A ``Cache-Control``-style value's directives as ``(lower-case name, value)``."""
    return tuple(item for item in map(_parse_item, _split_items(value)) if item)


def directives_of(directives: tuple[tuple[str, str | None], ...]) -> CacheControl:
    """The directives, as ``(lower-case name, value or None)`` items, read."""
    names = {name for name, _ in directives}
    seconds: dict[str, int | None] = {}
    for name in _SECONDS_DIRECTIVES:
        values = [delta_seconds(raw) for key, raw in directives if key == name]
        seconds[name] = min(values) if values else None
    return CacheControl(
        no_store="no-store" in names,
        no_cache="no-cache" in names,
        private="private" in names,
        public="public" in names,
        must_revalidate="must-revalidate" in names,
        proxy_revalidate="proxy-revalidate" in names,
        only_if_cached="only-if-cached" in names,
        max_age=seconds["max-age"],
        s_maxage=seconds["s-maxage"],
        stale_if_error=seconds["stale-if-error"],
        stale_while_revalidate=seconds["stale-while-revalidate"],
        min_fresh=seconds["min-fresh"],
        directives=directives,
    )


def _split_items(value: str) -> list[str]:
    """Split on commas that are not inside a quoted string (backslash escapes honoured)."""
    items: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            items.append("".join(current))
            current = []
            continue
        current.append(char)
    items.append("".join(current))
    return items


def _parse_item(item: str) -> tuple[str, str | None] | None:
    """``name`` or ``name=value`` with the value unquoted; ``None`` for garbage."""
    name, sep, raw = item.strip(_SPACE).partition("=")
    name = name.strip(_SPACE).lower()
    if not name or not is_token(name):
        return None
    if not sep:
        return name, None
    raw = raw.strip(_SPACE)
    if raw.startswith('"'):
        return name, _unquote(raw)
    return name, raw


def _unquote(raw: str) -> str:
    """The content of a quoted string; an unterminated one runs to the end of the item."""
    out: list[str] = []
    escaped = False
    for char in raw[1:]:
        if escaped:
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            break
        else:
            out.append(char)
    return "".join(out)


def delta_seconds(raw: str | None) -> int:
    """RFC 9111 section 1.2.2 delta-seconds: digits only; invalid reads as 0, huge as the cap."""
    if raw is None or not raw.isascii() or not raw.isdigit():
        return 0
    digits = raw.lstrip("0") or "0"
    # Cap by length first, so a value of a million digits is never converted.
    if len(digits) > len(str(DELTA_SECONDS_CAP)):
        return DELTA_SECONDS_CAP
    return min(int(digits), DELTA_SECONDS_CAP)
