"""One path serves one series and many (issue 33): a single series is a panel of one entity, so a
fit of a frame and a fit of the same frame with an entity column holding one value give the same
forecast, bit for bit."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from damcha_ts import Forecaster

L, H = 24, 12
TINY = {"d_model": 16, "d_ff": 32, "e_layers": 1, "n_heads": 2, "dropout": 0.0}


def one_store(rows: int = 400) -> pd.DataFrame:
    t = np.arange(rows)
    rng = np.random.default_rng(0)
    return pd.DataFrame({
        "date": pd.date_range("2021-01-01", periods=rows, freq="h"),
        "sales": 10 * (1 + 0.1 * np.sin(2 * np.pi * t / 24)) + rng.normal(size=rows),
        "visits": 1 + 0.1 * np.cos(2 * np.pi * t / 24) + 0.1 * rng.normal(size=rows),
    })


def fit_predict(frame: pd.DataFrame, **fit_options) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forecaster = Forecaster("itransformer_mha", horizon=H, lookback=L, max_epochs=1, seed=0, **TINY)
        forecast = forecaster.fit(frame, **fit_options).predict()
    return forecast[["sales", "visits"]].to_numpy()


def test_a_single_series_and_a_one_entity_panel_forecast_bit_for_bit_the_same():
    frame = one_store()
    single = fit_predict(frame)
    panel = fit_predict(frame.assign(store="a"), entity_col="store")
    assert single.shape == panel.shape == (H, 2)
    np.testing.assert_array_equal(single, panel)
