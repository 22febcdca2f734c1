"""Canonical paths and hosts: one form per resource, so no spelling dodges a route."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.core.canonical import (
    canonical_host,
    canonical_path,
    decode_segment,
    runtime_path,
)
from edge_limiter.core.config import parse_config
from edge_limiter.core.errors import PathError
from edge_limiter.core.http.messages import Client, Request
from edge_limiter.core.keys import object_name
from tests.examples import examples


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("/", "/"),
        ("/v1/login", "/v1/login"),
        ("//v1/login", "/v1/login"),
        ("///v1//login", "/v1/login"),
        ("/v1/%6cogin", "/v1/login"),
        ("/v1/log%69n", "/v1/login"),
        ("/v1/%6C%6F%67%69%6E", "/v1/login"),
        ("/%7euser/a%2Db%5fc%2E", "/~user/a-b_c."),
        ("/v1/login/", "/v1/login/"),
        ("/v1/login//", "/v1/login/"),
        ("/a/./b/../c", "/a/c"),
        ("/a/b/..", "/a/"),
        ("/a/.", "/a/"),
        ("/a/%2e/b/%2E%2e/c", "/a/c"),
        ("/a/..", "/"),
        ("/caf%c3%a9", "/caf%C3%A9"),
        ("/caf\u00e9", "/caf%C3%A9"),
        ("/a b", "/a%20b"),
        ("/a%20b", "/a%20b"),
        ('/a|b^c[d]{e}`f"g<h>', "/a%7Cb%5Ec%5Bd%5D%7Be%7D%60f%22g%3Ch%3E"),
        ("/a!$&'()*+,;=:@", "/a!$&'()*+,;=:@"),
        ("/a%21%3b", "/a%21%3B"),  # encoded reserved characters stay encoded
        ("/a%25b", "/a%25b"),  # an encoded '%' stays one: no double decoding
        ("/v1/users;v=2/x", "/v1/users;v=2/x"),
    ],
)
def test_canonical_paths(raw: str, canonical: str) -> None:
    assert canonical_path(raw) == canonical


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("/v1/a%2fb", "encoded /"),
        ("/v1/a%2Fb", "encoded /"),
        ("/v1/a%5cb", "encoded \\\\"),
        ("/v1\\login", "backslash"),
        ("/v1/%00", "control"),
        ("/v1/%1f", "control"),
        ("/v1/%7F", "control"),
        ("/v1/\x00", "control"),
        ("/v1/\t", "control"),
        ("/v1/%zz", "invalid percent-encoding"),
        ("/v1/%4", "invalid percent-encoding"),
        ("/v1/%", "invalid percent-encoding"),
        ("/..", "above the root"),
        ("/a/../../b", "above the root"),
        ("/%2e%2e/etc", "above the root"),
        ("v1/login", "not an absolute path"),
        ("*", "not an absolute path"),
        ("", "not an absolute path"),
    ],
)
def test_paths_without_a_canonical_form_are_refused(raw: str, why: str) -> None:
    with pytest.raises(PathError, match=why):
        canonical_path(raw)


def test_matrix_parameters_kept_stripped_or_refused() -> None:
    assert canonical_path("/v1/login;jsessionid=x") == "/v1/login;jsessionid=x"
    assert canonical_path("/v1/login;jsessionid=x", "strip") == "/v1/login"
    assert canonical_path("/a;x/b;y/", "strip") == "/a/b/"
    assert canonical_path("/a;x/..;y/b", "strip") == "/b"
    assert canonical_path("/v1/login%3Bx", "strip") == "/v1/login%3Bx"  # encoded ';' is data
    with pytest.raises(PathError, match="';' parameters"):
        canonical_path("/v1/login;x", "reject")


@pytest.mark.parametrize(
    ("raw", "scheme", "canonical"),
    [
        ("API.Example.TEST", "https", "api.example.test"),
        ("api.example.test.", "https", "api.example.test"),
        ("api.example.test:443", "https", "api.example.test"),
        ("api.example.test:80", "http", "api.example.test"),
        ("api.example.test:8443", "https", "api.example.test:8443"),
        ("api.example.test.:443", "https", "api.example.test"),
        ("[::1]:443", "https", "[::1]"),
        ("[::1]:8080", "https", "[::1]:8080"),
    ],
)
def test_canonical_hosts(raw: str, scheme: str, canonical: str) -> None:
    assert canonical_host(raw, scheme) == canonical


# --- properties -----------------------------------------------------------------------------

UNRESERVED = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"
segment_text = st.text(alphabet=UNRESERVED + "!$&'()*+,=:@ %\u00e9/", min_size=1, max_size=8)


def respell(path: str, draw: st.DrawFn) -> str:
    """Another spelling of a canonical path: encoded unreserved characters (either hex
    case), doubled slashes, ``.`` and ``x/..`` segments."""
    out = []
    for segment in path.split("/")[1:]:
        chars = []
        i = 0
        while i < len(segment):
            if segment[i] == "%":
                code = segment[i + 1 : i + 3]
                chars.append("%" + (code.lower() if draw(st.booleans()) else code))
                i += 3
                continue
            ch = segment[i]
            if ch in UNRESERVED and draw(st.booleans()):
                code = f"{ord(ch):02X}"
                chars.append("%" + (code.lower() if draw(st.booleans()) else code))
            else:
                chars.append(ch)
            i += 1
        noise = draw(st.sampled_from(["", "/", "/./", "/x/../", "//"]))
        out.append(noise + "".join(chars))
    return "/" + "/".join(out)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(segment_text, min_size=1, max_size=5))
def test_canonicalizing_is_idempotent(segments: list[str]) -> None:
    raw = "/" + "/".join(segments)
    try:
        once = canonical_path(raw)
    except PathError:
        return
    assert canonical_path(once) == once


CONFIG = parse_config(
    {
        "origin": "https://origin.test",
        "routes": [
            {"name": "login", "match": {"path": "/v1/login", "methods": ["POST"]}, "limits": "3/h"},
            {
                "name": "tenant",
                "match": {"path": "/t/{tenant}/*"},
                "limits": "3/h",
                "key": "path:tenant",
            },
            {"name": "any", "match": {"path": "/v1/*"}, "limits": "3/h"},
        ],
    }
)


def route_and_counter(raw: str) -> tuple[str, str] | None:
    path = canonical_path(raw)
    matched = CONFIG.match("POST", "api.test", path)
    if matched is None:
        return None
    route, params = matched
    request = Request("POST", raw, client=Client(ip="192.0.2.1"))
    return route.name, object_name(route.name, route.limits.key.compute(request, params))


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
def test_every_spelling_hits_the_same_route_and_counter(data: st.DataObject) -> None:
    base = data.draw(
        st.sampled_from(["/v1/login", "/t/acme/x", "/t/caf%C3%A9/y/z", "/v1/other/thing"])
        | st.lists(segment_text, min_size=1, max_size=4).map(lambda s: "/" + "/".join(s))
    )
    try:
        canonical = canonical_path(base)
    except PathError:
        return
    spelling = respell(canonical, data.draw)
    assert canonical_path(spelling) == canonical
    assert route_and_counter(spelling) == route_and_counter(canonical)


def test_path_parameters_are_decoded_segments() -> None:
    assert route_and_counter("/t/%61cme/x") == route_and_counter("/t/acme/x")
    assert route_and_counter("//t/acme/x") == route_and_counter("/t/acme/x")
    assert decode_segment("caf%C3%A9") == "caf\u00e9"
    assert decode_segment("a%FFb") != decode_segment("a%FEb")  # not UTF-8: still distinct


@pytest.mark.parametrize(
    ("target", "given"),
    [
        ("/a/b", "/a/b"),
        ("/", "/"),
        ("/tb/../../x", "/x"),
        ("/../x", "/x"),
        ("/%2e%2e/x", "/x"),
        ("/tb/%2E%2e/.%2e/x", "/x"),
        ("/a/./b/.", "/a/b/"),
        ("/a/b/..", "/a/"),
        ("/a\\..\\b", "/b"),
        ("//a//b/", "//a//b/"),  # empty segments are the gateway's to merge
        ("/a/...", "/a/..."),
    ],
)
def test_the_path_the_runtime_gives_the_worker(target: str, given: str) -> None:
    # As WHATWG URL parsing of an http(s) URL (workerd's), which the explain tools mimic.
    assert runtime_path(target) == given
