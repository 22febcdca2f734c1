"""JSON from clients, read only when it is nested no deeper than a bound.

``json.loads`` recurses once per level of nesting. On CPython a body nested thousands deep
raises ``RecursionError``; on Pyodide (the Worker's Python) the C stack runs out first and
the whole isolate dies (measured on local workerd: a POST of 5,000 nested arrays stopped
every request after it). So a client's JSON is measured first, without recursion, and one
nested deeper than :data:`MAX_DEPTH` is refused before it is parsed. 512 is PHP's
``json_decode`` default: a body nested deeper is one a PHP origin cannot read either.
"""

from __future__ import annotations

import json
import re
from array import array
from itertools import accumulate
from typing import Any

MAX_DEPTH = 512

_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
#: Openers to 0x01 (+1), closers to 0xFF (-1 as a signed byte); every other byte deleted.
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_PAIR = b"\x01\xff"


class JsonTooDeepError(ValueError):
    """The JSON is nested deeper than the bound (it is not parsed)."""


def within_depth(data: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether ``data``'s arrays and objects nest at most ``limit`` deep, as a parser would
    descend into them (unclosed ones count; text inside strings does not). Linear in the
    size, with no recursion and no Python-level loop over the bytes."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return True  # not enough openers to go that deep, however they nest
    # Escapes first (outside a string one is invalid anyway), then the strings: what is
    # left of the structure is its brackets, as steps of +1 and -1.
    text = _STRING.sub(b"", _ESCAPE.sub(b"", data))
    steps = text.translate(_STEPS, _NOT_BRACKETS)
    # A wide, shallow document (a list of many small objects) mostly vanishes when its
    # innermost pairs are taken away, a pass at a time; each pass lowers the deepest
    # point by exactly one.
    passes = 0
    while len(steps) > limit - passes:
        shorter = steps.replace(_PAIR, b"")
        if not steps or len(shorter) * 2 > len(steps):
            break
        steps, passes = shorter, passes + 1
        if passes > limit:
            return False  # each pass took away a level that was there
    if len(steps) <= limit - passes:
        return True
    # The rest, summed step by step in C: the parser stops at the first closer too many,
    # so the depths after one never come into it (they only read lower here).
    return max(accumulate(array("b", steps))) + passes <= limit


def loads(data: bytes, limit: int = MAX_DEPTH, **options: Any) -> Any:
    """``json.loads`` of a client's ``data``, refused (:class:`JsonTooDeepError`) when it
    is nested deeper than ``limit``. Integers are read whatever their length (CPython
    refuses more than 4,300 digits, where PHP reads a float): a ``parse_int`` given in
    ``options`` decides otherwise."""
    if not within_depth(data, limit):
        raise JsonTooDeepError(f"JSON nested deeper than {limit} levels")
    options.setdefault("parse_int", _integer)
    return json.loads(data, **options)


def _integer(text: str) -> int | float:
    """An integer as PHP reads it: exact while it fits, else a float (never an error)."""
    if len(text) <= 4000:
        return int(text)
    return float(text)
