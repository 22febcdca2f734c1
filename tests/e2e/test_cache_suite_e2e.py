"""The public HTTP cache test suite (npm ``http-cache-tests``) against the response cache, once.

The built Worker runs on local workerd in front of the suite's own origin with issue 37's
catch-all cached route (``edge_limiter.tools.cache_suite``); the suite's client runs every
test (about 20 s: a hundred tests at a time, with the real 3 s pauses its freshness tests need). Every
required test that fails must have a documented reason in
``scripts/cache_suite_exceptions.toml``, every listed test must still fail, and
``docs/cache-tests.md`` must show what this run measured (``python -m
edge_limiter.tools.cache_suite --write-doc`` writes it).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_limiter.tools import cache_suite

from .conftest import track

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def suite_run(worker_dir: Path) -> Iterator[cache_suite.Run]:
    with cache_suite.running_gateway(worker_dir) as (gateway, _origin):
        track(gateway)
        raw, seconds = cache_suite.measure(gateway)
    result = cache_suite.classify(raw, seconds)
    print(cache_suite.report(result, cache_suite.load_exceptions()))
    yield result


def test_the_suite_measured_the_cache_not_the_connections(suite_run: cache_suite.Run) -> None:
    summary = suite_run.summary
    assert set(suite_run.raw) == set(summary.tests), "the client did not run every test"
    assert cache_suite.transport_errors(suite_run.raw) == {}
    retried = [t for t, o in summary.results[cache_suite.NAME].items() if o.result == "retry"]
    assert retried == [], "the gateway sent a request to the suite's origin twice"


def test_every_failure_that_hides_a_required_test_has_a_documented_reason(
    suite_run: cache_suite.Run,
) -> None:
    summary = suite_run.summary
    verdict = cache_suite.judge(summary, cache_suite.NAME, cache_suite.load_exceptions())
    missing = {
        test_id: (
            summary.tests[test_id].name,
            summary.results[cache_suite.NAME][test_id].result,
            summary.results[cache_suite.NAME][test_id].detail,
        )
        for test_id in verdict.unexplained
    }
    assert missing == {}, (
        f"failed with no reason in {cache_suite.EXCEPTIONS_FILE.name} (fix the cache, or add "
        "the reason and run python -m edge_limiter.tools.cache_suite --write-doc)"
    )


def test_every_documented_failure_still_fails(suite_run: cache_suite.Run) -> None:
    verdict = cache_suite.judge(suite_run.summary, cache_suite.NAME, cache_suite.load_exceptions())
    assert {"passing now": verdict.stale, "no such test": verdict.unknown} == {
        "passing now": [],
        "no such test": [],
    }, (
        f"remove these from {cache_suite.EXCEPTIONS_FILE.name}, then run python -m edge_limiter.tools.cache_suite --write-doc"
    )


def test_the_doc_shows_what_this_run_measured(suite_run: cache_suite.Run, tmp_path: Path) -> None:
    fresh = cache_suite.render_doc(suite_run, cache_suite.load_exceptions())
    (tmp_path / "cache-tests.md").write_text(fresh, encoding="utf-8")
    committed = cache_suite.DOC.read_text(encoding="utf-8")
    expected = cache_suite.measured_lines(fresh)
    assert len(expected) > 1
    shown = cache_suite.measured_lines(committed)
    diff = "\n".join(difflib.unified_diff(shown, expected, "committed", "measured", lineterm=""))
    assert shown == expected, (
        f"docs/cache-tests.md is not what this run measured (this run's doc: "
        f"{tmp_path / 'cache-tests.md'}); run python -m edge_limiter.tools.cache_suite --write-doc\n{diff}"
    )
