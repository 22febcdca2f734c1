"""End-to-end fixtures: the built Worker on real local workerd, in front of demo origins.

One gateway (with a persisted Durable Object store) serves most tests; two more run with
a Durable Object binding that fails (throws, or never answers), a test-only host option
that changes nothing in the Worker. Every test uses its own client addresses or keys, so
tests never share a counter.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_limiter.tools.build_worker import build
from edge_limiter.tools.demo_origin import DemoOrigin
from edge_limiter.tools.local_gateway import LocalGateway

ROOT = Path(__file__).resolve().parents[2]

_addresses = itertools.count(1)


def fresh_ip() -> str:
    """A client address no other test uses (TEST-NET-3 and a documentation IPv6 range)."""
    n = next(_addresses)
    return f"203.0.{n // 250}.{n % 250 + 1}"


def leave_midway(
    base_url: str,
    path: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    after: float = 0.5,
) -> None:
    """Send a request from a client that goes away ``after`` seconds later, before its
    answer: it resets its connection (SO_LINGER 0). Local workerd notices a reset at
    once, as Cloudflare's edge notices any client going away; a plain close it notices
    only when it writes the answer."""
    host, port = base_url.split("://", 1)[1].rstrip("/").rsplit(":", 1)
    fields = {"host": f"{host}:{port}", **(headers or {})}
    if body or method not in ("GET", "HEAD"):
        fields["content-length"] = str(len(body))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    with socket.create_connection((host, int(port))) as conn:
        conn.sendall(head.encode() + b"\r\n" + body)
        time.sleep(after)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def route(name: str, path: str, limits: str | list[Any], **fields: Any) -> dict[str, Any]:
    return {"name": name, "match": {"path": path}, "limits": limits, **fields}


def gateway_config(origin: str, **top: Any) -> dict[str, Any]:
    # Idle rows are cleaned up a second after the alarm is armed (a minute by default), so
    # the alarm's test does not wait a minute.
    top.setdefault("storage", {"cleanup_after": "1s"})
    # Pages at this origin may read the gateway's own answers (no test sends it unasked).
    top.setdefault("cors", {"allow_origins": ["https://app.test"]})
    return {
        "origin": origin,
        "routes": [
            route("tb", "/tb", "50/hour", algorithm="token_bucket"),
            route("gcra", "/gcra", "50/hour", algorithm="gcra"),
            route("log", "/log", "50/hour", algorithm="sliding_log"),
            route("sw", "/sw", "50/hour", algorithm="sliding_window"),
            route("fw", "/fw", "50/day", algorithm="fixed_window"),
            route("small", "/small/*", "3/hour", algorithm="sliding_log"),
            route("multi", "/multi", "4/minute; 6/hour", algorithm="sliding_log", cost=2),
            route("shadow", "/shadow", "2/hour", shadow=True),
            route("keyed", "/keyed", "2/hour", key="header:x-api-key"),
            route("cookied", "/cookied", "2/hour", key="cookie:sid"),
            {
                "name": "deletes",
                "match": {"path": "/del/*", "methods": ["DELETE"]},
                "limits": "2/hour",
                "algorithm": "sliding_log",
            },
            route("tenant", "/t/{tenant}/*", "2/hour", key=["path:tenant"]),
            route("persist", "/persist", "3/hour", algorithm="sliding_log"),
            route("idle", "/idle", "5/second", algorithm="sliding_log"),
            route("behind", "/behind", "5/hour", algorithm="gcra", write_behind="100ms"),
            route("geo", "/geo", "2/hour", key="country"),
            route("open", "/open", "100/hour"),
            # A bucket's burst with a quota of its own algorithm: a window that ends on the
            # hour (a daily quota works alike at midnight UTC).
            route(
                "mixed",
                "/mixed",
                [
                    {"rate": "10/second", "burst": 10},
                    {"rate": "7/hour", "algorithm": "fixed_window"},
                ],
                algorithm="token_bucket",
            ),
            route("closed", "/closed", "100/hour", on_store_error="closed"),
            # Refunds that come back in a later window than their admission.
            route(
                "refunds",
                "/refunds/*",
                "3/6s",
                algorithm="fixed_window",
                refund_on=[503],
                retry={"attempts": 1},
            ),
            # Canonical paths, spelled differently on the request line.
            {
                "name": "canon-login",
                "match": {"path": "/canon/login", "methods": ["POST"]},
                "limits": "3/hour",
                "algorithm": "sliding_log",
            },
            {
                "name": "canon-host",
                "match": {"path": "/canon/host", "host": "api.example.test"},
                "limits": "3/hour",
                "algorithm": "sliding_log",
            },
            {
                "name": "canon-folded",
                "match": {"path": "/canon/Folded", "case_insensitive": True},
                "limits": "3/hour",
                "algorithm": "sliding_log",
            },
            # Origins that are slow or gone.
            route("slow", "/slow/*", "1000/hour", timeout="400ms"),
            route("dead", "/dead", "1000/hour", origin="http://127.0.0.1:9"),
            # The timeout bounds the wait for the answer's head; a body the gateway reads
            # itself is bounded per read.
            route(
                "slow-cached",
                "/slow-cached/*",
                "1000/hour",
                timeout="400ms",
                cache={"ttl": "5m", "default_ttl": "5m"},
            ),
            route(
                "slow-pay",
                "/slow-pay/*",
                "1000/hour",
                timeout="400ms",
                idempotency={"mode": "required"},
            ),
            # A lock shorter than a slow but steady answer (the claim is kept while it comes).
            route(
                "slow-lock",
                "/slow-lock/*",
                "1000/hour",
                timeout="700ms",
                idempotency={"mode": "required", "lock_timeout": "1s"},
            ),
            # A lock far longer than the origin's timeout: not extended for seconds.
            route(
                "pay-drip",
                "/pay-drip/*",
                "1000/hour",
                timeout="1s",
                idempotency={"mode": "required", "lock_timeout": "4s"},
            ),
            # The KV response cache.
            route(
                "cached",
                "/cached/*",
                "3/hour",
                algorithm="sliding_log",
                cache={"ttl": "5m", "default_ttl": "5m"},
            ),
            # Misses of a slow origin whose clients go away (a timeout far from its answer).
            route(
                "cached-herd",
                "/herd/*",
                "1000/hour",
                timeout="3s",
                cache={"ttl": "5m", "default_ttl": "5m"},
            ),
            route(
                "cached-counted",
                "/counted/*",
                "3/hour",
                algorithm="sliding_log",
                cache={"ttl": "5m", "default_ttl": "5m", "count_hits": True},
            ),
            route(
                "cached-key",
                "/mine/*",
                "100/hour",
                key="header:x-api-key",
                cache={"ttl": "5m", "default_ttl": "5m", "scope": "key"},
            ),
            route(
                "cached-swr",
                "/swr/*",
                "1000/hour",
                cache={"ttl": "5m", "default_ttl": "5m", "stale_while_revalidate": "30s"},
            ),
            route(
                "cached-small",
                "/cached-small/*",
                "1000/hour",
                cache={"ttl": "5m", "default_ttl": "5m", "max_bytes": 4096},
            ),
            # Idempotency-Key.
            route(
                "pay-small",
                "/pay-small/*",
                "1000/hour",
                idempotency={"mode": "required", "max_bytes": 4096, "max_request_bytes": 4096},
            ),
            route(
                "pay",
                "/pay/*",
                "1000/hour",
                idempotency={"mode": "required", "lock_timeout": "60s"},
            ),
            # Tenants by host: one Idempotency-Key on two hosts is two operations.
            {
                "name": "pay-tenant",
                "match": {"path": "/pay-tenant/*", "host": "*.tenant.test"},
                "limits": "1000/hour",
                "idempotency": {"mode": "required"},
            },
            route(
                "pay-short",
                "/pay-short/*",
                "1000/hour",
                idempotency={"mode": "required", "retention": "2s"},
            ),
            route(
                "pay-limited",
                "/pay-limited/*",
                "1 per 2 seconds",
                algorithm="sliding_log",
                idempotency={"mode": "required"},
            ),
            route(
                "pay-timeout",
                "/pay-timeout/*",
                "1000/hour",
                timeout="300ms",
                idempotency={"mode": "required"},
            ),
            route(
                "pay-takeover",
                "/pay-takeover/*",
                "1000/hour",
                timeout="10s",
                idempotency={"mode": "required", "lock_timeout": "1s"},
            ),
        ],
        **top,
    }


_process_groups: list[int] = []


def track(gw: LocalGateway) -> LocalGateway:
    """Remember a running gateway's process group, to check at the end that it is gone."""
    assert gw.pid is not None
    _process_groups.append(gw.pid)  # the launcher leads its own group, workerd included
    return gw


