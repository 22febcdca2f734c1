"""The README's config examples are what a user copies: each must be valid as written."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from edge_limiter.core.config import parse_config

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
BLOCKS = [
    pytest.param(match.group(1), id=f"line-{README[: match.start()].count(chr(10)) + 1}")
    for match in re.finditer(r"```toml\n(.*?)```", README, re.S)
]


def test_the_readme_has_config_examples() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("block", BLOCKS)
def test_each_toml_example_parses_and_is_a_valid_config(block: str) -> None:
    document = tomllib.loads(block)  # TOML 1.0, as wrangler and the build read it
    if "routes" in document:
        # One with routes runs as written (a reader's finding: four needed an origin added),
        # and draws no warning.
        assert parse_config(document).warnings == ()
    else:
        # Top-level settings alone: valid beside an origin.
        parse_config({"origin": "https://api.example.com", **document})


PYTHON = [
    pytest.param(match.group(1), id=f"line-{README[: match.start()].count(chr(10)) + 1}")
    for match in re.finditer(r"```python\n(.*?)```", README, re.S)
]


@pytest.mark.parametrize("block", PYTHON)
def test_each_python_example_runs_as_written(block: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # From the project's root, as a user's test run there would.
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    exec(compile(block, "README.md", "exec"), {"__name__": "readme_example"})


def test_the_readme_has_a_python_example() -> None:
    assert PYTHON
