"""The Control Durable Object's steps, as pure functions: overrides and counters.

One object (named ``control``) holds the per-key overrides and the status page's counters.
The gateway validates an override (:func:`~.overrides.parse_override`) before it sends it;
the object only stores, lists (dropping expired ones) and removes.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ProtocolError
from .ratelimit.overrides import MAX_OVERRIDES, decode_overrides, encode_overrides
from .stats import merge, summary

CONTROL_OBJECT = "control"


def apply_overrides_call(call_text: str, stored: str | None, now: int) -> tuple[str, str | None]:
    """Run one overrides call (``list``, ``put``, ``delete``): the answer and what to store."""
    try:
        call = json.loads(call_text)
        op = call["op"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"malformed overrides call: {exc}") from exc
    live = [o for o in decode_overrides(stored or "[]") if o.live(now)]
    if op == "list":
        return json.dumps({"overrides": json.loads(encode_overrides(live))}), encode_overrides(live)
    if op == "put":
        added = decode_overrides(json.dumps([call.get("override")]))
        if not added:
            raise ProtocolError("put needs a valid override")
        new = added[0]
        # One override per route and key: a new one for the same pair replaces it (which
        # one applied would otherwise be the list's order, not what was asked last).
        replaced = [o.id for o in live if (o.route, o.key) == (new.route, new.key)]
        kept = [o for o in live if o.id != new.id and o.id not in replaced]
        if len(kept) >= MAX_OVERRIDES:
            return json.dumps({"error": f"at most {MAX_OVERRIDES} overrides"}), encode_overrides(
                live
            )
        kept.append(new)
        text = encode_overrides(kept)
        answer = {"overrides": json.loads(text), "replaced": [i for i in replaced if i != new.id]}
        return json.dumps(answer), text
    if op == "delete":
        ident = str(call.get("id", ""))
        kept = [o for o in live if o.id != ident]
        text = encode_overrides(kept)
        answer = {"deleted": len(kept) != len(live), "overrides": json.loads(text)}
        return json.dumps(answer), text
    raise ProtocolError(f"unknown overrides op {op!r}")


def apply_stats_call(call_text: str, stored: str | None, now: int) -> tuple[str, str | None]:
    """Run one stats call (``add`` a batch, ``get`` the summary)."""
    try:
        call = json.loads(call_text)
        op = call["op"]
        state: dict[str, Any] = json.loads(stored) if stored else {}
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"malformed stats call: {exc}") from exc
    if op == "add":
        try:
            state = merge(state, json.dumps(call["batch"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"malformed stats batch: {exc}") from exc
        return '{"ok":true}', json.dumps(state, separators=(",", ":"))
    if op == "get":
        return json.dumps(summary(state, now)), None
    raise ProtocolError(f"unknown stats op {op!r}")
