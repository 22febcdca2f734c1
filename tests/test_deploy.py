"""The production config stays deployable: wrangler's dry run, offline, ships exactly our modules."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from edge_limiter.tools.toolchain import PYTHONS, python_of

# wrangler (Node) builds and bundles the Worker: the full run's, not the fast loop's.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
WRANGLER = ROOT / "node_modules" / ".bin" / "wrangler"
#: The project's tools: the edge-limiter command, never uploaded.
TOOLS = "edge_limiter/tools/"


def project_modules() -> set[str]:
    """What the build step must put in the module root: src/ and durable_objects/ .py files,
    and the config file bundled as a module; neither the users' simulator nor the project's
    tools (src/edge_limiter/tools/, the edge-limiter command)."""
    modules = {str(p.relative_to(ROOT / "src")) for p in (ROOT / "src").rglob("*.py")}
    modules |= {str(p.relative_to(ROOT)) for p in (ROOT / "durable_objects").rglob("*.py")}
    modules.add("edge_limiter_config.py")
    # The users' simulator and the project's tools are not the Worker's.
    return {
        m
        for m in modules
        if "__pycache__" not in m
        and not m.startswith("edge_limiter/testing")
        and not m.startswith(TOOLS)
    }


@pytest.fixture(scope="module", params=[None, "staging"])
def dry_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path]:
    if not WRANGLER.exists():
        pytest.fail("node_modules is missing: run scripts/bootstrap (scripts/test does)")
    out = tmp_path_factory.mktemp(f"dry-run-{request.param or 'top'}")
    env = {**os.environ, "WRANGLER_SEND_METRICS": "false", "NO_COLOR": "1", "CI": "true"}
    extra = ["--env", request.param] if request.param else []
    done = subprocess.run(
        # As the docs say to run it: npx puts node_modules/.bin first on the PATH, so
        # wrangler runs on the project's Node (>= 22.12), whatever Node the PATH has.
        ["npx", "--no", "wrangler", "deploy", "--dry-run", "--outdir", str(out), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr, out


def test_dry_run_lists_exactly_the_project_modules(dry_run: tuple[str, Path]) -> None:
    output, out = dry_run
    listed = set(re.findall(r"│ (\S+\.py)\s+│ python", output))
    expected = project_modules() - {"entry.py"}  # the main module is not "additional"
    assert listed == expected
    written = {str(p.relative_to(out)) for p in out.rglob("*.py")}
    assert written == project_modules()
    assert not any(m.startswith(("tests/", "node_modules/", "scripts/", TOOLS)) for m in written)
    assert not any(m.startswith(TOOLS) for m in listed)


def test_dry_run_has_the_bindings(dry_run: tuple[str, Path]) -> None:
    output, out = dry_run
    assert re.search(r"env\.RATE_LIMITER \(RateLimiter\)\s+Durable Object", output)
    assert re.search(r"env\.IDEMPOTENCY \(IdempotencyRecords\)\s+Durable Object", output)
    assert re.search(r"env\.BREAKERS \(OriginBreaker\)\s+Durable Object", output)
    assert re.search(r"env\.CONTROL \(Control\)\s+Durable Object", output)
    assert re.search(r"env\.ANALYTICS \(\w+\)\s+Analytics Engine Dataset", output)
    assert re.search(r"env\.CACHE \(\w+\)\s+KV Namespace", output)
    assert re.search(r"env\.API_KEYS \(\w+\)\s+KV Namespace", output)
    # The config travels as the bundled module, not as a (5 KB at most) var.
    assert "env.EDGE_LIMITER " not in output
    bundled = (out / "edge_limiter_config.py").read_text()
    assert "SOURCE = 'edge-limiter.toml'" in bundled
    staging_var = re.search(r'env\.EDGE_LIMITER_ENV \("staging"\)\s+Environment Variable', output)
    assert bool(staging_var) == ("staging" in out.name)


def test_every_durable_object_has_a_sqlite_migration_and_is_exported() -> None:
    config = tomllib.loads((ROOT / "wrangler.toml").read_text())
    classes = {b["class_name"] for b in config["durable_objects"]["bindings"]}
    migrated = {c for m in config["migrations"] for c in m.get("new_sqlite_classes", [])}
    assert classes == {"RateLimiter", "IdempotencyRecords", "OriginBreaker", "Control"} <= migrated
    tags = [m["tag"] for m in config["migrations"]]
    assert len(tags) == len(set(tags))  # one tag per migration, in order
    assert config["triggers"]["crons"] == ["* * * * *"]  # the health checks' Cron Trigger
    entry = (ROOT / "src" / "entry.py").read_text()
    assert all(f'"{name}"' in entry for name in classes)  # exported from the main module
    assert "python_workers" in config["compatibility_flags"]
    staging = config["env"]["staging"]
    assert staging["vars"]["EDGE_LIMITER_ENV"] == "staging"
    assert {b["class_name"] for b in staging["durable_objects"]["bindings"]} == classes
    # Python 3.13 or 3.14, the two the local runtime hosts, and the SDK the runtime provides
    # (from 2026-04-21 a Worker must otherwise ship it: enable_python_external_sdk).
    assert python_of(config["compatibility_date"], config["compatibility_flags"]) in PYTHONS
    if config["compatibility_date"] >= "2026-04-21":
        assert "disable_python_external_sdk" in config["compatibility_flags"]
