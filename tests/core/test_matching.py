"""Path and host patterns."""

from __future__ import annotations

import pytest

from edge_limiter.core.errors import PatternError
from edge_limiter.core.matching import (
    PathPattern,
    host_covers,
    host_matches,
    parse_host_pattern,
)


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


@pytest.mark.parametrize(
    "bad", ["", "v1", "/a//b", "/a/{x}/{x}", "/a/b*", "/a/{1x}", "/a/{x", "/a/%2f", "/a/..", "/a/."]
)
def test_bad_path_patterns(bad: str) -> None:
    with pytest.raises(PatternError):
        PathPattern.parse(bad)


def test_literals_are_canonical_too() -> None:
    assert PathPattern.parse("/v1/%6cogin").match("/v1/login") == {}
    assert PathPattern.parse("/caf\u00e9").match("/caf%C3%A9") == {}


def test_case_insensitive_patterns_fold_literals_and_parameters() -> None:
    pattern = PathPattern.parse("/V1/Login", case_insensitive=True)
    assert pattern.match_segments(["v1", "login"]) == {}
    tenant = PathPattern.parse("/t/{tenant}/*", case_insensitive=True)
    assert tenant.match_segments(["t", "acme", "x"]) == {"tenant": "acme"}
    assert PathPattern.parse("/V1/Login").match("/v1/login") is None


@pytest.mark.parametrize(
    ("earlier", "later", "covered"),
    [
        ("*", "/anything", True),
        ("/v1/*", "/v1/login", True),
        ("/v1/*", "/v1", True),
        ("/v1/*", "/v1/*", True),
        ("/v1/*", "/v1/{id}/x", True),
        ("/v1/login", "/v1/*", False),
        ("/v1/{id}", "/v1/login", True),
        ("/v1/{id}", "/v1/{other}", True),
        ("/v1/login", "/v1/{id}", False),
        ("/v1/a/*", "/v1/*", False),
        ("/v1/*/x", "/v1/a/x", True),
        ("/v1/*/x", "/v1/a/y", False),
        ("/v1/login", "/v1/login/extra", False),
    ],
)
def test_coverage(earlier: str, later: str, covered: bool) -> None:
    assert PathPattern.parse(earlier).covers(PathPattern.parse(later)) is covered


def test_coverage_with_case_folding() -> None:
    folded = PathPattern.parse("/v1/login", case_insensitive=True)
    exact = PathPattern.parse("/v1/login")
    assert folded.covers(exact)
    assert not exact.covers(folded)  # /V1/LOGIN reaches the folded route only


def test_hosts() -> None:
    assert host_matches(parse_host_pattern("API.example.com"), "api.example.com:443")
    assert parse_host_pattern("api.example.com.") == "api.example.com"
    assert host_covers(None, "api.example.com") and host_covers("*.example.com", "a.example.com")
    assert not host_covers("api.example.com", None)
    assert not host_covers("*.example.com", "example.com")
    wild = parse_host_pattern("*.example.com")
    assert host_matches(wild, "a.b.example.com")
    assert not host_matches(wild, "example.com")
    assert not host_matches(wild, "badexample.com")
    for bad in ["", "https://x", "a/b", "*", "x.*.com", "api.example.com:443", "a b.com", "a..b"]:
        with pytest.raises(PatternError):
            parse_host_pattern(bad)


def test_an_internationalised_host_is_matched_in_the_ascii_form_clients_send() -> None:
    assert parse_host_pattern("Bücher.example.") == "xn--bcher-kva.example"
    assert parse_host_pattern("*.bücher.example") == "*.xn--bcher-kva.example"
    assert host_matches(parse_host_pattern("bücher.example"), "xn--bcher-kva.example:8443")
    # A control or format character is in no host name (IDNA refuses it): a
    # right-to-left override, a zero-width space, a no-break space.
    for bad in ("\u202e.example", "a\u200bb.example", "a\u00a0b.example"):
        with pytest.raises(PatternError):
            parse_host_pattern(bad)


def test_a_host_with_a_port_says_ports_are_not_matched() -> None:
    with pytest.raises(PatternError, match="a port is not part of the match"):
        parse_host_pattern("api.example.com:443")
