"""CORS for the gateway's own answers: the config table and the field values."""

from __future__ import annotations

import pytest

from edge_limiter.core.config.top import parse_cors
from edge_limiter.core.http.cors import (
    EXPOSED,
    CorsSettings,
    exposed,
    with_vary_origin,
)
from edge_limiter.core.validation import Problems


def parse(raw: object) -> tuple[CorsSettings | None, list[str]]:
    problems = Problems()
    return parse_cors(raw, problems), problems.items


def test_absent_means_no_cors() -> None:
    assert parse(None) == (None, [])


def test_origins_and_credentials() -> None:
    settings, problems = parse(
        {
            "allow_origins": ["https://App.example.com", "http://localhost:3000"],
            "allow_credentials": True,
        }
    )
    assert problems == [] and settings is not None
    assert settings.allow_origins == {"https://app.example.com", "http://localhost:3000"}
    assert settings.allowed("https://app.example.com") == "https://app.example.com"
    assert settings.allowed("http://localhost:3000") == "http://localhost:3000"
    assert settings.allowed("https://evil.example") is None
    assert settings.allowed("null") is None
    anyone, _ = parse({"allow_origins": ["*"]})
    assert anyone is not None and anyone.allowed("https://x.test") == "*"


def test_a_wildcard_allows_subdomains_with_the_same_scheme_and_port() -> None:
    settings, problems = parse(
        {"allow_origins": ["https://*.preview.example.com", "http://*.local.test:8080"]}
    )
    assert problems == [] and settings is not None
    for origin in (
        "https://a.preview.example.com",
        "https://x.y.preview.example.com",
        "http://a.local.test:8080",
    ):
        assert settings.allowed(origin) == origin
    for origin in (
        "https://preview.example.com",  # the domain itself
        "http://a.preview.example.com",  # another scheme
        "https://a.preview.example.com:8443",  # another port
        "https://evilpreview.example.com",
        "https://a.preview.example.com.evil.test",
        "http://a.local.test",
        "http://a.local.test:80800",
    ):
        assert settings.allowed(origin) is None, origin


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"allow_origins": []}, "config.cors.allow_origins"),
        ({"allow_origins": "https://a.test"}, "config.cors.allow_origins"),
        ({"allow_origins": ["https://a.test/path"]}, "config.cors.allow_origins[0]"),
        ({"allow_origins": ["a.test"]}, "config.cors.allow_origins[0]"),
        ({"allow_origins": ["https://u@a.test"]}, "config.cors.allow_origins[0]"),
        ({"allow_origins": ["https://a.*.test"]}, "config.cors.allow_origins[0]"),
        ({"allow_origins": ["https://*.com"]}, "config.cors.allow_origins[0]"),
        ({"allow_origins": ["https://*.*.example.com"]}, "config.cors.allow_origins[0]"),
        ({"allow_origins": [1]}, "config.cors.allow_origins[0]"),
        ({"allow_origins": ["*"], "allow_credentials": True}, "config.cors.allow_credentials"),
        ({"allow_origins": ["*"], "allow_credentials": "yes"}, "config.cors.allow_credentials"),
        ({"allow_origins": ["*"], "origins": ["*"]}, "config.cors.origins"),
        ("*", "config.cors"),
    ],
)
def test_problems_name_their_field(raw: object, field: str) -> None:
    _, problems = parse(raw)
    assert problems and problems[0].startswith(field), problems


def test_exposed_adds_the_gateway_fields_once() -> None:
    assert exposed(None, False) == ", ".join(EXPOSED)
    assert exposed("ETag, ratelimit", False) == ", ".join(
        ["ETag", "ratelimit", *(name for name in EXPOSED if name != "RateLimit")]
    )
    assert exposed(", ".join(EXPOSED), False) is None
    assert exposed("*", False) is None  # every field already
    assert exposed("*", True) == ", ".join(["*", *EXPOSED])  # with credentials "*" is a name


def test_vary_names_origin_once() -> None:
    assert with_vary_origin(None) == "Origin"
    assert with_vary_origin("Accept-Encoding") == "Accept-Encoding, Origin"
    assert with_vary_origin("accept-encoding, origin") is None
    assert with_vary_origin("*") is None
