"""Request collapsing for a cached route (RFC 9111 section 4: a cache may collapse
requests): a miss being fetched from the origin leads, and requests for the same entry
meanwhile wait for its answer in the isolate instead of asking the origin again; a
finished fetch's stored answer lingers in memory while its KV write is on its way; a key
whose answer was not stored goes straight on for a while (Varnish's "hit-for-pass")."""

from __future__ import annotations

from collections import OrderedDict

from ..core.caching.entry import Entry, is_fresh
from ..core.http.messages import Progress
from .cache_entries import RECENT, Entries, note
from .ports import Services

#: How long requests for a key whose answer was not stored go to the origin without
#: waiting for each other (Varnish's "hit-for-pass").
PASS_FOR_MS = 60_000


#: A request waiting for another's answer looks again after this long, then twice as
#: long each time, up to :data:`POLL_MAX_S`.
POLL_FIRST_S = 0.005
POLL_MAX_S = 0.05


#: How long a finished fetch's stored answer still answers requests from memory: its KV
#: write lands after the response, and a request meanwhile would miss and ask again.
LINGER_MS = 2_000
#: The most body bytes of such answers held at once.
LINGER_MAX_BYTES = 8 * 1024 * 1024


class Leader:
    """A miss under way at the origin, and how it ended."""

    __slots__ = (
        "done",
        "failed",
        "finished_at",
        "progress_at",
        "request_fields",
        "started",
        "stored",
    )

    def __init__(self, started: int, request_fields: list[tuple[str, str]]) -> None:
        self.started = started
        self.request_fields = request_fields
        self.progress_at = started
        """When the last part of the answer arrived (its head, then each part of its body)."""
        self.done = False
        self.failed: int | None = None
        """The status when the origins failed it (a 5xx, or no answer: 502/504)."""
        self.finished_at = 0
        self.stored: Entry | None = None


class Collapsing:
    """One cached route's misses under way, and those just finished."""

    def __init__(self, services: Services, entries: Entries) -> None:
        self.services = services
        self.entries = entries
        self.leaders: dict[str, Leader] = {}
        """Misses being fetched from the origin, by base key: a request for the same key
        meanwhile waits for that answer instead of asking the origin again."""
        self.lingering: OrderedDict[str, Leader] = OrderedDict()
        """Finished fetches whose stored answer still answers from memory, oldest first."""
        self.lingering_bytes = 0
        self._passed: OrderedDict[str, int] = OrderedDict()
        """When each base key's answer last turned out not to be stored: requests for it
        go straight on for a while, rather than wait for each other."""

    def passed(self, base: str, now: int) -> None:
        """``base``'s answer was not stored: its next requests go on without waiting."""
        note(self._passed, base, now)

    def lead(
        self,
        key: str,
        base: str,
        request_fields: list[tuple[str, str]],
        now: int,
        timeout_ms: int,
    ) -> Leader | None:
        """Become the request whose answer the others for ``key`` (the base key, or the
        variant once the fields the answers vary on are known) wait for, unless one is
        already under way or the key's last answer was not stored (RFC 9111 section 4: a
        cache may collapse requests; one that cannot store the answer only makes them
        wait)."""
        passed = self._passed.get(base)
        if passed is not None and now - passed < PASS_FOR_MS:
            return None
        current = self.leaders.get(key)
        if current is not None and self.waitable(current, base, now, timeout_ms):
            return None
        self._sweep(now)
        if current is None and len(self.leaders) >= RECENT:
            return None  # that many misses under way: the rest go on as before
        leader = Leader(now, request_fields)
        self.leaders[key] = leader
        return leader

    def release(self, key: str, leader: Leader, stored: Entry | None) -> None:
        """The leader's answer is in (stored, or not): the requests waiting for it see it
        on their next look; a stored one stays for :data:`LINGER_MS`, while its KV write
        is on its way."""
        leader.stored = stored
        leader.finished_at = now = self.services.clock.now_ms()
        leader.done = True
        if self.leaders.get(key) is not leader:
            return
        if stored is None:
            del self.leaders[key]
            return
        before = self.lingering.pop(key, None)
        if before is not None and before.stored is not None:
            self.lingering_bytes -= len(before.stored.body)
        self.lingering[key] = leader
        self.lingering_bytes += len(stored.body)
        self._sweep(now)

    def _sweep(self, now: int) -> None:
        """Forget finished fetches past :data:`LINGER_MS`, and the oldest ones while their
        answers hold more than :data:`LINGER_MAX_BYTES` (oldest first: cheap per call)."""
        lingering = self.lingering
        while lingering:
            key, leader = next(iter(lingering.items()))
            if now - leader.finished_at <= LINGER_MS and self.lingering_bytes <= LINGER_MAX_BYTES:
                return
            del lingering[key]
            self.lingering_bytes -= len(leader.stored.body) if leader.stored else 0
            if self.leaders.get(key) is leader:
                del self.leaders[key]

    def waitable(self, leader: Leader, base: str, now: int, timeout_ms: int) -> bool:
        """Whether ``leader``'s answer is still worth waiting for: no write or purge of the
        URI since it was sent, it finished not long ago (or is still coming, with its last
        part within the route's timeout)."""
        if self.entries.purged_since(base, leader.started):
            return False
        if leader.done:
            stored = leader.stored
            return (
                stored is not None
                and now - leader.finished_at <= LINGER_MS
                and is_fresh(stored, now)
            )
        return now - leader.progress_at < timeout_ms + 1_000

    def progress(self, leader: Leader | None) -> Progress | None:
        """What the leader's body read reports each part to (a slow body is no dead one)."""
        if leader is None:
            return None
        clock = self.services.clock

        async def heard() -> None:
            leader.progress_at = clock.now_ms()

        return heard
