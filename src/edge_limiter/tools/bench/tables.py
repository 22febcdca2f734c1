"""The tables of BENCHMARKS.md: one per section of a benchmark run, each figure beside its
peer measured in the same run and as a ratio to it (:mod:`.render` writes the document)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from edge_limiter.tools.bench.cells import (
    Data,
    Row,
    fmt,
    markdown_table,
    medians,
    signed,
    times,
)
from edge_limiter.tools.bench.flood import abusive_table, flood_table

#: The gateway section's rows (``workerd.section_gateway`` names them so).
JS_FORWARD = "JS Worker: forward"
LIMITED = "Python: limited route (object + forward)"
LEASED = "Python: limited, token leases"
FLOOR_FORWARD = "bare Python Worker: minimal Python Durable Object + forward"
#: The object section's rows.
OUR_OBJECT = "Python Durable Object (this project's)"
FLOOR_OBJECT = "minimal Python Durable Object: the same read-modify-write (the floor)"
#: The startup section's workers: the goal's ratio is against the bare Worker with bindings.
BARE = "bare Python Worker"
BARE_BOUND = "bare Python Worker, the project's bindings"
PROJECT = "this project"
#: The leased routes and the same route without leases (their peer).
LEASE_PEERS = {"leased": "plain", "leased-at-limit": "plain-at-limit"}


def _core(data: Data) -> tuple[list[str], list[Row], list[str]]:
    cpython, pyodide = data["core"]["cpython"], data["core"]["pyodide"]
    floor = cpython["minimal_bucket"]
    rows: list[Row] = []
    for name in ("token_bucket", "gcra", "fixed_window", "sliding_window", "sliding_log"):
        ours = cpython[f"check:{name}"]
        strategy = CORE_PEERS[name]
        theirs = cpython.get(f"limits:{strategy}")
        rows.append(
            [
                f"`{name}`",
                ours,
                times(ours / floor),
                f"`{strategy}`",
                theirs if theirs is not None else "-",
                times(theirs / ours) if theirs is not None else "-",
                pyodide[f"check:{name}"],
                times(pyodide[f"check:{name}"] / ours),
                times(pyodide[f"core:{name}"] / cpython[f"core:{name}"]),
            ]
        )
    header = [
        "algorithm",
        "CPython ns",
        "x minimal bucket",
        "`limits` strategy",
        "`limits` ns",
        "`limits` / ours",
        "Pyodide ns",
        "Pyodide / CPython",
        "core alone: Pyodide / CPython",
    ]
    notes = [
        f"ns per call, CPython {cpython['python']} and Pyodide {pyodide['python']}, "
        f"{medians(data['core'].get('rounds', 1))} taken in turn; each call reads the clock "
        f"as a real caller does ({fmt(cpython['clock'])} ns on CPython, "
        f"{fmt(pyodide['clock'])} on Pyodide); the minimal bucket (two floats, no checks) "
        f'takes {fmt(floor)} ns; "core alone" passes `now` in. A limit every call admits '
        "(1,000,000/hour; `sliding_log` 10,000/hour).",
    ]
    return header, rows, notes


#: The `limits` strategy each algorithm is compared with (its nearest: `limits` has no bucket).
CORE_PEERS = {
    "token_bucket": "fixed_window",
    "gcra": "fixed_window",
    "fixed_window": "fixed_window",
    "sliding_window": "sliding_window",
    "sliding_log": "moving_window",
}


def _step(data: Data) -> tuple[list[str], list[Row], list[str]]:
    rows: list[Row] = []
    for label in ("cpython", "pyodide"):
        figures = data["core"][label]
        bucket, log = figures["step:token_bucket"], figures["step:sliding_log"]
        rows.append([_RUNTIMES[label], bucket, log, times(log / bucket)])
    header = [
        "runtime",
        "`token_bucket` 1,000,000/hour ns",
        "`sliding_log` 10,000/hour, log full, ns",
        "`sliding_log` / `token_bucket`",
    ]
    notes = [
        "ns per request: `KeyStore.decide`, JSON in, decide, JSON out, the row write handed "
        "to a SQL port that does nothing (SQLite's own cost left out)."
    ]
    return header, rows, notes


_RUNTIMES = {"cpython": "CPython", "pyodide": "Pyodide"}


def _gateway(data: Data) -> tuple[list[str], list[Row], list[str]]:
    section = data["gateway"]
    rows_in = section["rows"]
    peer = rows_in[JS_FORWARD]
    rows: list[Row] = []
    for name, row in rows_in.items():
        rows.append(
            [
                name,
                row["p50"],
                signed(row["p50"] - peer["p50"]),
                times(row["p50"] / peer["p50"]),
                row["p99"],
                row["rps"],
                times(row["rps"] / peer["rps"]),
                row.get("cpu_ms", "-"),
                ",".join(row["statuses"]),
            ]
        )
    header = [
        "path",
        "p50 ms",
        "p50 above JS forward, ms",
        "p50 / JS forward",
        "p99 ms",
        f"req/s, {section['inflight']} in flight",
        "req/s / JS forward",
        "workerd CPU ms per request",
        "statuses",
    ]
    notes = [
        f"{section['requests']} requests one at a time (p50, p99), {section['many']} with "
        f"{section['inflight']} in flight (req/s, and workerd's CPU time over them); "
        f"{medians(section['repeat'])}. "
        "The bare Python Worker rows are the floor of any Python Worker on this host: "
        "answering, forwarding as the gateway does, and calling the least a Python Durable "
        "Object can do for the same read-modify-write before forwarding."
    ]
    return header, rows, notes


def _gateway_python(data: Data) -> tuple[list[str], list[Row], list[str]]:
    figures = data["gateway_python"]
    bare = figures["bare forward"]["min_us"]
    rows: list[Row] = [
        [
            name,
            row["min_us"],
            row["median_us"],
            signed(row["min_us"] - bare),
            times(row["min_us"] / bare),
            f"{row['answer'][0]}, {len(row['answer'][1])} field"
            + ("s" if len(row["answer"][1]) != 1 else ""),
        ]
        for name, row in figures.items()
    ]
    header = ["path", "min us", "median us", "min above bare forward", "x bare forward", "answer"]
    notes = [
        "us per request: the minimum and the median of the rounds' means, real JavaScript "
        "requests and an origin and object that answer at once (`scripts/bench/"
        "pyodide_gateway.mjs`; `--profile PATH` shows where a path's time goes)."
    ]
    return header, rows, notes


def _object(data: Data) -> tuple[list[str], list[Row], list[str]]:
    section = data["object"]
    rows_in = section["rows"]
    rows: list[Row] = [
        [
            name,
            row["rps"],
            row["peer"],
            times(rows_in[row["peer"]]["rps"] / row["rps"]),
            row["p50"],
            row["p99"],
        ]
        for name, row in rows_in.items()
    ]
    header = ["object", "decisions/s", "its peer (same runtime)", "peer / this", "p50 ms", "p99 ms"]
    notes = [
        f"{section['requests']} requests at 50 in flight to one key, called from the same "
        f"JavaScript Worker; {medians(section['repeat'])}. Write-behind does not "
        "commit each decision: shown beside, not the goal's comparison."
    ]
    return header, rows, notes


def _leases(data: Data) -> tuple[list[str], list[Row], list[str]]:
    section = data["leases"]
    runs = section["runs"]
    by_route = {route: _median_runs(samples) for route, samples in runs.items()}
    rows: list[Row] = []
    for route, figures in by_route.items():
        peer = LEASE_PEERS.get(route)
        rows.append(
            [
                route,
                figures["rps"],
                times(figures["rps"] / by_route[peer]["rps"]) if peer in by_route else "-",
                figures["p50"],
                figures["p99"],
                ",".join(str(a) for a in sorted({run["admitted"] for run in runs[route]})),
                f"1/{1 / max(1e-9, figures['calls_per_admitted']):.1f}",
            ]
        )
    header = [
        "route",
        "req/s (both isolates)",
        "x without leases",
        "p50 ms",
        "p99 ms",
        "admitted",
        "object calls per admitted",
    ]
    notes = [
        f"Two isolates drive one key at once, {section['per_isolate']} requests each with "
        f"{section['inflight']} in flight; {medians(section['repeat'])}. `plain` and "
        "`leased` are `gcra` at 1,000,000/hour (every request admitted); the at-limit routes "
        f"are `fixed_window` at 3000/day, so exactly {min(3000, 2 * section['per_isolate'])} "
        f"of the {2 * section['per_isolate']} must be admitted."
    ]
    at_limit = section.get("at_limit")
    if at_limit and at_limit.get("runs"):
        notes.append(_at_limit(at_limit))
    return header, rows, notes


def _at_limit(at_limit: Data) -> str:
    """The runs where the limit binds, as a table of their own (a note of the leases
    section): admitted with leases against the control, calls per admitted, and the
    simulation at the same operating point."""
    rows: list[Row] = []
    for run in at_limit["runs"]:
        lease, plain, sim = run["lease"], run["plain"], run.get("simulated") or {}
        rows.append(
            [
                run["isolates"],
                f"`{run['algorithm']}`",
                run["mode"],
                f"{lease['admitted']} / {plain['admitted']}",
                f"{run['ratio']:.3f}",
                f"{sim['ratio']:.3f}" if sim else "-",
                f"1/{1 / max(1e-9, run['calls_per_admitted']):.1f}",
                f"1/{1 / max(1e-9, sim['calls_per_admitted']):.1f}" if sim else "-",
                "-" if run.get("allowed") is None else run["allowed"],
            ]
        )
    header = [
        "isolates",
        "algorithm",
        "load",
        "admitted / control",
        "ratio",
        "simulated ratio",
        "calls per admitted",
        "simulated",
        "the limit allows",
    ]
    lines = [
        f"Where the limit binds: one key at `{at_limit['limit']}`, {at_limit['clients']} "
        "clients per isolate for "
        f"{at_limit['seconds']:g} s (`steady`: every isolate at once; `moving`: one isolate "
        "after another), on a fresh key at the same phase of the window as its control (the "
        "same route without leases); the simulation (`lease_sim`) at the same isolates and "
        "phase, with the same closed-loop load (as many clients per isolate, each answered "
        "as fast on average as in the run), the median of five seeds.",
        "",
    ]
    return "\n".join(lines + markdown_table(header, rows))


def _median_runs(samples: list[Data]) -> Data:
    return {
        field: statistics.median(float(run[field]) for run in samples)
        for field in ("rps", "p50", "p99", "calls_per_admitted")
    }


def _startup(data: Data) -> tuple[list[str], list[Row], list[str]]:
    section = data["startup"]
    ready = {kind: statistics.median(values) for kind, values in section["ready"].items()}
    first = {kind: statistics.median(values) for kind, values in section["first"].items()}
    rows: list[Row] = [
        [
            kind,
            ready[kind],
            times(ready[kind] / ready[BARE_BOUND]),
            first[kind],
            times(first[kind] / first[BARE_BOUND]),
            times(first[kind] / first[BARE]),
        ]
        for kind in ready
    ]
    header = [
        "worker",
        "READY s",
        "x bare with bindings",
        "first answer s",
        "x bare with bindings",
        "x bare, no bindings",
    ]
    notes = [
        f"Fresh runtimes in turn, median of {section['repeat']}. READY: workerd, Pyodide and "
        "the Worker's imports; first answer: one real request more (for the project a limited "
        "route: the config parsed, the pipeline built, an object, the origin). The second bare "
        "Worker has the project's bindings, whose local setup Miniflare pays for whichever "
        "Worker has them."
    ]
    imports = data.get("imports")
    if imports:
        runs = imports["runs"]
        import_ms = statistics.median(run["import_ms"] for run in runs)
        classes_ms = statistics.median(run["dataclasses_ms"] for run in runs)
        notes.append(
            f"Importing the Worker on npm Pyodide in Node takes {fmt(import_ms)} ms (median "
            f"of {len(runs)} processes), {fmt(classes_ms)} ms of it building "
            f"{runs[0]['dataclasses']} dataclasses (`scripts/bench/pyodide_imports.mjs`). "
            "Production starts from a snapshot taken after the imports."
        )
    return header, rows, notes


def _memory(data: Data) -> tuple[list[str], list[Row], list[str]]:
    section = data["memory"]
    ours, floor = section["project"], section["floor"]
    requests, keys = section["requests"], section["keys"]

    def per_key(figures: Data) -> float:
        return float((figures["after_keys_mb"] - figures["after_requests_mb"]) * 1024 / keys)

    measured = [
        ("RSS at boot, MB", ours["boot_mb"], floor["boot_mb"]),
        (
            f"RSS after {requests:,} requests, MB",
            ours["after_requests_mb"],
            floor["after_requests_mb"],
        ),
        (
            f"RSS after {keys:,} distinct keys more, MB",
            ours["after_keys_mb"],
            floor["after_keys_mb"],
        ),
        ("per key object, KB", per_key(ours), per_key(floor)),
    ]
    rows: list[Row] = [
        [label, mine, theirs, times(mine / theirs)] for label, mine, theirs in measured
    ]
    before, after = section["storage_before_cleanup"], section["storage_after_cleanup"]
    rows += [
        ["storage rows before cleanup", before["rows"], "-", "-"],
        ["storage rows left after cleanup", after["rows"], "-", "-"],
    ]
    header = ["", "this project", "the floor", "x floor"]
    notes = [
        "workerd's resident memory on one runtime: the project's limited route against the "
        "floor (a bare Python Worker calling a minimal Python Durable Object), each runtime "
        "with the JavaScript peers loaded; the keys are distinct objects. Idle rows are "
        "deleted by each object's alarm (`[storage] cleanup_after`, 1 s here); the floor's "
        "object keeps its rows."
    ]
    return header, rows, notes


#: The identity section's peer and its goal (issue 39): a cached token's p50 at most this
#: many ms above the same route keyed on a header.
IDENTITY_PEER = "route keyed on a header"
IDENTITY_CACHED = "route keyed on a verified claim, token cached"
IDENTITY_GOAL_MS = 0.3


def identity_verdict(data: Data) -> tuple[float, str]:
    """The cached token's p50 above the header key's, and the goal's verdict."""
    rows = data["identity"]["rows"]
    above = rows[IDENTITY_CACHED]["p50"] - rows[IDENTITY_PEER]["p50"]
    return above, "**met**" if above <= IDENTITY_GOAL_MS else "**missed**"


