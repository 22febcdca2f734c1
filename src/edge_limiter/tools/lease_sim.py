"""A discrete-event simulation of token leases: N isolates, one key, one Durable Object.

Every isolate runs the real planner (:mod:`edge_limiter.core.ratelimit.leases`) and every call runs
the real Durable Object step (``KeyStore.decide`` with op ``"lease"``, over SQL that does
nothing), with a random network delay each way. Arrivals are Poisson in total and spread
over the isolates by a Zipf law (``skew`` is its exponent; 0 is uniform).

Or, with ``clients`` (closed loop, as a load generator with that many connections per
isolate drives the local runtime): each client sends its next request a random service
time (``cycle_us``, uniform within half of it either way) after its last one was answered,
so at most ``clients`` requests per isolate wait for a lease, and none arrive while they
do. Open-loop arrivals at the same average rate made the waiting lists longer, the asks
larger and the calls fewer than a closed-loop load has.

An isolate admits a request from its leases when they hold a unit; otherwise the request
waits for a lease answer (a call, unless one is in flight already). It asks for its next
lease before the current one runs out (``Lease.should_refresh``) and keeps admitting from
the old one meanwhile. A denied lease answer is remembered until its ``retry_after`` (the
isolate's deny cache): requests until then are denied with no call.

Reported per scenario: DO calls per admitted request, over the whole run and in the
steady state; over-admission (units admitted beyond what the limit allows, by an
independent strict checker of the use timeline, over the whole run: must be 0); and
under-admission in the steady state, against an exact single counter fed the same
arrivals. The steady state is every whole window of the limit (``window_ms``) after the
one in which that counter first denied (the limit is reached) and before the end of the
arrivals; in each, the requests the lease system admitted (by arrival time) are compared
with the ones the counter admitted. The first window is left out because the two reach
the limit at different instants (the lease system admits some requests later, waiting on
a grant, and the bucket algorithms keep their reserve back from the start), which made
the old measure, counted from the counter's first denial, go negative.

Time runs in microseconds here; the core sees integer milliseconds (``t // 1000``), as the
platform's clocks give them. All clocks are the same clock (no skew).

    .venv/bin/python -m edge_limiter.tools.lease_sim            # the grid, as a markdown table
    .venv/bin/python -m edge_limiter.tools.lease_sim --quick    # a smaller grid
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from edge_limiter.core.ratelimit.algorithms import Leasable, make_algorithm
from edge_limiter.core.ratelimit.keystore import KeyStore
from edge_limiter.core.ratelimit.leases.holding import Ask, Holding
from edge_limiter.core.ratelimit.leases.policy import default_ttl
from edge_limiter.core.ratelimit.protocol import StoreRequest, StoreResponse
from edge_limiter.core.ratelimit.rates import Limit, Rate


class NullSql:
    """SQL that does nothing: the object's step without SQLite's cost."""

    def run(self, query: str, *args: Any) -> None:
        return None

    def rows(self, query: str, *args: Any) -> list[dict[str, Any]]:
        return []


@dataclass(frozen=True)
class Scenario:
    """One simulated key."""

    isolates: int
    rate: int
    """Offered requests per second, all isolates together."""
    limit: Limit
    algorithm: str = "token_bucket"
    ttl_ms: int | None = None
    """None: the algorithm family's default (:func:`~edge_limiter.core.ratelimit.leases.policy.default_ttl`)."""
    skew: float = 1.0
    duration_ms: int = 4_000
    delay_us: tuple[int, int] = (500, 2_500)
    """One-way network delay, uniform in this range (a round trip of 1-5 ms)."""
    lead_ms: int = 10
    """How far ahead of running out an isolate asks for its next lease."""
    seed: int = 1
    phase_ms: int = 0
    """When the arrivals start, in the limit's window (the runs on the local runtime start
    a little after a window's start)."""
    moving: bool = False
    """The load moves: each isolate in turn takes every arrival for an equal part of the
    run (isolate 0 first), instead of the Zipf spread."""
    clients: int = 0
    """Closed loop: clients per isolate, each sending its next request when its last one
    is answered (0: open loop, Poisson arrivals at ``rate``)."""
    cycle_us: int = 25_000
    """Closed loop: the mean time from a request's answer to the client's next request
    arriving (the answer's way back, the client, the gateway's own work)."""

    @property
    def ttl(self) -> int:
        """The lease ttl used (ms)."""
        return default_ttl(self.algorithm) if self.ttl_ms is None else self.ttl_ms


