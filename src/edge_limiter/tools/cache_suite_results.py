"""What a run of the HTTP cache test suite comes to: the gateway's config for it, the suite's
tests and results as classified, the documented exceptions and the verdict against them,
and the report and ``docs/cache-tests.md`` (:mod:`edge_limiter.tools.cache_suite` runs it).
"""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_limiter.tools import ROOT as REPO

PACKAGE = "http-cache-tests"
EXCEPTIONS_FILE = REPO / "scripts" / "cache_suite_exceptions.toml"
DOC = REPO / "docs" / "cache-tests.md"
COMMAND = "python -m edge_limiter.tools.cache_suite --write-doc"
#: The name of the gateway's results beside the peers'.
NAME = "edge-limiter"
#: The route's cache, as RFC 9111 has a shared cache: what the origin gives a lifetime (any
#: status) is kept as long as it says, up to a year; no lifetime of the operator's own for
#: answers that give none (no default_ttl); a client's no-cache is honoured; no stale window
#: beyond what the origin's own directives allow.
ROUTE_CACHE: dict[str, Any] = {
    "ttl": "365d",
    "scope": "public",
    "allow_client_no_cache": True,
    "stale_while_revalidate": "0s",
    "stale_if_error": "0s",
}
#: Far more than the suite sends (about 1,500 requests, every one from 127.0.0.1): never a 429.
ROUTE_LIMIT = "1000000/hour"
#: Far more than the suite has in flight (a hundred tests at a time, one request each).
MAX_IN_FLIGHT = 1000
#: Results that count as passing: a required or optimal test's pass, a check test's "yes".
PASSED = frozenset({"pass", "yes"})
#: The table's columns: the suite's results over non-check tests.
COLUMNS = ("pass", "fail", "optional_fail", "setup_fail", "dependency_fail", "other")
HEADINGS = {
    "pass": "pass",
    "fail": "fail",
    "optional_fail": "optional fail",
    "setup_fail": "setup fail",
    "dependency_fail": "dependency fail",
    "other": "retry / untested",
}


# -- the gateway's setup ---------------------------------------------------------------------------


def gateway_config(origin: str) -> dict[str, Any]:
    """The gateway's config for the suite: one catch-all cached route in front of ``origin``.

    The origin sits in a pool whose breaker cannot open (no status counts as a failure, and
    a trip needs 1000 calls that fail outright, a full window of them) and that never
    retries: the suite's origin answers 5xx on purpose and drops some connections, and a
    request sent twice shows in the suite as a ``retry`` result.
    """
    return {
        "pool": "suite",
        "pools": {
            "suite": {
                "breaker": {
                    "failure_statuses": [],
                    "failure_rate": 100,
                    "window": 1000,
                    "min_calls": 1000,
                },
                "retry": {"attempts": 1},
                "origins": [
                    {
                        "name": "suite",
                        "url": origin,
                        "timeout": "30s",
                        "max_in_flight": MAX_IN_FLIGHT,
                    }
                ],
            }
        },
        "routes": [
            {
                "name": "suite",
                "match": {"path": "*"},
                "limits": ROUTE_LIMIT,
                "cache": dict(ROUTE_CACHE),
            }
        ],
    }


# -- classifying ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SuiteTest:
    """One test of the suite, as its definition says."""

    id: str
    name: str
    suite: str
    kind: str
    """``required``, ``optimal`` or ``check`` (a test with no ``kind`` is required)."""
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What one test came to by the suite's rules."""

    result: str
    own: str
    """The result of the test's own requests, had its dependencies passed (for a
    ``dependency_fail``: what the failed dependency hides)."""
    detail: str | None = None
    """The suite's message when the test's own requests did not pass."""


@dataclass(frozen=True)
class Peer:
    """A cache whose results the suite's package publishes (``results/index.mjs``)."""

    key: str
    name: str
    version: str
    type: str
    """``rev-proxy`` or ``cdn`` (browsers are left out: private caches)."""

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}".strip()


