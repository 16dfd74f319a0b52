"""Scale-free and probabilistic scores of raw-scale forecasts, computed by ``gluonts.ev``.

Every score is over cells (window x horizon step x variate) of one series, on the original scale:

* ``mase``: mean ``|y − ŷ| / s``, where ``s`` is the variate's in-sample seasonal naive MAE,
  ``mean |y_t − y_{t−m}|`` (``gluonts.ev.ts_stats.seasonal_error``; ``m = 1`` when the rows are
  not longer than the season). In ``evaluate`` the in-sample rows are the series' train split (the
  rows the model trained on); in backtests and cross-validation, every row up to each window's
  cutoff (the rows a model fitted at that cutoff trains on). ``m`` is the season of the data's
  frequency (``gluonts.time_feature.get_seasonality``: 24 hourly, 48 half-hourly, 12 monthly, 5
  business days, 1 daily or weekly) unless ``season_length`` is given.
* ``smape``: mean ``2 |y − ŷ| / (|y| + |ŷ|)``, on the **0–2** scale (gluonts' ``sMAPE``; a cell
  whose truth and forecast are both 0 is 0/0, so the score is NaN, as in gluonts).
* ``rmse``: the square root of the mean squared error.
* ``scaled_crps``, quantile models: the quantile approximation of the CRPS,
  ``mean over τ of mean 2 ρ_τ(y − q̂_τ)``, divided by ``s`` as MASE is (gluonts'
  ``AverageMeanScaledQuantileLoss`` over the model's levels).
* ``scaled_crps_intervals``, with ``level=``: the same from the calibrated bands, read as the
  quantiles ``(1 ∓ a) / 2`` of each level ``a``, with the point forecast as the median.

A variate constant over its in-sample rows has ``s = 0``: its ``mase`` is inf (NaN where the error
is 0 too), as gluonts computes it. Over many entities (:func:`pooled`) the ratio scores, ``mase``
and the scaled CRPS, are the mean of the entities' values (the M4/M5 convention: each series
counts once, whatever its scale or length); every other score is the mean over every window of
every entity, ``rmse`` the root of the pooled squared error.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Scores that are ratios per series: pooled as the mean over entities.
RATIO_SCORES = ("mase", "scaled_crps", "scaled_crps_intervals")
#: The key of the point forecast in gluonts.ev's data (its default forecast type for MASE, sMAPE).
POINT = "0.5"


def seasonal_scale(values: np.ndarray, season: int) -> np.ndarray:
    """The seasonal naive MAE ``s`` [C] of in-sample raw ``values`` [T, C] (gluonts' seasonal_error)."""
    from gluonts.ev.ts_stats import seasonal_error

    return seasonal_error(np.asarray(values, dtype=np.float64), season, time_axis=0)[0]


def band_quantiles(levels: Sequence[float]) -> list[float]:
    """The quantile levels the bands of ``levels`` (percentages) stand for, with the median: sorted."""
    return sorted({0.5, *((1 - a / 100) / 2 for a in levels), *((1 + a / 100) / 2 for a in levels)})


class ForecastScores:
    """``mase``, ``smape``, ``rmse`` and the scaled CRPS of a stream of batches of one series.

    ``quantiles``: the levels of a quantile model (None for a point model); ``levels``: the
    ``level=`` percentages whose bands are scored. :meth:`update` takes raw ``truth``, ``point``
    [B, H, C], ``quantile_values`` [B, Q, H, C] or None, ``bounds`` {level: (lo, hi) [B, H, C]} and
    ``scale`` (``s``, broadcastable to [B, H, C]: [C] for one in-sample scale, [B, 1, C] per window).
    """

    def __init__(self, quantiles: Sequence[float] | None = None, levels: Sequence[float] = ()):
        from gluonts.ev.metrics import RMSE, SMAPE, AverageMeanScaledQuantileLoss, MASE, MetricDefinitionCollection

        self.quantiles, self.levels = None if quantiles is None else list(quantiles), tuple(levels)
        point = MetricDefinitionCollection([MASE(forecast_type=POINT), SMAPE(forecast_type=POINT),
                                            RMSE(forecast_type=POINT)])
        self._point = point(axis=None)
        self._head = None if quantiles is None else AverageMeanScaledQuantileLoss(self.quantiles)(axis=None)
        self._bands = AverageMeanScaledQuantileLoss(band_quantiles(levels))(axis=None) if levels else None
        self.windows = 0

    def update(self, truth, point, quantile_values=None, bounds=None, *, scale) -> None:
        data = {"label": truth, POINT: point, "seasonal_error": np.asarray(scale, dtype=np.float64)}
        with np.errstate(divide="ignore", invalid="ignore"):  # s = 0 or 0/0 cells: inf/NaN, documented
            self._point.update(data)
            if self._head is not None:
                self._head.update({**data, **{str(q): quantile_values[:, k] for k, q in enumerate(self.quantiles)}})
            if self._bands is not None:
                bands = {str(POINT): point}
                for level in self.levels:
                    lo, hi = bounds[level]
                    bands[str((1 - level / 100) / 2)], bands[str((1 + level / 100) / 2)] = lo, hi
                self._bands.update({**data, **bands})
        self.windows += len(truth)

    def result(self) -> dict[str, float]:
        if self.windows == 0:
            raise ValueError("no windows were scored")
        point = self._point.get()
        scores = {"mase": float(point[f"MASE[{POINT}]"]), "smape": float(point[f"sMAPE[{POINT}]"]),
                  "rmse": float(point[f"RMSE[{POINT}]"])}
        if self._head is not None:
            scores["scaled_crps"] = float(self._head.get())
        if self._bands is not None:
            scores["scaled_crps_intervals"] = float(self._bands.get())
        return scores


def pooled(parts: Sequence[dict], *, one_series: bool = False) -> dict[str, float]:
    """The scores of several parts, each a dict of scores with its ``windows``: of the entities of a
    panel (ratio scores, :data:`RATIO_SCORES`, the mean of the entities'; ``rmse`` the root of the
    window-weighted mean square; the rest window-weighted), or, ``one_series``, of the window groups
    of one series (every score window-weighted: the mean over all its cells). Only the keys every
    part has, and no ``dataset``/``split``/``entities``/``wql``, are pooled."""
    windows = np.array([part["windows"] for part in parts], dtype=np.float64)
    keys = [k for k in parts[0] if all(k in p for p in parts) and k not in ("dataset", "split", "windows",
                                                                             "entities", "wql")]
    result = {}
    for key in keys:
        values = np.array([part[key] for part in parts], dtype=np.float64)
        if key == "rmse":
            result[key] = float(np.sqrt(np.dot(windows, values**2) / windows.sum()))
        elif key in RATIO_SCORES and not one_series:
            result[key] = float(values.mean())
        else:
            result[key] = float(np.dot(windows, values) / windows.sum())
    return result


def over_entities(per_entity: dict) -> dict:
    """The scores of many entities' windows: all of them :func:`pooled`, ``windows`` and, under
    ``entities``, each entity's own (``per_entity``: {id: scores})."""
    parts = list(per_entity.values())
    return {**pooled(parts), "windows": int(sum(p["windows"] for p in parts)), "entities": dict(per_entity)}


def over_groups(groups: Sequence[dict]) -> dict:
    """The scores of the windows of several groups of windows of the same series (or entities: then
    per entity, then :func:`over_entities`), e.g. cross-validation's, one model per group: every
    score is the mean over all the windows (``wql``, a ratio of sums, is left out of a merge)."""
    if len(groups) == 1:
        return groups[0]
    if "entities" in groups[0]:
        return over_entities({e: over_groups([g["entities"][e] for g in groups]) for e in groups[0]["entities"]})
    return {"windows": int(sum(g["windows"] for g in groups)), **pooled(groups, one_series=True)}
