"""The admin status page: one self-contained HTML page (no external assets) with its
figures and the operator's controls.

Its one script (allowed by a nonce of each response's own, :func:`policy`) refreshes the
figures every few seconds by reading the page's ``#live`` part again (``?part=live``), so
what is typed into a control stays; without scripts a ``<noscript>`` refresh does it.
Every control is a same-origin ``fetch`` with a JSON body, the only form the admin API
takes a change in (a form of another site's page cannot send one); its answer is shown.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any

from ..core.config import Config
from ..core.config.describe import describe_route
from ..core.ratelimit.rates import Rate

REFRESH_SECONDS = 5

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1f24;background:#fafafa}
h1{font-size:20px;margin:0 0 .2em}h2{font-size:16px;margin:1.4em 0 .4em}
table{border-collapse:collapse;background:#fff;min-width:40%}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f3f6}.muted{color:#57606a}.bad{color:#b42318;font-weight:600}
.ok{color:#1a7f37}code{font-size:13px}button{margin-right:.3em}
form{margin:.4em 0}label{margin-right:.6em}input[type=text]{width:24em}
#said{background:#fff;border:1px solid #d0d7de;padding:6px 8px;white-space:pre-wrap;
max-height:20em;overflow:auto}
"""

# Reads the page again for its figures (never while a control's call is under way, or
# while the page is hidden), keeps keyboard focus on the same button, and sends each
# control's call as JSON. Everything shown is set as text, never as HTML. URLs are made
# from location.origin: a page opened as https://user:token@host/ would otherwise pass
# its credentials on to relative URLs, which fetch refuses.
_SCRIPT = """
(() => {
  "use strict";
  const base = location.origin + document.body.dataset.prefix;
  const live = document.getElementById("live");
  const said = document.getElementById("said");
  let busy = 0;

  function shown(text) {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
  }

  async function refresh(force) {
    if (!force && (busy || document.hidden)) return;
    const focused = document.activeElement && live.contains(document.activeElement)
      ? document.activeElement.dataset.key : undefined;
    let answer;
    try {
      answer = await fetch(`${location.origin}${location.pathname}?part=live`,
                           {cache: "no-store"});
    } catch {
      return;
    }
    if (!answer.ok) return;
    const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
    const part = fresh.getElementById("live");
    if (!part) return;
    live.replaceChildren(...part.childNodes);
    if (focused) {
      const again = live.querySelector(`[data-key="${CSS.escape(focused)}"]`);
      if (again) again.focus();
    }
  }

  async function call(method, path, body) {
    busy += 1;
    said.textContent = `${method} ${path} ...`;
    said.dataset.status = "";
    try {
      const init = {method, headers: {}};
      if (body !== undefined) {
        init.headers["Content-Type"] = "application/json";
        init.body = JSON.stringify(body);
      }
      const answer = await fetch(base + path, init);
      said.textContent = `${answer.status} ${method} ${path}\\n${shown(await answer.text())}`;
      said.dataset.status = String(answer.status);
      if (answer.ok) await refresh(true);
    } catch (error) {
      said.textContent = `${method} ${path} failed: ${error}`;
      said.dataset.status = "failed";
    } finally {
      busy -= 1;
    }
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-op]");
    if (!button) return;
    const data = button.dataset;
    if (data.op === "breaker") {
      call("POST", `/api/breakers/${encodeURIComponent(data.origin)}`, {state: data.state});
    } else if (data.op === "delete-override") {
      call("DELETE", `/api/overrides/${encodeURIComponent(data.id)}`);
    }
  });
  const reset = document.getElementById("reset");
  reset.addEventListener("submit", (event) => {
    event.preventDefault();
    const fields = reset.elements;
    call("POST", "/api/keys/reset", {route: fields.route.value, key: fields.key.value});
  });
  const purge = document.getElementById("purge");
  if (purge) {
    purge.addEventListener("submit", (event) => {
      event.preventDefault();
      const fields = purge.elements;
      const body = {url: fields.url.value};
      if (fields.key.value) body.key = fields.key.value;
      call("POST", "/api/cache/purge", body);
    });
  }
  setInterval(refresh, REFRESH_MS);
})();
"""


