"""The Predictor alone (scaler, time marks, model) against forecasts computed by hand, and the one
forecast that predict, backtest and plot share.

Models here are untrained (seeded random weights) with hand-written data metadata: what is tested
is the arithmetic around the network, which training does not change.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from damcha_ts.errors import DataError
from damcha_ts.forecasting import Predictor

from handmade import COLUMNS, HORIZON, LOOKBACK, MEAN, SCALE, hand_meta, tiny_model


def hourly_marks(stamps: pd.DatetimeIndex) -> np.ndarray:
    """GluonTS's hourly time features by their definitions: hour of day, day of week, day of month,
    day of year, each scaled to [-0.5, 0.5]."""
    return np.stack([stamps.hour / 23.0 - 0.5, stamps.dayofweek / 6.0 - 0.5, (stamps.day - 1) / 30.0 - 0.5,
                     (stamps.dayofyear - 1) / 365.0 - 0.5], axis=1)


@pytest.fixture(scope="module")
def windows():
    """Two raw histories [2, L, 3] near the scaler's range, and their hourly timestamps."""
    rng = np.random.default_rng(3)
    histories = MEAN + SCALE * rng.normal(size=(2, LOOKBACK, len(COLUMNS)))
    stamps = [pd.date_range("2021-03-27 05:00", periods=LOOKBACK, freq="h"),
              pd.date_range("2021-12-30 17:00", periods=LOOKBACK, freq="h")]
    return histories, stamps


def by_hand(model, history: np.ndarray, stamps: pd.DatetimeIndex) -> np.ndarray:
    """One window: scale with the meta's mean/scale, run the network, unscale (all columns)."""
    x = torch.tensor((history - MEAN) / SCALE, dtype=torch.float32)[None]
    marks = torch.tensor(hourly_marks(stamps), dtype=torch.float32)[None]
    with torch.no_grad():
        out = model(x, marks).double().numpy()[0]
    return out * SCALE + MEAN


def test_forecast_is_scale_model_unscale(windows):
    histories, stamps = windows
    model = tiny_model()
    predictor = Predictor(model, hand_meta())
    point, levels = predictor.forecast(histories, stamps)
    assert point.shape == (2, HORIZON, 3) and levels is None
    for k in range(2):
        np.testing.assert_allclose(point[k], by_hand(model, histories[k], stamps[k]), rtol=1e-6, atol=1e-9)
    assert predictor.output_columns == COLUMNS and (predictor.horizon, predictor.lookback) == (HORIZON, LOOKBACK)

    one = predictor.forecast_after(histories[1], stamps[1])
    np.testing.assert_array_equal(one.point, predictor.forecast(histories[1:], stamps[1:])[0][0])
    assert list(one.timestamps) == list(pd.date_range(stamps[1][-1], periods=HORIZON + 1, freq="h")[1:])
    assert one.timestamps[0] == pd.Timestamp("2021-12-31 17:00") and one.columns == COLUMNS


def test_ms_forecasts_the_target_alone_with_its_own_scale(windows):
    """MS: all columns in, the last (the target) out, unscaled with the target's mean and scale."""
    histories, stamps = windows
    model = tiny_model()
    point, _ = Predictor(model, hand_meta("MS")).forecast(histories, stamps)
    assert point.shape == (2, HORIZON, 1) and Predictor(model, hand_meta("MS")).output_columns == ["OT"]
    np.testing.assert_allclose(point[0], by_hand(model, histories[0], stamps[0])[:, -1:], rtol=1e-6, atol=1e-9)


