"""The rate-limit HTTP fields, computed from decisions.

Two header families are sent on every limited route's response:

- the legacy ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (delta seconds), with
  ``Retry-After`` (whole seconds, rounded up, at least 1) when denied;
- the IETF fields of draft-ietf-httpapi-ratelimit-headers-10, one item per limit::

      RateLimit-Policy: "10-per-second";q=10;w=1, "1000-per-hour";q=1000;w=3600
      RateLimit: "10-per-second";r=0;t=1, "1000-per-hour";r=998;t=3600

  ``q`` is the quota, ``w`` the window in seconds, ``r`` what remains and ``t`` the
  seconds until the quota resets. A limit with a burst admits ``burst`` at once and takes
  ``burst / rate`` to refill completely, so that is what its policy says:
  ``10/second`` with ``burst = 20`` is ``q=20;w=2``. For a policy that denied the request ``t`` is the
  time until it admits this request again, and ``Retry-After`` is the largest such
  ``t``: a client that honours either field never retries too early.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..caching.targeted import list_names
from ..ratelimit.decision import Decision

REASON_HEADER = "X-EdgeLimiter-Reason"
#: Fields the gateway adds to describe one client's state: never stored for a replay.
_GATEWAY_FIELDS = frozenset(
    {
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "ratelimit",
        "ratelimit-policy",
        REASON_HEADER.lower(),
        "x-cache",
    }
)


#: The names of those fields (lower case).
GATEWAY_FIELD_NAMES = _GATEWAY_FIELDS


def gateway_fields(fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Only the fields the gateway added for this client (rate-limit state, reason)."""
    return [(name, value) for name, value in fields if name.lower() in _GATEWAY_FIELDS]


def origin_fields(fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``fields`` without those the gateway added for one client (rate-limit state, cache
    status): what may be stored and replayed to others."""
    return [(name, value) for name, value in fields if name.lower() not in _GATEWAY_FIELDS]


def ceil_seconds(ms: int) -> int:
    """Milliseconds to whole seconds, rounded up."""
    return -(-ms // 1000)


def sf_string(value: str) -> str:
    """An RFC 8941 sf-string: quoted, with ``\\`` and ``"`` escaped."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def retry_after_seconds(decisions: Sequence[Decision]) -> int:
    """Seconds until every denying limit admits again; at least 1."""
    denied = [d.retry_after for d in decisions if not d.allowed]
    return max(1, ceil_seconds(max(denied, default=0)))


def _t_seconds(decision: Decision) -> int:
    if decision.allowed:
        return ceil_seconds(decision.reset_after)
    return max(1, ceil_seconds(decision.retry_after))


def policy_header(decisions: Sequence[Decision]) -> str:
    """The ``RateLimit-Policy`` field value."""
    return ", ".join(
        f"{sf_string(d.policy.name)};q={d.policy.capacity};w={d.policy.policy_window_seconds}"
        for d in decisions
        if d.policy is not None
    )


def ratelimit_header(decisions: Sequence[Decision]) -> str:
    """The ``RateLimit`` field value."""
    return ", ".join(
        f"{sf_string(d.policy.name)};r={d.remaining};t={_t_seconds(d)}"
        for d in decisions
        if d.policy is not None
    )


def rate_limit_headers(combined: Decision, decisions: Sequence[Decision]) -> list[tuple[str, str]]:
    """Every rate-limit header for one response, in a stable order.

    ``combined`` is the rule's overall decision; ``decisions`` has one entry per limit.
    A shadow decision is reported as it really stands (remaining 0) but never carries
    ``Retry-After``: the request was let through.
    """
    denied = not combined.allowed
    reset = ceil_seconds(combined.reset_after)
    headers = [
        ("X-RateLimit-Limit", str(combined.limit)),
        ("X-RateLimit-Remaining", str(combined.remaining)),
    ]
    if denied:
        retry = retry_after_seconds(decisions)
        headers.append(("X-RateLimit-Reset", str(max(reset, retry))))
        headers.append(("Retry-After", str(retry)))
    else:
        headers.append(("X-RateLimit-Reset", str(reset)))
    policy = policy_header(decisions)
    if policy:
        headers.append(("RateLimit-Policy", policy))
        headers.append(("RateLimit", ratelimit_header(decisions)))
    if combined.reason is not None:
        headers.append((REASON_HEADER, combined.reason.value))
    return headers


def with_origins_fields(
    ours: list[tuple[str, str]], theirs: Callable[[str], str | None]
) -> list[tuple[str, str]]:
    """``ours`` (:func:`rate_limit_headers` of an admitted request) to set on an answer
    whose origin may have rate-limit fields of its own (``theirs``: its field by name),
    so that neither is lost: the IETF fields are lists of policies, so the origin's come
    first and the gateway's follow; of the one-value ``X-RateLimit-*`` fields, the set
    with less remaining stays (the limit the client meets first)."""
    their_list = theirs("ratelimit")
    their_remaining = theirs("x-ratelimit-remaining")
    if their_list is None and their_remaining is None:
        return ours
    out = []
    keep_theirs = False
    if their_remaining is not None:
        mine = next((v for n, v in ours if n == "X-RateLimit-Remaining"), None)
        text = their_remaining.strip()
        # A whole set only: a client told Remaining alone would have no Limit or Reset.
        keep_theirs = (
            text.isdigit()
            and (mine is None or int(text) <= int(mine))
            and theirs("x-ratelimit-limit") is not None
        )
    their_policy = theirs("ratelimit-policy") if their_list is not None else None
    # A value that is not a well-formed list, joined to ours, would spoil ours too.
    before: dict[str, str | None] = {}
    their_names: set[str] = set()
    for field, value in (("RateLimit", their_list), ("RateLimit-Policy", their_policy)):
        names = list_names(value) if value is not None else None
        before[field] = value if names is not None else None
        their_names.update(names or ())
    renamed = _renamed(ours, their_names)
    for name, value in ours:
        if keep_theirs and name.startswith("X-RateLimit-"):
            continue
        sent = value
        if name in before:
            for old, new in renamed.items():
                sent = sent.replace(f"{sf_string(old)};", f"{sf_string(new)};")
        first = before.get(name)
        out.append((name, sent if first is None else f"{first}, {sent}"))
    return out


#: What a gateway policy's name gets when the origin's fields already use it.
RENAMED_SUFFIX = "-gateway"


def _renamed(ours: list[tuple[str, str]], taken: set[str]) -> dict[str, str]:
    """Our policy names the origin's lists already use, each with the name it is sent
    under instead (``<name>-gateway``, then ``-gateway-2`` ...): a client pairs a
    ``RateLimit`` item with its policy by name, so two policies must not share one."""
    policy = next((value for name, value in ours if name == "RateLimit-Policy"), None)
    mine = list_names(policy) if policy is not None else None
    if not mine or taken.isdisjoint(mine):
        return {}
    used = taken | set(mine)
    renamed = {}
    for name in mine:
        if name in taken:
            new, n = f"{name}{RENAMED_SUFFIX}", 1
            while new in used:
                n += 1
                new = f"{name}{RENAMED_SUFFIX}-{n}"
            used.add(new)
            renamed[name] = new
    return renamed


def violated_policies(decisions: Sequence[Decision]) -> list[str]:
    """Names of the limits that denied the request."""
    return [d.policy.name for d in decisions if not d.allowed and d.policy is not None]