def _identity(data: Data) -> tuple[list[str], list[Row], list[str]]:
    section = data["identity"]
    rows_in = section["rows"]
    peer = rows_in[IDENTITY_PEER]
    cached = rows_in[IDENTITY_CACHED]
    rows: list[Row] = [
        [
            name,
            row["p50"],
            signed(row["p50"] - peer["p50"]),
            times(row["p50"] / peer["p50"]),
            "-" if name in (IDENTITY_PEER, IDENTITY_CACHED) else signed(row["p50"] - cached["p50"]),
            row["p99"],
            ",".join(row["statuses"]),
        ]
        for name, row in rows_in.items()
    ]
    header = [
        "path",
        "p50 ms",
        "p50 above header key, ms",
        "p50 / header key",
        "above cached token, ms",
        "p99 ms",
        "statuses",
    ]
    above, verdict = identity_verdict(data)
    notes = [
        f"One request at a time: {section['requests']} per row, {section['first']} tokens "
        f"each of its own for a first sight, in {section.get('blocks', 1)} blocks a round "
        "taking each row in turn (each block starting with another); medians of the blocks' figures over "
        f"{section['repeat']} round(s), on a runtime of its own each. Both routes count one "
        "key under the same limit and algorithm. A first sight "
        "parses the token and verifies its signature with WebCrypto before it is counted; "
        "a cached token is looked up by its SHA-256.",
        f"Goal (issue 39): a cached token at most {IDENTITY_GOAL_MS} ms above the header key "
        f"at p50. Measured {above:+.2f} ms: {verdict}.",
    ]
    return header, rows, notes