@dataclass
class Result:
    """What one scenario measured."""

    scenario: Scenario
    arrivals: int = 0
    admitted: int = 0
    calls: int = 0
    over: int = 0
    reference_admitted: int = 0
    reached_at_ms: int | None = None
    windows: list[tuple[int, int, int]] = field(default_factory=list)
    """Steady-state windows: (admitted, reference admitted, calls sent) in each."""

    @property
    def calls_per_admitted(self) -> float:
        return self.calls / self.admitted if self.admitted else float("inf")

    @property
    def under_pct(self) -> float | None:
        """Steady-state under-admission, all windows together (None: no such window)."""
        reference = sum(window[1] for window in self.windows)
        if not reference:
            return None
        return 100.0 * (reference - sum(window[0] for window in self.windows)) / reference

    @property
    def whole_run_under_pct(self) -> float:
        """Requests the exact counter admitted and the leases did not, over the whole run
        (the first window and, where the limit never binds, every request included)."""
        if not self.reference_admitted:
            return 0.0
        return 100.0 * (self.reference_admitted - self.admitted) / self.reference_admitted

    @property
    def worst_window_pct(self) -> float | None:
        """The largest under-admission of any one steady-state window."""
        pcts = [100.0 * (ref - got) / ref for got, ref, _ in self.windows if ref]
        return max(pcts) if pcts else None

    @property
    def steady_calls_per_admitted(self) -> float | None:
        """DO calls sent per admitted request in the steady-state windows."""
        admitted = sum(window[0] for window in self.windows)
        return sum(window[2] for window in self.windows) / admitted if admitted else None


@dataclass
class _Isolate:
    holder: str
    holding: Holding
    waiting: list[int] = field(default_factory=list)
    """Arrival times (ms) of requests waiting for a lease answer."""


_AT_DO, _AT_ISOLATE, _AT_CLIENT = 1, 2, 3


def _zipf_cumulative(isolates: int, skew: float) -> list[float]:
    weights = [1.0 / (rank + 1) ** skew for rank in range(isolates)]
    total = sum(weights)
    cumulative, running = [], 0.0
    for weight in weights:
        running += weight / total
        cumulative.append(running)
    cumulative[-1] = 1.0
    return cumulative


def simulate(scenario: Scenario) -> Result:
    """Run one scenario; its measurements."""
    return _Run(scenario).run()


Event = tuple[int, int, int, int, Any]
"""(at, sequence, where: ``_AT_DO`` or ``_AT_ISOLATE``, isolate index, data), in a heap."""


