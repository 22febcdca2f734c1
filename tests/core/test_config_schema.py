"""The config schema: its docs are current, its examples valid, and what derives from it
(the readers of each kind of field, the JSON of a route, the check table) says what the
schema says."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from edge_limiter.core.config import parse_config
from edge_limiter.core.config.describe import COLUMNS, check_table, describe_route
from edge_limiter.core.config.docs import COMMAND, DOC_PATH, render, tables
from edge_limiter.core.config.fields import (
    Choice,
    Duration,
    Flag,
    Integer,
    Names,
    Ref,
    Size,
    Statuses,
    Sub,
    Text,
    toml_value,
)
from edge_limiter.core.config.route import ROUTE
from edge_limiter.core.config.table import Reader, Table
from edge_limiter.core.errors import ConfigError
from edge_limiter.core.validation import Problems

ROOT = Path(__file__).resolve().parents[2]

#: A config every example is placed into: a top-level origin, a pool, one route.
BASE: dict[str, Any] = {
    "origin": "https://origin.example.com",
    "pools": {"regional": {"origins": [{"name": "base", "url": "https://base.example.com"}]}},
    "auth": {
        name: {"algorithms": ["ES256"], "jwks_url": "https://auth.example.com/jwks"}
        for name in ("main", "regional")
    },
    "tiers": {
        "by": "jwt:tier",
        "default": "free",
        "plans": {"free": "50/hour", "pro": "500/hour", "regional": {"limits": "100/hour"}},
    },
    "routes": [
        {"name": "r", "match": {"path": "/v1/*"}, "limits": "20/second; 1000/hour"},
        {
            "name": "s",
            "match": {"path": "/v2/*"},
            "limits": "5/second",
            "auth": "main",
            "tiers": True,
            "group": "search",
        },
    ],
}

#: Every field with the place of its table, e.g. ("routes[].cache", <ttl>).
FIELDS = [
    pytest.param(places[0], spec, id=f"{places[0] or 'config'}.{spec.name}")
    for table, places in tables()
    for spec in table.fields
]


def test_the_committed_configuration_doc_is_current() -> None:
    written = (ROOT / DOC_PATH).read_text(encoding="utf-8")
    assert written == render(), f"{DOC_PATH} is stale: run {COMMAND}"


@pytest.mark.parametrize(("place", "spec"), FIELDS)
def test_every_field_has_a_doc_and_an_example(place: str, spec: Any) -> None:
    assert spec.doc or (isinstance(spec, Sub) and spec.table.doc), place
    assert spec.example is not None, place


def _table_at(config: dict[str, Any], place: str) -> dict[str, Any]:
    """The table written at ``place`` (``routes[].cache``) in ``config``, made with its
    required fields' examples where the config has none."""
    table: Any = config
    spec_table = tables()[0][0]
    for step in place.split(".") if place else []:
        name, listed = step.removesuffix("[]"), step.endswith("[]")
        if name == "NAME":
            table = table["regional"]
            continue
        spec = spec_table.by_name[name]
        assert isinstance(spec, Sub)
        spec_table = spec.table
        minimal = {f.name: f.example for f in spec_table.fields if f.required}
        if listed:
            if not isinstance(table.get(name), list):
                table[name] = [minimal]
            table = table[name][0]
        else:
            if not isinstance(table.get(name), dict):
                table[name] = minimal
            table = table[name]
    return table


def _with_example(place: str, spec: Any) -> dict[str, Any]:
    config = copy.deepcopy(BASE)
    if place == "routes[].limits[]":
        config["routes"][0]["limits"] = [{"rate": "20/second"}, "1000/hour"]
    table = _table_at(config, place)
    table[spec.name] = spec.example
    for name, value in spec.example_with.items():
        if value is None:
            table.pop(name, None)
        else:
            table[name] = value
    return config


