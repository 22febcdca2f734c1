"""The pools parser: what it accepts, its defaults, and problems that name pool, origin and field."""

from __future__ import annotations

import tomllib

import pytest

from edge_limiter.core.config import parse_config
from edge_limiter.core.config.pools import parse_pools
from edge_limiter.core.errors import ConfigError
from edge_limiter.core.resilience.breaker import BreakerSettings
from edge_limiter.core.resilience.retry import RetrySettings
from edge_limiter.core.routing.origins import (
    COUNTRIES,
    HealthCheck,
    Origin,
    Pool,
)
from edge_limiter.core.validation import Problems

EXAMPLE = """
[pools.api]
breaker = { failure_rate = 40 }
retry = { attempts = 2 }

[[pools.api.origins]]
name = "eu"
url = "https://eu.api.example.com/"
continents = ["EU"]
countries = ["gb", "CH"]
lat = 50.11
lon = 8.68
priority = 1
timeout = "5s"
max_in_flight = 50
health = { path = "/health", timeout = "2s", unhealthy_after = 3 }

[[pools.api.origins]]
name = "us"
url = "http://us.api.example.com:8080/v1"

[pools.static]
[[pools.static.origins]]
name = "cdn"
url = "https://static.example.com"
"""


def parse(raw: object) -> tuple[dict[str, Pool], list[str]]:
    problems = Problems()
    pools = parse_pools(raw, problems)
    return pools, problems.items


def one_origin(**fields: object) -> dict[str, object]:
    origin: dict[str, object] = {"name": "o", "url": "https://o.example.com"}
    origin.update(fields)
    return {"api": {"origins": [origin]}}


def only_problem(raw: object) -> str:
    _, problems = parse(raw)
    assert len(problems) == 1, problems
    return problems[0]


def test_the_example_parses() -> None:
    pools, problems = parse(tomllib.loads(EXAMPLE)["pools"])
    assert problems == []
    assert list(pools) == ["api", "static"]
    api = pools["api"]
    assert api.breaker == BreakerSettings(failure_rate=40)
    assert api.retry == RetrySettings(attempts=2)
    eu, us = api.origins
    assert eu == Origin(
        name="eu",
        url="https://eu.api.example.com",
        countries=("CH", "GB"),
        continents=("EU",),
        latitude=50.11,
        longitude=8.68,
        priority=1,
        timeout_ms=5_000,
        max_in_flight=50,
        health=HealthCheck("/health", 2_000, (), 3),
    )
    assert us == Origin("us", "http://us.api.example.com:8080/v1")
    assert pools["static"].origins == (Origin("cdn", "https://static.example.com"),)
    assert pools["static"].breaker == BreakerSettings()


def test_defaults() -> None:
    origin = Origin("o", "https://o.example.com")
    assert (origin.priority, origin.timeout_ms, origin.max_in_flight) == (0, 10_000, 100)
    assert (origin.countries, origin.continents, origin.health) == ((), (), None)
    assert (origin.latitude, origin.longitude) == (None, None)


