"""The log formats the replay reads, each a reader of one line.

=============  ==========================================================================
``combined``   nginx's and Apache's combined log format, and the common one (the same
               without referrer and agent): ``ADDR - USER [TIME] "METHOD TARGET PROTO"
               STATUS SIZE "REFERER" "AGENT"``. Keeps the address, the referrer and the
               agent; not the host (``--host``), not other headers.
``logpush``    Cloudflare Logpush ``http_requests`` as NDJSON: ``EdgeStartTimestamp`` (in
               any of Logpush's timestamp formats: RFC 3339, Unix seconds or nanoseconds,
               or milliseconds), ``ClientRequestMethod``, ``ClientRequestHost``,
               ``ClientRequestURI``, ``ClientIP``, ``ClientCountry``, ``ClientASN``,
               ``OriginResponseStatus`` (else ``EdgeResponseStatus``),
               ``ClientRequestUserAgent``, ``ClientRequestReferer`` and the headers the job
               logged (``RequestHeaders``).
``gateway``    the gateway's own JSON lines (``{"logger": "edge_limiter", "event":
               "allowed", "route": ..., "key_hash": ...}``), one per decision (set
               ``[logging] sample_allowed = 1`` to have every admission logged), with the
               time a log pipeline adds: ``timestamp``, ``time``, ``ts`` or
               ``$metadata.timestamp`` (or the line inside such a record's ``message``).
               Each becomes a request on its route counted against its key (the key is
               known by its hash only), and a denial's ``repeats`` that many more at its
               time (the denials the gateway did not print a line for, ``[logging]
               denials_every``); what the gateway decided is compared with what the
               replay decides.
``json:SPEC``  any other JSON lines, given which field holds what (see :class:`JsonFields`).
=============  ==========================================================================
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ...core.stats import EVENTS
from .records import ASN, COUNTRY, IP, LogRecord, clf_time_ms, time_ms


class BadLine(ValueError):
    """A line its format cannot read; the message says why."""


class LogFormat:
    """A reader of one format's lines."""

    name = ""
    """The name ``--format`` takes."""
    about = ""
    """What it reads, as errors name it."""

    def parse(self, line: str, number: int) -> LogRecord:
        """The request of ``line``; raises :class:`BadLine`."""
        raise NotImplementedError


# --- combined / common ------------------------------------------------------------------

_QUOTED = r'"((?:[^"\\]|\\.)*)"'
_CLF = re.compile(
    r"(\S+) \S+ (?:\S+|\"[^\"]*\") \[([^\]]+)\] " + _QUOTED + r" (\d{3}) (?:\d+|-)"
    r"(?: " + _QUOTED + r" " + _QUOTED + r")?"
)
_REQUEST_LINE = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+)(?: HTTP/\d(?:\.\d)?)?")
_ESCAPE = re.compile(r"\\x([0-9A-Fa-f]{2})|\\(.)")
_COMBINED_KEPT = frozenset((IP, "user-agent", "referer"))


def _unescaped(text: str) -> str:
    """A quoted field as nginx (``\\xHH``) and Apache (``\\"``) escape it, unescaped."""
    if "\\" not in text:
        return text
    return _ESCAPE.sub(lambda m: chr(int(m[1], 16)) if m[1] else m[2], text)


class Combined(LogFormat):
    name = "combined"
    about = "nginx/Apache combined or common log format"

    def __init__(self, host: str = "", scheme: str = "https") -> None:
        self.host = host
        self.scheme = scheme

    def parse(self, line: str, number: int) -> LogRecord:
        found = _CLF.match(line)
        if found is None:
            raise BadLine('not ADDR - USER [TIME] "REQUEST" STATUS SIZE')
        ip, when, request, status, referer, agent = found.groups()
        at = clf_time_ms(when)
        if at is None:
            raise BadLine(f"time {when!r} is not like 10/Oct/2000:13:55:36 -0700")
        parts = _REQUEST_LINE.fullmatch(_unescaped(request))
        if parts is None:
            raise BadLine(f"request {request[:80]!r} is not METHOD TARGET PROTOCOL")
        method, target = parts.groups()
        if not target.startswith("/"):
            if "://" not in target:
                raise BadLine(f"target {target[:80]!r} is neither a path nor a URL")
            scheme, _, rest = target.partition("://")
            scheme = scheme.lower()
            host, slash, path = rest.partition("/")
            target = "/" + path if slash else "/"
        else:
            host, scheme = self.host, self.scheme
        headers = []
        if referer and referer != "-":
            headers.append(("referer", _unescaped(referer)))
        if agent and agent != "-":
            headers.append(("user-agent", _unescaped(agent)))
        return LogRecord(at, method.upper(), target, host=host, scheme=scheme,
                         ip="" if ip == "-" else ip, status=int(status), headers=tuple(headers),
                         kept=_COMBINED_KEPT if agent is not None else frozenset((IP,)),
                         number=number)  # fmt: skip


# --- JSON lines ---------------------------------------------------------------------------