def _start(gw: LocalGateway) -> LocalGateway:
    return track(gw.start())


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def worker_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("worker")
    build(out)
    return out


@pytest.fixture(scope="session")
def origin() -> Iterator[DemoOrigin]:
    with DemoOrigin("e2e-origin") as demo:
        yield demo


@pytest.fixture(scope="session")
def persist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the main gateway's Durable Object (SQLite) and KV state live."""
    return tmp_path_factory.mktemp("persist")


@pytest.fixture(scope="session")
def gateway(worker_dir: Path, origin: DemoOrigin, persist_dir: Path) -> Iterator[LocalGateway]:
    persist = persist_dir
    gw = _start(
        LocalGateway(worker_dir, {"EDGE_LIMITER": gateway_config(origin.url)}, persist_dir=persist)
    )
    try:
        yield gw
    finally:
        gw.stop()


def _broken(worker_dir: Path, origin: DemoOrigin, mode: str) -> Iterator[LocalGateway]:
    config = gateway_config(origin.url, store_timeout_ms=300)
    gw = _start(
        LocalGateway(
            worker_dir,
            {"EDGE_LIMITER": config},
            broken_durable_objects={"RATE_LIMITER": mode, "IDEMPOTENCY": mode},
            broken_kv_namespaces=["CACHE"] if mode == "throw" else None,
        )
    )
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(scope="session")
def throwing_gateway(worker_dir: Path, origin: DemoOrigin) -> Iterator[LocalGateway]:
    yield from _broken(worker_dir, origin, "throw")


@pytest.fixture(scope="session")
def hanging_gateway(worker_dir: Path, origin: DemoOrigin) -> Iterator[LocalGateway]:
    yield from _broken(worker_dir, origin, "hang")


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind() -> Iterator[None]:
    yield
    # Torn down after the gateways (it was set up first): every process group they
    # started, node and workerd alike, must be gone.
    leftover = [pgid for pgid in _process_groups if _group_alive(pgid)]
    assert not leftover, f"process groups left behind: {leftover}"
