"""Backoff with full jitter (exact range, overflow guard, a statistical uniformity check with
a fixed seed) and ``Retry-After`` parsing per RFC 9110."""

from __future__ import annotations

import calendar
import random
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_limiter.core.resilience.backoff import (
    MAX_DELAY_MS,
    backoff_ceiling_ms,
    full_jitter_ms,
    parse_retry_after,
    retry_delay_ms,
)

EPOCH_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def constant(value: float) -> Callable[[], float]:
    return lambda: value


# --- full jitter --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "ceiling"),
    [(0, 100), (1, 200), (2, 400), (3, 800), (4, 1_600), (5, 2_000), (6, 2_000), (60, 2_000)],
)
def test_the_ceiling_doubles_and_caps(attempt: int, ceiling: int) -> None:
    assert backoff_ceiling_ms(attempt, 100, 2_000) == ceiling


def test_the_ceiling_has_an_overflow_guard() -> None:
    # 2**(10**12) would never finish; the guard answers at once.
    assert backoff_ceiling_ms(10**12, 100, 2_000) == 2_000
    assert backoff_ceiling_ms(10**12, 1, 2**70) == 2**70
    assert backoff_ceiling_ms(10**12, 0, 2_000) == 0
    assert backoff_ceiling_ms(3, 5, 0) == 0


def test_negative_arguments_are_refused() -> None:
    for args in ((-1, 100, 2_000), (0, -1, 2_000), (0, 100, -1)):
        with pytest.raises(ValueError, match=">= 0"):
            backoff_ceiling_ms(*args)


def test_full_jitter_covers_both_ends_of_its_range() -> None:
    assert full_jitter_ms(2, 100, 2_000, constant(0.0)) == 0
    assert full_jitter_ms(2, 100, 2_000, constant(0.999_999_999)) == 400
    assert full_jitter_ms(2, 100, 2_000, constant(0.5)) == 200


@pytest.mark.parametrize("bad", [1.0, 7.5, float("inf"), -0.5, float("-inf"), float("nan")])
def test_a_bad_random_source_never_leaves_the_range(bad: float) -> None:
    assert 0 <= full_jitter_ms(3, 100, 2_000, constant(bad)) <= 800


@given(
    st.integers(0, 200),
    st.integers(0, 10_000),
    st.integers(0, 10**7),
    st.floats(0.0, 1.0, exclude_max=True),
)
def test_full_jitter_is_always_within_zero_and_the_ceiling(
    attempt: int, base: int, cap: int, fraction: float
) -> None:
    delay = full_jitter_ms(attempt, base, cap, constant(fraction))
    assert 0 <= delay <= min(cap, base * 2 ** min(attempt, 64))


def test_full_jitter_is_uniform_over_its_range() -> None:
    """Chi-square over 20 equal bins of ``0..1999``, 20,000 draws from a fixed seed.

    With 19 degrees of freedom the 99.9th percentile of chi-square is 43.82; a uniform
    source lands above it once in a thousand seeds, and this seed is fixed. A draw skewed
    to one end (e.g. ``int(random() * ceiling)`` losing the top value, or a square of the
    random number) lands far above it.
    """
    source = random.Random(20_240_601)
    bins, draws, ceiling = 20, 20_000, 1_999
    counts = [0] * bins
    seen_top = False
    for _ in range(draws):
        delay = full_jitter_ms(20, 1, ceiling, source.random)
        assert 0 <= delay <= ceiling
        seen_top |= delay == ceiling
        counts[delay * bins // (ceiling + 1)] += 1
    expected = draws / bins
    chi_square = sum((count - expected) ** 2 / expected for count in counts)
    assert chi_square < 43.82, (chi_square, counts)
    assert seen_top  # the ceiling itself is reachable


def test_full_jitter_mean_is_half_the_ceiling() -> None:
    source = random.Random(7)
    draws = [full_jitter_ms(3, 100, 10_000, source.random) for _ in range(20_000)]
    # Uniform on 0..800: mean 400, standard deviation ~231, so the mean of 20,000 draws has
    # a standard error of ~1.6; 10 is more than six standard errors.
    assert abs(sum(draws) / len(draws) - 400) < 10


# --- retry delay --------------------------------------------------------------------------


def test_retry_delay_is_full_jitter_without_retry_after() -> None:
    assert retry_delay_ms(1, 100, 2_000, constant(0.5)) == 100


def test_retry_delay_waits_at_least_retry_after() -> None:
    assert retry_delay_ms(1, 100, 2_000, constant(0.0), 5_000) == 5_000
    assert retry_delay_ms(1, 100, 2_000, constant(0.99), 10) == 198
    assert retry_delay_ms(1, 100, 2_000, constant(0.0), 0) == 0


@given(st.integers(0, 20), st.integers(0, 10**6), st.floats(0.0, 1.0, exclude_max=True))
def test_retry_delay_is_never_shorter_than_retry_after(
    attempt: int, retry_after: int, fraction: float
) -> None:
    delay = retry_delay_ms(attempt, 100, 2_000, constant(fraction), retry_after)
    assert delay >= retry_after
    assert delay <= max(retry_after, 2_000)


# --- Retry-After --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("0", 0),
        ("1", 1_000),
        ("120", 120_000),
        (" 120\t", 120_000),
        ("007", 7_000),
        ("9" * 40, MAX_DELAY_MS),
        ("999999999999999", MAX_DELAY_MS),
    ],
)
def test_delay_seconds(value: str, ms: int) -> None:
    assert parse_retry_after(value, EPOCH_MS) == ms


