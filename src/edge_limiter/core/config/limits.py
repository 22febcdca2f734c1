"""The schema of a route's rate-limit fields (``limits``, ``algorithm``, ``burst``,
``cost``, ``leases``, ...), a limit's table and a ``leases`` table, and their parsers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import RateParseError
from ..ratelimit.algorithms import ALGORITHMS, Leasable, make_algorithm
from ..ratelimit.leases.plan import plans
from ..ratelimit.leases.policy import LEASABLE, default_ttl, lease_reserve_ok
from ..ratelimit.protocol import algorithm_of
from ..ratelimit.rates import MAX_QUOTA, Limit, Rate, parse_rate, parse_rates
from ..validation import Problems, shown
from .fields import Choice, Duration, Flag, Hand, Integer, Sub, Text
from .keys import KEY_FIELDS
from .model import Route
from .table import Reader, Table

DEFAULT_ALGORITHM = "sliding_window"
POLICY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Write-behind's interval bounds what a restart of a key's object may forget.
MAX_WRITE_BEHIND_MS = 10_000
#: A lease longer than this only makes its units sit longer in an isolate that went away.
MAX_LEASE_TTL_MS = 60_000

#: Other names of the algorithms, and what to write instead.
ALGORITHM_HINTS = {
    "leaky_bucket": "a leaky bucket as a meter, as nginx's limit_req with nodelay, is 'gcra'",
    "moving_window": "the limits library's moving window is 'sliding_log'",
    "sliding_window_log": "write 'sliding_log'",
    "sliding_window_counter": "write 'sliding_window'",
    "fixed_window_counter": "write 'fixed_window'",
    "fixed": "write 'fixed_window'",
    "sliding": "write 'sliding_window' (a weighted counter) or 'sliding_log' (exact)",
    "token": "write 'token_bucket'",
}

# fmt: off
_BURST = Integer("burst", 1, MAX_QUOTA, rule=f"an integer from 1 to {MAX_QUOTA}",
                 null_is_absent=True, default_text="the quota", attr=None, example=20,
                 example_with={"algorithm": "token_bucket"})

LIMIT = Table("limits[]", "A limit written as a table, in a route's `limits` list.", (
    Hand("rate", "rate", required=True, example="10/second",
         doc='The limit, as a string: `"10/second"`, `"100 per 10 seconds"`.'),
    Text("name", POLICY_NAME_RE.pattern,
         "1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit",
         default="", default_text="from the rate (`10-per-second`)", example="burst",
         doc="The limit's name in the IETF `RateLimit-Policy` field; unique in the route."),
    _BURST.but(doc="This limit's bucket size (`token_bucket`, `gcra`)."),
    Choice("algorithm", tuple(ALGORITHMS), hints=ALGORITHM_HINTS, default="",
           default_text="the route's", example="fixed_window",
           doc="Count this limit with an algorithm of its own."),
))

LEASES = Table("leases", (
    "Token leases: isolates admit from units the key's Durable Object granted ahead, for keys "
    "hot enough to approach one object's throughput. Never more than the limit; the cost is "
    "some under-admission while units sit in leases."
), (
    Duration("ttl", 1, MAX_LEASE_TTL_MS, default_text='"1s" for the windows, "500ms" for the '
             'buckets', example="250ms",
             doc="How long a lease lasts. A bucket keeps a ttl of refill in reserve for the lag "
                 "between grant and use: a ttl whose reserve would eat the burst is refused, a "
                 "reserve of a tenth of it or more draws a warning."),
))
# fmt: on


def _limits_shown(route: Route) -> list[dict[str, Any]]:
    """The route's limits as plain data: name, rate, bucket size, own algorithm."""
    return [
        {"name": lim.name, "rate": str(lim.rate), "capacity": lim.capacity}
        | ({"algorithm": lim.algorithm} if lim.algorithm else {})
        for lim in route.limits.limits
    ]


def _leases_shown(route: Route) -> dict[str, Any] | None:
    """The route's leases: their ttl, and whether its window is shared out in plans."""
    limits = route.limits
    if not limits.lease_ttl_ms:
        return None
    windows = [lim.rate.window_ms for lim in limits.limits]
    cls = ALGORITHMS[limits.algorithm]
    makes_plans = issubclass(cls, Leasable) and cls.lease_plans
    planned = plans(makes_plans, windows, limits.lease_ttl_ms)
    return {"ttl_ms": limits.lease_ttl_ms, "planned": planned}


