"""The Control Durable Object: the operator's shared state, its messages and its logic.

One object (named ``control``) holds the per-key overrides and the status page's counters.
The gateway validates an override (:func:`~.ratelimit.overrides.parse_override`) before it
sends it; the object only stores, lists (dropping expired ones) and removes. Two RPC
methods, each with its typed call and answer (:data:`OVERRIDES`, :data:`STATS`), and
:class:`SharedControl`, the object's logic over two rows of its storage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ProtocolError
from .objects import Method, Sql, SqlCell, json_object, malformed
from .ratelimit.overrides import MAX_OVERRIDES, Override, decode_overrides, encode_overrides
from .stats import StatsBatch, merge, summary

CONTROL_OBJECT = "control"
OVERRIDE_OPS = ("list", "put", "delete")
STATS_OPS = ("add", "get")


@dataclass(frozen=True, slots=True)
class OverridesCall:
    """List the overrides, ``put`` one (replacing any for the same route and key), or
    ``delete`` the one with ``id``."""

    op: str
    override: Override | None = None
    id: str = ""

    def __post_init__(self) -> None:
        if self.op not in OVERRIDE_OPS:
            raise ProtocolError(f"unknown overrides op {self.op!r}")
        if self.op == "put" and self.override is None:
            raise ProtocolError("put needs a valid override")

    def to_json(self) -> str:
        """Compact JSON text for the RPC call."""
        data: dict[str, Any] = {"op": self.op}
        if self.override is not None:
            data["override"] = self.override.describe()
        if self.op == "delete":
            data["id"] = self.id
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> OverridesCall:
        """Parse and validate; raises :class:`ProtocolError` naming what is wrong."""
        data = json_object(text, "overrides call")
        try:
            op = data["op"]
            override = None
            if op == "put":
                added = decode_overrides(json.dumps([data.get("override")]))
                override = added[0] if added else None
            return cls(op, override, str(data.get("id", "")))
        except ProtocolError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise malformed("overrides call", exc) from exc


@dataclass(frozen=True, slots=True)
class OverridesAnswer:
    """The live overrides after a call; what a ``put`` replaced; whether a ``delete``
    found its override; or why the call was refused (``error``: nothing changed)."""

    overrides: tuple[Override, ...] = ()
    replaced: tuple[str, ...] | None = None
    deleted: bool | None = None
    error: str = ""

    def describe(self) -> dict[str, Any]:
        """Plain data, as the admin API shows it (and the answer's text has it)."""
        if self.error:
            return {"error": self.error}
        data: dict[str, Any] = {}
        if self.deleted is not None:
            data["deleted"] = self.deleted
        data["overrides"] = [override.describe() for override in self.overrides]
        if self.replaced is not None:
            data["replaced"] = list(self.replaced)
        return data

    def to_json(self) -> str:
        """JSON text for the RPC answer."""
        return json.dumps(self.describe())

    @classmethod
    def from_json(cls, text: str) -> OverridesAnswer:
        """Parse an answer; raises :class:`ProtocolError` naming what is wrong (overrides
        that cannot be read are dropped, as the object drops them)."""
        data = json_object(text, "overrides answer")
        try:
            if "error" in data:
                return cls(error=str(data["error"]))
            listed = data["overrides"]
            if not isinstance(listed, list):
                raise ProtocolError(f"bad overrides in answer: {listed!r}")
            replaced = data.get("replaced")
            deleted = data.get("deleted")
            if deleted is not None and not isinstance(deleted, bool):
                raise ProtocolError(f"bad deleted flag in answer: {deleted!r}")
            return cls(
                tuple(decode_overrides(json.dumps(listed))),
                None if replaced is None else tuple(str(ident) for ident in replaced),
                deleted,
            )
        except ProtocolError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise malformed("overrides answer", exc) from exc


@dataclass(frozen=True, slots=True)
class StatsCall:
    """``add`` an isolate's batch of counters (as of ``at``), or ``get`` the summary."""

    op: str
    batch: Mapping[str, Any] | None = None
    """``add``: the batch as plain data (``StatsBatch.as_data``)."""

    def __post_init__(self) -> None:
        if self.op not in STATS_OPS:
            raise ProtocolError(f"unknown stats op {self.op!r}")
        if self.op == "add" and self.batch is None:
            raise ProtocolError("add needs a batch")

    @classmethod
    def add(cls, batch: StatsBatch, at: int) -> StatsCall:
        """The call that adds ``batch``, counted as of ``at``."""
        return cls("add", batch.as_data(at))

    def to_json(self) -> str:
        """Compact JSON text for the RPC call."""
        data: dict[str, Any] = {"op": self.op}
        if self.batch is not None:
            data["batch"] = dict(self.batch)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> StatsCall:
        """Parse and validate; raises :class:`ProtocolError` naming what is wrong."""
        data = json_object(text, "stats call")
        try:
            batch = data.get("batch")
            if batch is not None and not isinstance(batch, dict):
                raise ProtocolError(f"malformed stats batch: {batch!r}")
            return cls(data["op"], batch)
        except ProtocolError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise malformed("stats call", exc) from exc


@dataclass(frozen=True, slots=True)
class StatsAnswer:
    """The summary a ``get`` asked for (None: an ``add``, which answers that it is done)."""

    summary: Mapping[str, Any] | None = None

    def to_json(self) -> str:
        """JSON text for the RPC answer."""
        return '{"ok":true}' if self.summary is None else json.dumps(dict(self.summary))

    @classmethod
    def from_json(cls, text: str) -> StatsAnswer:
        """Parse an answer; raises :class:`ProtocolError` naming what is wrong."""
        data = json_object(text, "stats answer")
        return cls(None if data == {"ok": True} else data)


def apply_overrides_call(call_text: str, stored: str | None, now: int) -> tuple[str, str | None]:
    """Run one overrides call (``list``, ``put``, ``delete``): the answer and what to store."""
    call = OverridesCall.from_json(call_text)
    live = [o for o in decode_overrides(stored or "[]") if o.live(now)]
    if call.op == "list":
        return OverridesAnswer(tuple(live)).to_json(), encode_overrides(live)
    if call.op == "put" and call.override is not None:
        new = call.override
        # One override per route and key: a new one for the same pair replaces it (which
        # one applied would otherwise be the list's order, not what was asked last).
        replaced = [o.id for o in live if (o.route, o.key) == (new.route, new.key)]
        kept = [o for o in live if o.id != new.id and o.id not in replaced]
        if len(kept) >= MAX_OVERRIDES:
            refused = OverridesAnswer(error=f"at most {MAX_OVERRIDES} overrides")
            return refused.to_json(), encode_overrides(live)
        kept.append(new)
        answer = OverridesAnswer(tuple(kept), tuple(i for i in replaced if i != new.id))
        return answer.to_json(), encode_overrides(kept)
    kept = [o for o in live if o.id != call.id]
    answer = OverridesAnswer(tuple(kept), deleted=len(kept) != len(live))
    return answer.to_json(), encode_overrides(kept)


def apply_stats_call(call_text: str, stored: str | None, now: int) -> tuple[str, str | None]:
    """Run one stats call (``add`` a batch, ``get`` the summary)."""
    call = StatsCall.from_json(call_text)
    try:
        state: dict[str, Any] = json.loads(stored) if stored else {}
    except ValueError as exc:
        raise ProtocolError(f"malformed stats call: {exc}") from exc
    if call.op == "get":
        return StatsAnswer(summary(state, now)).to_json(), None
    try:
        state = merge(state, json.dumps(call.batch))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"malformed stats batch: {exc}") from exc
    return StatsAnswer().to_json(), json.dumps(state, separators=(",", ":"))