def _at(*fields: int) -> int:
    """``(year, month, day, hour, minute, second)`` UTC as epoch ms."""
    return calendar.timegm((*fields, 0, 0, 0)) * 1000


@pytest.mark.parametrize(
    ("value", "at"),
    [
        # IMF-fixdate, the form senders use.
        ("Tue, 14 Nov 2023 22:14:20 GMT", _at(2023, 11, 14, 22, 14, 20)),
        ("Wed, 15 Nov 2023 00:00:00 GMT", _at(2023, 11, 15, 0, 0, 0)),
        # The obsolete forms a recipient must accept.
        ("Tuesday, 14-Nov-23 22:14:20 GMT", _at(2023, 11, 14, 22, 14, 20)),
        ("Tue Nov 14 22:14:20 2023", _at(2023, 11, 14, 22, 14, 20)),
        ("Fri Dec  1 00:00:00 2023", _at(2023, 12, 1, 0, 0, 0)),
        # A leap second reads as the last second of its minute.
        ("Sun, 31 Dec 2023 23:59:60 GMT", _at(2023, 12, 31, 23, 59, 59)),
        # The day name is not cross-checked against the date.
        ("Mon, 14 Nov 2023 22:14:20 GMT", _at(2023, 11, 14, 22, 14, 20)),
    ],
)
def test_http_dates(value: str, at: int) -> None:
    assert parse_retry_after(value, EPOCH_MS) == at - EPOCH_MS


def test_a_date_in_the_past_is_a_wait_of_zero() -> None:
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", EPOCH_MS) == 0
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:19 GMT", EPOCH_MS) == 0
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:20 GMT", EPOCH_MS) == 0
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:21 GMT", EPOCH_MS) == 1_000


@pytest.mark.parametrize(
    ("value", "now_year", "year"),
    [
        # A two-digit year more than 50 years ahead is the most recent past one.
        ("Sunday, 06-Nov-94 08:49:37 GMT", 2023, 1994),
        ("Sunday, 06-Nov-73 08:49:37 GMT", 2023, 2073),
        ("Sunday, 06-Nov-74 08:49:37 GMT", 2023, 1974),
        ("Sunday, 06-Nov-30 08:49:37 GMT", 2023, 2030),
        ("Sunday, 06-Nov-05 08:49:37 GMT", 2090, 2105),
    ],
)
def test_rfc850_two_digit_years(value: str, now_year: int, year: int) -> None:
    now = _at(now_year, 1, 1, 0, 0, 0)
    assert parse_retry_after(value, now) == max(0, _at(year, 11, 6, 8, 49, 37) - now)


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "-1",
        "+5",
        "1.5",
        "1e3",
        "5 s",
        "soon",
        "\u0661\u0662",  # Arabic-Indic digits are not delay-seconds
        "Tue, 14 Nov 2023 22:14:20 UTC",
        "Tue, 14 Nov 2023 22:14:20",
        "Tue, 31 Nov 2023 22:14:20 GMT",
        "Tue, 29 Feb 2023 22:14:20 GMT",
        "Tue, 14 Nov 2023 24:00:00 GMT",
        "Tue, 14 Nov 2023 22:60:00 GMT",
        "Tue, 14 Nov 2023 22:14:61 GMT",
        "Tue, 00 Nov 2023 22:14:20 GMT",
        "Tue, 14 Nov 0000 22:14:20 GMT",
        "Tue, 14 nov 2023 22:14:20 GMT",
        "Tue, 4 Nov 2023 22:14:20 GMT",
        "Tues, 14 Nov 2023 22:14:20 GMT",
        "Tue,  14 Nov 2023 22:14:20 GMT",
        "2023-11-14T22:14:20Z",
    ],
)
def test_garbage_is_none(value: str | None) -> None:
    assert parse_retry_after(value, EPOCH_MS) is None


def test_the_leap_day_exists_in_leap_years() -> None:
    assert parse_retry_after("Thu, 29 Feb 2024 00:00:00 GMT", EPOCH_MS) == (
        _at(2024, 2, 29, 0, 0, 0) - EPOCH_MS
    )


@given(st.text(max_size=40), st.integers(0, 2**50))
def test_any_text_gives_none_or_a_wait_that_is_not_negative(value: str, now: int) -> None:
    wait = parse_retry_after(value, now)
    assert wait is None or 0 <= wait <= MAX_DELAY_MS


@given(st.integers(0, 10**12))
def test_delay_seconds_round_trip(seconds: int) -> None:
    assert parse_retry_after(str(seconds), EPOCH_MS) == seconds * 1000
