"""Calibrated prediction intervals: split-conformal residuals, or conformalised quantile regression.

``predict(level=[80, 95])``, ``backtest(level=...)``, ``evaluate(level=...)``, ``plot(level=...)`` and
``damcha-ts predict --level 80 95`` all go through this module:

* :func:`~damcha_ts.forecasting.window_scores.calibrate` forecasts windows of a split the model was not trained on (``"val"``: the
  validation split early stopping watched) through the :class:`~damcha_ts.forecasting.Predictor`,
  on the raw scale, and keeps per (window, horizon step, output variate) conformity scores in a
  :class:`Calibration` (never on windows the model trained on, :func:`~damcha_ts.forecasting.window_scores.refuse_trained_split`; a
  model fitted with ``refit=True``, which trains on the validation windows too, keeps the scores
  its first pass had there, before the refit):

  - the absolute residual ``|y − ŷ|`` of the point forecast (the median of a quantile model);
  - for a model trained with ``quantiles=``, for every trained level pair ``(τ, 1 − τ)``, the CQR
    score of Romano, Patterson & Candès, "Conformalized Quantile Regression" (NeurIPS 2019):
    ``E = max(q̂_τ − y, y − q̂_{1−τ})``.

* :func:`interval` turns a forecast into the interval of a level ``a`` (a percentage, 1 − α = a/100)
  with the finite-sample conformal quantile of the scores of its (step, variate): the
  ``k = ceil((n + 1)(1 − α))``-th smallest of the ``n`` scores, i.e. the empirical quantile at level
  ``ceil((n + 1)(1 − α)) / n`` (the inverse of the empirical CDF). With exchangeable windows, an interval then covers
  the truth with probability at least 1 − α at each step and variate (Vovk et al. 2005; Lei et al.
  2018). A level with ``k > n`` needs more calibration windows than there are: ConfigError.

  - a point model (or a quantile model without a symmetric pair): the residual method,
    ``[ŷ − Q̂, ŷ + Q̂]``;
  - a quantile model with pairs: CQR with one pair for every level, the narrowest trained one
    (:attr:`Calibration.interval_pair`; ``quantiles=[0.1, 0.9]``, or ``[0.1, 0.9]`` of
    ``[0.025, 0.1, 0.9, 0.975]``): ``[q̂_τ − Q̂, q̂_{1−τ} + Q̂]`` with Q̂ of that pair's scores at
    the level asked for (CQR covers at any level with any pair: Romano et al.; Q̂ may be negative
    and shrink the band; where it would cross, both ends are its midpoint). Its inner heads are the
    best estimated: on the sines of tests/forecasting/test_intervals.py the 0.1/0.9 pair at 95 %
    covered 95.0 % of the test cells, the 0.025/0.975 pair 95.2 % with bands 12 % wider.
  - every interval holds the point forecast (the median of a quantile model).

  **The bands of one forecast are nested, by construction, for any set of levels**: every level
  uses the same sorted scores, and Q̂ is the order statistic of a rank that never falls as the
  level rises, so each end moves outwards with the level (the midpoint rule, holding the point and
  clipping at 0 for ``nonnegative`` keep that). A level's band depends on the level and the
  calibration alone, not on the other levels asked for. (Mixing methods, CQR at 80 % and residuals
  at 95 %, crossed in about half of the backtest rows: issue 32.)

* :func:`interval_scores` scores intervals and quantiles on every window of a split: empirical
  coverage and mean width per level (``coverage_80``, ``width_80``), the uncalibrated quantile head's
  coverage beside it (``coverage_80_uncalibrated``) and, for a quantile model, the mean pinball loss
  and the weighted quantile loss (``wql``: GluonTS' ``mean_weighted_sum_quantile_loss``).

Columns: ``<variate>-lo-80`` / ``<variate>-hi-80`` in wide output, ``<forecast column>-lo-80`` in
long output (``forecast-lo-80`` in backtests, ``value-lo-80`` in a long ``predict``), the convention
of neuralforecast; :func:`interval_column_name` and :func:`interval_columns` write them.

Storage: the scores are sorted per (step, variate) and saved with the model (``calibration.npz``,
see :mod:`damcha_ts.training.artifacts`). At most :data:`MAX_WINDOWS` windows, evenly spaced over
the split, are kept, fewer for wide data so that the scores stay within :data:`MAX_SCORES` numbers
(but never fewer than :data:`MIN_WINDOWS`).

Many entities (data/panel.py): one calibration pools the validation windows of every entity,
each entity's scores divided by its scaler's scale (:func:`score_unit`), so that stores of 10 and
of 1000 units share one set of scores; an entity's interval multiplies them back by its scale.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from damcha_ts.data.protocol import scored_slice
from damcha_ts.errors import ConfigError, DataError, plain_repr

# Calibration windows kept at most, and the most scores (windows x steps x variates x score kinds).
MAX_WINDOWS = 1000
MAX_SCORES = 2**21
MIN_WINDOWS = 100
_TOLERANCE = 1e-9
INTERVAL_SIDES = ("lo", "hi")


# ---------------------------------------------------------------------- levels and names
def check_levels(level: Any, *, argument: str = "level") -> tuple[float, ...]:
    """Interval levels as sorted, unique percentages strictly between 0 and 100 (``80`` or
    ``[80, 95]``; ``None`` → no levels); ConfigError naming ``argument`` otherwise."""
    if level is None:
        return ()
    if isinstance(level, (str, bytes, Mapping)):
        raise ConfigError(f"{argument} must be a percentage or a list of percentages in (0, 100), got {plain_repr(level)}")
    values = [level] if isinstance(level, numbers.Real) or np.ndim(level) == 0 else list(level)
    if not values:
        raise ConfigError(f"{argument} must not be empty (give e.g. [80, 95], or None for no intervals)")
    levels: dict[str, float] = {}  # by name: the names key the columns and scores (-lo-80, coverage_80)
    for value in values:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ConfigError(f"{argument} holds {plain_repr(value)}, which is not a number (levels are percentages, e.g. 80)")
        number = float(value)
        if not math.isfinite(number) or not 0.0 < number < 100.0:
            raise ConfigError(
                f"{argument} holds {plain_repr(value)}; a level is a percentage strictly between 0 and 100 (e.g. 80 or 95)"
            )
        name = level_name(number)
        if levels.get(name, number) != number:  # two levels, one name: their columns and scores would merge
            raise ConfigError(
                f"{argument} holds {levels[name]:.15g} and {number:.15g}, which both name the interval {name} "
                f"(columns -lo-{name} / -hi-{name}, score coverage_{name}); give levels that differ "
                "in their first 6 significant digits (e.g. 80 and 80.5)"
            )
        levels[name] = number
    return tuple(sorted(levels.values()))


def level_name(level: float) -> str:
    """``80.0`` → ``"80"``, ``97.5`` → ``"97.5"`` (as in the column and score names)."""
    return f"{float(level):g}"


def interval_column_name(column: str, side: str, level: float) -> str:
    """``interval_column_name("OT", "lo", 80)`` → ``"OT-lo-80"`` (neuralforecast's names)."""
    if side not in INTERVAL_SIDES:
        raise ConfigError(f"side must be one of {INTERVAL_SIDES}, got {side!r}")
    return f"{column}-{side}-{level_name(level)}"


def interval_columns(column: str, bounds: Mapping[float, tuple[np.ndarray, np.ndarray]], index: Any = ...) -> dict:
    """``{"<column>-lo-80": lo[index], "<column>-hi-80": hi[index], ...}`` for the levels of
    ``bounds`` (from :func:`forecast_intervals`), level by level, lower bound first.

    The helper of every long output: e.g. a backtest window ``k`` and variate ``j`` add
    ``interval_columns("forecast", bounds, (k, slice(None), j))`` to their piece."""
    columns = {}
    for level, (lo, hi) in bounds.items():
        columns[interval_column_name(column, "lo", level)] = lo[index]
        columns[interval_column_name(column, "hi", level)] = hi[index]
    return columns


def level_pairs(quantiles: Sequence[float] | None) -> tuple[tuple[float, float], ...]:
    """The symmetric pairs ``(τ, 1 − τ)`` among trained quantile levels, τ ascending (widest first)."""
    if not quantiles:
        return ()
    levels = [float(q) for q in quantiles]
    pairs = []
    for low in levels:
        if low < 0.5:
            high = next((q for q in levels if abs(q - (1.0 - low)) < _TOLERANCE), None)
            if high is not None:
                pairs.append((low, high))
    return tuple(pairs)


def pair_level(pair: tuple[float, float]) -> float:
    """The nominal level (percentage) of a pair ``(τ, 1 − τ)``: ``100 (1 − 2τ)``."""
    return round(100.0 * (pair[1] - pair[0]), 9)


# ---------------------------------------------------------------------- the conformal quantile
def conformal_rank(n: int, level: float) -> int:
    """``k = ceil((n + 1) · level / 100)``: the rank (1-based) of the conformal quantile among ``n``
    sorted scores; ConfigError when ``k > n`` (too few calibration windows for that level)."""
    x = (n + 1) * float(level) / 100.0
    k = max(1, math.ceil(round(x, 9)))
    if k > n:
        needed = math.ceil(round(float(level) / (100.0 - float(level)), 9))
        raise ConfigError(
            f"level={level_name(level)} needs at least {needed} calibration windows "
            f"(ceil((n + 1) * {level_name(level)} / 100) <= n); this calibration has {n}: calibrate on a longer "
            "split or ask for a lower level"
        )
    return k


def conformal_quantile(scores: np.ndarray, level: float, axis: int = 0) -> np.ndarray:
    """The finite-sample conformal quantile of ``scores`` along ``axis``: the
    ``ceil((n + 1) · level / 100)``-th smallest (``np.quantile`` at ``k / n``, method "inverted_cdf")."""
    scores = np.asarray(scores, dtype=np.float64)
    k = conformal_rank(scores.shape[axis], level)
    return np.take(np.sort(scores, axis=axis), k - 1, axis=axis)


# ---------------------------------------------------------------------- the calibration
@dataclass(frozen=True, eq=False)
class Calibration:
    """Conformity scores of one model on calibration windows (raw scale, sorted per cell).

    ``scores`` [1 + P, n, H, C_out]: index 0 the absolute residuals of the point forecast (the
    median of a quantile model), index 1 + p the CQR scores of ``pairs[p]``; each (kind, step,
    variate) sorted over its ``n`` windows. ``split`` names where the windows came from.

    JSON-ready through :meth:`to_saved` (``split``, ``windows``, ``pairs`` are plain JSON values;
    the scores an array, which the model directory keeps in ``calibration.npz``) and
    :meth:`from_saved`.
    """

    scores: np.ndarray
    pairs: tuple[tuple[float, float], ...] = ()
    split: str = "val"
    _kinds: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        scores = np.array(self.scores, dtype=np.float64)  # a copy: the caller's array stays theirs
        pairs = tuple((float(lo), float(hi)) for lo, hi in self.pairs)
        if scores.ndim != 4 or scores.shape[0] != 1 + len(pairs) or scores.shape[1] < 1:
            raise ConfigError(
                f"Calibration: scores of shape {scores.shape}; expected [1 + {len(pairs)} pairs, windows >= 1, "
                "steps, variates]"
            )
        if not np.isfinite(scores).all():
            raise DataError("Calibration: the scores hold NaN/inf (the calibration forecasts were not finite)")
        scores.sort(axis=1)
        scores.setflags(write=False)
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "pairs", pairs)
        object.__setattr__(self, "_kinds", {pair_level(p): 1 + i for i, p in enumerate(pairs)})

    @property
    def windows(self) -> int:
        return int(self.scores.shape[1])

    @property
    def horizon(self) -> int:
        return int(self.scores.shape[2])

    @property
    def n_outputs(self) -> int:
        return int(self.scores.shape[3])

    def pair(self, level: float) -> tuple[float, float] | None:
        """The trained pair ``((1 − a)/2, (1 + a)/2)`` of exactly ``level`` (its raw head is scored
        beside the interval: ``coverage_80_uncalibrated``), or None."""
        kind = self._kind(level)
        return None if kind == 0 else self.pairs[kind - 1]

    @property
    def interval_pair(self) -> tuple[float, float] | None:
        """The one pair whose CQR scores every level's interval uses: the narrowest trained pair
        (the heads nearest the median, the best estimated); None without pairs (residuals)."""
        return max(self.pairs, default=None)  # pairs are (τ, 1 − τ): the largest τ is the narrowest

    def method(self, level: float) -> str:
        """``"cqr"`` for a calibration with quantile pairs (every level), else ``"residual"``."""
        return "residual" if self.interval_pair is None else "cqr"

    def quantile(self, level: float) -> np.ndarray:
        """Q̂ [H, C_out]: the conformal quantile at ``level`` of the scores every level uses (the
        CQR scores of :attr:`interval_pair`, or the absolute residuals)."""
        pair = self.interval_pair
        kind = 0 if pair is None else self._kind(pair_level(pair))
        return self.scores[kind, conformal_rank(self.windows, level) - 1]

    def _kind(self, level: float) -> int:
        return next((kind for nominal, kind in self._kinds.items() if abs(nominal - float(level)) < 1e-6), 0)

    def to_saved(self) -> dict:
        """``{"split", "windows", "pairs", "scores"}``: what ``save_model_dir(calibration=...)`` writes."""
        return {"split": self.split, "windows": self.windows, "pairs": [list(p) for p in self.pairs],
                "scores": np.asarray(self.scores)}

    @classmethod
    def from_saved(cls, saved: Mapping[str, Any]) -> Calibration:
        """The Calibration of :meth:`to_saved`'s mapping (as ``load_model_dir`` returns it, validated)."""
        return cls(scores=saved["scores"], pairs=tuple(tuple(p) for p in saved["pairs"]), split=saved["split"])

    def describe(self) -> dict:
        """JSON-ready facts: split, windows, horizon, variates, the CQR levels."""
        return {"split": self.split, "windows": self.windows, "horizon": self.horizon, "variates": self.n_outputs,
                "cqr_levels": [pair_level(p) for p in self.pairs]}


