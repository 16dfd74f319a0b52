"""Labels that become paths: a merged CSV's rows and a shared storage's trials name sample and plot files.

Matrix rows: ``damcha-ts leaderboard --merge`` of a results CSV whose ``model`` or ``dataset`` climbs
out of the results folder (``x/../../../../out_of_tree/planted``), and a run whose storage holds a
finished cell with such a row → exit 2, the file (or study and trial), the line and the column
named; nothing written anywhere, not even the rows before the bad one. Every case builds its
folders inside its own case folder, so a file planted "outside" would still be seen there.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from matrix import Case, check_case
from damcha_ts.leaderboard.curves import record_curves
from damcha_ts.leaderboard.results import append_result, sample_path

ROOT = Path(__file__).resolve().parents[2]
ETT, SMOKE = ROOT / "configs" / "leaderboard" / "ett.yaml", ROOT / "configs" / "leaderboard" / "smoke.yaml"
CLIMBER = "x/../../../../out_of_tree/planted"
CURVE = {"epochs": [1, 2], "train_loss": [0.5, 0.4], "val_loss": [0.6, 0.5]}


def _row(**changes) -> dict:
    row = {"dataset": "ETTh1", "model": "itransformer_damcha", "horizon": 96, "seed": 2021, "mse": 0.4, "mae": 0.41,
           "config_hash": "abc123", "epochs_run": 2, "best_epoch": 1, "n_params": 1234, "seconds_per_epoch": 1.5,
           "wall_seconds": 3.0, "versions": "python=3.11", "hardware": "gpu=H200",
           "grid": "configs/leaderboard/ett.yaml", "timestamp": "2026-01-01T00:00:00+00:00"}
    return {**row, **changes}


def _plant_sample(results: Path, row: dict) -> None:
    """The sample of ``row`` where the source's sample path leads (DAMCHA head metrics: a plot too)."""
    path = results.parent / "samples" / f"{row['dataset']}__{row['model']}__H{row['horizon']}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, x=np.zeros((1, 8, 2)), y=np.zeros((1, 4, 2)), pred=np.zeros((1, 4, 2)),
             head_metrics=np.ones((2, 4, 4)), columns=np.array(["a", "b"]), start=np.array(["2016-01-01"]),
             window=np.array([0]))


def _snapshot(folder: Path) -> dict[str, list]:
    return {str(p.relative_to(folder)): [p.read_bytes().hex(), p.stat().st_mtime_ns]
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "before.json"}


def _merge_of(bad: dict):
    """Another machine's results: a good row, then ``bad`` with its sample and curve planted."""

    def make(folder: Path, fixtures: dict) -> list[str]:
        theirs = folder / "a" / "b" / "c" / "gpu" / "leaderboard.csv"
        rows = [_row(seed=2022), _row(**bad)]
        for row in rows:
            append_result(theirs, row)
        _plant_sample(theirs, rows[1])
        record_curves(theirs, [(row, CURVE) for row in rows])
        (folder / "here" / "results").mkdir(parents=True)
        (folder / "before.json").write_text(json.dumps(_snapshot(folder)))
        return ["leaderboard", "--config", ETT, "--results", folder / "here" / "results" / "leaderboard.csv",
                "--merge", theirs, "--runs-dir", folder / "here" / "runs"]

    return make


def _storage_holding(bad: dict):
    """A storage shared with another machine, holding a finished smoke cell whose row is ``bad``."""

    def make(folder: Path, fixtures: dict) -> list[str]:
        import optuna

        from damcha_ts.leaderboard.queue import open_grid_study, open_leaderboard_storage

        url = f"sqlite:///{folder / 'shared.db'}"
        row = _row(grid="configs/leaderboard/smoke.yaml", **bad)
        study = open_grid_study(open_leaderboard_storage(url), "configs/leaderboard/smoke.yaml")
        cell = {k: row[k] for k in ("dataset", "model", "horizon", "seed", "config_hash")}
        study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, value=0.4,
                                                  user_attrs={"cell": cell, "row": row, "curves": CURVE}))
        (folder / "before.json").write_text(json.dumps(_snapshot(folder)))
        return ["leaderboard", "--config", SMOKE, "--results", folder / "results" / "leaderboard.csv",
                "--runs-dir", folder / "runs", "--storage", url, "--only-model", "repeat_last", "--max-cells", "0",
                "--no-download"]

    return make


def _nothing_written(folder: Path) -> None:
    """No file changed or added anywhere in the case folder: no row, sample, plot or report."""
    before = json.loads((folder / "before.json").read_text())
    after = _snapshot(folder)
    after.pop("shared.db", None)  # the grid's own cells are queued in the storage: that is no path
    before.pop("shared.db", None)
    assert after == before, sorted(set(after) ^ set(before))
    assert not (folder.parent / "out_of_tree").exists()  # nor above it


CASES = [
    Case("merge_row_whose_model_climbs_out_of_the_results_folder_is_refused_and_nothing_merged",
         _merge_of({"model": CLIMBER}), 2,
         f"leaderboard.csv, line 3, column 'model': '{CLIMBER}' may only use letters, digits, '_', '-' and '.' "
         "(it names files and folders); nothing was merged", after=_nothing_written),
    Case("merge_row_whose_dataset_climbs_out_of_the_results_folder_is_refused_and_nothing_merged",
         _merge_of({"dataset": "../../../out_of_tree/planted"}), 2,
         "line 3, column 'dataset': '../../../out_of_tree/planted' may only use letters", after=_nothing_written),
    Case("storage_trial_whose_row_climbs_out_of_the_results_folder_is_refused",
         _storage_holding({"dataset": "../../../../out_of_tree/planted"}), 2,
         "study 'leaderboard:configs/leaderboard/smoke.yaml', trial 0, row, column 'dataset': "
         "'../../../../out_of_tree/planted' may only use letters", after=_nothing_written),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matrix(case, tmp_path, monkeypatch):
    # No dataset anywhere: no case trains, and a merge's report needs none.
    monkeypatch.setenv("DAMCHA_TS_CACHE", str(tmp_path / "empty_cache"))
    monkeypatch.setenv("DAMCHA_TS_DATA", str(tmp_path / "no_data"))
    check_case(case, tmp_path / "case")


def test_a_sample_linked_out_of_its_folder_is_neither_read_nor_written(tmp_path):
    """A label that passes the rule still cannot lead a read or a write out of the folder: a source's
    sample planted as a link to a file elsewhere is refused by the one path helper, and a merge of it
    merges nothing."""
    from damcha_ts.errors import DataError
    from damcha_ts.leaderboard.merge import merge_results
    from damcha_ts.leaderboard.results import read_results

    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("not a sample")
    theirs = tmp_path / "gpu" / "leaderboard.csv"
    append_result(theirs, _row())
    link = theirs.parent / "samples" / "ETTh1__itransformer_damcha__H96.npz"
    link.parent.mkdir()
    link.symlink_to(secret)
    with pytest.raises(DataError, match=r"ETTh1__itransformer_damcha__H96.npz is outside .*samples"):
        sample_path(theirs, "ETTh1", "itransformer_damcha", 96)
    ours = tmp_path / "here" / "leaderboard.csv"
    with pytest.raises(DataError, match="nothing was merged"):
        merge_results(theirs, ours)
    assert read_results(ours) == [] and not (ours.parent / "samples").exists()
