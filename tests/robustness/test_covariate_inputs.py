"""Covariates on the command line (issue 20): ``damcha-ts fit --past-covariates / --future-covariates``
and ``damcha-ts predict --future CSV``. The happy path end to end, then the matrix rows: a covariate
that is not a column, a static covariate, a missing or wrong ``--future`` file → exit 2, the column,
row or flag named, nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from matrix import Case, check_case, copy_run, fit_argv, fit_case, hourly_frame, run_cli, write_csv

HORIZON = 4  # fit_argv's


@pytest.fixture(scope="module")
def covariate_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("covariate_run")
    data = write_csv(hourly_frame(), folder / "series.csv")
    outcome = run_cli(fit_argv(data, folder / "run", "--past-covariates", "v1", "--future-covariates", "v2"))
    assert outcome.code == 0, outcome.stderr
    return folder / "run"


def _future_csv(folder: Path, rows: int = HORIZON, columns=("v2",), start: str = "2024-01-17 16:00") -> Path:
    frame = pd.DataFrame({"date": pd.date_range(start, periods=rows, freq="h"), **{c: 0.5 for c in columns}})
    return write_csv(frame, folder / "future.csv")


def test_fit_saves_the_covariates_and_predict_reads_their_future(covariate_run, tmp_path):
    saved = json.loads((covariate_run / "model" / "forecaster.json").read_text())
    assert (saved["data"]["past_covariates"], saved["data"]["future_covariates"]) == (["v1"], ["v2"])
    assert (saved["model"]["past_covariates"], saved["model"]["future_covariates"]) == (1, 1)
    config = yaml.safe_load((covariate_run / "config.yaml").read_text())
    assert (config["data"]["past_covariates"], config["data"]["future_covariates"]) == (["v1"], ["v2"])
    out = tmp_path / "forecast.csv"
    outcome = run_cli(["predict", "--model", covariate_run, "--future", _future_csv(tmp_path), "--output", out])
    assert outcome.code == 0, outcome.stderr
    forecast = pd.read_csv(out)
    assert list(forecast.columns) == ["date", "v0"] and len(forecast) == HORIZON  # covariates are not forecast


def _predict_covariate_run(*extra, future=None, output=None):
    def make(folder: Path, fixtures: dict) -> list[str]:
        run = copy_run(fixtures["covariate_run"], folder)
        given = [] if future is None else ["--future", future(folder)]
        given += [] if output is None else ["--output", output(folder)]
        return ["predict", "--model", run, *given, *extra]

    return make


def _link_to_future(folder: Path) -> Path:
    (folder / "forecast.csv").symlink_to(folder / "future.csv")
    return folder / "forecast.csv"


def _future_kept(folder: Path) -> None:
    kept = pd.read_csv(folder / "future.csv")
    assert list(kept.columns) == ["date", "v2"] and len(kept) == HORIZON, "the --future file was written over"


def _no_run(folder: Path) -> None:
    assert not (folder / "run" / "model").exists(), "a refused fit must not leave a model"


CASES = [
    Case("covariate not a column", fit_case("--future-covariates", "v3"), 2,
         "series: future_covariates ['v3'] are not columns (columns: ['v0', 'v1', 'v2'])", _no_run),
    Case("covariate named twice", fit_case("--past-covariates", "v1", "--future-covariates", "v1"), 2,
         "columns ['v1'] are named as both past and future covariates", _no_run),
    Case("static covariate", fit_case("--static-covariates", "v1"), 2, "static_covariates is about many entities: name their column with --set data.entity_col=...", _no_run),
    Case("every column a covariate", fit_case("--past-covariates", "v0,v1,v2"), 2,
         "every column is a covariate; at least one must be a variate to forecast", _no_run),
    Case("no future file", _predict_covariate_run(), 2,
         "this model reads the future covariates ['v2']: give their values at the 4 forecast timestamps"),
    Case("future file too short", _predict_covariate_run(future=lambda f: _future_csv(f, rows=3)), 2,
         "--future has 3 rows; the forecast has 4 steps"),
    Case("future file with another column", _predict_covariate_run(future=lambda f: _future_csv(f, columns=("v1",))), 2,
         "missing ['v2'], unexpected ['v1']"),
    Case("future file a step late", _predict_covariate_run(future=lambda f: _future_csv(f, start="2024-01-17 17:00")), 2,
         "--future row 0 is at 2024-01-17 17:00:00; forecast step 1 is at 2024-01-17 16:00:00"),
    Case("future file missing", _predict_covariate_run(future=lambda f: f / "nope.csv"), 2, "no such file"),
    # --output must never replace an input: the forecast written over the covariates it read (issue 32).
    Case("output is the future file", _predict_covariate_run(future=_future_csv, output=lambda f: f / "future.csv"), 2,
         "is the same file as --future", _future_kept),
    Case("output is the future file through a symlink", _predict_covariate_run(future=_future_csv, output=_link_to_future),
         2, "is the same file as --future", _future_kept),
    Case("output is the future file as ./", _predict_covariate_run(future=_future_csv, output=lambda f: f"{f}/./future.csv"),
         2, "is the same file as --future", _future_kept),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_covariate_inputs(case, tmp_path, covariate_run):
    check_case(case, tmp_path, {"covariate_run": covariate_run})
