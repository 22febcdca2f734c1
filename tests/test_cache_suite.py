"""The cache suite (``edge_limiter.tools.cache_suite``) without the gateway: the route it sets
up, the suite's own classification of results, the judgement against the documented exceptions, the doc, and
the suite's origin behind the connection settings (the whole run is
tests/e2e/test_cache_suite_e2e.py)."""

from __future__ import annotations

import http.client
import json
import tomllib
import uuid
from pathlib import Path

import pytest

from edge_limiter.core.config.parse import parse_config
from edge_limiter.core.resilience import breaker
from edge_limiter.tools import cache_suite
from edge_limiter.tools.cache_suite import Documented, Outcome, SuiteTest, Summary


def test_the_route_is_an_rfc_9111_shared_cache_and_its_origin_is_never_cut_off() -> None:
    route = parse_config(cache_suite.gateway_config("http://127.0.0.1:9")).routes[0]
    cache = route.cache
    assert cache is not None
    assert cache.ttl_ms == 365 * 86_400_000
    assert cache.scope == "public"
    assert cache.statuses is None  # whatever the origin gives a lifetime
    assert cache.default_ttl_ms == 0  # and nothing that gives none
    assert cache.allow_client_no_cache
    assert cache.stale_if_error_ms == 0 and cache.stale_while_revalidate_ms == 0
    pool = route.forward.pool
    assert route.forward.retry.attempts == 1  # a request sent twice is a "retry" result
    settings = pool.breaker
    # The suite's origin answers these on purpose: none is a failure.
    for status in (500, 502, 503, 504, 599):
        assert breaker.classify(status, None, 5, settings) is breaker.Outcome.SUCCESS
    # Calls that fail outright (dropped connections) open it only after a full window.
    state = breaker.BreakerState()
    for now in range(999):
        state = breaker.record(state, settings, now, breaker.Outcome.FAILURE)
    assert state.phase is breaker.Phase.CLOSED
    assert breaker.record(state, settings, 999, breaker.Outcome.FAILURE).phase is breaker.Phase.OPEN


@pytest.fixture(scope="module")
def classified(tmp_path_factory: pytest.TempPathFactory) -> Summary:
    raw = {
        "freshness-none": ["Assertion", "Response 2 comes from cache"],
        "freshness-max-age": True,  # depends on freshness-none
        "headers-store-Set-Cookie": ["Setup", "Response 2 does not come from cache"],
        "headers-store-Content-Length": ["Assertion", "Content-Length is null"],
        "vary-match": ["Setup", "retry"],
        "status-302-fresh": ["Assertion", "Response 2 does not come from cache"],
        "ccreq-oic": True,
    }
    path = tmp_path_factory.mktemp("suite") / "raw.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return cache_suite.summarize({"probe": path})


def test_results_are_classified_by_the_suites_own_rules(classified: Summary) -> None:
    results = classified.results["probe"]
    assert results["freshness-none"] == Outcome("no", "no", "Response 2 comes from cache")
    # Its own requests passed, but what it depends on failed: not measured.
    assert results["freshness-max-age"] == Outcome("dependency_fail", "pass", None)
    assert results["headers-store-Set-Cookie"].result == "setup_fail"
    assert results["headers-store-Content-Length"].result == "fail"
    assert results["vary-match"].result == "retry"
    assert results["status-302-fresh"].result == "optional_fail"
    assert results["ccreq-oic"].result == "yes"
    assert results["freshness-max-age-0"].result == "untested"
    tests = classified.tests
    assert tests["freshness-none"].kind == "check"
    assert tests["freshness-max-age"].depends_on == ("freshness-none",)
    assert tests["headers-store-Set-Cookie"].kind == "required"
    assert tests["status-302-fresh"].kind == "optimal"
    # cli.mjs runs the surrogate tests too; browser-only tests never reach a proxy.
    assert tests["surrogate-no-store"].suite == "surrogate-control"


def test_the_published_shared_caches_are_counted_over_every_non_check_test(
    classified: Summary,
) -> None:
    non_check = sum(1 for t in classified.tests.values() if t.kind != "check")
    peers = {peer.key: peer for peer in classified.peers}
    assert {p.type for p in peers.values()} == {"rev-proxy", "cdn"}  # no browser
    assert {"squid", "varnish", "nginx", "fastly", "apache", "trafficserver"} <= set(peers)
    for key in peers:
        assert sum(classified.counts(key).values()) == non_check
    # Squid 4.13's published results, by the suite 0.4.5's own rules.
    assert classified.counts("squid") == {
        "pass": 171,
        "fail": 22,
        "optional_fail": 38,
        "setup_fail": 2,
        "dependency_fail": 27,
        "other": 0,
    }
    table = cache_suite.table(classified, ["squid"])
    assert table[2] == "| Squid 4.13-1ubuntu2 | 171 | 22 | 38 | 2 | 27 | 0 |"


def _summary(results: dict[str, str], tests: list[SuiteTest]) -> Summary:
    return Summary(
        {t.id: t for t in tests},
        {"gw": {test_id: Outcome(result, result) for test_id, result in results.items()}},
    )


TESTS = [
    SuiteTest("none", "", "s", "check"),
    SuiteTest("fresh", "", "s", "optimal", ("none",)),
    SuiteTest("stale", "", "s", "required", ("fresh",)),
    SuiteTest("plain", "", "s", "required"),
    SuiteTest("nice", "", "s", "optimal"),
]


