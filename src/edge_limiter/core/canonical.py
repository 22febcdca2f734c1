"""The one canonical form of a request's path and host, before matching and keying.

Origins do not all read a path the same way: most decode percent-encoded unreserved
characters (RFC 3986 section 6.2.2.2), nginx merges slashes, every server resolves dot
segments. If the limiter matched the raw path, ``//v1/login`` or ``/v1/%6cogin`` would
dodge a ``/v1/login`` route while the origin served them as ``/v1/login``. So the gateway
puts every path in one canonical form, matches and keys on it, and forwards exactly it:

- percent-encoded unreserved characters (``A-Z a-z 0-9 - . _ ~``) are decoded;
- everything else that is percent-encoded stays encoded, with upper-case hex;
- characters that may not appear raw in a path segment (space, ``"``, ``<``, ``>``,
  ``^``, `````, ``{``, ``|``, ``}``, ``[``, ``]``, non-ASCII) are percent-encoded (UTF-8);
- empty segments are removed (``//a///b`` is ``/a/b``); one trailing slash is kept;
- dot segments (``.``, ``..``, also when written ``%2e``) are resolved.

Paths that cannot be made canonical without guessing are refused with a
:class:`~edge_limiter.core.errors.PathError` (the gateway answers 400): an encoded ``/``
or ``\\`` (servers disagree on whether it separates segments), a raw ``\\``, NUL and other
control characters raw or encoded, invalid percent-encoding, dot segments that climb above
the root, and anything that is not an absolute path.

Hosts are lower-cased, lose a trailing dot and the port that is the scheme's default.
"""

from __future__ import annotations

import re
import unicodedata

from .errors import PathError

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# pchar = unreserved / pct-encoded / sub-delims / ":" / "@" (RFC 3986 section 3.3).
_RAW_OK = _UNRESERVED | frozenset("!$&'()*+,;=:@")
_HEX = frozenset("0123456789abcdefABCDEF")
_DEFAULT_PORTS = {"http": "80", "https": "443"}
MATRIX_MODES = ("keep", "strip", "reject")


def _is_control(code: int) -> bool:
    return code < 0x20 or code == 0x7F


def _canonical_segment(raw: str, whole: str) -> str:
    """One segment (no ``/`` in it) in canonical form."""
    if "%" not in raw and _RAW_OK.issuperset(raw):
        return raw  # the common case: nothing to decode or encode (checked in C, per char)
    out: list[str] = []
    i = 0
    length = len(raw)
    while i < length:
        ch = raw[i]
        if ch == "%":
            hex_digits = raw[i + 1 : i + 3]
            if len(hex_digits) != 2 or not all(h in _HEX for h in hex_digits):
                raise PathError(
                    f"invalid percent-encoding at {raw[i : i + 3]!r} in {whole!r}", whole
                )
            code = int(hex_digits, 16)
            if code in (0x2F, 0x5C):
                raise PathError(
                    f"an encoded {'/' if code == 0x2F else chr(0x5C)} ({raw[i : i + 3]}) in "
                    f"{whole!r} is ambiguous: servers disagree on whether it separates segments",
                    whole,
                )
            if _is_control(code):
                raise PathError(
                    f"an encoded control character ({raw[i : i + 3]}) in {whole!r}", whole
                )
            decoded = chr(code)
            out.append(decoded if decoded in _UNRESERVED else f"%{code:02X}")
            i += 3
            continue
        code = ord(ch)
        if _is_control(code):
            raise PathError(f"a raw control character (0x{code:02X}) in the path")
        if ch == "\\":
            raise PathError(
                f"a backslash in {whole!r} is ambiguous: some servers read it as '/'", whole
            )
        if ch in _RAW_OK:
            out.append(ch)
        else:
            out.extend(f"%{byte:02X}" for byte in ch.encode("utf-8", "surrogatepass"))
        i += 1
    return "".join(out)


_SINGLE_DOT = frozenset((".", "%2e"))
_DOUBLE_DOT = frozenset(("..", ".%2e", "%2e.", "%2e%2e"))


def runtime_path(raw: str) -> str:
    """The path of a request target as the runtime's URL parser leaves it (WHATWG URL, an
    http(s) URL): ``\\`` is ``/``, and dot segments (``.``, ``..``, also written ``%2e``)
    are resolved, ``..`` stopping at the root (``/a/../../x`` is ``/x``). The Worker only
    ever sees such a path; the admin API's and the config check's ``explain`` start from
    it, as the gateway does.
    """
    if not raw.startswith(("/", "\\")):
        return raw
    segments: list[str] = []
    pieces = raw.replace("\\", "/").split("/")[1:]
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        folded = piece.lower()
        if folded in _DOUBLE_DOT:
            if segments:
                segments.pop()
            if last:
                segments.append("")
        elif folded in _SINGLE_DOT:
            if last:
                segments.append("")
        else:
            segments.append(piece)
    return "/" + "/".join(segments)


