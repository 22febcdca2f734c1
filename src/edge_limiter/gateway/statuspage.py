"""The admin status page: one self-contained HTML page (no external assets, no script),
refreshing itself every few seconds."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any

from ..core.config import Config
from ..core.explain import describe_route
from ..core.rates import Rate

REFRESH_SECONDS = 5

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1f24;background:#fafafa}
h1{font-size:20px;margin:0 0 .2em}h2{font-size:16px;margin:1.4em 0 .4em}
table{border-collapse:collapse;background:#fff;min-width:40%}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f3f6}.muted{color:#57606a}.bad{color:#b42318;font-weight:600}
.ok{color:#1a7f37}code{font-size:13px}
"""


def _cell(value: Any) -> str:
    return f"<td>{escape(str(value))}</td>"


def _table(headers: list[str], rows: list[list[Any]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render(
    config: Config,
    stats: dict[str, Any],
    overrides: list[dict[str, Any]],
    breakers: dict[str, str],
    generated_at: str,
) -> str:
    """The page's HTML."""
    routes = []
    per_route = stats.get("routes", {})
    for route in config.routes:
        info = describe_route(route)
        counts5 = per_route.get(route.name, {}).get("5m", {})
        counts60 = per_route.get(route.name, {}).get("60m", {})
        denied5 = counts5.get("limited", 0) + counts5.get("cached_denial", 0)
        denied60 = counts60.get("limited", 0) + counts60.get("cached_denial", 0)
        routes.append(
            [
                route.name,
                f"{' '.join(info['match']['methods']) if isinstance(info['match']['methods'], list) else '*'} "
                f"{info['match']['path']}",
                ", ".join(str(limit) for limit in route.limits.limits),
                info["algorithm"],
                ", ".join(info["key"]),
                "yes" if info["shadow"] else "",
                denied5,
                denied60,
                counts5.get("shadow", 0),
                counts60.get("shadow", 0),
            ]
        )
    top = [
        [item["route"], item["key_hash"], item["limited"]] for item in stats.get("top_limited", [])
    ]
    override_rows = [
        [
            o["route"],
            o["key"],
            "exempt" if o["exempt"] else ", ".join(_rate(q, w) for q, w in o["limits"]),
            o["reason"],
            _when(o["expires_at"]),
            o["id"],
        ]
        for o in overrides
    ]
    breaker_rows = [[name, phase] for name, phase in sorted(breakers.items())]
    shadow_note = (
        '<p class="bad">Global shadow mode is on: nothing is blocked.</p>'
        if config.ops.shadow
        else ""
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">'
        "<title>edge-limiter status</title>"
        f"<style>{_STYLE}</style></head><body>"
        "<h1>edge-limiter</h1>"
        f'<p class="muted">Generated {escape(generated_at)}; refreshes every '
        f"{REFRESH_SECONDS} s.</p>{shadow_note}"
        "<h2>Routes</h2>"
        + _table(
            [
                "route",
                "match",
                "limits",
                "algorithm",
                "key",
                "shadow",
                "denied 5 min",
                "denied 60 min",
                "shadow hits 5 min",
                "shadow hits 60 min",
            ],
            routes,
            "No routes.",
        )
        + '<h2 id="denials">Most limited keys (last hour, hashed)</h2>'
        + _table(["route", "key hash", "limited"], top, "No requests limited in the last hour.")
        + "<h2>Overrides</h2>"
        + _table(["route", "key", "limits", "reason", "expires", "id"], override_rows, "None.")
        + "<h2>Circuit breakers</h2>"
        + _table(["origin", "state"], breaker_rows, "No origin has a shared breaker yet.")
        + "</body></html>"
    )


def _rate(quota: int, window_ms: int) -> str:
    """An override's limit as the config writes it (``100 per second``); stored overrides
    were checked when they were set."""
    return str(Rate(quota, window_ms))


def _when(epoch_ms: int | None) -> str:
    """An override's expiry in UTC, or ``never``."""
    if not epoch_ms:
        return "never"
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
