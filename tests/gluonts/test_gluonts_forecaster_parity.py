"""Given the same weights, the GluonTS predictor forecasts what ``Forecaster.predict`` forecasts."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from gluonts.dataset.pandas import PandasDataset
from gluonts.dataset.split import split

from damcha_ts import Forecaster
from damcha_ts.gluonts import predictor_from_forecaster

HORIZON, LOOKBACK = 24, 96
TINY = {"d_model": 32, "n_heads": 4, "e_layers": 1, "d_ff": 32, "dropout": 0.0, "generator_hidden": [16]}
# A couple of real training steps: the weights only need to be non-trivial and shared.
QUICK = {"limit_train_batches": 3, "limit_val_batches": 2, "enable_progress_bar": False, "accelerator": "cpu"}


def user_frame() -> pd.DataFrame:
    """Own data at 15-minute steps: its time marks come from its own frequency (5 GluonTS features)."""
    rng = np.random.default_rng(4)
    steps = np.arange(1500)
    values = np.sin(2 * np.pi * steps[:, None] / 96 + np.array([0.0, 1.5, 3.0])) * [1.0, 20.0, 300.0]
    return pd.DataFrame(
        values + rng.normal(size=values.shape) * [0.1, 2.0, 30.0],
        index=pd.date_range("2023-03-01", periods=len(steps), freq="15min"),
        columns=["small", "medium", "large"],
    )


@pytest.fixture(scope="module", params=["benchmark", "user"])
def fitted(request, etth1_frame, tmp_path_factory):
    """(fitted Forecaster, frame it forecasts from, GluonTS freq)."""
    forecaster = Forecaster(
        "itransformer_damcha",
        horizon=HORIZON,
        lookback=LOOKBACK,
        max_epochs=1,
        batch_size=16,
        trainer_kwargs={**QUICK, "default_root_dir": str(tmp_path_factory.mktemp("forecaster"))},
        **TINY,
    )
    if request.param == "benchmark":
        forecaster.fit("ETTh1", path=os.environ["DAMCHA_TS_DATA"])
        return forecaster, etth1_frame, "h"
    frame = user_frame()
    forecaster.fit(frame)
    return forecaster, frame, "15min"


def test_predictor_forecast_equals_forecaster_predict(fitted):
    forecaster, frame, freq = fitted
    history = frame.iloc[:1200]
    expected = forecaster.predict(history)  # wide frame [H, N] indexed by the next timestamps
    predictor = predictor_from_forecaster(forecaster)
    (forecast,) = predictor.predict(PandasDataset(history, target=list(history.columns), freq=freq))
    assert forecast.samples.shape == (1, HORIZON, history.shape[1])
    assert forecast.start_date.to_timestamp() == expected.index[0]
    # Same float32 computation; only the order of the standardisation's rounding differs.
    scale = np.abs(expected.to_numpy()).max()
    np.testing.assert_allclose(forecast.samples[0], expected.to_numpy(), rtol=1e-5, atol=1e-5 * scale)


def test_rolling_gluonts_windows_equal_forecaster_backtest(fitted):
    forecaster, frame, freq = fitted
    data = frame.iloc[:1300]
    windows = 4
    backtest = forecaster.backtest(data, n_windows=windows)  # long: id, date, cutoff, value, forecast
    predictor = predictor_from_forecaster(forecaster)
    _, template = split(PandasDataset(data, target=list(data.columns), freq=freq), offset=-windows * HORIZON)
    test = template.generate_instances(prediction_length=HORIZON, windows=windows, distance=HORIZON)
    forecasts = list(predictor.predict(test.input))
    for forecast in forecasts:
        start = forecast.start_date.to_timestamp()
        window = backtest[backtest["cutoff"] == start - pd.tseries.frequencies.to_offset(freq)]
        expected = window.pivot(index="date", columns="id", values="forecast")[list(data.columns)]
        assert expected.index[0] == start
        scale = np.abs(expected.to_numpy()).max()
        np.testing.assert_allclose(forecast.samples[0], expected.to_numpy(), rtol=1e-5, atol=1e-5 * scale)


def test_a_saved_and_loaded_forecaster_converts_to_the_same_predictor(fitted, tmp_path):
    forecaster, frame, freq = fitted
    history = frame.iloc[:1200]
    dataset = PandasDataset(history, target=list(history.columns), freq=freq)
    forecaster.save(tmp_path / "model")
    loaded = Forecaster.load(tmp_path / "model")
    (original,) = predictor_from_forecaster(forecaster).predict(dataset)
    (reloaded,) = predictor_from_forecaster(loaded).predict(dataset)
    np.testing.assert_array_equal(reloaded.samples, original.samples)
    # The shared Predictor (what forecaster.predict runs through) converts to the same predictor.
    from damcha_ts.forecasting import Predictor

    assert isinstance(forecaster.predictor, Predictor)
    (from_directory,) = predictor_from_forecaster(Predictor.load(tmp_path / "model")).predict(dataset)
    np.testing.assert_array_equal(from_directory.samples, original.samples)


@pytest.mark.parametrize(("freq", "at_start"), [("h", True), ("15min", True), ("D", True), ("2h", True),
                                                ("W-SUN", False), ("W-MON", False), ("ME", False), ("QE", False)])
def test_data_stamped_at_the_end_of_its_periods_is_told_apart(freq, at_start):
    """GluonTS computes marks at each period's start; for data stamped at a period's end (weekly,
    month-end) predictor_from_forecaster warns that its forecasts cannot equal the forecaster's."""
    from damcha_ts.gluonts.convert import _stamped_at_period_start

    stamps = pd.date_range("2021-01-01", periods=4, freq=freq)
    periods = stamps.to_period(pd.Period(stamps[0], freq=freq.replace("ME", "M").replace("QE", "Q")).freqstr)
    assert (periods.start_time == stamps).all() == at_start  # the independent check
    assert _stamped_at_period_start(freq) == at_start