def canonical_path(raw: str, matrix_params: str = "keep") -> str:
    """``raw`` (the path of a request target, without the query) in canonical form.

    ``matrix_params``: ``keep`` leaves ``;params`` in their segment, ``strip`` removes them
    (``/a;v=1/b`` is ``/a/b``, for origins such as Tomcat that ignore them), ``reject`` refuses
    a path holding any. Raises :class:`PathError` saying why a path has no canonical form.
    """
    if not raw.startswith("/"):
        raise PathError(f"the request target {raw[:64]!r} is not an absolute path", raw[:64])
    segments: list[str] = []
    # A trailing slash is kept: "/a/" and "/a" may be different resources to an origin
    # (both match the same routes). A dot segment at the end leaves one too ("/a/." is "/a/").
    trailing = False
    for piece in raw.split("/"):
        raw_segment = piece
        if ";" in piece and matrix_params != "keep":
            if matrix_params == "reject":
                raise PathError(f"';' parameters in a path segment are not accepted: {raw!r}", raw)
            raw_segment = piece.split(";", 1)[0]
        if not raw_segment:
            continue
        segment = _canonical_segment(raw_segment, raw)
        trailing = segment in (".", "..")
        if segment == "..":
            if not segments:
                raise PathError(f"{raw!r} climbs above the root with '..'", raw)
            segments.pop()
        elif segment != ".":
            segments.append(segment)
    trailing = trailing or raw.endswith("/")
    if not segments:
        return "/"
    path = "/" + "/".join(segments)
    return path + "/" if trailing else path


def decode_segment(segment: str) -> str:
    """A canonical segment fully percent-decoded (for keys): ``caf%C3%A9`` is ``café``.

    Bytes that are not UTF-8 are kept as escapes (``\\udcXX``), so distinct segments stay
    distinct.
    """
    if "%" not in segment:
        return segment
    data = bytearray()
    i = 0
    while i < len(segment):
        if segment[i] == "%":
            data.append(int(segment[i + 1 : i + 3], 16))
            i += 3
        else:
            data.extend(segment[i].encode("utf-8", "surrogatepass"))
            i += 1
    return data.decode("utf-8", "surrogateescape")


def ascii_host(name: str) -> str:
    """A host name written in Unicode in the ASCII (punycode) form clients send it in.

    Browsers and the runtime's URL parser map names as UTS 46 does without the old
    transitional mappings: ``straße`` stays ``straße`` (``xn--strae-oqa``), where Python's
    ``idna`` codec (IDNA 2003) would make it ``strasse``. Each label is lower-cased and
    NFC-normalised, then punycode-encoded. Raises ``UnicodeError`` for a label that
    cannot be encoded.
    """
    labels = []
    for label in name.split("."):
        if label.isascii():
            labels.append(label.lower())
            continue
        folded = unicodedata.normalize("NFC", label.lower())
        if any(unicodedata.category(ch)[0] in "CZ" for ch in folded):
            # A control, format (a bidi override, a zero-width joiner), space or unassigned
            # code point: IDNA refuses it and no client sends such a name.
            raise UnicodeError(f"label {label!r} holds a character no host name can hold")
        labels.append("xn--" + folded.encode("punycode").decode("ascii"))
    return ".".join(labels)


def canonical_host(raw: str, scheme: str = "https") -> str:
    """``raw`` (a Host header or URL authority) lower-cased, without a trailing dot or default port."""
    host = raw.strip().lower()
    port = ""
    if host.startswith("["):  # an IPv6 literal: [::1]:8080
        end = host.find("]")
        if end != -1:
            host, port = host[: end + 1], host[end + 2 :] if host[end + 1 : end + 2] == ":" else ""
    elif host.count(":") == 1:
        host, port = host.split(":")
    if port and port == _DEFAULT_PORTS.get(scheme):
        port = ""
    host = host.rstrip(".")
    return f"{host}:{port}" if port else host


def host_name(canonical: str) -> str:
    """The name part of a canonical host (no port), for host patterns."""
    if canonical.startswith("["):
        return canonical[: canonical.find("]") + 1]
    return canonical.split(":", 1)[0]


#: A segment's ``;params`` (matrix parameters).
_MATRIX = re.compile(r";[^/]*")


def admin_path(prefix: str, path: str) -> str | None:
    """The admin API's path for a canonical ``path`` under ``prefix``, in any case and
    with any ``;params`` in it (``/_EDGE-LIMITER;x/api/config``): such a path is never
    forwarded, where an origin that folds case or drops matrix params would read the
    admin path, with the operator's token. ``None`` for every other path."""
    bare = _MATRIX.sub("", path) if ";" in path else path
    size = len(prefix)
    if bare[:size].lower() != prefix.lower() or bare[size : size + 1] not in ("", "/"):
        return None
    return prefix + bare[size:]
