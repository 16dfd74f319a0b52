"""Merge another machine's leaderboard results (a GPU session's, say) into the project's CSV.

    damcha-ts leaderboard --config ... --merge OTHER/benchmarks/results/leaderboard.csv
"""

from __future__ import annotations

from pathlib import Path

from damcha_ts.errors import DataError
from damcha_ts.files import write_atomically
from damcha_ts.leaderboard.curves import load_curves, record_curves
from damcha_ts.leaderboard.results import add_results, cell_key, read_results, sample_path


def merge_results(source: str | Path, path: str | Path) -> list[dict]:
    """Bring the finished cells of another results CSV into ``path``; returns the rows added.

    Each row of ``source`` whose cell ``path`` lacks is appended atomically, as a runner would,
    together with its training curves and, where ``path`` has none for that dataset, model and
    horizon yet, its prediction sample from beside ``source``. Rows of cells that ``path`` already
    holds are left out, so merging twice changes nothing. A cell includes its config hash: a row of
    another config is added beside ours, and the report shows the one whose hash the grid has now.
    """
    source, path = Path(source), Path(path)
    rows, curves, samples = check_merge_source(source, path)
    added = add_results(path, rows)  # one locked read and one atomic rewrite for all rows
    record_curves(path, [(row, _curve_fields(curves.get(cell_key(row)))) for row in added])
    for row in added:
        # One sample per (dataset, model, horizon), whatever the seed: one we have stays ours.
        sample, target = samples[cell_key(row)]
        if sample.is_file() and not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(target, sample.read_bytes())
    return added


def check_merge_source(source: str | Path, path: str | Path) -> tuple[list[dict], dict, dict]:
    """What merging ``source`` into ``path`` reads and writes, all checked before anything is merged:
    its rows (a label that could name a file outside a results folder is refused), its curves by
    cell, and each cell's sample (source, target), both proved inside their folders. A DataError
    names the file, and the line and column of a bad row."""
    source = Path(source)
    if not source.is_file():
        raise DataError(f"{source}: no results CSV to merge")
    try:
        rows = read_results(source)
        curves = {cell_key(item): item for item in load_curves(source)}
        samples = {cell_key(row): (sample_path(source, row["dataset"], row["model"], row["horizon"]),
                                   sample_path(path, row["dataset"], row["model"], row["horizon"])) for row in rows}
    except DataError as exc:
        raise DataError(f"{exc}; nothing was merged") from exc
    return rows, curves, samples


def _curve_fields(item: dict | None) -> dict | None:
    """A stored curve without its identity fields (record_curves adds them back from the row)."""
    if item is None:
        return None
    return {k: v for k, v in item.items() if k not in ("dataset", "model", "horizon", "seed", "config_hash")}
