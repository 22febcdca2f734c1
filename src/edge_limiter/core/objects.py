"""The one mechanism every Durable Object of the gateway follows.

Four objects hold the state isolates share: the rate limiter (one per route and key),
the idempotency records (one per key of a caller), the origins' breakers (one per
origin) and the control object (overrides and counters). Each is built the same way:

- **Typed messages with one codec.** Every call is a typed request and a typed answer,
  each with ``to_json`` and ``from_json`` beside the object's logic in the core; a
  :class:`Method` names the object's RPC method and pairs the two.
- **One logic class over a small storage port.** The object's whole behaviour is a
  class in the core over :class:`Sql` (SQLite as Durable Objects have it), taking the
  request's text and the clock (``now``) and answering text: ``KeyStore.decide``
  (:mod:`.ratelimit.keystore`), ``RecordStore.call`` (:mod:`.idempotency.protocol`),
  ``SharedBreaker.sync`` (:mod:`.resilience.shared`), ``SharedControl.overrides`` and
  ``.stats`` (:mod:`.control`).
- **A thin runtime shell.** The class the Worker exports (``durable_objects/``) builds
  the logic over the platform's storage adapter (:mod:`edge_limiter.platform.storage`)
  and hands it each call with the clock; it arms the alarms the logic asks for.
- **One twin.** Tests and the simulator (:mod:`edge_limiter.testing`) drive the same
  logic class over SQLite, through the same codec, and so does the isolate's binding
  (:mod:`edge_limiter.platform.bindings`) through the runtime: the gateway's ports take
  and return the typed messages on both. A method may also name the logic's step on the
  typed messages (:attr:`Method.typed`): what the codec's round trip gives, without the
  text, for a twin that runs many calls (the replay); the tests check the two agree.

Nothing here touches the runtime: pure and standard-library only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .errors import ProtocolError

Req = TypeVar("Req")
Ans = TypeVar("Ans")


class Sql(Protocol):
    """The SQL API of a Durable Object's storage, as the objects' logic uses it."""

    def run(self, query: str, *args: Any) -> None:
        """Execute a statement that returns no rows."""

    def rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        """Execute a query; its rows as dicts (a column's SQL NULL as ``None``)."""


class SqlCell:
    """One text value kept in a table of its own, as row ``key`` (the objects that store
    one value: a breaker's state, an idempotency record, each of the control object's
    lists). The table is made on first use."""

    def __init__(self, sql: Sql, table: str, key: int | str = 1) -> None:
        kind = "INTEGER" if isinstance(key, int) else "TEXT"
        column = "id" if isinstance(key, int) else "name"
        sql.run(
            f"CREATE TABLE IF NOT EXISTS {table} ({column} {kind} PRIMARY KEY, value TEXT NOT NULL)"
        )
        self.sql = sql
        self.key = key
        self._get = f"SELECT value FROM {table} WHERE {column} = ?"
        self._put = (
            f"INSERT INTO {table} ({column}, value) VALUES (?, ?) "
            f"ON CONFLICT({column}) DO UPDATE SET value = excluded.value"
        )
        self._delete = f"DELETE FROM {table} WHERE {column} = ?"

    def get(self) -> str | None:
        """The value (None: none stored)."""
        rows = self.sql.rows(self._get, self.key)
        return None if not rows or rows[0]["value"] is None else str(rows[0]["value"])

    def put(self, value: str) -> None:
        self.sql.run(self._put, self.key, value)

    def delete(self) -> None:
        self.sql.run(self._delete, self.key)


@dataclass(frozen=True, slots=True)
class Method(Generic[Req, Ans]):
    """One RPC method of a Durable Object and its codec: how the isolate's request goes
    out as text and how the object's text answer comes back (``decode`` is given the
    request too: an answer may be read in its terms, as a rate limiter's decisions are
    read against the request's limits)."""

    name: str
    encode: Callable[[Req], str]
    decode: Callable[[str, Req], Ans]
    typed: str = ""
    """The logic's method that takes the typed request (and ``now``) and answers exactly
    what ``decode(<name>(encode(request), now), request)`` would, without the text (empty:
    none). Only an in-memory twin calls it (the runtime's calls are text)."""


def call_text(logic: Any, method: Method[Any, Any], text: str, now: int) -> str:
    """Hand one call's text to the object's logic (its method of the same name)."""
    step: Callable[[str, int], str] = getattr(logic, method.name)
    return step(text, now)


def call_typed(logic: Any, method: Method[Req, Ans], request: Req, now: int) -> Ans:
    """One call on the object's logic: its typed step where the method names one, else
    through the codec as the runtime calls it."""
    if method.typed:
        step: Callable[[Req, int], Ans] = getattr(logic, method.typed)
        return step(request, now)
    return method.decode(call_text(logic, method, method.encode(request), now), request)


def json_object(text: str, what: str) -> dict[str, Any]:
    """The JSON object a message's text holds; raises :class:`ProtocolError` saying
    ``what`` the text was meant to be when it is not JSON, or not an object."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ProtocolError(f"malformed {what}: {exc}") from exc
    if not isinstance(data, dict):
        raise ProtocolError(f"a {what} must be a JSON object, got {str(text)[:80]!r}")
    return data


def malformed(what: str, exc: Exception) -> ProtocolError:
    """The error for a ``what`` that cannot be read, naming why: a missing field by its
    name, else what the reader said."""
    if isinstance(exc, KeyError):
        return ProtocolError(f"malformed {what}: missing field {exc.args[0]!r}")
    return ProtocolError(f"malformed {what}: {exc}")
