"""Conversions between the runtime's Request/Response and the gateway's plain ones.

Crossing between Python and JavaScript costs time on every request, so nothing is copied
that no stage reads: headers are read through to the runtime's own ``Headers`` object (and
copied only when a stage changes one), bodies stay runtime streams until a stage reads
them, and a request or response nothing changed goes back to the runtime as it came.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from typing import Any

import js
from pyodide.ffi import JsException, create_proxy, jsnull, to_js

from ..core.caching.fields import content_length
from ..core.errors import BodyReadError
from ..core.http.messages import (
    SLOW_PART_MS,
    Body,
    BytesBody,
    Client,
    HeaderMap,
    Progress,
    Request,
    Response,
    dropped_names,
)


class _Globals:
    """The runtime's JavaScript globals, each looked up once, on first use.

    ``js.fetch`` finds the global anew on every use (a few microseconds on Pyodide, several
    times per request); ``globals_.fetch`` keeps what it found. Not at import time: the
    local host runs the imports with boot stand-ins in place of some globals (``fetch``).
    """

    def __getattr__(self, name: str) -> Any:
        value = getattr(js, name)
        setattr(self, name, value)
        return value


globals_ = _Globals()


def absent(value: Any) -> bool:
    """Whether a value from JavaScript is missing: ``undefined`` arrives as ``None``, but
    ``null`` as ``jsnull``, which is not ``None``."""
    return value is None or value is jsnull


#: Runtime calls waiting under a deadline, by number; the timer's callback cancels one,
#: and each call removes its own entry when it ends.
_waiting: dict[int, asyncio.Future[Any]] = {}
_numbers = itertools.count()
_expire_proxy: Any = None
#: Every so many calls, the entries of calls begun more than ``_PRUNE_AFTER`` calls ago
#: are dropped: a request the runtime abandoned mid-call (its timer cancelled with it)
#: never removes its own. (At 1,000 calls a second that is a minute, past any timeout;
#: a call dropped while still waiting only loses its timeout.)
_PRUNE_EVERY = 4096
_PRUNE_AFTER = 65_536


def _expire(number: int) -> None:
    call = _waiting.pop(int(number), None)
    if call is not None:
        call.cancel()


def _prune(newest: int) -> None:
    for number in [n for n in _waiting if n < newest - _PRUNE_AFTER]:
        del _waiting[number]


async def within(call: Any, timeout_ms: int) -> Any:
    """``await call`` (a runtime call), or :class:`TimeoutError` after ``timeout_ms``
    (0: no limit).

    Not ``asyncio.wait_for``: its timer is a runtime ``setTimeout`` that it never clears,
    so when the request ends first the runtime cancels it and its Python callback is
    never freed (about one handle and one context leaked per limited or idempotent
    request). Here the timer is cleared as soon as the call answers, and nothing calls
    back into Python unless it fires. Every timer calls the same callback (made once per
    isolate) with the call's number, so a call costs no callback of its own.
    """
    if not timeout_ms:
        return await call
    global _expire_proxy  # noqa: PLW0603 - one callback for the isolate, on purpose
    if _expire_proxy is None:
        _expire_proxy = create_proxy(_expire)
    call = asyncio.ensure_future(call)
    number = next(_numbers)
    if number % _PRUNE_EVERY == 0:
        _prune(number)
    _waiting[number] = call
    timer = globals_.setTimeout(_expire_proxy, timeout_ms, number)
    try:
        return await call
    except asyncio.CancelledError:
        if number not in _waiting:
            raise TimeoutError(f"no answer within {timeout_ms} ms") from None
        raise
    finally:
        if _waiting.pop(number, None) is not None:
            globals_.clearTimeout(timer)


class JsBody:
    """The body of a runtime Request or Response, read only when a stage asks for it."""

    __slots__ = ("_data", "_idle_ms", "_source")

    def __init__(self, source: Any, idle_ms: int = 0) -> None:
        self._source = source
        self._data: bytes | None = None
        # When set (an origin's answer), a read that gets no bytes for this long fails:
        # a body that stalls is not waited for without end.
        self._idle_ms = idle_ms

    @property
    def source(self) -> Any:
        """The runtime object whose body this is."""
        return self._source

    @property
    def stream(self) -> Any:
        """The runtime's body stream (``None`` once read)."""
        return self._source.body if self._data is None else None

    @property
    def data(self) -> bytes | None:
        """The bytes, once read."""
        return self._data

    def rebuild(self) -> Any:
        """Put the unread body of a fetched response under a new, changeable ``Response``.

        ``new Response(old.body, old)`` (the runtime's idiom for a changeable copy) takes
        over the stream and the status, status text and fields; its fields can be changed.
        Reads from then on are from the new response. Returns it.
        """
        source = self._source
        self._source = globals_.Response.new(source.body, source)
        return self._source

    async def read(self, progress: Progress | None = None) -> bytes:
        """The whole body, read once (``progress``: see :meth:`read_at_most`)."""
        if self._data is None:
            if self._idle_ms:
                self._data = await self._read_chunks(progress)
                return self._data
            try:
                buffer = await self._source.arrayBuffer()
            except JsException as exc:
                raise BodyReadError(str(exc)[:200]) from exc
            self._data = bytes(buffer.to_bytes())
        return self._data

    async def _read_chunks(self, progress: Progress | None) -> bytes:
        """The whole body, chunk by chunk, each within the idle bound."""
        stream = self._source.body
        if absent(stream):
            return b""
        reader = stream.getReader()
        chunks: list[bytes] = []
        while True:
            if progress is not None:
                await progress()
            step = await self._next(reader, progress)
            if step.done:
                return b"".join(chunks)
            chunks.append(bytes(step.value.to_bytes()))

    async def _next(self, reader: Any, progress: Progress | None = None) -> Any:
        """``reader.read()``, within the idle bound when there is one; a stall or a broken
        stream is a :class:`BodyReadError` (the stream is then cancelled). ``progress`` is
        awaited if the part is :data:`SLOW_PART_MS` late (the read goes on meanwhile)."""
        idle = self._idle_ms
        try:
            if not idle:
                return await reader.read()
            if progress is None or idle <= SLOW_PART_MS:
                return await within(reader.read(), idle)
            read = asyncio.ensure_future(reader.read())
            try:
                return await within(asyncio.shield(read), SLOW_PART_MS)
            except TimeoutError:
                pass
            await progress()
            return await within(read, idle - SLOW_PART_MS)
        except TimeoutError:
            reader.cancel()
            raise BodyReadError(
                f"the origin sent no bytes of its body for {self._idle_ms} ms"
            ) from None
        except JsException as exc:
            raise BodyReadError(str(exc)[:200]) from exc

    async def read_at_most(self, limit: int, progress: Progress | None = None) -> bytes | None:
        """The whole body if it is at most ``limit`` bytes (then kept), else ``None``.
        ``progress`` is awaited before each chunk is read (a body read whole at once, with
        no idle bound, calls it once).

        A ``Content-Length`` decides without reading, unless a ``Content-Encoding`` says
        the length is not that of the bytes read (the runtime decodes fetched bodies).
        Otherwise the stream is split in two (``tee``): one branch is read here up to
        ``limit``; past it, that branch is cancelled and the other, which holds what was
        read so far and the rest, becomes this body (under a new ``Response``), to be
        streamed on whole. On the way, at most about ``limit`` bytes are held.
        """
        if self._data is not None:
            return self._data if len(self._data) <= limit else None
        source = self._source
        stream = source.body
        if absent(stream):
            self._data = b""
            return self._data
        headers = source.headers
        declared = headers.get("content-length")
        length = None if absent(declared) else content_length({"content-length": str(declared)})
        encoding = headers.get("content-encoding")
        if length is not None and (absent(encoding) or str(encoding).lower() == "identity"):
            if length > limit:
                return None
            if progress is not None and not self._idle_ms:
                await progress()
            data = await self.read(progress)  # the declared length is checked, not trusted
            return data if len(data) <= limit else None
        branches = stream.tee()
        mine, kept = branches[0], branches[1]
        reader = mine.getReader()
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                if progress is not None:
                    await progress()
                step = await self._next(reader, progress)
                if step.done:
                    break
                chunk = step.value
                size += int(chunk.byteLength)
                if size > limit:
                    reader.cancel()
                    self._source = globals_.Response.new(kept, source)
                    return None
                chunks.append(bytes(chunk.to_bytes()))
        except BodyReadError:
            kept.cancel()
            raise
        kept.cancel()
        self._data = b"".join(chunks)
        return self._data


