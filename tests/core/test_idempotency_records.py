"""The idempotency record's state machine, step by step, with a fake clock."""

from __future__ import annotations

import pytest

from edge_limiter.core.errors import IdempotencyRecordError
from edge_limiter.core.idempotency.records import (
    CONFLICT_STATUS,
    LATE_GRACE_MS,
    ClaimResult,
    Completed,
    InFlight,
    Outcome,
    StoredResponse,
    claim,
    complete,
    decode_record,
    encode_record,
    extend,
    idle_at,
    in_flight_wait_ms,
    is_live,
    peek,
    release,
    stored_response,
)
from edge_limiter.core.idempotency.settings import IdempotencySettings

from .conftest import FakeClock

LOCK = 30_000
RETAIN = 86_400_000
OK = StoredResponse(201, (("Content-Type", "application/json"),), b'{"id":1}')


def test_first_claim_gets_a_token_and_a_lock(clock: FakeClock) -> None:
    result, record = claim(None, "fp", clock.now, LOCK)
    assert result == ClaimResult(Outcome.CLAIMED, token=clock.now)
    assert record == InFlight("fp", clock.now, clock.now + LOCK, clock.now)


def test_a_second_request_while_in_flight_is_told_when_to_retry(clock: FakeClock) -> None:
    _, record = claim(None, "fp", clock.now, LOCK)
    clock.advance(10_000)
    result, after = claim(record, "fp", clock.now, LOCK)
    assert result == ClaimResult(Outcome.IN_FLIGHT, retry_after_ms=20_000)
    assert after is record
    assert CONFLICT_STATUS[result.outcome] == 409


def test_another_request_with_the_key_is_a_mismatch(clock: FakeClock) -> None:
    _, record = claim(None, "fp", clock.now, LOCK)
    result, after = claim(record, "other", clock.now, LOCK)
    assert result.outcome == Outcome.MISMATCH and after is record
    assert CONFLICT_STATUS[result.outcome] == 422
    first, claimed = claim(None, "fp", clock.now, LOCK)
    _, done = complete(claimed, first.token, OK, clock.now, RETAIN)
    result, after = claim(done, "other", clock.now, LOCK)
    assert result.outcome == Outcome.MISMATCH and after is done


def test_complete_then_replay_until_expiry(clock: FakeClock) -> None:
    first, claimed = claim(None, "fp", clock.now, LOCK)
    clock.advance(500)
    done, record = complete(claimed, first.token, OK, clock.now, RETAIN)
    assert done.outcome == Outcome.COMPLETED
    assert record == Completed("fp", OK, clock.now, clock.now + RETAIN, first.token)
    clock.advance(RETAIN - 1)
    replay, same = claim(record, "fp", clock.now, LOCK)
    assert replay == ClaimResult(Outcome.REPLAY, response=OK) and same is record
    clock.advance(1)
    again, fresh = claim(record, "fp", clock.now, LOCK)
    assert again.outcome == Outcome.CLAIMED and again.token > first.token
    assert isinstance(fresh, InFlight)


def test_a_lock_that_ran_out_is_taken_over_and_the_old_holder_is_fenced(
    clock: FakeClock,
) -> None:
    first, record = claim(None, "fp", clock.now, LOCK)
    clock.advance(LOCK)
    second, record = claim(record, "fp", clock.now, LOCK)
    assert second.outcome == Outcome.CLAIMED and second.token > first.token
    late, after = complete(record, first.token, OK, clock.now, RETAIN)
    assert late.outcome == Outcome.REFUSED and "fenced" in late.reason
    assert after is record
    late_release, after = release(record, first.token, clock.now)
    assert late_release.outcome == Outcome.REFUSED and after is record
    done, _ = complete(record, second.token, OK, clock.now, RETAIN)
    assert done.outcome == Outcome.COMPLETED


def test_an_expired_claim_with_another_fingerprint_is_taken_over_as_if_absent(
    clock: FakeClock,
) -> None:
    first, record = claim(None, "fp", clock.now, LOCK)
    clock.advance(LOCK)
    result, _ = claim(record, "other", clock.now, LOCK)
    assert result.outcome == Outcome.CLAIMED and result.token > first.token


def test_a_holder_nobody_took_over_may_complete_late_within_the_grace(clock: FakeClock) -> None:
    first, record = claim(None, "fp", clock.now, LOCK)
    clock.advance(LOCK + 5)
    result, after = complete(record, first.token, OK, clock.now, RETAIN)
    assert result.outcome == Outcome.COMPLETED and isinstance(after, Completed)
    assert idle_at(record) >= record.locked_until + LATE_GRACE_MS  # not deleted before


