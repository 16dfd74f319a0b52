"""The Forecaster API on real benchmark data: fit, forecast the future, save/load, evaluate, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from damcha_ts import Forecaster
from damcha_ts.errors import ChecksumError, ConfigError, DataError

TINY = {"d_model": 16, "d_ff": 16, "n_heads": 2, "generator_hidden": [8]}
QUICK = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False, "limit_train_batches": 3, "limit_val_batches": 2, "deterministic": True}




def read(data_root: Path, name: str) -> pd.DataFrame:
    """A benchmark CSV as a plain user frame (DatetimeIndex, one column per variate)."""
    return pd.read_csv(data_root / name, parse_dates=["date"], index_col="date")


@pytest.fixture(scope="module")
def etth1(data_root) -> pd.DataFrame:
    return read(data_root, "ETTh1.csv.gz").iloc[:1500]


def tiny(horizon: int = 24, lookback: int = 48, **kwargs) -> Forecaster:
    return Forecaster("itransformer_damcha", horizon=horizon, lookback=lookback, max_epochs=1, trainer_kwargs=QUICK, **TINY, **kwargs)


@pytest.fixture(scope="module")
def fitted(etth1) -> Forecaster:
    return tiny().fit(etth1)


def test_predict_forecasts_the_steps_after_the_history(fitted, etth1):
    forecast = fitted.predict()
    assert isinstance(forecast, pd.DataFrame) and list(forecast.columns) == list(etth1.columns)
    expected = [etth1.index[-1] + pd.Timedelta(hours=k) for k in range(1, 25)]
    assert list(forecast.index) == expected
    # Forecasting from the same rows given explicitly is the same forecast.
    pd.testing.assert_frame_equal(fitted.predict(etth1.iloc[-100:]), forecast)
    # An earlier history ends earlier.
    earlier = fitted.predict(etth1.iloc[:700])
    assert earlier.index[0] == etth1.index[700] and not np.allclose(earlier.to_numpy(), forecast.to_numpy())


def test_forecast_is_the_model_applied_to_the_scaled_history(fitted, etth1):
    """Independent path: scale by hand with the train rows' statistics, run the network, unscale."""
    from damcha_ts.data import time_features

    train = etth1.to_numpy()[: int(0.7 * len(etth1))]
    mean, std = train.mean(0), train.std(0)
    history = etth1.iloc[-48:]
    marks, _ = time_features(history.index, "h")
    x = torch.tensor((history.to_numpy() - mean) / std, dtype=torch.float32)[None]
    with torch.no_grad():
        out = fitted.model_.eval()(x, torch.from_numpy(marks)[None]).double().numpy()[0]
    np.testing.assert_allclose(fitted.predict().to_numpy(), out * std + mean, rtol=1e-5, atol=1e-6)


def test_save_load_predict_is_identical(fitted, etth1, tmp_path):
    fitted.save(tmp_path / "model")
    loaded = Forecaster.load(tmp_path / "model")
    assert loaded.device.type == "cpu"
    pd.testing.assert_frame_equal(loaded.predict(), fitted.predict())
    pd.testing.assert_frame_equal(loaded.predict(etth1.iloc[:900]), fitted.predict(etth1.iloc[:900]))
    assert loaded.evaluate(etth1) == fitted.evaluate(etth1)
    assert (loaded.horizon, loaded.lookback, loaded.model_config) == (fitted.horizon, fitted.lookback, fitted.model_config)


def test_the_same_random_state_gives_the_same_forecast(etth1):
    data = etth1.iloc[:700]
    first, again = tiny(random_state=11).fit(data).predict(), tiny(random_state=11).fit(data).predict()
    pd.testing.assert_frame_equal(first, again)
    assert not np.allclose(first.to_numpy(), tiny(random_state=12).fit(data).predict().to_numpy())


