"""Rate-limit response fields and problem bodies, from decisions."""

from __future__ import annotations

import re

from edge_limiter.core.http.fields import (
    policy_header,
    rate_limit_headers,
    ratelimit_header,
    retry_after_seconds,
    sf_string,
)
from edge_limiter.core.http.problems import QUOTA_EXCEEDED, quota_exceeded
from edge_limiter.core.ratelimit.decision import Decision, Reason
from edge_limiter.core.ratelimit.rates import Limit, Rate, parse_rates

SECOND, HOUR = (Limit(rate) for rate in parse_rates("10/second; 1000/hour"))


def allowed(limit: Limit, remaining: int, reset_ms: int) -> Decision:
    return Decision(True, limit.capacity, remaining, reset_ms, 0, None, limit)


def denied(limit: Limit, reset_ms: int, retry_ms: int) -> Decision:
    return Decision(False, limit.capacity, 0, reset_ms, retry_ms, Reason.LIMITED, limit)


def test_allowed_headers() -> None:
    per_limit = [allowed(SECOND, 7, 300), allowed(HOUR, 990, 3_599_001)]
    headers = dict(rate_limit_headers(per_limit[0], per_limit))
    assert headers["X-RateLimit-Limit"] == "10"
    assert headers["X-RateLimit-Remaining"] == "7"
    assert headers["X-RateLimit-Reset"] == "1"  # 300 ms rounds up
    assert "Retry-After" not in headers
    assert headers["RateLimit-Policy"] == '"10-per-second";q=10;w=1, "1000-per-hour";q=1000;w=3600'
    assert headers["RateLimit"] == '"10-per-second";r=7;t=1, "1000-per-hour";r=990;t=3600'


def test_denied_headers_retry_after_rounds_up_and_is_at_least_one() -> None:
    per_limit = [denied(SECOND, 100, 1), allowed(HOUR, 990, 10_000)]
    headers = dict(rate_limit_headers(per_limit[0], per_limit))
    assert headers["Retry-After"] == "1"
    per_limit = [denied(SECOND, 2_500, 1_001), denied(HOUR, 100_000, 60_001)]
    combined = per_limit[1]
    headers = dict(rate_limit_headers(combined, per_limit))
    assert headers["Retry-After"] == "61"  # the latest of the denying limits
    assert headers["X-RateLimit-Remaining"] == "0"
    assert int(headers["X-RateLimit-Reset"]) >= int(headers["Retry-After"])
    assert headers["RateLimit"] == '"10-per-second";r=0;t=2, "1000-per-hour";r=0;t=61'


def test_retry_after_never_earlier_than_any_denying_policy_t() -> None:
    per_limit = [denied(SECOND, 900, 900), denied(HOUR, 3_000_000, 3_000)]
    header = ratelimit_header(per_limit)
    ts = [int(t) for t in re.findall(r";t=(\d+)", header)]
    assert retry_after_seconds(per_limit) == max(ts) == 3


def test_policy_header_syntax() -> None:
    text = policy_header([allowed(Limit(Rate(100, 600_000), name="burst"), 1, 1)])
    assert re.fullmatch(r'"[^"]+";q=\d+;w=[1-9]\d*', text)
    assert text == '"burst";q=100;w=600'
    assert sf_string('a"b\\c') == '"a\\"b\\\\c"'


def test_sub_second_window_is_published_as_one_second() -> None:
    assert policy_header([allowed(Limit(Rate(5, 500)), 1, 1)]) == '"5-per-500-ms";q=5;w=1'


def test_reason_header_for_shadow_and_store_unavailable() -> None:
    shadow = Decision(True, 10, 0, 1000, 0, Reason.SHADOW, SECOND)
    headers = dict(rate_limit_headers(shadow, [denied(SECOND, 1000, 100)]))
    assert headers["X-EdgeLimiter-Reason"] == "shadow"
    assert "Retry-After" not in headers


def test_a_burst_is_published_as_what_the_limit_really_admits() -> None:
    """10/second with burst 20: 20 at once, refilled completely in 2 s."""
    burst = Limit(Rate(10, 1000), 20)
    assert burst.name == "10-per-second-burst-20"
    text = policy_header([allowed(burst, 19, 100), allowed(Limit(Rate(1000, 3_600_000)), 999, 1)])
    assert text == '"10-per-second-burst-20";q=20;w=2, "1000-per-hour";q=1000;w=3600'
    # A burst below the quota refills in less than the window.
    assert policy_header([allowed(Limit(Rate(10, 1000), 5), 4, 100)]).endswith(";q=5;w=1")
    assert Limit(Rate(60, 60_000), 90).policy_window_ms == 90_000


