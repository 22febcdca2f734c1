"""What a simulation shows: the requests that reached an origin, the origins' answers as
a test writes them, and the gateway's answers as a test reads them."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..core.durations import parse_duration
from ..core.explain import split_url
from ..core.http.messages import Headers, Response
from ..gateway import (
    OriginRequest,
    OriginTimeoutError,
)
from .platform import InstantSleep, ManualClock


@dataclass(frozen=True, slots=True)
class OriginCall:
    """One request as it reached an origin."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    timeout_ms: int = 0
    """How long the gateway waits for this attempt's answer (its status and fields)."""

    @property
    def path(self) -> str:
        """The URL's path (without the query)."""
        return split_url(self.url)[2]

    def header(self, name: str) -> str | None:
        """The field's value (lines joined with ``, ``), ``None`` when absent."""
        values = [value for key, value in self.headers if key.lower() == name.lower()]
        return ", ".join(values) if values else None


@dataclass(frozen=True, slots=True)
class Reply:
    """An origin's answer, given ``after`` a while on the simulated clock (milliseconds or
    ``"3s"``; by default the simulator's ``origin_latency``). An answer that would come
    after the attempt's timeout never comes: the gateway's wait ends at the timeout."""

    status: int = 200
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = ()
    body: bytes | str = b""
    after: int | str | None = None


class Fields(dict[str, str]):
    """An answer's fields by name, in any case (kept in lower case); a field sent on
    several lines joined with ``, ``."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)

    def get_all(self, name: str) -> list[str]:
        """Every line of the field ``name`` (any case), in order (``Set-Cookie``)."""
        wanted = name.lower()
        return [value for key, value in self.lines if key == wanted]

    @classmethod
    def of(cls, lines: tuple[tuple[str, str], ...]) -> Fields:
        """The fields of ``lines`` (names in lower case), each line kept for :meth:`get_all`."""
        fields = cls()
        found = dict.get  # the names are lower case already: no lookup in any case
        for key, value in lines:
            before = found(fields, key)
            fields[key] = value if before is None else f"{before}, {value}"
        fields.lines = lines
        return fields

    lines: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Answer:
    """What the client got."""

    status: int
    headers: Fields
    """By name in any case; a field sent on several lines joined with ``, `` (see
    :meth:`get_all` for ``Set-Cookie``)."""
    body: bytes
    forwarded: int
    """How many attempts at origins this request made, retries included, whether or not
    they reached one (0: answered by the gateway or from its cache)."""
    header_list: tuple[tuple[str, str], ...] = ()
    """The fields as sent, one pair per line."""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def get_all(self, name: str) -> list[str]:
        """Every line of the field ``name`` (any case), in order (as ``headers.get_all``)."""
        return self.headers.get_all(name)

    def json(self) -> Any:
        return json.loads(self.body)


#: What an origin function may return: a status, a body (answered 200), (status, body),
#: (status, headers, body), a :class:`Reply`, or None (the JSON echo).
OriginReply = (
    int
    | str
    | bytes
    | tuple[int, bytes | str]
    | tuple[int, Mapping[str, str] | Iterable[tuple[str, str]], bytes | str]
    | Reply
    | None
)
OriginFunction = Callable[[OriginCall], OriginReply | Awaitable[OriginReply]]


class _Origins:
    """Every origin of the config, answered by one function (or the JSON echo)."""

    def __init__(self, respond: OriginFunction | None, clock: ManualClock, latency_ms: int) -> None:
        self.respond = respond
        self.wait = InstantSleep(clock)
        self.latency_ms = latency_ms
        self.calls: list[OriginCall] = []

    async def send(self, request: OriginRequest) -> Response:
        body = request.body
        data = body if isinstance(body, bytes) else (await body.read() if body else b"")
        call = OriginCall(
            request.method, request.url, tuple(request.headers.items()), data, request.timeout_ms
        )
        self.calls.append(call)
        attempts = _ATTEMPTS.get()
        if attempts is not None:
            attempts[0] += 1
        reply: Any = self.respond(call) if self.respond is not None else None
        if not isinstance(reply, Reply):
            if inspect.isawaitable(reply):
                reply = await reply
            if not isinstance(reply, Reply):
                reply = _as_reply(reply, request, len(self.calls))
        after_ms = (
            self.latency_ms
            if reply.after is None
            else reply.after
            if isinstance(reply.after, int)
            else parse_duration(reply.after)
        )
        if request.timeout_ms and after_ms > request.timeout_ms:
            await self.wait(request.timeout_ms / 1000)
            raise OriginTimeoutError("The operation was aborted due to timeout")
        if after_ms > 0:
            await self.wait(after_ms / 1000)
        fields = reply.headers
        pairs = list(fields.items()) if isinstance(fields, Mapping) else list(fields)
        raw = reply.body.encode() if isinstance(reply.body, str) else bytes(reply.body)
        # Marked as fetched, as the platform's answers are: the gateway tells an origin's
        # answer from its own by it (CORS, for one).
        return Response(int(reply.status), Headers(pairs), raw, _FETCHED)


#: What an origin's answer carries as ``native`` (the platform's own response there).
_FETCHED = object()

#: The attempts at origins of the request being answered (each request of a burst runs in
#: its own task, with its own count).
_ATTEMPTS: ContextVar[list[int] | None] = ContextVar("attempts", default=None)


def _as_reply(reply: Any, request: OriginRequest, number: int) -> Reply:
    """What an origin function returned, as a :class:`Reply`."""
    if reply is None:
        echo = {"origin": request.url, "method": request.method, "n": number}
        return Reply(200, [("content-type", "application/json")], json.dumps(echo))
    if isinstance(reply, int) and not isinstance(reply, bool):
        return Reply(reply)
    if isinstance(reply, str | bytes):
        return Reply(200, body=reply)
    if isinstance(reply, tuple) and len(reply) == 2:
        return Reply(reply[0], body=reply[1])
    if isinstance(reply, tuple) and len(reply) == 3:
        return Reply(*reply)
    raise TypeError(
        "an origin function returns None (a JSON echo), a status, a body, (status, body), "
        f"(status, headers, body) or a Reply; got {reply!r}"
    )
