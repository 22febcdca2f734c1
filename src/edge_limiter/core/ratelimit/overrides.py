"""Per-key overrides: other limits for some keys, or none at all, set at run time.

An override is set through the admin API and kept in the Control Durable Object (strongly
consistent); every isolate holds a copy of the whole list, refreshed every few seconds, so
an override is in effect everywhere within the refresh interval plus the deny cache's
longest entry (see the README). Each has a reason and an optional expiry.

It applies to a route (or ``"*"``: every route) and to keys matching ``key``: the exact
key as the config check's ``--explain`` prints it (``header:x-api-key=premium_1``), or its
value alone for a one-part key (``premium_1``), and ``*`` matches any run of characters
(``premium_*``). A route's own overrides come before ``"*"``'s; within each, an exact key
before a pattern, and a longer pattern before a shorter one.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import unquote

from ..durations import parse_duration
from ..errors import DurationError, EdgeLimiterError, RateParseError
from ..validation import shown
from .algorithms import make_algorithm
from .rates import Limit, Rate, parse_rates

ALL_ROUTES = "*"
MAX_KEY_LENGTH = 512
MAX_REASON_LENGTH = 200
MAX_OVERRIDES = 1_000
#: How far ahead an override's expiry may be (ten years; without one it never expires):
#: a longer one is a mistake, and one past 2**53 ms is not even exact for JavaScript clients.
MAX_LIFETIME_DAYS = 3_650
MAX_LIFETIME_MS = MAX_LIFETIME_DAYS * 86_400_000
_NEVER_EXPIRES = "leave both expires_in and expires_at out for an override that does not expire"


class OverrideError(EdgeLimiterError, ValueError):
    """An override cannot be set as given; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class Override:
    """Other limits (or none: ``exempt``) for the keys matching ``key`` on ``route``."""

    id: str
    route: str
    key: str
    limits: tuple[Limit, ...]
    exempt: bool
    reason: str
    created_at: int
    expires_at: int | None = None

    @property
    def pattern(self) -> bool:
        return "*" in self.key

    def live(self, now: int) -> bool:
        return self.expires_at is None or now < self.expires_at

    def describe(self) -> dict[str, Any]:
        """Plain data for the admin API, the status page and storage."""
        return {
            "id": self.id,
            "route": self.route,
            "key": self.key,
            "limits": [[lim.rate.quota, lim.rate.window_ms] for lim in self.limits],
            # As a person reads (and the API takes) them: "100 per minute; 5000 per day".
            "rates": "; ".join(str(lim.rate) for lim in self.limits),
            "exempt": self.exempt,
            "reason": self.reason,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
        }


