"""``docs/configuration.md``, written from the schema: every field of every table, with
its type, default, bounds and meaning.

    PYTHONPATH=src .venv/bin/python -m edge_limiter.core.config.docs --write   # after a change
    PYTHONPATH=src .venv/bin/python -m edge_limiter.core.config.docs --check   # 1: stale

:func:`render` is pure; ``tests/core/test_config_docs.py`` fails when the committed file
is not what it returns.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from .fields import Field, Sub, toml_value
from .table import Table
from .top import CONFIG

#: The command that writes the file, as the stale-doc test tells it.
COMMAND = "PYTHONPATH=src .venv/bin/python -m edge_limiter.core.config.docs --write"
#: Where the file is, from the repository's root.
DOC_PATH = "docs/configuration.md"


def tables(root: Table = CONFIG) -> list[tuple[Table, list[str]]]:
    """Every table under ``root``, each once, with the places it is written at."""
    found: dict[int, tuple[Table, list[str]]] = {}

    def visit(table: Table, path: str) -> None:
        entry = found.setdefault(id(table), (table, []))
        entry[1].append(path)
        if len(entry[1]) > 1:
            return  # its fields were visited at its first place
        subs = [spec for spec in table.fields if isinstance(spec, Sub)]
        if not path:  # the routes first, then the pools, then the small tables
            subs.sort(key=lambda spec: ("list", "map", "").index(spec.many))
        for spec in subs:
            visit(spec.table, _place(path, spec))

    visit(root, "")
    return list(found.values())


def _place(path: str, spec: Sub) -> str:
    step = f"{path}.{spec.name}" if path else spec.name
    return {"list": f"{step}[]", "map": f"{step}.NAME"}.get(spec.many, step)


def _anchor(place: str) -> str:
    return (place or "the-top-level").replace(".", "-").replace("[]", "").lower()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(spec: Field, places: dict[int, str]) -> str:
    meaning = spec.doc
    if isinstance(spec, Sub):
        first = places[id(spec.table)]
        link = f"see [`{first}`](#{_anchor(first)})"
        meaning = f"{meaning} ({link})" if meaning else f"{spec.table.doc} ({link})"
    if spec.example is not None and not (isinstance(spec, Sub) and spec.example == {}):
        meaning += f" Example: `{spec.name} = {toml_value(spec.example)}`."
    cells = [
        f"`{spec.name}`",
        spec.type_text(),
        spec.default_shown(),
        spec.bounds_text(),
        meaning,
    ]
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _section(table: Table, places: list[str], firsts: dict[int, str]) -> Iterator[str]:
    yield f'<a id="{_anchor(places[0])}"></a>'
    yield f"## {_title(places[0])}"
    yield ""
    if len(places) > 1:
        yield "Written at " + " and ".join(f"`{place}`" for place in places) + "."
        yield ""
    yield table.doc
    yield ""
    yield "| field | type | default | bounds | meaning |"
    yield "|---|---|---|---|---|"
    yield from (_row(spec, firsts) for spec in table.fields)
    yield ""


def render() -> str:
    """The whole of ``docs/configuration.md``."""
    found = tables()
    firsts = {id(table): places[0] for table, places in found}
    lines = [
        "# Configuration reference",
        "",
        "<!-- Written from the schema in src/edge_limiter/core/config/ by",
        f"     `{COMMAND}`: do not edit by hand. -->",
        "",
        "Every field of every table of `edge-limiter.toml` (or the `EDGE_LIMITER` var): its "
        "type, its default, its bounds and what it does. Durations are strings of parts "
        'largest unit first (`"250ms"`, `"30s"`, `"5m"`, `"24h"`, `"7d"`, `"1h30m"`); a '
        "bound written as another field's name is that field's value. `scripts/check-config` "
        "checks a config exactly as the Worker parses it.",
        "",
    ]
    lines += [f"- [{_title(places[0])}](#{_anchor(places[0])})" for _, places in found]
    lines.append("")
    for table, places in found:
        lines += _section(table, places, firsts)
    return "\n".join(lines)


def _title(place: str) -> str:
    return f"`{place}`" if place else "The top level"


def main(argv: list[str]) -> int:
    """``--write`` the file, or ``--check`` it (exit 1 when stale); from the repository's root."""
    path = Path(__file__).resolve().parents[4] / DOC_PATH
    text = render()
    if argv == ["--write"]:
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
        return 0
    if argv == ["--check"]:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current == text:
            return 0
        print(f"{DOC_PATH} is stale: run {COMMAND}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
