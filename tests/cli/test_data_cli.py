"""``damcha-ts data info`` and ``damcha-ts baseline``: stable flags, JSON on stdout only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from damcha_ts.baselines import evaluate_naive
from damcha_ts.cli.main import main
from damcha_ts.data import prepare


@pytest.fixture(autouse=True)
def _needs_data(monkeypatch, tmp_path):
    if not os.environ.get("DAMCHA_TS_DATA"):
        pytest.fail("set DAMCHA_TS_DATA to the directory of the shared benchmark CSVs (../shared/data)")
    monkeypatch.setenv("DAMCHA_TS_CACHE", str(tmp_path))  # never download into the checkout


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The console entry point in a fresh interpreter, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "damcha_ts.cli.main", *args], capture_output=True, text=True, timeout=300)


def test_data_info_json(capsys):
    assert main(["data", "info", "ETTh1", "--pred-len", "336", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["rows"], info["rows_used"], info["variates"], info["freq"]) == (17420, 14400, 7, "h")
    assert info["borders"] == {"train": [0, 8640], "val": [8544, 11520], "test": [11424, 14400]}
    assert info["windows"] == {"train": 8209, "val": 2545, "test": 2545}  # protocol.md §1.3, H=336
    assert info["checksum"]["status"] == "verified"
    assert info["checksum"]["actual"] == info["checksum"]["expected"] == "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066"


def test_data_info_text(capsys):
    assert main(["data", "info", "etth2", "--seq-len", "48", "--pred-len", "24"]) == 0
    text = capsys.readouterr().out
    assert "ETTh2" in text and "train [0, 8640)  val [8592, 11520)  test [11472, 14400)" in text
    assert "test 2857" in text and "checksum    verified" in text


def test_baseline_json_matches_the_library(capsys):
    assert main(["baseline", "ETTh1", "--method", "window-mean", "--pred-len", "96", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    expected = evaluate_naive(prepare("ETTh1", pred_len=96), "window_mean")
    assert result["windows"] == 2785 and result["method"] == "window-mean" and result["split"] == "test"
    assert (result["mse"], result["mae"], result["mse_raw"]) == (expected["mse"], expected["mae"], expected["mse_raw"])


def test_json_stdout_holds_only_the_object_warnings_go_to_stderr():
    run = _cli("data", "info", "Weather", "--json")
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout)  # the whole of stdout parses as one object
    assert info["windows"] == {"train": 36696, "val": 5175, "test": 10444} and info["variates"] == 21
    assert "duplicate timestamp 2020-05-12 06:00:00" in run.stderr
    run = _cli("baseline", "ETTm2", "--method", "repeat-last", "--pred-len", "720", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["windows"] == 10801


def test_errors_exit_2_with_a_message_and_empty_stdout():
    run = _cli("data", "info", "ETTh3", "--json")
    assert run.returncode == 2 and run.stdout == ""
    assert "unknown dataset 'ETTh3'" in run.stderr and "Did you mean" in run.stderr
    with pytest.raises(SystemExit):  # --pred-len is required for baseline; argparse exits
        main(["baseline", "ETTh1", "--method", "repeat-last"])
    with pytest.raises(SystemExit):
        main(["baseline", "ETTh1", "--method", "seasonal", "--pred-len", "96"])


def test_csv_reading_flags_reach_the_loader(tmp_path, capsys):
    import pandas as pd

    frame = pd.read_csv(os.path.join(os.environ["DAMCHA_TS_DATA"], "ETTh1.csv.gz")).iloc[:2000]
    frame = frame.rename(columns={"date": "when"})
    frame["when"] = pd.to_datetime(frame["when"]).dt.strftime("%d/%m/%Y %H:%M")
    path = tmp_path / "series.csv"
    frame.to_csv(path, index=False)
    capsys.readouterr()
    assert main(["data", "info", str(path), "--json"]) == 2
    assert "--time-col" in capsys.readouterr().err  # the hint names the flag that fixes it
    flags = ["--time-col", "when", "--date-format", "%d/%m/%Y %H:%M"]
    assert main(["data", "info", str(path), "--pred-len", "24", "--json", *flags]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["rows"] == 2000 and info["freq"] == "h"
    assert main(["baseline", str(path), "--method", "repeat-last", "--pred-len", "24", "--json", *flags]) == 0
    assert json.loads(capsys.readouterr().out)["windows"] == 400 - 24 + 1  # the last 20 % of the rows
