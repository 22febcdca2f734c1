"""scripts/check-config: the effective table, every error with route and field, --explain."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path

import pytest

from edge_limiter.core.errors import ConfigError
from edge_limiter.testing import Simulator
from edge_limiter.tools import check_config

ROOT = Path(__file__).resolve().parents[1]
WRANGLER = 'name = "x"\nmain = "build/worker/entry.py"\ncompatibility_date = "2025-11-01"\n'


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """``scripts/check-config ARGS`` from the project's root: the command's own ``main`` (its
    parser, its output, its exit status), in this process rather than a new Python each."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = check_config.main(list(args))
        except SystemExit as exc:  # argparse's errors
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def test_the_example_config_prints_its_routes_in_order() -> None:
    done = run()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    names = [line.split()[0] for line in lines[4:11]]
    assert names == ["login", "search", "tenant-api", "reports", "payments", "catalog", "api"]
    assert "10 per second (burst 20); 1000 per hour" in done.stdout
    assert "60 per minute [cost 10]" in done.stdout  # what a route's requests cost
    assert "regional (2)" in done.stdout and "required" in done.stdout
    assert "method overrides on POST: apply" in done.stdout
    assert "CORS on the gateway's own answers: http://localhost:3000" in done.stdout
    assert done.stdout.rstrip().endswith("OK")


def test_errors_name_every_route_and_field_and_fail(tmp_path: Path) -> None:
    (tmp_path / "wrangler.toml").write_text(WRANGLER)
    bad = tmp_path / "edge-limiter.toml"
    bad.write_text(
        'origin = "https://a.test"\n'
        '[[routes]]\nname = "a"\nmatch = { path = "/a" }\nlimits = "5/fortnight"\n'
        '[[routes]]\nname = "b"\nmatch = { path = "b" }\nlimits = "5/s"\nkey = "header:x y"\n'
    )
    done = run(str(bad), "--wrangler", str(tmp_path / "wrangler.toml"))
    assert done.returncode == 1
    assert "route 'a'.limits" in done.stderr
    assert "route 'b'.match.path" in done.stderr and "route 'b'.key" in done.stderr


def shadowed_login(tmp_path: Path) -> Path:
    """A project whose route 'login' can never match (route 'all' takes its requests)."""
    (tmp_path / "wrangler.toml").write_text(WRANGLER)
    file = tmp_path / "edge-limiter.toml"
    file.write_text(
        'origin = "https://a.test"\n'
        '[[routes]]\nname = "all"\nmatch = { path = "/v1/*" }\nlimits = "5/s"\n'
        '[[routes]]\nname = "login"\nmatch = { path = "/v1/login" }\nlimits = "5/s"\n'
    )
    return file


def test_warnings_are_printed(tmp_path: Path) -> None:
    file = shadowed_login(tmp_path)
    done = run(str(file), "--wrangler", str(tmp_path / "wrangler.toml"))
    assert done.returncode == 0
    assert "warning:" in done.stdout and "route 'login'" in done.stdout


def test_json_gives_the_check_as_an_object_whether_the_config_is_valid_or_not(
    tmp_path: Path,
) -> None:
    file = shadowed_login(tmp_path)
    wrangler = ("--wrangler", str(tmp_path / "wrangler.toml"))
    done = run(str(file), *wrangler, "--json")
    assert done.returncode == 0, done.stderr
    checked = json.loads(done.stdout)
    assert checked["ok"] is True and checked["problems"] == []
    assert [route["name"] for route in checked["routes"]] == ["all", "login"]
    assert checked["routes"][0]["limits"][0]["capacity"] == 5
    assert any("route 'login'" in warning for warning in checked["warnings"])
    assert checked["unmatched"] == {"forward_to": "a.test"}

    file.write_text('origin = "https://a.test"\n[[routes]]\nname = "a"\nlimits = "5/0s"\n')
    for extra in ((), ("--explain", "GET", "https://a.test/a"), ("--simulate", "GET", "/a")):
        refused = run(str(file), *wrangler, "--json", *extra)
        assert refused.returncode == 1 and refused.stderr == ""
        shown = json.loads(refused.stdout)
        assert shown["ok"] is False
        assert [p for p in shown["problems"] if "route 'a'.limits" in p], shown


