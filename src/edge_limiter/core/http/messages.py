"""Plain HTTP messages: what the gateway reads and answers, free of platform objects.

The platform adapter converts the runtime's request into a :class:`Request` and a
:class:`Response` back into the runtime's; everything between runs on CPython in tests.
Bodies stay opaque (:class:`Body`) until a stage needs the bytes, so a request that is
only forwarded streams through untouched.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote

from ..caching.fields import list_items
from ..errors import AmbiguousRequestError
from .params import TooManyCandidatesError, decoded_pieces, named_pieces, same_param


class HeaderMap(Protocol):
    """Case-insensitive header access; platform-backed maps implement the same methods."""

    def get(self, name: str) -> str | None:
        """The field's values joined with ", " (as HTTP combines them), or ``None``."""
        ...

    def get_all(self, name: str) -> list[str]:
        """Every value of the field, in order (``Set-Cookie`` lines stay separate)."""
        ...

    def set(self, name: str, value: str) -> None:
        """Replace every value of the field with ``value``."""
        ...

    def add(self, name: str, value: str) -> None:
        """Add a value after the existing ones."""
        ...

    def delete(self, name: str) -> None:
        """Remove the field."""
        ...

    def discard(self, names: frozenset[str], underscored: frozenset[str] = frozenset()) -> None:
        """Remove every field named in ``names`` (lower case) that is present, in any
        spelling with ``_`` for ``-``; and the ``_`` spellings of ``underscored`` (see
        :func:`dropped_names`)."""
        ...

    def items(self) -> list[tuple[str, str]]:
        """Every ``(name, value)``, names lower case, in order."""
        ...

    def __contains__(self, name: object) -> bool: ...


