"""BENCHMARKS.md is written from a run's JSON by the bench command itself: the renderer on a
small run (tests/fixtures/bench_run.json), with no benchmark run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_limiter.tools.bench.floor_goals import GOALS as FLOOR_GOALS
from edge_limiter.tools.bench.floor_goals import floor_goals, remains
from edge_limiter.tools.bench.goals import GOALS, goals
from edge_limiter.tools.bench.render import render_document
from edge_limiter.tools.bench.run import main
from edge_limiter.tools.bench.tables import SECTIONS

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "bench_run.json"


@pytest.fixture
def run() -> dict[str, object]:
    data: dict[str, object] = json.loads(FIXTURE.read_text())
    return data


def test_the_document_has_the_method_the_goals_and_a_table_per_section(run: dict) -> None:
    text = render_document(run)
    lines = text.splitlines()
    assert len(lines) <= 250
    for needed in ("## Method", "Machine: 2 cores (a test CPU)", "commit `abc1234`", "2026-12-07"):
        assert needed in text
    assert "`edge-limiter bench --flood-rates 100,400 --json bench.json`" in text
    for title, _peer, _build in SECTIONS.values():
        assert f"## {title}" in lines
    # Each section names its peer.
    assert sum(line.startswith("Peer: ") for line in lines) == len(SECTIONS)
    # Never labelled by run order.
    assert "session" not in text.lower()
    assert "uncommitted" not in text and "--quick" in text  # said in the method only


def test_the_committed_document_is_what_the_committed_run_renders_to() -> None:
    """BENCHMARKS.md is never edited by hand nor left behind its JSON, and stays within 250
    lines with a full run's four flood rates (it had 252 while the method was wrapped)."""
    data = json.loads((ROOT / "docs" / "benchmarks.json").read_text())
    text = render_document(data)
    assert (ROOT / "BENCHMARKS.md").read_text() == text
    assert len(text.splitlines()) <= 250


def test_each_figure_is_shown_as_a_ratio_to_its_peer(run: dict) -> None:
    lines = render_document(run).splitlines()
    limited = next(line for line in lines if line.startswith("| Python: limited route"))
    # p50 3.5 ms against the JavaScript forward's 0.5; 450 req/s against 5,000.
    assert limited.split(" | ")[1:7] == ["3.50", "+3.00", "7.00x", "6.50", "450", "0.09x"]
    leased = next(line for line in lines if line.startswith("| leased |"))
    assert "2.00x" in leased and "1/48.0" in leased  # twice the route without leases
    ours = next(line for line in lines if line.startswith("| Python Durable Object"))
    assert "1.60x" in ours  # the JavaScript object's 2,000/s against 1,250
    memory = next(line for line in lines if line.startswith("| per key object, KB"))
    assert memory.rstrip(" |").split(" | ")[1:4] == ["71.68", "51.20", "1.40x"]


def test_the_goals_verdicts_are_computed_from_the_run(run: dict) -> None:
    verdicts = {number: verdict for number, _goal, _measured, verdict in goals(run)}
    measured = {number: text for number, _goal, text, _verdict in goals(run)}
    assert [goal for _n, goal, _m, _v in goals(run)] == list(GOALS)
    assert (
        verdicts[1].startswith("**missed**: the floor") and "met with token leases" in verdicts[1]
    )
    assert measured[1].startswith("3.00 ms above")
    assert verdicts[2] == verdicts[3] == verdicts[7] == "**met**"
    assert (
        verdicts[4]
        == "1,000/s **met**; 1.3x **missed** (the floor of any Python Durable Object here is past it)"
    )
    assert verdicts[5].endswith("2.5x Pyodide **missed**")
    assert "holds up to 100 req/s" in measured[6] and verdicts[6].startswith("**missed**")
    assert verdicts[8] == "reported; storage **met**"


def test_a_verdict_changes_with_the_figures(run: dict) -> None:
    rows = run["gateway"]["rows"]  # type: ignore[index]
    rows["Python: limited route (object + forward)"]["p50"] = 1.9
    assert goals(run)[0][3] == "**met**"
    run["abusive"]["admitted"] = 117  # type: ignore[index]  # one past the limit
    assert goals(run)[1][3] == "**missed**"


def test_a_section_left_out_of_the_run_is_left_out_of_the_document(run: dict) -> None:
    del run["memory"], run["flood"]
    text = render_document(run)
    assert "## Memory and storage" not in text and "## Clients of one key" not in text
    by_number = {number: (measured, verdict) for number, _g, measured, verdict in goals(run)}
    assert by_number[6] == by_number[8] == ("not measured in this run", "-")


