"""origin_headers: fields set on every request to an origin, secrets read at run time."""

from __future__ import annotations

import pytest

from edge_limiter.core.config import parse_config
from edge_limiter.core.errors import ConfigError
from edge_limiter.core.http.origin_headers import (
    OriginHeader,
    merged,
    parse_origin_headers,
    resolve_origin_headers,
)
from edge_limiter.core.validation import Problems


def parsed(raw: object) -> tuple[tuple[OriginHeader, ...], Problems]:
    problems = Problems()
    return parse_origin_headers(raw, problems), problems


def test_literal_secret_and_escaped_dollar_values() -> None:
    headers, problems = parsed(
        {"X-Gateway-Key": "$GATEWAY_KEY", "X-Via": "edge-limiter", "X-Price": "$$5"}
    )
    assert not problems.items
    assert headers == (
        OriginHeader("x-gateway-key", secret="GATEWAY_KEY"),
        OriginHeader("x-via", value="edge-limiter"),
        OriginHeader("x-price", value="$5"),
    )
    assert [h.describe() for h in headers] == [
        "$GATEWAY_KEY",
        "(a literal value)",
        "(a literal value)",
    ]


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ({"Host": "a.test"}, "owns"),
        ({"Transfer-Encoding": "chunked"}, "owns"),
        ({"CF-Connecting-IP": "1.2.3.4"}, "owns"),
        ({"Content-Length": "1"}, "owns"),
        ({"bad name": "x"}, "not a field name"),
        ({"X-A": ""}, "must be a value"),
        ({"X-A": 5}, "must be a value"),
        ({"X-A": "$9lives"}, "secret's name"),
        ({"X-A": "a\r\nX-Injected: 1"}, "one line"),
        ("X-A: 1", "must be a table"),
    ],
)
def test_what_no_origin_header_may_be(raw: object, said: str) -> None:
    headers, problems = parsed(raw)
    assert headers == ()
    assert any(said in problem for problem in problems.items), problems.items


def test_a_name_twice_is_a_problem_and_a_clients_own_field_a_warning() -> None:
    headers, problems = parsed({"X-A": "1", "x-a": "2"})
    assert headers == (OriginHeader("x-a", value="1"),)
    assert problems.items == [
        "config.origin_headers.x-a: is named twice (field names are not case-sensitive)"
    ]
    _, problems = parsed({"Authorization": "$ORIGIN_TOKEN"})
    assert any("the origin will never see the client's own" in w for w in problems.warnings)


def test_a_literal_that_looks_like_a_secret_is_warned_about() -> None:
    headers, problems = parsed({"X-Api-Key": "hunter2"})
    assert headers and not problems.items
    assert any("wrangler secret put" in warning for warning in problems.warnings)


def test_secrets_are_read_at_run_time_and_a_missing_one_says_how_to_set_it() -> None:
    headers, _ = parsed({"X-Gateway-Key": "$GATEWAY_KEY", "X-Via": "gw", "X-Other": "$OTHER"})
    secrets = {"GATEWAY_KEY": "s3cret"}
    with pytest.raises(ConfigError) as info:
        resolve_origin_headers(headers, secrets.get)
    [problem] = info.value.problems
    assert "OTHER is not set" in problem and "npx wrangler secret put OTHER" in problem
    secrets["OTHER"] = "x"
    assert resolve_origin_headers(headers, secrets.get) == (
        ("x-gateway-key", "s3cret"),
        ("x-via", "gw"),
        ("x-other", "x"),
    )
    with pytest.raises(ConfigError, match="not printable"):
        resolve_origin_headers(headers, {"GATEWAY_KEY": "a\nb", "OTHER": "x"}.get)


def test_the_client_ip_field_cannot_also_be_an_origin_header() -> None:
    raw = {
        "origin": "https://api.example.com",
        "client_ip_header": "X-Real-IP",
        "origin_headers": {"X-Real-IP": "1.2.3.4"},
        "routes": [{"name": "a", "match": {"path": "/a"}, "limits": "5/s"}],
    }
    with pytest.raises(ConfigError, match="client_ip_header's field"):
        parse_config(raw)


def test_forwarded_hosts_fields_cannot_also_be_origin_headers() -> None:
    raw = {
        "origin": "https://api.example.com",
        "origin_headers": {"X-Forwarded-Host": "api.example.com"},
        "routes": [{"name": "a", "match": {"path": "/a"}, "limits": "5/s"}],
    }
    assert parse_config(raw).forwarded_host is False  # without it, a literal is fine
    with pytest.raises(ConfigError, match="x-forwarded-host: is set by forwarded_host"):
        parse_config({**raw, "forwarded_host": True})


def test_a_pools_headers_are_checked_like_the_top_levels() -> None:
    raw = {
        "pools": {
            "p": {
                "origins": [{"name": "a", "url": "https://a.test"}],
                "headers": {"Host": "a.test", "X-Ok": "$OK_SECRET"},
            }
        },
        "pool": "p",
        "routes": [{"name": "r", "match": {"path": "/a"}, "limits": "5/s"}],
    }
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.problems == [
        "pool 'p'.headers.Host: is a field the runtime or the message framing owns"
    ]
    raw["pools"]["p"]["headers"] = {"X-Ok": "$OK_SECRET"}  # type: ignore[index]
    [pool] = {r.forward.pool.name: r.forward.pool for r in parse_config(raw).routes}.values()
    assert pool.headers == (OriginHeader("x-ok", secret="OK_SECRET", where="pool 'p'.headers"),)


def test_merged_keeps_the_top_level_but_where_the_pool_names_the_field() -> None:
    top = (OriginHeader("x-a", value="1"), OriginHeader("x-b", value="2"))
    own = (OriginHeader("x-b", value="3", where="pool 'p'.headers"),)
    assert merged(top, own) == (top[0], own[0])
