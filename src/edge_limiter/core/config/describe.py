"""A parsed config as plain data and as the check's text, written from the schema.

:func:`describe_route` is the JSON of ``check-config --json`` and the admin API's
``/api/config``: every field of the route table (:data:`~.route.ROUTE`) with its
effective value, under its name (``_ms`` after a duration's), nested tables as objects.
:func:`check_table` is the check's table: a column per route field it names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .fields import Sub
from .model import Config, Route
from .route import ROUTE
from .table import Table


def describe(table: Table, value: object) -> dict[str, Any]:
    """``value`` (what ``table`` parses into) as plain data, field by field."""
    out: dict[str, Any] = {}
    for spec in table.fields:
        if spec.show is not None:
            out[spec.json_key()] = spec.show(value)
            continue
        if spec.attr is None:
            continue  # read and shown by hand, or not at all (its effect is elsewhere)
        got: Any = value
        for step in (spec.attr or spec.json_key()).split("."):
            got = getattr(got, step)
        if isinstance(spec, Sub) and got is not None:
            out[spec.json_key()] = describe(spec.table, got)
        else:
            out[spec.json_key()] = spec.plain(got)
    return out


def describe_route(route: Route) -> dict[str, Any]:
    """A route as plain data: what it matches, limits, and where it forwards."""
    out = describe(ROUTE, route)
    # Kept beside the schema's fields for the readers of /api/config that use them.
    out["origins"] = [origin.name for origin in route.forward.pool.origins]
    out["retry_attempts"] = route.forward.retry.attempts
    return out


def _match_cell(match: dict[str, Any]) -> str:
    methods = ",".join(match["methods"]) if isinstance(match["methods"], list) else "*"
    host = "" if match["host"] == "*" else f" on {match['host']}"
    return f"{methods} {match['path']}{host}" + (" (any case)" if match["case_insensitive"] else "")


def _limits_cell(route: dict[str, Any]) -> str:
    parts = []
    for limit in route["limits"]:
        text = limit["rate"]
        if limit["capacity"] != int(text.split(" ", 1)[0]):
            text += f" (burst {limit['capacity']})"
        if limit.get("algorithm"):
            text += f" ({limit['algorithm']})"
        parts.append(text)
    extras = []
    if route["cost"] != 1:
        extras.append(f"cost {route['cost']}")
    if route["leases"]:
        extras.append(f"leases {route['leases']['ttl_ms']} ms")
    if route["write_behind_ms"]:
        extras.append(f"write-behind {route['write_behind_ms']} ms")
    return "; ".join(parts) + (f" [{', '.join(extras)}]" if extras else "")


def _identity_cell(route: dict[str, Any]) -> str:
    parts = []
    if route["auth"]:
        parts.append(f"auth {route['auth']}")
        if route["on_invalid"] == "anonymous":
            parts.append("invalid: anonymous")
    if route["tiers"]:
        parts.append("tiers" + (f" (group {route['group']})" if route["group"] else ""))
    return ", ".join(parts) or "-"


#: The check table's columns: heading, the route field shown, and how (from the route's JSON).
COLUMNS: tuple[tuple[str, str, Callable[[dict[str, Any]], str]], ...] = (
    ("route", "name", lambda route: route["name"]),
    ("match", "match", lambda route: _match_cell(route["match"])),
    ("key", "key", lambda route: "+".join(route["key"])),
    ("limits", "limits", _limits_cell),
    ("algorithm", "algorithm", lambda route: route["algorithm"]),
    ("shadow", "shadow", lambda route: "yes" if route["shadow"] else "no"),
    ("identity", "auth", _identity_cell),
    ("on failure", "on_store_error", lambda route: route["on_store_error"]),
    (
        "cache",
        "cache",
        lambda route: (
            f"{route['cache']['ttl_ms'] // 1000}s {route['cache']['scope']}"
            if route["cache"]
            else "-"
        ),
    ),
    ("idempotency", "idempotency", lambda r: r["idempotency"]["mode"] if r["idempotency"] else "-"),
    ("pool", "pool", lambda route: f"{route['pool']} ({len(route['origins'])})"),
)


def check_table(config: Config) -> str:
    """The routes as an aligned text table, in the order they are tried."""
    rows = [[heading for heading, _, _ in COLUMNS]]
    for route in config.routes:
        info = describe_route(route)
        rows.append([cell(info) for _, _, cell in COLUMNS])
    return aligned(rows)


def aligned(rows: list[list[str]]) -> str:
    """Rows as text columns, the first row a heading underlined."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def check_json(config: Config, where: str, env: str | None, warnings: list[str]) -> dict[str, Any]:
    """``--json`` of a valid config: its routes in the order they are tried, and warnings."""
    forward = config.forward
    return {
        "ok": True,
        "config": where,
        "env": env,
        "problems": [],
        "warnings": warnings,
        "routes": [describe_route(route) for route in config.routes],
        "unmatched": {"forward_to": forward.pool.name} if forward is not None else "404",
        "shadow": config.ops.shadow,
    }


def check_report(config: Config, where: str, env: str | None, warnings: list[str]) -> str:
    """What the config check prints for a valid config: the routes, then what the top level
    does with every request."""
    lines = [
        f"{where}{f' [env.{env}]' if env else ''}: {len(config.routes)} routes, tried in this order",
        "",
    ]
    lines.append(check_table(config))
    lines.append("")
    if config.forward is not None:
        lines.append(f"unmatched requests: forwarded to {config.forward.pool.name}, unlimited")
    else:
        lines.append("unmatched requests: 404 (no top-level origin)")
    if config.ops.shadow:
        lines.append("global shadow mode: ON (nothing is blocked)")
    lines.append(f"method overrides on POST: {config.method_override}")
    if config.origin_headers:
        fields = ", ".join(f"{h.name} = {h.describe()}" for h in config.origin_headers)
        lines.append(f"set on every request to an origin: {fields}")
    for pool in config.pools():
        if pool.headers:
            fields = ", ".join(f"{h.name} = {h.describe()}" for h in pool.headers)
            lines.append(f"set on requests to pool {pool.name}'s origins: {fields}")
    if config.client_ip_header is not None:
        lines.append(f"the client's address goes to origins in: {config.client_ip_header}")
    else:
        lines.append("the client's address goes to origins in: no field (client_ip_header unset)")
    if config.forwarded_host:
        lines.append(
            "the host and scheme asked for go to origins in: X-Forwarded-Host, X-Forwarded-Proto"
        )
    if config.cors is not None:
        wildcards = [scheme + "*" + suffix for scheme, suffix in config.cors.wildcards]
        origins = ", ".join(sorted([*config.cors.allow_origins, *wildcards]))
        credentials = " (with credentials)" if config.cors.allow_credentials else ""
        lines.append(f"CORS on the gateway's own answers: {origins}{credentials}")
    lines.extend(f"warning: {warning}" for warning in warnings)
    lines.extend(["", "OK"])
    return "\n".join(lines)