class _Run:
    """One scenario's run: its isolates, the object's step, the messages in flight, and the
    exact single counter fed the same arrivals."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.rng = random.Random(scenario.seed)
        self.limit = scenario.limit
        self.store = KeyStore(NullSql())
        algorithm = make_algorithm(scenario.algorithm, scenario.limit)
        if not isinstance(algorithm, Leasable):
            raise ValueError(f"{scenario.algorithm} does not lease")
        merge, grows = algorithm.lease_records_merge, algorithm.lease_supply_grows
        self.isolates = [
            _Isolate(
                f"iso-{index}",
                Holding(
                    scenario.ttl,
                    scenario.limit.capacity,
                    scenario.lead_ms,
                    1000,
                    merge=merge,
                    young_rates=grows,
                ),
            )
            for index in range(scenario.isolates)
        ]
        self.cumulative = _zipf_cumulative(scenario.isolates, scenario.skew)
        self.result = Result(scenario)
        self.uses: list[int] = []
        self.call_times: list[int] = []
        self.admitted_arrivals: list[int] = []
        self.events: list[Event] = []
        self.sequence = 0
        # The exact single counter, fed the same arrivals.
        self.reference = make_algorithm(scenario.algorithm, scenario.limit)
        self.reference_state: Any = None
        self.reference_admits: list[int] = []

    def run(self) -> Result:
        start_us = self.scenario.phase_ms * 1000
        end_us = start_us + self.scenario.duration_ms * 1000
        per_us = self.scenario.rate / 1_000_000
        next_arrival = start_us + (int(self.rng.expovariate(per_us)) if per_us > 0 else end_us)
        if self.scenario.clients:
            next_arrival = end_us  # every arrival is a client's event
            for index in range(self.scenario.isolates):
                begin, _ = self._active(index)
                for _ in range(self.scenario.clients):
                    self._push(begin, _AT_CLIENT, index, None)
        while True:
            if self.events and self.events[0][0] <= next_arrival:
                self._deliver(heapq.heappop(self.events))
                continue
            if next_arrival >= end_us:
                if not self.events:
                    break
                next_arrival = max(next_arrival, self.events[0][0])
                if next_arrival > end_us + 1_000_000:
                    break
                continue
            now_us = next_arrival
            next_arrival += max(1, int(self.rng.expovariate(per_us)))
            self._arrive(now_us)
        return self._measured()

    def _active(self, index: int) -> tuple[int, int]:
        """When isolate ``index`` has load (µs): the whole run, or its part when it moves."""
        scenario = self.scenario
        start_us = scenario.phase_ms * 1000
        end_us = start_us + scenario.duration_ms * 1000
        if not scenario.moving:
            return start_us, end_us
        part = (end_us - start_us) // scenario.isolates
        return start_us + index * part, start_us + (index + 1) * part

    def _answered_clients(self, index: int, now_us: int, count: int) -> None:
        """``count`` requests of isolate ``index`` were answered at ``now_us``: in a closed
        loop their clients send their next ones a service time later, while it has load."""
        if not self.scenario.clients or count <= 0:
            return
        _, end_us = self._active(index)
        mean = self.scenario.cycle_us
        for _ in range(count):
            at_us = now_us + self.rng.randint(mean // 2, mean + mean // 2)
            if at_us < end_us:
                self._schedule(at_us, _AT_CLIENT, index, None)

    def _push(self, at_us: int, where: int, index: int, data: Any) -> None:
        """A message that arrives ``where`` after a random network delay from ``at_us``."""
        low, high = self.scenario.delay_us
        self._schedule(at_us + self.rng.randint(low, high), where, index, data)

    def _schedule(self, at_us: int, where: int, index: int, data: Any) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (at_us, self.sequence, where, index, data))

    def _send(self, index: int, now_us: int, covered: int) -> None:
        """The isolate ``index`` asks the object for a lease sized for ``covered`` requests."""
        isolate = self.isolates[index]
        now = now_us // 1000
        ask = isolate.holding.request(now, max(1, covered))
        payload = StoreRequest(
            "lease",
            self.scenario.algorithm,
            (self.limit,),
            ask.wanted,
            lease_ttl_ms=self.scenario.ttl,
            holder=isolate.holder,
            returned=ask.returned,
            returned_until=ask.returned_until,
            min_units=ask.min_units,
            observed_rate=ask.observed_rate,
        ).to_json()
        self.result.calls += 1
        self.call_times.append(now)
        self._push(now_us, _AT_DO, index, (payload, ask, covered))

    def _admit(self, arrived: int, used_at: int) -> None:
        self.uses.append(used_at)
        self.admitted_arrivals.append(arrived)

    def _deliver(self, event: Event) -> None:
        at_us, _, where, index, data = event
        if where == _AT_CLIENT:
            self._arrive(at_us, index)
        elif where == _AT_DO:
            payload, ask, covered = data
            decided = at_us // 1000
            answer = self.store.decide(payload, decided)
            self._push(at_us, _AT_ISOLATE, index, (answer, ask, decided, covered))
        else:
            self._answered(index, at_us, data)

    def _answered(self, index: int, now_us: int, data: tuple[str, Ask, int, int]) -> None:
        answer, ask, decided, covered = data
        isolate = self.isolates[index]
        now = now_us // 1000
        response = StoreResponse.from_json(answer, (self.limit,))
        waiting, isolate.waiting = isolate.waiting, []
        # The requests the grant was sized for are admitted as of the grant, as a check's.
        lease = isolate.holding.answered(response, ask, now, reserved=covered)
        if lease is None:
            self._answered_clients(index, now_us, len(waiting))  # denied
            return
        # (A planned allowance is taken as the answer arrives, on the isolate's clock.)
        used_at = now if response.allowance is not None else decided
        for arrived in waiting[:covered]:
            self._admit(arrived, used_at)
        for position, arrived in enumerate(waiting[covered:], start=covered):
            if isolate.holding.take(1, now) is not None:
                self._admit(arrived, now)
            elif isolate.holding.ask_at(now):
                break  # the rest are denied: its share accrues later (or it was denied)
            else:
                isolate.waiting = waiting[position:]
                self._send(index, now_us, len(isolate.waiting))
                break
        self._answered_clients(index, now_us, len(waiting) - len(isolate.waiting))

    def _arrive(self, now_us: int, client_of: int | None = None) -> None:
        """A request arrives at one isolate (its client's, or Zipf-chosen), and at the
        exact counter."""
        now = now_us // 1000
        result = self.result
        result.arrivals += 1
        decision, self.reference_state = self.reference.check(self.reference_state, now, 1)
        if decision.allowed:
            self.reference_admits.append(now)
        elif result.reached_at_ms is None:
            result.reached_at_ms = now
        scenario = self.scenario
        if client_of is not None:
            index = client_of
        elif scenario.moving:
            part = (now_us - scenario.phase_ms * 1000) * scenario.isolates
            index = min(scenario.isolates - 1, part // (scenario.duration_ms * 1000))
        else:
            index = bisect.bisect_left(self.cumulative, self.rng.random())
        isolate = self.isolates[index]
        isolate.holding.meter.observe(now)
        if isolate.waiting:
            isolate.waiting.append(now)
            return
        holding = isolate.holding
        if holding.take(1, now) is not None:
            self._admit(now, now)
            self._answered_clients(index, now_us, 1)
            if not holding.in_flight and holding.wants_refresh(now):
                self._send(index, now_us, 0)
            return
        if holding.ask_at(now):
            # Denied until its retry_after, or rationed: its share is used up, and asking
            # again before the lease ends would only take from the others' shares.
            self._answered_clients(index, now_us, 1)
            return
        isolate.waiting.append(now)
        if not holding.in_flight:
            self._send(index, now_us, 1)

    def _measured(self) -> Result:
        result, scenario = self.result, self.scenario
        result.admitted = len(self.uses)
        result.reference_admitted = len(self.reference_admits)
        result.over = over_admission(scenario.algorithm, self.limit, sorted(self.uses))
        if result.reached_at_ms is None:
            return result
        window = self.limit.rate.window_ms
        first = result.reached_at_ms // window + 1
        admitted = sorted(self.admitted_arrivals)

        def within(times: list[int], start: int, stop: int) -> int:
            return bisect.bisect_left(times, stop) - bisect.bisect_left(times, start)

        last = (scenario.phase_ms + scenario.duration_ms) // window
        for index in range(first, last):
            start, stop = index * window, (index + 1) * window
            result.windows.append(
                (
                    within(admitted, start, stop),
                    within(self.reference_admits, start, stop),
                    within(self.call_times, start, stop),
                )
            )
        return result


def over_admission(algorithm: str, limit: Limit, uses: list[int]) -> int:
    """Units in ``uses`` (sorted times of unit uses, ms) beyond what ``limit`` allows.

    Token bucket and GCRA: the largest excess of the uses over any interval ``[a, b]``
    above ``burst + rate * (b - a)`` (a bucket allowed to go negative). Fixed window: the
    excess over the quota in each aligned window. Sliding window: the uses that fail the
    sliding-window-counter test computed from the exact per-window counts of uses.
    """
    window, quota = limit.rate.window_ms, limit.rate.quota
    if not uses:
        return 0
    if algorithm in ("token_bucket", "gcra"):
        full = limit.capacity * window
        level, last, lowest = full, uses[0], 0
        for at in uses:
            level = min(full, level + (at - last) * quota) - window
            last = at
            lowest = min(lowest, level)
        return -(lowest // window) if lowest < 0 else 0
    counts: dict[int, int] = {}
    for at in uses:
        counts[at // window] = counts.get(at // window, 0) + 1
    if algorithm == "fixed_window":
        return sum(max(0, count - quota) for count in counts.values())
    if algorithm == "sliding_window":
        failed, seen = 0, dict.fromkeys(counts, 0)
        for at in uses:
            index = at // window
            seen[index] += 1
            previous = counts.get(index - 1, 0)
            elapsed = at - index * window
            if previous * (window - elapsed) // window + seen[index] > quota:
                failed += 1
        return failed
    raise ValueError(f"no strict checker for {algorithm!r}")


def grid(
    isolates: tuple[int, ...],
    rates: tuple[int, ...],
    *,
    algorithm: str = "token_bucket",
    duration_ms: int = 4_000,
    ttl_ms: int | None = None,
    skew: float = 1.0,
) -> list[Result]:
    """Each isolate count x offered rate, with a limit of half the rate (it binds) and one
    of twice the rate (it does not)."""
    results = []
    for count in isolates:
        for rate in rates:
            for quota in (rate // 2, rate * 2):
                scenario = Scenario(
                    count,
                    rate,
                    Limit(Rate(quota, 1_000)),
                    algorithm,
                    ttl_ms=ttl_ms,
                    skew=skew,
                    duration_ms=duration_ms,
                )
                results.append(simulate(scenario))
    return results


def table(results: list[Result]) -> str:
    """The results as a markdown table."""
    lines = [
        "| algorithm | ttl ms | isolates | req/s | limit | calls/admitted (all) "
        "| calls/admitted (steady) | over | under % (steady) | worst window % "
        "| under % (whole run) |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        s = result.scenario
        under = "-" if result.under_pct is None else f"{result.under_pct:.2f}"
        worst = "-" if result.worst_window_pct is None else f"{result.worst_window_pct:.2f}"
        steady = result.steady_calls_per_admitted
        steady_text = "-" if not steady else f"1/{1 / steady:.1f}"
        lines.append(
            f"| {s.algorithm} | {s.ttl} | {s.isolates} | {s.rate:,} | {s.limit.rate.quota:,}/s "
            f"| 1/{1 / result.calls_per_admitted:.1f} | {steady_text} | {result.over} "
            f"| {under} | {worst} | {result.whole_run_under_pct:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m edge_limiter.tools.lease_sim", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--algorithm",
        action="append",
        choices=sorted(("token_bucket", "gcra", "fixed_window", "sliding_window")),
    )
    parser.add_argument("--quick", action="store_true", help="a smaller grid")
    parser.add_argument("--duration-ms", type=int, default=4_000)
    parser.add_argument("--ttl-ms", type=int, default=None, help="default: per family")
    parser.add_argument("--skew", type=float, default=1.0)
    args = parser.parse_args(argv)
    isolates = (10, 100) if args.quick else (1, 10, 100, 500)
    rates = (1_000, 10_000)
    results = []
    for algorithm in args.algorithm or ["token_bucket"]:
        results += grid(
            isolates,
            rates,
            algorithm=algorithm,
            duration_ms=args.duration_ms,
            ttl_ms=args.ttl_ms,
            skew=args.skew,
        )
    print(table(results))
    return 1 if any(result.over for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