def policy(nonce: str) -> str:
    """The page's ``Content-Security-Policy``: its own script and style (by ``nonce``),
    requests to its own origin only, no frame around it, no form sent anywhere."""
    return (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
        "connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


class _Html(str):
    """Markup made here, put in a cell as it is (every other value is escaped)."""


def _cell(value: Any) -> str:
    if isinstance(value, _Html):
        return f"<td>{value}</td>"
    return f"<td>{escape(str(value))}</td>"


def _table(headers: list[str], rows: list[list[Any]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _button(label: str, key: str, **data: str) -> str:
    fields = "".join(f' data-{name}="{escape(value)}"' for name, value in data.items())
    return f'<button type="button" data-key="{escape(key)}"{fields}>{escape(label)}</button>'


def render(
    config: Config,
    stats: dict[str, Any],
    overrides: list[dict[str, Any]],
    breakers: dict[str, str],
    generated_at: str,
    *,
    nonce: str | None,
) -> str:
    """The page's HTML; ``nonce`` is the one :func:`policy` names for this response, or
    ``None`` for its ``#live`` part alone (what the script reads again)."""
    routes = _route_rows(config, stats.get("routes", {}))
    top = [
        [item["route"], item["key_hash"], item["limited"]] for item in stats.get("top_limited", [])
    ]
    override_rows = [_override_row(o) for o in overrides]
    breaker_rows = [_breaker_row(name, phase) for name, phase in sorted(breakers.items())]
    shadow_note = (
        '<p class="bad">Global shadow mode is on: nothing is blocked.</p>'
        if config.ops.shadow
        else ""
    )
    live = (
        '<section id="live">'
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
        + _table(["route", "key", "limits", "reason", "expires", "id", ""], override_rows, "None.")
        + "<h2>Circuit breakers</h2>"
        + _table(["origin", "state", "force"], breaker_rows, "No origin has a shared breaker yet.")
        + "</section>"
    )
    if nonce is None:
        return live
    controls = _controls(config)
    script = _SCRIPT.replace("REFRESH_MS", str(REFRESH_SECONDS * 1000))
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f'<noscript><meta http-equiv="refresh" content="{REFRESH_SECONDS}"></noscript>'
        "<title>edge-limiter status</title>"
        f'<style nonce="{nonce}">{_STYLE}</style></head>'
        f'<body data-prefix="{escape(config.ops.admin_prefix)}">'
        "<h1>edge-limiter</h1>"
        f"{live}"
        f"{controls}"
        '<h2>Answer</h2><pre id="said" aria-live="polite">Nothing asked yet.</pre>'
        f'<script nonce="{nonce}">{script}</script>'
        "</body></html>"
    )


def _route_rows(config: Config, per_route: dict[str, Any]) -> list[list[Any]]:
    """Each route's row: what it matches and limits, and its denials of the last 5 and 60
    minutes (``per_route``: the stats by route)."""
    rows = []
    for route in config.routes:
        info = describe_route(route)
        counts5 = per_route.get(route.name, {}).get("5m", {})
        counts60 = per_route.get(route.name, {}).get("60m", {})
        methods = info["match"]["methods"]
        rows.append(
            [
                route.name,
                f"{' '.join(methods) if isinstance(methods, list) else '*'} "
                f"{info['match']['path']}",
                ", ".join(str(limit) for limit in route.limits.limits),
                info["algorithm"],
                ", ".join(info["key"]),
                "yes" if info["shadow"] else "",
                counts5.get("limited", 0) + counts5.get("cached_denial", 0),
                counts60.get("limited", 0) + counts60.get("cached_denial", 0),
                counts5.get("shadow", 0),
                counts60.get("shadow", 0),
            ]
        )
    return rows


def _override_row(o: dict[str, Any]) -> list[Any]:
    """An override's row, with the button that deletes it."""
    return [
        o["route"],
        o["key"],
        "exempt" if o["exempt"] else ", ".join(_rate(q, w) for q, w in o["limits"]),
        o["reason"],
        _when(o["expires_at"]),
        o["id"],
        _Html(_button("delete", f"delete:{o['id']}", op="delete-override", id=str(o["id"]))),
    ]


def _breaker_row(name: str, phase: str) -> list[Any]:
    """An origin's breaker row, with the buttons that force it."""
    buttons = "".join(
        _button(f"force {state}", f"breaker:{name}:{state}", op="breaker", origin=name, state=state)
        for state in ("open", "closed")
    )
    auto = _button("auto", f"breaker:{name}:auto", op="breaker", origin=name, state="auto")
    return [name, phase, _Html(buttons + auto)]


def _controls(config: Config) -> str:
    """The forms that reset a key, and (when a route caches) purge a cached answer."""
    options = "".join(
        f'<option value="{escape(route.name)}">{escape(route.name)}</option>'
        for route in config.routes
    )
    controls = (
        "<h2>Reset a key</h2>"
        '<form id="reset"><label>route <select name="route">'
        f"{options}</select></label>"
        '<label>key <input type="text" name="key" required '
        'placeholder="ip=203.0.113.9, or the value alone"></label>'
        '<button type="submit">reset</button></form>'
    )
    if any(route.cache is not None for route in config.routes):
        controls += (
            "<h2>Purge a cached answer</h2>"
            '<form id="purge"><label>URL <input type="text" name="url" required '
            'placeholder="https://api.example.com/v1/catalog"></label>'
            '<label>key <input type="text" name="key" '
            'placeholder="on a route cached per key"></label>'
            '<button type="submit">purge</button></form>'
        )
    return controls


def _rate(quota: int, window_ms: int) -> str:
    """An override's limit as the config writes it (``100 per second``); stored overrides
    were checked when they were set."""
    return str(Rate(quota, window_ms))


def _when(epoch_ms: int | None) -> str:
    """An override's expiry in UTC, or ``never``."""
    if not epoch_ms:
        return "never"
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