@dataclass
class Summary:
    """The suite's tests and every classified set of results, by name."""

    tests: dict[str, SuiteTest]
    results: dict[str, dict[str, Outcome]]
    peers: list[Peer] = field(default_factory=list)

    def counts(self, name: str) -> dict[str, int]:
        """``name``'s results over the suite's non-check tests, by :data:`COLUMNS`."""
        tally = Counter(
            outcome.result
            for test_id, outcome in self.results[name].items()
            if self.tests[test_id].kind != "check"
        )
        counts = {column: tally.pop(column, 0) for column in COLUMNS[:-1]}
        counts["other"] = sum(tally.values())
        return counts


# -- documented exceptions --------------------------------------------------------------------------

#: ``gap``: a shortfall of the cache, to fix; ``choice``: the gateway's documented behaviour;
#: ``platform``: decided by the Workers runtime before or after the gateway's code.
KINDS = ("gap", "choice", "platform")


@dataclass(frozen=True)
class Documented:
    """A test the gateway does not pass, and why (an entry of the exceptions file)."""

    id: str
    kind: str
    """One of :data:`KINDS`."""
    reason: str


def load_exceptions(path: Path = EXCEPTIONS_FILE) -> dict[str, Documented]:
    """The documented exceptions by test id (ValueError on a malformed entry)."""
    with path.open("rb") as handle:
        raw = tomllib.load(handle)
    found: dict[str, Documented] = {}
    for test_id, entry in raw.items():
        if not isinstance(entry, dict) or set(entry) != {"kind", "reason"}:
            raise ValueError(f"{path.name}: [{test_id}] needs exactly 'kind' and 'reason'")
        kind, reason = entry["kind"], entry["reason"]
        if kind not in KINDS:
            raise ValueError(f"{path.name}: [{test_id}] kind must be one of {KINDS}, got {kind!r}")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{path.name}: [{test_id}] needs a reason")
        found[test_id] = Documented(test_id, kind, " ".join(reason.split()))
    return found


@dataclass(frozen=True)
class Verdict:
    """How a run stands against the documented exceptions."""

    unexplained: list[str]
    """Tests that need a documented reason and have none: required tests that did not pass,
    and the failed tests that keep the suite from measuring a required test."""
    stale: list[str]
    """Documented tests that now pass: their entries are to be removed."""
    unknown: list[str]
    """Documented ids that name no test of the suite."""

    @property
    def ok(self) -> bool:
        return not (self.unexplained or self.stale or self.unknown)


def blocking(summary: Summary, name: str, test_id: str) -> list[str]:
    """The failed tests that keep ``test_id`` from being measured: its failed dependencies,
    or theirs where a dependency was itself not measured."""
    found: list[str] = []
    for dep in summary.tests[test_id].depends_on:
        result = summary.results[name][dep].result
        if result == "dependency_fail":
            found += [d for d in blocking(summary, name, dep) if d not in found]
        elif result not in PASSED and dep not in found:
            found.append(dep)
    return found


def judge(summary: Summary, name: str, exceptions: Mapping[str, Documented]) -> Verdict:
    """Which failures lack a documented reason, and which reasons no longer hold.

    A required test that does not pass needs an entry of its own, unless the suite could not
    measure it because a test it depends on failed (``dependency_fail``): then that test (a
    check such as ``freshness-none``, or an optimal one) needs the entry.
    """
    results = summary.results[name]
    unexplained: set[str] = set()
    for test_id, outcome in results.items():
        if summary.tests[test_id].kind != "required" or outcome.result in PASSED:
            continue
        if outcome.result == "dependency_fail":
            unexplained.update(blocking(summary, name, test_id))
        else:
            unexplained.add(test_id)
    unexplained -= set(exceptions)
    unknown = sorted(t for t in exceptions if t not in results)
    stale = sorted(t for t in exceptions if t in results and results[t].result in PASSED)
    return Verdict(sorted(unexplained), stale, unknown)


# -- a run, the report and the doc ------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One run of the suite against the gateway, classified beside the published peers."""

    summary: Summary
    raw: dict[str, Any]
    """The client's own output (``{test id: true | [kind, message]}``)."""
    seconds: float
    """How long the suite's client took."""
    version: str
    commit: str
    date: str