def test_a_csv_path_is_written_back_in_its_own_column_order_and_layout(etth1, tmp_path):
    """The target first in the file: the forecast keeps the file's order (the model's puts it last);
    a long file, detected from its header, gets a long forecast."""
    frame = etth1.iloc[:700][["OT", "HUFL", "LULL"]]
    frame.reset_index().to_csv(tmp_path / "wide.csv", index=False)
    assert list(tiny().fit(tmp_path / "wide.csv").predict().columns) == ["OT", "HUFL", "LULL"]
    long = frame.reset_index().melt(id_vars="date", var_name="id", value_name="value")[["id", "date", "value"]]
    long.to_csv(tmp_path / "long.csv", index=False)
    forecast = tiny().fit(tmp_path / "long.csv").predict()
    assert list(forecast.columns) == ["id", "date", "value"] and list(pd.unique(forecast["id"])) == ["OT", "HUFL", "LULL"]


def test_a_time_zone_survives_save_and_load(etth1, tmp_path):
    """The time features are computed on local time; a reload must not move the history to UTC."""
    berlin = etth1.tz_localize("UTC").tz_convert("Europe/Berlin")
    model = tiny().fit(berlin)
    model.save(tmp_path / "berlin")
    loaded = Forecaster.load(tmp_path / "berlin")
    forecast = loaded.predict()
    assert str(forecast.index.tz) == "Europe/Berlin"
    pd.testing.assert_frame_equal(forecast, model.predict())


def test_another_models_history_file_is_refused(fitted, etth1, tmp_path):
    fitted.save(tmp_path / "seven")
    tiny().fit(etth1[["HUFL", "OT"]]).save(tmp_path / "two")
    (tmp_path / "seven" / "history.npz").write_bytes((tmp_path / "two" / "history.npz").read_bytes())
    with pytest.raises(ChecksumError, match=r"history\.npz: holds values of shape \(\d+, 2\).*the model has 7 columns"):
        Forecaster.load(tmp_path / "seven")


def test_a_save_is_whole_or_reported_incomplete(fitted, tmp_path, monkeypatch):
    import damcha_ts.training.artifacts as artifacts

    directory = fitted.save(tmp_path / "model")
    assert (directory / "history.npz").is_file()
    # Saving again without history leaves no earlier history behind to be picked up by load().
    history = fitted.predictor_.history
    fitted.predictor_.history = None
    try:
        fitted.save(directory)
    finally:
        fitted.predictor_.history = history
    assert not (directory / "history.npz").exists() and Forecaster.load(directory).predictor_.history is None

    def cut_short(*args, **kwargs):
        raise OSError("simulated crash while writing the weights")

    monkeypatch.setattr(artifacts, "write_atomically", cut_short)
    with pytest.raises(OSError, match="simulated crash"):
        fitted.save(directory)
    monkeypatch.undo()
    with pytest.raises(FileNotFoundError, match="cut short"):  # not new weights under old metadata
        Forecaster.load(directory)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_map_location_puts_the_model_on_that_device(fitted, etth1, tmp_path):
    on_gpu = Forecaster.load(fitted.save(tmp_path / "model"), map_location="cuda")
    assert on_gpu.device.type == "cuda"
    pd.testing.assert_frame_equal(on_gpu.predict(etth1.iloc[:900]), fitted.predict(etth1.iloc[:900]), rtol=1e-4)
    assert on_gpu.evaluate(etth1)["mse"] == pytest.approx(fitted.evaluate(etth1)["mse"], rel=1e-4)