#: The route's fields that say what it counts and how, in the route table's order.
# fmt: off
RATE_LIMIT_FIELDS = (
    Sub("limits", LIMIT, many="list", type="rates, or a list of rates and limit tables",
        required=True, example="10/second; 1000/hour", show=_limits_shown,
        doc='Every limit must admit a request: `"10/second; 1000/hour"` (`,` or `|` separate '
            'too), `"100 per 10 seconds"`, `"10000/week"` (units second, minute, hour, day, '
            "week; a month is written in days), or a list of such strings and limit tables. No "
            "thousands separator: `1,000/hour` is two limits."),
    Choice("algorithm", tuple(ALGORITHMS), hints=ALGORITHM_HINTS, default=DEFAULT_ALGORITHM,
           attr="limits.algorithm", example="token_bucket",
           doc="How the route counts: `sliding_window` (a weighted counter), `sliding_log` "
               "(exact), `fixed_window`, `token_bucket` or `gcra` (buckets that take a "
               "`burst`)."),
    _BURST.but(doc="The bucket size of the limit with the shortest window (`token_bucket`, "
                        "`gcra`); every other limit's bucket is its quota. Per limit: `burst` in "
                        "its table."),
    *KEY_FIELDS,
    Integer("cost", 1, rule="a positive integer", default=1, unit="units", attr="limits.cost",
            example=10,
            doc="The units each request consumes; it must fit in the smallest limit. The "
                "rate-limit fields count units, so a request of cost 2 is denied while "
                "`Remaining` says 1."),
    Flag("shadow", default=False, attr="limits.shadow", example=True,
         doc="Count and report (`X-EdgeLimiter-Reason: shadow`, a log line), never block. A "
             "top-level `shadow = true` covers every route (`false` here is then a warning)."),
    Duration("write_behind", 1, MAX_WRITE_BEHIND_MS, default=0, null_is_absent=True,
             default_text="off", attr="limits.write_behind_ms", example="50ms",
             doc="The key's Durable Object answers from memory and writes its counters at most "
                 "this long after, for latency and one hot key's throughput; a restart of the "
                 "object forgets the admissions of at most that last interval. Off, every "
                 "decision is stored before the answer leaves."),
    Sub("leases", LEASES, type="boolean or table", null_is_absent=True, default_text="off",
        example=True, show=_leases_shown,
        doc='`true` or `{ ttl = "500ms" }`: isolates admit from units the key\'s object granted '
            "ahead (`token_bucket`, `gcra`, `fixed_window`, `sliding_window`; not on a shadow "
            "route)."),
    Choice("on_store_error", ("open", "closed"), default="open", example="closed",
           show=lambda route: "open" if route.failure.fail_open else "closed",
           doc="When the key's Durable Object fails or exceeds `store_timeout_ms`: `open` "
               "forwards with `X-EdgeLimiter-Reason: store_unavailable`, `closed` answers `503` "
               "(a shadow route forwards either way)."),
)
# fmt: on


def _limit_table(item: Mapping[str, Any], where: str, problems: Problems) -> Limit | None:
    before = len(problems)
    got = Reader(LIMIT, item, where, problems)
    try:
        rate = parse_rate(item.get("rate"))
    except RateParseError as exc:
        problems.add(f"{where}.rate", str(exc))
        return None
    name = got.text("name")
    burst = got.optional_integer("burst")
    algorithm = got.text("algorithm")
    if len(problems) != before:
        return None
    return Limit(rate, burst, name, algorithm)


def parse_limits(value: object, where: str, problems: Problems) -> list[Limit]:
    """``"10/second; 1000/hour"``, a list of such strings, or tables ``{rate, name, burst}``."""
    if isinstance(value, str):
        try:
            return [Limit(rate) for rate in parse_rates(value)]
        except RateParseError as exc:
            problems.add(where, str(exc))
            return []
    if not isinstance(value, list) or not value:
        problems.add(
            where,
            "must be a string like '10/second; 1000/hour' or a list of such strings or "
            f"tables {{ rate, burst, name }}, got {shown(value)}",
        )
        return []
    limits: list[Limit] = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        if isinstance(item, str):
            try:
                limits.extend(Limit(rate) for rate in parse_rates(item))
            except RateParseError as exc:
                problems.add(at, str(exc))
        elif isinstance(item, Mapping):
            limit = _limit_table(item, at, problems)
            if limit is not None:
                limits.append(limit)
        else:
            problems.add(
                at, f"must be a rate string or a table {{ rate, burst, name }}, got {shown(item)}"
            )
    by_window: dict[int, list[Limit]] = {}
    for limit in limits:
        by_window.setdefault(limit.rate.window_ms, []).append(limit)
    for same in by_window.values():
        if len(same) > 1:
            written = " and ".join(str(limit) for limit in same)
            problems.add(where, f"two limits over the same window ({written})")
    names = [limit.name for limit in limits]
    if len(set(names)) != len(names):
        problems.add(where, f"policy names must be unique, got {names}")
    return limits


