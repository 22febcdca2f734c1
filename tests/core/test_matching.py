"""Path and host patterns."""

from __future__ import annotations

import pytest

from edge_limiter.core.errors import PatternError
from edge_limiter.core.matching import PathPattern, host_matches, parse_host_pattern


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("/v1/login", "/v1/login", {}),
        ("/v1/login", "/v1/login/", {}),
        ("/v1/login", "/v1/logins", None),
        ("/v1/login", "/V1/login", None),
        ("/v1/*", "/v1", {}),
        ("/v1/*", "/v1/a/b/c", {}),
        ("/v1/*", "/v2/a", None),
        ("/v1/*/items", "/v1/x/items", {}),
        ("/v1/*/items", "/v1/x/y/items", None),
        ("/users/{id}", "/users/42", {"id": "42"}),
        ("/users/{id}", "/users/", None),
        ("/users/{id}", "/users/42/posts", None),
        ("/t/{tenant}/*", "/t/acme/a/b", {"tenant": "acme"}),
        ("*", "/anything/at/all", {}),
    ],
)
def test_path_patterns(pattern: str, path: str, expected: dict[str, str] | None) -> None:
    assert PathPattern.parse(pattern).match(path) == expected


@pytest.mark.parametrize("bad", ["", "v1", "/a//b", "/a/{x}/{x}", "/a/b*", "/a/{1x}", "/a/{x"])
def test_bad_path_patterns(bad: str) -> None:
    with pytest.raises(PatternError):
        PathPattern.parse(bad)


def test_hosts() -> None:
    assert host_matches(parse_host_pattern("API.example.com"), "api.example.com:443")
    wild = parse_host_pattern("*.example.com")
    assert host_matches(wild, "a.b.example.com")
    assert not host_matches(wild, "example.com")
    assert not host_matches(wild, "badexample.com")
    for bad in ["", "https://x", "a/b", "*", "x.*.com"]:
        with pytest.raises(PatternError):
            parse_host_pattern(bad)
