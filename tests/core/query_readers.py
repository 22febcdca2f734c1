"""Models of how origin frameworks read a query string into parameters.

Each model takes a raw query (without ``?``) and returns what the framework's handlers
see, as a plain value that compares equal exactly when they see the same: PHP's
``$_GET`` (name mangling, nested arrays, auto-index), Rack 2's ``params`` (nested hashes,
arrays of hashes, ``;`` as a separator), qs's object (Express), and the flat multi-maps
of Django, Starlette, Spring, ASP.NET Core and Go's ``net/url``. They are written from
each framework's documented rules and source behaviour, simplified where a detail cannot
tell two spellings of one query apart (depth and count bounds).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, unquote_plus

Reader = Callable[[str], Any]


class Refused(Exception):
    """The framework refuses the query (Rack's type errors): still an answer to compare."""


def _pieces(query: str, separators: str = "&") -> list[tuple[str, str | None]]:
    """Non-empty pieces split on ``separators``, each on its first ``=``."""
    out: list[tuple[str, str | None]] = []
    for piece in re.split(f"[{re.escape(separators)}]", query):
        if not piece:
            continue
        name, sep, value = piece.partition("=")
        out.append((name, value if sep else None))
    return out


# --- PHP ---------------------------------------------------------------------------------


def php(query: str) -> Any:
    """``$_GET``: names cut at NUL, leading spaces dropped, ``.`` and space made ``_``
    before the first ``[``, ``a[x][]`` nested with ``[]`` numbered after the highest
    integer key so far; the last value of a name wins."""
    result: dict[Any, Any] = {}
    for raw_name, raw_value in _pieces(query):
        name = unquote_plus(raw_name).split("\x00", 1)[0].lstrip(" ")
        value = unquote_plus(raw_value) if raw_value is not None else ""
        if not name:
            continue
        base, indices = _php_name(name)
        if not base:
            continue
        if indices is None:
            result[base] = value
            continue
        _php_assign(result, [base, *indices], value)
    return result


def _php_name(name: str) -> tuple[str, list[str] | None]:
    """The variable's name and its array indices (None: a plain variable)."""
    out: list[str] = []
    for index, char in enumerate(name):
        if char in " .":
            out.append("_")
        elif char == "[":
            rest = name[index:]
            indices: list[str] = []
            position = 0
            while position < len(rest) and rest[position] == "[":
                close = rest.find("]", position + 1)
                if close == -1:
                    if not indices:
                        # An unclosed bracket is no array: the "[" becomes "_".
                        return "".join(out) + "_" + rest[1:], None
                    break
                indices.append(rest[position + 1 : close])
                position = close + 1
            return "".join(out), indices
        else:
            out.append(char)
    return "".join(out), None


def _php_key(index: str) -> Any:
    """An index as a PHP array key: a canonical decimal integer is an int."""
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", index) and index != "-0":
        return int(index)
    return index


def _php_assign(target: dict[Any, Any], path: list[str], value: str) -> None:
    node = target
    for depth, index in enumerate(path):
        last = depth == len(path) - 1
        if index == "" and depth:
            ints = [k for k in node if isinstance(k, int)]
            key: Any = max(ints) + 1 if ints else 0
        else:
            key = _php_key(index) if depth else index
        if last:
            node[key] = value
            return
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child


# --- Rack 2 ------------------------------------------------------------------------------

_RACK_NAME = re.compile(r"\A[\[\]]*([^\[\]]+)\]*")


def rack(query: str) -> Any:
    """Rack 2's ``parse_nested_query`` (``&`` and ``;`` both separate parameters)."""
    params: dict[str, Any] = {}
    try:
        for raw_name, raw_value in _pieces(query, "&;"):
            name = unquote_plus(raw_name)
            value = unquote_plus(raw_value) if raw_value is not None else None
            _rack_normalize(params, name, value, 32)
    except Refused:
        return Refused
    return params


def _rack_normalize(params: dict[str, Any], name: str, value: Any, depth: int) -> Any:
    if depth <= 0:
        raise Refused
    match = _RACK_NAME.match(name)
    key = match.group(1) if match else ""
    after = name[match.end() :] if match else ""
    if not key:
        return None
    if after == "":
        params[key] = value
    elif after == "[":
        params[name] = value
    elif after == "[]":
        items = params.setdefault(key, [])
        if not isinstance(items, list):
            raise Refused
        items.append(value)
    elif found := re.match(r"^\[\]\[([^\[\]]+)\]$", after) or re.match(r"^\[\](.+)$", after):
        child = found.group(1)
        items = params.setdefault(key, [])
        if not isinstance(items, list):
            raise Refused
        if items and isinstance(items[-1], dict) and not _rack_has(items[-1], child):
            _rack_normalize(items[-1], child, value, depth - 1)
        else:
            items.append(_rack_normalize({}, child, value, depth - 1))
    else:
        inner = params.setdefault(key, {})
        if not isinstance(inner, dict):
            raise Refused
        params[key] = _rack_normalize(inner, after, value, depth - 1)
    return params


def _rack_has(params: dict[str, Any], key: str) -> bool:
    """Rack's ``params_hash_has_key?``: ``a[b]`` looked up through nested hashes."""
    if re.search(r"\[\]", key):
        return False
    node: Any = params
    for part in re.split(r"[\[\]]+", key):
        if part == "":
            continue
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


# --- qs (Express) ------------------------------------------------------------------------


def _js_decode(text: str) -> str:
    """qs's decoder: ``+`` is a space, then decodeURIComponent, the text as it was when
    that throws (a malformed escape anywhere)."""
    spaced = text.replace("+", " ")
    if re.search(r"%(?![0-9A-Fa-f]{2})", spaced):
        return spaced
    try:
        return unquote(spaced, errors="strict")
    except UnicodeDecodeError:
        return spaced


def qs(query: str) -> Any:
    """qs 6 defaults: a name repeated gathers its values in a list, ``a[b][c]`` nests up
    to depth 5 (the rest of the name is one key), ``a[]`` and ``a[N]`` (N <= 20) are
    lists, ``.`` is part of a name."""
    result: dict[str, Any] = {}
    for raw_name, raw_value in _pieces(query):
        name = _js_decode(raw_name)
        value = _js_decode(raw_value) if raw_value is not None else ""
        if not name:
            continue
        _qs_merge(result, _qs_keys(name), value)
    return _qs_compact(result)


def _qs_keys(name: str) -> list[str]:
    parent = re.match(r"^[^\[\]]*", name)
    head = parent.group(0) if parent else ""
    rest = name[len(head) :]
    keys = [head] if head else []
    depth = 0
    while depth < 5:
        found = re.match(r"^\[[^\[\]]*\]", rest)
        if not found:
            break
        keys.append(found.group(0))
        rest = rest[found.end() :]
        depth += 1
    if rest:
        keys.append("[" + rest + "]")
    if not keys:
        keys = [name]
    return keys


def _qs_merge(target: dict[str, Any], keys: list[str], value: str) -> None:
    leaf: Any = value
    for key in reversed(keys[1:]):
        inner = key[1:-1] if key.startswith("[") and key.endswith("]") else key
        if inner == "":
            leaf = {"__list__": [leaf]}
        elif inner.isdigit() and int(inner) <= 20 and str(int(inner)) == inner:
            leaf = {"__list__": {int(inner): leaf}}
        else:
            leaf = {inner: leaf}
    top = keys[0]
    if top in target:
        target[top] = _qs_combine(target[top], leaf)
    else:
        target[top] = leaf


def _qs_combine(old: Any, new: Any) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        merged = dict(old)
        for key, value in new.items():
            if key == "__list__" and "__list__" in merged:
                merged[key] = _qs_list_merge(merged[key], value)
            elif key in merged:
                merged[key] = _qs_combine(merged[key], value)
            else:
                merged[key] = value
        return merged
    olds = old if isinstance(old, list) else [old]
    news = new if isinstance(new, list) else [new]
    return [*olds, *news]


def _qs_list_merge(old: Any, new: Any) -> Any:
    if isinstance(old, list) and isinstance(new, list):
        return [*old, *new]
    as_dict = dict(enumerate(old)) if isinstance(old, list) else dict(old)
    if isinstance(new, list):
        start = max(as_dict, default=-1) + 1
        for offset, item in enumerate(new):
            as_dict[start + offset] = item
    else:
        for key, item in new.items():
            as_dict[key] = _qs_combine(as_dict[key], item) if key in as_dict else item
    return as_dict


def _qs_compact(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__list__"}:
            items = value["__list__"]
            if isinstance(items, dict):
                items = [items[k] for k in sorted(items)]
            return [_qs_compact(item) for item in items]
        return {key: _qs_compact(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_qs_compact(item) for item in value]
    return value


# --- flat multi-maps ---------------------------------------------------------------------


def _multimap(
    query: str, *, fold: bool = False, skip: Callable[[str], bool] = lambda _n: False
) -> Any:
    """Each name's values in order (names in order of first appearance)."""
    out: dict[str, list[str]] = {}
    for raw_name, raw_value in _pieces(query):
        if skip(raw_name + ("=" + raw_value if raw_value is not None else "")):
            continue
        name = unquote_plus(raw_name)
        value = unquote_plus(raw_value) if raw_value is not None else ""
        out.setdefault(name.lower() if fold else name, []).append(value)
    return sorted(out.items())


def django(query: str) -> Any:
    """``request.GET`` (a QueryDict over ``parse_qsl``): each name's values in order."""
    return _multimap(query)


starlette = django  # ``request.query_params``: ``parse_qsl`` too


def aspnet_core(query: str) -> Any:
    """``Request.Query``: names compared in any case, values in order."""
    return _multimap(query, fold=True)


def spring(query: str) -> Any:
    """``@RequestParam``: a name of at least one character, values in order."""
    return [item for item in _multimap(query) if item[0]]


def _go_bad(piece: str) -> bool:
    """Go's ``url.ParseQuery`` skips a piece holding ``;`` or a malformed escape."""
    if ";" in piece:
        return True
    return re.search(r"%(?![0-9A-Fa-f]{2})", piece) is not None


def go(query: str) -> Any:
    """``url.ParseQuery``: each name's values in order; bad pieces skipped."""
    return _multimap(query, skip=_go_bad)


READERS: dict[str, Reader] = {
    "php": php,
    "rack": rack,
    "express": qs,
    "django": django,
    "starlette": starlette,
    "aspnet_core": aspnet_core,
    "spring": spring,
    "go": go,
}
