"""Cache-Control parsing: RFC 9111 directives, quoting, and garbage that never raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.caching.cache_control import (
    DELTA_SECONDS_CAP,
    CacheControl,
    delta_seconds,
    parse_cache_control,
)
from tests.examples import examples


def test_absent_or_empty_field() -> None:
    assert parse_cache_control(None) == CacheControl()
    assert parse_cache_control("") == CacheControl()
    assert parse_cache_control(" , ,") == CacheControl()


def test_common_response_value() -> None:
    cc = parse_cache_control("public, max-age=60, s-maxage=120, stale-if-error=300")
    assert cc.public and not cc.private and not cc.no_store and not cc.no_cache
    assert (cc.max_age, cc.s_maxage, cc.stale_if_error) == (60, 120, 300)
    assert cc.stale_while_revalidate is None


def test_names_are_case_insensitive_and_whitespace_is_ignored() -> None:
    cc = parse_cache_control("  No-Store ,\tMAX-AGE = 5 ,Must-Revalidate")
    assert cc.no_store and cc.must_revalidate
    assert cc.max_age == 5
    assert cc.has("no-store") and cc.has("NO-STORE") and not cc.has("no-cache")


def test_quoted_values_and_commas_inside_quotes() -> None:
    cc = parse_cache_control('no-cache="Set-Cookie, Authorization", max-age="30", private')
    assert cc.no_cache and cc.private
    assert cc.max_age == 30
    assert ("no-cache", "Set-Cookie, Authorization") in cc.directives


def test_escapes_inside_quotes() -> None:
    cc = parse_cache_control(r'ext="a\"b,c\\", max-age=7')
    assert ("ext", 'a"b,c\\') in cc.directives
    assert cc.max_age == 7


def test_unterminated_quote_runs_to_the_end() -> None:
    cc = parse_cache_control('max-age=1, ext="open, no-store')
    assert cc.max_age == 1
    assert not cc.no_store  # it is inside the quoted string
    assert ("ext", "open, no-store") in cc.directives


def test_repeated_field_lines_joined_read_like_one() -> None:
    joined = parse_cache_control(", ".join(["max-age=60", "no-transform, private"]))
    assert joined.max_age == 60 and joined.private and joined.has("no-transform")


def test_repeated_directive_keeps_the_most_restrictive_value() -> None:
    assert parse_cache_control("max-age=60, max-age=10").max_age == 10
    assert parse_cache_control("max-age=10, max-age=60").max_age == 10


@pytest.mark.parametrize("value", ["soon", "-1", "1.5", "", "1e3", "٣", "0x10"])
def test_invalid_delta_seconds_read_as_zero(value: str) -> None:
    assert parse_cache_control(f"max-age={value}").max_age == 0


def test_bare_max_age_reads_as_zero() -> None:
    assert parse_cache_control("max-age").max_age == 0


def test_huge_delta_seconds_read_as_the_cap() -> None:
    assert delta_seconds("9" * 1000) == DELTA_SECONDS_CAP
    assert delta_seconds("2147483649") == DELTA_SECONDS_CAP
    assert delta_seconds("0000000000000000000007") == 7
    assert delta_seconds("2147483647") == 2147483647


def test_items_that_are_not_directives_are_skipped() -> None:
    cc = parse_cache_control('max-age=5, =7, "quoted", a b, no-store')
    assert [name for name, _ in cc.directives] == ["max-age", "no-store"]


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet=st.sampled_from('abc-=," \\\t;maxgeostr0129\x00é'), max_size=60))
def test_garbage_never_raises(value: str) -> None:
    cc = parse_cache_control(value)
    for name, _ in cc.directives:
        assert name == name.lower() and name


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["max-age", "s-maxage", "no-store", "private", "x-ext"]),
            st.one_of(st.none(), st.integers(0, 10**6), st.text('a," b', max_size=5)),
        ),
        max_size=6,
    )
)
def test_serialised_directives_parse_back(items: list[tuple[str, int | str | None]]) -> None:
    parts = []
    for name, value in items:
        if value is None:
            parts.append(name)
        elif isinstance(value, int):
            parts.append(f"{name}={value}")
        else:
            escaped = value.replace("\\", "\\\\").replace('"', '\\"')
            parts.append(f'{name}="{escaped}"')
    cc = parse_cache_control(", ".join(parts))
    expected = [(name, None if value is None else str(value)) for name, value in items]
    assert list(cc.directives) == expected
