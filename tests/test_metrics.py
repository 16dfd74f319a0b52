"""MSE/MAE and their breakdowns against explicit loops; exact accumulation over uneven batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from damcha_ts.data import StandardScaler
from damcha_ts.metrics import ErrorAccumulator, mae, mse, per_horizon, per_variate


@pytest.fixture(scope="module")
def pair():
    rng = np.random.default_rng(0)
    return rng.normal(size=(13, 5, 3)), rng.normal(size=(13, 5, 3))  # [B, H, C]


def _loop(pred, true, metric, keep=None):
    """Mean error over every element, or per index of axis ``keep``, with plain Python loops."""
    sums, counts = {}, {}
    B, H, C = pred.shape
    for b in range(B):
        for h in range(H):
            for c in range(C):
                diff = pred[b, h, c] - true[b, h, c]
                key = None if keep is None else (b, h, c)[keep]
                sums[key] = sums.get(key, 0.0) + (diff * diff if metric == "mse" else abs(diff))
                counts[key] = counts.get(key, 0) + 1
    return sums[None] / counts[None] if keep is None else np.array([sums[k] / counts[k] for k in sorted(sums)])


def test_numpy_and_torch_match_explicit_loops(pair):
    pred, true = pair
    assert mse(pred, true) == pytest.approx(_loop(pred, true, "mse"), rel=1e-12)
    assert mae(pred, true) == pytest.approx(_loop(pred, true, "mae"), rel=1e-12)
    t_pred, t_true = torch.from_numpy(pred), torch.from_numpy(true)
    assert mse(t_pred, t_true).item() == pytest.approx(_loop(pred, true, "mse"), rel=1e-12)
    assert mae(t_pred, t_true).item() == pytest.approx(_loop(pred, true, "mae"), rel=1e-12)
    for metric in ("mse", "mae"):
        np.testing.assert_allclose(per_horizon(pred, true, metric), _loop(pred, true, metric, keep=1), rtol=1e-12)
        np.testing.assert_allclose(per_variate(pred, true, metric), _loop(pred, true, metric, keep=2), rtol=1e-12)
        np.testing.assert_allclose(per_horizon(t_pred, t_true, metric).numpy(), _loop(pred, true, metric, keep=1), rtol=1e-12)
    with pytest.raises(ValueError, match="shapes differ"):
        mse(pred, true[:, :4])


def test_accumulator_is_exact_over_uneven_batches(pair):
    pred, true = pair
    accumulator = ErrorAccumulator()
    for start, stop in ((0, 8), (8, 12), (12, 13)):  # a last batch of one window
        accumulator.update(torch.from_numpy(pred[start:stop]).float(), true[start:stop])
    result = accumulator.compute()
    assert result["windows"] == 13
    assert result["mse"] == pytest.approx(mse(pred, true), rel=1e-6)
    assert result["mae"] == pytest.approx(mae(pred, true), rel=1e-6)
    np.testing.assert_allclose(result["mse_per_horizon"], per_horizon(pred, true), rtol=1e-6)
    np.testing.assert_allclose(result["mae_per_variate"], per_variate(pred, true, "mae"), rtol=1e-6)
    batch_means = np.mean([mse(pred[a:b], true[a:b]) for a, b in ((0, 8), (8, 12), (12, 13))])
    assert abs(batch_means - result["mse"]) > 1e-3  # why the accumulator exists


def test_accumulator_raw_scale_inverts_the_scaler(pair):
    pred, true = pair
    scaler = StandardScaler(mean=np.array([10.0, -2.0, 0.5]), scale=np.array([3.0, 0.5, 2.0]))
    accumulator = ErrorAccumulator(scaler=scaler)
    accumulator.update(pred, true)
    result = accumulator.compute()
    raw_pred, raw_true = pred * scaler.scale_ + scaler.mean_, true * scaler.scale_ + scaler.mean_
    assert result["raw_mse"] == pytest.approx(_loop(raw_pred, raw_true, "mse"), rel=1e-12)
    assert result["raw_mae"] == pytest.approx(_loop(raw_pred, raw_true, "mae"), rel=1e-12)
    np.testing.assert_allclose(result["raw_mse_per_variate"], _loop(raw_pred, raw_true, "mse", keep=2), rtol=1e-12)
