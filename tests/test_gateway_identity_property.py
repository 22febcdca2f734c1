"""Untrusted fields never decide whom a request is counted for, through the whole gateway:
clients at addresses the platform gives (``CF-Connecting-IP``, set by Cloudflare), each
request carrying any fields a client may forge (``X-Forwarded-For``, ``X-Real-IP``,
``True-Client-IP``, ``Forwarded``, a second ``CF-Connecting-IP``, ``CF-IPCountry``, ...)
with any values, including other clients' addresses. On a route keyed on the address,
each client gets exactly its own limit, whatever its fields say; on a route keyed on an
API-key header, the key alone decides, whatever address fields come with it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.testing import Simulator

from .examples import examples
from .fakes import one_route

#: Four clients (an IPv6 address counts by its /64, as the ``ip`` key does by default).
ADDRESSES = ["198.51.100.7", "203.0.113.9", "2001:db8:1::1", "2001:db8:2::1"]
FORGED_NAMES = (
    "X-Forwarded-For",
    "X-Real-IP",
    "True-Client-IP",
    "Forwarded",
    "X-Client-IP",
    "X-Cluster-Client-IP",
    "CF-Connecting-IP",
    "cf-connecting-ip",
    "CF-IPCountry",
    "X-Original-Forwarded-For",
    "Client-IP",
)
forged_values = st.one_of(
    st.sampled_from(ADDRESSES),
    st.lists(st.sampled_from(ADDRESSES), min_size=1, max_size=3).map(", ".join),
    st.sampled_from(["for=198.51.100.7", "unknown", "", "127.0.0.1", "10.0.0.1", "::1"]),
    st.text(alphabet="0123456789abcdef.:,; =", max_size=30),
)
forged = st.lists(st.tuples(st.sampled_from(FORGED_NAMES), forged_values), max_size=4)
LIMIT = 3


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(ADDRESSES), forged), min_size=1, max_size=25),
    st.sampled_from(["token_bucket", "gcra", "sliding_log", "sliding_window", "fixed_window"]),
)
def test_each_address_gets_its_own_limit_whatever_fields_it_forges(
    sent: list[tuple[str, list[tuple[str, str]]]], algorithm: str
) -> None:
    sim = Simulator(one_route(limits=f"{LIMIT}/hour", algorithm=algorithm, key="ip"))
    admitted: dict[str, int] = {}
    for address, fields in sent:
        answer = sim.request("GET", "https://api.test/v1/x", ip=address, headers=fields)
        assert answer.status in (200, 429), answer.text
        if answer.status == 200:
            admitted[address] = admitted.get(address, 0) + 1
    expected = {}
    for address, _ in sent:
        expected[address] = min(LIMIT, expected.get(address, 0) + 1)
    assert admitted == {a: n for a, n in expected.items() if n}


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["k1", "k2"]), st.sampled_from(ADDRESSES), forged),
        min_size=1,
        max_size=20,
    )
)
def test_an_api_key_route_counts_the_key_whatever_address_fields_come_with_it(
    sent: list[tuple[str, str, list[tuple[str, str]]]],
) -> None:
    sim = Simulator(one_route(limits=f"{LIMIT}/hour", key="header:x-api-key"))
    admitted: dict[str, int] = {}
    seen: dict[str, int] = {}
    for key, address, fields in sent:
        headers = [*fields, ("X-API-Key", key)]
        answer = sim.request("GET", "https://api.test/v1/x", ip=address, headers=headers)
        seen[key] = seen.get(key, 0) + 1
        assert answer.status == (200 if seen[key] <= LIMIT else 429), (key, address, fields)
        admitted[key] = admitted.get(key, 0) + (answer.status == 200)
    assert all(n <= LIMIT for n in admitted.values())
