"""Idempotency-Key parsing (sf-string and bare token) and Durable Object names."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from edge_limiter.core.errors import IdempotencyKeyError
from edge_limiter.core.http.fields import sf_string
from edge_limiter.core.idempotency.keys import parse_idempotency_key, scoped_name
from tests.examples import examples

UUID = "8e03978e-40d5-43e8-bc93-6894a57f9324"
PRINTABLE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=255)


def test_bare_and_quoted_keys_give_the_same_key() -> None:
    assert parse_idempotency_key(UUID) == UUID
    assert parse_idempotency_key(f'"{UUID}"') == UUID
    assert parse_idempotency_key(f'  "{UUID}"\t') == UUID


def test_sf_string_escapes() -> None:
    assert parse_idempotency_key(r'"a\"b\\c"') == 'a"b\\c'


def test_bare_keys_may_hold_any_printable_character() -> None:
    assert parse_idempotency_key("order 42/#1") == "order 42/#1"
    assert parse_idempotency_key('a"b') == 'a"b'


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (None, "missing"),
        ("", "empty"),
        ("   ", "empty"),
        ('""', "empty"),
        ("x" * 256, "too_long"),
        ('"' + "x" * 256 + '"', "too_long"),
        ("abc\x00", "not_printable"),
        ("abc\n", "not_printable"),
        ("ab\tc", "not_printable"),
        ("clé", "not_printable"),
        ('"abc', "malformed"),
        ('"abc"x', "malformed"),
        ('"abc";p=1', "malformed"),
        ('"a\\nb"', "malformed"),
        ('"abc\\', "malformed"),
        # Sent twice, joined by the runtime: which line the origin acts on is a guess.
        ("k-1, k-1", "ambiguous"),
        ("k-1, k-2", "ambiguous"),
    ],
)
def test_unusable_keys_raise_with_an_actionable_code(value: str | None, code: str) -> None:
    with pytest.raises(IdempotencyKeyError) as info:
        parse_idempotency_key(value)
    assert info.value.code == code
    assert "Idempotency-Key" in str(info.value)


def test_a_key_holding_a_comma_is_quoted_or_written_without_the_space() -> None:
    assert parse_idempotency_key('"a, b"') == "a, b"
    assert parse_idempotency_key("a,b") == "a,b"


def test_the_longest_key() -> None:
    assert parse_idempotency_key("k" * 255) == "k" * 255


@settings(max_examples=examples(200), deadline=None)
@given(PRINTABLE)
def test_any_printable_key_survives_quoting(key: str) -> None:
    assert parse_idempotency_key(sf_string(key)) == key
    if key == key.strip(" ") and not key.startswith('"') and ", " not in key:
        assert parse_idempotency_key(key) == key


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=300))
@example("\n")  # "$" in a regex also matches before a trailing newline
def test_anything_parses_or_raises_the_specific_error(value: str) -> None:
    try:
        key = parse_idempotency_key(value)
    except IdempotencyKeyError:
        return
    assert 1 <= len(key) <= 255 and key.isascii() and key.isprintable()


def test_scoped_names_are_bounded_and_do_not_reveal_the_key() -> None:
    name = scoped_name("payments", "ip=1.2.3.4", UUID)
    assert re.fullmatch(r"idem:payments#[0-9a-f]{64}", name)
    assert UUID not in name
    assert re.fullmatch(r"idem#[0-9a-f]{64}", scoped_name("bad route|x", "k", UUID))
    assert re.fullmatch(r"idem#[0-9a-f]{64}", scoped_name("payments\n", "k", UUID))


def test_two_callers_with_the_same_key_never_meet() -> None:
    assert scoped_name("r", "ip=1.1.1.1", UUID) != scoped_name("r", "ip=2.2.2.2", UUID)
    assert scoped_name("r", "a", UUID) != scoped_name("s", "a", UUID)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text('ab|#:"\\', max_size=3),
            st.text('ab|#:"\\', max_size=3),
            st.text('ab|#:"\\', max_size=3),
        ),
        unique=True,
        min_size=2,
        max_size=10,
    )
)
def test_scoped_names_are_injective(triples: list[tuple[str, str, str]]) -> None:
    names = [scoped_name(*triple) for triple in triples]
    assert len(set(names)) == len(names)