def test_no_pools_is_fine() -> None:
    assert parse(None) == ({}, [])
    assert parse({}) == ({}, [])


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        ("https://a.example.com", "https://a.example.com"),
        ("https://a.example.com/", "https://a.example.com"),
        ("https://a.example.com/api//", "https://a.example.com/api"),
        ("http://127.0.0.1:8787", "http://127.0.0.1:8787"),
        ("https://[::1]:443/x", "https://[::1]:443/x"),
        ("HTTPS://A.example.com", "HTTPS://A.example.com"),
        ("http://my_service:8080/base", "http://my_service:8080/base"),
        ("https://bücher.example", "https://bücher.example"),
    ],
)
def test_urls_are_kept_without_the_trailing_slash(url: str, normalized: str) -> None:
    pools, problems = parse(one_origin(url=url))
    assert problems == []
    assert pools["api"].origins[0].url == normalized


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        (None, "http(s) URL"),
        ("", "http(s) URL"),
        (42, "http(s) URL"),
        ("ftp://a.example.com", "http(s) URL"),
        ("a.example.com", "http(s) URL"),
        ("https://", "http(s) URL"),
        ("https:///path", "http(s) URL"),
        ("https://a.example.com/?x=1", "query or fragment"),
        ("https://a.example.com?", "query or fragment"),
        ("https://a.example.com/#top", "query or fragment"),
        ("https://user:pw@a.example.com", "credentials"),
        ("https://a.example.com:99999", "invalid port"),
        ("https://a.example.com:http", "invalid port"),
        ("https://a.example .com", "whitespace"),
        ("https://a.example.com/\n", "whitespace"),
        # The runtime's URL parser reads '\\' as '/': another host and a hidden path.
        ("https://a.example\\x", "fetch reads as '/'"),
        ("http://127.0.0.1:9821\\base", "fetch reads as '/'"),
        ("https://$HOST", "origin_headers only"),
        ("https://a^b.example", "not a domain name"),
    ],
)
def test_bad_urls(url: object, fragment: str) -> None:
    raw = one_origin(url=url)
    pools, problems = parse(raw)
    assert len(problems) == 1, problems
    assert problems[0].startswith("pool 'api'.origins[0].url: ")
    assert fragment in problems[0]
    assert pools == {}  # the only origin was unusable, so the pool is too


@pytest.mark.parametrize(
    ("fields", "where", "fragment"),
    [
        ({"name": None}, "name", "is required"),
        ({"name": "has space"}, "name", "must be letters"),
        ({"name": "-dash"}, "name", "must be letters"),
        ({"name": "x" * 65}, "name", "must be letters"),
        ({"countries": ["UK"]}, "countries", "did you mean 'GB'"),
        ({"countries": ["ZZ"]}, "countries", "ISO 3166-1 alpha-2"),
        ({"countries": [1]}, "countries", "ISO 3166-1 alpha-2"),
        ({"countries": {"GB": True}}, "countries", "must be a list"),
        ({"continents": ["Europe"]}, "continents", "AF, AN, AS, EU, NA, OC, SA"),
        ({"lat": 91, "lon": 0}, "lat", "-90..90"),
        ({"lat": 0, "lon": -180.5}, "lon", "-180..180"),
        ({"lat": "50", "lon": 8}, "lat", "-90..90"),
        ({"lat": True, "lon": 8}, "lat", "-90..90"),
        ({"lat": float("nan"), "lon": 8}, "lat", "-90..90"),
        ({"lat": 50}, "lon", "both or neither"),
        ({"lon": 8}, "lat", "both or neither"),
        ({"priority": 1.5}, "priority", "integer"),
        ({"priority": 10**7}, "priority", "integer"),
        ({"timeout": "0ms"}, "timeout", "shorter"),
        ({"timeout": "10m"}, "timeout", "longer"),
        ({"timeout": 5}, "timeout", "duration"),
        ({"max_in_flight": 0}, "max_in_flight", "1..100000"),
        ({"health": "yes"}, "health", "must be a table"),
        ({"health": {"timeout": "3s"}}, "health.path", "is required"),
        ({"health": {"path": "health"}}, "health.path", "must be a path like"),
        ({"health": {"path": "/h", "interval": "1m"}}, "health.interval", "unknown field"),
        ({"health": {"path": "/h", "timeout": "2m"}}, "health.timeout", "longer"),
        ({"health": {"path": "/h", "unhealthy_after": 0}}, "health.unhealthy_after", "1..100"),
        ({"health": {"path": "/h", "statuses": []}}, "health.statuses", "non-empty"),
        ({"health": {"path": "/h", "statuses": [700]}}, "health.statuses", "100..599"),
        ({"health": {"path": "/h", "method": "HEAD"}}, "health.method", "unknown field"),
        ({"weight": 3}, "weight", "unknown field"),
    ],
)
def test_origin_problems_name_pool_index_and_field(
    fields: dict[str, object], where: str, fragment: str
) -> None:
    problem = only_problem(one_origin(**fields))
    assert problem.startswith(f"pool 'api'.origins[0].{where}: "), problem
    assert fragment in problem


