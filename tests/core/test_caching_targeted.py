"""Targeted cache control (RFC 9213): CDN-Cache-Control over Cache-Control for this cache."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_limiter.core.caching.cache_control import parse_cache_control
from edge_limiter.core.caching.policy import StoreReason, store_decision
from edge_limiter.core.caching.settings import CacheSettings
from edge_limiter.core.caching.targeted import parse_dictionary, targeted_directives

NOW = 1_700_000_000_000
ROUTE = CacheSettings(ttl_ms=3_600_000, default_ttl_ms=3_600_000)


def decide(headers: dict[str, str]) -> tuple[bool, StoreReason, int]:
    store = store_decision(200, headers, 10, ROUTE, NOW)
    return store.store, store.reason, (store.fresh_until - NOW) // 1000 if store.store else 0


@pytest.mark.parametrize(
    ("value", "members"),
    [
        ("max-age=60", {"max-age": "60"}),
        ("no-store", {"no-store": None}),
        ("  max-age=60 ,\tprivate  ", {"max-age": "60", "private": None}),
        ("max-age=60, max-age=5", {"max-age": "5"}),  # the last wins
        ("no-store=?0, max-age=9", {"max-age": "9"}),  # a false Boolean is absent
        ("no-store=?1", {"no-store": None}),
        ("max-age=60;foo=bar;x", {"max-age": "60"}),  # parameters ignored
        ("max-age=60; private", {"max-age": "60"}),  # a parameter, not a directive
        ('no-cache="set-cookie"', {"no-cache": ""}),
        ("max-age=1.5", {"max-age": "1.5"}),
        ("max-age=-5", {"max-age": "-5"}),
        ("a=(1 2 3);p, b=tok/en:x, c=:aGk=:, d=@1700000000", {"a": "", "b": "", "c": "", "d": ""}),
        ("*x=1", {"*x": "1"}),
        ("", {}),
    ],
)
def test_a_dictionary_parses_into_directives(value: str, members: dict[str, str | None]) -> None:
    assert parse_dictionary(value) == members


@pytest.mark.parametrize(
    "value",
    [
        "Max-Age=60",  # keys are lower case
        "max-age=60,",  # a trailing comma
        "max-age=60,,private",
        "max-age 60",
        "max-age=",
        'max-age="60',  # an unterminated string
        '"quoted"',
        "1key",
        "max-age=1234567890123456",  # an Integer has at most 15 digits
        "max-age=1.2345",  # a Decimal at most 3 fraction digits
        "x=?2",
        "x=(1 2",
        "x=:not base64!:",
        "x=é",
    ],
)
def test_a_value_that_is_not_a_dictionary_is_invalid(value: str) -> None:
    assert parse_dictionary(value) is None, value


def test_the_first_valid_targeted_field_decides() -> None:
    both = {"cloudflare-cdn-cache-control": "max-age=600", "cdn-cache-control": "max-age=60"}
    assert targeted_directives(both) == parse_cache_control("max-age=600")
    # An empty or broken field is as if absent: the next one decides.
    for broken in ("", "max-age=600,", "MAX-AGE=600"):
        fields = {**both, "cloudflare-cdn-cache-control": broken}
        assert targeted_directives(fields) == parse_cache_control("max-age=60"), broken
    assert targeted_directives({"cache-control": "max-age=60"}) is None
    assert targeted_directives({"cdn-cache-control": "max-age=60,"}) is None


def test_a_targeted_field_replaces_cache_control_expires_and_pragma() -> None:
    # Longer at the CDN than in browsers: the usual reason to send it.
    assert decide({"cache-control": "max-age=60", "cdn-cache-control": "max-age=600"}) == (
        True,
        StoreReason.STORED,
        600,
    )
    # Stored at the CDN while browsers are told not to store.
    stored = decide({"cache-control": "no-store", "cdn-cache-control": "max-age=120"})
    assert stored == (True, StoreReason.STORED, 120)
    assert decide(
        {"cache-control": "private", "pragma": "no-cache", "cdn-cache-control": "s-maxage=30"}
    )[0]
    # Not stored here while browsers may keep it.
    assert decide({"cache-control": "max-age=600", "cdn-cache-control": "no-store"})[1] == (
        StoreReason.NO_STORE
    )
    assert decide({"cache-control": "max-age=600", "cdn-cache-control": "private"})[1] == (
        StoreReason.PRIVATE
    )
    assert decide({"cdn-cache-control": "no-cache"})[1] == StoreReason.NO_CACHE
    # Expires no longer counts (the route's default_ttl applies), nor does a stale one.
    expired = {"expires": "Thu, 01 Jan 1970 00:00:00 GMT", "cdn-cache-control": "public"}
    assert decide(expired) == (True, StoreReason.STORED, 3600)
    # A value of the wrong type reads as 0: stale at once, not stored.
    for wrong in ('max-age="600"', "max-age=600.0", "max-age=-1"):
        assert decide({"cdn-cache-control": wrong})[1] == StoreReason.NOT_FRESH, wrong
    # The route's ttl still caps what the targeted field allows.
    assert decide({"cdn-cache-control": "max-age=86400"})[2] == 3600
    # An invalid targeted field falls back to Cache-Control.
    assert decide({"cache-control": "max-age=60", "cdn-cache-control": "max-age=600,"})[2] == 60


def test_stale_windows_follow_the_targeted_field() -> None:
    store = store_decision(
        200,
        {"cache-control": "max-age=60", "cdn-cache-control": "max-age=100, must-revalidate"},
        10,
        ROUTE,
        NOW,
    )
    assert store.stale_until == store.fresh_until == NOW + 100_000
    store = store_decision(
        200,
        {"cache-control": "must-revalidate", "cdn-cache-control": "max-age=100, stale-if-error=50"},
        10,
        ROUTE,
        NOW,
    )
    assert store.stale_until == NOW + 150_000


_KEY = st.from_regex(r"[a-z*][a-z0-9_.*-]{0,12}", fullmatch=True)
_VALUE = st.one_of(
    st.none(),
    st.integers(min_value=0, max_value=10**15 - 1).map(str),
)


@given(st.dictionaries(_KEY, _VALUE, max_size=6), st.sampled_from([",", ", ", " ,\t"]))
def test_cache_directives_written_as_a_dictionary_read_as_written(
    members: dict[str, str | None], separator: str
) -> None:
    text = separator.join(
        name if value is None else f"{name}={value}" for name, value in members.items()
    )
    assert parse_dictionary(text) == members
    if members:
        assert targeted_directives({"cdn-cache-control": text}) == parse_cache_control(
            ", ".join(
                name if value is None else f"{name}={value}" for name, value in members.items()
            )
        )


@given(st.text(max_size=40))
def test_any_value_parses_or_is_refused_without_raising(text: str) -> None:
    parsed = parse_dictionary(text)
    assert parsed is None or isinstance(parsed, dict)


def test_a_list_is_told_from_what_is_not_one() -> None:
    from edge_limiter.core.caching.targeted import is_list

    for value in ('"a";r=3;t=600, "b";r=1;t=2', "default;q=5;w=60", '(a b);x=1, "c, d"'):
        assert is_list(value), value
    for value in ("", " ", "garbage((", '"x";q=1, ', '"open', "a;B=1", "a b"):
        assert not is_list(value), value


def test_surrogate_control_decides_after_the_rfc_9213_fields() -> None:
    assert decide({"cache-control": "max-age=1", "surrogate-control": "MaX-aGe=600"}) == (
        True,
        StoreReason.STORED,
        600,
    )
    assert decide({"cache-control": "max-age=600", "surrogate-control": "no-store"})[1] == (
        StoreReason.NO_STORE
    )
    assert decide({"cache-control": "max-age=600", "surrogate-control": "no-store-remote"})[1] == (
        StoreReason.NO_STORE
    )
    # Aimed at another surrogate: Cache-Control decides.
    assert decide({"cache-control": "max-age=60", "surrogate-control": "max-age=600;edge2"})[2] == (
        60
    )
    # A CDN-Cache-Control comes first.
    both = {"cdn-cache-control": "max-age=30", "surrogate-control": "max-age=600"}
    assert decide(both)[2] == 30