def test_a_quantile_model_gives_its_levels_and_their_median(windows):
    histories, stamps = windows
    model = tiny_model(quantiles=[0.1, 0.9])
    predictor = Predictor(model, hand_meta())
    assert predictor.quantiles == (0.1, 0.5, 0.9)
    point, levels = predictor.forecast(histories, stamps)
    assert levels.shape == (2, 3, HORIZON, 3)
    expected = by_hand(model, histories[0], stamps[0])  # [Q, H, N]: the wrapper's sorted levels
    np.testing.assert_allclose(levels[0], expected, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(point, levels[:, 1])
    assert (np.diff(levels, axis=1) >= 0).all()


def test_time_marks_follow_the_recorded_convention(windows):
    """time_features_freq (the benchmark convention "h") wins over the data's own frequency."""
    histories, stamps = windows
    model = tiny_model()
    minutes = [s.floor("D") + pd.to_timedelta(np.arange(LOOKBACK) * 15, unit="min") for s in stamps]
    own = Predictor(model, hand_meta(freq="15min")).forecast(histories, minutes)[0]
    hourly = Predictor(model, hand_meta(freq="15min", time_features_freq="h")).forecast(histories, minutes)[0]
    x = torch.tensor((histories[0] - MEAN) / SCALE, dtype=torch.float32)[None]
    with torch.no_grad():
        out = model(x, torch.tensor(hourly_marks(minutes[0]), dtype=torch.float32)[None]).double().numpy()[0]
    np.testing.assert_allclose(hourly[0], out * SCALE + MEAN, rtol=1e-6, atol=1e-9)
    assert not np.allclose(own, hourly)  # minute data otherwise gets its own (5) marks


def test_bad_histories_and_non_finite_forecasts_are_errors(windows):
    histories, stamps = windows
    predictor = Predictor(tiny_model(), hand_meta())
    with pytest.raises(DataError, match=r"histories of shape \(2, 23, 3\).*\[B, 24, 3\]"):
        predictor.forecast(histories[:, 1:], stamps)
    with pytest.raises(DataError, match="one index per history"):
        predictor.forecast(histories, stamps[:1])
    broken = Predictor(tiny_model(), hand_meta(scaler_scale=[0.0, 1.0, 1.0]))
    with np.errstate(divide="ignore", invalid="ignore"), pytest.raises(DataError, match="scaled by the saved scaler"):
        broken.forecast(histories, stamps)


# ---------------------------------------------------------------- one forecast for every surface
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved model directory (untrained weights, hand meta, a wide-frame input) and its data."""
    import dataclasses

    from damcha_ts.training.artifacts import save_model_dir
    from damcha_ts.training.config import TrainingConfig

    rng = np.random.default_rng(8)
    index = pd.date_range("2022-05-01", periods=200, freq="h", name="date")
    frame = pd.DataFrame(MEAN + SCALE * rng.normal(size=(200, 3)), index=index, columns=COLUMNS)
    meta = hand_meta(input_kind="wide", input_options={"input_columns": list(COLUMNS)})
    directory = tmp_path_factory.mktemp("predictor") / "model"
    save_model_dir(directory, tiny_model(), meta, training=dataclasses.asdict(TrainingConfig()),
                   history_values=frame.to_numpy()[-LOOKBACK:], history_timestamps=frame.index[-LOOKBACK:])
    return directory, frame


def test_predict_backtests_last_window_and_plot_use_the_same_forecast(saved, tmp_path):
    from damcha_ts import Forecaster

    directory, frame = saved
    forecaster = Forecaster.load(directory)
    history, future = frame.iloc[:-HORIZON], frame.index[-HORIZON:]
    predicted = forecaster.predict(history)
    assert list(predicted.index) == list(future) and list(predicted.columns) == COLUMNS

    direct = Predictor.load(directory).forecast_after(history.to_numpy()[-LOOKBACK:], history.index[-LOOKBACK:])
    np.testing.assert_array_equal(predicted.to_numpy(), direct.point)

    backtest = forecaster.backtest(frame, n_windows=3, step=5)
    last = backtest[backtest["cutoff"] == history.index[-1]].pivot(index="date", columns="id", values="forecast")
    assert list(last.index) == list(future)
    np.testing.assert_allclose(last[COLUMNS].to_numpy(), predicted.to_numpy(), rtol=1e-6)

    figure = forecaster.plot(history, truth=frame.iloc[-HORIZON:], variates=COLUMNS, path=tmp_path / "plot.png")
    for axis, column in zip(figure.axes, COLUMNS):
        (line,) = [line for line in axis.lines if line.get_label() == "forecast"]
        np.testing.assert_array_equal(np.asarray(line.get_ydata(), dtype=np.float64), predicted[column].to_numpy())

    # Without data, all three continue the saved history.
    np.testing.assert_array_equal(forecaster.predict().to_numpy(), Predictor.load(directory).forecast_after(
        frame.to_numpy()[-LOOKBACK:], frame.index[-LOOKBACK:]).point)


def test_damcha_ts_predict_forecasts_with_the_predictor(saved, tmp_path, capsys):
    import json

    from damcha_ts.cli.main import main

    directory, frame = saved
    frame.iloc[:-HORIZON].to_csv(tmp_path / "history.csv")
    assert main(["predict", "--model", str(directory), "--input", str(tmp_path / "history.csv"),
                 "--output", str(tmp_path / "forecast.csv"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == "itransformer_damcha" and summary["horizon"] == HORIZON
    written = pd.read_csv(tmp_path / "forecast.csv", parse_dates=["date"], index_col="date")
    expected = Predictor.load(directory).forecast_after(frame.to_numpy()[-HORIZON - LOOKBACK:-HORIZON],
                                                        frame.index[-HORIZON - LOOKBACK:-HORIZON])
    assert list(written.index) == list(expected.timestamps.tz_localize(None))
    # The CSV holds the history to printing precision: float32 arithmetic may round differently.
    np.testing.assert_allclose(written[COLUMNS].to_numpy(), expected.point, rtol=1e-6)


def test_the_marks_of_many_windows_are_each_windows_own_even_across_time_zones():
    """The marks are computed once over every window's stamps (fast): the same numbers as one call
    per window, for tz-aware stamps across a DST change too, and a window of the wrong length is refused."""
    from damcha_ts.data import time_features
    from damcha_ts.forecasting.predictor import _window_marks

    index = pd.date_range("2024-03-30", periods=80, freq="h", tz="Europe/Berlin")  # DST on 31 March
    windows = [index[start : start + 24] for start in (0, 13, 40, 56)]
    for freq in ("h", "D"):
        expected = np.stack([time_features(window, freq)[0] for window in windows])
        np.testing.assert_array_equal(_window_marks(windows, freq, 24), expected)
    with pytest.raises(DataError, match="needs 24 timestamps per history"):
        _window_marks([index[:24], index[:23]], "h", 24)
