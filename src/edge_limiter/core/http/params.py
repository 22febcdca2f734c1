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

import re

_RACK = re.compile(r"[\[\]]*([^\[\]]+)\]*")


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
    if any_case and name.lower() == wanted.lower():
        return True
    if php_name(name) == php_name(wanted):
        return True
    return ("[" in name or "]" in name) and rack_name(name) == wanted
