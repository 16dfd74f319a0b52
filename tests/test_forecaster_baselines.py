"""Baselines through the Forecaster and the command line: fitted, scored, saved and given intervals
like any model, against independent references (the naive methods, the data's own last season)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from damcha_ts import Forecaster
from damcha_ts.baselines import evaluate_naive
from damcha_ts.data import prepare
from damcha_ts.errors import ConfigError
from tests.robustness.matrix import hourly_frame, run_cli, write_csv

QUIET = {"enable_progress_bar": False, "logger": False}


def test_naive_on_etth1_scores_as_the_naive_method_and_is_selected_on_its_validation_mse():
    forecaster = Forecaster("naive", horizon=24, lookback=96, trainer_kwargs=QUIET).fit("ETTh1")
    panel = prepare("ETTh1", seq_len=96, pred_len=24)
    assert forecaster.evaluate()["mse"] == pytest.approx(evaluate_naive(panel, "repeat_last")["mse"], rel=1e-6)
    facts = forecaster.fit_result_
    assert facts["epochs_run"] == 0 and facts["n_params"] == 0
    assert facts["best_val_loss"] == pytest.approx(evaluate_naive(panel, "repeat_last", split="val")["mse"], rel=1e-5)


def test_seasonal_naive_takes_its_season_from_the_frequency_and_repeats_the_last_day(tmp_path):
    frame = hourly_frame(rows=500, variates=2)
    forecaster = Forecaster("seasonal_naive", horizon=30, lookback=48, trainer_kwargs=QUIET).fit(frame, test_size=0)
    assert forecaster.model_config["season_length"] == 24
    forecast = forecaster.predict(level=[80])
    values = frame[["v0", "v1"]].to_numpy()
    expected = np.stack([values[len(values) - 24 + h % 24] for h in range(30)])  # the last day, repeated
    np.testing.assert_allclose(forecast[["v0", "v1"]].to_numpy(), expected, rtol=1e-6)
    assert (forecast["v0-lo-80"] < forecast["v0"]).all() and (forecast["v0"] < forecast["v0-hi-80"]).all()
    loaded = Forecaster.load(forecaster.save(tmp_path / "model"))
    pd.testing.assert_frame_equal(loaded.predict(level=[80]), forecast)


def test_a_given_season_wins_and_one_longer_than_the_lookback_is_refused():
    frame = hourly_frame(rows=300, variates=1)
    with pytest.raises(ConfigError, match="season_length=24 is longer than the lookback seq_len=12"):
        Forecaster("seasonal_naive", horizon=6, lookback=12, trainer_kwargs=QUIET).fit(frame)
    weekly_rule = Forecaster("seasonal_naive", horizon=6, lookback=12, season_length=6, trainer_kwargs=QUIET).fit(frame)
    assert weekly_rule.model_config["season_length"] == 6


def test_quantiles_of_a_fixed_rule_are_refused_before_any_data_is_read():
    with pytest.raises(ConfigError, match="quantiles: naive is a fixed rule"):
        Forecaster("naive", horizon=6, lookback=12, quantiles=[0.1, 0.9])


def test_the_command_line_fits_a_baseline_and_writes_the_season_it_chose(tmp_path):
    data = write_csv(hourly_frame(rows=400, variates=2), tmp_path / "series.csv")
    out = tmp_path / "run"
    done = run_cli(["fit", "--data", data, "--model", "seasonal_naive", "--horizon", "6", "--lookback", "48",
                    "--no-plot", "--out", out])
    assert done.code == 0, done.stderr
    assert "a fixed rule, nothing to train: val loss" in done.stdout
    assert yaml.safe_load((out / "config.yaml").read_text())["model"]["season_length"] == 24
    predicted = run_cli(["predict", "--model", out, "--level", "80"])
    assert predicted.code == 0, predicted.stderr


def test_python_and_the_command_line_train_the_same_default_model(tmp_path):
    """One recommended default (schema.DEFAULT_MODEL): Forecaster() and fit --data without --model."""
    from damcha_ts.schema import DEFAULT_MODEL

    assert Forecaster().get_params()["model"] == DEFAULT_MODEL
    data = write_csv(hourly_frame(rows=300, variates=2), tmp_path / "series.csv")
    done = run_cli(["fit", "--data", data, "--horizon", "4", "--lookback", "16", "--set", "training.max_epochs=1",
                    "--set", "model.d_model=16", "--set", "model.patch_len=4", "--set", "model.stride=4", "--no-plot",
                    "--out", tmp_path / "run"])
    assert done.code == 0, done.stderr
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["model"]
    assert DEFAULT_MODEL == "gateformer_damcha_gated"  # chosen on the user-data benchmark (schema.py says why)
    assert saved["name"] == "gateformer_damcha" and saved["metric_gate"] is True and saved["metric_delta_norm"] is True