@pytest.mark.parametrize(("place", "spec"), FIELDS)
def test_every_example_is_valid_where_its_table_is_written(place: str, spec: Any) -> None:
    config = _with_example(place, spec)
    try:
        parse_config(config)
    except ConfigError as exc:
        pytest.fail(f"{place}.{spec.name} = {toml_value(spec.example)}: {exc}")


#: Fields whose example shows no change in the parsed config from :data:`BASE`, and why.
NO_VISIBLE_EFFECT = {
    ".storage",  # a table: its fields' examples are checked one by one
    ".deny_cache",
    ".admin",
    ".overrides",
    ".logging",
    ".paths",
}


@pytest.mark.parametrize(("place", "spec"), FIELDS)
def test_every_example_changes_what_is_parsed(place: str, spec: Any) -> None:
    # The field is read, and lands somewhere: the example is not its default.
    if f"{place}.{spec.name}" in NO_VISIBLE_EFFECT:
        return
    config = _with_example(place, spec)
    base = copy.deepcopy(BASE)
    if place == "routes[].limits[]":
        base["routes"][0]["limits"] = [{"rate": "20/second"}, "1000/hour"]
    # An unused pool shows nowhere: the route forwards to it when the field is a pool's.
    if place.startswith("pools.NAME") or spec.name == "pools":
        for raw in (config, base):
            raw["routes"][0]["pool"] = "regional"
    assert parse_config(config) != parse_config(base), f"{place}.{spec.name}"


# --- the readers --------------------------------------------------------------------------


def read(table: Table, raw: dict[str, Any]) -> tuple[Reader, Problems]:
    problems = Problems()
    return Reader(table, raw, "t", problems), problems


BOUNDED = Table(
    "t",
    "a test table",
    (
        Integer("window", 1, 100, default=20),
        Integer("min_calls", 1, Ref("window"), default=10),
        Duration("open_for", 1, 60_000, default=10_000),
        Duration("max_open_for", Ref("open_for"), 300_000, default=30_000),
    ),
)


def test_a_bound_another_field_sets_bounds_the_value_and_moves_the_default() -> None:
    got, problems = read(BOUNDED, {"window": 5})
    assert got.integer("min_calls") == 5  # the default 10 moved inside 1..5
    got, problems = read(BOUNDED, {"window": 5, "min_calls": 6})
    assert got.integer("min_calls") == 5
    assert problems.items == ["t.min_calls: must be an integer 1..5, got 6"]
    got, problems = read(BOUNDED, {"open_for": "40s", "max_open_for": "35s"})
    assert got.ms("max_open_for") == 40_000
    assert problems.items == ["t.max_open_for: duration '35s' is shorter than 40s"]


def test_a_refused_value_is_named_and_takes_the_default() -> None:
    got, problems = read(BOUNDED, {"window": True, "open_for": 30, "wndow": 1})
    assert got.integer("window") == 20 and got.refused("window")
    assert got.ms("open_for") == 10_000 and not got.refused("max_open_for")
    assert problems.items == [
        "t.wndow: unknown field (did you mean 'window'? known: window, min_calls, open_for, "
        "max_open_for)",
        "t.window: must be an integer 1..100, got true",
        "t.open_for: must be a duration string like '30s' or '5m', got 30",
    ]


def test_a_choice_suggests_what_to_write_unless_told_not_to() -> None:
    table = Table(
        "t",
        "",
        (
            Choice("a", ("open", "closed"), default="open", hints={"shut": "write 'closed'"}),
            Choice(
                "b", ("key", "public"), default="public", rule="'key' or 'public'", suggest=False
            ),
        ),
    )
    got, problems = read(table, {"a": "Closed", "b": "Key"})
    got.text("a"), got.text("b")
    got2, problems2 = read(table, {"a": "shut"})
    got2.text("a")
    assert problems.items == [
        "t.a: must be one of open, closed, got 'Closed' (write 'closed')",
        "t.b: must be 'key' or 'public', got 'Key'",
    ]
    assert problems2.items == ["t.a: must be one of open, closed, got 'shut' (write 'closed')"]


