"""Cross-validation: rolling-origin forecasts, retraining on the rows before each cutoff.

``cross_validation(refit=False)`` is :func:`~damcha_ts.forecasting.backtest.backtest`: one fitted
model forecasts from every cutoff. With ``refit=True`` a model is trained for each window on the
rows up to and including its cutoff (never a row after it), with ``refit=k`` for every k-th window
(windows in between reuse the last model, whose training data ends before their cutoffs too). The
training itself is a function passed in (``Forecaster`` passes one that fits as ``fit`` does, same
config and seed), so this module knows nothing about how a model is trained.

Every entity of a many-entity model is one more set of rows in the same loop (:func:`rolling_forecasts`):
window k of each entity is its k-th cutoff counted from its own last row, and a retraining trains
one model on every entity's rows up to its cutoff.

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

from damcha_ts.data.entities import errors_of, typed_ids
from damcha_ts.errors import ConfigError
from damcha_ts.forecasting.backtest import cutoffs, window_forecasts, window_step
from damcha_ts.forecasting.entities import with_typed_ids
from damcha_ts.forecasting.intervals import check_levels
from damcha_ts.schema import positive_int

#: ``{entity: (values [T, K], timestamps [T])}``: the raw rows of each entity (one entry for a model
#: of one series), in the model's ``history_columns`` order.
Rows = Mapping[Any, tuple[np.ndarray, pd.DatetimeIndex]]
#: ``train(values [T, C], timestamps [T]) -> (predictor, facts)``: a model trained on exactly those
#: rows (model column order) and a JSON-ready dict about its training, or just the predictor.
TrainFunction = Callable[[np.ndarray, pd.DatetimeIndex], Any]


def refit_every(refit: bool | int) -> int:
    """Windows per trained model: 0 for ``refit=False`` (no retraining), 1 for ``True``, else ``k >= 1``."""
    if isinstance(refit, (bool, np.bool_)):
        return int(bool(refit))
    return positive_int(refit, "refit", "False, True or a number of windows k >= 1 (retrain every k windows)")


def cross_validation(predictor, values: np.ndarray, timestamps: pd.DatetimeIndex, *, n_windows: int = 3,
                     step: int | None = None, refit: bool | int = False, train: TrainFunction | None = None,
                     input_options: Mapping[str, Any] | None = None, level: Any = None,
                     season_length: int | None = None) -> pd.DataFrame:
    """Forecasts from ``n_windows`` cutoffs ``step`` rows apart (default: the horizon; the last
    window ends at the last row of ``values``), as a long frame (see :func:`backtest`).

    ``refit``: False forecasts every window with ``predictor`` (exactly :func:`backtest`); True
    trains a model with ``train`` on ``values[: cutoff + 1]`` for every window; ``k`` does so for
    windows 0, k, 2k, ... . The frame's ``attrs["refits"]`` then lists, per trained model, its
    cutoff, the windows it forecast, the rows it was given (``rows``: the cutoff's and all before)
    and what ``train`` reported.
    ``level``: interval columns (:mod:`damcha_ts.forecasting.intervals`), from each predictor's
    calibration (``train`` must return calibrated predictors).
    ``attrs["scores"]``: the scores of all the windows (:func:`rolling_forecasts`; ``season_length``:
    MASE's season, default the frequency's).
    """
    every, levels = refit_every(refit), check_levels(level)
    step = window_step(n_windows, step, predictor.horizon)
    train_rows = None if train is None else (lambda rows: train(*rows[None]))
    return rolling_forecasts(predictor, {None: (values, timestamps)}, n_windows=n_windows, step=step, every=every,
                             train=train_rows, input_options=input_options, levels=levels, season_length=season_length)


def rolling_forecasts(predictor, rows: Rows, *, n_windows: int, step: int, every: int,
                      train: Callable[[Rows], Any] | None = None, input_options: Mapping[str, Any] | None = None,
                      levels: tuple[float, ...] = (), season_length: int | None = None) -> pd.DataFrame:
    """:func:`cross_validation` of each entity's ``rows`` (one entry for a model of one series), its
    arguments checked there: ``train(rows up to each entity's cutoff)`` trains one model for a group
    of windows. The frame has the entity column first when the model has one (:func:`backtest_rows`).
    Its ``attrs["scores"]`` score every window, each scaled by the rows up to its cutoff (those its
    model trained on), pooled over the groups and entities (:func:`~damcha_ts.forecasting.scores.over_groups`)."""
    from damcha_ts.data.time_index import season_length_of
    from damcha_ts.forecasting.scores import over_groups

    horizon, lookback = predictor.horizon, predictor.lookback
    season_length_of(getattr(predictor.meta, "freq", None), season_length)  # checked before any training
    if not every:
        return backtest_rows(predictor, rows, n_windows=n_windows, step=step, input_options=input_options, levels=levels,
                             season_length=season_length)
    if train is None:
        raise ConfigError("cross_validation(refit=...) needs a train function that fits a model on the rows before a cutoff")
    entity_col = getattr(predictor.meta, "entity_col", None)
    positions = {}
    for entity, (values, _) in rows.items():
        with errors_of(entity_col, entity):
            positions[entity] = cutoffs(len(values), n_windows, step, lookback, horizon)
    pieces, refits = [], []
    for first in range(0, n_windows, every):
        last = min(first + every, n_windows) - 1
        # Training data end at the group's first cutoff: no window sees a row after its cutoff.
        known = {e: (v[: positions[e][first] + 1], t[: positions[e][first] + 1]) for e, (v, t) in rows.items()}
        trained = train(known)
        window_predictor, facts = trained if isinstance(trained, tuple) else (trained, {})
        # Backtest over the rows up to the group's last forecast: its windows end at these cutoffs.
        ends = {e: positions[e][last] + 1 + horizon for e in rows}
        pieces.append(backtest_rows(window_predictor, {e: (v[: ends[e]], t[: ends[e]]) for e, (v, t) in rows.items()},
                                    n_windows=last - first + 1, step=step, input_options=input_options, levels=levels,
                                    season_length=season_length,
                                    # The window models were fitted on a table of text ids (estimator.window_panel).
                                    ids_as=predictor.meta))
        cutoff = {e: str(t[positions[e][first]]) for e, (_, t) in rows.items()}
        refits.append({**({"cutoff": cutoff[None]} if entity_col is None else {"cutoffs": cutoff}),
                       "windows": last - first + 1, "rows": sum(len(v) for v, _ in known.values()), **dict(facts)})
    frame = pd.concat(pieces, ignore_index=True)
    frame.attrs["refits"] = refits
    frame.attrs["scores"] = over_groups([piece.attrs["scores"] for piece in pieces])
    return frame


def backtest_rows(predictor, rows: Rows, *, n_windows: int, step: int, input_options: Mapping[str, Any] | None = None,
                  levels: tuple[float, ...] = (), ids_as=None, season_length: int | None = None) -> pd.DataFrame:
    """:func:`~damcha_ts.forecasting.backtest.backtest` of each entity's rows (each cutoff counted
    from its own last row) through its own predictor: of a model of one series, its frame; of many
    entities, one frame with the entity column first, ids in the dtype of the fit data of ``ids_as``
    (a meta; default the predictor's), laid out as the fit input was (``meta.input_options``);
    ``step`` and ``levels`` checked (by :func:`cross_validation` or the ``Forecaster``).
    ``attrs["scores"]``: :func:`~damcha_ts.forecasting.backtest.window_scores` of the windows, of
    many entities each entity's (``entities``) and all pooled (:func:`~damcha_ts.forecasting.scores.over_entities`)."""
    from damcha_ts.forecasting.scores import over_entities

    entity_col = getattr(predictor.meta, "entity_col", None)
    if entity_col is None:
        ((values, stamps),) = rows.values()
        return window_forecasts(predictor, values, stamps, n_windows, step, input_options, levels,
                                season_length=season_length)
    pieces, scores = [], {}
    for entity, (values, stamps) in rows.items():
        with errors_of(entity_col, entity):  # e.g. too few rows for the windows
            piece = window_forecasts(predictor.for_entity(entity), values, stamps, n_windows, step,
                                     predictor.meta.input_options, levels, season_length=season_length)
        scores[entity] = piece.attrs["scores"]
        piece.insert(0, entity_col, entity)
        pieces.append(piece)
    meta = ids_as or predictor.meta
    frame = with_typed_ids(pd.concat(pieces, ignore_index=True), meta)
    ids = typed_ids(pd.Series(list(scores), dtype=object), meta.entity_dtype).tolist()
    frame.attrs["scores"] = over_entities(dict(zip(ids, scores.values())))
    return frame
