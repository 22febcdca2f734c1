"""The one result type every algorithm and the multi-limit check return."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from .rates import Limit


class Reason(StrEnum):
    """Why a decision came out the way it did (``None`` on a plain allow)."""

    LIMITED = "limited"
    """Denied: the limit is exhausted."""
    SHADOW = "shadow"
    """Would have been denied, but the route is in shadow mode: allowed and reported."""
    STORE_UNAVAILABLE = "store_unavailable"
    """The counter store could not be reached; the route's failure policy decided."""


class Decision(NamedTuple):
    """The outcome of one check against one limit (or the combined outcome of a rule).

    Times are integer milliseconds relative to the ``now`` the check was made with.
    ``limit`` is the limit's capacity (its burst, or its quota) and ``policy`` the limit the
    decision is about (its name and numbers go into the HTTP fields).
    ``remaining`` is what is left *after* this request; ``reset_after`` is how long until
    the limit is fully replenished; ``retry_after`` is how long until a request of the same
    cost would be admitted (0 when allowed). None of them is ever negative.

    A named tuple rather than a dataclass: one is made for every limit of every request,
    and a tuple is several times cheaper to build.
    """

    allowed: bool
    limit: int
    remaining: int
    reset_after: int
    retry_after: int
    reason: Reason | None = None
    policy: Limit | None = None