def test_the_holder_cannot_complete_after_the_grace(clock: FakeClock) -> None:
    first, record = claim(None, "fp", clock.now, LOCK)
    clock.advance(LOCK + LATE_GRACE_MS)
    result, after = complete(record, first.token, OK, clock.now, RETAIN)
    assert result.outcome == Outcome.REFUSED and "too long ago" in result.reason
    assert after is record


def test_release_lets_the_next_request_claim_with_a_higher_token(clock: FakeClock) -> None:
    first, claimed = claim(None, "fp", clock.now, LOCK)
    clock.advance(5)
    released, record = release(claimed, first.token, clock.now)
    assert released.outcome == Outcome.RELEASED
    assert record == InFlight("fp", first.token, clock.now - LATE_GRACE_MS, clock.now - 5)
    assert not is_live(record, clock.now)
    second, record = claim(record, "fp", clock.now, LOCK)
    assert second.outcome == Outcome.CLAIMED and second.token > first.token


def test_claim_release_claim_within_one_millisecond_keeps_tokens_increasing(
    clock: FakeClock,
) -> None:
    tokens = []
    record = None
    for _ in range(5):
        result, record = claim(record, "fp", clock.now, LOCK)
        tokens.append(result.token)
        _, record = release(record, result.token, clock.now)
    assert tokens == sorted(set(tokens)) and len(tokens) == 5


@pytest.mark.parametrize("op", ["complete", "release"])
def test_nothing_to_complete_or_release(clock: FakeClock, op: str) -> None:
    first, record = claim(None, "fp", clock.now, LOCK)
    _, done = complete(record, first.token, OK, clock.now, RETAIN)
    for target in (None, done):
        if op == "complete":
            result, after = complete(target, first.token, OK, clock.now, RETAIN)
        else:
            result, after = release(target, first.token, clock.now)
        assert result.outcome == Outcome.REFUSED and result.reason
        assert after is target


def test_idle_at_is_after_the_lock_or_retention_and_after_the_token(clock: FakeClock) -> None:
    first, record = claim(None, "fp", clock.now, LOCK)
    assert idle_at(record) == clock.now + LOCK + LATE_GRACE_MS  # a late completion may come
    _, released = release(record, first.token, clock.now)
    assert released is not None
    assert idle_at(released) == first.token + 1  # never before now has passed the token
    late, _ = complete(released, first.token, OK, clock.now, RETAIN)
    assert late.outcome == Outcome.REFUSED  # given back: no completing it afterwards
    _, done = complete(record, first.token, OK, clock.now, RETAIN)
    assert done is not None
    assert idle_at(done) == clock.now + RETAIN


def test_a_deleted_record_starts_again_above_every_earlier_token(clock: FakeClock) -> None:
    first, record = claim(None, "fp", clock.now, LOCK)
    _, released = release(record, first.token, clock.now)
    assert released is not None
    clock.now = idle_at(released)  # the Durable Object deletes it here
    second, _ = claim(None, "fp", clock.now, LOCK)
    assert second.token > first.token


def test_peek(clock: FakeClock) -> None:
    assert peek(None, clock.now) == ClaimResult(Outcome.ABSENT)
    first, record = claim(None, "fp", clock.now, LOCK)
    assert peek(record, clock.now + 1) == ClaimResult(
        Outcome.IN_FLIGHT, first.token, retry_after_ms=LOCK - 1
    )
    assert peek(record, clock.now + LOCK).outcome == Outcome.ABSENT
    _, done = complete(record, first.token, OK, clock.now, RETAIN)
    assert peek(done, clock.now) == ClaimResult(Outcome.COMPLETED, first.token, response=OK)


def test_bad_durations_are_programming_errors(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="lock_timeout_ms"):
        claim(None, "fp", clock.now, 0)
    first, record = claim(None, "fp", clock.now, LOCK)
    with pytest.raises(ValueError, match="retention_ms"):
        complete(record, first.token, OK, clock.now, 0)


def test_stored_response_drops_hop_by_hop_and_large_bodies() -> None:
    headers = [("Content-Type", "text/plain"), ("Connection", "close"), ("Set-Cookie", "a=1")]
    small = IdempotencySettings(max_bytes=4)
    kept = stored_response(200, headers, b"1234", small)
    assert kept == StoredResponse(
        200, (("Content-Type", "text/plain"), ("Set-Cookie", "a=1")), b"1234"
    )
    too_big = stored_response(200, headers, b"12345", small)
    assert too_big.body is None and too_big.body_too_large and too_big.status == 200


def test_records_round_trip(clock: FakeClock) -> None:
    first, record = claim(None, "fp", clock.now, LOCK)
    assert decode_record(encode_record(record)) == record
    big = StoredResponse(200, (), None, body_too_large=True)
    for response in (OK, big, StoredResponse(204, (), b"")):
        _, done = complete(record, first.token, response, clock.now, RETAIN)
        assert done is not None
        assert decode_record(encode_record(done)) == done


