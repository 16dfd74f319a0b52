"""Naive forecasts: the floor a trained model must beat.

``repeat_last`` repeats the last observed value of each variate; ``window_mean`` repeats the mean
of the lookback window. Evaluated under the protocol they give the leaderboard's sanity rows.
Both commute with the per-column affine scaler, so raw-scale errors come from the raw values.
"""

from __future__ import annotations

import numpy as np

from damcha_ts.data.panel import Panel
from damcha_ts.data.protocol import SeriesData, scored_slice
from damcha_ts.errors import ConfigError

METHODS = ("repeat_last", "window_mean")
# Windows per chunk are chosen so one chunk holds about this many float64 errors (~32 MB).
_CHUNK_ELEMENTS = 4_000_000


def naive_forecast(method: str, x, pred_len: int):
    """Forecast ``[B, H, C]`` from lookback ``x`` [B, L, C] (NumPy array or torch tensor)."""
    _check_method(method)
    if method == "repeat_last":
        level = x[:, -1:, :]
    else:
        level = x.mean(axis=1, keepdims=True) if isinstance(x, np.ndarray) else x.mean(dim=1, keepdim=True)
    if isinstance(x, np.ndarray):
        return np.repeat(level, pred_len, axis=1)
    return level.expand(-1, pred_len, -1).contiguous()


def evaluate_naive(data: Panel, method: str, split: str = "test") -> dict:
    """MSE/MAE of a naive forecast over every window of ``split``.

    Returns ``{"mse", "mae"}`` on the train-fitted z-scale (the benchmark metric),
    ``{"mse_raw", "mae_raw"}`` on the original scale, and ``"windows"``. In ``MS`` mode only the
    target (last column) is scored, as TSLib does. Every window of every entity of the panel,
    each in its own scale, counts once.
    """
    _check_method(method)
    result: dict = {"method": method, "split": split, "windows": data.window_count(split)}
    for suffix, scaled in (("", True), ("_raw", False)):
        squared = absolute = count = 0.0
        for part in data.series:
            sums = _naive_errors(part, method, split, scaled)
            squared, absolute, count = squared + sums[0], absolute + sums[1], count + sums[2]
        result["mse" + suffix] = squared / count
        result["mae" + suffix] = absolute / count
    return result


def _naive_errors(data: SeriesData, method: str, split: str, scaled: bool) -> tuple[float, float, int]:
    """(sum of squared errors, sum of absolute errors, their count) over ``split`` of one series."""
    squared = absolute = 0.0
    count = 0
    for truth, forecast in naive_windows(data, method, split, scaled=scaled):
        errors = truth - forecast
        squared += float(np.square(errors).sum())
        absolute += float(np.abs(errors).sum())
        count += errors.size
    return squared, absolute, count


def naive_windows(data: SeriesData, method: str, split: str, *, scaled: bool = False):
    """(truth, forecast) [B, H, C] of the scored columns over every window of ``split``, in chunks of
    windows (bounded memory); on the z-scale (``scaled``) or the original one, float64."""
    _check_method(method)
    border1, border2 = data.borders[split]
    n_windows = data.window_count(split)
    L, H = data.seq_len, data.pred_len
    target_columns = scored_slice(data.features)
    rows = (data.scaled if scaled else data.values)[border1:border2].astype(np.float64)
    level = _levels(method, rows, L, n_windows)[:, target_columns]  # [N, C]
    targets = np.lib.stride_tricks.sliding_window_view(rows[L:, target_columns], H, axis=0)  # [N, C, H]
    chunk = max(1, _CHUNK_ELEMENTS // (H * level.shape[1]))
    for start in range(0, n_windows, chunk):
        truth = targets[start : start + chunk].transpose(0, 2, 1)  # [B, H, C]
        yield truth, np.broadcast_to(level[start : start + chunk, None, :], truth.shape)


def _levels(method: str, rows: np.ndarray, L: int, n_windows: int) -> np.ndarray:
    """The constant forecast of each window [N, C], from the split's rows [T, C]."""
    if method == "repeat_last":
        return rows[L - 1 : L - 1 + n_windows]
    # Lookback means via cumulative sums: mean of rows[i : i + L] for every window i at once.
    cumulative = np.concatenate([np.zeros((1, rows.shape[1])), np.cumsum(rows, axis=0)])
    return (cumulative[L : L + n_windows] - cumulative[:n_windows]) / L


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ConfigError(f"method must be one of {METHODS}, got {method!r}")
