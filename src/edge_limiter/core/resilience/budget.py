"""A retry budget: retries may add at most a fixed share to the traffic an origin sees.

Without one, an outage multiplies load: every request that fails is tried again, and the
origin gets ``attempts`` times the traffic just when it can least take it. The budget
allows, over the last ``window_ms``, at most ``ratio`` retries per request noted plus a
small floor of ``min_per_second`` retries per second, so a quiet route can still retry.

Requests and retries are counted in buckets of ``bucket_ms``; the window is the current
bucket and the ``window_ms / bucket_ms - 1`` before it. With ``floor = min_per_second *
window_ms / 1000``, this guarantees:

* whenever a retry is granted at ``t``, the retries granted in the last
  ``window_ms - bucket_ms`` (it included) are at most ``ratio`` times the requests noted
  in the last ``window_ms``, plus ``floor``;
* so over any stretch of ``window_ms - bucket_ms``, the retries are at most ``ratio``
  times the requests noted in it and in the ``window_ms`` before it, plus ``floor``.
  (Requests earn retries that may be spent a little later, so no sliding budget can
  bound a stretch by its own requests alone.)

Call :meth:`RetryBudget.note_request` once per incoming request (not per attempt), so
retries never fund further retries. Times are integer ms and should not go backwards; a
``now`` older than the newest bucket counts into that bucket.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import isfinite

from ..errors import StateError
from ..validation import is_int

DEFAULT_WINDOW_MS = 10_000
DEFAULT_BUCKET_MS = 1_000
MAX_BUCKETS = 1_000

# Exact integer arithmetic: the ratio in parts per million, a second in ms.
_PPM = 1_000_000
_SECOND_MS = 1_000


@dataclass(frozen=True, slots=True)
class RetryBudgetState:
    """Counts per bucket, oldest first: ``(bucket index, requests, retries)``.

    The index is ``now // bucket_ms``; buckets older than the window are dropped on every
    step, so the state never holds more than ``window_ms / bucket_ms`` entries.
    """

    buckets: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class RetryBudget:
    """The budget's rules. Pure: every method takes ``now`` and returns a new state."""

    ratio: float
    min_per_second: int = 1
    window_ms: int = DEFAULT_WINDOW_MS
    bucket_ms: int = DEFAULT_BUCKET_MS

    def __post_init__(self) -> None:
        if not isfinite(self.ratio) or self.ratio < 0:
            raise ValueError(f"ratio must be a finite number >= 0, got {self.ratio!r}")
        if not is_int(self.min_per_second) or self.min_per_second < 0:
            raise ValueError(f"min_per_second must be an int >= 0, got {self.min_per_second!r}")
        if self.bucket_ms < 1 or self.window_ms < self.bucket_ms:
            raise ValueError(f"need 1 <= bucket_ms <= window_ms, got {self.bucket_ms}")
        if self.window_ms % self.bucket_ms or self.window_ms // self.bucket_ms > MAX_BUCKETS:
            raise ValueError(
                f"window_ms must be a multiple of bucket_ms, at most {MAX_BUCKETS} buckets"
            )

    @property
    def ratio_ppm(self) -> int:
        """The ratio in parts per million: what the arithmetic actually uses."""
        return round(self.ratio * _PPM)

    @property
    def floor(self) -> float:
        """Retries allowed per window whatever the traffic: ``min_per_second`` over the window."""
        return self.min_per_second * self.window_ms / _SECOND_MS

    def _current(self, state: RetryBudgetState, now: int) -> tuple[list[tuple[int, int, int]], int]:
        """The buckets still inside the window at ``now``, and the index to count into."""
        index = now // self.bucket_ms
        if state.buckets and state.buckets[-1][0] > index:
            index = state.buckets[-1][0]  # the clock went back: count into the newest bucket
        oldest = index - self.window_ms // self.bucket_ms + 1
        return [b for b in state.buckets if b[0] >= oldest], index

    @staticmethod
    def _add(
        buckets: list[tuple[int, int, int]], index: int, requests: int, retries: int
    ) -> RetryBudgetState:
        if buckets and buckets[-1][0] == index:
            _, old_requests, old_retries = buckets[-1]
            buckets[-1] = (index, old_requests + requests, old_retries + retries)
        else:
            buckets.append((index, requests, retries))
        return RetryBudgetState(tuple(buckets))

    def _scaled_allowance(self, requests: int) -> int:
        """Retries allowed for ``requests`` in the window, times ``_PPM * _SECOND_MS``."""
        return self.ratio_ppm * requests * _SECOND_MS + self.min_per_second * self.window_ms * _PPM

    def note_request(self, state: RetryBudgetState, now: int) -> RetryBudgetState:
        """Count one incoming request at ``now`` (it earns ``ratio`` of a retry)."""
        buckets, index = self._current(state, now)
        return self._add(buckets, index, 1, 0)

    def try_spend(self, state: RetryBudgetState, now: int) -> tuple[bool, RetryBudgetState]:
        """Spend one retry at ``now`` if the window allows it; the answer and the new state."""
        buckets, index = self._current(state, now)
        requests = sum(b[1] for b in buckets)
        retries = sum(b[2] for b in buckets)
        if (retries + 1) * _PPM * _SECOND_MS > self._scaled_allowance(requests):
            return False, RetryBudgetState(tuple(buckets))
        return True, self._add(buckets, index, 0, 1)

    def available(self, state: RetryBudgetState, now: int) -> int:
        """How many retries could be spent at ``now`` (for metrics and tests)."""
        buckets, _ = self._current(state, now)
        requests = sum(b[1] for b in buckets)
        retries = sum(b[2] for b in buckets)
        return max(0, self._scaled_allowance(requests) // (_PPM * _SECOND_MS) - retries)


def encode_budget(state: RetryBudgetState) -> list[list[int]]:
    """The state as a JSON-able list of ``[index, requests, retries]``."""
    return [list(bucket) for bucket in state.buckets]


def decode_budget(data: object) -> RetryBudgetState:
    """Inverse of :func:`encode_budget`; raises :class:`StateError` on anything else."""
    if not isinstance(data, (list, tuple)):
        raise StateError(f"retry budget state must be a list, got {type(data).__name__}")
    buckets: list[tuple[int, int, int]] = []
    for item in data:
        if (
            not isinstance(item, (list, tuple))
            or len(item) != 3
            or not all(is_int(v) and v >= 0 for v in item)
        ):
            raise StateError(f"retry budget bucket must be 3 ints >= 0, got {item!r}")
        if buckets and item[0] <= buckets[-1][0]:
            raise StateError("retry budget buckets must be in increasing order")
        buckets.append((int(item[0]), int(item[1]), int(item[2])))
    return RetryBudgetState(tuple(buckets))