def test_from_json_writes_the_document_without_running(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    assert main(["--from-json", str(FIXTURE), "--write", str(out)]) == 0
    assert out.read_text() == render_document(json.loads(FIXTURE.read_text()))


def test_the_identity_table_shows_each_row_against_the_header_key_and_its_goal(
    run: dict,
) -> None:
    lines = render_document(run).splitlines()
    cached = next(line for line in lines if line.startswith("| route keyed on a verified claim"))
    assert cached.split(" | ")[1:5] == ["3.40", "+0.20", "1.06x", "-"]
    rs256 = next(line for line in lines if line.startswith("| first sight of a token, RS256"))
    assert rs256.split(" | ")[1:5] == ["4.40", "+1.20", "1.38x", "+1.00"]  # above the cached
    assert any("Measured +0.20 ms: **met**" in line for line in lines)
    rows = run["identity"]["rows"]  # type: ignore[index]
    rows["route keyed on a verified claim, token cached"]["p50"] = 3.6
    assert "Measured +0.40 ms: **missed**" in render_document(run)


def test_the_leases_where_the_limit_binds_are_beside_their_control_and_simulation(
    run: dict,
) -> None:
    lines = render_document(run).splitlines()
    row = next(line for line in lines if line.startswith("| 2 | `sliding_window` | moving |"))
    cells = row.strip("| ").split(" | ")
    assert cells[3:8] == ["248 / 250", "0.992", "0.996", "1/11.3", "1/20.0"]
    assert any("`200 per 10 seconds`, 40 clients per isolate for 12 s" in line for line in lines)


def test_the_floor_goals_are_computed_from_the_run(run: dict) -> None:
    goals_41 = {
        number: (measured, verdict) for number, _goal, measured, verdict in floor_goals(run)
    }
    assert [goal for _n, goal, _m, _v in floor_goals(run)] == list(FLOOR_GOALS)
    # The fixture's limited route: 3.5 ms against the floor's 3.0 (1.17x: past 1.10x).
    assert goals_41[1] == ("p50 3.50 ms against 3.00: 1.17x; p99 0.87x", "**missed**")
    assert goals_41[4][1] == "**met**"  # leased 1.9 ms, below the floor's 3.0
    assert goals_41[6][0].startswith("limited 2.00 ms against 1.60: 1.25x; unmatched 1.00")
    assert "denied 0.60 ms against 0.50: 1.20x" in goals_41[6][0]
    rows = run["gateway"]["rows"]
    rows["Python: limited route (object + forward)"].update(p50=3.2, p99=6.0)
    assert floor_goals(run)[0][3] == "**met**"
    text = render_document(run)
    assert "## The goals against the floor (issue 41)" in text
    limited = next(line for line in text.splitlines() if line.startswith("| Python: limited route"))
    assert " | 2.00 | " in limited  # workerd's CPU ms per request


def test_what_remains_between_each_path_and_its_floor_is_computed_from_the_run(
    run: dict,
) -> None:
    header, rows, note = remains(run)
    assert len(header) == 5 and "What remains" in note
    by_path = {row[0]: row[1:4] for row in rows}
    # The fixture's unmatched path: 2.0 ms p50 and 1.0 CPU ms against the bare forward's
    # 1.5 and 0.8; 150 us of Python on Pyodide against the bare forward's 50.
    assert by_path["unmatched path (forward)"] == ["+0.50", "+0.20", "+100"]
    assert by_path["limited route (object + forward)"] == ["+0.50", "+0.40", "+350"]
    assert by_path["denied (429)"] == ["+0.50", "+0.10", "+50"]
    lines = render_document(run).splitlines()
    assert "| unmatched path (forward) | +0.50 | +0.20 | +100 |" in "\n".join(lines)
    del run["gateway_python"]
    assert remains(run) == ([], [], "")
    assert not any(line.startswith("What remains") for line in render_document(run).splitlines())


def test_the_victims_share_under_a_flood_is_shown_beside_the_floors(run: dict) -> None:
    # The fixture: ours 360/400 = 0.90 and 200/400 = 0.50; the floor's 475/500 = 0.95 and
    # 400/500 = 0.80.
    lines = render_document(run).splitlines()
    row = next(line for line in lines if line.startswith("| beside the flood | 400 "))
    assert row.strip("| ").split(" | ")[-3:] == ["3.00x", "0.80x", "0.62x"]
    measured = {number: m for number, _goal, m, _verdict in floor_goals(run)}[6]
    assert "100 req/s 0.90x against 0.95x, 400 req/s 0.50x against 0.80x" in measured
    assert any("its clients alone: 500 req/s" in line for line in lines)
    del run["flood"]["floor"]
    row = next(
        line
        for line in render_document(run).splitlines()
        if line.startswith("| beside the flood | 400 ")
    )
    assert row.endswith("| 0.50x | 3.00x |")  # no floor columns when no floor was measured
    assert "the flood's floor: not measured" in floor_goals(run)[5][2]
