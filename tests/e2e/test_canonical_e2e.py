"""Canonical paths on the real runtime, driven with raw request lines (httpx and most
clients normalise some paths themselves, which would hide what the gateway sees)."""

from __future__ import annotations

import json
import socket

import pytest

from edge_limiter.tools.demo_origin import DemoOrigin
from edge_limiter.tools.local_gateway import LocalGateway

from .conftest import fresh_ip

pytestmark = pytest.mark.e2e


def raw_request(
    gw: LocalGateway,
    target: str,
    method: str = "GET",
    host: str = "api.example.test",
    ip: str = "",
) -> tuple[int, dict[str, str], bytes]:
    """Send exactly ``METHOD target HTTP/1.1``; the status, headers and body."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    if ip:
        lines.append(f"CF-Connecting-IP: {ip}")
    if method in ("POST", "PUT", "PATCH"):
        lines.append("Content-Length: 0")
    with socket.create_connection(("127.0.0.1", gw.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        reader = sock.makefile("rb")
        status_line = reader.readline().decode("latin-1")
        headers: dict[str, str] = {}
        while (line := reader.readline().decode("latin-1").strip()) != "":
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while (size := int(reader.readline().split(b";")[0], 16)) > 0:
                body += reader.read(size)
                reader.readline()
        else:
            body = reader.read(int(headers.get("content-length", "0")))
    return int(status_line.split()[1]), headers, body


def forwarded_paths(origin: DemoOrigin, since: int) -> list[str]:
    return [path for _, path in origin.hits[since:]]


@pytest.mark.parametrize(
    "spellings",
    [
        ["//canon/login", "///canon/login", "/canon/%6cogin"],
        ["/canon/log%69n", "/canon/./login", "/x/../canon/login"],
        ["/canon//login", "/canon/%6C%6F%67%69%6E", "/canon/login/"],
        ["/canon\\login", "/%63anon/login", "/canon/x/%2e%2e/login"],
    ],
)
def test_every_spelling_counts_against_the_route_and_reaches_the_origin_canonical(
    gateway: LocalGateway, origin: DemoOrigin, spellings: list[str]
) -> None:
    ip = fresh_ip()
    since = len(origin.hits)
    statuses = [raw_request(gateway, s, "POST", ip=ip)[0] for s in spellings]
    assert statuses == [200, 200, 200]
    status, headers, body = raw_request(gateway, "/canon/login", "POST", ip=ip)
    assert status == 429, body
    assert headers["x-ratelimit-remaining"] == "0"
    # The origin only ever saw the canonical path (a trailing slash is kept: it may matter
    # to the origin, and it matches the same route).
    assert set(forwarded_paths(origin, since)) <= {"/canon/login", "/canon/login/"}


def test_path_parameters_and_doubled_slashes_share_the_counter(gateway: LocalGateway) -> None:
    tenant = f"acme{fresh_ip().replace('.', '')}"
    encoded = "".join(f"%{ord(c):02x}" for c in tenant)
    assert raw_request(gateway, f"/t/{encoded}/x", ip=fresh_ip())[0] == 200
    assert raw_request(gateway, f"//t/{tenant}/y", ip=fresh_ip())[0] == 200
    assert raw_request(gateway, f"/t/{tenant}/z", ip=fresh_ip())[0] == 429


@pytest.mark.parametrize(
    "host", ["api.example.test.", "API.EXAMPLE.TEST", "api.example.test:80", "Api.Example.Test."]
)
def test_host_spellings_do_not_skip_a_host_route(gateway: LocalGateway, host: str) -> None:
    ip = fresh_ip()
    for _ in range(3):
        assert raw_request(gateway, "/canon/host", host=host, ip=ip)[0] == 200
    status, headers, _ = raw_request(gateway, "/canon/host", ip=ip)
    assert status == 429 and headers["x-edgelimiter-reason"] == "limited"


def test_a_case_insensitive_route_folds_every_spelling(gateway: LocalGateway) -> None:
    ip = fresh_ip()
    for target in ("/canon/folded", "/CANON/FOLDED", "/Canon/%46olded"):
        assert raw_request(gateway, target, ip=ip)[0] == 200
    assert raw_request(gateway, "/canon/Folded", ip=ip)[0] == 429


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("/canon/a%2fb", "encoded /"),
        ("/canon/a%5cb", "encoded \\"),
        ("/canon/%00", "control"),
        ("/canon/%zz", "invalid percent-encoding"),
        ("/canon/%e", "invalid percent-encoding"),
    ],
)
def test_paths_without_a_canonical_form_are_400_and_never_forwarded(
    gateway: LocalGateway, origin: DemoOrigin, target: str, why: str
) -> None:
    since = len(origin.hits)
    status, headers, body = raw_request(gateway, target, "POST", ip=fresh_ip())
    assert status == 400
    assert headers["content-type"] == "application/problem+json"
    problem = json.loads(body)
    assert problem["code"] == "bad_path" and why in problem["detail"]
    assert forwarded_paths(origin, since) == []


def test_a_raw_control_byte_in_the_path_is_a_400_and_never_forwarded(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    # Local workerd (1.20261117 on) answers it itself, in plain text, before the Worker runs
    # (docs/local-runtime.md); the gateway's own check ("control") stays for a runtime that
    # lets it through, as %00 above shows.
    since = len(origin.hits)
    status, headers, body = raw_request(gateway, "/canon/\x01x", "POST", ip=fresh_ip())
    assert status == 400
    if headers["content-type"] == "application/problem+json":
        assert "control" in json.loads(body)["detail"]
    assert forwarded_paths(origin, since) == []


def test_unmatched_paths_are_forwarded_canonical_too(
    gateway: LocalGateway, origin: DemoOrigin
) -> None:
    since = len(origin.hits)
    status, _, body = raw_request(gateway, "//free/%7Euser//a%20b?x=%2F", ip=fresh_ip())
    assert status == 200
    echo = json.loads(body)
    assert echo["path"] == "/free/~user/a%20b" and echo["query"] == "x=%2F"
    assert forwarded_paths(origin, since) == ["/free/~user/a%20b"]
