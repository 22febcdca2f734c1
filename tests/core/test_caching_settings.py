"""The cache table's parser: defaults, every field, and problems that name their field."""

from __future__ import annotations

import pytest

from edge_limiter.core.caching.settings import DEFAULT_MAX_BYTES, CacheSettings
from edge_limiter.core.config.cache import parse_cache
from edge_limiter.core.validation import Problems

WHERE = "route 'catalog'.cache"


def parse(raw: object) -> tuple[CacheSettings | None, Problems]:
    problems = Problems()
    return parse_cache(raw, WHERE, problems), problems


def test_absent_table_means_no_cache() -> None:
    settings, problems = parse(None)
    assert settings is None
    assert not problems.items


def test_only_ttl_is_required_and_the_rest_defaults() -> None:
    settings, problems = parse({"ttl": "5m"})
    assert not problems.items and not problems.warnings
    assert settings == CacheSettings(ttl_ms=300_000)
    assert settings.scope == "public"
    assert settings.ignore_query == ()
    assert settings.max_bytes == DEFAULT_MAX_BYTES == 1024 * 1024
    assert settings.statuses is None  # whatever the origin gives a lifetime
    assert settings.default_ttl_ms == 0  # none: answers that give none are not kept
    assert settings.count_hits is False
    assert settings.allow_client_no_cache is False
    assert settings.stale_if_error_ms == 0


def test_default_ttl_is_an_opt_in_no_longer_than_ttl() -> None:
    settings, problems = parse({"ttl": "1h", "default_ttl": "5m"})
    assert not problems.items and settings is not None
    assert (settings.ttl_ms, settings.default_ttl_ms) == (3_600_000, 300_000)
    settings, problems = parse({"ttl": "5m", "default_ttl": "1h"})
    assert len(problems.items) == 1
    assert problems.items[0].startswith(f"{WHERE}.default_ttl: ")
    assert "longer than ttl" in problems.items[0]


def test_the_documented_example() -> None:
    settings, problems = parse(
        {
            "ttl": "5m",
            "scope": "key",
            "ignore_query": ["utm_source"],
            "max_bytes": 262144,
            "statuses": [200, 404],
            "count_hits": False,
            "allow_client_no_cache": False,
            "stale_if_error": "10m",
        }
    )
    assert not problems.items
    assert settings == CacheSettings(
        ttl_ms=300_000,
        scope="key",
        ignore_query=("utm_source",),
        max_bytes=262144,
        statuses=(200, 404),
        stale_if_error_ms=600_000,
    )


def test_missing_ttl_is_a_problem_but_settings_come_back() -> None:
    settings, problems = parse({"scope": "key"})
    assert problems.items == [
        f"{WHERE}.ttl: is required: how long a response stays fresh, e.g. '5m'"
    ]
    assert settings is not None and settings.scope == "key"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ttl", "5 minutes"),
        ("ttl", 300),
        ("ttl", "0s"),
        ("ttl", "400d"),
        ("scope", "private"),
        ("ignore_query", "utm_source"),
        ("ignore_query", [""]),
        ("ignore_query", ["a=b"]),
        ("ignore_query", [3]),
        ("max_bytes", 0),
        ("max_bytes", 26 * 1024 * 1024),
        ("max_bytes", "1MiB"),
        ("max_bytes", True),
        ("statuses", []),
        ("statuses", "200"),
        ("statuses", [200, 206]),
        ("statuses", [304]),
        ("statuses", [199]),
        ("statuses", [600]),
        ("statuses", [200.0]),
        ("count_hits", "no"),
        ("allow_client_no_cache", 1),
        ("stale_if_error", 10),
        ("stale_if_error", "31d"),
        ("stale_while_revalidate", 30),
        ("stale_while_revalidate", "2d"),
    ],
)
def test_bad_field_is_a_problem_naming_it(field: str, value: object) -> None:
    raw = {"ttl": "5m", field: value}
    settings, problems = parse(raw)
    assert settings is not None
    assert len(problems.items) == 1, problems.items
    assert problems.items[0].startswith(f"{WHERE}.{field}")


def test_bad_fields_take_their_defaults() -> None:
    settings, problems = parse(
        {"ttl": "5m", "scope": 1, "max_bytes": -1, "statuses": [206], "count_hits": "x"}
    )
    assert len(problems.items) == 4
    assert settings == CacheSettings(ttl_ms=300_000)


def test_unknown_fields_are_problems() -> None:
    _, problems = parse({"ttl": "5m", "tll": "5m", "vary": ["accept"]})
    assert [p.split(":")[0] for p in problems.items] == [f"{WHERE}.tll", f"{WHERE}.vary"]


def test_not_a_table() -> None:
    settings, problems = parse("5m")
    assert settings is None
    assert problems.items == [f"{WHERE}: must be a table, got '5m'"]


def test_ignore_query_star_ignores_everything() -> None:
    for value in ("*", ["*"], ["a", "*"]):
        settings, problems = parse({"ttl": "5m", "ignore_query": value})
        assert settings is not None and settings.ignore_query == ("*",)
        assert settings.ignores_whole_query
        assert not problems.items


def test_ignore_query_is_sorted_and_deduplicated_with_a_warning() -> None:
    settings, problems = parse({"ttl": "5m", "ignore_query": ["utm_source", "fbclid", "fbclid"]})
    assert settings is not None and settings.ignore_query == ("fbclid", "utm_source")
    assert not problems.items
    assert problems.warnings == [f"{WHERE}.ignore_query[2]: names 'fbclid' twice"]


def test_statuses_may_include_errors_when_asked() -> None:
    settings, problems = parse({"ttl": "5m", "statuses": [404, 200, 404, 410]})
    assert not problems.items
    assert settings is not None and settings.statuses == (200, 404, 410)


def test_short_ttl_is_legal_but_warned_about() -> None:
    settings, problems = parse({"ttl": "10s"})
    assert not problems.items
    assert settings is not None and settings.ttl_ms == 10_000
    assert problems.warnings and problems.warnings[0].startswith(f"{WHERE}.ttl")


def test_max_bytes_leaves_room_for_the_entry_header_in_a_kv_value() -> None:
    _, problems = parse({"ttl": "5m", "max_bytes": 25 * 1024 * 1024 - 64 * 1024})
    assert not problems.items
    _, problems = parse({"ttl": "5m", "max_bytes": 25 * 1024 * 1024})
    assert problems.items


def test_stale_while_revalidate_is_a_duration() -> None:
    settings, problems = parse({"ttl": "5m", "stale_while_revalidate": "30s"})
    assert settings is not None and not problems.items
    assert settings.stale_while_revalidate_ms == 30_000
    default, _ = parse({"ttl": "5m"})
    assert default is not None and default.stale_while_revalidate_ms == 0
