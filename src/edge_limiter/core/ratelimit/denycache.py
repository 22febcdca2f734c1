"""The deny cache: keys known to be over their limit, answered without a store call.

When the Durable Object denies a key, the isolate remembers the limits' states the object
decided on (the object sends them with a denial when they are small) until the instant the
request would be admitted again, or at most ``max_ttl_ms``. Until then a request for that
key is decided locally, with the same pure :func:`~.limiter.check_all` the object runs, on
those states: since a denied request consumes nothing, the object's state cannot have
changed through this isolate, so the local answer is the object's answer (the same
``Retry-After`` and rate-limit headers) and no request is ever admitted locally. Other
isolates can only use quota, never return it, except for refunds, resets and overrides,
which reach this isolate within ``max_ttl_ms``.

The cache is an LRU bounded by ``max_keys``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .decision import Decision

DEFAULT_MAX_KEYS = 10_000
DEFAULT_MAX_TTL_MS = 10_000


@dataclass(frozen=True, slots=True)
class Denied:
    """One remembered denial: the states the object decided on, or its decisions alone."""

    until: int
    denied_at: int
    rows: tuple[list[int] | None, ...] | None
    decisions: tuple[Decision, ...]


class DenyCache:
    """Keys over their limit, until they may pass again; see the module docstring."""

    def __init__(self, max_keys: int = DEFAULT_MAX_KEYS, max_ttl_ms: int = DEFAULT_MAX_TTL_MS):
        if max_keys < 1 or max_ttl_ms < 1:
            raise ValueError("a deny cache needs max_keys >= 1 and max_ttl_ms >= 1")
        self.max_keys = max_keys
        self.max_ttl_ms = max_ttl_ms
        self._entries: OrderedDict[Any, Denied] = OrderedDict()
        self.hits = 0
        self.generation = 0
        """How many times everything was dropped: whatever else this isolate remembers
        of denials (a lease holding's) holds only while it has not changed."""

    def remember(
        self,
        key: Any,
        now: int,
        decisions: tuple[Decision, ...],
        rows: tuple[list[int] | None, ...] | None,
    ) -> None:
        """A denial at ``now``: remember it until the denying limits admit again."""
        retry = max((d.retry_after for d in decisions if not d.allowed), default=0)
        if retry <= 0:
            return
        until = now + min(retry, self.max_ttl_ms)
        self._entries[key] = Denied(until, now, rows, decisions)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_keys:
            self._entries.popitem(last=False)

    def lookup(self, key: Any, now: int) -> Denied | None:
        """The remembered denial if it still holds at ``now`` (expired entries are dropped)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if now >= entry.until or now < entry.denied_at:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry

    def forget(self, key: Any) -> None:
        """Drop ``key`` (after a reset, a refund or a new override)."""
        self._entries.pop(key, None)

    def clear(self) -> None:
        """Drop everything."""
        self._entries.clear()
        self.generation += 1

    def __len__(self) -> int:
        return len(self._entries)


def shifted(decisions: tuple[Decision, ...], elapsed: int) -> tuple[Decision, ...]:
    """The decisions ``elapsed`` ms later, when the states behind them are not known."""
    out = []
    for d in decisions:
        reset = max(0, d.reset_after - elapsed)
        if d.allowed:
            out.append(Decision(True, d.limit, d.remaining, reset, 0, None, d.policy))
        else:
            retry = max(1, d.retry_after - elapsed)
            out.append(Decision(False, d.limit, d.remaining, reset, retry, d.reason, d.policy))
    return tuple(out)
