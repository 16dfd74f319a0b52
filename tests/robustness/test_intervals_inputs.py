"""Prediction intervals and their calibration (issue 32, cases 3 to 5).

* The bands of one forecast are nested for any set of levels: with ``quantiles=[0.1, 0.9]`` and
  ``level=[80, 95]`` the 80 % band (CQR) and the 95 % one (residuals around the median) crossed in
  about half of the backtest rows.
* A model is never calibrated on windows it trained on: ``calibrate(split="train")``, and
  ``calibrate()`` after ``fit(refit=True)`` (validation windows the refit trained on), are refused;
  a refit model keeps the calibration of its first pass instead, so it has ``level=`` intervals.
* Two levels whose names collide (80 and 80.000001: ``coverage_80 = 1.736``) are refused by the one
  level check, on every surface.

Matrix rows: ``damcha-ts predict / evaluate --level``; the Python API's cases as plain functions
(the command line has neither ``calibrate`` nor ``refit``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from damcha_ts import Forecaster
from damcha_ts.errors import ConfigError
from matrix import Case, check_case, copy_run, fit_argv, hourly_frame, run_cli, write_csv

QUICK = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False, "deterministic": True}


def tiny(**kwargs) -> Forecaster:
    """The Python twin of ``fit_argv``'s model: a tiny iTransformer-MHA, horizon 4, lookback 16, 2 epochs."""
    return Forecaster("itransformer_mha", horizon=4, lookback=16, max_epochs=2, batch_size=16, trainer_kwargs=QUICK,
                      d_model=16, d_ff=16, n_heads=2, e_layers=1, **kwargs)


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return hourly_frame().set_index("date")


@pytest.fixture(scope="module")
def quantile_run(tmp_path_factory) -> Path:
    """A ``damcha-ts fit`` run of a model with the quantile pair of 80 % alone."""
    folder = tmp_path_factory.mktemp("quantile_run")
    data = write_csv(hourly_frame(), folder / "series.csv")
    outcome = run_cli(fit_argv(data, folder / "run", "--set", "training.quantiles=[0.1,0.9]"))
    assert outcome.code == 0, outcome.stderr
    return folder / "run"


def assert_nested(frame: pd.DataFrame, columns: list[str], narrow: str = "80", wide: str = "95") -> None:
    """Every row's ``wide`` band holds its ``narrow`` band, which holds the forecast."""
    for column in columns:
        lo_n, hi_n = frame[f"{column}-lo-{narrow}"], frame[f"{column}-hi-{narrow}"]
        lo_w, hi_w = frame[f"{column}-lo-{wide}"], frame[f"{column}-hi-{wide}"]
        crossed = int(((lo_w > lo_n) | (hi_n > hi_w)).sum())
        assert crossed == 0, f"{column}: the {wide} % band leaves out the {narrow} % one in {crossed} of {len(frame)} rows"
        assert ((lo_n <= frame[column]) & (frame[column] <= hi_n)).all(), f"{column}: the forecast leaves its band"


def _command(fixture: str, command: str, *extra: str):
    """A Case's ``make``: ``command`` on a copy of the run ``fixture``; ``{folder}`` in ``extra``: the case's."""
    def make(folder: Path, fixtures: dict) -> list[str]:
        return [command, "--model", copy_run(fixtures[fixture], folder), *(e.format(folder=folder) for e in extra)]

    return make


def _nested_forecast(folder: Path) -> None:
    assert_nested(pd.read_csv(folder / "forecast.csv"), ["v0", "v1", "v2"])


CASES = [
    Case("80 and 95 % bands of a model with the 80 % quantile pair alone",
         _command("quantile_run", "predict", "--level", "80", "95", "--output", "{folder}/forecast.csv"),
         0, "wrote 4 rows", _nested_forecast),
    Case("two levels of one name", _command("trained_run", "predict", "--level", "80", "80.000001"), 2,
         "--level holds 80 and 80.000001, which both name the interval 80 (columns -lo-80 / -hi-80, score "
         "coverage_80); give levels that differ in their first 6 significant digits"),
    Case("two levels of one name to evaluate", _command("trained_run", "evaluate", "--level", "95", "94.9999999"), 2,
         "--level holds 95 and 94.9999999, which both name the interval 95"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_interval_levels(case, tmp_path, trained_run, quantile_run):
    check_case(case, tmp_path, {"trained_run": trained_run, "quantile_run": quantile_run})


def test_bands_of_a_model_with_one_quantile_pair_are_nested_in_a_backtest(frame):
    """The probe's case: quantiles=[0.1, 0.9], level=[80, 95], 480 backtest rows (244 crossed before)."""
    model = tiny(quantiles=[0.1, 0.9]).fit(frame)
    backtest = model.backtest(n_windows=40, step=1, level=[95, 80])
    assert len(backtest) == 480
    assert_nested(backtest, ["forecast"])
    assert_nested(model.predict(level=[80, 95]), ["v0", "v1", "v2"])


def test_calibrate_refuses_windows_the_model_trained_on(frame, model):
    plain, kept = model, model.calibration_
    with pytest.raises(ConfigError, match=r"^calibrate\(split='train'\): every model trains on the windows of its "
                                          r"train split, .* calibrate on windows it did not train on: split='val' "
                                          r"\(the default\) or split='test'"):
        plain.calibrate(split="train")
    assert plain.calibration_ is kept  # a refused calibration leaves the model's as it was

    production = tiny().fit(frame, test_size=0, refit=True)
    with pytest.raises(ConfigError, match=r"^calibrate\(split='val'\): fit\(refit=True\) trained this model on "
                                          r"the validation windows too, .*: split='test', of this data or of held-out "
                                          r"data; fit already kept the calibration of its first pass"):
        production.calibrate()
    with pytest.raises(ConfigError, match=r"calibrate\(split='val'\): fit\(refit=True\)"):
        production.calibrate(frame)  # the same rows given again: still the windows it trained on
    # Production models have level= intervals: those of the first pass, which never trained on the validation windows.
    assert production.calibration_ is not None and production.calibration_.split == "val"
    forecast = production.predict(level=[80, 95])
    assert_nested(forecast, ["v0", "v1", "v2"])
    # Held-out rows (after every row it trained on) are fine to calibrate on.
    later = hourly_frame(rows=600).set_index("date")
    production.calibrate(later.iloc[300:], split="test")
    assert production.calibration_.split == "test"


@pytest.fixture(scope="module")
def model(frame) -> Forecaster:
    return tiny().fit(frame)


@pytest.mark.parametrize("levels", [[80, 80.000001], [95, 94.9999999, 50]])
def test_levels_that_share_a_name_are_refused_on_every_surface(model, levels):
    surfaces = {"evaluate": lambda: model.evaluate(level=levels), "predict": lambda: model.predict(level=levels),
                "backtest": lambda: model.backtest(n_windows=2, level=levels),
                "cross_validation": lambda: model.cross_validation(n_windows=2, level=levels),
                "plot": lambda: model.plot(level=levels)}
    for surface, call in surfaces.items():
        with pytest.raises(ConfigError, match=r"^level holds .*, which both name the interval (80|95) \(columns"):
            call()
    assert np.isfinite(model.evaluate(level=[80, 95])["coverage_80"])  # levels with names of their own still score