def test_tampered_or_mismatched_weights_are_refused(fitted, tmp_path):
    directory = fitted.save(tmp_path / "model")
    weights = directory / "weights.pt"
    original = weights.read_bytes()
    tampered = bytearray(original)
    tampered[-20] ^= 0xFF
    weights.write_bytes(bytes(tampered))
    with pytest.raises(ChecksumError, match="sha256"):
        Forecaster.load(directory)
    weights.write_bytes(original)
    Forecaster.load(directory)  # intact again

    # Weights of another architecture, with matching digests: the config check refuses them.
    from damcha_ts.training.artifacts import content_digest

    meta = json.loads((directory / "forecaster.json").read_text())
    meta["model"]["d_model"] = 32
    meta["model"]["d_ff"] = 32
    meta["content_sha256"] = content_digest(meta)
    (directory / "forecaster.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="shape mismatch"):
        Forecaster.load(directory)


@pytest.mark.parametrize(
    ("file", "rows", "step", "transform"),
    [
        ("ETTh1.csv.gz", slice(0, 1200), pd.Timedelta(hours=1), None),
        ("ETTm1.csv.gz", slice(-1200, None), pd.Timedelta(minutes=15), None),
        ("weather.csv.gz", slice(-1200, None), pd.Timedelta(minutes=10), None),
        ("ETTh1.csv.gz", slice(None), pd.Timedelta(days=1), "daily"),
    ],
    ids=["hourly", "15min", "10min", "daily"],
)
def test_future_timestamps_for_each_frequency(data_root, file, rows, step, transform):
    frame = read(data_root, file).iloc[rows]
    if transform == "daily":
        frame = frame.resample("D").mean()  # 725 real daily means
    forecaster = tiny(horizon=12, lookback=24).fit(frame)
    forecast = forecaster.predict()
    assert list(forecast.index) == [frame.index[-1] + k * step for k in range(1, 13)]
    history = frame.iloc[: len(frame) // 2]
    assert list(forecaster.predict(history).index) == [history.index[-1] + k * step for k in range(1, 13)]


def test_wide_long_and_numpy_inputs_give_the_same_forecasts(etth1):
    frame = etth1.iloc[:800]
    long = frame.rename_axis("ds").reset_index().melt(id_vars="ds", var_name="series", value_name="y")
    wide_forecast = tiny().fit(frame).predict()
    long_forecast = tiny().fit(long, id_col="series", time_col="ds", value_col="y").predict()
    array_forecast = tiny(freq="h").fit(frame.to_numpy(), start=frame.index[0]).predict()

    assert isinstance(array_forecast, np.ndarray) and array_forecast.shape == (24, 7)
    np.testing.assert_array_equal(array_forecast, wide_forecast.to_numpy())
    assert list(long_forecast.columns) == ["ds", "series", "y"]
    assert list(pd.unique(long_forecast["series"])) == list(frame.columns)
    pivoted = long_forecast.pivot(index="ds", columns="series", values="y")[list(frame.columns)]
    assert list(pivoted.index) == list(wide_forecast.index)
    # Bit-equal: prepare() gives row-major arrays whatever the input layout, so the same windows
    # (same strides) reach the model and the matmuls round identically.
    np.testing.assert_array_equal(pivoted.to_numpy(), wide_forecast.to_numpy())


def test_target_column_keeps_its_place_in_the_output(etth1):
    # prepare() moves the target ("OT") last for the model; the user's column order comes back.
    frame = etth1.iloc[:800][["OT", "HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL"]]
    forecast = tiny().fit(frame).predict()
    assert list(forecast.columns) == list(frame.columns)


def test_evaluate_scores_every_window_of_the_split(fitted, etth1):
    from damcha_ts.data import prepare

    scores = fitted.evaluate()
    series = prepare(etth1, seq_len=48, pred_len=24, time_features_freq=None)
    assert scores["windows"] == series.window_count("test") and scores["split"] == "test"
    val = fitted.evaluate(split="val")
    assert val["windows"] == series.window_count("val") and val["mse"] != scores["mse"]
    custom = fitted.evaluate(etth1, borders=(0.5, 0.25, 0.25))
    assert custom["windows"] == len(etth1) - int(0.75 * len(etth1)) - 24 + 1


def test_backtest_equals_forecasts_from_truncated_histories(fitted, etth1):
    backtest = fitted.backtest(etth1, n_windows=3, step=10)
    assert list(backtest.columns) == ["id", "date", "cutoff", "value", "forecast"]
    cutoffs = sorted(backtest["cutoff"].unique())
    assert cutoffs == [etth1.index[len(etth1) - 24 - 1 - 10 * k] for k in (2, 1, 0)]
    for cutoff in cutoffs:
        window = backtest[backtest["cutoff"] == cutoff].pivot(index="date", columns="id", values="forecast")
        expected = fitted.predict(etth1.loc[:cutoff])
        np.testing.assert_allclose(window[list(etth1.columns)].to_numpy(), expected.to_numpy(), rtol=1e-6)
        truth = backtest[backtest["cutoff"] == cutoff].pivot(index="date", columns="id", values="value")
        np.testing.assert_array_equal(truth[list(etth1.columns)].to_numpy(), etth1.loc[expected.index].to_numpy())


def test_from_config_fits_the_benchmark_with_its_protocol(tmp_path, data_root):
    overrides = [f"model.{k}={v}" for k, v in TINY.items()]
    forecaster = Forecaster.from_config("itransformer_damcha/etth1", horizon=24, overrides=overrides, trainer_kwargs=QUICK)
    forecaster.fit()
    scores = forecaster.evaluate()
    assert scores["windows"] == 2857 and scores["dataset"] == "ETTh1"
    # Training and scores use the protocol's first 20 months; the future starts after the file's
    # last row, as when the whole file is passed.
    whole = read(data_root, "ETTh1.csv.gz")
    forecast = forecaster.predict()
    assert forecast.index[0] == whole.index[-1] + pd.Timedelta(hours=1) == pd.Timestamp("2018-06-26 20:00")
    pd.testing.assert_frame_equal(forecast, forecaster.predict(whole))
    loaded = Forecaster.load(forecaster.save(tmp_path / "m"))
    assert loaded.evaluate() == scores


def test_plot_writes_history_forecast_and_truth(fitted, etth1, tmp_path):
    history, truth = etth1.iloc[:-24], etth1.iloc[-24:]
    figure = fitted.plot(history, truth=truth, variates=["HUFL", "OT"], path=tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 10_000
    assert len(figure.axes) == 2 and {line.get_label() for line in figure.axes[0].lines} >= {"history", "truth", "forecast"}


def test_bad_input_errors(fitted, etth1):
    with pytest.raises(ConfigError, match="horizon"):
        Forecaster(horizon=0)
    with pytest.raises(ConfigError, match="horizon"):
        Forecaster(horizon=-5)
    for seed in ("abc", None, 1.7, -1):
        with pytest.raises(ConfigError, match=f"random_state must be a non-negative integer.*got {seed!r}"):
            Forecaster(random_state=seed)
    with pytest.raises(ConfigError, match="unknown model 'itransformer_flash'"):
        Forecaster("itransformer_flash")
    with pytest.raises(ConfigError, match="d_modle"):
        Forecaster("itransformer_mha", d_modle=64)
    with pytest.raises(ConfigError, match=r"predict\(\) called before fit"):
        Forecaster().predict()
    with pytest.raises(DataError, match="seq_len \\+ pred_len"):
        tiny(lookback=500).fit(etth1.iloc[:600])
    holed = etth1.iloc[:800].copy()
    holed.iloc[123, 2] = np.nan
    with pytest.raises(DataError, match="'MUFL'.*row 123"):
        tiny().fit(holed)
    with pytest.raises(DataError, match="missing \\['OT'\\]"):
        fitted.predict(etth1.drop(columns="OT"))
    with pytest.raises(DataError, match="unexpected \\['extra'\\]"):
        fitted.predict(etth1.assign(extra=1.0))
    with pytest.raises(DataError, match="6 columns"):
        fitted.predict(etth1.to_numpy()[:, :6])
    with pytest.raises(DataError, match="lookback=48"):
        fitted.predict(etth1.iloc[:30])


def test_history_at_another_frequency_or_options_without_data_are_refused(fitted, etth1):
    daily = etth1.iloc[:60].set_axis(pd.date_range("2017-01-01", periods=60, freq="D", name="date"))
    with pytest.raises(DataError, match=r"the history's timestamps step by 'D'; the model was fitted on data at 'h'"):
        fitted.predict(daily)
    with pytest.raises(ConfigError, match=r"\['horizon'\] only apply to new data.*fixed at fit time \(24 steps\)"):
        fitted.predict(horizon=12)
    with pytest.raises(ConfigError, match=r"predict/backtest\(\): unknown data option\(s\) \['horizon'\]"):
        fitted.predict(etth1, horizon=12)
    with pytest.raises(ConfigError, match=r"fit/evaluate\(\): unknown data option\(s\) \['lookback'\].*'target'"):
        tiny().fit(etth1, lookback=12)


def test_a_model_fitted_on_a_time_column_reads_a_frame_indexed_by_time(fitted, etth1):
    """Fit input with a ``date`` column; later input with a DatetimeIndex (and the other way round)."""
    with_column = tiny().fit(etth1.reset_index())
    history = etth1.iloc[-100:]
    pd.testing.assert_frame_equal(with_column.predict(history), with_column.predict(history.reset_index()))
    assert with_column.evaluate(etth1)["windows"] == with_column.evaluate(etth1.reset_index())["windows"]


def test_a_refit_does_not_inherit_the_previous_fits_data_options(etth1):
    model = tiny()
    model.fit(etth1.iloc[:700], fill="ffill", split={"train": (0, 400), "val": (352, 550), "test": (502, 700)})
    holed = etth1.iloc[:900].copy()
    holed.iloc[600, 1] = np.nan
    with pytest.raises(DataError, match="'HULL'.*row 600"):  # the first fit's fill= is not reused
        model.fit(holed)
    model.fit(etth1.iloc[:900])
    assert model.data_config.get("split") is None and model.predict().index[0] == etth1.index[900]


# ---------------------------------------------------------------- quantile forecasts
@pytest.fixture(scope="module")
def quantile_fitted(etth1) -> Forecaster:
    return tiny(horizon=12, lookback=24, quantiles=[0.9, 0.1]).fit(etth1.iloc[:800][["HUFL", "OT"]])


def test_quantile_forecaster_predicts_monotone_named_quantiles(quantile_fitted, etth1):
    frame = etth1.iloc[:800][["HUFL", "OT"]]
    forecast = quantile_fitted.predict()
    names = ["HUFL", "OT"] + [f"{c}_q{q}" for c in ("HUFL", "OT") for q in (0.1, 0.5, 0.9)]
    assert list(forecast.columns) == names and quantile_fitted.quantiles == (0.1, 0.5, 0.9)
    assert list(forecast.index) == [frame.index[-1] + pd.Timedelta(hours=k) for k in range(1, 13)]
    for column in ("HUFL", "OT"):
        low, mid, high = (forecast[f"{column}_q{q}"].to_numpy() for q in (0.1, 0.5, 0.9))
        assert np.all(low <= mid) and np.all(mid <= high) and np.any(low < high)
        np.testing.assert_array_equal(forecast[column].to_numpy(), mid)  # point forecast = median

    # NumPy history: {"point": [H, N], "quantiles": [Q, H, N]}; long history: one column per level.
    array = quantile_fitted.predict(frame.to_numpy()[-24:], start=frame.index[-24])  # same time marks
    assert array["point"].shape == (12, 2) and array["quantiles"].shape == (3, 12, 2)
    np.testing.assert_allclose(array["quantiles"][0], forecast[["HUFL_q0.1", "OT_q0.1"]].to_numpy(), rtol=1e-6)
    long = frame.iloc[-24:].rename_axis("ds").reset_index().melt(id_vars="ds", var_name="series", value_name="y")
    long_forecast = quantile_fitted.predict(long, id_col="series", time_col="ds", value_col="y")
    assert list(long_forecast.columns) == ["ds", "series", "y", "y_q0.1", "y_q0.5", "y_q0.9"]
    ot = long_forecast[long_forecast["series"] == "OT"]
    np.testing.assert_allclose(ot["y_q0.9"].to_numpy(), forecast["OT_q0.9"].to_numpy(), rtol=1e-6)

    backtest = quantile_fitted.backtest(frame, n_windows=2)
    assert list(backtest.columns)[-4:] == ["forecast", "forecast_q0.1", "forecast_q0.5", "forecast_q0.9"]
    assert (backtest["forecast_q0.1"] <= backtest["forecast_q0.9"]).all()
    # evaluate() scores the median: the same number from backtest forecasts over the test windows.
    scores = quantile_fitted.evaluate()
    n = scores["windows"]
    test_rows = frame.iloc[-(n + 24 + 12 - 1):]  # lookback + windows + horizon - 1 rows end the frame
    rolled = quantile_fitted.backtest(test_rows, n_windows=n, step=1)
    scale = dict(zip(quantile_fitted.meta_.columns, quantile_fitted.meta_.scaler_scale))
    z_error = (rolled["forecast_q0.5"] - rolled["value"]) / rolled["id"].map(scale)
    assert scores["mse"] == pytest.approx(float((z_error**2).mean()), rel=1e-5)
    assert (rolled["forecast"] == rolled["forecast_q0.5"]).all()


def test_quantile_forecaster_save_load_is_identical(quantile_fitted, etth1, tmp_path):
    loaded = Forecaster.load(quantile_fitted.save(tmp_path / "model"))
    assert (loaded.quantiles, loaded.horizon) == (quantile_fitted.quantiles, 12)
    pd.testing.assert_frame_equal(loaded.predict(), quantile_fitted.predict())
    history = etth1.iloc[:500][["HUFL", "OT"]]
    pd.testing.assert_frame_equal(loaded.predict(history), quantile_fitted.predict(history))


def test_bad_quantiles_are_refused():
    from damcha_ts.training import TrainingConfig

    with pytest.raises(ConfigError, match="quantiles holds 1.5"):
        Forecaster(quantiles=[0.1, 1.5])
    with pytest.raises(ConfigError, match="quantiles"):
        Forecaster(quantiles=[])
    with pytest.raises(ConfigError, match="training.quantiles"):
        TrainingConfig(quantiles=[0.0])


def test_a_series_shorter_than_one_batch_still_trains(etth1):
    short = etth1.iloc[:260]  # 70 % of it gives fewer training windows than one batch of 128
    fitted = tiny(batch_size=128).fit(short)
    assert fitted.fit_result_["epochs_run"] == 1 and fitted.fit_result_["best_epoch"] == 0


def test_default_root_dir_gets_a_run_folder_and_keeps_the_users_files(etth1, tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "mine.txt").write_text("keep me")
    quick = {k: v for k, v in QUICK.items() if k != "logger"}
    fitted = Forecaster("itransformer_mha", horizon=24, lookback=48, max_epochs=1,
                        trainer_kwargs={**quick, "default_root_dir": str(tmp_path)}, **TINY).fit(etth1)
    assert (tmp_path / "logs" / "mine.txt").read_text() == "keep me"
    assert fitted.run_dir_.parent == tmp_path and (fitted.run_dir_ / "checkpoints" / "best.ckpt").is_file()
    assert (fitted.run_dir_ / "logs" / "metrics.csv").is_file()


def test_a_csv_fitted_with_read_options_is_read_the_same_way_later(etth1, tmp_path, monkeypatch):
    """time_col and date_format given to fit() hold for predict/evaluate on the file, also after a
    save/load, and the saved path is absolute, so another working folder finds the file."""
    frame = etth1.iloc[:800].rename_axis("when").reset_index()
    frame["when"] = frame["when"].dt.strftime("%d/%m/%Y %H:%M")
    (tmp_path / "data").mkdir()
    frame.to_csv(tmp_path / "data" / "series.csv", index=False)
    monkeypatch.chdir(tmp_path / "data")
    fitted = tiny().fit("series.csv", time_col="when", date_format="%d/%m/%Y %H:%M")
    expected = fitted.predict()
    pd.testing.assert_frame_equal(fitted.predict("series.csv"), expected)
    scores = fitted.evaluate()
    assert fitted.evaluate("series.csv") == scores
    fitted.save(tmp_path / "model")

    monkeypatch.chdir(tmp_path)
    loaded = Forecaster.load(tmp_path / "model")
    assert loaded.evaluate() == scores
    pd.testing.assert_frame_equal(loaded.predict(tmp_path / "data" / "series.csv"), expected)


def test_evaluating_another_benchmark_does_not_reuse_the_fitted_ones_file(data_root):
    fitted = tiny().fit("ETTh1", path=str(data_root / "ETTh1.csv.gz"))
    scores = fitted.evaluate("ETTh2")  # not ETTh1's file checked against ETTh2's checksum
    assert scores["dataset"] == "ETTh2" and scores["windows"] == 2880 - 24 + 1  # its 4 test months, H=24


def test_a_reloaded_model_of_in_memory_data_asks_for_data_to_evaluate(fitted, etth1, tmp_path):
    fitted.save(tmp_path / "model")
    loaded = Forecaster.load(tmp_path / "model")
    with pytest.raises(ConfigError, match=r"fitted on in-memory data.*evaluate\(frame\)") as raised:
        loaded.evaluate()
    assert "--" not in str(raised.value) and "--dataset FILE" in raised.value.cli_message()  # Python, not flags
    assert loaded.evaluate(etth1)["mse"] == pytest.approx(fitted.evaluate(etth1)["mse"])