def test_problem_body() -> None:
    per_limit = [denied(SECOND, 900, 900), allowed(HOUR, 10, 1)]
    body = quota_exceeded("search", per_limit, instance="/v1/search").body()
    assert body["type"] == QUOTA_EXCEEDED
    assert body["code"] == "rate_limited"
    assert body["status"] == 429
    assert body["violated-policies"] == ["10-per-second"]
    assert body["retry_after"] == 1
    assert "search" in body["detail"] and "10 per second" in body["detail"]
    assert body["instance"] == "/v1/search"


def _merged(ours: list[tuple[str, str]], **theirs: str) -> dict[str, str]:
    """``ours`` set on an origin's answer with fields ``theirs`` (``_`` for ``-``)."""
    from edge_limiter.core.http.fields import with_origins_fields

    fields = {name.replace("_", "-"): value for name, value in theirs.items()}
    return dict(with_origins_fields(ours, fields.get))


def test_an_origins_own_fields_are_kept_only_when_a_client_can_read_them() -> None:
    ours = [
        ("X-RateLimit-Limit", "100"),
        ("X-RateLimit-Remaining", "98"),
        ("X-RateLimit-Reset", "30"),
        ("RateLimit-Policy", '"100-per-minute";q=100;w=60'),
        ("RateLimit", '"100-per-minute";r=98;t=30'),
    ]

    assert _merged(ours) == dict(ours)
    # A malformed list would spoil ours once joined to it: ours alone.
    assert _merged(ours, ratelimit_policy="garbage((", ratelimit="garbage((") == dict(ours)
    kept = _merged(ours, ratelimit='"o";r=1;t=9')  # no policy field: its RateLimit still kept
    assert kept["RateLimit"] == '"o";r=1;t=9, "100-per-minute";r=98;t=30'
    assert kept["RateLimit-Policy"] == '"100-per-minute";q=100;w=60'
    # Remaining alone is no set a client can use: ours stay.
    assert _merged(ours, x_ratelimit_remaining="2")["X-RateLimit-Limit"] == "100"
    theirs = _merged(ours, x_ratelimit_remaining="2", x_ratelimit_limit="10")
    assert "X-RateLimit-Limit" not in theirs and "X-RateLimit-Remaining" not in theirs


def test_a_policy_the_origin_names_as_ours_is_sent_under_another_name() -> None:
    from edge_limiter.core.caching.targeted import list_names

    ours = [
        ("X-RateLimit-Limit", "2"),
        ("X-RateLimit-Remaining", "1"),
        ("X-RateLimit-Reset", "46"),
        ("RateLimit-Policy", '"2-per-minute";q=2;w=60, "100-per-hour";q=100;w=3600'),
        ("RateLimit", '"2-per-minute";r=1;t=46, "100-per-hour";r=99;t=3600'),
    ]

    both = _merged(
        ours, ratelimit_policy='"2-per-minute";q=2;w=60', ratelimit='"2-per-minute";r=0;t=5'
    )
    assert both["RateLimit-Policy"] == (
        '"2-per-minute";q=2;w=60, "2-per-minute-gateway";q=2;w=60, "100-per-hour";q=100;w=3600'
    )
    assert both["RateLimit"] == (
        '"2-per-minute";r=0;t=5, "2-per-minute-gateway";r=1;t=46, "100-per-hour";r=99;t=3600'
    )
    # The new name is one neither list uses; our policy is renamed in both of our
    # fields even when the origin sent RateLimit alone.
    taken = _merged(ours, ratelimit='"2-per-minute";r=0;t=5, "2-per-minute-gateway";r=3;t=9')
    assert taken["RateLimit"].endswith(
        '"2-per-minute-gateway-2";r=1;t=46, "100-per-hour";r=99;t=3600'
    )
    assert taken["RateLimit-Policy"].startswith('"2-per-minute-gateway-2";q=2;w=60, ')
    assert list_names('hourly;r=0, "a\\"b";q=1, 5, (x y)') == ["hourly", 'a"b', "", ""]
    # No name in common, or a list too broken to keep: nothing is renamed.
    assert _merged(ours, ratelimit='"other";r=0;t=5')["RateLimit-Policy"] == ours[3][1]
    assert _merged(ours, ratelimit='"2-per-minute";r=0;t=5,')["RateLimit"] == ours[4][1]