def test_a_bad_optional_field_falls_back_to_its_default() -> None:
    pools, problems = parse(one_origin(priority="high", timeout="soon", lat=50))
    assert len(problems) == 3
    origin = pools["api"].origins[0]
    assert (origin.priority, origin.timeout_ms) == (0, 10_000)
    assert (origin.latitude, origin.longitude) == (None, None)


def test_codes_are_upper_cased_sorted_and_a_single_string_is_accepted() -> None:
    pools, problems = parse(one_origin(countries="ch", continents=["na", "EU"]))
    assert problems == []
    origin = pools["api"].origins[0]
    assert (origin.countries, origin.continents) == (("CH",), ("EU", "NA"))


def test_a_code_listed_twice_is_a_warning() -> None:
    problems = Problems()
    pools = parse_pools(one_origin(countries=["GB", "gb"]), problems)
    assert problems.items == []
    assert problems.warnings[0] == "pool 'api'.origins[0].countries: 'gb' is listed twice"
    assert "has no effect" in problems.warnings[1]  # one origin: nothing to order
    assert pools["api"].origins[0].countries == ("GB",)


def test_the_country_table_is_iso_3166() -> None:
    assert len(COUNTRIES) == 249 + 1  # every assigned code, plus XK
    assert {"GB", "US", "CH", "JP", "XK", "SS", "AX"} <= COUNTRIES
    assert not {"UK", "EU", "XX", "T1", "EL"} & COUNTRIES


def test_health_defaults_and_statuses() -> None:
    pools, problems = parse(one_origin(health={"path": "/up", "statuses": [204, 200, 204]}))
    assert problems == []
    health = pools["api"].origins[0].health
    assert health == HealthCheck("/up", 2_000, (200, 204), 2)
    assert health.healthy(204)
    assert not health.healthy(201)
    assert HealthCheck("/up").healthy(299)
    assert not HealthCheck("/up").healthy(301)


def test_origin_names_are_unique_across_pools() -> None:
    raw = {
        "a": {"origins": [{"name": "x", "url": "https://x1.example.com"}]},
        "b": {
            "origins": [
                {"name": "y", "url": "https://y.example.com"},
                {"name": "x", "url": "https://x2.example.com"},
            ]
        },
    }
    pools, problems = parse(raw)
    assert problems == [
        "pool 'b'.origins[1].name: 'x' is already the name of pool 'a'.origins[0]; origin names "
        "must be unique across all pools (they key the breaker state)"
    ]
    assert [o.name for o in pools["b"].origins] == ["y"]


def test_pool_problems() -> None:
    _, problems = parse(
        {
            "empty": {"origins": []},
            "missing": {},
            "wrong": {"origins": {"name": "x"}},
            "scalar": "https://x.example.com",
            "bad name!": {"origins": [{"name": "n", "url": "https://n.example.com"}]},
            "extra": {
                "origins": [{"name": "e", "url": "https://e.example.com"}],
                "breaker": {"failure_rate": 0},
                "retry": {"attempts": 0},
                "weights": [1],
            },
        }
    )
    assert [p.split(":")[0] for p in problems] == [
        "pool 'empty'.origins",
        "pool 'missing'.origins",
        "pool 'wrong'.origins",
        "pool 'scalar'",
        "pool 'bad name!'",
        "pool 'extra'.weights",
        "pool 'extra'.breaker.failure_rate",
        "pool 'extra'.retry.attempts",
    ]
    assert "at least one origin" in problems[0]
    assert "must be a table" in problems[3]


def test_pools_must_be_a_table() -> None:
    assert parse([]) == ({}, ["pools: must be a table, got []"])