HEAD = StoredResponse(201, (("Content-Type", "application/json"),), None, body_too_large=True)


def test_extend_keeps_the_claim_and_marks_the_key_as_acted_on(clock: FakeClock) -> None:
    first, record = claim(None, "fp", clock.now, LOCK)
    clock.advance(LOCK - 1_000)
    done, record = extend(
        record, first.token, HEAD, clock.now, lock_timeout_ms=LOCK, retention_ms=RETAIN
    )
    assert done.outcome == Outcome.EXTENDED
    assert isinstance(record, InFlight) and record.locked_until == clock.now + LOCK
    assert record.answered == HEAD and record.expires_at == clock.now + RETAIN
    assert decode_record(encode_record(record)) == record
    clock.advance(LOCK - 1)
    busy, _ = claim(record, "fp", clock.now, LOCK)
    assert busy.outcome == Outcome.IN_FLIGHT  # the holder is still reading the body
    # The holder went away: past its lock the key is replayed the head, never taken over.
    clock.advance(1)
    replayed, same = claim(record, "fp", clock.now, LOCK)
    assert replayed == ClaimResult(Outcome.REPLAY, response=HEAD) and same is record
    other, _ = claim(record, "other", clock.now, LOCK)
    assert other.outcome == Outcome.MISMATCH
    assert peek(record, clock.now).response == HEAD
    assert idle_at(record) >= record.expires_at
    # A holder that was only slow still completes it whole (within the grace).
    whole, completed = complete(record, first.token, OK, clock.now, RETAIN)
    assert whole.outcome == Outcome.COMPLETED and isinstance(completed, Completed)
    assert claim(completed, "fp", clock.now, LOCK)[0].response == OK


def test_only_the_holder_extends(clock: FakeClock) -> None:
    first, record = claim(None, "fp", clock.now, LOCK)
    clock.advance(LOCK)
    _, record = claim(record, "fp", clock.now, LOCK)  # taken over
    late, after = extend(
        record, first.token, HEAD, clock.now, lock_timeout_ms=LOCK, retention_ms=RETAIN
    )
    assert late.outcome == Outcome.REFUSED and after is record
    assert (
        extend(None, 5, HEAD, clock.now, lock_timeout_ms=LOCK, retention_ms=RETAIN)[0].outcome
        == Outcome.REFUSED
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        "null",
        '{"v":2,"state":"in_flight"}',
        '{"v":1,"state":"lost","fp":"x"}',
        '{"v":1,"state":"in_flight","fp":"x","token":1,"locked_until":2}',
        '{"v":1,"state":"in_flight","fp":1,"token":1,"locked_until":2,"created_at":0}',
        '{"v":1,"state":"in_flight","fp":"x","token":true,"locked_until":2,"created_at":0}',
        '{"v":1,"state":"in_flight","fp":"x","token":-1,"locked_until":2,"created_at":0}',
        '{"v":1,"state":"completed","fp":"x","token":1,"completed_at":1,"expires_at":2}',
        '{"v":1,"state":"completed","fp":"x","token":1,"completed_at":1,"expires_at":2,'
        '"response":{"status":200,"headers":[["a"]],"body":null,"too_large":false}}',
        '{"v":1,"state":"completed","fp":"x","token":1,"completed_at":1,"expires_at":2,'
        '"response":{"status":200,"headers":[],"body":"!!","too_large":false}}',
        '{"v":1,"state":"completed","fp":"x","token":1,"completed_at":1,"expires_at":2,'
        '"response":{"status":200,"headers":[],"body":null,"too_large":"no"}}',
    ],
)
def test_malformed_records_raise_the_specific_error(text: str) -> None:
    with pytest.raises(IdempotencyRecordError):
        decode_record(text)


def test_a_duplicate_waits_until_the_holder_is_done_at_the_origins_at_most() -> None:
    # Claimed just now: the origins' deadline (plus a second to store) comes first.
    assert in_flight_wait_ms(60_000, 60_000, 30_000) == 31_000
    # Claimed 20 s ago: 11 s left of that.
    assert in_flight_wait_ms(40_000, 60_000, 30_000) == 11_000
    # Never past the lock's end (then the key may be taken over), never under a second.
    assert in_flight_wait_ms(5_000, 10_000, 30_000) == 5_000
    assert in_flight_wait_ms(29_500, 60_000, 30_000) == 1_000
    # Past the holder's deadline and still held: its request is over without an answer to
    # keep (a body cut off, an isolate gone): the claim holds until the lock ends.
    assert in_flight_wait_ms(20_000, 60_000, 30_000) == 20_000
    assert in_flight_wait_ms(400, 60_000, 30_000) == 1_000