class Headers:
    """An ordered, case-insensitive multi-map of header fields (names kept lower case)."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items: list[tuple[str, str]] = [(k.lower(), v) for k, v in items]

    def get(self, name: str) -> str | None:
        """The field's values joined with ", ", or ``None``."""
        key = name.lower()
        found: str | None = None
        for k, v in self._items:
            if k == key:
                found = v if found is None else f"{found}, {v}"
        return found

    def get_all(self, name: str) -> list[str]:
        """Every value of the field, in order."""
        key = name.lower()
        return [v for k, v in self._items if k == key]

    def set(self, name: str, value: str) -> None:
        """Replace every value of the field with ``value``."""
        key = name.lower()
        self.delete(key)
        self._items.append((key, value))

    def add(self, name: str, value: str) -> None:
        """Add a value after the existing ones."""
        self._items.append((name.lower(), value))

    def delete(self, name: str) -> None:
        """Remove the field."""
        key = name.lower()
        items = self._items
        for k, _ in items:
            if k == key:  # the list is rebuilt only when the field is there
                self._items = [(k, v) for k, v in items if k != key]
                return

    def discard(self, names: frozenset[str], underscored: frozenset[str] = frozenset()) -> None:
        """Remove every field named in ``names`` (lower case) that is present, in any
        spelling with ``_`` for ``-``; and the ``_`` spellings of ``underscored``."""
        gone = set(dropped_names([k for k, _ in self._items], names, underscored))
        if gone:
            self._items = [(k, v) for k, v in self._items if k not in gone]

    def items(self) -> list[tuple[str, str]]:
        """Every ``(name, value)``, in order."""
        return list(self._items)

    def copy(self) -> Headers:
        """An independent copy."""
        return Headers(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and any(k == name.lower() for k, _ in self._items)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


#: The fields the runtime forwards as ONE line when a client sends several (it joins them
#: with ", "; these are the names of HTTP/2's static header table, which workerd keeps as
#: its common fields: an end-to-end test checks a sample). For them the origin sees the
#: joined value, the same the gateway counts, so it is taken whole: their values may
#: hold commas of their own (``user-agent``, an ``authorization`` signature, dates). Any
#: other field sent twice reaches the origin as two lines, of which it may read either.
JOINED_BY_RUNTIME = frozenset(
    [
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "accept",
        "access-control-allow-origin",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "content-disposition",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-range",
        "content-type",
        "cookie",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "link",
        "location",
        "max-forwards",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "refresh",
        "retry-after",
        "server",
        "set-cookie",
        "strict-transport-security",
        "transfer-encoding",
        "user-agent",
        "vary",
        "via",
        "www-authenticate",
    ]
)
#: Fields that are lists by definition, each line a part of one list (a proxy chain):
#: several lines mean the same as the joined line, and a key on them is the client's own
#: claim anyway (see the README), so they are taken whole too.
LISTS_BY_DEFINITION = frozenset(["x-forwarded-for", "forwarded"])


def taken_whole(name: str) -> bool:
    """Whether a field's value is taken whole, commas and all (``name`` lower case): the
    runtime forwards it joined, or it is a list by definition. In any other field that
    decides identity, a comma separates values (see :meth:`Request.single_header`)."""
    return name in JOINED_BY_RUNTIME or name in LISTS_BY_DEFINITION


#: Awaited while a body is read (see :meth:`Body.read_at_most`).
Progress = Callable[[], Awaitable[None]]
#: A part of a body this late is slow in coming: ``progress`` is awaited then too.
SLOW_PART_MS = 50


class Body(Protocol):
    """A message body that is read only when a stage needs its bytes."""

    async def read(self) -> bytes:
        """The whole body (reading it twice gives the same bytes)."""
        ...

    async def read_at_most(self, limit: int, progress: Progress | None = None) -> bytes | None:
        """The whole body if it is at most ``limit`` bytes, else ``None``.

        ``None`` leaves the body whole: it can still be sent on (streamed), and nothing
        more than about ``limit`` bytes of it was held in memory to find out. ``progress``
        is awaited before the first read and after each part of a body that comes in
        parts (a holder of something with a deadline checks it there: no timer needed),
        and while a part is :data:`SLOW_PART_MS` late or more (the answer is slow in
        coming: a holder may want to record what it has so far).
        """
        ...


class BytesBody:
    """A body already in memory."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def read(self) -> bytes:
        """The bytes."""
        return self.data

    async def read_at_most(self, limit: int, progress: Progress | None = None) -> bytes | None:
        """The bytes, if there are at most ``limit`` of them."""
        return self.data if len(self.data) <= limit else None


@dataclass(frozen=True, slots=True)
class Client:
    """Who sent the request, as the platform (never the client) says.

    ``ip`` is ``CF-Connecting-IP`` (set by Cloudflare; never ``X-Forwarded-For``), the
    rest is ``request.cf``. Missing values are empty strings (coordinates ``None``).
    """

    ip: str = ""
    country: str = ""
    continent: str = ""
    asn: str = ""
    latitude: float | None = None
    longitude: float | None = None


@dataclass(slots=True)
class Request:
    """An incoming request. ``path`` and ``host`` are as received (not yet canonical).

    ``native`` is the platform's own request, opaque here: the adapter may send it on as
    it is when its fields and body are unchanged. The adapter compares those, not the
    method: a stage that changes the method sets ``native`` to ``None``.
    """

    method: str
    path: str
    query: str = ""
    host: str = ""
    scheme: str = "https"
    headers: HeaderMap = field(default_factory=Headers)
    client: Client = field(default_factory=Client)
    body: Body | None = None
    native: object | None = None
    sent_as: str | None = None
    """The method the client sent, when a method override made it another (``method``)."""

    async def read_body_at_most(self, limit: int) -> bytes | None:
        """The body's bytes if there are at most ``limit`` of them, then kept (the request
        is forwarded as these bytes), else ``None`` with the body left whole."""
        if self.body is None:
            return b""
        data = await self.body.read_at_most(limit)
        if data is not None:
            self.body = BytesBody(data)
        return data

    def single_header(self, name: str) -> str | None:
        """The one value of a header, ``None`` when absent.

        Raises :class:`AmbiguousRequestError` when the header holds several different
        values: sent more than once, or as a comma-separated list. The runtime hands a
        field sent more than once over as one value joined with ", " while it sends the
        origin every line, so a comma separates values here; which line an origin reads is
        up to the origin (the first, the last, all), and a value that decides identity
        must not be a guess. The fields the runtime forwards joined
        (:data:`JOINED_BY_RUNTIME`) are taken whole: the origin sees what is counted.
        """
        values = self.headers.get_all(name)
        if not values:
            return None
        if len(values) == 1 and "," not in values[0]:
            # The usual case, checked first. A field value excludes the whitespace around
            # it (RFC 9110 section 5.5) and origins read it so; the runtime keeps trailing
            # whitespace, which would otherwise count "K " apart from "K".
            return values[0].strip(" \t")
        folded = name.lower()
        if taken_whole(folded):
            items = {value.strip() for value in values}
        else:
            items = {item for value in values for item in list_items(value)}
        if len(items) > 1:
            raise AmbiguousRequestError(
                f"the header {name!r} holds {len(items)} different values (it is sent more "
                "than once, or as a comma-separated list)"
            )
        return items.pop() if items else ""

    def query_param(self, name: str) -> str | None:
        """The one value of a query parameter (decoded), ``None`` when absent.

        Raises :class:`AmbiguousRequestError` for repeated parameters with different values.
        A raw ``;`` separates parameters here as ``&`` does: some origins split on it
        (Rack 2, so Rails), and ``?api_key=K;x=1`` must not be a key other than ``K``. A
        name is matched in every spelling PHP reads as it (``api.key``, ``api_key[]``:
        see :mod:`.params`).
        """
        try:
            values = {value for _, value in decoded_pieces(self.query, name, "&;")}
        except TooManyCandidatesError as exc:
            raise AmbiguousRequestError(f"the query has {exc}") from exc
        if not values:
            return None
        if len(values) > 1:
            raise AmbiguousRequestError(f"the query parameter {name!r} is given several values")
        return values.pop()

    def cookie(self, name: str) -> str | None:
        """A cookie's one value, ``None`` when absent.

        Raises :class:`AmbiguousRequestError` when it is sent several times with different
        values, or when origins would not agree on its value: the runtime joins several
        ``Cookie`` lines with ", ", and some origins split a Cookie line on "," as well as
        ";" (Rack 2, so Rails), so ``sid=K, x=1`` is ``K`` to them and ``K, x=1`` to
        others. A value read differently either way is refused, not guessed (an RFC 6265
        value holds no comma, so this touches no well-formed cookie).
        """
        values: set[str] = set()
        other_case: set[str] = set()
        for line in self.headers.get_all("cookie"):
            for text in (line, line.replace(",", ";")) if "," in line else (line,):
                try:
                    spelled = _cookie_values(text, name)
                except TooManyCandidatesError as exc:
                    raise AmbiguousRequestError(f"the cookies hold {exc}") from exc
                for value, exact in spelled:
                    (values if exact else other_case).add(value)
        # The name in another case (ASP.NET Core finds it so) counts only when no spelling
        # in the name's own case is there: a browser may well hold "SID" from another site
        # of the domain beside this one's "sid", and most origins read "sid" alone.
        values = values or other_case
        if not values:
            return None
        if len(values) > 1:
            raise AmbiguousRequestError(f"the cookie {name!r} is sent with several values")
        return values.pop()


def _cookie_values(line: str, name: str) -> list[tuple[str, bool]]:
    """Every value of cookie ``name`` in one ``Cookie`` line, each with whether its name
    was in the name's own case.

    Values are taken as sent (browsers send values RFC 6265 does not allow), except that a
    double-quoted value is unquoted as Python's ``http.cookies`` does (backslash escapes,
    octal ones included), so ``sid="a"`` and ``sid=a`` are the same value, and that names
    and values are percent-decoded as Rack and Express's ``cookie`` read them: ``sid=%4B7``
    is ``K7`` to those origins, so it is ``K7`` here too (one counter, not one per
    spelling), and ``s%69d`` is ``sid``; PHP's spellings of the name count too
    (``s.id`` is its ``s_id``: see :mod:`.params`).
    """
    found = []
    # Only the cookies spelled like the name are decoded (see params.named_pieces).
    for cookie_name, value in named_pieces(line, name, ";"):
        if value is None:
            continue
        decoded = _percent_decoded(cookie_name.strip())
        if same_param(decoded, name):
            exact = same_param(decoded, name, any_case=False)
            found.append((_percent_decoded(_unquote_cookie(value.strip())), exact))
    return found


def _percent_decoded(text: str) -> str:
    # Bytes that are not UTF-8 stay apart (\udcXX escapes, keyed as the bytes they were).
    return unquote(text, errors="surrogateescape") if "%" in text else text


_COOKIE_ESCAPE = re.compile(r"\\(?:([0-3][0-7][0-7])|(.))", re.DOTALL)


def _unquote_cookie(value: str) -> str:
    if len(value) < 2 or value[0] != '"' or value[-1] != '"':
        return value
    return _COOKIE_ESCAPE.sub(
        lambda match: chr(int(match[1], 8)) if match[1] else match[2], value[1:-1]
    )


@dataclass(slots=True)
class Response:
    """A response: from the origin, from the cache, or made by the gateway.

    ``body`` is ``None`` (empty), bytes, or an opaque :class:`Body` the platform streams.
    """

    status: int
    headers: HeaderMap = field(default_factory=Headers)
    body: bytes | Body | None = None
    native: object | None = None
    """The platform's own response, when this one came from it (opaque here)."""

    async def read_body_at_most(self, limit: int, progress: Progress | None = None) -> bytes | None:
        """The body's bytes if there are at most ``limit`` of them (then kept), else
        ``None`` with the body left whole to be streamed to the client (``progress``: see
        :meth:`Body.read_at_most`)."""
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body if len(self.body) <= limit else None
        data = await self.body.read_at_most(limit, progress)
        if data is not None:
            self.body = data
        return data


def dropped_names(
    present: Iterable[str], names: frozenset[str], underscored: frozenset[str] = frozenset()
) -> list[str]:
    """The ``present`` field names (lower case) that are ``names`` in any spelling with
    ``_`` for ``-``, or ``underscored`` names (fields the gateway sets, under exactly that
    name) in any other spelling: CGI-style servers
    (WEBrick, Werkzeug, gunicorn before 22, Puma's ``HTTP_`` env) read ``X_Forwarded_Host``
    as ``X-Forwarded-Host``, so dropping only the dashed spelling would let the other one
    through (the class of Puma CVE-2024-45614)."""
    own = {name.replace("_", "-"): name for name in underscored}
    out = []
    for name in present:
        dashed = name.replace("_", "-")
        if name in names or ("_" in name and dashed in names):
            out.append(name)
        elif dashed in own and name != own[dashed]:
            # Another spelling of a field the gateway sets under its exact name.
            out.append(name)
    return out
