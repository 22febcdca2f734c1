"""The response cache through the whole gateway, against a model of freshness (RFC 9111).

GETs of one URL at times drawn by Hypothesis on the simulated clock, from one to three
isolates sharing the KV namespace, while the origin's answers say how long they may be
reused (``s-maxage``, ``max-age``, ``no-cache``, ``no-store``, ``private``, or nothing). The
model: an answer is served from the cache, unchanged and without reaching the origin, while
its age is under its lifetime (``s-maxage``, else ``max-age``, at most the route's ``ttl``;
none for ``no-cache``, ``no-store`` and ``private``); every other request reaches the origin
once, and its answer is the one the client gets.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.testing import OriginCall, Reply, Simulator
from tests.examples import examples

API = "https://api.example.com"
# Gaps chosen so that an age is never a whole number of seconds once it is past zero: an
# answer is either plainly fresh or plainly stale.
GAPS = (0, 0, 333, 1777, 6011, 61_003)
POLICIES = (
    "max-age=2",
    "max-age=10",
    "max-age=600",
    "max-age=0",
    "s-maxage=2, max-age=600",
    "max-age=600, s-maxage=0",
    "max-age=600, no-cache",
    "no-store",
    "private, max-age=600",
    "",
)


@dataclass
class Stored:
    body: bytes
    at: int
    lifetime_ms: int


def config(ttl_s: int) -> dict[str, object]:
    return {
        "origin": API,
        "routes": [
            {
                "name": "catalog",
                "match": {"path": "/v1/*"},
                "limits": "1000/second",
                "key": "ip",
                "cache": {"ttl": f"{ttl_s}s"},
            }
        ],
    }


def lifetime_ms(policy: str, ttl_s: int) -> int:
    """How long the model keeps an answer fresh (0: never served from the cache)."""
    directives = {
        part.strip().partition("=")[0]: part.strip().partition("=")[2]
        for part in policy.split(",")
        if part.strip()
    }
    if directives.keys() & {"no-cache", "no-store", "private"}:
        return 0
    seconds = directives.get("s-maxage", directives.get("max-age"))
    return 0 if seconds is None else min(int(seconds), ttl_s) * 1000


@settings(max_examples=examples(300), deadline=None)
@given(
    st.sampled_from((5, 30, 120)),
    st.lists(
        st.tuples(st.sampled_from(GAPS), st.integers(0, 2), st.sampled_from(POLICIES)),
        min_size=1,
        max_size=30,
    ),
)
def test_an_answer_is_served_from_the_cache_exactly_while_it_is_fresh(
    ttl_s: int, drawn: list[tuple[int, int, str]]
) -> None:
    calls: list[bytes] = []
    policy = ""

    def origin(call: OriginCall) -> Reply:
        del call
        body = f"version {len(calls) + 1}".encode()
        calls.append(body)
        fields = {"content-type": "text/plain"}
        if policy:
            fields["cache-control"] = policy
        return Reply(200, fields, body)

    first = Simulator(config(ttl_s), origin=origin)
    isolates = [first, first.new_isolate(), first.new_isolate()]
    stored: Stored | None = None
    for gap, isolate, policy in drawn:  # the origin answers with `policy`
        first.advance(gap)
        now = first.now_ms
        before = len(calls)
        answer = isolates[isolate].request("GET", f"{API}/v1/items")
        assert answer.status == 200, answer.body[:300]
        if stored is not None and now - stored.at < stored.lifetime_ms:
            assert len(calls) == before, "a fresh answer was fetched again"
            assert answer.body == stored.body
            assert answer.headers["x-cache"] == "HIT"
            continue
        assert len(calls) == before + 1, f"{len(calls) - before} origin calls for a stale entry"
        assert answer.body == calls[-1]
        assert answer.headers.get("x-cache") != "HIT"
        keep = lifetime_ms(policy, ttl_s)
        stored = Stored(calls[-1], now, keep) if keep else None
