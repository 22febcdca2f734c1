"""The rate-string parser: what it accepts, what it names, and what it refuses."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.errors import RateParseError
from edge_limiter.core.ratelimit.rates import (
    DAY_MS,
    HOUR_MS,
    MAX_QUOTA,
    MAX_WINDOW_MS,
    MINUTE_MS,
    SECOND_MS,
    Rate,
    default_policy_name,
    describe_window,
    parse_rate,
    parse_rates,
)
from tests.examples import examples

UNITS = {
    SECOND_MS: ("s", "sec", "secs", "second", "seconds"),
    MINUTE_MS: ("m", "min", "mins", "minute", "minutes"),
    HOUR_MS: ("h", "hr", "hrs", "hour", "hours"),
    DAY_MS: ("d", "day", "days"),
    7 * DAY_MS: ("w", "wk", "wks", "week", "weeks"),
}


@pytest.mark.parametrize(
    ("text", "quota", "window_ms"),
    [
        ("5/minute", 5, MINUTE_MS),
        ("100 per 10 seconds", 100, 10 * SECOND_MS),
        ("10/s", 10, SECOND_MS),
        ("1000/hour", 1000, HOUR_MS),
        ("10000/day", 10_000, DAY_MS),
        ("10/2m", 10, 2 * MINUTE_MS),
        ("  7 / 3 hours  ", 7, 3 * HOUR_MS),
        ("10 PER SECOND", 10, SECOND_MS),
        ("10/Second", 10, SECOND_MS),
        ("1 per 1 d", 1, DAY_MS),
        ("1/366 days", 1, MAX_WINDOW_MS),
        (f"{MAX_QUOTA}/s", MAX_QUOTA, SECOND_MS),
    ],
)
def test_parse_rate_accepts_the_documented_forms(text: str, quota: int, window_ms: int) -> None:
    rate = parse_rate(text)
    assert (rate.quota, rate.window_ms) == (quota, window_ms)


@pytest.mark.parametrize(("unit_ms", "name"), [(ms, n) for ms, ns in UNITS.items() for n in ns])
def test_every_unit_and_abbreviation(unit_ms: int, name: str) -> None:
    assert parse_rate(f"3/{name}") == Rate(3, unit_ms)
    assert parse_rate(f"3 per 4 {name}") == Rate(3, 4 * unit_ms)


def test_parse_rates_splits_on_semicolons() -> None:
    assert parse_rates("1000/hour; 10000/day") == (Rate(1000, HOUR_MS), Rate(10_000, DAY_MS))
    assert parse_rates("10/second;1000/hour") == (Rate(10, SECOND_MS), Rate(1000, HOUR_MS))
    assert parse_rates("5/minute") == (Rate(5, MINUTE_MS),)


@pytest.mark.parametrize("text", ["10/second, 1000/hour", "10/second|1000/hour", "10/s ,1000/h"])
def test_commas_and_bars_separate_limits_as_in_the_limits_library(text: str) -> None:
    assert parse_rates(text) == (Rate(10, SECOND_MS), Rate(1000, HOUR_MS))


@pytest.mark.parametrize("text", ["10000/month", "10000 per month", "100/year", "5/yr", "1/mo"])
def test_a_calendar_month_or_year_says_to_give_days(text: str) -> None:
    with pytest.raises(RateParseError, match="per 30 days"):
        parse_rate(text)


def test_names_and_descriptions() -> None:
    assert parse_rate("10/s").name == "10-per-second"
    assert parse_rate("100 per 10 minutes").name == "100-per-10-minutes"
    assert str(parse_rate("100 per 10 seconds")) == "100 per 10 seconds"
    assert str(parse_rate("5/60 minutes")) == "5 per hour"
    assert describe_window(1500) == "1500 ms"
    assert default_policy_name(3, 1500) == "3-per-1500-ms"
    assert Rate(3, 1500, "custom").name == "custom"
    assert Rate(1, 1500).window_seconds == 2
    assert Rate(1, MINUTE_MS).window_seconds == 60


BAD_RATES = [
    "",
    "   ",
    "10",
    "/s",
    "10/",
    "ten/second",
    "10/fortnight",
    "10/ms",
    "0/s",
    "10/0s",
    "-5/s",
    "5.5/s",
    "10/s/s",
    "10 per",
    "10per second",
    "1_000/s",
    "10/s;",
    f"{MAX_QUOTA + 1}/s",
    "1/367 days",
    "99999999999999999999999/s",
    "1" * 5000 + "/s",  # more digits than int() converts: still a RateParseError
    "\uff11\uff10/s",  # fullwidth digits: int() would read them as 10
    "\u0663/s",  # an Arabic-Indic 3
    "10/\u212a",  # Kelvin sign: matches [a-z] case-insensitively outside ASCII mode
    "10\u00a0per\u00a0second",  # no-break spaces
]


@pytest.mark.parametrize("text", BAD_RATES)
def test_bad_rates_are_refused_with_the_input_quoted(text: str) -> None:
    with pytest.raises(RateParseError) as caught:
        parse_rate(text)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ; ",
        "10/s;",
        "10/s;;5/m",
        "10/s,",
        "10/s,|5/m",
        "10/s; 20/second",
        "10/s; 5/fortnight",
        "10/s; 0/m",
        "1/m; \uff15/h",
    ],
)
def test_bad_rate_lists_are_refused_with_the_whole_input_quoted(text: str) -> None:
    with pytest.raises(RateParseError) as caught:
        parse_rates(text)
    assert repr(text) in str(caught.value)


def test_duplicate_windows_are_refused_even_when_spelled_differently() -> None:
    with pytest.raises(RateParseError, match="same window"):
        parse_rates("60/minute; 1000/60 seconds")


def test_non_strings_are_refused() -> None:
    with pytest.raises(RateParseError, match="must be a string"):
        parse_rate(10)  # type: ignore[arg-type]
    with pytest.raises(RateParseError, match="must be a string"):
        parse_rates(None)  # type: ignore[arg-type]


def test_rate_validates_its_fields() -> None:
    with pytest.raises(RateParseError, match="quota"):
        Rate(0, SECOND_MS)
    with pytest.raises(RateParseError, match="window"):
        Rate(1, 0)
    with pytest.raises(RateParseError, match="window"):
        Rate(1, MAX_WINDOW_MS + 1)


@settings(max_examples=examples(200), deadline=None)
@given(
    quota=st.integers(1, MAX_QUOTA),
    count=st.integers(1, 400),
    unit=st.sampled_from([(ms, name) for ms, names in UNITS.items() for name in names]),
    per=st.booleans(),
)
def test_parsed_rates_round_trip_through_their_description(
    quota: int, count: int, unit: tuple[int, str], per: bool
) -> None:
    unit_ms, name = unit
    text = f"{quota} per {count} {name}" if per else f"{quota}/{count}{name}"
    if count * unit_ms > MAX_WINDOW_MS:
        with pytest.raises(RateParseError):
            parse_rate(text)
        return
    rate = parse_rate(text)
    assert rate == Rate(quota, count * unit_ms)
    assert parse_rate(str(rate)) == rate