def never_binding(limits: list[Limit], algorithm: str) -> list[tuple[Limit, Limit]]:
    """Pairs ``(loose, strict)`` of one route's limits where ``strict`` denies whenever
    ``loose`` would, so ``loose`` changes nothing (it only shows in the policy fields).

    Only limits counted by the same algorithm are compared, and only where it is certain:
    a bucket (``token_bucket``, ``gcra``) that holds no more and refills no faster than
    another is always at least as empty (both take the same requests, and it drains
    slower); a ``sliding_log`` window that is longer and admits no more covers the
    shorter one; a ``fixed_window`` or ``sliding_window`` likewise when its window is a
    whole multiple of the other's (windows are aligned to UTC, so each short window lies
    inside one long one, and a sliding window's weighted estimate over the long windows
    is never below the one over the short windows). The other way round, a longer window
    that admits at least all the shorter one can let into it (:func:`_most_admitted`:
    ``5/second`` and ``300/minute`` for a ``fixed_window``) never denies either.
    """
    pairs: list[tuple[Limit, Limit]] = []
    for at, loose in enumerate(limits):
        own = algorithm_of(loose, algorithm)
        for other, strict in enumerate(limits):
            if other == at or algorithm_of(strict, algorithm) != own:
                continue
            # Two that bind alike (the same bucket over other windows): the later one goes.
            if _stricter(strict, loose, own) and not (at < other and _stricter(loose, strict, own)):
                pairs.append((loose, strict))
                break
    return pairs


def written(limit: Limit) -> str:
    """A limit as a warning names it: its rate, and its burst when it has one."""
    return f"{limit.rate}, burst {limit.burst}" if limit.burst is not None else str(limit.rate)


def _stricter(strict: Limit, loose: Limit, algorithm: str) -> bool:
    s_rate, l_rate = strict.rate, loose.rate
    if algorithm in ("token_bucket", "gcra"):
        return (
            strict.capacity <= loose.capacity
            # refills no faster: quota per window compared without division
            and s_rate.quota * l_rate.window_ms <= l_rate.quota * s_rate.window_ms
        )
    if s_rate.window_ms < l_rate.window_ms:
        return l_rate.quota >= _most_admitted(s_rate, l_rate, algorithm)
    if algorithm == "sliding_log":
        return s_rate.window_ms > l_rate.window_ms and s_rate.quota <= l_rate.quota
    if algorithm in ("fixed_window", "sliding_window"):
        return (
            s_rate.window_ms > l_rate.window_ms
            and s_rate.window_ms % l_rate.window_ms == 0
            and s_rate.quota <= l_rate.quota
        )
    return False


def _most_admitted(shorter: Rate, longer: Rate, algorithm: str) -> float:
    """The most a ``shorter`` limit lets a ``longer`` window's count reach, whatever the
    traffic (``inf`` where it is not certain). A ``sliding_log``
    window of the longer length is covered by ``ceil(L / S)`` shorter ones, each holding
    at most ``quota``. Aligned windows where ``L`` is a whole multiple ``k`` of ``S``: a
    ``fixed_window`` long window is exactly ``k`` short ones; a ``sliding_window``'s
    estimate over the long windows (the previous one's count weighted down by the share
    gone by, rounded down, plus the current one's, with the request) is at most
    ``k + 1`` short windows' worth."""
    windows, part = divmod(longer.window_ms, shorter.window_ms)
    if algorithm == "sliding_log":
        return (windows + (part > 0)) * shorter.quota
    if algorithm in ("fixed_window", "sliding_window") and part == 0:
        return (windows if algorithm == "fixed_window" else windows + 1) * shorter.quota
    return float("inf")


