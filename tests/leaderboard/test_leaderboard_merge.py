"""Merging another machine's results: new cells arrive with curves and samples, known cells stay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from damcha_ts.errors import DataError
from damcha_ts.leaderboard.curves import load_curves, record_curves
from damcha_ts.leaderboard.merge import merge_results
from damcha_ts.leaderboard.results import append_result, cell_key, read_results, sample_path
from tests.leaderboard.test_leaderboard_results import make_row

PROJECT = Path(__file__).resolve().parents[2]
CURVE = {"epochs": [1, 2], "train_loss": [0.5, 0.4], "val_loss": [0.6, 0.55]}


def _machine(folder, rows):
    """A results folder as a runner leaves it: CSV rows, their curves, a sample for each."""
    results = folder / "leaderboard.csv"
    for row in rows:
        append_result(results, row)
        sample = sample_path(results, row["dataset"], row["model"], row["horizon"])
        sample.parent.mkdir(parents=True, exist_ok=True)
        np.savez(sample, prediction=np.full(3, row["mse"]))
    record_curves(results, [(row, dict(CURVE, val_loss=[row["mse"], row["mse"]])) for row in rows])
    return results


def test_new_cells_are_appended_with_their_curves_and_samples(tmp_path):
    ours = _machine(tmp_path / "here", [make_row(horizon=96, mse=0.40)])
    gpu_rows = [make_row(horizon=96, mse=0.39, hardware="gpu=H200"), make_row(horizon=192, mse=0.45, hardware="gpu=H200")]
    theirs = _machine(tmp_path / "gpu", gpu_rows)

    added = merge_results(theirs, ours)

    assert [row["horizon"] for row in added] == [192]
    rows = {row["horizon"]: row for row in read_results(ours)}
    assert rows[96]["mse"] == 0.40  # the cell we already had is not replaced
    assert rows[192] == read_results(theirs)[1]  # every column, every digit
    curves = {cell_key(item): item for item in load_curves(ours)}
    assert curves[cell_key(gpu_rows[1])]["val_loss"] == [0.45, 0.45]
    sample = np.load(sample_path(ours, "ETTh1", "itransformer_mha", 192))
    assert sample["prediction"].tolist() == [0.45] * 3
    assert np.load(sample_path(ours, "ETTh1", "itransformer_mha", 96))["prediction"].tolist() == [0.40] * 3


def test_a_new_seed_does_not_replace_the_sample_we_plot(tmp_path):
    ours = _machine(tmp_path / "here", [make_row(horizon=96, seed=1, mse=0.40)])
    theirs = _machine(tmp_path / "gpu", [make_row(horizon=96, seed=2, mse=0.38)])
    assert [row["seed"] for row in merge_results(theirs, ours)] == [2]
    assert np.load(sample_path(ours, "ETTh1", "itransformer_mha", 96))["prediction"].tolist() == [0.40] * 3


def test_merging_twice_changes_nothing(tmp_path):
    ours = _machine(tmp_path / "here", [])
    theirs = _machine(tmp_path / "gpu", [make_row(horizon=336)])
    assert len(merge_results(theirs, ours)) == 1
    before = ours.read_bytes()
    assert merge_results(theirs, ours) == []
    assert ours.read_bytes() == before


def test_a_missing_source_is_named(tmp_path):
    with pytest.raises(DataError, match="nowhere.csv"):
        merge_results(tmp_path / "nowhere.csv", tmp_path / "leaderboard.csv")


def test_cli_merge_adds_rows_and_rewrites_the_report_without_training(tmp_path):
    ours = _machine(tmp_path / "here", [])
    theirs = _machine(tmp_path / "gpu", [make_row(dataset="ETTh1", horizon=720, mse=0.47)])
    sample_path(theirs, "ETTh1", "itransformer_mha", 720).unlink()  # the plots need a real one
    result = subprocess.run(
        [sys.executable, "-m", "damcha_ts.cli.main", "leaderboard", "--config",
         str(PROJECT / "configs/leaderboard/ett.yaml"), "--results", str(ours), "--merge", str(theirs),
         "--runs-dir", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "merged ETTh1 itransformer_mha H=720" in result.stderr
    assert [row["horizon"] for row in read_results(ours)] == [720]
    assert "0.470" in (ours.parent / "LEADERBOARD.md").read_text()
