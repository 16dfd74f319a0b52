"""Every fit of user data says whether its trained model beats the naive rules on the validation
windows (forecasting/baseline_check.py): the MASEs in ``fit_result_`` and a BaselineWarning when a
rule wins. References: the naive rule's MASE computed by hand; a model that cannot lose and one that must."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from damcha_ts import Forecaster
from damcha_ts.errors import BaselineWarning

QUIET = {"enable_progress_bar": False, "logger": False}


@pytest.fixture(scope="module")
def etth1(data_root) -> pd.DataFrame:
    return pd.read_csv(data_root / "ETTh1.csv.gz", parse_dates=["date"], index_col="date").iloc[:700][["HUFL", "OT"]]


def naive_mase_by_hand(frame: pd.DataFrame, horizon: int, season: int) -> float:
    """The naive rule over every window of the validation rows of a 70/10/20 split, MASE-scaled by the
    seasonal naive MAE over the train rows, mean over the variates."""
    values = frame.to_numpy(dtype=np.float64)
    n_test, n_val = int(len(values) * 0.2), len(values) - int(len(values) * 0.7) - int(len(values) * 0.2)
    train_end = len(values) - n_test - n_val
    errors = np.stack([np.abs(values[o:o + horizon] - values[o - 1]) for o in range(train_end, train_end + n_val - horizon + 1)])
    scale = np.abs(values[season:train_end] - values[:train_end - season]).mean(axis=0)
    return float((errors.mean(axis=(0, 1)) / scale).mean())


def test_a_barely_trained_model_is_compared_with_the_rules_and_the_user_is_told_it_loses(etth1):
    with pytest.warns(BaselineWarning, match=r"this model's MASE \(\d+\.\d+\) is above (seasonal_)?naive's"):
        model = Forecaster("linear", horizon=12, lookback=48, max_steps=2, learning_rate=1e-5,
                           trainer_kwargs=QUIET).fit(etth1)
    facts = model.fit_result_
    rules = facts["baselines_validation_mase"]
    assert rules["naive"] == pytest.approx(naive_mase_by_hand(etth1, 12, season=24), rel=1e-5)
    assert facts["validation_mase"] > min(rules.values())
    # The seasonal rule's number is what that rule itself scores on the same windows.
    rule = Forecaster("seasonal_naive", horizon=12, lookback=48, trainer_kwargs=QUIET).fit(etth1)
    assert rules["seasonal_naive"] == pytest.approx(rule.evaluate(split="val")["mase"], rel=1e-6)


def test_a_model_that_beats_the_rules_fits_without_a_warning():
    """A daily cycle with a slow trend: a trained linear map beats repeating yesterday (the trend moves
    on) and repeating the last hour."""
    rng = np.random.default_rng(0)
    t = np.arange(900)
    frame = pd.DataFrame({"load": np.sin(2 * np.pi * t / 24) + t / 60 + 0.05 * rng.standard_normal(900)},
                         index=pd.date_range("2024-01-01", periods=900, freq="h"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", BaselineWarning)
        model = Forecaster("linear", horizon=12, lookback=48, max_steps=400, trainer_kwargs=QUIET).fit(frame)
    facts = model.fit_result_
    assert facts["validation_mase"] < min(facts["baselines_validation_mase"].values())


def test_fixed_rules_are_not_compared(etth1):
    rule = Forecaster("naive", horizon=12, lookback=48, trainer_kwargs=QUIET).fit(etth1)
    assert "baselines_validation_mase" not in rule.fit_result_


def test_a_model_with_covariates_is_compared_too(etth1):
    """The rules read no covariate, but score on the same windows, which carry them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BaselineWarning)
        model = Forecaster("linear", horizon=12, lookback=48, max_steps=2, future_covariates=["HUFL"],
                           trainer_kwargs=QUIET).fit(etth1)
    rules = model.fit_result_["baselines_validation_mase"]
    assert rules["naive"] == pytest.approx(naive_mase_by_hand(etth1[["OT"]], 12, season=24), rel=1e-5)


def test_a_run_that_is_tested_is_compared_and_a_tuning_trial_is_not(etth1, tmp_path):
    """damcha-ts fit --data FILE (a run that is tested) warns as Forecaster.fit does; a tuning trial
    (``evaluate_test=False``, many per study) trains without the comparison."""
    from damcha_ts.forecasting.experiment import run_experiment
    from damcha_ts.training import load_run_config

    data = tmp_path / "etth1.csv"
    etth1.reset_index().to_csv(data, index=False)
    config = load_run_config("itransformer_mha/etth1", horizon=12, overrides=[
        f"data.dataset={data}", "data.seq_len=48", "model.d_model=16", "model.d_ff=16", "model.n_heads=2",
        "model.e_layers=1", "training.max_epochs=1", "training.learning_rate=1e-6"])
    for tested, expected in ((True, 1), (False, 0)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_experiment(config, tmp_path / f"run_{tested}", evaluate_test=tested, progress=False, trainer_kwargs=QUIET)
        assert sum(issubclass(w.category, BaselineWarning) for w in caught) == expected
