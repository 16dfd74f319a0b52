"""LEADERBOARD.md, regenerated from the results CSV and nothing else.

For each dataset: MSE and MAE tables, one row per horizon plus Avg, our models as mean ± std over
seeds beside the published numbers (protocol.md §4), the best value of each row in bold. Then the
DAMCHA-vs-MHA summary per architecture, the targets the grids set (``targets:`` in their files:
a protocol-parity check, goal tables), the command that reproduces each table, and a "missing"
list for cells of the grids that have not run. A number appears only if a CSV row holds it.

The report is put together here from three parts:
- tables.py: the numbers (rows grouped into cells, every table as plain text; the conventions);
- render.py and templates/*.md: the Markdown and every sentence of prose;
- figures.py: the figures (FIGURES: each one's key, PNG, drawing function, caption and place).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from damcha_ts.errors import ConfigError
from damcha_ts.files import write_atomically
from damcha_ts.leaderboard.dataset_results import DatasetResults, ExpectedCell, collect, dataset_order, table_horizons
from damcha_ts.leaderboard.figures import render_plots
from damcha_ts.leaderboard.grid import combined_targets, load_grid
from damcha_ts.leaderboard.published import PublishedResults, load_published
from damcha_ts.leaderboard.render import (
    block,
    fill,
    images,
    markdown_table,
    metric_blocks,
    problem_blocks,
    source_lines,
)
from damcha_ts.leaderboard.results import read_results
from damcha_ts.leaderboard.tables import (
    average_table,
    cell_problems,
    damcha_vs_mha_table,
    expected_seed_counts,
    goal_table,
    metric_tables,
    parity_table,
    reproduce_commands,
    table_columns,
    training_table,
)
from damcha_ts.leaderboard.targets import ReportTargets
from damcha_ts.schema import SHIPPED_ROOT

__all__ = ["FINDINGS_NAME", "REPORT_GRIDS_NAME", "build_report", "read_report_grids", "record_report_grids",
           "report_targets", "write_report"]

FINDINGS_NAME = "FINDINGS.md"  # optional hand-written notes next to the CSV, included verbatim
# Beside the CSV: every grid the report covers, so a run over one grid keeps the others' sections
# (a grid whose dataset file is not redistributed has no row that would name it).
REPORT_GRIDS_NAME = "report_grids.yaml"
_REPORT_GRIDS_HEADER = (
    "# The grids LEADERBOARD.md covers (paths from the project root), kept by `damcha-ts leaderboard`:\n"
    "# a run over one grid adds it here and keeps every other grid's section in the report.\n"
)


def build_report(
    rows: Sequence[Mapping],
    *,
    results_name: str,
    expected: Sequence[ExpectedCell] = (),
    plots: Mapping[str, str] | None = None,
    published: PublishedResults | None = None,
    findings: str | None = None,
    unavailable: Mapping[str, str] | None = None,
    targets: ReportTargets | None = None,
) -> str:
    """The whole LEADERBOARD.md as text.

    Args:
        rows: results-CSV rows (``read_results``).
        results_name: how the report names the CSV (a path relative to the project root).
        expected: the cells the grids want (for "missing" notes, seed counts and commands).
        plots: {plot key: path relative to the report's folder}; the keys are those of
            ``figures.FIGURES`` ("average_mse", "variants", "curves:<dataset>", "forecast:<dataset>",
            "metrics:<dataset>:<model>", ...), as ``render_plots`` returns them.
        findings: Markdown written by people (what the ablations showed, why a row looks as it
            does), printed under "Findings"; it is the one part of the report not derived from the CSV.
        unavailable: {dataset: note} for datasets whose file was not found when the report was made.
        targets: what the Summary judges the rows against (the grids' ``targets:``); none by default.
    """
    published = published or load_published()
    plots = dict(plots or {})
    results = collect(rows, expected)
    lines = _introduction(rows, results, results_name, plots)
    lines += _summary(results, published, expected, targets or ReportTargets(), plots)
    if findings and findings.strip():
        lines += block("findings", source=FINDINGS_NAME, findings=findings.strip())
    lines += block("sources", sources=source_lines(published))
    for dataset in dataset_order({*results, *(c.dataset for c in expected)}):
        data = results.get(dataset, DatasetResults(dataset))
        lines += _dataset_section(data, expected, published, plots, (unavailable or {}).get(dataset))
    return "\n".join(lines).rstrip() + "\n"


def _introduction(rows: Sequence[Mapping], results: Mapping[str, DatasetResults], results_name: str,
                  plots: Mapping[str, str]) -> list[str]:
    lines = block("preamble", results_name=results_name, n_rows=len(rows))
    superseded = sum(d.superseded for d in results.values())
    if superseded:
        lines += block("superseded", n=superseded)
    return lines + images(plots, "top")


def _summary(
    results: Mapping[str, DatasetResults],
    published: PublishedResults,
    expected: Sequence[ExpectedCell],
    targets: ReportTargets,
    plots: Mapping[str, str],
) -> list[str]:
    """DAMCHA vs MHA, the Avg per dataset, then the grids' targets: parity first, then each goal table."""
    lines = block("summary", table=markdown_table(damcha_vs_mha_table(results)))
    lines += images(plots, "summary")
    lines += block("averages", table=markdown_table(average_table(results, published, expected)))
    if targets.parity is not None:
        datasets = {*results, *(c.dataset for c in expected)}
        table = parity_table(results, published, targets.parity, datasets)
        lines += block("target", title=targets.parity.title, table=markdown_table(table))
    for goal in targets.goals:
        lines += block("target", title=goal.title, table=markdown_table(goal_table(results, published, goal)))
        lines += [goal.note, ""] if goal.note else []
    return lines


def _dataset_section(
    data: DatasetResults,
    expected: Sequence[ExpectedCell],
    published: PublishedResults,
    plots: Mapping[str, str],
    unavailable: str | None,
) -> list[str]:
    """A dataset's commands, its metric tables (main models, then ablation rows), how the runs went,
    the cells still missing, and its figures."""
    cells = [c for c in expected if c.dataset == data.dataset]
    horizons = table_horizons(data, expected)
    seeds = expected_seed_counts(cells)
    main, ablations = table_columns(data, cells)
    commands = [line for command in reproduce_commands(data, cells) for line in fill("reproduce", command=command)]
    lines = block("dataset", dataset=data.dataset, reproduce=commands)
    if unavailable is not None:
        lines += block("unavailable", note=unavailable)
    lines += metric_blocks(metric_tables(data, main, horizons, published, seeds, with_published=True))
    if ablations:
        lines += block("ablations")
        lines += metric_blocks(metric_tables(data, ablations, horizons, published, seeds, with_published=False))
    training = training_table(data, [*main, *ablations])
    if training is not None:
        lines += block("training", table=markdown_table(training))
    lines += problem_blocks(cell_problems(data.dataset, expected, data))
    return lines + images(plots, "dataset", dataset=data.dataset)


def write_report(
    results_path: str | Path,
    report_path: str | Path,
    *,
    expected: Sequence[ExpectedCell] = (),
    results_name: str | None = None,
    unavailable: Mapping[str, str] | None = None,
    targets: ReportTargets | None = None,
) -> Path:
    """Regenerate the report (and its plots in ``<report folder>/plots``) from the results CSV, plus
    the hand-written ``FINDINGS.md`` next to the CSV when there is one. ``targets`` default to those
    of the grids the report covers (``report_targets``)."""
    results_path, report_path = Path(results_path), Path(report_path)
    rows = read_results(results_path)
    made = render_plots(rows, results_path, report_path.parent / "plots", expected)
    plots = {key: os.path.relpath(path, report_path.parent) for key, path in made.items()}
    findings_file = results_path.parent / FINDINGS_NAME
    findings = findings_file.read_text(encoding="utf-8") if findings_file.is_file() else None
    if targets is None:
        targets = report_targets(results_path, rows)
    text = build_report(rows, results_name=results_name or str(results_path), expected=expected, plots=plots,
                        findings=findings, unavailable=unavailable, targets=targets)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(report_path, text)


def report_targets(results_path: str | Path, rows: Sequence[Mapping] = ()) -> ReportTargets:
    """The targets of the grids the report beside ``results_path`` covers: those ``report_grids.yaml``
    lists and those the rows' ``grid`` column names. Their paths are from the project root: the first
    folder above the CSV that holds them, else the root of the shipped configs; a grid found in
    neither is left out (``damcha-ts leaderboard`` says so)."""
    results_path = Path(results_path).resolve()
    roots = [*results_path.parents, SHIPPED_ROOT.parent]
    names = dict.fromkeys([*read_report_grids(results_path), *(row["grid"] for row in rows if row.get("grid"))])
    grids = []
    for name in names:
        found = next((root / name for root in roots if (root / name).is_file()), None)
        if found is not None:
            grids.append(load_grid(found))
    return combined_targets(grids)


def read_report_grids(results_path: str | Path) -> list[str]:
    """The grid files the report beside ``results_path`` covers (``report_grids.yaml``; none if absent)."""
    path = Path(results_path).parent / REPORT_GRIDS_NAME
    if not path.is_file():
        return []
    try:
        listed = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    grids = listed.get("grids") if isinstance(listed, dict) else None
    if not isinstance(grids, list) or not all(isinstance(name, str) for name in grids):
        raise ConfigError(f"{path}: expected 'grids:' with a list of grid files, got {listed!r}")
    return grids


def record_report_grids(results_path: str | Path, names: Sequence[str]) -> bool:
    """Add ``names`` to ``report_grids.yaml`` (written atomically, and only when the list grows)."""
    known = read_report_grids(results_path)
    grids = [*known, *(name for name in dict.fromkeys(names) if name not in known)]
    if grids == known:
        return False
    text = _REPORT_GRIDS_HEADER + yaml.safe_dump({"grids": grids}, sort_keys=False)
    write_atomically(Path(results_path).parent / REPORT_GRIDS_NAME, text)
    return True