def _replay(data: Data) -> tuple[list[str], list[Row], list[str]]:
    section = data["replay"]
    reading = section["reading_lines_per_s"]
    rows: list[Row] = [
        ["reading the log alone (parsed and put in order)", reading, "1.00x", "-"],
        [
            f"replay through the whole gateway (first {section['replay_timed_lines']:,} lines)",
            section["replay_lines_per_s"],
            times(reading / section["replay_lines_per_s"]),
            "-",
        ],
        [
            "replay of every line",
            section["full_replay_lines_per_s"],
            times(reading / section["full_replay_lines_per_s"]),
            section["full_replay_peak_rss_mb"],
        ],
    ]
    speed = section["replay_lines_per_s"]
    ratio = reading / speed
    memory = section["full_replay_peak_rss_mb"]
    notes = [
        f"A combined-format log of {section['lines']:,} lines over a day from "
        f"{section['keys']:,} client addresses (one more far over its limits on 1 line in "
        f"100), five routes, one per algorithm; the simulator's objects in memory, the origin "
        "answering the logged status. Peak RSS is a child process's that replays every line.",
        f"Goals (issue 40): 50,000 lines/s and at most 5x reading: {speed:,} lines/s, "
        f"{ratio:.1f}x, **{'met' if speed >= 50_000 and ratio <= 5 else 'missed'}**; "
        f"at most 300 MB for 1,000,000 lines and 100,000 keys: {memory} MB for "
        f"{section['lines']:,} lines and {section['keys']:,} keys, "
        f"**{'met' if memory <= 300 else 'missed'}**.",
    ]
    return ["what", "lines/s", "slower than reading", "peak RSS MB"], rows, notes