def _object(line: str) -> dict[str, Any]:
    if not line.startswith("{"):
        raise BadLine("not a JSON object")
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise BadLine(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadLine("not a JSON object")
    return data


def _status(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    if isinstance(value, str) and value.isdigit() and 100 <= int(value) <= 599:
        return int(value)
    return None


class Logpush(LogFormat):
    name = "logpush"
    about = "Cloudflare Logpush http_requests (NDJSON)"

    def parse(self, line: str, number: int) -> LogRecord:
        data = _object(line)
        if "ClientRequestURI" not in data:
            raise BadLine("no ClientRequestURI")
        at = time_ms(data.get("EdgeStartTimestamp"))
        if at is None:
            raise BadLine(f"EdgeStartTimestamp {data.get('EdgeStartTimestamp')!r} is not a time")
        uri = data["ClientRequestURI"]
        method = data.get("ClientRequestMethod")
        if not isinstance(uri, str) or not uri.startswith("/"):
            raise BadLine(f"ClientRequestURI {uri!r} is not a path")
        if not isinstance(method, str) or not method:
            raise BadLine("no ClientRequestMethod")
        status = _status(data.get("OriginResponseStatus")) or _status(
            data.get("EdgeResponseStatus")
        )
        kept: set[str] = set()
        headers: list[tuple[str, str]] = []
        logged = data.get("RequestHeaders")
        if isinstance(logged, dict):
            for name, value in logged.items():
                if isinstance(name, str) and isinstance(value, str):
                    headers.append((name.lower(), value))
                    kept.add(name.lower())
        for field, header in (("ClientRequestUserAgent", "user-agent"),
                              ("ClientRequestReferer", "referer")):  # fmt: skip
            if field in data:
                kept.add(header)
                if isinstance(data[field], str) and data[field]:
                    headers.append((header, data[field]))
        ip = data.get("ClientIP")
        country = data.get("ClientCountry")
        asn = data.get("ClientASN")
        if isinstance(ip, str) and ip:
            kept.add(IP)
        if isinstance(country, str) and country:
            kept.add(COUNTRY)
        if isinstance(asn, int | str) and not isinstance(asn, bool) and str(asn):
            kept.add(ASN)
        host = data.get("ClientRequestHost")
        scheme = data.get("ClientRequestScheme")
        return LogRecord(
            at,
            method.upper(),
            uri,
            host=host if isinstance(host, str) else "",
            scheme=scheme.lower() if isinstance(scheme, str) and scheme else "https",
            ip=ip if isinstance(ip, str) else "",
            status=status or 200,
            headers=tuple(headers),
            country=country.upper() if isinstance(country, str) else "",
            asn=str(asn) if ASN in kept else "",
            kept=frozenset(kept),
            number=number,
        )


#: The gateway's decision events (see ``gateway/ratelimit.py``).
DECISION_EVENTS = frozenset(EVENTS)
_TIME_FIELDS = ("timestamp", "time", "ts", "@timestamp", "EventTimestampMs", "eventTimestamp")


class GatewayRecord(LogRecord):
    """A decision line of the gateway's own log: a request on ``route`` by ``key_hash``."""

    __slots__ = ("event", "key_hash", "repeats", "route")

    def __init__(
        self, at_ms: int, route: str, key_hash: str, event: str, number: int, *, repeats: int = 0
    ) -> None:
        super().__init__(at_ms, "", "", number=number)
        self.route = route
        self.key_hash = key_hash
        self.event = event
        self.repeats = repeats
        """Denials of the key the line stands for besides its own (``[logging]
        denials_every``): replayed as that many more requests at the line's time."""


def _logged_time(data: dict[str, Any]) -> int | None:
    for name in _TIME_FIELDS:
        if name in data:
            return time_ms(data[name])
    meta = data.get("$metadata")
    if isinstance(meta, dict) and "timestamp" in meta:
        return time_ms(meta["timestamp"])
    return None


class GatewayLines(LogFormat):
    name = "gateway"
    about = "the gateway's own JSON log lines"

    def parse(self, line: str, number: int) -> LogRecord:
        data = _object(line)
        at = _logged_time(data)
        inner = data
        if data.get("logger") != "edge_limiter":
            for wrapper in ("message", "msg", "log", "source"):
                value = data.get(wrapper)
                if isinstance(value, str) and value.startswith("{"):
                    value = _object(value)
                if isinstance(value, dict) and value.get("logger") == "edge_limiter":
                    inner = value
                    break
            else:
                raise BadLine('not a line of the gateway\'s ("logger": "edge_limiter")')
        event = inner.get("event")
        if event not in DECISION_EVENTS:
            raise _NotADecision(str(event))
        route, key_hash = inner.get("route"), inner.get("key_hash")
        if not isinstance(route, str) or not isinstance(key_hash, str) or not key_hash:
            raise BadLine(f"a {event!r} line without its route and key_hash")
        if at is None:
            at = _logged_time(inner)
        if at is None:
            raise BadLine(
                "no time (timestamp, time, ts or $metadata.timestamp): the gateway prints "
                "none itself, a log pipeline adds it"
            )
        repeats = inner.get("repeats", 0)
        if type(repeats) is not int or repeats < 0:
            raise BadLine(f"repeats must be a count, got {repeats!r}")
        return GatewayRecord(at, route, key_hash, str(event), number, repeats=repeats)


class _NotADecision(BadLine):
    """A line of the gateway's that is not a decision (an origin attempt, a warning):
    skipped, not malformed."""


def skipped(exc: BadLine) -> bool:
    """Whether a line the reader refused is one to pass over silently (it belongs to the
    log but is no request)."""
    return isinstance(exc, _NotADecision)


# --- JSON with named fields ---------------------------------------------------------------

#: What ``json:`` may name: role -> what it is.
ROLES = {
    "time": "when the request came (epoch s/ms/µs/ns or RFC 3339) - required",
    "url": "the absolute URL, or the path with its query - this or path is required",
    "path": "the path (with or without its query)",
    "query": "the query string (without '?')",
    "host": "the host asked for",
    "method": "the method (default GET)",
    "ip": "the client's address",
    "status": "the origin's status (default 200)",
    "country": "the client's country code",
    "asn": "the client's AS number",
}


def _getter(path: str) -> Callable[[dict[str, Any]], Any]:
    names = path.split(".")
    if len(names) == 1:
        name = names[0]
        return lambda data: data.get(name)

    def get(data: dict[str, Any]) -> Any:
        value: Any = data
        for name in names:
            if not isinstance(value, dict):
                return None
            value = value.get(name)
        return value

    return get


class JsonFields(LogFormat):
    """JSON lines whose fields are named: ``json:time=ts,url=req.url,ip=client,
    status=code,header.x-api-key=apikey`` (a dotted name reaches into nested objects;
    ``header.NAME=FIELD`` keeps that request header)."""

    name = "json"
    about = "JSON lines with the fields --format names"

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.fields: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self.headers: list[tuple[str, Callable[[dict[str, Any]], Any]]] = []
        for item in filter(None, (part.strip() for part in spec.split(","))):
            role, equals, path = item.partition("=")
            role, path = role.strip(), path.strip()
            if not equals or not path:
                raise ValueError(f"--format json: {item!r} is not ROLE=FIELD")
            if role.startswith("header."):
                self.headers.append((role.removeprefix("header.").lower(), _getter(path)))
            elif role in ROLES:
                self.fields[role] = _getter(path)
            else:
                raise ValueError(
                    f"--format json: no role {role!r}; roles: {', '.join(ROLES)}, header.NAME"
                )
        if "time" not in self.fields or not ({"url", "path"} & set(self.fields)):
            raise ValueError("--format json: needs time= and url= or path=")
        kept = {header for header, _ in self.headers}
        kept.update(role for role in (IP, COUNTRY, ASN) if role in self.fields)
        self.kept = frozenset(kept)

    def parse(self, line: str, number: int) -> LogRecord:
        data = _object(line)
        get = self.fields
        at = time_ms(get["time"](data))
        if at is None:
            raise BadLine(f"time {get['time'](data)!r} is not a time")
        host, scheme = "", "https"
        if "url" in get:
            url = get["url"](data)
            if not isinstance(url, str) or not url:
                raise BadLine("no url")
            if "://" in url:
                scheme, _, rest = url.partition("://")
                host, slash, tail = rest.partition("/")
                target = "/" + tail if slash else "/"
            else:
                target = url
        else:
            target = get["path"](data)
            if not isinstance(target, str) or not target:
                raise BadLine("no path")
        if "query" in get:
            query = get["query"](data)
            if isinstance(query, str) and query:
                target = f"{target}?{query.removeprefix('?')}"
        if not target.startswith("/"):
            raise BadLine(f"path {target[:80]!r} does not start with /")
        if "host" in get and isinstance(get["host"](data), str):
            host = get["host"](data)
        method = get["method"](data) if "method" in get else "GET"
        if not isinstance(method, str) or not method:
            raise BadLine("no method")
        status = _status(get["status"](data)) if "status" in get else 200
        headers = []
        for name, header in self.headers:
            value = header(data)
            if isinstance(value, str | int) and not isinstance(value, bool):
                headers.append((name, str(value)))
        text = {role: get[role](data) for role in (IP, COUNTRY, ASN) if role in get}
        return LogRecord(
            at, method.upper(), target, host=host, scheme=scheme.lower(),
            ip=str(text.get(IP) or ""), status=status or 200, headers=tuple(headers),
            country=str(text.get(COUNTRY) or "").upper(), asn=str(text.get(ASN) or ""),
            kept=self.kept, number=number,
        )  # fmt: skip


#: The formats tried when none is given, in order.
DETECTED = ("logpush", "gateway", "combined")
NAMES = ("combined", "common", "logpush", "gateway", "json:SPEC")


def named_format(spec: str, host: str = "") -> LogFormat:
    """The format ``--format`` names; ValueError naming the choices."""
    if spec in ("combined", "common"):
        return Combined(host)
    if spec == "logpush":
        return Logpush()
    if spec == "gateway":
        return GatewayLines()
    if spec.startswith("json:"):
        return JsonFields(spec.removeprefix("json:"))
    raise ValueError(f"--format {spec!r}: one of {', '.join(NAMES)}")