def _documented(*ids: str) -> dict[str, Documented]:
    return {i: Documented(i, "gap", "why") for i in ids}


def test_a_required_failure_needs_a_reason_of_its_own() -> None:
    summary = _summary(
        {"none": "yes", "fresh": "pass", "stale": "pass", "plain": "fail", "nice": "optional_fail"},
        TESTS,
    )
    assert cache_suite.judge(summary, "gw", {}).unexplained == ["plain"]
    assert cache_suite.judge(summary, "gw", _documented("plain")).ok
    # A setup failure hides what the test checks: it needs one too.
    summary.results["gw"]["plain"] = Outcome("setup_fail", "setup_fail")
    assert cache_suite.judge(summary, "gw", {}).unexplained == ["plain"]


def test_a_test_not_measured_needs_a_reason_for_what_kept_it_from_being_measured() -> None:
    summary = _summary(
        {
            "none": "no",
            "fresh": "dependency_fail",
            "stale": "dependency_fail",
            "plain": "pass",
            "nice": "pass",
        },
        TESTS,
    )
    # stale depends on fresh, which was not measured because the check test failed.
    assert cache_suite.blocking(summary, "gw", "stale") == ["none"]
    assert cache_suite.judge(summary, "gw", {}).unexplained == ["none"]
    assert cache_suite.judge(summary, "gw", _documented("none")).ok
    summary.results["gw"]["none"] = Outcome("yes", "yes")
    summary.results["gw"]["fresh"] = Outcome("optional_fail", "optional_fail")
    assert cache_suite.judge(summary, "gw", {}).unexplained == ["fresh"]


def test_a_reason_for_a_test_that_passes_or_does_not_exist_is_flagged() -> None:
    summary = _summary(
        {"none": "yes", "fresh": "pass", "stale": "pass", "plain": "pass", "nice": "pass"},
        TESTS,
    )
    verdict = cache_suite.judge(summary, "gw", _documented("none", "plain", "gone"))
    assert verdict.stale == ["none", "plain"]
    assert verdict.unknown == ["gone"]
    assert not verdict.ok


def test_malformed_exceptions_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    for text in (
        '[a]\nreason = "r"\n',
        '[a]\nkind = "maybe"\nreason = "r"\n',
        '[a]\nkind = "gap"\nreason = " "\n',
        '[a]\nkind = "gap"\nreason = "r"\nseverity = 1\n',
    ):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=r"\[a\]"):
            cache_suite.load_exceptions(path)
    path.write_text('[a]\nkind = "platform"\nreason = """two\n  lines"""\n', encoding="utf-8")
    assert cache_suite.load_exceptions(path) == {"a": Documented("a", "platform", "two lines")}


def test_every_documented_exception_names_a_test_of_the_suite(classified: Summary) -> None:
    exceptions = cache_suite.load_exceptions()
    assert exceptions
    assert [t for t in exceptions if t not in classified.tests] == []


def test_the_committed_doc_shows_the_exceptions_file_and_the_setup() -> None:
    doc = cache_suite.DOC.read_text(encoding="utf-8")
    rows = [line for line in cache_suite.measured_lines(doc) if line.startswith("| `")]
    listed = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        listed[cells[0].strip("`")] = (cells[1], cells[3].replace("\\|", "|"))
    exceptions = cache_suite.load_exceptions()
    assert listed == {t: (e.kind, e.reason) for t, e in exceptions.items()}, (
        "docs/cache-tests.md does not list scripts/cache_suite_exceptions.toml: run "
        "python -m edge_limiter.tools.cache_suite --write-doc"
    )
    block = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    assert tomllib.loads(block) == cache_suite.gateway_config("http://127.0.0.1:PORT")
    assert cache_suite.measured_lines(doc)[0].startswith(f"| **{cache_suite.NAME}** |")


def test_only_the_caches_doing_counts_as_its_result() -> None:
    raw = {
        "a": True,
        "b": ["Assertion", "Response 2 comes from cache"],
        "c": ["Setup", "Response 1 status is 502, not 200"],
        "d": ["FetchError", "request to http://127.0.0.1:1/config/x failed, reason: ECONNRESET"],
        "e": ["Setup", "PUT config resulted in 502 Bad Gateway - cache-control: no-store"],
    }
    assert set(cache_suite.transport_errors(raw)) == {"d", "e"}


def test_the_suites_origin_serves_a_test_on_a_free_port_one_connection_per_request() -> None:
    with cache_suite.SuiteOrigin() as origin:
        port = int(origin.url.rsplit(":", 1)[1])
        test_id = str(uuid.uuid4())
        config = json.dumps([{"id": "probe", "response_headers": [["Cache-Control", "max-age=1"]]}])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("PUT", f"/config/{test_id}", config, {"Content-Type": "text/json"})
        answer = connection.getresponse()
        assert (answer.status, answer.read()) == (201, b"OK")
        # scripts/cache_suite_transport.mjs: the server closes every connection itself.
        assert answer.getheader("connection") == "close"
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", f"/test/{test_id}", headers={"Req-Num": "1"})
        answer = connection.getresponse()
        assert answer.status == 200
        assert answer.getheader("cache-control") == "max-age=1"
        assert answer.getheader("server-request-count") == "1"
        assert answer.read() == test_id.encode()