def parse_override(
    data: object,
    now: int,
    algorithms: Mapping[str, str],
    new_id: str | None = None,
    costs: Mapping[str, int] | None = None,
) -> Override:
    """An override from the admin API's JSON body; raises :class:`OverrideError`.

    ``algorithms`` maps each route name to its algorithm (the limits must suit it), and
    ``costs`` each route name to its cost: a limit smaller than a request's cost would deny
    every request for ever, so it is refused, as the config refuses it.
    """
    if not isinstance(data, Mapping):
        raise OverrideError("the body must be a JSON object with route, key, and limits or exempt")
    known = {"route", "key", "limits", "exempt", "reason", "expires_in", "expires_at"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise OverrideError(f"unknown field(s) {unknown} (known: {', '.join(sorted(known))})")
    route = data.get("route", ALL_ROUTES)
    if not isinstance(route, str) or (route != ALL_ROUTES and route not in algorithms):
        raise OverrideError(
            f"route must be one of {', '.join(sorted(algorithms))} or '*', got {shown(route)}"
        )
    key = data.get("key")
    if (
        not isinstance(key, str)
        or not key
        or len(key) > MAX_KEY_LENGTH
        # A tab may stand inside a header value (RFC 9110), so inside a request's key.
        or not key.replace("\t", " ").isprintable()
    ):
        raise OverrideError(
            f"key must be 1 to {MAX_KEY_LENGTH} printable characters, got {shown(key)}"
        )
    exempt = data.get("exempt", False)
    if not isinstance(exempt, bool):
        raise OverrideError(f"exempt must be true or false, got {shown(exempt)}")
    raw_limits = data.get("limits")
    if exempt == (raw_limits is not None):
        raise OverrideError("give either limits (e.g. '1000/minute') or exempt = true")
    limits: tuple[Limit, ...] = ()
    if raw_limits is not None:
        if not isinstance(raw_limits, str):
            raise OverrideError(
                f"limits must be a string like '1000/minute', got {shown(raw_limits)}"
            )
        try:
            limits = tuple(Limit(rate) for rate in parse_rates(raw_limits))
        except RateParseError as exc:
            raise OverrideError(str(exc)) from exc
        routes = list(algorithms) if route == ALL_ROUTES else [route]
        for name in routes:
            for limit in limits:
                try:
                    make_algorithm(algorithms[name], limit)
                except ValueError as exc:
                    raise OverrideError(f"for route {name!r}: {exc}") from exc
                cost = (costs or {}).get(name, 1)
                if cost > limit.capacity:
                    raise OverrideError(
                        f"for route {name!r}: {limit.rate} is below the route's cost of "
                        f"{cost} per request: no request could ever pass"
                    )
    reason = data.get("reason", "")
    if not isinstance(reason, str) or len(reason) > MAX_REASON_LENGTH:
        raise OverrideError(f"reason must be a string of at most {MAX_REASON_LENGTH} characters")
    expires_at = _expiry(data, now)
    return Override(
        new_id or secrets.token_hex(8), route, key, limits, exempt, reason, now, expires_at
    )


def _expiry(data: Mapping[str, Any], now: int) -> int | None:
    if data.get("expires_in") is not None and data.get("expires_at") is not None:
        raise OverrideError("give expires_in or expires_at, not both")
    if data.get("expires_in") is not None:
        try:
            lifetime = parse_duration(data["expires_in"], minimum_ms=1_000)
        except DurationError as exc:
            raise OverrideError(f"expires_in: {exc}") from exc
        if lifetime > MAX_LIFETIME_MS:
            raise OverrideError(
                f"expires_in: duration {data['expires_in']!r} is longer than "
                f"{MAX_LIFETIME_DAYS}d ({_NEVER_EXPIRES})"
            )
        return now + lifetime
    expires_at = data.get("expires_at")
    if expires_at is None:
        return None
    if isinstance(expires_at, bool) or not isinstance(expires_at, int) or expires_at <= now:
        raise OverrideError("expires_at must be a future time in epoch milliseconds")
    if expires_at > now + MAX_LIFETIME_MS:
        raise OverrideError(
            f"expires_at must be at most {MAX_LIFETIME_DAYS} days from now (epoch "
            f"milliseconds; {_NEVER_EXPIRES})"
        )
    return expires_at


def encode_overrides(overrides: Iterable[Override]) -> str:
    """The stored (and transferred) text of a list of overrides."""
    return json.dumps([o.describe() for o in overrides], separators=(",", ":"))


def decode_overrides(text: str) -> list[Override]:
    """Inverse of :func:`encode_overrides`; entries that cannot be read are dropped."""
    try:
        items = json.loads(text)
    except ValueError:
        return []
    out = []
    for item in items if isinstance(items, list) else []:
        try:
            limits = tuple(Limit(Rate(int(q), int(w))) for q, w in item["limits"])
            expires = item.get("expires_at")
            out.append(
                Override(
                    str(item["id"]),
                    str(item["route"]),
                    str(item["key"]),
                    limits,
                    bool(item["exempt"]),
                    str(item.get("reason", "")),
                    int(item["created_at"]),
                    None if expires is None else int(expires),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


def key_value(key: str) -> str | None:
    """The value of a one-part key (``header:x-api-key=premium_1`` -> ``premium_1``)."""
    if "|" in key or "=" not in key:
        return None
    return unquote(key.split("=", 1)[1])


class OverrideTable:
    """The live overrides, indexed for one lookup per request."""

    def __init__(self, overrides: Iterable[Override] = ()) -> None:
        self.overrides = tuple(overrides)
        self._exact: dict[tuple[str, str], Override] = {}
        self._patterns: dict[str, list[Override]] = {}
        for override in sorted(self.overrides, key=lambda o: o.created_at):
            if override.pattern:
                self._patterns.setdefault(override.route, []).append(override)
            else:
                self._exact[(override.route, override.key)] = override
        for patterns in self._patterns.values():
            patterns.sort(key=lambda o: -len(o.key))

    def __bool__(self) -> bool:
        return bool(self.overrides)

    def find(self, route: str, key: str, now: int) -> Override | None:
        """The override for ``key`` on ``route`` at ``now``, if any."""
        if not self.overrides:
            return None
        value = key_value(key)
        for scope in (route, ALL_ROUTES):
            for candidate in (key, value):
                if candidate is None:
                    continue
                found = self._exact.get((scope, candidate))
                if found is not None and found.live(now):
                    return found
            for override in self._patterns.get(scope, ()):
                if not override.live(now):
                    continue
                if fnmatchcase(key, override.key) or (
                    value is not None and fnmatchcase(value, override.key)
                ):
                    return override
        return None
