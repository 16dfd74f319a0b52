"""A predictor's forecasts of the windows of a prepared panel, scored: the conformity scores a
:class:`~damcha_ts.forecasting.intervals.Calibration` is made of (:func:`calibrate`, never on windows
the model trained on), the coverage, width and quantile scores of its intervals
(:func:`interval_scores`), and with them, in one pass, the scale-free scores of
:mod:`damcha_ts.forecasting.scores` (:func:`split_scores`). The intervals themselves are
:mod:`damcha_ts.forecasting.intervals`'."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from damcha_ts.data.protocol import scored_slice
from damcha_ts.errors import ConfigError, DataError
from damcha_ts.forecasting.intervals import (MAX_SCORES, MAX_WINDOWS, MIN_WINDOWS, Calibration, forecast_intervals,
                                             level_name, level_pairs, quantile_index, require_calibration, score_unit)


def trained_splits(refit: bool) -> tuple[str, ...]:
    """The splits of its data whose windows a fitted model trained on: ``train``, and ``val`` too
    after ``fit(refit=True)``."""
    return ("train", "val") if refit else ("train",)


def refuse_empty_test_split(*, fitted: bool, refit: bool) -> None:
    """evaluate()'s ConfigError for a test split without windows (``test_size=0``), saying how to
    score: ``fitted``, the fitted data was asked for; ``refit``, its model also trained on val."""
    if fitted:
        trained_on_val = " (which it also trained on, since fit had refit=True)" if refit else ""
        raise ConfigError(
            "evaluate(): this model was fitted without a test split (test_size=0), so there is nothing held out "
            "to score: pass held-out data, evaluate(data, ...), or score the validation tail with "
            f"evaluate(split='val'){trained_on_val}"
        )
    raise ConfigError("evaluate(): this data has no test split (test_size=0): pass test_size > 0 or split='val'")


def refuse_trained_split(split: str, refit: bool) -> None:
    """ConfigError when ``split`` is one the model trained on (:func:`trained_splits`): residuals
    there are smaller than on new data, so intervals calibrated on them would cover less than their
    level. :func:`calibrate` applies it, so every calibration does (``Forecaster.calibrate``, and the
    first pass of ``fit`` and of ``cross_validation``'s window models)."""
    if split not in trained_splits(refit):
        return
    why = ("fit(refit=True) trained this model on the validation windows too" if split == "val"
           else "every model trains on the windows of its train split")
    splits = "split='test'" if refit else "split='val' (the default) or split='test'"
    keeps = "; fit already kept the calibration of its first pass, made before the refit" if refit else ""
    raise ConfigError(
        f"calibrate(split={split!r}): {why}, where its errors are smaller than on new data, so intervals "
        f"calibrated there would cover less than their level; calibrate on windows it did not train on: "
        f"{splits}, of this data or of held-out data{keeps}"
    )


def calibrate(predictor, series, split: str = "val", *, refit: bool = False, batch_size: int = 256,
              max_windows: int = MAX_WINDOWS) -> Calibration:
    """The :class:`Calibration` of ``predictor`` on the windows of ``split`` of a prepared
    panel ``series`` (:func:`damcha_ts.data.prepare`; its columns, lookback and horizon the model's).

    Every window is forecast through ``predictor`` from its raw values (the predictor's saved
    scaler and time marks, as ``predict`` does), up to ``max_windows`` of them evenly spaced over
    the split (fewer for wide data, see the module docstring). ``refit``: the model was fitted with
    ``refit=True``; a split it trained on is refused (:func:`refuse_trained_split`)."""
    refuse_trained_split(split, refit)
    count = series.window_count(split)
    if count < 1:
        raise DataError(f"calibrate(): the {split} split of {series.name or 'the data'} holds no window")
    pairs = level_pairs(predictor.quantiles)
    cells = predictor.horizon * len(predictor.output_columns) * (1 + len(pairs))
    keep = max(1, min(int(max_windows), max(MIN_WINDOWS, MAX_SCORES // cells)))
    share = max(1, keep // len(series.entities))  # every entity's windows, in its own units (module docstring)
    scores = []
    for entity, rows in zip(series.entities, series.series):
        one = predictor.for_entity(entity)
        if rows.window_count(split) > 0:
            scores.append(_scores(one, rows, split, share, batch_size) / score_unit(one))
    return Calibration(scores=np.concatenate(scores, axis=1), pairs=pairs, split=split)


def _scores(predictor, series, split: str, keep: int, batch_size: int) -> np.ndarray:
    """Conformity scores [1 + P, windows, H, C_out] of at most ``keep`` windows of ``split``, evenly spaced."""
    pairs = level_pairs(predictor.quantiles)
    count = series.window_count(split)
    windows = np.unique(np.linspace(0, count - 1, min(count, keep)).round().astype(np.int64))
    kinds = []
    for point, quantile_values, truth in split_forecasts(predictor, series, split, windows=windows,
                                                         batch_size=batch_size):
        batch = [np.abs(truth - point)]
        for low, high in pairs:
            lo, hi = quantile_values[:, quantile_index(predictor.quantiles, low)], quantile_values[:, quantile_index(predictor.quantiles, high)]
            batch.append(np.maximum(lo - truth, truth - hi))
        kinds.append(np.stack(batch))
    return np.concatenate(kinds, axis=1)


def split_forecasts(predictor, series, split: str, *, windows: np.ndarray | None = None,
                    batch_size: int = 256) -> Iterator[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
    """Batches ``(point [B, H, C_out], quantile values [B, Q, H, C_out] or None, truth [B, H, C_out])``
    of the windows of ``split`` (all, or the positions ``windows``), raw scale, in order."""
    if (series.seq_len, series.pred_len) != (predictor.lookback, predictor.horizon) or \
            list(series.history_columns) != list(predictor.meta.history_columns):
        raise DataError(
            f"the series has lookback {series.seq_len}, horizon {series.pred_len} and columns "
            f"{list(series.history_columns)}; the model reads {predictor.lookback}, {predictor.horizon} and "
            f"{list(predictor.meta.history_columns)}"
        )
    border1, _ = series.borders[split]
    lookback, horizon = series.seq_len, series.pred_len
    starts = np.arange(series.window_count(split)) if windows is None else np.asarray(windows, dtype=np.int64)
    scored = scored_slice(series.features)
    table, n_future = series.history_rows(), len(predictor.future_covariates)
    for first in range(0, len(starts), max(1, int(batch_size))):
        rows = border1 + starts[first : first + batch_size]
        histories = np.stack([table[r : r + lookback] for r in rows])
        stamps = [series.timestamps[r : r + lookback] for r in rows]
        truth = np.stack([series.values[r + lookback : r + lookback + horizon] for r in rows])[..., scored]
        future = np.stack([table[r + lookback : r + lookback + horizon, -n_future:] for r in rows]) if n_future else None
        point, quantile_values = predictor.forecast(histories, stamps, future)
        yield point, quantile_values, truth


def interval_scores(predictor, series, split: str, levels: Sequence[float], *, batch_size: int = 256) -> dict:
    """Interval and quantile scores over every window of ``split`` (raw scale, through the
    predictor as ``predict`` forecasts):

    * ``coverage_<a>``: the fraction of (window, step, variate) cells whose truth lies in the
      calibrated ``a`` % interval; ``width_<a>``: the interval's mean width;
    * for a quantile model with the pair of ``a``: ``coverage_<a>_uncalibrated``, the same for the
      raw quantile head ``[q̂_lo, q̂_hi]``;
    * for a quantile model: ``pinball_loss``, the mean of ``ρ_τ(y − q̂_τ)`` over levels and cells
      (as :func:`damcha_ts.models.quantiles.pinball_loss`), and ``wql``, the mean over levels of
      ``Σ 2 ρ_τ / Σ |y|`` (GluonTS' ``mean_weighted_sum_quantile_loss``).

    ``levels``: as :func:`~damcha_ts.forecasting.intervals.check_levels` gave them.
    """
    sums = IntervalSums(predictor, levels)
    for point, quantile_values, truth in split_forecasts(predictor, series, split, batch_size=batch_size):
        sums.update(truth, point, quantile_values, forecast_intervals(predictor, point, quantile_values, levels))
    if sums.cells == 0:
        raise DataError(f"the {split} split of {series.name or 'the data'} holds no window")
    return sums.result()


def split_scores(predictor, series, split: str, levels: Sequence[float] = (), *, season_length: int | None = None,
                 batch_size: int = 256) -> dict:
    """The scale-free and probabilistic scores of :class:`~damcha_ts.forecasting.scores.ForecastScores`
    (``mase``, ``smape``, ``rmse``, ``scaled_crps`` of a quantile model, ``scaled_crps_intervals``
    with ``levels``) and, with ``levels``, :func:`interval_scores`' in the same pass over every
    window of ``split`` (raw scale, through the predictor). MASE's scale ``s`` is each variate's
    seasonal naive MAE over the series' train rows (the model's training rows; train + val after a
    refit), season from the model's frequency or ``season_length``."""
    from damcha_ts.data.time_index import season_length_of
    from damcha_ts.forecasting.scores import ForecastScores

    season = season_length_of(getattr(predictor.meta, "freq", None), season_length)  # checked before any forecast
    intervals = IntervalSums(predictor, levels) if levels else None
    scale = train_scale(series, season)
    scores = ForecastScores(predictor.quantiles, levels)
    for point, quantile_values, truth in split_forecasts(predictor, series, split, batch_size=batch_size):
        bounds = forecast_intervals(predictor, point, quantile_values, levels) if levels else {}
        scores.update(truth, point, quantile_values, bounds, scale=scale)
        if intervals is not None:
            intervals.update(truth, point, quantile_values, bounds)
    if scores.windows == 0:
        raise DataError(f"the {split} split of {series.name or 'the data'} holds no window")
    return {**(intervals.result() if intervals is not None else {}), **scores.result()}


def train_scale(series, season: int):
    """MASE's ``s`` [C]: each scored variate's seasonal naive MAE over the series' train rows (raw scale)."""
    from damcha_ts.forecasting.scores import seasonal_scale

    train_start, train_end = series.borders["train"]
    return seasonal_scale(series.values[train_start:train_end, scored_slice(series.features)], season)


def pooled_split_scores(panel, score_series: Callable[[Any, Any], dict], split: str = "test") -> dict:
    """``mase``, ``smape``, ``rmse`` over every window of ``split`` of every entity of ``panel``, each
    scored by ``score_series(entity, series)`` (scaled by its own train rows) and pooled as
    ``evaluate`` pools entities (:func:`~damcha_ts.forecasting.scores.pooled`): the leaderboard's
    scale-free columns."""
    from damcha_ts.forecasting.scores import pooled

    parts = [{**score_series(entity, one), "windows": one.window_count(split)}
             for entity, one in zip(panel.entities, panel.series) if one.window_count(split) > 0]
    return {key: value for key, value in pooled(parts).items() if key in ("mase", "smape", "rmse")}


def naive_series_scores(series, method: str, split: str = "test") -> dict:
    """:class:`~damcha_ts.forecasting.scores.ForecastScores` of a naive rule
    (:func:`damcha_ts.baselines.naive_windows`) over every window of ``split`` of one series, raw
    scale, MASE's season from the series' frequency."""
    from damcha_ts.baselines import naive_windows
    from damcha_ts.data.time_index import season_length_of
    from damcha_ts.forecasting.scores import ForecastScores

    scale, scores = train_scale(series, season_length_of(series.freq)), ForecastScores()
    for truth, forecast in naive_windows(series, method, split):
        scores.update(truth, forecast, scale=scale)
    return scores.result()


class IntervalSums:
    """The sums behind :func:`interval_scores`, batch by batch: :meth:`update` takes raw ``truth``,
    ``point`` [B, H, C], ``quantile_values`` [B, Q, H, C] or None and the ``bounds`` of the levels
    (:func:`~damcha_ts.forecasting.intervals.forecast_intervals`, as predict gives them)."""

    def __init__(self, predictor, levels: Sequence[float]):
        self.calibration = require_calibration(predictor, levels)
        self.quantiles, self.levels = predictor.quantiles, tuple(levels)
        self.sums: dict[str, float] = {}
        self.cells, self.absolute = 0, 0.0
        self.pinball = None if self.quantiles is None else np.zeros(len(self.quantiles))

    def _add(self, key: str, value) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + float(value)

    def update(self, truth, point, quantile_values, bounds) -> None:
        quantiles = self.quantiles
        self.cells += truth.size
        for level in self.levels:
            name = level_name(level)
            lo, hi = bounds[level]
            self._add(f"coverage_{name}", ((truth >= lo) & (truth <= hi)).sum())
            self._add(f"width_{name}", (hi - lo).sum())
            pair = self.calibration.pair(level)
            if pair is not None:
                raw_lo = quantile_values[:, quantile_index(quantiles, pair[0])]
                raw_hi = quantile_values[:, quantile_index(quantiles, pair[1])]
                self._add(f"coverage_{name}_uncalibrated", ((truth >= raw_lo) & (truth <= raw_hi)).sum())
        if quantiles is not None:
            error = truth[:, None] - quantile_values  # u = y − q̂, [B, Q, H, C]
            tau = np.asarray(quantiles).reshape(1, -1, 1, 1)
            self.pinball += np.maximum(tau * error, (tau - 1.0) * error).sum(axis=(0, 2, 3))
            self.absolute += float(np.abs(truth).sum())

    def result(self) -> dict:
        scores = {key: value / self.cells for key, value in self.sums.items()}
        if self.quantiles is not None:
            scores["pinball_loss"] = float(self.pinball.sum() / (self.cells * len(self.quantiles)))
            scores["wql"] = float(np.mean(2.0 * self.pinball / self.absolute)) if self.absolute > 0 else float("nan")
        return scores
