"""Config fuzz: random and malformed values anywhere in a config give a named error, never a
traceback.

Two generators: mutations of the complete example config (one field at a time replaced by
a value of another type, a huge number, unicode, or removed; unknown fields added), and
arbitrary JSON-like values at the top and in a route. Either the config parses, or
:class:`ConfigError` lists problems that each say where they are and what is wrong
(``route 'login'.limits: ...``). Nothing else may escape: no ``KeyError``, ``TypeError``,
``RecursionError``, ``OverflowError``.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_limiter.core.config import parse_config
from edge_limiter.core.errors import ConfigError
from tests.examples import examples

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE: dict[str, Any] = tomllib.loads((ROOT / "edge-limiter.toml").read_text())
EXAMPLE.pop("env", None)

ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(
        ["", " ", "0", "-1", "1e309", "NaN", "10/fortnight", "\u0000", "\u202e", "ü/second", "*"]
    ),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=3),
)

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a nested config (dict keys and list indexes)."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


PLACES = paths(EXAMPLE)


def assert_named_or_valid(raw: object) -> None:
    try:
        parse_config(raw)
    except ConfigError as exc:
        assert exc.problems, "a ConfigError must list its problems"
        for problem in exc.problems:
            # "WHERE: WHAT", WHERE naming the field (config.origin, route 'login'.limits...).
            where, sep, what = problem.partition(": ")
            assert sep and where.strip() and what.strip(), problem
            assert "Traceback" not in problem


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    place=st.sampled_from(PLACES),
    action=st.sampled_from(["replace", "remove", "extra"]),
    value=ODD_VALUES,
)
def test_one_field_broken_anywhere_gives_a_named_error(
    place: tuple[Any, ...], action: str, value: Any
) -> None:
    raw = copy.deepcopy(EXAMPLE)
    parent: Any = raw
    for step in place[:-1]:
        parent = parent[step]
    last = place[-1]
    if action == "replace":
        parent[last] = value
    elif action == "remove":
        del parent[last]
    elif isinstance(parent, dict):
        parent[f"unknown_{last}"] = value
    else:
        parent.append(value)
    assert_named_or_valid(raw)


@settings(max_examples=examples(300), deadline=None)
@given(top=st.dictionaries(st.sampled_from([*EXAMPLE, "nonsense"]), JSON, max_size=6))
def test_arbitrary_values_at_the_top_give_a_named_error(top: dict[str, Any]) -> None:
    assert_named_or_valid(top)
    assert_named_or_valid({**EXAMPLE, **top})


@settings(max_examples=examples(300), deadline=None)
@given(route=st.dictionaries(st.sampled_from([*EXAMPLE["routes"][0], "x"]), JSON, max_size=8))
def test_arbitrary_routes_give_a_named_error(route: dict[str, Any]) -> None:
    assert_named_or_valid({"origin": "https://api.example.com", "routes": [route]})


def test_non_tables_and_deep_nesting_are_named() -> None:
    deep: Any = "x"
    for _ in range(2_000):
        deep = [deep]
    for raw in (None, [], "routes", 42, {"routes": deep}, {"routes": {"a": 1}}):
        assert_named_or_valid(raw)
