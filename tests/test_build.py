"""The build step: exactly the Worker's modules, and no deploy with an invalid config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "build_worker.py"

GOOD_ROUTE = """
[[vars.EDGE_LIMITER.routes]]
name = "api"
match = { path = "/v1/*" }
limits = "10/second"
"""


def run(config: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_build_writes_the_worker_module_root(tmp_path: Path) -> None:
    done = run(ROOT / "wrangler.toml", tmp_path / "w")
    assert done.returncode == 0, done.stderr
    written = {str(p.relative_to(tmp_path / "w")) for p in (tmp_path / "w").rglob("*.py")}
    assert {"entry.py", "durable_objects/rate_limiter.py", "edge_limiter/worker.py"} <= written
    assert not any(p.startswith(("tests", "scripts")) for p in written)


def test_an_invalid_config_fails_the_build_naming_route_and_field(tmp_path: Path) -> None:
    config = tmp_path / "wrangler.toml"
    config.write_text(
        '[vars.EDGE_LIMITER]\norigin = "https://api.example.com"\n'
        + GOOD_ROUTE
        + '\n[env.staging.vars.EDGE_LIMITER]\norigin = "https://staging.example.com"\n'
        + GOOD_ROUTE.replace("vars.EDGE_LIMITER", "env.staging.vars.EDGE_LIMITER").replace(
            '"10/second"', '"10/fortnight"'
        )
    )
    done = run(config, tmp_path / "w")
    assert done.returncode == 1
    assert "[env.staging.vars.EDGE_LIMITER] route 'api'.limits" in done.stderr
    assert "'10/fortnight'" in done.stderr
    assert not (tmp_path / "w").exists()  # nothing built


def test_a_missing_config_fails_the_build(tmp_path: Path) -> None:
    config = tmp_path / "wrangler.toml"
    config.write_text('name = "x"\n')
    done = run(config, tmp_path / "w")
    assert done.returncode == 1
    assert "[vars] has no EDGE_LIMITER table" in done.stderr