def test_a_null_is_absent_only_where_the_field_says_so() -> None:
    table = Table(
        "t",
        "",
        (Flag("f", default=False), Duration("d", 1, 10, null_is_absent=True, default=0)),
    )
    got, problems = read(table, {"f": None, "d": None})
    assert got.flag("f") is False and got.ms("d") == 0
    assert problems.items == ["t.f: must be true or false, got nothing (missing or null)"]


def test_status_and_name_lists() -> None:
    table = Table(
        "t",
        "",
        (
            Statuses(
                "s", minimum=400, maximum=599, excluded=frozenset({429}), repeats_refused=True
            ),
            Statuses("h", non_empty=True, default=()),
            Names("m", "method", at_least_one=True, default=("POST",)),
            Names("n", "header name", default=()),
        ),
    )
    got, problems = read(table, {"s": [503, 502, 503], "h": [], "m": [], "n": ["X-A", "x-a", 1]})
    assert got.words("s") == (502, 503)
    assert got.words("h") == () and got.words("m") == ("POST",) and got.words("n") == ("x-a",)
    assert problems.items == [
        "t.s: names a status twice, got [503, 502, 503]",
        "t.h: must be a non-empty list of HTTP statuses 100..599, got []",
        "t.m: must name at least one method",
        "t.n[2]: must be a header name (an HTTP token), got 1",
    ]
    assert problems.warnings == ["t.n[1]: names 'x-a' twice"]


def test_what_the_docs_say_of_each_kind() -> None:
    assert Integer("w", 1, Ref("window")).bounds_text() == "1..window"
    assert Integer("c", 1, unit="units").type_text() == "integer (units)"
    assert Duration("t", 1, 600_000, default=30_000).bounds_text() == "1ms..10m"
    assert Duration("t", default=30_000).default_shown() == '`"30s"`'
    assert Size("b", 1, 1310720).bounds_text() == "1..1310720 (1.25 MiB)"
    assert Text("p", "/.*", "a path", required=True).default_shown() == "required"
    assert toml_value({"a": [1, "x", True], "b": 0.5}) == '{ a = [1, "x", true], b = 0.5 }'


# --- what derives from the schema --------------------------------------------------------


def test_a_route_as_plain_data_has_every_field_of_the_route_table() -> None:
    config = parse_config(
        {
            **BASE,
            "routes": [
                {
                    **BASE["routes"][0],
                    "cache": {"ttl": "5m"},
                    "idempotency": {},
                    "refund_on": [503, 502],
                    "write_behind": "50ms",
                }
            ],
        }
    )
    shown = describe_route(config.routes[0])
    shown_fields = {spec.json_key() for spec in ROUTE.fields if spec.attr is not None or spec.show}
    assert shown_fields <= set(shown)
    assert {"burst", "origin"}.isdisjoint(shown)  # their effect shows in limits and pool
    assert shown["timeout_ms"] == 30_000 and shown["write_behind_ms"] == 50
    assert shown["refund_on"] == [502, 503]
    assert shown["retry"] == {
        "attempts": 3,
        "base_ms": 100,
        "cap_ms": 2_000,
        "budget": 0.2,
        "min_per_second": 1,
        "budget_window_ms": 10_000,
    }
    assert shown["cache"]["ttl_ms"] == 300_000 and shown["cache"]["scope"] == "public"
    assert shown["idempotency"]["methods"] == ["PATCH", "POST"]
    # Kept for the readers of /api/config.
    assert shown["origins"] == ["origin.example.com"] and shown["retry_attempts"] == 3


def test_the_check_tables_columns_are_route_fields() -> None:
    assert {field for _, field, _ in COLUMNS} <= set(ROUTE.names)
    config = parse_config(BASE)
    heading, _, row, tiered = check_table(config).splitlines()
    assert heading.split()[:3] == ["route", "match", "key"]
    assert row.split()[:4] == ["r", "*", "/v1/*", "ip"]
    assert "auth main, tiers (group search)" in tiered
