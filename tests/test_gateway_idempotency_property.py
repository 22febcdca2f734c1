"""``Idempotency-Key`` through the whole gateway, against a model of what it promises.

Clients send POSTs with a few keys and a few payloads, from one to three isolates that share
the records' objects, at times drawn by Hypothesis on the simulated clock, while the origin
answers 200, 500 or 503 (and its breaker may open). The model: a key's first request is forwarded and its answer kept
for the route's retention (an answer saying the origin did not act, 503, is not kept: the
next request with the key is forwarded); while it is kept, the same request gets that answer
again without reaching the origin, marked ``Idempotent-Replayed``, and another request with
the key a 422; each client's keys are its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from edge_limiter.testing import OriginCall, Reply, Simulator
from tests.examples import examples
from tests.fakes import SIM_API, one_route

API = SIM_API
RETENTION_MS = 10_000
# No sum of these gaps is the retention exactly: an answer is either plainly kept or gone.
GAPS = (0, 0, 333, 3001, 10_007)
CLIENTS = ("198.51.100.1", "198.51.100.2")
CONFIG = one_route(idempotency={"retention": f"{RETENTION_MS // 1000}s"})


@dataclass
class Kept:
    payload: bytes
    status: int
    body: bytes
    until: int


steps = st.lists(
    st.tuples(
        st.sampled_from(GAPS),
        st.integers(0, 2),  # isolate
        st.integers(0, len(CLIENTS) - 1),
        st.sampled_from(("k1", "k2", "k3")),
        st.sampled_from((b"pay 10", b"pay 20")),
        st.sampled_from((200, 200, 500, 503)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=examples(300), deadline=None)
@given(steps)
def test_each_key_reaches_the_origin_once_while_its_answer_is_kept(
    drawn: list[tuple[int, int, int, str, bytes, int]],
) -> None:
    calls: list[bytes] = []
    status = 200

    def origin(call: OriginCall) -> Reply:
        calls.append(call.body)
        return Reply(status, {"content-type": "text/plain"}, f"answer {len(calls)}")

    first = Simulator(CONFIG, origin=origin)
    isolates = [first, first.new_isolate(), first.new_isolate()]
    kept: dict[tuple[str, str], Kept] = {}
    for gap, isolate, client, key, payload, status in drawn:  # the origin answers `status`
        first.advance(gap)
        now = first.now_ms
        before = len(calls)
        answer = isolates[isolate].request(
            "POST",
            f"{API}/v1/pay",
            ip=CLIENTS[client],
            headers={"idempotency-key": key, "content-type": "text/plain"},
            body=payload,
        )
        record = kept.get((CLIENTS[client], key))
        if record is not None and now < record.until:
            assert len(calls) == before, "a kept key reached the origin again"
            if payload == record.payload:
                assert answer.status == record.status
                assert answer.body == record.body
                assert answer.headers["idempotent-replayed"] == "true"
            else:
                assert answer.status == 422, answer.body[:300]
            continue
        if len(calls) == before:
            # The origin's breaker opened on its failures: the gateway's own 503, and the key
            # is not taken (the next request with it goes to the origin once it may).
            assert answer.status == 503 and b"circuit breaker" in answer.body, answer.body
            continue
        assert set(calls[before:]) == {payload}
        assert "idempotent-replayed" not in answer.headers
        assert answer.status == status, answer.body[:300]
        if status != 503:
            kept[(CLIENTS[client], key)] = Kept(payload, status, answer.body, now + RETENTION_MS)
        else:
            kept.pop((CLIENTS[client], key), None)
