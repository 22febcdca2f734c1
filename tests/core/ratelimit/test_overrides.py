"""Per-key overrides: parsing with clear errors, matching precedence, expiry, storage."""

from __future__ import annotations

import pytest

from edge_limiter.core.control import apply_overrides_call, apply_stats_call
from edge_limiter.core.ratelimit.overrides import (
    OverrideError,
    OverrideTable,
    decode_overrides,
    encode_overrides,
    key_value,
    parse_override,
)
from edge_limiter.core.stats import StatsBatch, merge, summary

ALGORITHMS = {"api": "sliding_window", "login": "sliding_log"}
NOW = 1_700_000_000_000


def make(**fields: object):  # type: ignore[no-untyped-def]
    return parse_override(
        {"route": "api", "key": "k", "limits": "5/minute", **fields}, NOW, ALGORITHMS
    )


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"route": "nope"}, "route must be one of"),
        ({"key": ""}, "key must be"),
        ({"key": "x\ny"}, "key must be"),
        ({"limits": None}, "either limits"),
        ({"exempt": True}, "either limits"),
        ({"limits": "5/fortnight"}, "cannot parse"),
        ({"limits": 5}, "limits must be a string"),
        ({"route": "login", "limits": "20000/hour"}, "at most 10000"),
        ({"expires_in": "soon"}, "expires_in"),
        ({"expires_at": NOW - 1}, "future time"),
        ({"expires_in": "1m", "expires_at": NOW + 10}, "not both"),
        ({"expires_in": "3651d"}, "longer than 3650d .*does not expire"),
        ({"expires_in": "999999999d"}, "longer than 3650d"),
        ({"expires_at": NOW + 3_650 * 86_400_000 + 1}, "at most 3650 days"),
        ({"expires_at": 2**63}, "at most 3650 days"),
        ({"colour": "red"}, "unknown field"),
        ({"reason": "x" * 201}, "reason"),
    ],
)
def test_bad_overrides_say_what_to_fix(fields: dict[str, object], why: str) -> None:
    with pytest.raises(OverrideError, match=why):
        make(**fields)


def test_an_expiry_may_be_up_to_ten_years_ahead_or_absent() -> None:
    ten_years = 3_650 * 86_400_000
    assert make(expires_in="3650d").expires_at == NOW + ten_years
    assert make(expires_at=NOW + ten_years).expires_at == NOW + ten_years
    assert make().expires_at is None


def test_an_override_for_every_route_must_suit_every_routes_algorithm() -> None:
    with pytest.raises(OverrideError, match="for route 'login'"):
        make(route="*", limits="20000/hour")


def test_matching_precedence_and_expiry() -> None:
    table = OverrideTable(
        [
            make(key="premium_*", limits="10/minute"),
            make(key="premium_vip", limits="100/minute"),
            make(route="*", key="premium_*", limits="7/minute"),
            make(route="*", key="internal", exempt=True, limits=None),
            make(key="trial_*", limits="1/minute", expires_in="1m"),
        ]
    )

    def found(route: str, key: str, now: int = NOW) -> str | None:
        hit = table.find(route, key, now)
        if hit is None:
            return None
        return "exempt" if hit.exempt else str(hit.limits[0].rate)

    assert found("api", "header:x-api-key=premium_vip") == "100 per minute"  # exact first
    assert found("api", "header:x-api-key=premium_1") == "10 per minute"  # the route's own
    assert found("login", "header:x-api-key=premium_1") == "7 per minute"  # then "*"
    assert found("login", "ip=internal") == "exempt"
    assert found("api", "ip=premium_1|header:x=y") is None  # patterns see one-part values
    assert found("api", "header:x-api-key=trial_9") == "1 per minute"
    assert found("api", "header:x-api-key=trial_9", NOW + 60_000) is None  # expired
    assert key_value("header:x-api-key=a%20b") == "a b"


def test_storage_round_trips_and_drops_unreadable_entries() -> None:
    items = [make(), make(key="other", exempt=True, limits=None, expires_in="1h")]
    assert decode_overrides(encode_overrides(items)) == items
    assert decode_overrides('[{"id": 1}]') == [] and decode_overrides("nope") == []


def test_the_control_object_lists_puts_and_deletes_and_drops_expired() -> None:
    first = make(expires_in="1m")
    answer, stored = apply_overrides_call(
        '{"op":"put","override":' + encode_overrides([first])[1:-1] + "}", None, NOW
    )
    assert '"id"' in answer and stored
    listed, _ = apply_overrides_call('{"op":"list"}', stored, NOW + 59_999)
    assert first.id in listed
    later, _ = apply_overrides_call('{"op":"list"}', stored, NOW + 60_000)
    assert first.id not in later
    deleted, remaining = apply_overrides_call(f'{{"op":"delete","id":"{first.id}"}}', stored, NOW)
    assert '"deleted": true' in deleted and decode_overrides(remaining or "[]") == []


def test_stats_keep_an_hour_of_minutes_and_the_busiest_keys() -> None:
    batch = StatsBatch()
    for _ in range(3):
        batch.note("api", "limited", "abc")
    batch.note("api", "allowed")
    batch.note("login", "cached_denial", "def")
    stored = merge({}, batch.to_json(NOW))
    old = StatsBatch()
    old.note("api", "limited", "zzz")
    stored = merge(stored, old.to_json(NOW - 30 * 60_000))
    result = summary(stored, NOW)
    assert result["routes"]["api"]["5m"] == {"limited": 3, "allowed": 1}
    assert result["routes"]["api"]["60m"]["limited"] == 4
    assert result["top_limited"][0] == {"route": "api", "key_hash": "abc", "limited": 3}
    gone = summary(merge(stored, StatsBatch().to_json(NOW + 61 * 60_000)), NOW + 61 * 60_000)
    assert gone["routes"] == {} and gone["top_limited"] == []
    assert apply_stats_call('{"op":"get"}', None, NOW)[0].startswith("{")


def test_an_override_is_described_with_its_rates_as_a_person_writes_them() -> None:
    override = make(limits="100/minute; 5000/day")
    described = override.describe()
    assert described["rates"] == "100 per minute; 5000 per day"
    assert (
        parse_override(
            {"route": "api", "key": "k", "limits": described["rates"]}, NOW, ALGORITHMS
        ).limits
        == override.limits
    )  # what it says can be given back as it is
    assert decode_overrides(encode_overrides([override]))[0].limits == override.limits


def test_an_override_below_a_routes_cost_is_refused_naming_the_route() -> None:
    costs = {"api": 10, "login": 1}
    data = {"route": "api", "key": "k", "limits": "5/minute"}
    with pytest.raises(OverrideError, match=r"route 'api'.*cost of 10"):
        parse_override(data, NOW, ALGORITHMS, costs=costs)
    # On every route ('*'), the costliest route decides; the route's own cost is allowed.
    with pytest.raises(OverrideError, match="route 'api'"):
        parse_override({**data, "route": "*"}, NOW, ALGORITHMS, costs=costs)
    assert parse_override({**data, "limits": "10/minute"}, NOW, ALGORITHMS, costs=costs).limits
    assert parse_override({**data, "route": "login"}, NOW, ALGORITHMS, costs=costs).limits


def test_a_key_with_a_tab_inside_is_one_a_request_can_have() -> None:
    # RFC 9110 allows a tab inside a field value: such a key is counted, so it may have
    # an override (a probe got 400 for it, though reset and peek took it).
    assert make(key="a\tb").key == "a\tb"
