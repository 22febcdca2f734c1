"""Where the config comes from: the ``EDGE_LIMITER`` var, or a bundled config file.

A Cloudflare var holds at most 5 KB, about 35 routes. Bigger configs live in a TOML file
(``edge-limiter.toml`` beside ``wrangler.toml``) that the build step validates and bundles
into the Worker as a module. The file may hold ``[env.NAME]`` tables: the var
``EDGE_LIMITER_ENV`` (set per environment in ``wrangler.toml``) picks one, and its fields
replace the top-level ones of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ..validation import shown

CONFIG_VAR = "EDGE_LIMITER"
ENV_VAR = "EDGE_LIMITER_ENV"
DEFAULT_FILE = "edge-limiter.toml"
#: Cloudflare's limit on one var's size (its JSON).
VAR_LIMIT_BYTES = 5 * 1024


def apply_environment(
    document: Mapping[str, Any], env_name: str | None, source: str, *, by_var: bool = True
) -> dict[str, Any]:
    """The config file's top level with environment ``env_name``'s fields laid over it
    (``by_var``: the environment was chosen by ``EDGE_LIMITER_ENV``, as in a deployment)."""
    base = {key: value for key, value in document.items() if key != "env"}
    tables = document.get("env")
    if tables is not None and (
        not isinstance(tables, Mapping) or not all(isinstance(t, Mapping) for t in tables.values())
    ):
        raise ConfigError(
            [
                f"config.env: in {source}, env holds one table per environment "
                f"([env.staging] ...), got {shown(tables)}"
            ]
        )
    if not env_name:
        return base
    environments = document.get("env") or {}
    if not isinstance(environments, Mapping) or env_name not in environments:
        known = ", ".join(sorted(environments)) if isinstance(environments, Mapping) else ""
        if not by_var:
            raise ConfigError(
                [f"config: {source} has no [env.{env_name}] table (it has: {known or 'none'})"]
            )
        raise ConfigError(
            [
                f"config: {ENV_VAR} is {env_name!r} but {source} has no [env.{env_name}] "
                f"table (it has: {known or 'none'}); add one (an empty table keeps the top "
                f"level's fields) or remove {ENV_VAR} from that environment's vars"
            ]
        )
    overlay = environments[env_name]
    if not isinstance(overlay, Mapping):
        raise ConfigError([f"config: [env.{env_name}] in {source} must be a table"])
    merged = {**base, **overlay}
    # A config forwards to an `origin` or a `pool`: an environment that names one
    # replaces the other the top level names.
    for field, other in (("pool", "origin"), ("origin", "pool")):
        if field in overlay and other not in overlay:
            merged.pop(other, None)
    return merged


def select_config(
    var: Mapping[str, Any] | None,
    bundled: Mapping[str, Any] | None,
    bundled_source: str,
    env_name: str | None,
) -> dict[str, Any]:
    """The raw config to parse: exactly one of the var and the bundled file must be set."""
    if var is not None and bundled is not None:
        raise ConfigError(
            [
                f"config: both the {CONFIG_VAR} var and {bundled_source} are set; keep one "
                f"(the file for big configs, the var for small ones)"
            ]
        )
    if bundled is not None:
        return apply_environment(bundled, env_name, bundled_source)
    if var is not None:
        if not isinstance(var, Mapping):
            raise ConfigError(
                [
                    f"config: the {CONFIG_VAR} var must be a table ([vars.{CONFIG_VAR}] in "
                    f"wrangler.toml) or a string holding a JSON object, got "
                    f"{_kind(var)}"
                ]
            )
        return dict(var)
    raise ConfigError(
        [
            f"config: no config found: set [vars.{CONFIG_VAR}] in wrangler.toml or write "
            f"{DEFAULT_FILE} beside it"
        ]
    )


def _kind(value: Any) -> str:
    """What a value is, in TOML's and JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    return type(value).__name__
