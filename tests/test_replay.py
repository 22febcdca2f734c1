"""``edge-limiter replay``: logs of every format, written here with a known ground truth
(one key at 3x its limit for a minute among well-behaved keys), replayed through the
whole gateway on the simulator; bad input answered without a traceback."""

from __future__ import annotations

import asyncio
import gc
import gzip
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from edge_limiter.core.config import parse_config
from edge_limiter.tools.cli import main as cli
from edge_limiter.tools.replay.driver import (
    FULL_COLLECTION_AFTER,
    Replay,
    collecting_rarely,
    replay_all,
)
from edge_limiter.tools.replay.records import time_ms

ALGORITHMS = ("fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra")
#: A minute's start (fixed windows are aligned to the clock): 2026-03-02T10:00:00Z.
T0 = 1_772_445_600_000
NOISY = "203.0.113.66"
GOOD = [f"198.51.100.{n}" for n in range(1, 21)]


def traffic() -> list[tuple[int, str, str, str, int]]:
    """(time ms, ip, method, target, status): 20 keys at 30/minute for three minutes, and
    one key at 180 in the second minute (3x a limit of 60/minute), every 333 ms."""
    lines = []
    for n, ip in enumerate(GOOD):
        for k in range(90):  # one every 2 s
            lines.append((T0 + k * 2000 + n * 50, ip, "GET", "/v1/search?q=x", 200))
    for k in range(180):
        lines.append((T0 + 60_000 + k * 333, NOISY, "GET", "/v1/search?q=x", 200))
    lines.sort()
    return lines


def expected_denials(algorithm: str) -> int:
    """The noisy key's denials under 60/minute: a window holds 60 of its 180; a bucket of
    60 refilled at one a second also admits what flows in meanwhile (GCRA is the same
    bucket, as a theoretical arrival time)."""
    if algorithm in ("fixed_window", "sliding_window", "sliding_log"):
        return 120
    tokens, last, denied = 60.0, None, 0
    for k in range(180):
        now = 60_000 + k * 333
        if last is not None:
            tokens = min(60.0, tokens + (now - last) / 1000)
        last = now
        if tokens >= 1:
            tokens -= 1
        else:
            denied += 1
    return denied


