"""Per-epoch training curves of finished cells, committed beside the results CSV as ``curves.json``.

The CSV says how a cell ended (test MSE, best epoch); the curves say how it got there -- training and
validation MSE after every epoch, which is what shows a model that peaks early and then overfits.
Run folders are not committed, so each finished cell's curve is copied out of its Lightning log
(``<run dir>/logs/metrics.csv``) into one JSON list, keyed like the CSV rows:

    [{"dataset", "model", "horizon", "seed", "config_hash",
      "epochs": [1, 2, ...], "train_loss": [...], "val_loss": [...]}, ...]

Writes go through the CSV's lock and atomic replace (``results.py``).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from damcha_ts.errors import DataError
from damcha_ts.files import write_atomically
from damcha_ts.leaderboard.results import cell_key, exclusive_lock, key_fields

CURVES_FILE = "curves.json"


def curves_path(results_path: str | Path) -> Path:
    return Path(results_path).parent / CURVES_FILE


def read_run_curves(run_dir: str | Path) -> dict | None:
    """{"epochs", "train_loss", "val_loss"} (epochs 1-based) from a run's Lightning CSV log, or None.

    Epoch-level values only: ``val_loss`` (the MSE over every validation window) and ``train_loss``
    (the epoch mean, null where it was not logged); an epoch cut short before validation is left out.
    """
    log = Path(run_dir) / "logs" / "metrics.csv"
    if not log.is_file():
        return None
    val: dict[int, float] = {}
    train: dict[int, float] = {}
    with log.open(newline="", encoding="utf-8") as handle:
        for record in csv.DictReader(handle):
            if not record.get("epoch"):
                continue
            epoch = int(float(record["epoch"])) + 1
            if record.get("val_loss"):
                val[epoch] = float(record["val_loss"])
            if record.get("train_loss"):
                train[epoch] = float(record["train_loss"])
    epochs = sorted(val)
    if not epochs:
        return None
    return {
        "epochs": epochs,
        "train_loss": [train.get(e) for e in epochs],  # None (JSON null) where not logged
        "val_loss": [val[e] for e in epochs],
    }


def load_curves(results_path: str | Path) -> list[dict]:
    path = curves_path(results_path)
    if not path.is_file():
        return []
    try:
        curves = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DataError(f"{path}: not valid JSON ({exc}); restore it (git checkout) or delete it, and rerun") from exc
    fields = ("dataset", "model", "horizon", "seed", "config_hash", "epochs", "train_loss", "val_loss")
    if not isinstance(curves, list) or not all(isinstance(item, dict) and set(fields) <= set(item) for item in curves):
        raise DataError(f"{path}: expected a list of curves, each with {', '.join(fields)}")
    return curves


def record_curves(results_path: str | Path, entries: Iterable[tuple[Mapping, dict]]) -> int:
    """Store (CSV row, curves) pairs, replacing any earlier curve of the same cell; returns how many."""
    entries = [(row, curves) for row, curves in entries if curves]
    if not entries:
        return 0
    path = curves_path(results_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(path):
        stored = {cell_key(item): item for item in load_curves(results_path)}
        for row, curves in entries:
            key = cell_key(row)
            stored[key] = {**key_fields(key), **curves}
        ordered = sorted(stored.values(), key=lambda item: cell_key(item))
        text = json.dumps(ordered, indent=1) + "\n"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:  # unchanged: not touched
            write_atomically(path, text)
    return len(entries)

