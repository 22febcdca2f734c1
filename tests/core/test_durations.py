"""Duration strings in config: exact milliseconds, clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_limiter.core.durations import format_duration, parse_duration
from edge_limiter.core.errors import DurationError


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250ms", 250),
        ("30s", 30_000),
        ("5m", 300_000),
        ("24h", 86_400_000),
        ("7d", 604_800_000),
        ("1h30m", 5_400_000),
        ("1m0s", 60_000),
        ("0s", 0),
    ],
)
def test_parses(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "cannot parse"),
        ("30", "cannot parse"),
        ("30 s", "cannot parse"),
        ("-5s", "cannot parse"),
        ("5x", "cannot parse"),
        ("1.5s", "cannot parse"),
        ("30m1h", "larger units first"),
        ("1s1s", "larger units first"),
        ("\uff15s", "cannot parse"),  # fullwidth digit five
        (30, "must be a duration string"),
        (None, "must be a duration string"),
    ],
)
def test_refuses(text: object, why: str) -> None:
    with pytest.raises(DurationError, match=why):
        parse_duration(text)


def test_bounds_name_the_limit() -> None:
    with pytest.raises(DurationError, match="shorter than 1s"):
        parse_duration("500ms", minimum_ms=1_000)
    with pytest.raises(DurationError, match="longer than 1d"):
        parse_duration("25h", maximum_ms=86_400_000)


@given(st.integers(min_value=0, max_value=10**12))
def test_format_round_trips(ms: int) -> None:
    assert parse_duration(format_duration(ms)) == ms


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("1.5s", "1s500ms"),
        ("0.5s", "500ms"),
        ("10min", "10m"),
        ("10sec", "10s"),
        ("1w", "7d"),
        ("1m 30s", "1m30s"),
        ("5 minutes", "5m"),
        ("1H", "1h"),
    ],
)
def test_a_duration_written_as_peers_write_it_is_refused_saying_what_to_write(
    written: str, meant: str
) -> None:
    with pytest.raises(DurationError, match=f"did you mean '{meant}'"):
        parse_duration(written)
    assert parse_duration(meant) > 0
