"""The report as one self-contained HTML page: per route, a chart of admitted and denied
requests over time and the most denied keys. Charts are drawn by matplotlib (the
``replay`` extra: ``pip install 'edge-limiter[replay]'``) as inline SVG: the page loads
nothing from anywhere.

matplotlib is imported only here, and only when a page is asked for: the replay itself
needs nothing beyond the standard library.
"""

from __future__ import annotations

import html
import importlib
import io
import warnings
from datetime import UTC, datetime
from typing import Any

#: Colours of the two series (admitted, denied), and of the current config's denials.
ADMITTED, DENIED, CURRENT = "#3b7dd8", "#d8453b", "#8a8a8a"


class PlottingUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _pyplot() -> Any:
    try:
        import matplotlib  # noqa: PLC0415 - optional, imported only for a page

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise PlottingUnavailable(
            "--html needs matplotlib: pip install 'edge-limiter[replay]' "
            "(scripts/bootstrap --tests installs it)"
        ) from None
    return plt


def _series(route: dict[str, Any]) -> tuple[list[datetime], list[int], list[int]]:
    times, admitted, denied = [], [], []
    for at, ok, no in route["per_minute"]:
        times.append(datetime.fromisoformat(at.replace("Z", "+00:00")).astimezone(UTC))
        admitted.append(ok)
        denied.append(no)
    return times, admitted, denied


def chart_svg(route: dict[str, Any], current: dict[str, Any] | None = None) -> str:
    """One route's chart as an SVG element: requests per minute, admitted and denied
    (with ``current``: the current config's denials as a line)."""
    plt = _pyplot()
    dates: Any = importlib.import_module("matplotlib.dates")  # its classes are untyped

    figure, axes = plt.subplots(figsize=(9, 2.8), dpi=96, layout="constrained")
    try:
        times, admitted, denied = _series(route)
        if times:
            axes.stackplot(times, admitted, denied, labels=("admitted", "would be denied"),
                           colors=(ADMITTED, DENIED), step="post")  # fmt: skip
            if current is not None:
                then, _, was = _series(current)
                if then:
                    axes.step(then, was, where="post", color=CURRENT, linewidth=1.2,
                              label="denied by the current config")  # fmt: skip
            locator = dates.AutoDateLocator()
            axes.xaxis.set_major_locator(locator)
            axes.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator))
            axes.legend(loc="upper left", fontsize=8, frameon=False)
        else:
            axes.text(0.5, 0.5, "no requests replayed", ha="center", va="center")
        axes.set_ylabel("requests / min")
        axes.set_title(route["route"], loc="left", fontsize=10)
        axes.margins(x=0)
        axes.grid(axis="y", alpha=0.3)
        out = io.StringIO()
        with warnings.catch_warnings():
            # An empty chart has nothing to lay out: matplotlib says so, harmlessly.
            warnings.simplefilter("ignore", UserWarning)
            figure.savefig(out, format="svg")
    finally:
        plt.close(figure)
    svg = out.getvalue()
    return svg[svg.index("<svg") :]  # without the XML declaration and doctype


_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222 }
table { border-collapse: collapse; margin: .5em 0 1.5em }
td, th { padding: .2em .7em; border-bottom: 1px solid #ddd; text-align: right }
td:first-child, th:first-child { text-align: left }
.chart svg { width: 100%; height: auto }
.note { color: #666 }
"""


def _table(headings: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render_page(report: dict[str, Any]) -> str:
    """The whole page for a replay's report (:func:`.report.report_json`)."""
    proposed = report["proposed"]
    current = {r["route"]: r for r in report.get("current", {}).get("routes", [])}
    reading = report["reading"]
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        "<title>edge-limiter replay</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>What the proposed config would have done</h1>",
        f"<p>{html.escape(proposed['config'])}: {reading['requests']} requests from "
        f"{html.escape(proposed['from'])} to {html.escape(proposed['to'])}"
        + (f", compared with {html.escape(report['current']['config'])}" if current else "")
        + "</p>",
    ]
    if reading["malformed"] or reading["out_of_order_beyond_window"]:
        parts.append(
            f"<p class=note>{reading['malformed']} malformed lines, "
            f"{reading['out_of_order_beyond_window']} out of order beyond "
            f"{reading['reorder_window_ms'] // 1000} s (not replayed)</p>"
        )
    parts.append(
        _table(
            [
                "route",
                "requests",
                "would be denied",
                "share",
                "keys",
                "keys denied",
                "cache hits",
                "origin calls saved",
            ],
            [
                [
                    r["route"],
                    r["requests"],
                    r["denied"],
                    f"{r['denied_share']:.2%}",
                    r["distinct_keys"],
                    r["distinct_keys_denied"],
                    r["cache_hits"],
                    r["origin_calls_saved"],
                ]
                for r in proposed["routes"]
            ],
        )
    )
    for route in proposed["routes"]:
        name = route["route"]
        parts.append(f"<section class=route data-route='{html.escape(name, quote=True)}'>")
        parts.append(f"<h2>{html.escape(name)}</h2>")
        parts.append(f"<div class=chart>{chart_svg(route, current.get(name))}</div>")
        for part, count in route["not_keyed"].items():
            parts.append(
                f"<p class=note>{count} requests not replayed: the log does not give the "
                f"key's {html.escape(part)}</p>"
            )
        if route["top_denied_keys"]:
            parts.append(
                _table(
                    ["key", "denied", "of requests", "first denied", "peak / min"],
                    [
                        [
                            k["key"],
                            k["denied"],
                            k["requests"],
                            k["first_denied"],
                            k["peak_per_minute"],
                        ]
                        for k in route["top_denied_keys"]
                    ],
                )
            )
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)
