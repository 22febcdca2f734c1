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
from tests.fakes import SIM_API, one_route

API = SIM_API
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
    return one_route(cache={"ttl": f"{ttl_s}s"})


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


#: Answers that may be stored: with an ``ETag``, a stale one is asked for conditionally.
STORABLE = ("max-age=2", "max-age=10", "max-age=0", "max-age=600, no-cache")


@settings(max_examples=examples(300), deadline=None)
@given(
    st.sampled_from((5, 30, 120)),
    st.lists(
        st.tuples(
            st.sampled_from(GAPS),
            st.sampled_from(STORABLE),
            st.booleans(),  # the origin's resource changes before this request
        ),
        min_size=1,
        max_size=30,
    ),
)
def test_a_stale_answer_is_revalidated_and_never_outlives_its_resource(
    ttl_s: int, drawn: list[tuple[int, str, bool]]
) -> None:
    """With an ``ETag``: a fresh answer is served as stored; past its freshness, the client
    gets the origin's current version, the stored body when the origin answers ``304`` to the
    conditional request (``X-Cache: REVALIDATED``, freshness renewed by the ``304``), the new
    one when it changed. One isolate: KV takes one write per second per key, so a copy
    renewed within a second of the isolate's last write of it is not written (another
    isolate, and later this one, ask the origin again: one more conditional request)."""
    version = 1
    policy = ""
    calls: list[int] = []  # the status of each origin answer

    def origin(call: OriginCall) -> Reply:
        fields = {"etag": f'"v{version}"', "cache-control": policy}
        asked = {name.lower(): value for name, value in call.headers}
        if asked.get("if-none-match") == f'"v{version}"':
            calls.append(304)
            return Reply(304, fields)
        calls.append(200)
        return Reply(200, {"content-type": "text/plain", **fields}, f"version {version}")

    sim = Simulator(config(ttl_s), origin=origin)
    # What KV holds for certain: the body last written and until when it is fresh. A write
    # within a second of the isolate's last one of the key is skipped (KV's limit): its copy
    # may then be served by this isolate for its freshness, or asked for again.
    stored, fresh_until, written_at = b"", -1, -(10**9)
    maybe, maybe_until = b"", -1
    for gap, policy, changes in drawn:  # the origin answers with `policy`
        sim.advance(gap)
        version += changes
        now = sim.now_ms
        before = len(calls)
        answer = sim.request("GET", f"{API}/v1/items")
        assert answer.status == 200, answer.body[:300]
        if now < fresh_until:
            assert len(calls) == before and answer.headers["x-cache"] == "HIT"
            assert answer.body == stored
            continue
        if len(calls) == before and now < maybe_until:
            assert answer.headers["x-cache"] == "HIT" and answer.body == maybe
            continue
        assert len(calls) == before + 1, f"{len(calls) - before} origin calls for a stale entry"
        # Whatever was stored, the client gets what the origin has now.
        assert answer.body == f"version {version}".encode()
        if calls[-1] == 304:
            assert answer.headers["x-cache"] == "REVALIDATED"
        if now - written_at >= 1000:
            stored, fresh_until, written_at = answer.body, now + lifetime_ms(policy, ttl_s), now
        else:
            maybe, maybe_until = answer.body, now + lifetime_ms(policy, ttl_s)
