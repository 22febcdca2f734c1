"""Parameter names as origins read them.

A query or form parameter's name (and a cookie's) is not always read as written. PHP,
hence Laravel and Symfony, registers ``$_GET``, ``$_POST`` and ``$_COOKIE`` names after
mangling them: cut at a NUL byte, leading spaces dropped, a space or ``.`` made ``_``,
and ``name[...]`` an array called ``name``. So ``?api.key=K``, ``?+api_key=K``,
``?api_key[]=K`` and ``?api_key%00x=K`` all reach a PHP origin as its ``api_key``, and
``.method=DELETE`` in a form as its ``_method``. What
decides identity or the method is matched in every such spelling (other origins read
those names as written, and a request naming both spellings is then ambiguous, so it is
refused rather than guessed).

Rack 2 (Rails 6 and 7.0) reads a name after skipping the ``[`` and ``]`` it starts with
and dropping those that follow it: ``[api_key]``, ``]api_key`` and ``api_key]`` are its
``api_key``. ASP.NET Core looks names up in any case: ``API_KEY`` is its ``api_key``.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import unquote

_RACK = re.compile(r"[\[\]]*([^\[\]]+)\]*")
#: The most parameters (or cookies) spelled like one wanted name that a request may hold:
#: past it, the request is refused rather than each of them decoded (PHP itself reads
#: at most 1,000 parameters).
MAX_CANDIDATES = 1_000


class TooManyCandidatesError(ValueError):
    """More than :data:`MAX_CANDIDATES` parameters are spelled like the wanted name."""


def php_name(name: str) -> str:
    """``name`` (already percent-decoded) as PHP registers it; empty when PHP drops it.

    ``a.b`` and ``a b`` are ``a_b``; ``a[x]`` and ``a[]`` are the array ``a``; a ``[``
    that is never closed becomes ``_`` (``a[b`` is ``a_b``); PHP reads the name as a C
    string, so it ends at a NUL (``a%00b``, decoded, is ``a``).
    """
    if " " not in name and "." not in name and "[" not in name and "\0" not in name:
        return name  # the usual name: nothing for PHP to change
    name = name.partition("\0")[0]
    name = name.lstrip(" ")
    out: list[str] = []
    for index, char in enumerate(name):
        if char in " .":
            out.append("_")
        elif char == "[":
            if not out:
                return ""  # PHP drops a parameter whose name starts with "["
            if "]" in name[index + 1 :]:
                return "".join(out)
            rest = name[index + 1 :]
            return "".join(out) + "_" + rest.replace(" ", "_").replace(".", "_")
        else:
            out.append(char)
    return "".join(out)


def rack_name(name: str) -> str:
    """``name`` (already percent-decoded) as Rack 2 registers a plain parameter (or an
    array of them, ``name[]``); empty when it is a hash or nothing Rack 2 keeps."""
    match = _RACK.match(name)
    if match is None:
        return ""
    rest = name[match.end() :]
    return match.group(1) if rest in ("", "[]") else ""


def same_param(name: str, wanted: str, *, any_case: bool = True) -> bool:
    """Whether a parameter or cookie called ``name`` (decoded) is ``wanted`` to an origin:
    the same name, the same in another case (ASP.NET Core), or the same once PHP or Rack 2
    has mangled it (``any_case``: a name in another case counts). A ``wanted`` holding
    ``[`` is matched as written only (``filter[id]`` is one member of an array, not the
    array)."""
    if name == wanted:
        return True
    if "[" in wanted or not name:
        return False
    if any_case and name.isascii() and name.lower() == wanted.lower():
        return True
    if php_name(name) == php_name(wanted):
        return True
    return ("[" in name or "]" in name) and rack_name(name) == wanted


@functools.lru_cache(maxsize=256)
def spelling(wanted: str) -> re.Pattern[str]:
    """What every raw (undecoded) spelling of the name ``wanted`` holds: each character
    in any case, as written or percent-encoded, and ``_`` also as what PHP reads as it
    (``.``, a space or ``+``, ``[``). A piece of a query, form or cookie line without a
    match cannot name ``wanted`` (see :func:`same_param`) and need not be decoded."""
    parts = []
    for char in wanted:
        options = set()
        for case in {char.lower(), char.upper()}:
            options.add(re.escape(case))
            encoded = case.encode()
            options.add("".join(f"%{byte:02x}" for byte in encoded))
        if char == "_":
            options.update((r"\.", " ", r"\+", r"\[", "%2e", "%20", "%5b"))
        parts.append("(?:" + "|".join(sorted(options)) + ")")
    return re.compile("".join(parts), re.IGNORECASE)


def named_pieces(text: str, wanted: str, separators: str) -> list[tuple[str, str | None]]:
    """The ``(name, value)`` pieces of ``text`` (split at any of ``separators``, each
    split at its first ``=``, the value ``None`` without one; both still encoded) whose
    name may spell ``wanted``: only those are worth decoding. The work is linear in ``text`` with a cheap scan, however
    many other pieces it holds (a 1 MiB form of ``%&`` took seconds to parse whole).

    Raises :class:`TooManyCandidatesError` past :data:`MAX_CANDIDATES` such pieces.
    """
    pattern = spelling(wanted)
    found: list[tuple[str, str | None]] = []
    done = 0
    for match in pattern.finditer(text):
        if match.start() < done:
            continue
        start = max(text.rfind(sep, done, match.start()) for sep in separators) + 1
        start = max(start, done)
        ends = [at for at in (text.find(sep, match.end()) for sep in separators) if at != -1]
        end = min(ends, default=len(text))
        done = end
        name, sep, value = text[start:end].partition("=")
        if match.end() > start + len(name) and pattern.search(name) is None:
            continue  # the spelling is in the value only
        found.append((name, value if sep else None))
        if len(found) > MAX_CANDIDATES:
            raise TooManyCandidatesError(
                f"more than {MAX_CANDIDATES} parameters spelled like {wanted!r}"
            )
    return found


def decoded_pieces(text: str, wanted: str, separators: str = "&") -> list[tuple[str, str]]:
    """:func:`named_pieces` decoded as a query or form is (``+`` is a space), those whose
    name is ``wanted`` to an origin (:func:`same_param`) only."""
    out = []
    for name, value in named_pieces(text, wanted, separators):
        decoded = unquote(name.replace("+", " "))
        if same_param(decoded, wanted):
            out.append((decoded, unquote(value.replace("+", " ")) if value else ""))
    return out
