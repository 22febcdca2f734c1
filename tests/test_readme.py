"""The examples in README.md and docs/*.md are what a user copies: each must run as written.

Every ```toml block parses as TOML 1.0 and is a valid config (one with routes as it stands,
with no warning; top-level settings alone beside an origin); every ```python block runs from
the project's root. Every relative link points at a file that exists, and at a heading or
anchor that exists in it.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_limiter.core.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Written by commands (their own tests keep them current): their blocks are not examples
#: (cache-tests.md shows the suite's config with its origin's port left out).
GENERATED = {"configuration.md", "cache-tests.md"}


def _blocks(language: str) -> Iterator[object]:
    for page in PAGES:
        if page.name in GENERATED:
            continue
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(rf"```{language}\n(.*?)```", text, re.S):
            line = text[: match.start()].count("\n") + 1
            yield pytest.param(match.group(1), id=f"{page.relative_to(ROOT)}:{line}")


TOML = list(_blocks("toml"))
PYTHON = list(_blocks("python"))


def test_the_pages_have_config_and_python_examples() -> None:
    assert len(TOML) >= 10
    assert PYTHON


@pytest.mark.parametrize("block", TOML)
def test_each_toml_example_parses_and_is_a_valid_config(block: str) -> None:
    document = tomllib.loads(block)  # TOML 1.0, as wrangler and the build read it
    if "routes" in document:
        # One with routes runs as written (a reader's finding: four needed an origin added),
        # and draws no warning.
        assert parse_config(document).warnings == ()
    else:
        # Top-level settings alone: valid beside an origin.
        parse_config({"origin": "https://api.example.com", **document})


@pytest.mark.parametrize("block", PYTHON)
def test_each_python_example_runs_as_written(block: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # From the project's root, as a user's test run there would.
    monkeypatch.chdir(ROOT)
    exec(compile(block, "example", "exec"), {"__name__": "readme_example"})


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 350
    # The two commands, within the first screen.
    first = "\n".join(lines[:40])
    assert "scripts/dev " in first and "scripts/test " in first


def _anchors(page: Path) -> set[str]:
    """The anchors of a page: its headings as GitHub writes them, and explicit ids."""
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    anchors = set(re.findall(r'<a id="([^"]+)"', text))
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


LINKS = [
    pytest.param(page, target, id=f"{page.relative_to(ROOT)}->{target}")
    for page in [*PAGES, ROOT / "SECURITY.md", ROOT / "CHANGELOG.md"]
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))
    if not re.match(r"[a-z]+:", target)
]


@pytest.mark.parametrize(("page", "target"), LINKS)
def test_each_relative_link_points_at_something_that_exists(page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    linked = (page.parent / path).resolve() if path else page
    assert linked.exists(), f"{page.name}: {target}"
    if anchor and linked.suffix == ".md":
        assert anchor in _anchors(linked), f"{page.name}: {target}"