def transport_errors(raw: Mapping[str, Any]) -> dict[str, str]:
    """Tests whose result is not the cache's doing: the client's request failed outright
    (a reset connection), or the suite's own ``PUT`` of a test's setup did not get through."""
    found: dict[str, str] = {}
    for test_id, value in raw.items():
        if value is True or not isinstance(value, list) or len(value) < 2:
            continue
        kind, message = str(value[0]), str(value[1])
        if kind not in ("Assertion", "Setup") or message.startswith("PUT config resulted in"):
            found[test_id] = f"{kind}: {message}"
    return found


def table(summary: Summary, names: Sequence[str] | None = None) -> list[str]:
    """A Markdown table of results: edge-limiter first, then each peer, most passes first."""
    labels = {peer.key: peer.label for peer in summary.peers}
    if names is None:
        peers = sorted(
            (n for n in summary.results if n != NAME),
            key=lambda n: (-summary.counts(n)["pass"], n),
        )
        names = ([NAME] if NAME in summary.results else []) + peers
    lines = [
        "| cache | " + " | ".join(HEADINGS[c] for c in COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 1) + "|",
    ]
    for name in names:
        counts = summary.counts(name)
        shown = f"**{NAME}**" if name == NAME else labels.get(name, name)
        lines.append(f"| {shown} | " + " | ".join(str(counts[c]) for c in COLUMNS) + " |")
    return lines


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def config_toml(config: Mapping[str, Any]) -> list[str]:
    """``config`` (as :func:`gateway_config` makes it) written as ``edge-limiter.toml`` lines."""
    lines = [f"pool = {_toml_value(config['pool'])}", ""]
    for name, pool in config["pools"].items():
        lines.append(f"[pools.{name}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in pool.items()]
        lines.append("")
    for route in config["routes"]:
        lines.append("[[routes]]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in route.items()]
    return lines


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _shown(result: str) -> str:
    return result.replace("_", " ")


def report(result: Run, exceptions: Mapping[str, Documented]) -> str:
    """What the command prints: the table, every test that did not pass, and how the run
    stands against the documented exceptions."""
    summary = result.summary
    verdict = judge(summary, NAME, exceptions)
    lines = [f"{PACKAGE} {result.version}: the client took {result.seconds:.1f} s", ""]
    lines += [*table(summary), ""]
    grouped: dict[str, list[str]] = {}
    for test_id, outcome in sorted(summary.results[NAME].items()):
        if outcome.result not in PASSED:
            grouped.setdefault(outcome.result, []).append(test_id)
    for kind, ids in sorted(grouped.items()):
        lines.append(f"{_shown(kind)} ({len(ids)}): {' '.join(ids)}")
    lines.append("")
    for test_id in verdict.unexplained:
        outcome = summary.results[NAME][test_id]
        lines.append(f"NOT EXPLAINED {test_id} ({summary.tests[test_id].kind}): {outcome.result}")
        lines.append(f"    {summary.tests[test_id].name}")
        lines.append(f"    {outcome.detail or ''}")
    for test_id in verdict.stale:
        lines.append(f"PASSES NOW {test_id}: remove it from {EXCEPTIONS_FILE.name}")
    for test_id in verdict.unknown:
        lines.append(f"NO SUCH TEST {test_id} in {EXCEPTIONS_FILE.name}")
    for test_id, message in sorted(transport_errors(result.raw).items()):
        lines.append(f"HARNESS {test_id}: {message}")
    if verdict.ok:
        lines.append(f"every failure that needs a reason has one in {EXCEPTIONS_FILE.name}")
    return "\n".join(lines)


def render_doc(result: Run, exceptions: Mapping[str, Documented]) -> str:
    """``docs/cache-tests.md`` for ``result``."""
    summary = result.summary
    verdict = judge(summary, NAME, exceptions)
    ours = summary.results[NAME]
    lines = [
        "# The response cache against the HTTP cache test suite",
        "",
        f"Generated by `{COMMAND}` on {result.date} at commit `{result.commit}`",
        f"with `{PACKAGE}` {result.version} from npm ([cache-tests.fyi](https://cache-tests.fyi)):",
        "do not edit, run the command again. The end-to-end test",
        "`tests/e2e/test_cache_suite_e2e.py` runs the same suite and fails when a required test",
        "fails with no reason below, when a test listed below passes, or when the edge-limiter",
        "row or the list below is not what it measured.",
        "",
        "## Setup",
        "",
        "The suite's own origin (`server/server.mjs`, on a free port) behind the built Worker on",
        "local workerd (real KV; the runtime's clock is real, and the suite waits real seconds),",
        "with this config:",
        "",
        "```toml",
        *config_toml(gateway_config("http://127.0.0.1:PORT")),
        "```",
        "",
        "The pool's breaker cannot open (no status is a failure, and a trip takes 1000 calls",
        "that fail outright) and it never retries: the suite's origin answers 5xx",
        "and drops connections on purpose, and a request sent twice counts as a `retry`.",
        "Connections are not reused (`scripts/cache_suite_transport.mjs`), so that no",
        "connection race decides a test.",
        "",
        "## Results",
        "",
        "Counts over the suite's tests that are not `check` tests (those only ask how a cache",
        "behaves), classified by the suite's own code (`determineTestResult` of its",
        "`lib/display.mjs`); the other rows are the shared caches whose results the package",
        "ships, classified in the same run. `dependency fail`: not measured, because a test it",
        "depends on failed; `retry / untested`: the cache sent a request twice, or the test did",
        "not run.",
        "",
        *table(summary),
        "",
        *([f"The suite's client took {result.seconds:.0f} s.", ""] if result.seconds else []),
        "## Documented exceptions",
        "",
        "Every required test the gateway does not pass, and every failed test that keeps the",
        "suite from measuring a required one, with why: `gap`, a shortfall of the cache to be",
        "fixed (issue 37); `choice`, the gateway's documented behaviour; `platform`, decided by",
        "the Workers runtime. The list is `scripts/cache_suite_exceptions.toml`.",
        "",
        "| test | kind | result | reason |",
        "|---|---|---|---|",
    ]
    for test_id in sorted(exceptions):
        entry = exceptions[test_id]
        outcome = ours.get(test_id)
        shown = _shown(outcome.result) if outcome else "not in the suite"
        lines.append(f"| `{test_id}` | {entry.kind} | {shown} | {_cell(entry.reason)} |")
    if verdict.unexplained:
        names = ", ".join(f"`{t}`" for t in verdict.unexplained)
        lines += ["", f"**Failed with no reason listed**: {names}."]
    if verdict.stale:
        names = ", ".join(f"`{t}`" for t in verdict.stale)
        lines += ["", f"**Listed but passing** (to be removed from the list): {names}."]
    return "\n".join([*lines, *_not_passed(summary)]) + "\n"


def _not_passed(summary: Summary) -> list[str]:
    """The doc's last section: every test of ours that did not pass, with the suite's
    message."""
    lines = [
        "",
        "## Every test that did not pass",
        "",
        "With the suite's message. For a test not measured (`dependency fail`), the tests that",
        "kept it from being measured, and what its own requests came to.",
        "",
        "| test | kind | result | the suite's message |",
        "|---|---|---|---|",
    ]
    for test_id, outcome in sorted(summary.results[NAME].items()):
        if outcome.result in PASSED:
            continue
        message = outcome.detail or ""
        if outcome.result == "dependency_fail":
            deps = ", ".join(f"`{d}`" for d in blocking(summary, NAME, test_id))
            own = _shown(outcome.own) + (f": {message}" if message else "")
            message = f"after {deps}; on its own: {own}"
        kind = summary.tests[test_id].kind
        lines.append(f"| `{test_id}` | {kind} | {_shown(outcome.result)} | {_cell(message)} |")
    return lines


def measured_lines(doc: str) -> list[str]:
    """The lines of a doc that a run decides: the edge-limiter row and the documented
    exceptions' rows (without the date, the commit and the time taken)."""
    lines = doc.splitlines()
    row = [line for line in lines if line.startswith(f"| **{NAME}** |")]
    try:
        start = lines.index("## Documented exceptions")
    except ValueError:
        return row
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith(("| `", "**")):
            rows.append(line)
    return row + rows
