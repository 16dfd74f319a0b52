"""Merge another machine's leaderboard results (a GPU session's, say) into the project's CSV.

    damcha-ts leaderboard --config ... --merge OTHER/benchmarks/results/leaderboard.csv
"""

from __future__ import annotations

from pathlib import Path

from damcha_ts.errors import DataError
from damcha_ts.files import write_atomically
from damcha_ts.leaderboard.curves import load_curves, record_curves
from damcha_ts.leaderboard.results import append_result, cell_key, read_results, sample_path


def merge_results(source: str | Path, path: str | Path) -> list[dict]:
    """Bring the finished cells of another results CSV into ``path``; returns the rows added.

    Each row of ``source`` whose cell ``path`` lacks is appended atomically, as a runner would,
    together with its training curves and, where ``path`` has none for that dataset, model and
    horizon yet, its prediction sample from beside ``source``. Rows of cells that ``path`` already
    holds are left out, so merging twice changes nothing. A cell includes its config hash: a row of
    another config is added beside ours, and the report shows the one whose hash the grid has now.
    """
    source, path = Path(source), Path(path)
    if not source.is_file():
        raise DataError(f"{source}: no results CSV to merge")
    added = [row for row in read_results(source) if append_result(path, row)]
    curves = {cell_key(item): item for item in load_curves(source)}
    record_curves(path, [(row, _curve_fields(curves.get(cell_key(row)))) for row in added])
    for row in added:
        # One sample per (dataset, model, horizon), whatever the seed: one we have stays ours.
        sample = sample_path(source, row["dataset"], row["model"], row["horizon"])
        target = sample_path(path, row["dataset"], row["model"], row["horizon"])
        if sample.is_file() and not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(target, sample.read_bytes())
    return added


def _curve_fields(item: dict | None) -> dict | None:
    """A stored curve without its identity fields (record_curves adds them back from the row)."""
    if item is None:
        return None
    return {k: v for k, v in item.items() if k not in ("dataset", "model", "horizon", "seed", "config_hash")}