def apply_route_burst(limits: list[Limit], got: Reader, problems: Problems) -> list[Limit]:
    """A route-level ``burst`` sizes the bucket of the limit with the SHORTEST window only.

    Every other limit keeps its quota as its bucket: ``"10/second; 1000/hour"`` with
    ``burst = 20`` lets 20 through at once and still about 1000 an hour.
    """
    if not got.given("burst") or not limits:
        return limits
    burst = got.optional_integer("burst")
    if burst is None:
        return limits
    shortest = min(range(len(limits)), key=lambda i: limits[i].rate.window_ms)
    target = limits[shortest]
    if target.burst is not None:
        problems.add(
            f"{got.where}.burst",
            f"the limit {shown(target.name)} sets its own burst; set it in one place only",
        )
        return limits
    named = target.name != target.rate.name
    updated = Limit(target.rate, burst, target.name if named else "", target.algorithm)
    return [updated if i == shortest else limit for i, limit in enumerate(limits)]


def check_algorithm_takes(
    algorithm: str, limits: list[Limit], where: str, problems: Problems, burst_field: str
) -> None:
    """Let each limit's algorithm (its own, else the route's) say whether it accepts the
    limit (burst, quota range)."""
    for limit in limits:
        own = algorithm_of(limit, algorithm)
        cls = ALGORITHMS[own]
        if limit.burst is not None and not cls.takes_burst:
            takers = ", ".join(name for name, c in ALGORITHMS.items() if c.takes_burst)
            problems.add(
                f"{where}.{burst_field}",
                f"a burst only applies to {takers}, not {own} (limit {shown(limit.name)})",
            )
            continue
        try:
            make_algorithm(own, limit)
        except ValueError as exc:
            problems.add(f"{where}.limits", f"{limit.name}: {exc}")


def parse_leases(
    value: object, algorithm: str, limits: list[Limit], where: str, problems: Problems
) -> int:
    """``leases = true`` or ``leases = { ttl = "500ms" }``: the lease ttl in ms (0: off)."""
    where = f"{where}.leases"
    if value is None or value is False:
        return 0
    got = Reader(LEASES, {}, where, problems)
    if value is not True:
        if not isinstance(value, Mapping):
            problems.add(
                where,
                f"must be true, false or a table like {{ ttl = '500ms' }}, got {shown(value)}",
            )
            return 0
        got = Reader(LEASES, value, where, problems)
    mixed = sorted({lim.algorithm for lim in limits if lim.algorithm})
    if mixed:
        problems.add(
            where,
            f"leases need one algorithm for all the route's limits, and a limit here uses "
            f"{', '.join(mixed)} (the route: {algorithm})",
        )
        return 0
    if algorithm not in LEASABLE:
        problems.add(
            where,
            f"algorithm {algorithm!r} counts every request exactly and cannot lease "
            f"(leasable: {', '.join(sorted(LEASABLE))})",
        )
        return 0
    ttl = got.ms("ttl", default_ttl(algorithm))
    if got.refused("ttl"):
        # The ttl written is refused (said above): no advice from a ttl nobody wrote.
        return 0
    for limit in limits:
        why = lease_reserve_ok(limit, algorithm, ttl)
        if why is not None:
            problems.add(where, why)
            return 0
    _reserve_warnings(algorithm, limits, ttl, where, problems)
    return ttl


def _reserve_warnings(
    algorithm: str, limits: list[Limit], ttl: int, where: str, problems: Problems
) -> None:
    """Warn of a bucket that keeps a tenth of its units or more in reserve for leases."""
    for limit in limits:
        try:
            bucket = ALGORITHMS[algorithm](limit)
        except ValueError:
            return  # the limit itself is refused where it is written
        if not isinstance(bucket, Leasable):
            return  # refused where the algorithm is checked against leases
        reserve = bucket.lease_reserve(ttl)
        if reserve * 10 >= limit.capacity:
            advice = (
                "a shorter ttl keeps less"
                if bucket.lease_reserve(1) < reserve
                else "leases do not suit a limit this small"
            )
            problems.warn(
                where,
                f"keeps {reserve} of the {limit.capacity} units of {limit} in reserve (a "
                f"ttl of refill, for the lag between grant and use): at most "
                f"{limit.capacity - reserve} pass at once; {advice}, and without leases "
                "every unit can be used"
                + (
                    "; with more than half in reserve the sustained rate falls too (an "
                    "isolate then gets a unit or two per lease and waits out each lease: "
                    "10/s with a 900ms ttl admitted 7 of 59 in 5 s of 20 requests/s, "
                    "simulated)"
                    if reserve * 2 > limit.capacity
                    else ""
                ),
            )
