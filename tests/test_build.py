"""The build step: exactly the Worker's modules, the config file bundled, and no deploy
with an invalid config, an oversized var, or two configs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WRANGLER = 'name = "x"\nmain = "build/worker/entry.py"\ncompatibility_date = "2025-11-01"\n'
GOOD_ROUTE = """
[[vars.EDGE_LIMITER.routes]]
name = "api"
match = { path = "/v1/*" }
limits = "10/second"
"""
FILE = """
origin = "https://api.example.com"

[[routes]]
name = "api"
match = { path = "/v1/*" }
limits = "10/second"

[env.staging]
origin = "https://staging.example.com"
"""


def run(
    config: Path, out: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The build as wrangler runs it (wrangler.toml's [build]): a module, from src/."""
    environ = {k: v for k, v in os.environ.items() if k not in ("CLOUDFLARE_ENV", "PYTHONPATH")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "edge_limiter.tools.build_worker",
            str(out),
            "--config",
            str(config),
            *extra,
        ],
        cwd=ROOT / "src",
        capture_output=True,
        text=True,
        check=False,
        env={**environ, **(env or {})},
    )


def test_build_writes_the_worker_module_root(tmp_path: Path) -> None:
    done = run(ROOT / "wrangler.toml", tmp_path / "w")
    assert done.returncode == 0, done.stderr
    written = {str(p.relative_to(tmp_path / "w")) for p in (tmp_path / "w").rglob("*.py")}
    assert {
        "entry.py",
        "durable_objects/rate_limiter.py",
        "edge_limiter/platform/worker.py",
        "edge_limiter_config.py",
    } <= written
    assert not any(p.startswith(("tests", "scripts")) for p in written)
    # The users' simulator stays home, and so do the project's tools (the edge-limiter command).
    assert not any(p.startswith("edge_limiter/testing") for p in written)
    assert not any(p.startswith("edge_limiter/tools") for p in written)
    assert (ROOT / "src" / "edge_limiter" / "tools" / "build_worker.py").exists()
    assert "config bundled from edge-limiter.toml" in done.stdout


def test_the_bundled_module_gives_back_the_file_with_its_environments(tmp_path: Path) -> None:
    (tmp_path / "wrangler.toml").write_text(WRANGLER)
    (tmp_path / "edge-limiter.toml").write_text(FILE)
    done = run(tmp_path / "wrangler.toml", tmp_path / "w")
    assert done.returncode == 0, done.stderr
    namespace: dict[str, object] = {}
    exec((tmp_path / "w" / "edge_limiter_config.py").read_text(), namespace)
    document = namespace["document"]()  # type: ignore[operator]
    assert document["origin"] == "https://api.example.com"
    assert document["env"]["staging"]["origin"] == "https://staging.example.com"
    assert namespace["SOURCE"] == "edge-limiter.toml"


def test_an_invalid_var_config_fails_the_build_naming_route_and_field(tmp_path: Path) -> None:
    config = tmp_path / "wrangler.toml"
    config.write_text(
        WRANGLER
        + '[vars.EDGE_LIMITER]\norigin = "https://api.example.com"\n'
        + GOOD_ROUTE
        + '\n[env.staging.vars.EDGE_LIMITER]\norigin = "https://staging.example.com"\n'
        + GOOD_ROUTE.replace("vars.EDGE_LIMITER", "env.staging.vars.EDGE_LIMITER").replace(
            '"10/second"', '"10/fortnight"'
        )
    )
    done = run(config, tmp_path / "w")
    assert done.returncode == 1
    assert "[env.staging] vars.EDGE_LIMITER: route 'api'.limits" in done.stderr
    assert "'10/fortnight'" in done.stderr
    assert not (tmp_path / "w").exists()  # nothing built


def test_an_invalid_file_environment_fails_the_build(tmp_path: Path) -> None:
    (tmp_path / "wrangler.toml").write_text(WRANGLER)
    (tmp_path / "edge-limiter.toml").write_text(FILE + 'store_timeout_ms = "soon"\n')
    done = run(tmp_path / "wrangler.toml", tmp_path / "w")
    assert done.returncode == 1
    assert "edge-limiter.toml [env.staging]: config.store_timeout_ms" in done.stderr


