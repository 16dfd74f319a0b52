"""The user-data candidates script (benchmarks/user_data_candidates.py): the training windows it sizes
the batch from are the ones the Forecaster's fit sees, and its seasonal-naive reference is the rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def udc():
    return load_benchmark("user_data_candidates")


def frame(rows: int, series: int = 2) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    values = np.cumsum(rng.normal(size=(rows, series)), axis=0) + np.sin(np.arange(rows) * 2 * np.pi / 7)[:, None]
    return pd.DataFrame(values, index=pd.date_range("2001-01-01", periods=rows, freq="D"),
                        columns=[f"s{i}" for i in range(series)])


@pytest.mark.parametrize("rows, horizon, lookback, expected", [
    (200, 5, 10, 166),  # validation tail 200 - 140 - 40 = 20 rows: 180 train rows - 10 - 5 + 1
    (96, 12, 24, 49),   # 96 // 10 < 12: val_size=12, as us_employment: 84 - 24 - 12 + 1
])
def test_train_windows_are_those_the_forecasters_fit_sees(udc, rows, horizon, lookback, expected):
    from damcha_ts import Forecaster

    dataset = {"horizon": horizon, "lookback": lookback}
    assert udc.train_windows_of(dataset, rows) == expected
    fitted = Forecaster("naive", horizon=horizon, lookback=lookback, random_state=0).fit(
        frame(rows), **udc.fit_options_for(dataset, rows))
    assert fitted.fit_result_["windows"]["train"] == expected


def test_the_recipe_batch_follows_the_windows_and_the_frequency_season_runs_only_where_it_differs(udc):
    from damcha_ts.training.config import batch_size_for_windows

    linear, freq_season = (next(c for c in udc.CANDIDATES if c["name"] == name)
                           for name in ("user_linear", "seasonal_naive_model_freq_season"))
    weekly = {"name": "w", "freq": "W-SAT", "season_length": 52, "horizon": 13, "lookback": 52}
    spec = udc.candidate_spec(linear, weekly, 2000)  # tail 200 rows: 1800 - 52 - 13 + 1 windows
    assert spec["train_windows_expected"] == 1736
    assert spec["recipe"]["batch_size"] == batch_size_for_windows(1736) == 32
    assert spec["recipe"]["max_steps"] == 1000 and spec["recipe"]["lr_schedule"] == "warmup_cosine"
    assert udc.candidate_spec(freq_season, weekly, 2000)["options"] == {}  # gluonts: weekly has season 1, not 52
    half_hourly = {"name": "h", "freq": "30min", "season_length": 48, "horizon": 48, "lookback": 96}
    assert udc.candidate_spec(freq_season, half_hourly, 2000) is None  # 48 either way: nothing new to run


def test_seasonal_rule_is_the_textbook_formula_and_the_seasonal_naive_model_follows_it(udc):
    from damcha_ts import Forecaster

    history = np.arange(30, dtype=float).reshape(2, 15) ** 2
    rule = udc.seasonal_rule(history, season=4, horizon=6)
    # y[T + h] = y[T - m + (h mod m)], T = 15, m = 4: rows 11, 12, 13, 14, 11, 12.
    np.testing.assert_array_equal(rule, history[:, [11, 12, 13, 14, 11, 12]])
    data = frame(120)
    model = Forecaster("seasonal_naive", horizon=6, lookback=14, season_length=7, random_state=0).fit(data, test_size=0)
    forecast = model.predict(data)[["s0", "s1"]].to_numpy().T
    np.testing.assert_allclose(forecast, udc.seasonal_rule(data.to_numpy().T, 7, 6), rtol=1e-5)
