"""Property tests of the idempotency record: random interleavings of claim, complete and
release by several holders, against a simple reference model, with a fake clock.

Three worlds run the same steps side by side:

- ``direct``: the pure functions, with the Durable Object's cleanup (a record is deleted
  as soon as ``now`` reaches its ``idle_at``);
- ``lazy``: the pure functions, never cleaned up;
- ``wire``: every step as JSON text through :func:`apply_stored`, with cleanup, as the
  Durable Object runs it.

They must answer identically (tokens included): behaviour never depends on when cleanup
runs, nor on the encoding. Against the model: exactly the live holder may complete or
release, a fenced holder changes nothing, a completed response replays identically until
it expires, and tokens only grow, across deletions too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st

from edge_limiter.core.idempotency.protocol import IdempotencyAnswer, IdempotencyCall, apply_stored
from edge_limiter.core.idempotency.records import (
    LATE_GRACE_MS,
    Completed,
    InFlight,
    Outcome,
    Record,
    StoredResponse,
    claim,
    complete,
    decode_record,
    encode_record,
    idle_at,
    is_live,
    release,
)
from tests.examples import examples

EPOCH_MS = 1_700_000_000_000
LOCK = 1_000
RETAIN = 5_000
HOLDERS = 3
FINGERPRINTS = ("fp-a", "fp-b")
ADVANCES = (0, 0, 0, 1, 1, 7, LOCK // 2, LOCK - 1, LOCK, RETAIN // 2, RETAIN)

Step = tuple[str, int, int, int, int]
steps = st.lists(
    st.tuples(
        st.sampled_from(["claim", "claim", "complete", "release", "stale", "advance"]),
        st.integers(0, HOLDERS - 1),
        st.integers(0, len(FINGERPRINTS) - 1),
        st.integers(0, 5),
        st.sampled_from(ADVANCES),
    ),
    min_size=1,
    max_size=40,
)


@dataclass
class Model:
    """The reference: which claim (by number) is live, and what is stored."""

    state: str = "none"  # "none", "in_flight" or "done"
    fingerprint: str = ""
    claim_number: int = -1
    lock_end: int = 0
    response: StoredResponse | None = None
    expires: int = 0

    def live(self, now: int) -> bool:
        if self.state == "in_flight":
            return now < self.lock_end
        return self.state == "done" and now < self.expires


@dataclass
class World:
    """One implementation under test: its record, and every holder's tokens by claim number."""

    cleanup: bool
    wire: bool
    record: Record | None = None
    stored: str | None = None
    deadline: int | None = None
    tokens: dict[int, int] = field(default_factory=dict)
    issued: list[int] = field(default_factory=list)

    def tidy(self, now: int) -> None:
        if not self.cleanup:
            return
        if self.wire:
            if self.deadline is not None and now >= self.deadline:
                self.stored = self.deadline = None
        elif self.record is not None and now >= idle_at(self.record):
            self.record = None

    def current(self) -> Record | None:
        if self.wire:
            return None if self.stored is None else decode_record(self.stored)
        return self.record

    def run(self, call: IdempotencyCall, now: int) -> IdempotencyAnswer:
        if self.wire:
            answer, self.stored, self.deadline = apply_stored(call.to_json(), self.stored, now)
            return IdempotencyAnswer.from_json(answer)
        if call.op == "claim":
            result, self.record = claim(self.record, call.fingerprint, now, call.lock_timeout_ms)
            return IdempotencyAnswer(
                result.outcome, result.token, result.retry_after_ms, result.response
            )
        if call.op == "complete":
            assert call.response is not None
            done, self.record = complete(
                self.record, call.token, call.response, now, call.retention_ms
            )
        else:
            done, self.record = release(self.record, call.token, now)
        return IdempotencyAnswer(done.outcome, reason=done.reason)


def response_for(number: int) -> StoredResponse:
    """A response that tells which claim stored it (bodies empty, too large or not)."""
    body = None if number % 3 == 2 else f"claim {number}".encode() * (number % 3)
    return StoredResponse(200 + number % 5, (("X-Claim", str(number)),), body, body is None)