def test_explain_names_route_canonical_path_key_and_durable_object() -> None:
    done = run(
        "--explain",
        "GET",
        "https://api.example.com//v1/tenants/%61cme/items",
        "--ip",
        "203.0.113.5",
        "--country",
        "us",
        "--continent",
        "na",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["route"] == "tenant-api"
    assert result["canonical_path"] == "/v1/tenants/acme/items"
    assert result["key"] == "path:tenant=acme|ip=203.0.113.5"
    assert result["durable_object"] == "tenant-api:path:tenant=acme|ip=203.0.113.5"
    assert result["origins"] == ["us", "eu"]
    bad = run("--explain", "GET", "https://api.example.com/v1/a%2fb")
    assert bad.returncode == 2 and "bad_path" in bad.stdout
    relative = run("--explain", "GET", "/v1/login")
    assert relative.returncode == 2 and "not an absolute URL" in relative.stderr
    assert relative.stdout == ""
    # The path the Worker is given (the runtime resolved the dot segments), as it is served.
    climbing = run("--explain", "GET", "https://api.example.com/x/../../v1/tenants/a/b", "--json")
    assert json.loads(climbing.stdout)["canonical_path"] == "/v1/tenants/a/b"
    for bad in (["--ip", "1.2.3"], ["--lat", "100"], ["--asn", "AS13335x"]):
        refused = run("--explain", "GET", "https://api.example.com/v1/login", *bad)
        assert refused.returncode == 2 and "error:" in refused.stderr, bad


def test_another_environments_problem_is_a_warning_unless_it_is_asked_for(
    tmp_path: Path,
) -> None:
    (tmp_path / "wrangler.toml").write_text(
        WRANGLER + '[env.prod.vars]\nEDGE_LIMITER_ENV = "prod"\n'
    )
    (tmp_path / "mine.toml").write_text(
        'origin = "https://a.test"\n[[routes]]\nname = "a"\nmatch = { path = "/a" }\nlimits = "5/s"\n'
    )
    wrangler = str(tmp_path / "wrangler.toml")
    top = run(str(tmp_path / "mine.toml"), "--wrangler", wrangler)
    assert top.returncode == 0, top.stderr
    assert "warning: `npx wrangler deploy --env prod` would fail" in top.stdout
    assert "has no [env.prod] table" in top.stdout and "add one" in top.stdout
    prod = run(str(tmp_path / "mine.toml"), "--wrangler", wrangler, "--env", "prod")
    assert prod.returncode == 1 and "has no [env.prod] table" in prod.stderr


def test_a_broken_env_table_of_the_file_stops_only_the_runs_that_use_it(tmp_path: Path) -> None:
    (tmp_path / "wrangler.toml").write_text(
        WRANGLER + '[env.staging.vars]\nEDGE_LIMITER_ENV = "staging"\n'
    )
    (tmp_path / "mine.toml").write_text(
        'origin = "https://a.test"\n[[routes]]\nname = "a"\nmatch = { path = "/a" }\n'
        'limits = "5/s"\n[[env.staging.routes]]\nname = "bad"\nmatch = { path = "/x" }\n'
        'limits = "5/minut"\n'
    )
    args = (str(tmp_path / "mine.toml"), "--wrangler", str(tmp_path / "wrangler.toml"))
    top = run(*args)
    assert top.returncode == 0, top.stderr
    assert "warning: mine.toml [env.staging]: route 'bad'.limits" in top.stdout
    staging = run(*args, "--env", "staging")
    assert staging.returncode == 1 and "[env.staging]: route 'bad'.limits" in staging.stderr


def test_the_command_reads_a_relative_path_from_where_it_is_run(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(
        'origin = "https://a.test"\n[[routes]]\nname = "a"\nmatch = { path = "/a" }\nlimits = "5/fortnight"\n'
    )
    done = subprocess.run(
        [str(ROOT / "scripts" / "check-config"), "mine.toml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 1 and "mine.toml: route 'a'.limits" in done.stderr


def test_a_config_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    # Some Windows editors start UTF-8 files with one; TOML parsers refuse it.
    (tmp_path / "wrangler.toml").write_text(WRANGLER)
    config = 'origin = "https://a.test"\n[[routes]]\nname = "a"\nmatch = { path = "/a" }\nlimits = "5/s"\n'
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + config.encode())
    done = run(str(tmp_path / "bom.toml"), "--wrangler", str(tmp_path / "wrangler.toml"))
    assert done.returncode == 0, done.stderr


def test_the_options_of_a_request_to_explain_need_explain() -> None:
    done = run("--json", "--ip", "203.0.113.5")
    assert done.returncode == 2 and "--ip: only with --explain" in done.stderr
    alone = run("--times", "3")
    assert alone.returncode == 2 and "--times: only with --simulate" in alone.stderr


def test_simulate_runs_the_requests_through_the_gateway_on_a_simulated_clock() -> None:
    login = "https://api.example.com/v1/login"
    done = run("--simulate", "POST", login, "--times", "7", "--every", "5s", "--ip", "203.0.113.9")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    assert [row[2] for row in rows] == ["200"] * 5 + ["429"] * 2
    assert [row[1] for row in rows] == ["0s", "5s", "10s", "15s", "20s", "25s", "30s"]
    # The window of the first request ends at 60 s: 35 s then 30 s to wait.
    assert [row[4] for row in rows[5:]] == ["35", "30"]
    assert [row[3] for row in rows] == ["4", "3", "2", "1", "0", "0", "0"]
    assert rows[0][5] == "1" and rows[-1][5:] == ["0", "limited"]
    keyed = run(
        "--simulate",
        "GET",
        "https://api.example.com/v1/search",
        "--times",
        "21",
        "--header",
        "X-Api-Key: k1",
        "--json",
    )
    results = json.loads(keyed.stdout)
    assert [r["status"] for r in results] == [200] * 20 + [429]  # a burst of 20
    # Numbers as numbers (a reader's finding: remaining and retry_after were strings).
    assert (results[0]["remaining"], results[-1]["remaining"]) == (19, 0)
    assert isinstance(results[-1]["retry_after"], int) and results[0]["retry_after"] is None
    assert results[0]["ratelimit"].startswith('"10-per-second-burst-20";r=19;t=1')
    for bad, says in (
        (["--every", "5 seconds"], "--every: cannot parse duration"),
        (["--times", "0"], "--times must be from 1"),
        (["--explain", "GET", login], "one at a time"),
    ):
        refused = run("--simulate", "GET", login, *bad)
        assert refused.returncode == 2 and says in refused.stderr, bad
    relative = run("--simulate", "GET", "/v1/login")
    assert relative.returncode == 2 and "not an absolute URL" in relative.stderr
    for url, says in (
        ("https://api.example.com:99999/x", "the port must be from 1 to 65535"),
        ("https://[::1/x", "is not a host with an optional port"),
    ):
        refused = run("--simulate", "GET", url)
        assert refused.returncode == 2 and says in refused.stderr, url
    for bad, says in (
        (["--header", "Bad Name: x"], "expected 'Name: value'"),
        (["--country", "ZZZ"], "two-letter code"),
        (["--at", "soon"], "--at: start must be"),
        (["--origin-status", "99"], "--origin-status must be"),
    ):
        refused = run("--simulate", "GET", login, *bad)
        assert refused.returncode == 2 and says in refused.stderr, bad


def test_simulate_says_why_and_takes_failing_slow_origins_and_a_start() -> None:
    pay = "https://api.example.com/v1/payments"
    keyed = ["--header", "X-Api-Key: k", "--header", 'Idempotency-Key: "k1"']
    done = run("--simulate", "POST", pay, "--times", "2", *keyed, "--json")
    assert [r["reason"] for r in json.loads(done.stdout)] == [None, "replayed"]
    missing = run("--simulate", "POST", pay, "--header", "X-Api-Key: k", "--json")
    assert json.loads(missing.stdout)[0]["reason"] == "idempotency_key_missing"
    changed = run("--simulate", "POST", pay, *keyed, "--body", '{"amount": 1}', "--json")
    assert json.loads(changed.stdout)[0]["headers"]["x-origin"] == "origin"
    failing = run(
        "--simulate",
        "GET",
        "https://api.example.com/v1/x",
        "--times",
        "2",
        "--every",
        "0",
        "--origin-status",
        "503",
        "--origin-latency",
        "200ms",
        "--json",
    )
    results = json.loads(failing.stdout)
    assert [(r["status"], r["forwarded"]) for r in results] == [(503, 3), (503, 3)]
    assert results[0]["reason"] == "from origin"
    assert results[0]["at_ms"] == 0 and results[1]["at_ms"] >= 600  # three slow attempts
    # Windows aligned to the clock (the example's catalog: a fixed window of 300/minute):
    # where the first request falls decides the reset.
    at = run(
        "--simulate",
        "GET",
        "https://api.example.com/v1/catalog/a",
        "--at",
        "2026-12-01T10:00:45Z",
        "--json",
    )
    assert json.loads(at.stdout)[0]["ratelimit"].endswith("t=15")
    directory = run(str(ROOT / "src"), "--simulate", "GET", "https://api.example.com/x")
    assert directory.returncode == 1 and "is a directory" in directory.stderr


def test_a_config_file_that_is_not_utf8_is_one_clear_problem(tmp_path: Path) -> None:
    bad = tmp_path / "edge-limiter.toml"
    bad.write_bytes(b'origin = "https://a.test"\n\xff\xfe')
    (tmp_path / "wrangler.toml").write_text(WRANGLER)
    done = run(str(bad), "--wrangler", str(tmp_path / "wrangler.toml"))
    assert done.returncode == 1 and "not UTF-8 text" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_config_nested_too_deep_to_read_is_one_clear_problem(tmp_path: Path) -> None:
    # tomllib reads nested arrays and inline tables recursively (a fuzzer's finding).
    deep = tmp_path / "edge-limiter.toml"
    deep.write_text('origin = "https://a.test"\nx = ' + "[" * 500 + "]" * 500 + "\n")
    (tmp_path / "wrangler.toml").write_text(WRANGLER)
    for extra in ((), ("--json",)):
        done = run(str(deep), "--wrangler", str(tmp_path / "wrangler.toml"), *extra)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "nested too deep" in done.stdout + done.stderr
    with pytest.raises(ConfigError, match="nested too deep"):
        Simulator.from_file(deep)


def test_an_env_that_is_not_a_table_of_tables_is_one_clear_problem(tmp_path: Path) -> None:
    (tmp_path / "wrangler.toml").write_text(WRANGLER)
    for value in ("5", '"oops"', '["a", "b"]'):
        bad = tmp_path / "edge-limiter.toml"
        bad.write_text(f'env = {value}\norigin = "https://a.test"\n')
        done = run(str(bad), "--wrangler", str(tmp_path / "wrangler.toml"))
        assert done.returncode == 1 and "Traceback" not in done.stderr, value
        assert done.stderr.count("env holds one table per environment") == 1, done.stderr


def test_an_environment_wrangler_does_not_have_is_said_so() -> None:
    done = run("--env", "nosuch")
    assert done.returncode == 1 and "no [env.nosuch]" in done.stderr, done.stderr


def test_explain_reads_the_host_as_the_runtime_does() -> None:
    def explained(url: str) -> dict[str, object]:
        done = run("--explain", "GET", url, "--json")
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    backslash = explained("http://api.example.com\\v1\\login")
    assert (backslash["canonical_host"], backslash["canonical_path"]) == (
        "api.example.com",
        "/v1/login",
    )
    assert explained("http://api.ex%61mple.com/v1/x")["canonical_host"] == "api.example.com"
    for url, says in (
        ("http://[1.2.3.4]/x", "is not an IPv6 address"),
        ("http://h%zz/x", "is not a host"),
    ):
        refused = run("--explain", "GET", url)
        assert refused.returncode == 2 and says in refused.stderr, url
    continent = run("--explain", "GET", "https://api.example.com/x", "--continent", "XX")
    assert continent.returncode == 2 and "continent is one of AF" in continent.stderr


def test_the_config_var_is_read_as_the_worker_reads_it(tmp_path: Path) -> None:
    """A probe's finding: a string, number or boolean ``EDGE_LIMITER`` var crashed the
    checker with a traceback. A string is JSON, as the Worker reads it; anything else but
    a table is a clear error."""
    wrangler = tmp_path / "wrangler.toml"
    for value, expected in (
        ('"{not json"', "the EDGE_LIMITER var is not valid JSON"),
        ('""', "the EDGE_LIMITER var is not valid JSON"),
        ("5", "must be a table ([vars.EDGE_LIMITER] in wrangler.toml)"),
        ("false", "got a boolean"),
        ('"[1]"', "got an array"),
    ):
        wrangler.write_text(WRANGLER + f"[vars]\nEDGE_LIMITER = {value}\n")
        done = run("--wrangler", str(wrangler))
        assert done.returncode == 1, value
        assert expected in done.stderr and "Traceback" not in done.stderr, (value, done.stderr)
    config = {
        "origin": "https://a.test",
        "routes": [{"name": "a", "match": {"path": "/a"}, "limits": "5/s"}],
    }
    wrangler.write_text(WRANGLER + f"[vars]\nEDGE_LIMITER = {json.dumps(json.dumps(config))}\n")
    done = run("--wrangler", str(wrangler))
    assert done.returncode == 0, done.stderr
    assert "5 per second" in done.stdout


def test_simulate_starts_at_epoch_milliseconds_or_a_time_never_before_1970() -> None:
    url = "https://api.example.com/v1/search"
    epoch = run("--simulate", "GET", url, "--at=1764583200000", "--json")
    assert epoch.returncode == 0, epoch.stderr
    early = run("--simulate", "GET", url, "--at=1969-01-01T00:00:00Z")
    assert early.returncode == 2 and "1970-01-01 or later" in early.stderr
