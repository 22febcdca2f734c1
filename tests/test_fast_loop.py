"""``scripts/test --fast`` (pytest's ``--fast``): the inner loop leaves out exactly the
end-to-end and slow tests, and property tests draw fewer examples there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import examples

ROOT = Path(__file__).resolve().parents[1]


def collected(*options: str) -> set[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            *options,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


@pytest.mark.slow  # two collections of the whole suite
def test_the_fast_loop_is_every_test_but_the_e2e_and_slow_ones() -> None:
    fast = collected("--fast")
    assert fast == collected("-m", "not e2e and not slow")
    assert not any(name.startswith(("tests/e2e/", "tests/e2e_runtime/")) for name in fast)
    assert (
        "tests/test_deploy.py::test_every_durable_object_has_a_sqlite_migration_and_is_exported"
        not in fast
    )
    assert (
        "tests/core/ratelimit/test_leases.py::test_leases_never_admit_more_than_the_limit" in fast
    )


def test_a_property_draws_all_its_examples_unless_the_loop_is_fast(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert examples.examples(300) == (60 if examples.FAST else 300)
    monkeypatch.setattr(examples, "FAST", True)
    assert [examples.examples(n) for n in (300, 200, 40)] == [60, 40, 10]
    monkeypatch.setattr(examples, "FAST", False)
    assert examples.examples(300) == 300