class JsHeaders:
    """A :class:`HeaderMap` over a runtime ``Headers`` object, copied on the first change.

    The fields of a fetched response (:meth:`of_response`) are copied by rebuilding the
    response around its unread body (:meth:`JsBody.rebuild`): the rebuilt response is
    then the one answered with, with no second copy of the fields and no new init.
    """

    __slots__ = ("_body", "_get", "_set", "_status", "copied", "js", "rebuilt")

    def __init__(self, js_headers: Any) -> None:
        self.js = js_headers
        self.copied = False
        self.rebuilt: Any = None
        self._body: JsBody | None = None
        self._status = 0
        # The Headers object's own methods, looked up once (a lookup is a call into
        # JavaScript that makes a new proxy each time).
        self._get: Any = None
        self._set: Any = None

    @classmethod
    def of_response(cls, js_response: Any, body: JsBody, status: int) -> JsHeaders:
        """The fields of ``js_response``, whose body is ``body`` and status ``status``."""
        headers = cls(js_response.headers)
        headers._body = body
        headers._status = status
        return headers

    def _writable(self) -> Any:
        if not self.copied:
            # Incoming and fetched headers are immutable: change a copy.
            body = self._body
            if body is not None and body.data is None:
                self.rebuilt = body.rebuild()
                self.js = self.rebuilt.headers
            else:
                self.js = globals_.Headers.new(self.js)
            self.copied = True
            self._get = None
            self._set = self.js.set
        return self.js

    def rebuilt_as(self, status: int, body: object) -> Any:
        """The rebuilt response, if answering ``status`` with ``body`` needs nothing more."""
        rebuilt = self.rebuilt
        if (
            rebuilt is None
            or status != self._status
            or not isinstance(body, JsBody)
            or body.source is not rebuilt
            or body.data is not None
        ):
            return None
        return rebuilt

    def get(self, name: str) -> str | None:
        getter = self._get
        if getter is None:
            getter = self._get = self.js.get
        value = getter(name)
        return None if absent(value) else str(value)

    def get_all(self, name: str) -> list[str]:
        if name.lower() == "set-cookie":
            return [str(v) for v in self.js.getSetCookie()]
        value = self.get(name)
        return [] if value is None else [value]

    def set(self, name: str, value: str) -> None:
        if not self.copied:
            self._writable()
        self._set(name, value)

    def add(self, name: str, value: str) -> None:
        self._writable().append(name, value)

    def delete(self, name: str) -> None:
        if self.js.has(name):
            self._writable().delete(name)

    def discard(self, names: frozenset[str], underscored: frozenset[str] = frozenset()) -> None:
        # The names present, in one call into JavaScript (the runtime lower-cases them),
        # rather than one lookup per name asked about.
        keys = globals_.Array.from_(self.js.keys()).to_py()
        present = dropped_names(keys, names, underscored)
        if present:
            writable = self._writable()
            for name in present:
                writable.delete(name)

    def items(self) -> list[tuple[str, str]]:
        return [(str(k), str(v)) for k, v in globals_.Array.from_(self.js.entries()).to_py()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(self.js.has(name))


def _text(value: Any) -> str:
    if absent(value) or isinstance(value, bool):
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(int(value))
    return ""


def _coordinate(value: Any) -> float | None:
    if absent(value):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _client(js_request: Any, headers: JsHeaders) -> Client:
    ip = headers.get("cf-connecting-ip") or ""
    cf = getattr(js_request, "cf", None)
    if absent(cf) or isinstance(cf, bool):
        return Client(ip)
    # Any field may be missing (locally, MF-CF-Blob sets only what a test gives).
    return Client(
        ip=ip,
        country=_text(getattr(cf, "country", None)),
        continent=_text(getattr(cf, "continent", None)),
        asn=_text(getattr(cf, "asn", None)),
        latitude=_coordinate(getattr(cf, "latitude", None)),
        longitude=_coordinate(getattr(cf, "longitude", None)),
    )


def to_request(js_request: Any) -> Request:
    """The plain request. The path is taken from the URL as the runtime has it, unparsed."""
    url = str(js_request.url)
    scheme, _, rest = url.partition("://")
    authority, slash, target = rest.partition("/")
    path, _, query = (slash + target).partition("?")
    headers = JsHeaders(js_request.headers)
    body: Body | None = None if absent(js_request.body) else JsBody(js_request)
    return Request(
        method=str(js_request.method),
        path=path or "/",
        query=query,
        host=authority,
        scheme=scheme.lower(),
        headers=headers,
        client=_client(js_request, headers),
        body=body,
        native=js_request,
    )


def untouched(headers: HeaderMap, body: object, native: Any) -> bool:
    """Whether ``headers`` and ``body`` are still exactly those of the runtime's ``native``."""
    if native is None or not isinstance(headers, JsHeaders) or headers.copied:
        return False
    if body is None:
        return bool(absent(native.body))
    return isinstance(body, JsBody) and body.source is native and body.data is None


def js_headers(headers: HeaderMap) -> Any:
    """A runtime ``Headers`` object with the same fields."""
    if isinstance(headers, JsHeaders):
        return headers.js
    # One call per field is cheaper than converting a list of lists for the constructor.
    out = globals_.Headers.new()
    for name, value in headers.items():
        out.append(name, value)
    return out


def js_object() -> Any:
    """An empty plain JavaScript object, for an init dictionary: setting its fields one by
    one costs less than ``to_js`` of a dict with ``Object.fromEntries``."""
    return globals_.Object.new()


#: ``ResponseInit`` objects for the gateway's own answers, by (status, fields). The runtime
#: copies an init's headers into each new Response, so one init serves every answer with
#: the same fields (a flood of denials of one key shares one for about a second).
_answer_inits: dict[tuple[int, tuple[tuple[str, str], ...]], Any] = {}
_MAX_ANSWER_INITS = 256


def _answer_init(status: int, headers: HeaderMap) -> Any:
    key = (status, tuple(headers.items()))
    init = _answer_inits.get(key)
    if init is None:
        init = js_object()
        init.status = status
        init.headers = js_headers(headers)
        if len(_answer_inits) >= _MAX_ANSWER_INITS:
            _answer_inits.clear()
        _answer_inits[key] = init
    return init


def js_body(body: bytes | Body | None) -> Any:
    """What to hand the runtime as a body: its own stream when unread, else the bytes."""
    if body is None:
        return None
    if isinstance(body, JsBody):
        stream = body.stream
        if not absent(stream):
            return stream
        body = body.data or b""
    if isinstance(body, BytesBody):
        body = body.data
    if isinstance(body, bytes):
        return to_js(body) if body else None
    raise TypeError(f"cannot send a body of type {type(body).__name__}")


def to_js_response(response: Response) -> Any:
    """The runtime ``Response`` for a plain one (the runtime's own when nothing changed)."""
    native = response.native
    if untouched(response.headers, response.body, native) and native.status == response.status:  # type: ignore[attr-defined]
        return native
    headers = response.headers
    if isinstance(headers, JsHeaders):
        rebuilt = headers.rebuilt_as(response.status, response.body)
        if rebuilt is not None:
            return rebuilt
        init = js_object()
        init.status = response.status
        init.headers = headers.js
        if native is not None and native.status == response.status:  # type: ignore[attr-defined]
            init.statusText = native.statusText  # type: ignore[attr-defined]
    else:
        init = _answer_init(response.status, headers)
    return globals_.Response.new(js_body(response.body), init)
