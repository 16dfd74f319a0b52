"""Rolling-origin forecasts of a :class:`~damcha_ts.forecasting.Predictor` without refitting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.errors import DataError
from damcha_ts.forecasting.intervals import check_levels, forecast_intervals, interval_columns, require_calibration
from damcha_ts.forecasting.output import long_names
from damcha_ts.schema import positive_int


def window_step(n_windows: int, step: int | None, horizon: int) -> int:
    """The rows between cutoffs (default: ``horizon``), once ``n_windows`` and ``step`` are checked
    to be integers >= 1 (ConfigError naming the argument; every backtest and cross-validation
    checks them here, before any data is read)."""
    positive_int(n_windows, "n_windows")
    return horizon if step is None else positive_int(step, "step", "a positive integer (rows between cutoffs) or None")


def cutoffs(n_rows: int, n_windows: int, step: int, lookback: int, horizon: int) -> list[int]:
    """Row positions of the last history row of each window; the last window's forecast ends at the
    last row."""
    last_cutoff = n_rows - horizon - 1
    positions = [last_cutoff - k * step for k in reversed(range(n_windows))]
    if positions[0] - lookback + 1 < 0:
        raise DataError(
            f"{n_windows} windows {step} rows apart need {lookback + horizon + (n_windows - 1) * step} "
            f"rows (lookback + horizon + (n_windows - 1) * step); the data has {n_rows}"
        )
    return positions


def backtest(predictor, values: np.ndarray, timestamps: pd.DatetimeIndex, *, n_windows: int = 5, step: int | None = None,
             input_options: Mapping[str, Any] | None = None, level: Any = None,
             season_length: int | None = None) -> pd.DataFrame:
    """Forecasts from ``n_windows`` cutoffs ``step`` rows apart over raw ``values`` [T, K] (the
    predictor's ``meta.history_columns``: model columns, then covariates) and their ``timestamps``,
    as a long frame; future covariates over each horizon are read from the rows after its cutoff.

    Columns: id, time, ``cutoff``, the true value and ``forecast`` (names follow the long layout in
    ``input_options``; defaults ``id``, ``date``, ``value``); a quantile model adds
    ``forecast_q0.1``, ... and its ``forecast`` is the median. ``level=[80, 95]`` adds the
    predictor's calibrated intervals ``forecast-lo-80``, ``forecast-hi-80``, ...
    (:mod:`damcha_ts.forecasting.intervals`).

    The frame's ``attrs["scores"]`` scores its windows (:func:`window_scores`; MASE's season
    ``season_length``, default the frequency's).
    """
    levels = check_levels(level)
    return window_forecasts(predictor, values, timestamps, n_windows, window_step(n_windows, step, predictor.horizon),
                            input_options, levels, season_length=season_length)


def window_forecasts(predictor, values: np.ndarray, timestamps: pd.DatetimeIndex, n_windows: int, step: int,
                     input_options: Mapping[str, Any] | None, interval_levels: tuple[float, ...], *,
                     season_length: int | None = None) -> pd.DataFrame:
    """:func:`backtest` once its arguments are checked: ``step`` rows between cutoffs (from
    :func:`window_step`) and the ``interval_levels`` :func:`check_levels` gave."""
    from damcha_ts.data.time_index import season_length_of
    from damcha_ts.models.quantiles import quantile_column_name  # imports torch: only now

    require_calibration(predictor, interval_levels)
    season = season_length_of(getattr(predictor.meta, "freq", None), season_length)
    horizon, lookback = predictor.horizon, predictor.lookback
    positions = cutoffs(len(values), n_windows, step, lookback, horizon)
    histories = np.stack([values[c - lookback + 1 : c + 1] for c in positions])
    n_future = len(predictor.future_covariates)  # known over the horizon: read from the rows after the cutoff
    future = np.stack([values[c + 1 : c + 1 + horizon, -n_future:] for c in positions]) if n_future else None
    forecasts, levels = predictor.forecast(histories, [timestamps[c - lookback + 1 : c + 1] for c in positions], future)
    bounds = forecast_intervals(predictor, forecasts, levels, interval_levels)
    columns = predictor.output_columns
    position = {c: i for i, c in enumerate(predictor.meta.columns)}  # a dict: linear in the columns
    truth_columns = [position[c] for c in columns]
    id_col, time_col, value_col = long_names(input_options or {})
    truth = np.stack([values[c + 1 : c + 1 + horizon][:, truth_columns] for c in positions])  # [W, H, C_out]
    pieces = []
    for k, cutoff in enumerate(positions):
        future = timestamps[cutoff + 1 : cutoff + 1 + horizon]
        for j, column in enumerate(columns):
            piece = {id_col: column, time_col: future, "cutoff": timestamps[cutoff], value_col: truth[k, :, j],
                     "forecast": forecasts[k, :, j]}
            if levels is not None:
                for q, level in enumerate(predictor.quantiles):
                    piece[quantile_column_name("forecast", level)] = levels[k, q, :, j]
            piece.update(interval_columns("forecast", bounds, (k, slice(None), j)))
            pieces.append(pd.DataFrame(piece))
    frame = pd.concat(pieces, ignore_index=True)
    in_sample = [values[: c + 1, truth_columns] for c in positions]
    frame.attrs["scores"] = window_scores(predictor, truth, (forecasts, levels, bounds), in_sample, season,
                                          interval_levels)
    return frame


def window_scores(predictor, truth: np.ndarray, forecast: tuple, in_sample: Sequence[np.ndarray], season: int,
                  levels: tuple[float, ...]) -> dict[str, Any]:
    """The scores of backtest windows, raw scale: ``truth`` [W, H, C] and ``forecast`` (point
    [W, H, C], quantile values [W, Q, H, C] or None, the bounds of ``levels``) of W windows, each
    window's MASE scale the seasonal naive MAE of its ``in_sample`` rows [T_w, C] (every row up to
    its cutoff, the rows a model fitted at that cutoff has). ``windows``, ``mase``, ``smape``,
    ``rmse``, ``scaled_crps`` of a quantile model (:mod:`damcha_ts.forecasting.scores`), and with
    ``levels`` :func:`~damcha_ts.forecasting.window_scores.interval_scores`' keys and ``scaled_crps_intervals``."""
    from damcha_ts.forecasting.scores import ForecastScores, seasonal_scale
    from damcha_ts.forecasting.window_scores import IntervalSums

    point, quantile_values, bounds = forecast
    scale = np.stack([seasonal_scale(rows, season) for rows in in_sample])[:, None]  # [W, 1, C]
    scores = ForecastScores(predictor.quantiles, levels)
    scores.update(truth, point, quantile_values, bounds, scale=scale)
    result: dict[str, Any] = {"windows": len(truth)}
    if levels:
        sums = IntervalSums(predictor, levels)
        sums.update(truth, point, quantile_values, bounds)
        result.update(sums.result())
    return {**result, **scores.result()}
