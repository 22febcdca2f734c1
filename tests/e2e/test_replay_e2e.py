"""The replay against the real thing: a recorded request sequence sent to the gateway on
local workerd, its own decision lines replayed with the same config, the same decisions;
and the replay's report page in headless Chromium."""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from edge_limiter.tools.cli import main as cli
from edge_limiter.tools.demo_origin import DemoOrigin
from edge_limiter.tools.local_gateway import LocalGateway

from .conftest import fresh_ip, track

pytestmark = pytest.mark.e2e

ALGORITHMS = ("fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra")
DECISIONS = {"allowed", "limited", "cached_denial", "shadow", "exempt"}


def replay_config(origin: str) -> dict[str, Any]:
    return {
        "origin": origin,
        # Every admission and every denial logged, to be compared one by one.
        "logging": {"sample_allowed": 1.0, "denials_every": "0s"},
        "routes": [
            {
                "name": f"rp-{algorithm}",
                "match": {"path": f"/rp-{algorithm}/*"},
                "limits": "5/minute",
                "algorithm": algorithm,
                "key": "ip",
            }
            for algorithm in ALGORITHMS
        ],
    }


def toml_of(config: dict[str, Any]) -> str:
    lines = [f"origin = {json.dumps(config['origin'])}", "[logging]", "sample_allowed = 1.0",
             'denials_every = "0s"']  # fmt: skip
    for route in config["routes"]:
        lines += [
            "[[routes]]",
            f"name = {json.dumps(route['name'])}",
            f"match = {{ path = {json.dumps(route['match']['path'])} }}",
            f"limits = {json.dumps(route['limits'])}",
            f"algorithm = {json.dumps(route['algorithm'])}",
            'key = "ip"',
        ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def replay_gateway(worker_dir: Path, origin: DemoOrigin) -> Iterator[LocalGateway]:
    gw = track(LocalGateway(worker_dir, {"EDGE_LIMITER": replay_config(origin.url)}).start())
    try:
        yield gw
    finally:
        gw.stop()


def decision_lines(gw: LocalGateway) -> list[dict[str, Any]]:
    found = []
    for line in gw.stderr_tail(400).splitlines():
        start = line.find("{")
        if start < 0 or '"logger":"edge_limiter"' not in line:
            continue
        record = json.loads(line[start:])
        if record.get("event") in DECISIONS and str(record.get("route", "")).startswith("rp-"):
            found.append(record)
    return found


def test_the_replay_of_the_gateways_log_decides_as_the_gateway_did(
    replay_gateway: LocalGateway, origin: DemoOrigin, tmp_path: Path
) -> None:
    # Windows aligned to the clock (fixed, sliding) must not turn mid-sequence: start
    # well inside a minute (a short real wait: workerd's clock cannot be injected).
    while time.time() % 60 > 45:
        time.sleep(0.5)
    sent: list[tuple[int, int]] = []  # (time ms, status) of each request, in order
    with httpx.Client(timeout=30) as client:
        for algorithm in ALGORITHMS:
            noisy, calm = fresh_ip(), [fresh_ip(), fresh_ip()]
            order = [noisy] * 9 + calm * 3
            order = [order[i] for i in (0, 9, 1, 10, 2, 3, 11, 4, 5, 12, 6, 13, 7, 14, 8)]
            for ip in order:
                before = time.time()
                answer = client.get(
                    f"{replay_gateway.url}/rp-{algorithm}/x", headers={"cf-connecting-ip": ip}
                )
                after = time.time()
                sent.append((round((before + after) * 500), answer.status_code))
    deadline = time.monotonic() + 10
    while len(decision_lines(replay_gateway)) < len(sent) and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = decision_lines(replay_gateway)
    assert len(lines) == len(sent)
    denied = [status == 429 for _, status in sent]
    assert [line["event"] in ("limited", "cached_denial") for line in lines] == denied
    assert sum(denied) == 5 * 4  # each noisy key: 9 requests, 5 admitted
    # The log as a pipeline keeps it: the gateway's line with the time it was written.
    log = tmp_path / "gateway.log"
    log.write_text(
        "\n".join(
            json.dumps({"timestamp": at, "message": json.dumps(line)})
            for (at, _), line in zip(sent, lines, strict=True)
        )
        + "\n"
    )
    conf = tmp_path / "config.toml"
    conf.write_text(toml_of(replay_config(origin.url)))
    out = tmp_path / "report.json"
    assert cli(["replay", str(log), "--config", str(conf), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["reading"]["files"] == {str(log): "gateway"}
    compared = report["proposed"]["gateway_log"]
    assert compared == {"agreed": len(sent), "disagreed": 0, "first_disagreements": []}
    for route in report["proposed"]["routes"]:
        assert route["requests"] == 15 and route["denied"] == 4
        assert route["distinct_keys"] == 3 and route["distinct_keys_denied"] == 1


# --- the report page in a real browser ----------------------------------------------------

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update"]  # fmt: skip


def chromium() -> str | None:
    return os.environ.get("EDGE_LIMITER_CHROMIUM") or shutil.which("chromium")


def test_the_report_page_in_a_real_browser(tmp_path: Path) -> None:
    executable = chromium()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing: scripts/bootstrap --tests installs it as root")
        pytest.skip("no Chromium on this machine (apt-get install chromium)")
    pytest.importorskip("matplotlib")
    from PIL import Image
    from playwright.sync_api import sync_playwright

    start = 1_772_445_600
    lines = []
    for n in range(1200):  # two routes, one key far over its limit, over 20 minutes
        at = start + n
        ip = "203.0.113.66" if n % 2 else f"198.51.100.{n % 40}"
        path = "/v1/a" if n % 3 else "/v1/b"
        stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(at))
        lines.append(f'{ip} - - [{stamp}] "GET {path} HTTP/1.1" 200 5 "-" "t/1"')
    log = tmp_path / "access.log"
    log.write_text("\n".join(lines) + "\n")
    conf = tmp_path / "c.toml"
    conf.write_text(
        'origin = "https://origin.test"\n'
        '[[routes]]\nname = "a"\nmatch = { path = "/v1/a" }\nlimits = "10/minute"\n'
        '[[routes]]\nname = "b"\nmatch = { path = "/v1/b" }\nlimits = "10/minute"\n'
    )
    page_file = tmp_path / "report.html"
    assert cli(["replay", str(log), "--config", str(conf), "--html", str(page_file)]) == 0
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: m.type == "error" and problems.append(m.text))
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on(
                "request",
                lambda r: r.url.startswith("file:") or problems.append(f"fetched {r.url}"),
            )
            page.goto(page_file.as_uri())
            charts = page.locator("section.route .chart svg")
            assert charts.count() == 2
            for n in range(2):
                shot = Image.open(io.BytesIO(charts.nth(n).screenshot())).convert("RGB")
                colours = shot.getcolors(maxcolors=1 << 16)
                assert colours is None or len(colours) > 10  # drawn, not blank
                reds = sum(
                    count for count, (r, g, b) in colours or [] if r > 180 and g < 110 and b < 100
                )
                assert colours is None or reds > 100  # the denied series is there
        finally:
            browser.close()
    assert problems == []
