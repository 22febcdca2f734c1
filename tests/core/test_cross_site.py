"""Telling another page's request from the site's own by the fields browsers set."""

from __future__ import annotations

import pytest

from edge_limiter.core.http.cross_site import json_media_type, own_origin, refusal

OWN = "https://api.example.com"


@pytest.mark.parametrize(
    ("scheme", "authority", "origin"),
    [
        ("https", "api.example.com", "https://api.example.com"),
        ("HTTPS", "API.Example.com:443", "https://api.example.com"),
        ("http", "127.0.0.1:8787", "http://127.0.0.1:8787"),
        ("http", "127.0.0.1:80", "http://127.0.0.1"),
        ("https", "[::1]:8443", "https://[::1]:8443"),
        ("https", "api.example.com.", "https://api.example.com"),
    ],
)
def test_the_own_origin_is_written_as_a_browser_writes_origin(
    scheme: str, authority: str, origin: str
) -> None:
    assert own_origin(scheme, authority) == origin


@pytest.mark.parametrize("method", ["POST", "DELETE", "PUT", "PATCH", "OPTIONS", "post"])
@pytest.mark.parametrize(
    ("origin", "site", "mode"),
    [
        (None, None, None),  # no browser, or one that says nothing
        (OWN, None, None),
        ("https://API.example.com:443", None, None),
        (OWN, "same-origin", "cors"),
        (None, "none", "navigate"),  # typed by the user
        (None, " Same-Origin ", None),
    ],
)
def test_a_change_from_the_page_itself_or_no_page_is_let_through(
    method: str, origin: str | None, site: str | None, mode: str | None
) -> None:
    assert refusal(method, OWN, origin=origin, site=site, mode=mode, dest="empty") is None


@pytest.mark.parametrize("method", ["POST", "DELETE", "OPTIONS"])
@pytest.mark.parametrize(
    ("origin", "site", "mode", "said"),
    [
        (None, "cross-site", "navigate", "Sec-Fetch-Site: 'cross-site'"),
        (None, "same-site", "cors", "Sec-Fetch-Site: 'same-site'"),
        (None, "something-new", None, "something-new"),
        (None, "same-origin, cross-site", None, "Sec-Fetch-Site"),
        (OWN, "cross-site", "no-cors", "Sec-Fetch-Site"),
        ("null", None, None, "Origin: null"),
        ("NULL", "same-origin", None, "Origin: null"),
        ("https://evil.example", "same-origin", None, "'https://evil.example'"),
        ("http://api.example.com", None, None, "not from https://api.example.com"),
        ("https://api.example.com:8443", None, None, "8443"),
        ("https://api.example.com/", None, None, "page at"),
        ("https://user@api.example.com", None, None, "page at"),
        (f"{OWN}, https://evil.example", None, None, "page at"),
        ("", None, None, "page at"),
        ("x" * 500, None, None, "..."),
    ],
)
def test_a_change_another_page_asked_for_is_refused(
    method: str, origin: str | None, site: str | None, mode: str | None, said: str
) -> None:
    why = refusal(method, OWN, origin=origin, site=site, mode=mode, dest="document")
    assert why is not None and said in why
    assert len(why) < 300  # what a client sent is shown cut


def read(
    method: str,
    site: str | None,
    mode: str | None = None,
    dest: str | None = None,
    origin: str | None = None,
) -> str | None:
    return refusal(method, OWN, origin=origin, site=site, mode=mode, dest=dest)


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_read_may_be_a_top_level_navigation_from_anywhere_but_no_other_request(
    method: str,
) -> None:
    assert read(method, "cross-site", "navigate", "document") is None  # a link
    assert read(method, "same-site", "Navigate", "Document") is None
    assert read(method, "same-origin", "cors", "empty") is None  # the page's own fetch
    assert read(method, "same-origin", "navigate", "iframe") is None
    assert read(method, None) is None  # a CLI
    for mode, dest in [
        ("no-cors", "script"),
        ("no-cors", "image"),
        ("cors", "empty"),
        ("navigate", "iframe"),  # framed by another site's page
        ("navigate", "object"),
        ("navigate", None),
        (None, None),
        ("websocket", "websocket"),
    ]:
        why = read(method, "cross-site", mode, dest)
        assert why is not None and "only a top-level navigation" in why, (mode, dest)
    assert read(method, "cross-site", "cors", "empty", "https://evil.example") is not None
    assert read(method, None, origin="null") is not None


@pytest.mark.parametrize(
    ("content_type", "json"),
    [
        ("application/json", True),
        ("Application/JSON; charset=utf-8", True),
        ("  application/json  ;charset=UTF-8", True),
        (None, False),
        ("", False),
        ("text/plain", False),
        ("text/plain; charset=application/json", False),
        ("application/x-www-form-urlencoded", False),
        ("multipart/form-data; boundary=x", False),
        ("application/json, text/plain", False),
        ("text/plain, application/json", False),
        ("application/problem+json", False),
        ("text/json", False),
        ("application/json-seq", False),
    ],
)
def test_only_application_json_is_json(content_type: str | None, json: bool) -> None:
    assert json_media_type(content_type) is json