@settings(max_examples=examples(300), deadline=None)
@given(steps)
# Claimed and released within one millisecond, then deleted at once: the next claim must
# still get a higher token.
@example(
    [("claim", 0, 0, 0, 0), ("release", 0, 0, 0, 0), ("advance", 0, 0, 0, 0), ("claim", 0, 0, 0, 0)]
)
def test_interleavings_match_the_model_in_every_world(plan: list[Step]) -> None:
    now = EPOCH_MS
    model = Model()
    worlds = [World(cleanup=True, wire=False), World(cleanup=False, wire=False), World(True, True)]
    holder_claims: list[list[int]] = [[] for _ in range(HOLDERS)]
    claims = 0

    for kind, holder, fp_index, pick, advance in plan:
        if kind == "advance":
            now += advance
            for world in worlds:
                world.tidy(now)
            continue
        before = [world.current() for world in worlds]

        if kind == "claim":
            fingerprint = FINGERPRINTS[fp_index]
            answers = [
                world.run(IdempotencyCall("claim", fingerprint, lock_timeout_ms=LOCK), now)
                for world in worlds
            ]
            if model.live(now):
                if model.fingerprint != fingerprint:
                    expected = IdempotencyAnswer(Outcome.MISMATCH)
                elif model.state == "in_flight":
                    expected = IdempotencyAnswer(
                        Outcome.IN_FLIGHT, retry_after_ms=model.lock_end - now
                    )
                else:
                    expected = IdempotencyAnswer(Outcome.REPLAY, response=model.response)
                assert all(answer == expected for answer in answers), (answers, expected)
                assert [world.current() for world in worlds] == before
            else:
                assert all(answer.outcome == Outcome.CLAIMED for answer in answers)
                assert len({answer.token for answer in answers}) == 1
                for world, answer in zip(worlds, answers, strict=True):
                    # Tokens only grow, across deletions too.
                    assert all(answer.token > token for token in world.issued)
                    world.issued.append(answer.token)
                    world.tokens[claims] = answer.token
                model = Model("in_flight", fingerprint, claims, now + LOCK)
                holder_claims[holder].append(claims)
                claims += 1
            continue

        # complete, release, or a stale claim's complete: by one of a holder's claims.
        claimants = [mine for mine in holder_claims if mine]
        if not claimants:
            continue
        mine = claimants[holder % len(claimants)]
        number = mine[-1] if kind != "stale" else mine[pick % len(mine)]
        op = "release" if kind == "release" else "complete"
        response = response_for(number) if op == "complete" else None
        holds = (
            model.state == "in_flight"
            and model.claim_number == number
            and now < model.lock_end + LATE_GRACE_MS
        )
        answers = [
            world.run(
                IdempotencyCall(
                    op, token=world.tokens[number], response=response, retention_ms=RETAIN
                ),
                now,
            )
            for world in worlds
        ]
        if not holds:
            # Fenced (or nothing to act on): refused, and nothing changes.
            assert all(answer.outcome == Outcome.REFUSED and answer.reason for answer in answers)
            assert [world.current() for world in worlds] == before
            continue
        if op == "complete":
            assert all(answer.outcome == Outcome.COMPLETED for answer in answers)
            model = Model(
                "done", model.fingerprint, number, response=response, expires=now + RETAIN
            )
        else:
            assert all(answer.outcome == Outcome.RELEASED for answer in answers)
            model = Model("in_flight", model.fingerprint, number, lock_end=now - LATE_GRACE_MS)

        for world in worlds:
            record = world.current()
            assert record is not None
            assert decode_record(encode_record(record)) == record
            if isinstance(record, Completed):
                assert record.response == model.response
                assert record.token == world.tokens[number]


@settings(max_examples=examples(300), deadline=None)
@given(steps)
def test_at_most_one_live_claim_and_it_is_the_latest(plan: list[Step]) -> None:
    """Whatever the order, a live in-flight record belongs to the latest claim only."""
    now = EPOCH_MS
    record: Record | None = None
    issued: list[int] = []
    for kind, _, fp_index, pick, advance in plan:
        if kind == "advance":
            now += advance
            if record is not None and now >= idle_at(record):
                record = None
        elif kind == "claim":
            result, record = claim(record, FINGERPRINTS[fp_index], now, LOCK)
            if result.outcome == Outcome.CLAIMED:
                issued.append(result.token)
        elif issued:
            token = issued[-1] if kind != "stale" else issued[pick % len(issued)]
            if kind == "release":
                _, record = release(record, token, now)
            else:
                _, record = complete(record, token, response_for(0), now, RETAIN)
        holders = [
            token
            for token in issued
            if isinstance(record, InFlight) and record.token == token and is_live(record, now)
        ]
        assert len(holders) <= 1
        if holders:
            assert holders[0] == issued[-1]
        assert issued == sorted(set(issued))
