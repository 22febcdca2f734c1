"""A client's JSON is measured before it is parsed: nested deeper than the bound, refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_limiter.core.http.bounded_json import MAX_DEPTH, JsonTooDeepError, loads, within_depth

_TRICKY_TEXT = st.text(alphabet='[]{}"\\,: ax\u00e9', max_size=8)
_VALUES = st.recursive(
    st.none() | st.integers() | _TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY_TEXT, inner, max_size=4),
    max_leaves=40,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(item) for item in value.values()), default=0)
    return 0


def parser_depth(data: bytes) -> int:
    """The deepest a parser descends in ``data`` before it stops (an escape outside a
    string, or a closer too many, ends the document for it)."""
    deepest = level = 0
    in_string = escaped = False
    for byte in data:
        char = chr(byte)
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "\\":
            break
        elif char in "[{":
            level += 1
            deepest = max(deepest, level)
        elif char in "]}":
            level -= 1
            if level < 0:
                break
    return deepest


@given(_VALUES, st.integers(min_value=0, max_value=6), st.booleans())
def test_a_documents_depth_is_measured_exactly(value: Any, limit: int, ascii_only: bool) -> None:
    data = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert within_depth(data, limit) == (depth(value) <= limit)


@given(
    st.lists(
        st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b"a", b"[]", b"{}"]), max_size=80
    ),
    st.integers(min_value=0, max_value=8),
)
def test_any_bytes_said_within_the_bound_are_within_it_for_a_parser(
    pieces: list[bytes], limit: int
) -> None:
    data = b"".join(pieces)
    if within_depth(data, limit):
        assert parser_depth(data) <= limit


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 5_000 + b"]" * 5_000,
        b'{"_method":"DELETE","x":' + b"[" * 100_000,  # never closed
        b"[" + b"{}," * 100_000 + b"[" * 600 + b"]" * 600 + b"]",  # wide, then deep
        (b"[" * 3 + b"]" * 2) * 1_000,  # each piece one level deeper
    ],
)
def test_a_body_nested_too_deep_is_refused_before_it_is_parsed(data: bytes) -> None:
    assert not within_depth(data)
    with pytest.raises(JsonTooDeepError):
        loads(data)


def test_brackets_in_strings_and_wide_documents_are_no_depth() -> None:
    assert within_depth(json.dumps(["[" * 10_000, {"k{": '\\"[[['}]).encode(), 2)
    assert within_depth(json.dumps([{"a": [1]}] * 100_000).encode(), 3)
    at_bound = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert loads(at_bound) is not None
    assert not within_depth(b"[" + at_bound + b"]")


def test_integers_of_any_length_are_read_as_php_reads_them() -> None:
    # CPython refuses an integer of more than 4,300 digits (ValueError), where PHP's
    # json_decode reads a float: a body a PHP origin reads must be read here too.
    data = b'{"_method":"DELETE","x":1' + b"0" * 5_000 + b"}"
    assert loads(data) == {"_method": "DELETE", "x": float("inf")}
    assert loads(b'{"n": 12345678901234567890}') == {"n": 12345678901234567890}
