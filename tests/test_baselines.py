"""Naive baselines under the protocol, against a straightforward loop over the real ETTh1 file."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from damcha_ts.baselines import evaluate_naive, naive_forecast
from damcha_ts.data import prepare
from damcha_ts.errors import ConfigError


@pytest.fixture(scope="module")
def etth1_raw() -> np.ndarray:
    """ETTh1 values read with plain pandas (not through damcha_ts), [17420, 7]."""
    root = os.environ.get("DAMCHA_TS_DATA")
    if not root:
        pytest.fail("set DAMCHA_TS_DATA to the directory of the shared benchmark CSVs (../shared/data)")
    return pd.read_csv(Path(root) / "ETTh1.csv.gz").drop(columns=["date"]).to_numpy(dtype=np.float64)


@pytest.fixture(scope="module")
def etth1_h96():
    return prepare("ETTh1", seq_len=96, pred_len=96)


def _loop_reference(raw: np.ndarray, method: str, columns=slice(None)) -> tuple[float, float, int]:
    """Test-split errors window by window, written out from protocol.md §1.2-1.6 with L = H = 96."""
    L, H = 96, 96
    train = raw[:8640]
    scaled = (raw - train.mean(axis=0)) / train.std(axis=0)  # train-only, population std
    border1, border2 = 11520 - L, 14400
    squared = absolute = 0.0
    count = windows = 0
    for start in range(border1, border2 - L - H + 1):
        history = scaled[start : start + L, columns]
        future = scaled[start + L : start + L + H, columns]  # [H, C]
        guess = history[-1] if method == "repeat_last" else history.mean(axis=0)  # [C], held for all H steps
        errors = future - guess
        squared += float((errors**2).sum())
        absolute += float(np.abs(errors).sum())
        count += errors.size
        windows += 1
    return squared / count, absolute / count, windows


@pytest.mark.parametrize("method", ["repeat_last", "window_mean"])
def test_naive_etth1_h96_matches_a_plain_loop(method, etth1_raw, etth1_h96):
    expected_mse, expected_mae, windows = _loop_reference(etth1_raw, method)
    scores = evaluate_naive(etth1_h96, method, split="test")
    assert scores["windows"] == windows == 2785
    assert scores["mse"] == pytest.approx(expected_mse, rel=1e-6)  # float32 z-scale, as models see it
    assert scores["mae"] == pytest.approx(expected_mae, rel=1e-6)


def test_raw_scale_errors_use_original_units(etth1_raw, etth1_h96):
    scores = evaluate_naive(etth1_h96, "repeat_last")
    raw = etth1_raw[11520 - 96 : 14400]
    squared = [((raw[i + 96 : i + 192] - raw[i + 95]) ** 2).mean() for i in range(0, 2785, 7)]
    # A subset of windows gives an estimate; the full mean must be close, and far from the z-scale one.
    assert scores["mse_raw"] == pytest.approx(np.mean(squared), rel=0.05)
    assert scores["mse_raw"] > 10 * scores["mse"]


def test_ms_mode_scores_only_the_target(etth1_raw):
    data = prepare("ETTh1", features="MS")
    expected_mse, expected_mae, _ = _loop_reference(etth1_raw, "window_mean", columns=slice(6, 7))
    scores = evaluate_naive(data, "window_mean")
    assert scores["mse"] == pytest.approx(expected_mse, rel=1e-6) and scores["mae"] == pytest.approx(expected_mae, rel=1e-6)


def test_naive_forecast_numpy_and_torch_agree(etth1_h96):
    batch = etth1_h96.windows("test").batch(torch.arange(0, 2785, 500))
    for method in ("repeat_last", "window_mean"):
        from_torch = naive_forecast(method, batch["x"], 96)
        from_numpy = naive_forecast(method, batch["x"].numpy(), 96)
        assert from_torch.shape == batch["y"].shape and from_numpy.shape == tuple(batch["y"].shape)
        np.testing.assert_allclose(from_torch.numpy(), from_numpy, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(naive_forecast("repeat_last", batch["x"], 96)[:, 50].numpy(), batch["x"][:, -1].numpy())
    with pytest.raises(ConfigError, match="method must be one of"):
        naive_forecast("seasonal", batch["x"], 96)
