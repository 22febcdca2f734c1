"""Targeted cache control (RFC 9213): ``CDN-Cache-Control`` and Cloudflare's own field.

An origin can tell CDN caches something else than browsers: ``Cache-Control: max-age=60``
for everyone, ``CDN-Cache-Control: max-age=3600`` for the CDN. This cache's target list is
:data:`TARGET_FIELDS`, most specific first: the first of them present with a valid,
non-empty value decides whether and how long a response is stored, and ``Cache-Control``,
``Expires`` and ``Pragma`` are then ignored (section 2.2). A field that is empty or does
not parse is ignored as if absent, falling back to the next one and then to
``Cache-Control``. Both fields are passed on to the client unchanged.

After them, ``Surrogate-Control`` (the W3C Edge Architecture's field, which Fastly and
Akamai read): its syntax is ``Cache-Control``'s, directive names in any case; a directive
aimed at a named surrogate (``max-age=60;edge2``) is someone else's and ignored, and
``no-store-remote`` is ``no-store`` here (this cache is remote from the client). It is
passed on unchanged too.

A targeted field is a Structured Field Dictionary (RFC 8941 section 3.2) whose members are
cache directives: ``no-store`` (a Boolean true), ``max-age=60`` (an Integer). A directive
set to ``?0`` is absent; parameters are ignored; a seconds directive with a value of
another type reads as 0 (the response counts as stale), like an invalid ``max-age`` in
``Cache-Control``.
"""

from __future__ import annotations

import re
import string

from .cache_control import CacheControl, directives_of, split_directives
from .fields import Fields, field_value

#: The fields this cache obeys, in order of precedence (RFC 9213's), then
#: :data:`SURROGATE_FIELD`.
TARGET_FIELDS = ("cloudflare-cdn-cache-control", "cdn-cache-control")
SURROGATE_FIELD = "surrogate-control"

_LCALPHA = frozenset(string.ascii_lowercase)
_KEY_FIRST = _LCALPHA | {"*"}
_KEY_REST = _KEY_FIRST | frozenset(string.digits) | {"_", "-", "."}
_DIGITS = frozenset(string.digits)
_ALPHA = frozenset(string.ascii_letters)
#: RFC 9110 tchar, plus ':' and '/', may follow a token's first character.
_TOKEN_REST = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~:/")
_BASE64 = frozenset(string.ascii_letters + string.digits + "+/=")
_OWS = " \t"


class _Invalid(Exception):
    """The field does not parse as a Dictionary."""


def targeted_directives(headers: Fields) -> CacheControl | None:
    """The directives of the first targeted field that applies, or ``None`` (use
    ``Cache-Control``)."""
    for name in TARGET_FIELDS:
        value = field_value(headers, name)
        if value is None:
            continue
        members = parse_dictionary(value)
        if members:
            return directives_of(tuple(members.items()))
    surrogate = field_value(headers, SURROGATE_FIELD)
    if surrogate is not None:
        directives = tuple(
            ("no-store" if name == "no-store-remote" else name, raw)
            for name, raw in split_directives(surrogate)
            if raw is None or ";" not in raw  # aimed at another surrogate: not ours
        )
        if directives:
            return directives_of(directives)
    return None


def parse_dictionary(value: str) -> dict[str, str | None] | None:
    """A Dictionary's members as directives: ``None`` for a Boolean true, the text of an
    Integer, ``""`` for a value of any other type; members set to ``?0`` left out.

    ``None`` when the value does not parse; ``{}`` when it is empty.
    """
    try:
        return _Parser(value.strip(" ")).dictionary()
    except _Invalid:
        return None


def is_list(value: str) -> bool:
    """Whether ``value`` is a non-empty RFC 8941 List (section 4.2.1), as ``RateLimit``
    and ``RateLimit-Policy`` are."""
    return list_names(value) is not None


def list_names(value: str) -> list[str] | None:
    """The members of a non-empty RFC 8941 List by name (a String's content, a Token's
    text; ``""`` for any other member), ``None`` when ``value`` is not one: the policy
    names of ``RateLimit`` and ``RateLimit-Policy``."""
    parser = _Parser(value.strip(" "))
    if not parser.text:
        return None
    names: list[str] = []
    try:
        parser.members(names)
    except _Invalid:
        return None
    return names


_ESCAPED = re.compile(r"\\(.)")


def _name(bare: str) -> str:
    """A bare item's text as a name: a String unquoted, a Token as it is, else ``""``."""
    if bare.startswith('"'):
        return _ESCAPED.sub(r"\1", bare[1:-1])
    return bare if bare[:1] == "*" or bare[:1].isalpha() else ""


