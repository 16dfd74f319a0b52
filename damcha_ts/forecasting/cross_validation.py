"""Cross-validation: rolling-origin forecasts, retraining on the rows before each cutoff.

``cross_validation(refit=False)`` is :func:`~damcha_ts.forecasting.backtest.backtest`: one fitted
model forecasts from every cutoff. With ``refit=True`` a model is trained for each window on the
rows up to and including its cutoff (never a row after it), with ``refit=k`` for every k-th window
(windows in between reuse the last model, whose training data ends before their cutoffs too). The
training itself is a function passed in (``Forecaster`` passes one that fits as ``fit`` does, same
config and seed), so this module knows nothing about how a model is trained.

The frame has the shape of neuralforecast's ``cross_validation``: one row per forecast timestamp,
variate and cutoff, with the id, time, ``cutoff``, true value and ``forecast`` columns of
``backtest`` (and its interval columns ``forecast-lo-80``, ... with ``level=``: each window's from
the calibration of the model that forecast it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.errors import ConfigError
from damcha_ts.forecasting.backtest import backtest, cutoffs, window_step
from damcha_ts.schema import positive_int

#: ``train(values [T, C], timestamps [T]) -> (predictor, facts)``: a model trained on exactly those
#: rows (model column order) and a JSON-ready dict about its training, or just the predictor.
TrainFunction = Callable[[np.ndarray, pd.DatetimeIndex], Any]


def refit_every(refit: bool | int) -> int:
    """Windows per trained model: 0 for ``refit=False`` (no retraining), 1 for ``True``, else ``k >= 1``."""
    if isinstance(refit, (bool, np.bool_)):
        return int(bool(refit))
    return positive_int(refit, "refit", "False, True or a number of windows k >= 1 (retrain every k windows)")


def cross_validation(
    predictor,
    values: np.ndarray,
    timestamps: pd.DatetimeIndex,
    *,
    n_windows: int = 3,
    step: int | None = None,
    refit: bool | int = False,
    train: TrainFunction | None = None,
    input_options: Mapping[str, Any] | None = None,
    level: Any = None,
) -> pd.DataFrame:
    """Forecasts from ``n_windows`` cutoffs ``step`` rows apart (default: the horizon; the last
    window ends at the last row of ``values``), as a long frame (see :func:`backtest`).

    ``refit``: False forecasts every window with ``predictor`` (exactly :func:`backtest`); True
    trains a model with ``train`` on ``values[: cutoff + 1]`` for every window; ``k`` does so for
    windows 0, k, 2k, ... . The frame's ``attrs["refits"]`` then lists, per trained model, its
    cutoff, the windows it forecast, the rows it was given (``rows``: the cutoff's and all before)
    and what ``train`` reported.
    ``level``: interval columns (:mod:`damcha_ts.forecasting.intervals`), from each predictor's
    calibration (``train`` must return calibrated predictors).
    """
    every = refit_every(refit)
    horizon, lookback = predictor.horizon, predictor.lookback
    step = window_step(n_windows, step, horizon)
    if not every:
        return backtest(predictor, values, timestamps, n_windows=n_windows, step=step, input_options=input_options,
                        level=level)
    if train is None:
        raise ConfigError("cross_validation(refit=...) needs a train function that fits a model on the rows before a cutoff")
    positions = cutoffs(len(values), n_windows, step, lookback, horizon)
    pieces, refits = [], []
    for first in range(0, n_windows, every):
        group = positions[first : first + every]
        # Training data end at the first cutoff of the group: no window sees a row after its cutoff.
        trained = train(values[: group[0] + 1], timestamps[: group[0] + 1])
        window_predictor, facts = trained if isinstance(trained, tuple) else (trained, {})
        # backtest over the rows up to the group's last forecast: its windows end at these cutoffs.
        end = group[-1] + 1 + horizon
        pieces.append(backtest(window_predictor, values[:end], timestamps[:end], n_windows=len(group), step=step,
                               input_options=input_options, level=level))
        refits.append({"cutoff": str(timestamps[group[0]]), "windows": len(group), "rows": group[0] + 1,
                       **dict(facts)})
    frame = pd.concat(pieces, ignore_index=True)
    frame.attrs["refits"] = refits
    return frame