def _overrides_of(text: str, call: OverridesCall) -> OverridesAnswer:
    del call
    return OverridesAnswer.from_json(text)


def _stats_of(text: str, call: StatsCall) -> StatsAnswer:
    del call
    return StatsAnswer.from_json(text)


OVERRIDES: Method[OverridesCall, OverridesAnswer] = Method(
    "overrides", OverridesCall.to_json, _overrides_of
)
"""``Control.overrides`` (:mod:`edge_limiter.core.objects`)."""
STATS: Method[StatsCall, StatsAnswer] = Method("stats", StatsCall.to_json, _stats_of)
"""``Control.stats`` (:mod:`edge_limiter.core.objects`)."""


class SharedControl:
    """The Control Durable Object's logic: the overrides and the counters, one row each.

    Each method loads its row, runs its pure step and writes the row back, with nothing
    between the read and the write.
    """

    def __init__(self, sql: Sql) -> None:
        self.stored_overrides = SqlCell(sql, "control", "overrides")
        self.stored_stats = SqlCell(sql, "control", "stats")

    def overrides(self, payload: str, now: int) -> str:
        """List, set or remove overrides (an :class:`OverridesCall`'s text); the answer."""
        answer, stored = apply_overrides_call(payload, self.stored_overrides.get(), now)
        if stored is not None:
            self.stored_overrides.put(stored)
        return answer

    def stats(self, payload: str, now: int) -> str:
        """Add a batch of counters, or read the summary (a :class:`StatsCall`'s text)."""
        answer, stored = apply_stats_call(payload, self.stored_stats.get(), now)
        if stored is not None:
            self.stored_stats.put(stored)
        return answer
