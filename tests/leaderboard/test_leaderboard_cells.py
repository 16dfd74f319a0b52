"""A leaderboard cell's row (damcha_ts.leaderboard.cells.run_cell): besides the z-scale MSE/MAE, the
scale-free MASE and sMAPE on the original scale, checked against a computation by hand on ETTh1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from damcha_ts.data import prepare
from damcha_ts.leaderboard.cells import NAIVE_SEQ_LEN, resolve_cell, run_cell
from damcha_ts.leaderboard.grid import load_grid

SMOKE = Path(__file__).resolve().parents[2] / "configs" / "leaderboard" / "smoke.yaml"
SEASON = 24  # hourly data: gluonts' seasonality, MASE's seasonal naive scale


def by_hand(values: np.ndarray, borders: dict, forecast_of, lookback: int, horizon: int) -> tuple[float, float]:
    """(MASE, sMAPE) over every test window: MAE per variate over its train rows' seasonal naive MAE,
    averaged over variates; 2|y - f| / (|y| + |f|) averaged over every cell."""
    train = values[slice(*borders["train"])]
    scale = np.abs(train[SEASON:] - train[:-SEASON]).mean(axis=0)  # [C]
    start, end = borders["test"]
    absolute, smape, count = 0.0, 0.0, 0
    for origin in range(start + lookback, end - horizon + 1):
        truth, forecast = values[origin:origin + horizon], forecast_of(values[origin - lookback:origin])
        absolute, count = absolute + np.abs(truth - forecast).sum(axis=0), count + horizon
        smape += (2 * np.abs(truth - forecast) / (np.abs(truth) + np.abs(forecast))).sum()
    return float((absolute / count / scale).mean()), float(smape / (count * values.shape[1]))


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    grid = load_grid(SMOKE)
    runs = tmp_path_factory.mktemp("runs")
    return {cell.model: resolve_cell(cell, grid, runs) for cell in grid.cells()}


NAIVE_FORECASTS = {"repeat_last": lambda lookback: np.repeat(lookback[-1:], 96, axis=0),
                   "window_mean": lambda lookback: np.repeat(lookback.mean(axis=0, keepdims=True), 96, axis=0)}


@pytest.mark.parametrize("method", list(NAIVE_FORECASTS))
def test_a_naive_cell_scores_mase_and_smape_on_the_original_scale(cells, method):
    """As gluonts.ev scores sMAPE, a cell whose truth and forecast are both 0 is 0/0: repeating the
    last value hits ETTh1's zeros, so that row's sMAPE is NaN (an empty column in the CSV)."""
    row = run_cell(cells[method], {})
    (series,) = prepare("ETTh1", seq_len=NAIVE_SEQ_LEN, pred_len=96, features="M").series
    with np.errstate(invalid="ignore"):
        mase, smape = by_hand(series.values.astype(np.float64), series.borders, NAIVE_FORECASTS[method], NAIVE_SEQ_LEN, 96)
    np.testing.assert_allclose([row["mase"], row["smape"]], [mase, smape], rtol=1e-9)  # NaN only where both are
    assert row["mase"] > 1  # both rules lose to yesterday's cycle on ETTh1
    assert np.isnan(row["smape"]) == (method == "repeat_last")


def test_a_trained_cell_scores_mase_as_its_per_variate_errors_say(cells, one_thread):
    """The row's MASE (a forecast pass through the saved predictor, gluonts.ev) equals the per-variate
    original-scale MAE of the run's own test pass (metrics_per_variate.csv) over each variate's
    seasonal naive scale."""
    resolved = cells["itransformer_mha"]
    row = run_cell(resolved, {"enable_progress_bar": False, "logger": False})
    (series,) = prepare("ETTh1", seq_len=resolved.config["data"]["seq_len"], pred_len=96, features="M").series
    train = series.values[slice(*series.borders["train"])].astype(np.float64)
    scale = np.abs(train[SEASON:] - train[:-SEASON]).mean(axis=0)
    per_variate = pd.read_csv(resolved.run_dir / "metrics_per_variate.csv")
    assert row["mase"] == pytest.approx(float((per_variate["mae_inverse"].to_numpy() / scale).mean()), rel=1e-6)
    assert 0 < row["smape"] < 2
