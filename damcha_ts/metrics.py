"""Forecast errors under the benchmark convention (protocol.md §1.6).

MSE and MAE are means over every window x horizon step x variate. The functions accept NumPy
arrays (returning a Python float or an ndarray) or torch tensors (returning tensors, so they can
serve as losses). Inputs are ``[..., H, C]``: batch axes first, then horizon, then variates.

Averaging per batch and then over batches over-weights a short last batch (TFB #66), so
evaluation loops should use ``ErrorAccumulator``, which sums errors and divides once.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Metric = Literal["mse", "mae"]


def _check(pred, true) -> None:
    if tuple(pred.shape) != tuple(true.shape):
        raise ValueError(f"pred and true shapes differ: {tuple(pred.shape)} vs {tuple(true.shape)}")


def _error(pred, true, metric: Metric):
    _check(pred, true)
    if metric == "mse":
        return (pred - true) ** 2
    if metric == "mae":
        return abs(pred - true)
    raise ValueError(f"metric must be 'mse' or 'mae', got {metric!r}")


def _mean(errors, axis=None):
    if isinstance(errors, np.ndarray):
        # float64 accumulation: float32 sums over millions of terms lose digits.
        result = errors.mean(axis=axis, dtype=np.float64)
        return float(result) if axis is None else result
    return errors.mean() if axis is None else errors.mean(dim=axis)


def mse(pred, true):
    """Mean squared error over all elements."""
    return _mean(_error(pred, true, "mse"))


def mae(pred, true):
    """Mean absolute error over all elements."""
    return _mean(_error(pred, true, "mae"))


def per_horizon(pred, true, metric: Metric = "mse"):
    """Error at each forecast step [H]: mean over batch axes and variates of ``[..., H, C]``."""
    errors = _error(pred, true, metric)
    return _mean(errors, axis=tuple(a for a in range(errors.ndim) if a != errors.ndim - 2))


def per_variate(pred, true, metric: Metric = "mse"):
    """Error of each variate [C]: mean over batch axes and horizon of ``[..., H, C]``."""
    errors = _error(pred, true, metric)
    return _mean(errors, axis=tuple(range(errors.ndim - 1)))


class ErrorAccumulator:
    """Exact MSE/MAE over many batches, with per-horizon and per-variate breakdowns.

    ``update(pred, true)`` takes ``[B, H, C]`` arrays or tensors (torch tensors are detached and
    moved to CPU); sums are kept in float64. With a ``scaler`` (``StandardScaler`` of the C
    columns; in MS mode ``data.scaler.select([-1])``), raw-scale errors are accumulated too:
    the "inverse" metrics.
    """

    def __init__(self, scaler=None):
        self.scaler = scaler
        self.windows = 0
        self._sums: dict[str, np.ndarray] = {}

    def update(self, pred, true) -> None:
        pred, true = _as_float64_numpy(pred), _as_float64_numpy(true)
        _check(pred, true)
        if pred.ndim != 3:
            raise ValueError(f"expected [B, H, C] batches, got shape {pred.shape}")
        scales = {"": (pred, true)}
        if self.scaler is not None:
            scales["raw_"] = (self.scaler.inverse_transform(pred), self.scaler.inverse_transform(true))
        for prefix, (p, t) in scales.items():
            for metric in ("mse", "mae"):
                cell_sums = _error(p, t, metric).sum(axis=0)  # [H, C]
                key = prefix + metric
                self._sums[key] = self._sums.get(key, 0.0) + cell_sums
        self.windows += pred.shape[0]

    def merge(self, other: ErrorAccumulator) -> ErrorAccumulator:
        """The errors of both (windows of several entities, each accumulated with its own scaler)."""
        merged = ErrorAccumulator(self.scaler)
        merged.windows = self.windows + other.windows
        merged._sums = {key: self._sums.get(key, 0.0) + other._sums.get(key, 0.0) for key in {*self._sums, *other._sums}}
        return merged

    def compute(self) -> dict:
        """``{"mse", "mae", "windows", "mse_per_horizon", ...}`` (+ ``raw_*`` with a scaler)."""
        if self.windows == 0:
            raise ValueError("no batches were accumulated")
        result: dict = {"windows": self.windows}
        for key, cell_sums in self._sums.items():
            cell_means = cell_sums / self.windows  # [H, C]
            result[key] = float(cell_means.mean())
            result[f"{key}_per_horizon"] = cell_means.mean(axis=1)
            result[f"{key}_per_variate"] = cell_means.mean(axis=0)
        return result


def _as_float64_numpy(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x.astype(np.float64, copy=False)
    return x.detach().to("cpu").double().numpy()
