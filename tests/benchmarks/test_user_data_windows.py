"""The window-by-window diagnosis (benchmarks/user_data_windows.py), on synthetic arrays: its
per-window scores average to the benchmark's MASE, and its seasonal naive repeats the last season."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from benchmark_scripts import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def windows():
    return load_benchmark("user_data_windows")


def test_the_mean_of_the_window_scores_is_the_benchmarks_mase(windows):
    rng = np.random.default_rng(3)
    train = rng.normal(size=(3, 80)).cumsum(axis=1)
    truth, forecast = rng.normal(size=(3, 5, 6)), rng.normal(size=(3, 5, 6))
    scores = windows.window_scores(train, truth, forecast, season=7)
    assert scores.shape == (5,)
    assert scores.mean() == pytest.approx(windows.bench.mase_per_series(train, truth, forecast, 7).mean(), rel=1e-12)


def test_seasonal_naive_repeats_the_season_before_each_cutoff(windows):
    values = np.arange(40, dtype=float)
    frame = pd.DataFrame({"y": values}, index=pd.date_range("2001-01-01", periods=40, freq="D"))
    dataset = {"columns": ["y"], "season_length": 4, "horizon": 6}
    forecast = windows.seasonal_naive(frame, dataset, cutoffs=[20, 30])  # [N, W, H]
    np.testing.assert_array_equal(forecast[0, 0], [16, 17, 18, 19, 16, 17])
    np.testing.assert_array_equal(forecast[0, 1], [26, 27, 28, 29, 26, 27])


def test_every_model_and_dataset_the_yaml_names_exists(windows):
    probe = yaml.safe_load((BENCHMARKS / "user_data_windows.yaml").read_text())
    known = {d["name"] for d in windows.bench.load_config()["datasets"]}
    names = {m["name"] for m in probe["models"]}
    for entry in probe["datasets"]:
        assert entry["name"] in known and set(entry.get("models", names)) <= names
    assert {m["kind"] for m in probe["models"]} <= set(windows.bench.MODEL_KINDS)
