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


def test_prepare_always_returns_a_panel_and_a_single_series_is_a_panel_of_one():
    from damcha_ts.data import Panel, prepare, prepare_series

    frame = one_store().set_index("date")
    single = prepare(frame, seq_len=L, pred_len=H)
    many = prepare(frame.reset_index().assign(store="a"), seq_len=L, pred_len=H, entity_col="store")
    assert isinstance(single, Panel) and isinstance(many, Panel)
    assert single.entity_col is None and many.entity_col == "store" and many.entities == ["a"]
    alone = prepare_series(frame, seq_len=L, pred_len=H)
    (one,) = single.series
    assert one.borders == single.borders == alone.borders and single.name == alone.name
    np.testing.assert_array_equal(one.scaled, alone.scaled)
    for split in ("train", "val", "test"):  # the same windows, in the same order, as the series alone
        assert single.window_count(split) == alone.window_count(split) == many.window_count(split)
        ours, theirs = single.windows(split), alone.windows(split)
        for i in (0, len(theirs) // 2, len(theirs) - 1):
            for key, value in theirs[i].items():
                np.testing.assert_array_equal(ours[i][key].numpy(), value.numpy())
                np.testing.assert_array_equal(many.windows(split)[i][key].numpy(), value.numpy())
