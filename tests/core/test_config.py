"""The strict config parser: what it accepts, and one error naming every problem."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from edge_limiter.core.config import parse_config
from edge_limiter.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def route(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {"name": "r", "match": {"path": "/v1/*"}, "limits": "10/second"}
    base.update(fields)
    return base


def config(*routes: dict[str, object], **top: object) -> dict[str, object]:
    return {"origin": "https://api.example.com", "routes": list(routes), **top}


def problems_of(raw: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return info.value.problems


def test_example_config_in_wrangler_toml_is_valid() -> None:
    data = tomllib.loads((ROOT / "wrangler.toml").read_text())
    parsed = parse_config(data["vars"]["EDGE_LIMITER"])
    assert [r.name for r in parsed.routes] == [
        "login",
        "search",
        "tenant-api",
        "reports",
        "catalog",
        "api",
    ]
    login = parsed.routes[0]
    assert login.algorithm == "sliding_log"
    assert not login.fail_open
    assert [(r.quota, r.window_ms) for r in login.rates] == [(5, 60_000), (20, 3_600_000)]


def test_defaults() -> None:
    parsed = parse_config(config(route()))
    (r,) = parsed.routes
    assert r.algorithm == "sliding_window"
    assert r.cost == 1
    assert r.shadow is False
    assert r.fail_open is True
    assert [str(p) for p in r.key.parts] == ["ip"]
    assert r.key.ipv6_prefix == 64
    assert r.methods is None
    assert parsed.store_timeout_ms == 1000


def test_first_matching_route_wins_and_unmatched_is_none() -> None:
    parsed = parse_config(
        config(
            route(name="login", match={"methods": ["POST"], "path": "/v1/login"}),
            route(name="all", match={"path": "/v1/*"}),
        )
    )
    assert parsed.match("POST", "h", "/v1/login")[0].name == "login"  # type: ignore[index]
    assert parsed.match("GET", "h", "/v1/login")[0].name == "all"  # type: ignore[index]
    assert parsed.match("GET", "h", "/v2/x") is None


def test_host_and_path_params() -> None:
    parsed = parse_config(
        config(route(match={"path": "/t/{tenant}/items/{id}", "host": "*.example.com"}))
    )
    matched = parsed.match("GET", "api.example.com", "/t/acme/items/42")
    assert matched is not None
    assert matched[1] == {"tenant": "acme", "id": "42"}
    assert parsed.match("GET", "example.com", "/t/acme/items/42") is None


def test_limits_as_list_with_names() -> None:
    parsed = parse_config(
        config(route(limits=[{"rate": "10/second", "name": "burst"}, "1000/day"]))
    )
    assert [r.name for r in parsed.routes[0].rates] == ["burst", "1000-per-day"]


def test_one_error_lists_every_problem_with_route_and_field() -> None:
    problems = problems_of(
        config(
            route(name="a", limits="10/fortnight", algorithm="leaky"),
            route(name="b", cost=0, shadow="yes", on_store_error="maybe", key="header:"),
            route(name="c", match={"path": "no-slash", "methods": ["FETCH"]}, burst=5),
        )
    )
    text = "\n".join(problems)
    assert "route 'a'.limits" in text and "'10/fortnight'" in text
    assert "route 'a'.algorithm" in text and "'leaky'" in text
    assert "route 'b'.cost" in text
    assert "route 'b'.shadow" in text
    assert "route 'b'.on_store_error" in text
    assert "route 'b'.key" in text
    assert "route 'c'.match.path" in text
    assert "route 'c'.match.methods" in text
    assert "route 'c'.burst" in text  # burst on the default sliding_window
    assert len(problems) == 9


def test_error_message_is_readable() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config(route(limits="ten per second")))
    message = str(info.value)
    assert message.startswith("invalid edge-limiter config (1 problem):")
    assert "route 'r'.limits" in message
    assert "'ten per second'" in message


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ([], "must be a table"),
        ({"routes": [], "colour": "red"}, "config.colour: unknown field"),
        ({"routes": [], "store_timeout_ms": 0}, "config.store_timeout_ms"),
        ({"routes": [], "origin": "ftp://x"}, "config.origin"),
        ({"routes": "nope"}, "config.routes"),
        ({"routes": [route()]}, "no origin to forward to"),
        (config(route(), route()), "names must be unique"),
        (config(route(name="bad name")), "routes[0].name"),
        (config(route(name="a:b")), "routes[0].name"),
        (config(route(extra=1)), "route 'r'.extra: unknown field"),
        (config(route(match=None)), "route 'r'.match: is required"),
        (config(route(match={"path": "/x", "verb": "GET"})), "route 'r'.match.verb"),
        (config(route(match={"path": "/x", "host": "https://x"})), "route 'r'.match.host"),
        (config(route(limits="10/s; 20/second")), "same window"),
        (
            config(route(limits=[{"rate": "1/s", "name": "a"}, {"rate": "2/m", "name": "a"}])),
            "unique",
        ),
        (config(route(limits="5/second", cost=6)), "exceeds the smallest limit"),
        (config(route(algorithm="gcra", burst=2, cost=3)), "exceeds the smallest limit"),
        (config(route(algorithm="sliding_log", limits="20000/day")), "sliding_log"),
        (config(route(key=["ip", "ip"])), "same key part twice"),
        (config(route(key="colour")), "unknown key part"),
        (config(route(ipv6_prefix=129)), "route 'r'.ipv6_prefix"),
        (config(route(origin="not a url")), "route 'r'.origin"),
        (config(route(cost=True)), "route 'r'.cost"),
    ],
)
def test_invalid_configs(raw: object, fragment: str) -> None:
    assert any(fragment in p for p in problems_of(raw)), problems_of(raw)


def test_route_origin_overrides_default() -> None:
    parsed = parse_config({"routes": [route(origin="http://127.0.0.1:9000/")]})
    assert parsed.origin is None
    assert parsed.origin_for(parsed.routes[0]) == "http://127.0.0.1:9000"
