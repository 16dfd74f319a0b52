"""The results CSV: typed round trip, atomic appends, refusal of foreign files."""

from __future__ import annotations

import csv
import math
import os

import pytest

from damcha_ts.errors import DataError
from damcha_ts import files as files_module
from damcha_ts.leaderboard.results import LEGACY_COLUMNS, RESULT_COLUMNS, append_result, cell_key, read_results


def make_row(model="itransformer_mha", horizon=96, seed=1, mse=0.4, **extra):
    row = {
        "dataset": "ETTh1", "model": model, "horizon": horizon, "seed": seed, "mse": mse, "mae": 0.41,
        "config_hash": "abc123", "epochs_run": 4, "best_epoch": 1, "n_params": 1234,
        "seconds_per_epoch": 1.5, "wall_seconds": 7.25, "versions": "python=3.11 torch=2",
        "hardware": "cpu=x, threads=2", "grid": "configs/leaderboard/ett.yaml",
        "timestamp": "2026-01-01T00:00:00+00:00", "mase": 1.25, "smape": 0.31,
    }
    row.update(extra)
    return row


def test_first_columns_are_the_issue_columns():
    assert RESULT_COLUMNS[:6] == ("dataset", "model", "horizon", "seed", "mse", "mae")


def test_append_and_read_round_trip(tmp_path):
    path = tmp_path / "out" / "leaderboard.csv"
    first = make_row(mse=0.1 + 0.2)  # a float whose repr has 17 digits
    second = make_row(model="repeat_last", seed=0, best_epoch=None, seconds_per_epoch=math.nan)
    append_result(path, first)
    append_result(path, second)
    rows = read_results(path)
    assert len(rows) == 2
    assert rows[0] == first  # every digit survives
    assert rows[1]["best_epoch"] is None and math.isnan(rows[1]["seconds_per_epoch"])
    with path.open(newline="") as handle:
        assert next(csv.reader(handle)) == list(RESULT_COLUMNS)
    assert {cell_key(row) for row in rows} == {cell_key(first), cell_key(second)}
    assert not list(tmp_path.glob("out/.leaderboard.csv.*.tmp"))


def test_a_csv_from_before_the_scale_free_columns_is_read_and_extended_with_them(tmp_path):
    """Rows written before MASE and sMAPE were scored (the header without them) read with NaN there;
    adding a row rewrites the file under today's header, every old value kept digit for digit."""
    path = tmp_path / "leaderboard.csv"
    old = make_row(mse=0.1 + 0.2)
    with path.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows([LEGACY_COLUMNS, [repr(old[c]) if isinstance(old[c], float)
                                                                             else old[c] for c in LEGACY_COLUMNS]])
    legacy_line = path.read_text().splitlines()[1]
    (read,) = read_results(path)
    assert math.isnan(read["mase"]) and math.isnan(read["smape"])
    assert {c: read[c] for c in LEGACY_COLUMNS} == {c: old[c] for c in LEGACY_COLUMNS}
    new = make_row(seed=2, mase=0.8, smape=0.25)
    assert append_result(path, new)
    lines = path.read_text().splitlines()
    assert lines == [",".join(RESULT_COLUMNS), legacy_line + ",,", lines[2]]
    assert read_results(path)[1] == new


def test_a_cell_that_already_has_a_row_is_not_appended_again(tmp_path):
    # Two runners that both finished one cell: the first row stays, the CSV keeps one per cell.
    path = tmp_path / "leaderboard.csv"
    assert append_result(path, make_row(mse=0.5))
    assert not append_result(path, make_row(mse=0.6))
    assert [row["mse"] for row in read_results(path)] == [0.5]
    assert append_result(path, make_row(mse=0.6, config_hash="another"))  # a changed config is a new cell


def test_a_write_that_dies_before_the_rename_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "leaderboard.csv"
    append_result(path, make_row(seed=1))
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("simulated crash between writing the temp file and the rename")

    monkeypatch.setattr(files_module.os, "replace", crash)  # inside write_atomically
    with pytest.raises(OSError, match="simulated crash"):
        append_result(path, make_row(seed=2))
    assert path.read_bytes() == before
    assert not list(tmp_path.glob(".leaderboard.csv.*.tmp"))


def test_left_over_temp_files_are_removed_by_the_next_append(tmp_path):
    path = tmp_path / "leaderboard.csv"
    stale = tmp_path / ".leaderboard.csv.killed.tmp"
    stale.write_text("half a file")
    append_result(path, make_row())
    assert not stale.exists()
    assert len(read_results(path)) == 1


def test_foreign_csv_is_refused_with_its_name(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match="other.csv"):
        read_results(path)
    with pytest.raises(DataError, match="other.csv"):
        append_result(path, make_row())
    assert path.read_text() == "a,b\n1,2\n"


def test_truncated_line_is_reported_with_its_line_number(tmp_path):
    path = tmp_path / "leaderboard.csv"
    append_result(path, make_row())
    with path.open("a") as handle:
        handle.write("ETTh1,itransformer_mha,96\n")
    with pytest.raises(DataError, match="line 3"):
        read_results(path)


def test_row_without_a_column_is_refused(tmp_path):
    row = make_row()
    del row["hardware"]
    with pytest.raises(DataError, match="hardware"):
        append_result(tmp_path / "leaderboard.csv", row)
    assert not os.path.exists(tmp_path / "leaderboard.csv")
