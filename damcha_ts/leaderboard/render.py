"""Markdown for LEADERBOARD.md: the prose lives in ``templates/*.md`` (``string.Template`` files kept as
data, shipped with the package); this module fills them and draws tables and figure links.

A template is one block of the report, without its trailing blank line; ``$name`` takes a value, and
a line that is only ``$name`` takes a list of lines (and disappears when the list is empty). Every
template's placeholders are listed where ``fill`` is called in report.py.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Mapping, Sequence
from importlib import resources

from damcha_ts.leaderboard.figures import FIGURES
from damcha_ts.leaderboard.tables import CellProblems, Table


@functools.cache
def template(name: str) -> string.Template:
    """``templates/<name>.md``, read once."""
    text = (resources.files("damcha_ts.leaderboard") / "templates" / f"{name}.md").read_text(encoding="utf-8")
    return string.Template(text.removesuffix("\n"))


def fill(name: str, **values: str | int | float | Sequence[str]) -> list[str]:
    """The lines of template ``name`` with ``values`` substituted (a list of lines joined by newlines)."""
    empty = {f"${key}" for key, value in values.items() if isinstance(value, (list, tuple)) and not value}
    kept = [line for line in template(name).template.split("\n") if line.replace("{", "").replace("}", "") not in empty]
    flat = {k: "\n".join(v) if isinstance(v, (list, tuple)) else str(v) for k, v in values.items()}
    return string.Template("\n".join(kept)).substitute(flat).split("\n")


def block(name: str, **values) -> list[str]:
    """``fill`` plus the blank line that ends a block of the report."""
    return [*fill(name, **values), ""]


def markdown_table(table: Table) -> list[str]:
    """A pipe table; the table's strong cells in bold."""

    def cell(row: int, column: int, text: str) -> str:
        return f"**{text}**" if (row, column) in table.strong else text

    lines = ["| " + " | ".join(table.header) + " |", "|" + "|".join("---" for _ in table.header) + "|"]
    lines += ["| " + " | ".join(cell(r, c, text) for c, text in enumerate(row)) + " |"
              for r, row in enumerate(table.rows)]
    return lines


def metric_blocks(tables: Sequence[tuple[str, Table]]) -> list[str]:
    """Each metric's table under its name in bold (``**MSE**``)."""
    lines = []
    for metric, table in tables:
        lines += [f"**{metric.upper()}**", "", *markdown_table(table), ""]
    return lines


def problem_blocks(problems: CellProblems) -> list[str]:
    """The missing, outdated and diverged cells, each list under its caption; nothing if none."""
    lines = []
    for name, per_model in (("missing", problems.missing), ("outdated", problems.outdated),
                            ("diverged", problems.diverged)):
        if per_model:
            lines += fill(name, cells=bullets(per_model))
    return [*lines, ""] if lines else []


def bullets(per_model: Mapping[str, Sequence[str]]) -> list[str]:
    return [f"- {model}: {', '.join(items)}" for model, items in per_model.items()]


def source_lines(published) -> list[str]:
    """The published models' sources, then the notes that ``*`` marks in the tables."""
    lines = [f"- **{model}**: {source}" for model, source in published.sources.items()]
    return lines + [f"- `*` {note['dataset']} {note['model']} {note['row']}: {note['text']}" for note in published.notes]


def images(plots: Mapping[str, str], section: str, **fields: str) -> list[str]:
    """The figure links of one place of the report (``FIGURES`` order, then by key), each with the
    caption of its kind; ``fields`` pick one dataset's figures."""
    lines = []
    for spec in FIGURES:
        if spec.section != section:
            continue
        for key in sorted(plots):
            found = spec.match(key)
            if found is not None and all(found.get(k) == v for k, v in fields.items()):
                lines += [f"![{spec.caption.format(**found)}]({plots[key]})", ""]
    return lines
