"""Log files as one stream of requests in time order, in bounded memory.

Each file is read as it streams (gzip is told by its first bytes, not its name), its
format detected from its first lines unless one is given. Lines a reader refuses are
counted, the first ten kept with their file and line number. Lines may come a little out
of order (several workers write one log, each line stamped when its request *began*):
each file's lines are put in order within :data:`REORDER_WINDOW_MS` of the latest time
seen; a line older than that comes too late to be replayed in its place and is counted
and reported, not replayed. The files are then merged by time (logs of several servers
for the same day replay as one stream).
"""

from __future__ import annotations

import gzip
import heapq
import io
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .formats import DETECTED, NAMES, BadLine, LogFormat, named_format, skipped
from .records import LogRecord

#: How far back in time a line may come and still be replayed in its place.
REORDER_WINDOW_MS = 60_000
#: Lines read to detect a file's format.
SNIFF_LINES = 20
#: Lines longer than this are malformed (and not parsed).
MAX_LINE = 64 * 1024
#: How many problem lines are reported with their numbers.
SHOWN_PROBLEMS = 10


class LogError(Exception):
    """A log that cannot be read at all (missing, unreadable, of no known format)."""


@dataclass
class Reading:
    """What reading the logs found besides the requests."""

    lines: int = 0
    """Lines read (blank ones not counted)."""
    records: int = 0
    malformed: int = 0
    malformed_shown: list[str] = field(default_factory=list)
    """``file:line: why`` for the first :data:`SHOWN_PROBLEMS`."""
    skipped: int = 0
    """Lines that are no request (the gateway's lines other than decisions)."""
    late: int = 0
    """Lines further out of order than the window: not replayed."""
    late_shown: list[str] = field(default_factory=list)
    formats: dict[str, str] = field(default_factory=dict)
    """File -> the format read."""
    window_ms: int = REORDER_WINDOW_MS

    def bad(self, where: str, why: str) -> None:
        self.malformed += 1
        if len(self.malformed_shown) < SHOWN_PROBLEMS:
            self.malformed_shown.append(f"{where}: {why}")


def _open(path: Path) -> IO[str]:
    """A text stream of ``path``, gunzipped when it starts as gzip does."""
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise LogError(f"{path}: {exc.strerror or exc}") from None
    if raw.peek(2)[:2] == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw), encoding="utf-8", errors="replace")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def detect(sample: list[str], host: str) -> LogFormat | None:
    """The format that reads most of ``sample`` (and at least half of it), if any."""
    best: tuple[int, LogFormat] | None = None
    for name in DETECTED:
        reader = named_format(name, host)
        read = 0
        for number, line in enumerate(sample, 1):
            try:
                reader.parse(line, number)
            except BadLine as exc:
                read += skipped(exc)  # a line of the format, if no request
                continue
            read += 1
        if read and read * 2 >= len(sample) and (best is None or read > best[0]):
            best = (read, reader)
    return best[1] if best else None


def _lines(stream: IO[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(stream, 1):
        text = line.rstrip("\r\n")
        if text.strip():
            yield number, text


def _records(path: Path, given: str | None, host: str, reading: Reading) -> Iterator[LogRecord]:
    """``path``'s requests in the order of its lines."""
    with _open(path) as stream:
        lines = _lines(stream)
        try:
            head = list(itertools.islice(lines, SNIFF_LINES))
        except (OSError, EOFError) as exc:
            raise LogError(f"{path}: cannot be read ({exc})") from None
        if given is not None:
            reader = named_format(given, host)
        else:
            found = detect([text for _, text in head if len(text) <= MAX_LINE], host)
            if found is None:
                if not head:
                    reading.formats[str(path)] = "empty"
                    return
                raise LogError(
                    f"{path}: not a log this reads; tried {', '.join(NAMES[:-1])} "
                    f"(give --format json:... for other JSON lines)"
                )
            reader = found
        reading.formats[str(path)] = reader.name
        name = path.name
        try:
            for number, text in _chain(head, lines):
                reading.lines += 1
                if len(text) > MAX_LINE:
                    reading.bad(f"{name}:{number}", f"longer than {MAX_LINE} characters")
                    continue
                try:
                    record = reader.parse(text, number)
                except BadLine as exc:
                    if skipped(exc):
                        reading.skipped += 1
                    else:
                        reading.bad(f"{name}:{number}", str(exc))
                    continue
                reading.records += 1
                yield record
        except (OSError, EOFError) as exc:
            reading.bad(f"{name}", f"reading stopped: {exc}")


def _chain(
    head: list[tuple[int, str]], rest: Iterator[tuple[int, str]]
) -> Iterator[tuple[int, str]]:
    yield from head
    yield from rest


def _in_order(
    records: Iterator[LogRecord], window_ms: int, name: str, index: int, reading: Reading
) -> Iterator[tuple[int, int, int, LogRecord]]:
    """``records`` sorted by time within ``window_ms`` (then by file ``index`` and line:
    the merge's order); later ones counted as late."""
    heap: list[tuple[int, int, int, LogRecord]] = []
    newest = None
    released = None  # the time of the last record let out
    for seq, record in enumerate(records):
        at = record.at_ms
        if released is not None and at < released:
            reading.late += 1
            if len(reading.late_shown) < SHOWN_PROBLEMS:
                reading.late_shown.append(
                    f"{name}:{record.number}: {released - at} ms before a line already replayed"
                )
            continue
        heapq.heappush(heap, (at, index, seq, record))
        if newest is None or at > newest:
            newest = at
        while heap and heap[0][0] <= newest - window_ms:
            item = heapq.heappop(heap)
            released = item[0]
            yield item
    while heap:
        yield heapq.heappop(heap)


def read_logs(
    paths: list[Path],
    *,
    format: str | None = None,
    host: str = "",
    window_ms: int = REORDER_WINDOW_MS,
    reading: Reading | None = None,
) -> tuple[Iterator[LogRecord], Reading]:
    """Every request of ``paths`` in time order, and what reading them found (filled as
    the stream is consumed). Raises :class:`LogError` for a file that cannot be opened or
    whose format is none of those tried; ValueError for a bad ``format``."""
    if format is not None:
        named_format(format, host)  # a bad spec is refused before anything is read
    found = reading or Reading(window_ms=window_ms)
    streams = []
    for index, path in enumerate(paths):
        if not path.is_file():
            raise LogError(f"{path}: no such file")
        records = _records(path, format, host, found)
        streams.append(_in_order(records, window_ms, path.name, index, found))
    merged = heapq.merge(*streams) if len(streams) > 1 else streams[0] if streams else iter(())
    return (item[3] for item in merged), found
