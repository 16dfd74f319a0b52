"""Training on all the data and honest validation (issue 20): ``fit(test_size=0)``, ``fit(refit=True)``,
``evaluate()`` without a test split, and ``cross_validation(refit=False | True | k)``.

Tiny models, two epochs of two batches: what is tested is which rows each model trains on and
which model forecasts which window, not forecast quality.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from damcha_ts.forecasting.estimator import Estimator
from damcha_ts import Forecaster
from damcha_ts.errors import ConfigError

TINY = {"d_model": 16, "e_layers": 1, "n_heads": 2, "d_ff": 32}
QUICK = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False,
         "limit_train_batches": 2, "deterministic": True}
H, L, VAL = 24, 48, 100


def tiny(**kwargs) -> Forecaster:
    return Forecaster("itransformer_mha", horizon=H, lookback=L, max_epochs=2, trainer_kwargs=QUICK, **TINY, **kwargs)


@pytest.fixture(scope="module")
def frame(data_root) -> pd.DataFrame:
    return pd.read_csv(data_root / "ETTh1.csv.gz", parse_dates=["date"], index_col="date").iloc[:600]


@pytest.fixture(scope="module")
def fitted(frame) -> Forecaster:
    """Fitted on every row but a 100-row validation tail; no test split."""
    return tiny().fit(frame, test_size=0, val_size=VAL)


def recording(runs: list):
    """``Estimator._train`` noting each training run: the last row it trained on, the last row it or its
    validation saw, and whether it validated."""
    original = Estimator._train

    def counting(estimator, panel, **kwargs):
        (series,) = panel.series  # a model of one series
        train_end, val_end = series.borders["train"][1], series.borders["val"][1]
        runs.append({"train_end": series.timestamps[train_end - 1], "last_seen": series.timestamps[max(train_end, val_end) - 1],
                     "validate": kwargs.get("validate", True), "max_epochs": (kwargs.get("budget") or {}).get("max_epochs")})
        return original(estimator, panel, **kwargs)

    return counting


@pytest.fixture
def trainings(monkeypatch):
    runs = []
    monkeypatch.setattr(Estimator, "_train", recording(runs))
    return runs


@pytest.fixture(scope="module")
def every_window(fitted):
    """(the backtest before, cross_validation(refit=True) over 3 windows, its training runs)."""
    before, runs = fitted.backtest(n_windows=3), []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Estimator, "_train", recording(runs))
        cv = fitted.cross_validation(n_windows=3, refit=True)
    return before, cv, runs


def test_test_size_zero_trains_on_everything_but_the_validation_tail(fitted, frame):
    series = fitted.panel_
    assert series.borders == {"train": (0, 600 - VAL), "val": (600 - VAL - L, 600), "test": (600, 600)}
    assert series.window_count("train") == 600 - VAL - L - H + 1 and series.window_count("test") == 0
    assert fitted.fit_result_["train_rows"] == 500 and "refit" not in fitted.fit_result_
    assert fitted.fit_result_["last_fit_timestamp"] == str(frame.index[-1])
    # The future starts after the last row, which validation (early stopping) has seen.
    assert fitted.predict().index[0] == frame.index[-1] + pd.Timedelta(hours=1)


def test_evaluate_without_a_test_split_says_how_to_score(fitted, frame):
    with pytest.raises(ConfigError, match=r"without a test split \(test_size=0\).*evaluate\(data.*split='val'"):
        fitted.evaluate()
    assert fitted.evaluate(split="val")["windows"] == VAL - H + 1
    with pytest.raises(ConfigError, match="no test split"):
        fitted.evaluate(frame, test_size=0)
    assert fitted.evaluate(frame, test_size=100)["windows"] == 100 - H + 1  # held-out rows: scored


def test_refit_retrains_on_every_row_for_the_best_epoch_count(fitted, frame, trainings):
    refitted = tiny().fit(frame, test_size=0, val_size=VAL, refit=True)
    result = refitted.fit_result_
    assert result["refit"] is True and result["refit_epochs"] == result["best_epoch"] + 1
    # Two runs: early stopping on the validation tail, then the refit on every row without validation.
    assert [(r["validate"], r["max_epochs"]) for r in trainings] == [(True, None), (False, result["refit_epochs"])]
    assert trainings[0]["train_end"] == frame.index[600 - VAL - 1] and trainings[1]["train_end"] == frame.index[-1]
    (series,) = refitted.panel_.series
    assert series.borders["train"] == (0, 600) and result["train_rows"] == 600
    # Its training windows include the last rows: the last one's target ends at the last row,
    # z-scored with a scaler fitted on all of them.
    assert series.window_count("train") == 600 - L - H + 1
    np.testing.assert_allclose(series.scaler.mean_, frame.to_numpy().mean(axis=0))
    last = series.windows("train")[series.window_count("train") - 1]["y"][-1].numpy()
    np.testing.assert_allclose(last * series.scaler.scale_ + series.scaler.mean_, frame.iloc[-1].to_numpy(), rtol=1e-5)
    # The same first run (same seed), then a different model.
    assert refitted.fit_result_["best_val_loss"] == fitted.fit_result_["best_val_loss"]
    weights, kept = fitted.model_.state_dict(), refitted.model_.state_dict()
    assert any(not torch.equal(weights[k], kept[k]) for k in weights)
    assert not np.allclose(refitted.predict().to_numpy(), fitted.predict().to_numpy())
    with pytest.raises(ConfigError, match="refit"):
        tiny().fit(frame, test_size=0, refit="yes")


def test_cross_validation_without_refit_is_the_backtest(fitted, frame, trainings):
    cv = fitted.cross_validation(n_windows=3, step=10)
    pd.testing.assert_frame_equal(cv, fitted.backtest(n_windows=3, step=10))
    pd.testing.assert_frame_equal(fitted.cross_validation(frame, n_windows=2), fitted.backtest(frame, n_windows=2))
    assert trainings == []


def test_refit_retrains_for_each_window_on_the_rows_up_to_its_cutoff(fitted, frame, every_window):
    backtest, cv, trainings = every_window
    cutoffs = [frame.index[600 - H - 1 - H * k] for k in (2, 1, 0)]
    assert sorted(cv["cutoff"].unique()) == cutoffs
    # One training run per window, none of which saw a row after its cutoff (no leakage): the
    # rows it trained and early-stopped on end exactly at the cutoff.
    assert len(trainings) == 3
    assert [r["last_seen"] for r in trainings] == cutoffs
    assert [r["cutoff"] for r in cv.attrs["refits"]] == [str(c) for c in cutoffs]
    assert [r["rows"] for r in cv.attrs["refits"]] == [600 - H - H * k for k in (2, 1, 0)]  # rows 0..cutoff
    assert [r["last_fit_timestamp"] for r in cv.attrs["refits"]] == [str(c) for c in cutoffs]
    # The shape of neuralforecast's cross_validation: one row per timestamp x variate x cutoff.
    assert list(cv.columns) == ["id", "date", "cutoff", "value", "forecast"]
    assert len(cv) == 3 * H * frame.shape[1]
    assert not cv.duplicated(["id", "date", "cutoff"]).any()
    for cutoff, window in cv.groupby("cutoff"):
        assert window["date"].min() == cutoff + pd.Timedelta(hours=1)
    # The true values are the backtest's; the forecasts are other models'.
    np.testing.assert_array_equal(cv["value"].to_numpy(), backtest["value"].to_numpy())
    assert not np.allclose(cv["forecast"].to_numpy(), backtest["forecast"].to_numpy())
    # The fitted model is left as it was.
    pd.testing.assert_frame_equal(fitted.backtest(n_windows=3), backtest)


def test_refit_every_two_windows_reuses_the_model_in_between(fitted, frame, every_window, trainings):
    every_window = every_window[1]
    cv = fitted.cross_validation(n_windows=3, refit=2)
    assert len(trainings) == 2  # windows 0 and 2
    cutoffs = [frame.index[600 - H - 1 - H * k] for k in (2, 1, 0)]
    assert [r["last_seen"] for r in trainings] == [cutoffs[0], cutoffs[2]]
    assert [r["windows"] for r in cv.attrs["refits"]] == [2, 1]

    def window(frame_, k):
        return frame_[frame_["cutoff"] == cutoffs[k]]["forecast"].to_numpy()

    # Windows 0 and 2 are trained on the same rows as with refit=True (same seed: same model);
    # window 1 is forecast by window 0's model, which never saw the rows after cutoff 0.
    np.testing.assert_allclose(window(cv, 0), window(every_window, 0), rtol=1e-6)
    np.testing.assert_allclose(window(cv, 2), window(every_window, 2), rtol=1e-6)
    assert not np.allclose(window(cv, 1), window(every_window, 1))


@pytest.mark.parametrize("refit", [0, -1, 1.5, "yes"])
def test_refit_must_be_a_bool_or_a_window_count(fitted, refit, trainings):
    with pytest.raises(ConfigError, match="refit must be False, True or a number of windows"):
        fitted.cross_validation(n_windows=2, refit=refit)
    assert trainings == []


def test_intervals_come_from_the_model_that_forecast_each_window(fitted, frame):
    pd.testing.assert_frame_equal(fitted.cross_validation(n_windows=2, level=[80]), fitted.backtest(n_windows=2, level=[80]))
    cv = fitted.cross_validation(n_windows=2, refit=True, level=[80])
    assert list(cv.columns) == ["id", "date", "cutoff", "value", "forecast", "forecast-lo-80", "forecast-hi-80"]
    assert (cv["forecast-lo-80"] <= cv["forecast"]).all() and (cv["forecast"] <= cv["forecast-hi-80"]).all()
    # Each window's own calibration: not the fitted model's intervals around other forecasts.
    backtest = fitted.backtest(n_windows=2, level=[80])
    widths = (cv["forecast-hi-80"] - cv["forecast-lo-80"]).to_numpy()
    assert not np.allclose(widths, (backtest["forecast-hi-80"] - backtest["forecast-lo-80"]).to_numpy())


def test_intervals_after_a_refit_fit_come_from_each_window_models_first_pass(frame, trainings, monkeypatch):
    """Issue 32: each window model is refitted on its validation tail too, as fit(refit=True) does;
    its intervals are calibrated there by its first pass, before the refit (they were refused)."""
    forecaster = tiny().fit(frame.iloc[:400], test_size=0, refit=True)
    trainings.clear()
    original = Estimator._validation_calibration

    def noting(*args):
        trainings.append("calibrated")
        return original(*args)

    monkeypatch.setattr(Estimator, "_validation_calibration", noting)
    cv = forecaster.cross_validation(n_windows=2, refit=True, level=[80])
    assert [r if r == "calibrated" else r["validate"] for r in trainings] == [True, "calibrated", False] * 2
    assert (cv["forecast-lo-80"] <= cv["forecast"]).all() and (cv["forecast"] <= cv["forecast-hi-80"]).all()


def test_run_experiment_refuses_a_config_without_a_test_split(tmp_path):
    from damcha_ts.forecasting.experiment import run_experiment

    config = {"data": {"dataset": "ETTh1", "seq_len": L, "pred_len": H, "test_size": 0},
              "model": {"name": "itransformer_mha", **TINY}, "training": {"max_epochs": 1}}
    with pytest.raises(ConfigError, match="test_size=0 leaves no test split"):
        run_experiment(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before anything was written