Builder = Callable[[Data], tuple[list[str], list[Row], list[str]]]

#: name -> (title, peer, builder), in the document's order; "step" comes from "core".
SECTIONS: dict[str, tuple[str, str, Builder]] = {
    "core": (
        "The pure core: one `check`",
        "the `limits` library on its memory storage (same workload), a minimal token bucket, "
        "and CPython for Pyodide",
        _core,
    ),
    "step": (
        "The Durable Object's step",
        "the same step for `token_bucket`",
        _step,
    ),
    "gateway": (
        "Per request on local workerd",
        "a JavaScript Worker forwarding to the same origin, in the same workerd",
        _gateway,
    ),
    "gateway_python": (
        "The gateway's own work on npm Pyodide, without workerd",
        "a bare forward on the same Pyodide (one `fetch` of the request as it came)",
        _gateway_python,
    ),
    "identity": (
        "Verified identity: a route keyed on a token's claim",
        "the same route keyed on a header, on the same runtime",
        _identity,
    ),
    "object": (
        "One hot key's Durable Object",
        "a JavaScript Durable Object doing the same read-modify-write, on the same runtime",
        _object,
    ),
    "abusive": (
        "A key at 10x its limit",
        "the limit itself (what may be admitted)",
        abusive_table,
    ),
    "flood": (
        "Clients of one key beside a flood of another",
        "the same clients alone, on the same runtime",
        flood_table,
    ),
    "leases": (
        "Token leases: one hot key from two isolates",
        "the same route without leases",
        _leases,
    ),
    "startup": (
        "Startup",
        "a bare Python Worker on the same host (with the project's bindings, and without)",
        _startup,
    ),
    "memory": (
        "Memory and storage",
        "the floor: a bare Python Worker and a minimal Python Durable Object",
        _memory,
    ),
    "replay": (
        "Replaying a day's log",
        "reading the same log alone, on the same machine",
        _replay,
    ),
}
