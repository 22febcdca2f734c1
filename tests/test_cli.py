"""The ``edge-limiter`` command: its subcommands, and the script ``scripts/bootstrap`` installs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edge_limiter.tools import cli

ROOT = Path(__file__).resolve().parents[1]
LOGIN = "https://api.example.com/v1/login"


def test_the_installed_command_checks_the_example_config() -> None:
    # The console script of [project.scripts], installed (editable) into the venv that runs
    # the tests: what `scripts/test` and the README's wrappers call.
    script = Path(sys.executable).with_name("edge-limiter")
    assert script.exists(), "no edge-limiter in the venv: run scripts/bootstrap"
    done = subprocess.run(
        [str(script), "check"], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "routes, tried in this order" in done.stdout and done.stdout.rstrip().endswith("OK")


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    shown = capsys.readouterr().out
    for name in ("check", "explain", "simulate", "dev", "bench"):
        assert f"\n  {name} " in shown
    assert "edge_limiter.tools.cache_suite" in shown and "edge_limiter.tools.lease_sim" in shown


@pytest.mark.parametrize(("argv", "code"), [([], 2), (["nosuch"], 2)])
def test_no_command_or_an_unknown_one_is_a_usage_error(
    argv: list[str], code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == code
    error = capsys.readouterr().err
    assert error.startswith("usage: edge-limiter") or "no command 'nosuch'" in error


def test_every_command_has_its_main() -> None:
    for name in cli.COMMANDS:
        assert callable(cli.command(name))


def json_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> object:
    assert cli.main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_explain_and_simulate_are_commands_of_their_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = ["--ip", "203.0.113.9", "--json"]
    explained = json_of(["explain", "POST", LOGIN, *client], capsys)
    assert isinstance(explained, dict) and explained["route"] == "login"
    # scripts/check-config spells it --explain: the same answer.
    legacy = subprocess.run(
        [str(ROOT / "scripts" / "check-config"), "--explain", "POST", LOGIN, *client],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert legacy.returncode == 0, legacy.stderr
    assert json.loads(legacy.stdout) == explained
    simulated = json_of(["simulate", "POST", LOGIN, "--times", "6", *client], capsys)
    assert isinstance(simulated, list)
    assert [answer["status"] for answer in simulated] == [200] * 5 + [429]


def test_a_subcommand_takes_only_its_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        cli.main(["explain", "GET", LOGIN, "--times", "3"])
    assert refused.value.code == 2
    assert "--times" in capsys.readouterr().err
    with pytest.raises(SystemExit) as missing:
        cli.main(["simulate", "GET"])
    assert missing.value.code == 2
    with pytest.raises(SystemExit) as check:
        cli.main(["check", "--ip", "203.0.113.9"])
    assert check.value.code == 2


def test_explain_reads_a_config_file_given_with_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "wrangler.toml").write_text(
        'name = "x"\nmain = "build/worker/entry.py"\ncompatibility_date = "2025-11-01"\n'
    )
    mine = tmp_path / "mine.toml"
    mine.write_text(
        'origin = "https://a.test"\n'
        '[[routes]]\nname = "mine"\nmatch = { path = "/m/*" }\nlimits = "2/minute"\n'
    )
    where = ["--config", str(mine), "--wrangler", str(tmp_path / "wrangler.toml"), "--json"]
    explained = json_of(["explain", "GET", "https://a.test/m/1", *where], capsys)
    assert isinstance(explained, dict) and explained["route"] == "mine"
    simulated = json_of(["simulate", "GET", "https://a.test/m/1", "--times", "3", *where], capsys)
    assert isinstance(simulated, list)
    assert [answer["status"] for answer in simulated] == [200, 200, 429]
