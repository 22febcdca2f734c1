"""A caller's tier, and the limits it has on a route.

The tier comes from a verified claim (``by = "jwt:plan"``) or from the caller's API key
record (``by = "kv:API_KEYS"``); a name that is no tier of ``plans`` is the ``default``
tier (a token from the issuer naming a plan the gateway does not know gets no better
than the default), and a caller without a valid token or key, on a route that lets it
through, the ``anonymous`` tier. A tier is exempt, or has limits on the route (its own,
its route group's, or the tier's), or leaves the route's own limits in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..ratelimit.rates import Limit
from .apikeys import ApiKeyRecord
from .settings import Tiers
from .tokens import claim_at


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request is from, as the identity stage found (on the exchange for the rate
    limit): a verified token's ``claims``, an API key's ``caller`` (its record's owner,
    else the key's hash), the ``tier`` and what it gives on the route; ``anonymous``
    when it has neither a valid token nor key and the route lets it through."""

    claims: Mapping[str, Any] | None = None
    caller: str = ""
    tier: TierLimits | None = None
    anonymous: bool = False


@dataclass(frozen=True, slots=True)
class TierLimits:
    """What a caller's tier means on one route."""

    tier: str
    exempt: bool = False
    limits: tuple[Limit, ...] = ()
    """Empty (and not exempt): the route's own limits."""
    leases: bool = False


def named_for(tier: str, limits: tuple[Limit, ...]) -> tuple[Limit, ...]:
    """``limits`` named for ``tier`` in ``RateLimit-Policy`` (``pro`` for one limit,
    ``pro.100-per-hour`` for each of several), so a client sees which plan it is on."""
    if len(limits) == 1:
        return (replace(limits[0], name=tier),)
    return tuple(replace(limit, name=f"{tier}.{limit.name}") for limit in limits)


def tier_name(
    tiers: Tiers,
    *,
    claims: Mapping[str, Any] | None = None,
    record: ApiKeyRecord | None = None,
) -> str:
    """The caller's tier: from its claim or its record, the default when it names none
    of ``plans``, the anonymous tier when it has neither."""
    if tiers.by == "jwt":
        if claims is None:
            return tiers.anonymous
        named = claim_at(claims, tiers.source)
    else:
        if record is None:
            return tiers.anonymous
        named = record.tier
    return named if named is not None and named in tiers.plans else tiers.default


def tier_limits(
    tiers: Tiers,
    route: str,
    group: str | None,
    *,
    claims: Mapping[str, Any] | None = None,
    record: ApiKeyRecord | None = None,
) -> TierLimits:
    """What the caller's tier (see :func:`tier_name`) gives it on ``route``; a record's
    own limits stand in for its tier's (never an exempt tier's: exemption is the tier's)."""
    name = tier_name(tiers, claims=claims, record=record)
    plan = tiers.plans[name]
    if plan.exempt:
        return TierLimits(name, exempt=True)
    own = record.own_limits() if record is not None and tiers.by == "kv" else ()
    if own:
        return TierLimits(name, limits=named_for(name, own), leases=plan.leases)
    return TierLimits(name, limits=plan.limits_for(route, group), leases=plan.leases)
