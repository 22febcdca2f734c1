"""The project's deploy config as the Worker and the local runtime see it.

Reads ``wrangler.toml`` (and one ``--env NAME``, with wrangler's inheritance rules) and the
edge-limiter config file, so that the build step, ``edge-limiter dev``, the config check and
the end-to-end tests all start from exactly what production gets: the compatibility date
and flags, the vars, the Durable Object and KV bindings, and the gateway config.

Standard library plus the project's own pure core; runs under CPython 3.11+.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_limiter.core.config import Config, parse_config
from edge_limiter.core.config.sources import (
    CONFIG_VAR,
    DEFAULT_FILE,
    ENV_VAR,
    VAR_LIMIT_BYTES,
    apply_environment,
    select_config,
)
from edge_limiter.core.errors import ConfigError

__all__ = [
    "CONFIG_VAR",
    "DEFAULT_FILE",
    "ENV_VAR",
    "EVERY",
    "Check",
    "Deployment",
    "ProjectConfigError",
    "bundled_module",
    "check_project",
    "config_file",
    "deployment",
    "environments",
    "raw_config",
    "read_toml",
]

#: Keys an [env.NAME] section inherits from the top level when it does not set them
#: (wrangler's rule); every binding and var is NOT inherited.
INHERITED = ("compatibility_date", "compatibility_flags", "main")
#: The flag the local host implements itself (it hosts Pyodide in a JavaScript Worker).
HOSTED_FLAGS = ("python_workers",)


class ProjectConfigError(Exception):
    """The wrangler config or the config file cannot be read."""


@dataclass(frozen=True)
class Deployment:
    """What one deployment (the top level, or one environment) gives the Worker."""

    env: str | None
    compatibility_date: str
    compatibility_flags: tuple[str, ...]
    vars: dict[str, Any]
    durable_objects: dict[str, str]
    kv_namespaces: tuple[str, ...]
    other_bindings: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"[env.{self.env}]" if self.env else "[top level]"


def read_toml(path: Path) -> dict[str, Any]:
    try:
        # utf-8-sig: a byte-order mark (some Windows editors write one) is not TOML.
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise ProjectConfigError(
            f"{path}: not UTF-8 text (TOML is UTF-8): byte {exc.object[exc.start]:#04x} at "
            f"offset {exc.start}"
        ) from exc
    except IsADirectoryError:
        raise ProjectConfigError(f"{path}: is a directory, not a config file") from None
    except RecursionError:
        # tomllib reads nested arrays and inline tables recursively.
        raise ProjectConfigError(
            f"{path}: arrays or tables nested too deep to read (a config needs a few levels)"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProjectConfigError(f"{path}: {exc}") from exc


def environments(wrangler: dict[str, Any]) -> list[str | None]:
    """``None`` (the top level) and every ``[env.NAME]``."""
    envs = wrangler.get("env") or {}
    return [None, *sorted(envs)] if isinstance(envs, dict) else [None]


def deployment(wrangler: dict[str, Any], env: str | None = None) -> Deployment:
    """The settings of ``env`` (None: the top level), with wrangler's inheritance."""
    section = wrangler
    if env is not None:
        envs = wrangler.get("env") or {}
        if env not in envs:
            known = ", ".join(sorted(envs)) or "none"
            raise ProjectConfigError(f"wrangler config has no [env.{env}] (it has: {known})")
        section = {**{k: wrangler[k] for k in INHERITED if k in wrangler}, **envs[env]}
    durable = section.get("durable_objects") or {}
    bindings = {b["name"]: b["class_name"] for b in durable.get("bindings", [])}
    kv = tuple(n["binding"] for n in section.get("kv_namespaces", []))
    other: dict[str, list[Any]] = {
        key: list(section[key])
        for key in ("analytics_engine_datasets", "services", "r2_buckets", "d1_databases")
        if key in section
    }
    return Deployment(
        env=env,
        compatibility_date=str(section.get("compatibility_date", "")),
        compatibility_flags=tuple(section.get("compatibility_flags", [])),
        vars=dict(section.get("vars") or {}),
        durable_objects=bindings,
        kv_namespaces=kv,
        other_bindings=other,
    )


def config_file(wrangler_path: Path, explicit: Path | None = None) -> Path | None:
    """The edge-limiter config file: ``explicit``, or ``edge-limiter.toml`` beside wrangler.toml."""
    if explicit is not None:
        if not explicit.exists():
            raise ProjectConfigError(f"config file {explicit} does not exist")
        return explicit
    default = wrangler_path.parent / DEFAULT_FILE
    return default if default.exists() else None


def raw_config(dep: Deployment, document: dict[str, Any] | None, source: str) -> dict[str, Any]:
    """The raw gateway config this deployment's Worker would parse (raises ConfigError)."""
    env_name = dep.vars.get(ENV_VAR)
    var = dep.vars.get(CONFIG_VAR)
    if isinstance(var, str):
        # The Worker reads a string var as JSON (platform.worker.raw_config).
        try:
            var = json.loads(var)
        except ValueError as exc:
            raise ConfigError([f"config: the {CONFIG_VAR} var is not valid JSON: {exc}"]) from exc
    return select_config(var, document, source, env_name or None)