class _Parser:
    """RFC 8941 section 4.2, the parts a Dictionary needs."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def _peek(self) -> str:
        """The next character, ``""`` at the end (in no character set here)."""
        return self.text[self.at] if self.at < len(self.text) else ""

    def _take(self) -> str:
        char = self._peek()
        if not char:
            raise _Invalid
        self.at += 1
        return char

    def _skip(self, chars: str) -> None:
        while self._peek() and self._peek() in chars:
            self.at += 1

    def dictionary(self) -> dict[str, str | None]:
        members: dict[str, str | None] = {}
        while self.at < len(self.text):
            key = self._key()
            value: object = True
            if self._peek() == "=":
                self.at += 1
                value = self._inner_list() if self._peek() == "(" else self._item()
            else:
                self._parameters()
            # A key given twice keeps its last value (section 4.2.2).
            members.pop(key, None)
            if value is True:
                members[key] = None
            elif value is not False:
                members[key] = value if isinstance(value, str) else ""
            self._skip(_OWS)
            if self.at >= len(self.text):
                break
            if self._take() != ",":
                raise _Invalid
            self._skip(_OWS)
            if self.at >= len(self.text):
                raise _Invalid  # a trailing comma
        return members

    def members(self, names: list[str]) -> None:
        """A List's members (Items or Inner Lists, with their parameters), to its end;
        each member's name (see :func:`list_names`) goes to ``names``."""
        while True:
            if self._peek() == "(":
                self._inner_list()
                names.append("")
            else:
                start = self.at
                self._bare_item()
                names.append(_name(self.text[start : self.at]))
                self._parameters()
            self._skip(_OWS)
            if self.at >= len(self.text):
                return
            if self._take() != ",":
                raise _Invalid
            self._skip(_OWS)
            if self.at >= len(self.text):
                raise _Invalid  # a trailing comma

    def _key(self) -> str:
        if self._peek() not in _KEY_FIRST:
            raise _Invalid
        start = self.at
        while self._peek() in _KEY_REST:
            self.at += 1
        return self.text[start : self.at]

    def _parameters(self) -> None:
        while self._peek() == ";":
            self.at += 1
            self._skip(" ")
            self._key()
            if self._peek() == "=":
                self.at += 1
                self._bare_item()

    def _inner_list(self) -> object:
        self.at += 1  # "("
        while True:
            self._skip(" ")
            if self._peek() == ")":
                self.at += 1
                self._parameters()
                return ""
            self._item()
            if self._peek() not in (" ", ")"):
                raise _Invalid

    def _item(self) -> object:
        value = self._bare_item()
        self._parameters()
        return value

    def _bare_item(self) -> object:
        """An Integer as its text, a Boolean as itself, anything else as ``""``."""
        char = self._peek()
        if char == "-" or char in _DIGITS:
            return self._number()
        if char == '"':
            self._string()
            return ""
        if char == "*" or char in _ALPHA:
            self.at += 1
            while self._peek() in _TOKEN_REST:
                self.at += 1
            return ""
        if char == ":":
            self.at += 1
            while self._peek() != ":":
                if self._take() not in _BASE64:
                    raise _Invalid
            self.at += 1
            return ""
        if char == "?":
            self.at += 1
            flag = self._take()
            if flag not in "01":
                raise _Invalid
            return flag == "1"
        if char == "@":  # a Date (RFC 9651): an Integer of seconds
            self.at += 1
            if "." in str(self._number()):
                raise _Invalid
            return ""
        raise _Invalid

    def _number(self) -> str:
        start = self.at
        if self._peek() == "-":
            self.at += 1
        digits = self.at
        if self._peek() not in _DIGITS:
            raise _Invalid
        while self._peek() in _DIGITS:
            self.at += 1
        whole = self.at - digits
        if self._peek() != ".":
            if whole > 15:
                raise _Invalid
            return self.text[start : self.at]
        if whole > 12:
            raise _Invalid
        self.at += 1
        fraction = self.at
        while self._peek() in _DIGITS:
            self.at += 1
        if not 1 <= self.at - fraction <= 3:
            raise _Invalid
        return self.text[start : self.at]

    def _string(self) -> None:
        self.at += 1  # the opening quote
        while True:
            char = self._take()
            if char == "\\":
                if self._take() not in ('"', "\\"):
                    raise _Invalid
            elif char == '"':
                return
            elif not " " <= char <= "~":
                raise _Invalid