def test_an_origin_that_is_not_a_table() -> None:
    problem = only_problem({"api": {"origins": ["https://x.example.com"]}})
    assert problem.startswith("pool 'api'.origins[0]: must be a table")


def test_every_problem_of_one_origin_is_reported_at_once() -> None:
    _, problems = parse(one_origin(name="bad name", url="ftp://x", lat=100, lon=0, priority=""))
    assert [p.split(":")[0] for p in problems] == [
        "pool 'api'.origins[0].name",
        "pool 'api'.origins[0].url",
        "pool 'api'.origins[0].lat",
        "pool 'api'.origins[0].priority",
    ]


def test_a_broken_pool_is_reported_once_not_again_by_its_routes() -> None:
    raw = {
        "pool": "q",
        "pools": {
            "p": {
                "origins": [{"name": "a", "url": "https://a.test"}],
                "retry": {"base": "5s", "cap": "1s"},
            },
            "q": {"origins": [{"name": "a", "url": "https://b.test"}]},  # a taken name
        },
        "routes": [
            {"name": "one", "match": {"path": "/1"}, "limits": "5/s", "pool": "q"},
            {"name": "two", "match": {"path": "/2"}, "limits": "5/s"},
            {"name": "three", "match": {"path": "/3"}, "limits": "5/s", "pool": "nope"},
        ],
    }
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    problems = info.value.problems
    assert any("pool 'q'.origins[0].name" in p for p in problems)
    assert any("pool 'p'.retry.cap: must be at least base (5s)" in p for p in problems)
    # Not echoed by the routes that name the broken pool (or inherit it)...
    assert not any("no origin to forward to" in p for p in problems)
    assert not any("'q'" in p and "names no pool" in p for p in problems)
    # ...while a pool that is written nowhere still is.
    assert any("route 'three'.pool: names no pool" in p for p in problems)


def test_a_pool_origin_may_not_take_the_name_a_plain_origin_is_given() -> None:
    # A probe's finding: clients (X-Origin) and the admin API call the one plain origin
    # "origin"; a pool origin of that name was accepted, and forcing "origin" forced the
    # plain one.
    raw = {
        "origin": "https://plain.test",
        "pools": {"p": {"origins": [{"name": "origin", "url": "https://a.test"}]}},
        "routes": [
            {"name": "one", "match": {"path": "/1"}, "limits": "5/s", "pool": "p"},
            {"name": "two", "match": {"path": "/2"}, "limits": "5/s"},
        ],
    }
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    (problem,) = info.value.problems
    assert "a pool's origin is named 'origin'" in problem
    # Without a plain origin, the name is the pool origin's own.
    del raw["origin"]
    raw["routes"] = raw["routes"][:1]
    parse_config(raw)


def test_a_trial_timeout_outlasts_every_attempt_at_the_pools_origins() -> None:
    # A probe's finding: with trial_timeout under an origin's timeout, a trial still
    # waiting for its answer was taken for lost and another sent beside it (4 at once
    # where half_open_calls = 1).
    pools, problems = parse(one_origin(timeout="45s"))
    assert problems == []
    assert pools["api"].breaker.trial_timeout_ms == 46_000  # the default grew past it
    assert parse(one_origin())[0]["api"].breaker.trial_timeout_ms == 30_000
    short = one_origin(timeout="12s")
    short["api"]["breaker"] = {"trial_timeout": "3s"}  # type: ignore[index]
    said = only_problem(short)
    assert "pool 'api'.breaker.trial_timeout" in said and "12000 ms" in said
    # A plain origin URL's attempts last the route's timeout.
    slow = parse_config(
        {
            "origin": "https://o.example.com",
            "routes": [{"name": "r", "match": {"path": "/x"}, "limits": "1/s", "timeout": "60s"}],
        }
    )
    assert slow.routes[0].forward.pool.breaker.trial_timeout_ms == 61_000