def config_text(algorithm: str = "sliding_log", **extra: str) -> str:
    lines = [
        'origin = "https://origin.test"',
        "[[routes]]",
        'name = "search"',
        'match = { path = "/v1/search" }',
        'limits = "60/minute"',
        f'algorithm = "{algorithm}"',
        'key = "ip"',
    ]
    lines += [f"{k} = {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


def clf(at: int, ip: str, method: str, target: str, status: int) -> str:
    stamp = time.strftime("%d/%b/%Y:%H:%M:%S", time.gmtime(at // 1000))
    return (
        f'{ip} - - [{stamp}.{at % 1000:03d} +0000] "{method} {target} HTTP/1.1" {status} 5 '
        f'"-" "test/1"'
    )


def logpush(at: int, ip: str, method: str, target: str, status: int, *, stamp: str) -> str:
    seconds = at / 1000
    moment = datetime.fromtimestamp(seconds, UTC)
    times: dict[str, Any] = {
        "rfc3339": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at % 1000:03d}Z",
        "rfc3339ns": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at % 1000:03d}000000Z",
        "unixnano": at * 1_000_000,
        "unixmilli": at,
        "unix": round(seconds, 3),
    }
    return json.dumps(
        {
            "ClientIP": ip,
            "ClientRequestHost": "api.example.com",
            "ClientRequestMethod": method,
            "ClientRequestURI": target,
            "EdgeStartTimestamp": times[stamp],
            "EdgeResponseStatus": status,
            "OriginResponseStatus": status,
            "ClientCountry": "de",
            "ClientASN": 3320,
            "RequestHeaders": {"x-api-key": f"k-{ip}"},
        }
    )


def replay(tmp: Path, log: Path, *args: str, config: str | None = None) -> dict[str, Any]:
    conf = tmp / "proposed.toml"
    conf.write_text(config or config_text(), encoding="utf-8")
    out = tmp / "report.json"
    code = cli(["replay", str(log), "--config", str(conf), "--json", str(out), *args])
    assert code == 0
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def route(report: dict[str, Any], name: str = "search", run: str = "proposed") -> dict[str, Any]:
    found: dict[str, Any] = next(r for r in report[run]["routes"] if r["route"] == name)
    return found


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_key_at_three_times_its_limit_is_denied_exactly_as_expected(
    tmp_path: Path, algorithm: str
) -> None:
    log = tmp_path / "access.log"
    log.write_text("\n".join(clf(*line) for line in traffic()) + "\n")
    report = replay(tmp_path, log, config=config_text(algorithm))
    search = route(report, "search")
    assert search["requests"] == 20 * 90 + 180
    assert search["denied"] == expected_denials(algorithm)
    assert search["distinct_keys"] == 21
    assert search["distinct_keys_denied"] == 1
    (top,) = search["top_denied_keys"]
    assert top["key"] == f"ip={NOISY}"
    assert top["denied"] == expected_denials(algorithm)
    assert top["requests"] == 180
    assert top["peak_per_minute"] == 180
    assert top["first_denied"].startswith("2026-03-02T10:01:")
    assert search["origin_calls_saved"] == search["denied"]
    per_minute = {at: (ok, no) for at, ok, no in search["per_minute"]}
    assert sum(no for _, no in per_minute.values()) == search["denied"]


def test_logpush_in_every_timestamp_format_gzip_replays_the_same(tmp_path: Path) -> None:
    formats = ("rfc3339", "rfc3339ns", "unixnano", "unixmilli", "unix")
    lines = [logpush(*line, stamp=formats[n % 5]) for n, line in enumerate(traffic())]
    log = tmp_path / "logpush.ndjson.gz"  # told by its bytes, not its name
    with gzip.open(log, "wt") as out:
        out.write("\n".join(lines) + "\n")
    report = replay(tmp_path, log)
    assert report["reading"]["files"] == {str(log): "logpush"}
    assert report["reading"]["malformed"] == 0
    assert route(report)["denied"] == 120


def test_logpush_headers_key_a_route_and_the_country(tmp_path: Path) -> None:
    log = tmp_path / "logpush.ndjson"
    log.write_text("\n".join(logpush(*line, stamp="rfc3339") for line in traffic()) + "\n")
    keyed = config_text().replace('key = "ip"', 'key = "header:x-api-key"')
    report = replay(tmp_path, log, config=keyed)
    search = route(report)
    assert search["denied"] == 120
    assert search["not_keyed"] == {}
    assert search["top_denied_keys"][0]["key"] == search["top_denied_keys"][0]["key_hash"]
    by_country = config_text().replace('key = "ip"', 'key = "country"')
    assert route(replay(tmp_path, log, config=by_country))["distinct_keys"] == 1


def test_a_key_the_log_does_not_keep_is_reported_not_guessed(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text("\n".join(clf(*line) for line in traffic()) + "\n")
    keyed = config_text().replace('key = "ip"', 'key = "header:x-api-key"')
    search = route(replay(tmp_path, log, config=keyed))
    assert search["not_keyed"] == {"header:x-api-key": 20 * 90 + 180}
    assert search["denied"] == 0
    assert search["replayed_requests"] == 0


def test_json_lines_with_named_fields(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_text(
        "\n".join(
            json.dumps(
                {
                    "ts": at / 1000,
                    "req": {"url": f"https://a.test{target}", "verb": m},
                    "client": ip,
                    "code": status,
                }
            )
            for at, ip, m, target, status in traffic()
        )
        + "\n"
    )
    spec = "json:time=ts,url=req.url,method=req.verb,ip=client,status=code"
    report = replay(tmp_path, log, "--format", spec)
    assert route(report)["denied"] == 120


def test_the_gateways_own_lines_replay_and_are_compared(tmp_path: Path) -> None:
    # What the gateway logged for the traffic (every admission sampled), with the time a
    # log pipeline adds: the replay decides the same.
    lines = []
    for at, ip, *_ in traffic():
        digest = f"h{ip.replace('.', '')}"
        lines.append({"timestamp": at, "logger": "edge_limiter", "event": "allowed",
                      "route": "search", "key_hash": digest})  # fmt: skip
    noisy = [line for line in lines if line["key_hash"] == f"h{NOISY.replace('.', '')}"]
    for line in noisy[60:]:
        line["event"] = "limited"
    noisy[70]["event"] = "allowed"  # the one the replay will not agree with
    text = [json.dumps(line) for line in lines]
    text.insert(3, json.dumps({"logger": "edge_limiter", "event": "origin_attempt"}))
    log = tmp_path / "gateway.log"
    log.write_text("\n".join(text) + "\n")
    report = replay(tmp_path, log)
    assert report["reading"]["files"] == {str(log): "gateway"}
    assert report["reading"]["skipped"] == 1
    assert route(report)["denied"] == 120
    compared = report["proposed"]["gateway_log"]
    assert compared["disagreed"] == 1
    assert compared["agreed"] == len(lines) - 1
    assert "the gateway logged 'allowed', the replay denied" in compared["first_disagreements"][0]


def test_malformed_lines_are_counted_and_the_first_ten_named(tmp_path: Path) -> None:
    good = [clf(*line) for line in traffic()]
    for n in range(12):
        good.insert(10 + n * 7, f"garbage {n}")
    log = tmp_path / "access.log"
    log.write_text("\n".join(good) + "\n")
    report = replay(tmp_path, log)
    reading = report["reading"]
    assert reading["malformed"] == 12
    assert len(reading["first_malformed"]) == 10
    assert reading["first_malformed"][0].startswith("access.log:11: ")
    assert route(report)["denied"] == 120


def test_out_of_order_lines_are_sorted_within_the_window_and_reported_beyond(
    tmp_path: Path,
) -> None:
    lines = traffic()
    shuffled = lines[:]
    # Neighbours swapped (a second apart at most): sorted back, the same decisions.
    for n in range(0, len(shuffled) - 1, 2):
        shuffled[n], shuffled[n + 1] = shuffled[n + 1], shuffled[n]
    late = (T0 + 1000, "192.0.2.1", "GET", "/v1/search", 200)
    shuffled.append(late)  # three minutes late
    log = tmp_path / "access.log"
    log.write_text("\n".join(clf(*line) for line in shuffled) + "\n")
    report = replay(tmp_path, log)
    assert route(report)["denied"] == 120
    assert report["reading"]["out_of_order_beyond_window"] == 1
    assert report["reading"]["first_out_of_order"][0].startswith(f"access.log:{len(shuffled)}: ")
    wider = replay(tmp_path, log, "--reorder-window", "10m")
    assert wider["reading"]["out_of_order_beyond_window"] == 0


def test_several_files_merge_by_time(tmp_path: Path) -> None:
    lines = traffic()
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("\n".join(clf(*line) for line in lines[::2]) + "\n")
    b.write_text("\n".join(clf(*line) for line in lines[1::2]) + "\n")
    conf = tmp_path / "c.toml"
    conf.write_text(config_text())
    out = tmp_path / "r.json"
    assert cli(["replay", str(a), str(b), "--config", str(conf), "--json", str(out)]) == 0
    assert route(json.loads(out.read_text()))["denied"] == 120


def test_compare_reports_both_configs_and_the_difference(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text("\n".join(clf(*line) for line in traffic()) + "\n")
    current = tmp_path / "current.toml"
    current.write_text(config_text().replace("60/minute", "150/minute"))
    report = replay(tmp_path, log, "--compare", str(current))
    assert route(report, run="current")["denied"] == 30
    (diff,) = report["difference"]
    assert diff["route"] == "search" and diff["denied"] == 90


def test_cache_hits_and_origin_calls_saved(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text("\n".join(clf(*line) for line in traffic()) + "\n")
    cached = config_text(cache='{ ttl = "1h", default_ttl = "5m" }').replace(
        "60/minute", "1000/minute"
    )
    search = route(replay(tmp_path, log, config=cached))
    assert search["denied"] == 0
    assert search["cache_hits"] == search["requests"] - 1
    assert search["reached_origin"] == 1
    assert search["origin_calls_saved"] == search["requests"] - 1


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edge_limiter.tools", "replay", *args],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_file_of_no_known_format_names_the_formats_tried(tmp_path: Path) -> None:
    log = tmp_path / "odd.log"
    log.write_text("hello\nworld\n")
    conf = tmp_path / "c.toml"
    conf.write_text(config_text())
    done = run_cli(str(log), "--config", str(conf))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "tried combined, common, logpush, gateway" in done.stderr


def test_a_config_error_is_reported_as_check_reports_it(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text(clf(*traffic()[0]) + "\n")
    conf = tmp_path / "c.toml"
    conf.write_text(config_text().replace("60/minute", "sixty a minute"))
    done = run_cli(str(log), "--config", str(conf))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "1 problem(s):" in done.stderr and "search" in done.stderr
    missing = run_cli(str(tmp_path / "nope.log"), "--config", str(conf.with_name("x.toml")))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    conf.write_text(config_text())
    bad_format = run_cli(str(log), "--config", str(conf), "--format", "xml")
    assert bad_format.returncode == 2 and "Traceback" not in bad_format.stderr


def test_the_replay_runs_without_matplotlib(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text("\n".join(clf(*line) for line in traffic()[:50]) + "\n")
    conf = tmp_path / "c.toml"
    conf.write_text(config_text())
    # matplotlib made unimportable: the replay without --html never needs it.
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from edge_limiter.tools.cli import main\n"
        f"sys.exit(main(['replay', {str(log)!r}, '--config', {str(conf)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "search" in done.stdout
    refused = subprocess.run(
        [sys.executable, "-c", code.replace("]))", ", '--html', 'x.html']))")],
        check=False, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2 and "needs matplotlib" in refused.stderr


def test_the_page_has_a_chart_per_route(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    log = tmp_path / "access.log"
    log.write_text("\n".join(clf(*line) for line in traffic()) + "\n")
    conf = tmp_path / "c.toml"
    conf.write_text(config_text() + config_text().split("\n", 1)[1].replace('"search"', '"b"'))
    page = tmp_path / "r.html"
    assert cli(["replay", str(log), "--config", str(conf), "--html", str(page)]) == 0
    text = page.read_text()
    assert text.count("<svg") == 2  # route b had no request: its chart says so
    # Nothing to fetch: no scripts, styles or images from elsewhere.
    assert "<script" not in text and "<link" not in text and "<img" not in text
    assert NOISY in text


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("2026-03-02T10:00:00Z", T0),
        ("2026-03-02T10:00:00.123456789Z", T0 + 123),
        ("2026-03-02T11:00:00+01:00", T0),
        (T0 // 1000, T0),
        (T0, T0),
        (T0 * 1000, T0),
        (T0 * 1_000_000, T0),
        (str(T0 * 1_000_000), T0),
        ("02/Mar/2026:10:00:00 +0000", T0),
        ("02/Mar/2026:05:00:00 -0500", T0),
        ("yesterday", None),
        (True, None),
    ],
)
def test_logged_times(written: object, expected: int | None) -> None:
    assert time_ms(written) == expected


def test_full_collections_are_rare_during_a_replay_and_as_before_after() -> None:
    run = Replay(parse_config({"origin": "https://o.test", "routes": []}), "t")
    before = gc.get_threshold()
    seen: list[tuple[tuple[int, int, int], int]] = []

    def records() -> Any:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        yield from ()

    asyncio.run(replay_all(records(), [run]))
    ((during, frozen),) = seen
    assert during == (before[0], before[1], FULL_COLLECTION_AFTER) and frozen > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), collecting_rarely():
        raise RuntimeError("a replay that fails")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_denial_line_with_repeats_replays_the_denials_it_stands_for(tmp_path: Path) -> None:
    # The gateway prints a flooded key's denials at most once a second ([logging]
    # denials_every), each line's `repeats` counting those it printed no line for (and
    # what is left when the flood stops in a line of its own, standing for 1 + repeats):
    # the replay sends them all, at the line's time, and decides the same.
    lines: list[dict[str, Any]] = []
    untold, printed_at, last_at, denials = 0, -(10**9), 0, 0
    for at, ip, *_ in traffic():
        digest = f"h{ip.replace('.', '')}"
        line: dict[str, Any] = {"timestamp": at, "logger": "edge_limiter", "event": "allowed",
                                "route": "search", "key_hash": digest}  # fmt: skip
        if ip == NOISY and sum(1 for seen in lines if seen["key_hash"] == digest) + denials >= 60:
            line["event"] = "limited"
            denials += 1
            last_at = at
            if at - printed_at < 1_000:
                untold += 1
                continue
            if untold:
                line["repeats"] = untold
            untold, printed_at = 0, at
        lines.append(line)
    if untold:
        lines.append({"timestamp": last_at, "logger": "edge_limiter", "event": "limited",
                      "route": "search", "key_hash": f"h{NOISY.replace('.', '')}",
                      "repeats": untold - 1})  # fmt: skip
        lines.sort(key=lambda line: int(line["timestamp"]))
    assert denials == 120 and any(line.get("repeats") for line in lines)
    log = tmp_path / "gateway.log"
    log.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    report = replay(tmp_path, log)
    told = sum(1 + int(line.get("repeats", 0)) for line in lines)
    assert told == len(traffic()) > len(lines)
    assert route(report)["requests"] == told
    assert route(report)["denied"] == 120
    compared = report["proposed"]["gateway_log"]
    assert compared["disagreed"] == 0 and compared["agreed"] == told
