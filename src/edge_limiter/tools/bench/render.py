"""BENCHMARKS.md, written from a benchmark run's JSON (``edge-limiter bench --json``).

Every table shows each figure beside its peer measured in the same run, and as a ratio to
it (:mod:`.tables`); the goals of issue 10 get a verdict computed from the same figures
(:mod:`.goals`). Nothing is typed by hand, so the document says what one run measured:

    edge-limiter bench --json bench.json --write BENCHMARKS.md      (run, then write)
    edge-limiter bench --from-json bench.json --write BENCHMARKS.md (write only)

A section the run left out (``--only``) is left out of the document, and the goals that
need it say so.
"""

from __future__ import annotations

from edge_limiter.tools.bench.cells import Data, markdown_table
from edge_limiter.tools.bench.floor_goals import floor_goals, remains
from edge_limiter.tools.bench.goals import goals
from edge_limiter.tools.bench.tables import SECTIONS

_METHOD = """\
Every figure is a median over repeated rounds and is shown beside a peer measured **in the
same run, on the same workload**, and as a ratio to it: the `limits` library and a minimal
token bucket for the core, a JavaScript Worker and a JavaScript Durable Object in the same
workerd for the gateway and the object, a bare Python Worker (and a minimal Python Durable
Object) for what any Python Worker pays on this host, the same route without leases for
token leases. Each round of the workerd sections runs on a fresh runtime, so none inherits
another's heap, timers or counters. The runtime, the origin (a keep-alive Node server) and
the load generator (`scripts/load.mjs`, keep-alive Node) share the machine: the origin's own
ceiling is the first row of the gateway table. Local figures are noisy (rounds differ by up
to 30%, and this machine's speed drifts between runs): compare the rows of one table, not
tables of different runs. `--quick` runs every section with tiny numbers (the test suite
does, so the benchmarks cannot rot); its figures mean nothing.

Run it: `edge-limiter bench [--only
core,gateway,identity,object,flood,leases,startup,memory,replay] [--flood-rates
50,100,200,400] --json FILE --write BENCHMARKS.md` (every section takes about 25 minutes on
2 cores; run it on a quiet machine). Without workerd, on npm Pyodide in Node: `node
scripts/bench/pyodide_gateway.mjs [--profile PATH]` (the gateway's own work per request) and
`node scripts/bench/pyodide_imports.mjs [--profile]` (where importing the Worker goes). A
herd on a cached route: `python -m edge_limiter.tools.bench.herd URL` against `scripts/dev`.
The token-lease simulation: `python -m edge_limiter.tools.lease_sim`
([docs/leases.md](docs/leases.md)); the replay alone: `python -m
edge_limiter.tools.replay.bench`."""
#: The method, each paragraph on one line (as Markdown reads it anyway), so the document
#: stays within its 250 lines however many flood rates a run has.
METHOD = "\n\n".join(" ".join(part.split("\n")) for part in _METHOD.split("\n\n"))


def render_document(data: Data) -> str:
    """The whole of BENCHMARKS.md for one run."""
    meta = data.get("meta", {})
    lines = [
        "# Benchmarks",
        "",
        "<!-- Written by `edge-limiter bench --write BENCHMARKS.md` from the run's JSON "
        "(`--from-json FILE` writes it again without running): do not edit by hand. -->",
        "",
        "## Method",
        "",
        METHOD,
        "",
        f"- Machine: {meta.get('machine', 'unknown')}.",
        f"- Runtime: {meta.get('runtime', 'unknown')}.",
        *([f"- Python: {meta['python']}."] if meta.get("python") else []),
        f"- Command: `{meta.get('command', 'edge-limiter bench')}`.",
        f"- Date and commit: {meta.get('date', 'unknown')}, {_commit(meta)}.",
        "",
    ]
    if meta.get("quick"):
        lines += ["**A `--quick` run: its figures mean nothing.**", ""]
    lines += ["## The goals (issue 10)", ""]
    lines += markdown_table(
        ["#", "goal", "measured in this run", "verdict"],
        [[number, goal, measured, verdict] for number, goal, measured, verdict in goals(data)],
    )
    lines += ["", "## The goals against the floor (issue 41)", ""]
    lines += markdown_table(
        ["#", "goal", "measured in this run", "verdict"],
        [list(goal) for goal in floor_goals(data)],
    )
    header, rows, note = remains(data)
    if rows:
        lines += ["", note, ""]
        lines += markdown_table(header, rows)
    for name in SECTIONS:
        if name in data or (name == "step" and "core" in data):
            lines += ["", render_section(name, data)]
    return "\n".join(lines).rstrip() + "\n"


def render_section(name: str, data: Data) -> str:
    """One section's heading, peer and table (printed as the run goes, and in the doc)."""
    title, peer, build = SECTIONS[name]
    header, rows, notes = build(data)
    lines = [f"## {title}", "", f"Peer: {peer}.", ""]
    lines += markdown_table(header, rows)
    for note in notes:
        lines += ["", note]
    return "\n".join(lines)


def _commit(meta: Data) -> str:
    commit = meta.get("commit")
    if not commit:
        return "commit unknown"
    return f"commit `{commit}`" + (" with uncommitted changes" if meta.get("dirty") else "")
