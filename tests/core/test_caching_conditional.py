"""Conditional GET and HEAD against a stored response (RFC 9110 section 13)."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_limiter.core.caching.conditional import (
    entity_tags,
    freshened_fields,
    freshens,
    needs_origin,
    not_modified,
    not_modified_fields,
    revalidation_fields,
)
from edge_limiter.core.caching.policy import LookupReason, lookup_decision
from edge_limiter.core.caching.settings import CacheSettings

NOW = 1_800_000_000_000  # 2027-01-15, ms
STORED_AT = NOW - 60_000


def date(ms: int) -> str:
    return format_datetime(datetime.fromtimestamp(ms / 1000, UTC), usegmt=True)


def check(request: dict[str, str], stored: dict[str, str], status: int = 200) -> bool:
    return not_modified(request, status, stored, STORED_AT, NOW)


@pytest.mark.parametrize(
    ("value", "tags"),
    [
        ('"a"', ('"a"',)),
        ('W/"a"', ('"a"',)),
        ('"a", W/"b" ,"c"', ('"a"', '"b"', '"c"')),
        ('"a,b"', ('"a,b"',)),  # a comma is a valid etagc
        ('""', ('""',)),
        ("*", ("*",)),
        (" * ", ("*",)),
        ("a", None),
        ('"a', None),
        ('"a"b', None),
        ('w/"a"', None),  # W is case-sensitive
        ('"a b"', None),
        ('*, "a"', None),
    ],
)
def test_entity_tag_lists(value: str, tags: tuple[str, ...] | None) -> None:
    assert entity_tags(value) == tags


def test_if_none_match_compares_weakly() -> None:
    assert check({"if-none-match": '"v1"'}, {"etag": '"v1"'})
    assert check({"if-none-match": 'W/"v1"'}, {"etag": '"v1"'})
    assert check({"if-none-match": '"v1"'}, {"etag": 'W/"v1"'})
    assert check({"if-none-match": '"v0", "v1"'}, {"etag": '"v1"'})
    assert not check({"if-none-match": '"v2"'}, {"etag": '"v1"'})
    assert not check({"if-none-match": '"v1"'}, {})


def test_a_star_matches_any_stored_response() -> None:
    assert check({"if-none-match": "*"}, {})


def test_a_malformed_if_none_match_is_a_full_answer() -> None:
    assert not check({"if-none-match": "v1"}, {"etag": '"v1"'})
    assert not check({"if-none-match": '"v1"'}, {"etag": "v1"})


def test_if_none_match_overrides_if_modified_since() -> None:
    request = {"if-none-match": '"v2"', "if-modified-since": date(NOW)}
    assert not check(request, {"etag": '"v1"', "last-modified": date(NOW - 3_600_000)})


def test_if_modified_since_against_last_modified() -> None:
    stored = {"last-modified": date(NOW - 3_600_000)}
    assert check({"if-modified-since": date(NOW - 3_600_000)}, stored)
    assert check({"if-modified-since": date(NOW - 1_000)}, stored)
    assert not check({"if-modified-since": date(NOW - 3_601_000)}, stored)


def test_if_modified_since_falls_back_to_date_then_to_when_stored() -> None:
    assert check({"if-modified-since": date(NOW - 5_000)}, {"date": date(NOW - 10_000)})
    assert not check({"if-modified-since": date(NOW - 20_000)}, {"date": date(NOW - 10_000)})
    assert check({"if-modified-since": date(STORED_AT)}, {})
    assert not check({"if-modified-since": date(STORED_AT - 1_000)}, {})


@pytest.mark.parametrize(
    "since",
    [
        "yesterday",
        "Sun, 06 Nov 1994 08:49:37 +0000",  # not an HTTP-date
        date(NOW + 60_000),  # in the future: invalid (RFC 9110 section 13.1.3)
    ],
)
def test_an_unusable_if_modified_since_is_ignored(since: str) -> None:
    assert not check({"if-modified-since": since}, {"last-modified": date(NOW - 3_600_000)})


def test_two_if_modified_since_lines_are_ignored() -> None:
    request = [("if-modified-since", date(NOW)), ("if-modified-since", date(NOW))]
    assert not not_modified(request, 200, {"last-modified": date(NOW - 9_000)}, STORED_AT, NOW)


@pytest.mark.parametrize("status", [203, 204, 206])
def test_any_success_can_be_not_modified(status: int) -> None:
    assert check({"if-none-match": "*"}, {}, status)


@pytest.mark.parametrize("status", [300, 301, 308, 404, 410])
def test_other_statuses_ignore_the_conditions(status: int) -> None:
    assert not check({"if-none-match": "*"}, {}, status)
    assert not check({"if-modified-since": date(NOW)}, {}, status)


def test_no_condition_is_a_full_answer() -> None:
    assert not check({}, {"etag": '"v1"', "last-modified": date(NOW - 9_000)})


def test_a_304_repeats_only_the_fields_that_describe_the_copy() -> None:
    stored = [
        ("Content-Type", "application/json"),
        ("ETag", '"v1"'),
        ("Cache-Control", "max-age=60"),
        ("Vary", "Accept"),
        ("Content-Language", "de"),
        ("X-Origin", "eu"),
        ("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
    ]
    assert not_modified_fields(stored) == (
        ("ETag", '"v1"'),
        ("Cache-Control", "max-age=60"),
        ("Vary", "Accept"),
        ("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
    )


@pytest.mark.parametrize("field", ["if-match", "If-Unmodified-Since"])
def test_preconditions_for_the_origin_skip_the_cache(field: str) -> None:
    assert needs_origin({field: '"v1"'})
    lookup = lookup_decision("GET", {field: '"v1"'}, CacheSettings(ttl_ms=60_000))
    assert lookup.bypass and lookup.reason == LookupReason.PRECONDITION
    assert not needs_origin({"if-none-match": '"v1"', "if-modified-since": date(NOW)})


@given(st.text(max_size=40))
def test_any_if_none_match_gives_an_answer_not_an_error(value: str) -> None:
    tags = entity_tags(value)
    assert tags is None or all(tag == "*" or tag.startswith('"') for tag in tags)
    check({"if-none-match": value}, {"etag": '"v1"'})


# --- revalidating a stored copy -----------------------------------------------------------

LM = "Wed, 01 Jan 2020 00:00:00 GMT"


def test_a_stale_copy_is_asked_for_by_its_validators() -> None:
    assert revalidation_fields([("ETag", ' W/"v1" '), ("Last-Modified", LM)]) == [
        ("If-None-Match", 'W/"v1"'),
        ("If-Modified-Since", LM),
    ]
    assert revalidation_fields([("Last-Modified", LM)]) == [("If-Modified-Since", LM)]
    # An unquoted tag goes back as the origin wrote it: it knows its own.
    assert revalidation_fields([("ETag", "v1")]) == [("If-None-Match", "v1")]
    # Nothing to revalidate by: no ETag, no valid (single) Last-Modified, a malformed tag.
    for fields in (
        [],
        [("Last-Modified", "yesterday")],
        [("Last-Modified", LM), ("Last-Modified", LM)],
        [("ETag", " ")],
        [("ETag", "*")],
    ):
        assert revalidation_fields(fields) == [], fields


def test_a_304_updates_every_field_but_those_describing_the_stored_body() -> None:
    stored = [("Content-Type", "text/plain"), ("ETag", '"a"'), ("X-Test", "A"), ("Expires", LM)]
    answer = [
        ("X-Test", "B"),
        ("Content-Type", "text/plain;charset=utf-8"),
        ("ETag", '"a"'),
        ("Content-Length", "10"),
        ("Content-Encoding", "gzip"),
        ("Connection", "close"),
        ("Set-Cookie", "a=1"),
        ("Cache-Control", "max-age=60"),
    ]
    assert freshened_fields(stored, answer) == (
        ("ETag", '"a"'),
        ("Expires", LM),
        ("X-Test", "B"),
        ("Content-Type", "text/plain;charset=utf-8"),
        ("Cache-Control", "max-age=60"),
    )


def test_a_304_for_another_strong_etag_does_not_freshen_the_copy() -> None:
    stored = [("ETag", '"a"')]
    assert freshens(stored, [("ETag", '"a"')])
    assert freshens(stored, [])
    assert freshens(stored, [("ETag", 'W/"b"')])  # weak: cannot tell answers apart
    assert not freshens(stored, [("ETag", '"b"')])
    assert not freshens([], [("ETag", '"b"')])
