"""The leaderboard results CSV: one row per finished cell, appended atomically.

The CSV is the committed artefact; the leaderboard's storage (``queue.py``) is where cells are run
from, and the CSV is exported from it with :func:`add_results`. Every append rewrites the whole file into a temporary file in the same folder, fsyncs it and
``os.replace``-s it over the old one, under an exclusive lock. A reader therefore only ever sees the
old file or the new one, and a process killed at any moment loses at most the row it was writing.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from damcha_ts.errors import DataError
from damcha_ts.files import locked_folder, write_atomically
from damcha_ts.leaderboard.paths import inside, safe_name

# The issue fixes the first six columns; the next say how the number was produced; the last two are
# scale-free scores on the original scale (MASE, season from the frequency; sMAPE, 0-2), empty in
# rows written before they were (a file with the header without them is read as it is, and rewritten
# with them when a row is added).
LEGACY_COLUMNS = ("dataset", "model", "horizon", "seed", "mse", "mae",
                  "config_hash", "epochs_run", "best_epoch", "n_params", "seconds_per_epoch", "wall_seconds",
                  "versions", "hardware", "grid", "timestamp")
RESULT_COLUMNS = (*LEGACY_COLUMNS, "mase", "smape")
INT_COLUMNS = ("horizon", "seed", "epochs_run", "best_epoch", "n_params")
FLOAT_COLUMNS = ("mse", "mae", "seconds_per_epoch", "wall_seconds", "mase", "smape")

# The columns whose values name files (prediction samples, plots): checked wherever rows come in.
LABEL_COLUMNS = ("dataset", "model")

CellKey = tuple[str, str, int, int, str]  # dataset, model, horizon, seed, config_hash
# Prediction samples (for the report's plots) live next to the CSV, one per dataset/model/horizon.
SAMPLES_DIR = "samples"


def cell_key(row: Mapping) -> CellKey:
    """The identity of a cell: a row with the same key means the cell is finished."""
    return (str(row["dataset"]), str(row["model"]), int(row["horizon"]), int(row["seed"]), str(row["config_hash"]))


def key_fields(key: CellKey) -> dict:
    """A cell key as the named fields of a row (what curves.json and the storage keep)."""
    dataset, model, horizon, seed, config_hash = key
    return {"dataset": dataset, "model": model, "horizon": horizon, "seed": seed, "config_hash": config_hash}


def check_labels(row: Mapping, where: str) -> None:
    """A DataError naming ``where`` and the column when a label of ``row`` could not name a file."""
    for column in LABEL_COLUMNS:
        safe_name(row.get(column, ""), f"{where}, column {column!r}", DataError)


def _parse(value: str, column: str):
    if column in INT_COLUMNS:
        return int(value) if value != "" else None
    if column in FLOAT_COLUMNS:
        return float(value) if value != "" else math.nan
    return value


def read_results(path: str | Path) -> list[dict]:
    """All rows of a results CSV as dicts with typed values; [] if the file does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = tuple(reader.fieldnames or ())
        if header not in (RESULT_COLUMNS, LEGACY_COLUMNS):
            raise DataError(
                f"{path}: header {reader.fieldnames} is not the leaderboard header {list(RESULT_COLUMNS)}"
            )
        rows = []
        for line, raw in enumerate(reader, start=2):
            if None in raw or any(raw[c] is None for c in header):
                raise DataError(f"{path}, line {line}: expected {len(header)} fields")
            try:
                row = {c: _parse(raw.get(c, ""), c) for c in RESULT_COLUMNS}
            except ValueError as exc:
                raise DataError(f"{path}, line {line}: {exc}") from exc
            check_labels(row, f"{path}, line {line}")
            rows.append(row)
    return rows


def sample_path(results_path: str | Path, dataset: str, model: str, horizon: int) -> Path:
    """Where the report's plots find the prediction sample of a (dataset, model, horizon)."""
    return inside(Path(results_path).parent / SAMPLES_DIR, f"{dataset}__{model}__H{horizon}.npz")


def _format(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)  # repr keeps every digit
    return str(value)


def exclusive_lock(path: Path):
    """A lock on the CSV's folder, so two runners never interleave their rewrites of ``path``."""
    return locked_folder(path.parent)


def _temporary_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def append_result(path: str | Path, row: Mapping) -> bool:
    """Append one row; False, and nothing written, when the CSV already holds a row of the same cell."""
    return bool(add_results(path, [row]))


def add_results(path: str | Path, rows: Sequence[Mapping]) -> list[Mapping]:
    """Append the rows whose cell the CSV does not hold yet (in the order given); returns those.

    The old content + the new rows go to a temp file, fsynced, then atomically replace the CSV; with
    nothing new the file is not touched."""
    path = Path(path)
    for row in rows:
        missing = [c for c in LEGACY_COLUMNS if c not in row]  # the scale-free scores are optional
        if missing:
            raise DataError(f"result row for {path} lacks columns {missing}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(path):
        # Left-overs of a writer killed between creating and replacing its temp file.
        for stale in _temporary_files(path):
            stale.unlink(missing_ok=True)
        old = path.read_bytes() if path.exists() else b""
        # Reading refuses to extend a file that is not a leaderboard CSV.
        done = read_results(path) if old else []
        present = {cell_key(row) for row in done}
        new = []
        for row in rows:
            if cell_key(row) not in present:
                present.add(cell_key(row))
                new.append(row)
        if not new:
            return []
        appended = new
        if old and not old.endswith(b"\n"):
            old += b"\n"
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        if old.split(b"\n", 1)[0].decode("utf-8").strip() != ",".join(RESULT_COLUMNS):
            # Empty, or the header without the newer columns: every row written again under today's header.
            writer.writerow(RESULT_COLUMNS)
            old = b""
            new = [*done, *new]
        for row in new:
            writer.writerow([_format(row.get(c)) for c in RESULT_COLUMNS])
        write_atomically(path, old + buffer.getvalue().encode("utf-8"))
    return appended