@dataclass
class Check:
    """The result of checking every deployment's gateway config."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    configs: dict[str, Config] = field(default_factory=dict)


#: ``check_project(deploying=EVERY)``: every wrangler environment's problems are problems.
EVERY = "*"


def check_project(
    wrangler_path: Path, file: Path | None = None, deploying: str | None = EVERY
) -> Check:
    """Validate the gateway config of every deployment (and every env table of the file).

    ``deploying`` names the wrangler environment about to run (``None``: the top level):
    the problems of the other environments are then warnings, since they stop only a
    ``wrangler deploy --env`` of those (a config of your own beside the example's
    ``[env.staging]`` must not keep the top level from running). :data:`EVERY` (the
    default): every environment's problems are problems.
    """
    result = Check()
    try:
        wrangler = read_toml(wrangler_path)
        path = config_file(wrangler_path, file)
        document = read_toml(path) if path is not None else None
    except ProjectConfigError as exc:
        result.problems.append(str(exc))
        return result
    source = path.name if path is not None else ""
    if deploying not in (EVERY, None) and deploying not in environments(wrangler):
        try:
            deployment(wrangler, deploying)
        except ProjectConfigError as exc:
            result.problems.append(str(exc))
            return result
    if document is not None:
        # Every environment of the file is checked, used by a deployment or not; when one
        # deployment is about to run, the problems of tables it does not use are warnings.
        used = _file_table(wrangler, deploying)
        tables = document.get("env")
        named = sorted(tables) if isinstance(tables, dict) else []
        for env_name in [None, *named]:
            label = f"{source}" + (f" [env.{env_name}]" if env_name else "")
            into = result if env_name in (None, used) or used == EVERY else Check()
            _check_one(label, lambda n=env_name: apply_environment(document, n, source), into)
            if into is not result:
                result.warnings.extend(
                    f"{problem} (a table this run does not use)" for problem in into.problems
                )
    for env in environments(wrangler):
        dep = deployment(wrangler, env)
        if deploying in (EVERY, env):
            _check_deployment(dep, document, source, result)
            continue
        other = Check()
        _check_deployment(dep, document, source, other)
        deploy = "npx wrangler deploy" + (f" --env {env}" if env else "")
        result.warnings.extend(f"`{deploy}` would fail: {problem}" for problem in other.problems)
    return result


def _file_table(wrangler: dict[str, Any], deploying: str | None) -> str | None:
    """The config file's env table the deployment ``deploying`` selects (its
    ``EDGE_LIMITER_ENV``; ``None``: the top level), or :data:`EVERY` for every deployment."""
    if deploying == EVERY:
        return EVERY
    try:
        return str(deployment(wrangler, deploying).vars.get(ENV_VAR) or "") or None
    except ProjectConfigError:
        return EVERY  # no such wrangler environment: reported where it is used


def _check_deployment(
    dep: Deployment, document: dict[str, Any] | None, source: str, result: Check
) -> None:
    """Add to ``result`` the problems of one deployment's selection of the config."""
    var = dep.vars.get(CONFIG_VAR)
    if var is not None:
        size = len(json.dumps(var, separators=(",", ":")).encode("utf-8"))
        if size > VAR_LIMIT_BYTES:
            result.problems.append(
                f"{dep.label} vars.{CONFIG_VAR} is {size} bytes of JSON; a Cloudflare var "
                f"holds at most {VAR_LIMIT_BYTES} bytes. Move the table into {DEFAULT_FILE} "
                f"beside wrangler.toml (same fields, without the 'vars.{CONFIG_VAR}' prefix) "
                f"and delete it from wrangler.toml"
            )
    if var is None and document is not None:
        # The file's tables were parsed above: only check that this deployment's
        # selection (its EDGE_LIMITER_ENV) exists.
        try:
            raw_config(dep, document, source)
        except ConfigError as exc:
            result.problems.extend(
                f"{dep.label}: {problem}"
                for problem in exc.problems
                # The file's own problem, said once (its table was checked above).
                if not any(said.endswith(f": {problem}") for said in result.problems)
            )
        return
    _check_one(
        f"{dep.label} vars.{CONFIG_VAR}",
        lambda d=dep: raw_config(d, document, source),
        result,
    )


def _check_one(label: str, raw: Any, result: Check) -> None:
    try:
        config = parse_config(raw())
    except ConfigError as exc:
        result.problems.extend(f"{label}: {problem}" for problem in exc.problems)
        return
    result.configs[label] = config
    result.warnings.extend(f"{label}: {warning}" for warning in config.warnings)


def bundled_module(document: dict[str, Any], source: str) -> str:
    """The Python module the build step writes for a config file."""
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=True, sort_keys=False)
    return (
        f'"""The gateway config, bundled from {source} by edge_limiter.tools.build_worker: do not edit."""\n'
        "\n"
        "import json\n"
        "\n"
        f"SOURCE = {source!r}\n"
        f"_TEXT = {text!r}\n"
        "\n"
        "\n"
        "def document():\n"
        '    """The config file as plain data (a fresh copy each call)."""\n'
        "    return json.loads(_TEXT)\n"
    )