def test_a_deployment_naming_a_missing_environment_fails_the_build(tmp_path: Path) -> None:
    (tmp_path / "wrangler.toml").write_text(
        WRANGLER + '[env.prod.vars]\nEDGE_LIMITER_ENV = "prod"\n'
    )
    (tmp_path / "edge-limiter.toml").write_text(FILE)
    done = run(tmp_path / "wrangler.toml", tmp_path / "w")
    assert done.returncode == 1
    assert "EDGE_LIMITER_ENV is 'prod'" in done.stderr and "has no [env.prod]" in done.stderr
    assert "CLOUDFLARE_ENV=<name>" in done.stderr  # how to build one environment only


def test_cloudflare_env_picks_the_environment_the_build_checks(tmp_path: Path) -> None:
    (tmp_path / "wrangler.toml").write_text(
        WRANGLER + '[env.prod.vars]\nEDGE_LIMITER_ENV = "prod"\n'
    )
    (tmp_path / "edge-limiter.toml").write_text(FILE)
    top = run(tmp_path / "wrangler.toml", tmp_path / "w", env={"CLOUDFLARE_ENV": ""})
    assert top.returncode == 0, top.stderr
    assert "warning: `npx wrangler deploy --env prod` would fail" in top.stderr
    prod = run(tmp_path / "wrangler.toml", tmp_path / "p", env={"CLOUDFLARE_ENV": "prod"})
    assert prod.returncode == 1 and "has no [env.prod]" in prod.stderr


def test_a_var_over_five_kilobytes_fails_with_the_fix(tmp_path: Path) -> None:
    routes = "".join(
        GOOD_ROUTE.replace('"api"', f'"api-{n}"').replace("/v1/*", f"/v{n}/*") for n in range(100)
    )
    config = tmp_path / "wrangler.toml"
    config.write_text(
        WRANGLER + '[vars.EDGE_LIMITER]\norigin = "https://api.example.com"\n' + routes
    )
    done = run(config, tmp_path / "w")
    assert done.returncode == 1
    assert "holds at most 5120 bytes" in done.stderr
    assert "Move the table into edge-limiter.toml" in done.stderr
    # The same routes in a file build fine.
    file_routes = routes.replace("[[vars.EDGE_LIMITER.routes]]", "[[routes]]")
    (tmp_path / "edge-limiter.toml").write_text(
        'origin = "https://api.example.com"\n' + file_routes
    )
    config.write_text(WRANGLER)
    done = run(config, tmp_path / "w")
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "w" / "edge_limiter_config.py").read_text()
    assert len(text) > 5120 and json.dumps("api-99") in text


def test_a_var_and_a_file_at_once_fail_the_build(tmp_path: Path) -> None:
    config = tmp_path / "wrangler.toml"
    config.write_text(WRANGLER + '[vars.EDGE_LIMITER]\norigin = "https://a.test"\n' + GOOD_ROUTE)
    (tmp_path / "edge-limiter.toml").write_text(FILE)
    done = run(config, tmp_path / "w")
    assert done.returncode == 1
    assert "both the EDGE_LIMITER var and edge-limiter.toml are set" in done.stderr


def test_a_missing_config_fails_the_build(tmp_path: Path) -> None:
    config = tmp_path / "wrangler.toml"
    config.write_text(WRANGLER)
    done = run(config, tmp_path / "w")
    assert done.returncode == 1
    assert "no config found" in done.stderr


def test_warnings_are_printed_and_do_not_fail(tmp_path: Path) -> None:
    (tmp_path / "wrangler.toml").write_text(WRANGLER)
    (tmp_path / "edge-limiter.toml").write_text(
        FILE + '\n[[routes]]\nname = "never"\nmatch = { path = "/v1/login" }\nlimits = "1/s"\n'
    )
    done = run(
        tmp_path / "wrangler.toml",
        tmp_path / "w",
        "--config-file",
        str(tmp_path / "edge-limiter.toml"),
    )
    assert done.returncode == 0, done.stderr
    assert "warning:" in done.stderr and "route 'never'" in done.stderr and "'api'" in done.stderr