def score_unit(predictor) -> np.ndarray | float:
    """What one unit of a calibration score is in the forecast's units: 1 for a single series; an
    entity's scaler scale of each output column for a many-entity model (module docstring)."""
    meta = predictor.meta
    if getattr(meta, "entity_col", None) is None:
        return 1.0
    return np.asarray(meta.scaler_scale, dtype=np.float64)[scored_slice(meta.features)]


def quantile_index(quantiles: Sequence[float], level: float) -> int:
    return next(i for i, q in enumerate(quantiles) if abs(float(q) - level) < _TOLERANCE)


# ---------------------------------------------------------------------- intervals of forecasts
def interval(point: np.ndarray, calibration: Calibration, level: float, *, quantile_values: np.ndarray | None = None,
             quantiles: Sequence[float] | None = None, unit: np.ndarray | float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi), each shaped like ``point`` [..., H, C_out]: the ``level`` % interval.

    ``quantile_values`` [..., Q, H, C_out] at ``quantiles`` are a quantile model's forecasts; a
    calibration with pairs needs them (CQR), one without gives the residual band around ``point``;
    either holds ``point``, and bands of one forecast are nested in the level (see the module
    docstring). ``unit``: the forecast units of one score unit (:func:`score_unit`). ``level``: one
    of the levels :func:`check_levels` gave."""
    point = np.asarray(point, dtype=np.float64)
    if point.shape[-2:] != (calibration.horizon, calibration.n_outputs):
        raise ConfigError(
            f"the forecast has {point.shape[-2:]} (steps, variates); the calibration has "
            f"({calibration.horizon}, {calibration.n_outputs})"
        )
    bound = calibration.quantile(level) * unit  # [H, C_out]
    pair = calibration.interval_pair
    if pair is None:
        return point - bound, point + bound
    if quantile_values is None or quantiles is None:
        raise ConfigError(f"level={level_name(level)}: the calibration is CQR's for the quantile levels {list(pair)}; "
                          "pass the model's quantile forecasts (quantile_values=, quantiles=)")
    low = np.asarray(quantile_values, dtype=np.float64)[..., quantile_index(quantiles, pair[0]), :, :]
    high = np.asarray(quantile_values, dtype=np.float64)[..., quantile_index(quantiles, pair[1]), :, :]
    # A negative Q̂ that would cross the ends leaves both at the pair's midpoint; the midpoint does not
    # depend on Q̂, so that even rounding keeps bands nested. The band holds the median, which shrinking may leave.
    middle = (low + high) / 2.0
    return np.minimum(np.minimum(low - bound, middle), point), np.maximum(np.maximum(high + bound, middle), point)


def require_calibration(predictor, levels: Sequence[float]) -> Calibration | None:
    """The predictor's calibration when ``levels`` are asked for (None when none are); ConfigError
    saying how to get one when the model has none or it does not fit the model."""
    if not levels:
        return None
    calibration = getattr(predictor, "calibration", None)
    if calibration is None:
        why = ("this model has no calibration (it was saved without one, by a damcha_ts before calibrated intervals "
               "or before refit=True models kept one, or fitted without validation windows)")
        names = " ".join(level_name(a) for a in levels)
        raise ConfigError(
            f"level=[{', '.join(level_name(a) for a in levels)}]: {why}; calibrate it on windows it did not train on "
            "with Forecaster.load(directory).calibrate(data) and save it again, or fit it again (Forecaster.fit and "
            "damcha-ts fit calibrate on the validation split)",
            cli=f"--level {names}: {why}; fit it again with damcha-ts fit, which calibrates on the validation split, "
                "or calibrate it in Python: Forecaster.load(directory).calibrate(data).save(new_directory)",
        )
    if (calibration.horizon, calibration.n_outputs) != (predictor.horizon, len(predictor.output_columns)):
        raise ConfigError(
            f"the calibration covers {calibration.horizon} steps x {calibration.n_outputs} variates; the model "
            f"forecasts {predictor.horizon} x {len(predictor.output_columns)}"
        )
    trained = level_pairs(predictor.quantiles)
    if any(p not in trained for p in calibration.pairs):
        raise ConfigError(f"the calibration's quantile pairs {list(calibration.pairs)} are not the model's {list(trained)}")
    for level in levels:
        conformal_rank(calibration.windows, level)  # enough windows for every level, before any forecast
    return calibration


def forecast_intervals(predictor, point: np.ndarray, quantile_values: np.ndarray | None,
                       levels: Sequence[float]) -> dict[float, tuple[np.ndarray, np.ndarray]]:
    """``{level: (lo, hi)}`` for forecasts of ``predictor`` (``point`` [..., H, C_out], and a
    quantile model's ``quantile_values`` [..., Q, H, C_out]) with its calibration at ``levels``, as
    :func:`check_levels` gave them; ``{}`` for no levels."""
    if not levels:
        return {}
    calibration = require_calibration(predictor, levels)
    unit = score_unit(predictor)
    bounds = {level: interval(point, calibration, level, quantile_values=quantile_values, quantiles=predictor.quantiles,
                              unit=unit) for level in levels}
    if getattr(predictor.meta, "nonnegative", False):  # Forecaster(nonnegative=True): intervals >= 0 too
        bounds = {level: (np.maximum(lo, 0.0), np.maximum(hi, 0.0)) for level, (lo, hi) in bounds.items()}
    return bounds


def with_intervals(predictor, forecast, levels: Sequence[float]):
    """A :class:`~damcha_ts.forecasting.Forecast` with its ``intervals`` (none when no levels)."""
    if not levels:
        return forecast
    bounds = forecast_intervals(predictor, forecast.point, forecast.levels, levels)
    return dataclasses.replace(forecast, intervals=bounds)


