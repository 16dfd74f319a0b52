"""``Predictor``: a fitted model with its saved scaler and time-mark convention.

    >>> predictor = Predictor.load("my_model")                          # doctest: +SKIP
    >>> point, levels = predictor.forecast(histories, [stamps, ...])   # doctest: +SKIP

It works on arrays in the model's column order (``meta.columns``, the target last in ``MS`` mode):
raw-scale histories ``[B, L, C]`` and their timestamps in, raw-scale forecasts ``[B, H, C_out]``
out (``C_out``: every column, or the target alone in ``MS`` mode, see
:func:`damcha_ts.data.protocol.scored_slice`), and for a quantile model the levels
``[B, Q, H, C_out]``, whose median is the point forecast. A forecast that is not finite is an error
naming its likely cause, never a result. Reading user input and writing the output in the input's
kind are the jobs of ``history.py`` and ``output.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.data import time_features
from damcha_ts.data.entities import typed_ids
from damcha_ts.data.protocol import scored_slice
from damcha_ts.errors import ConfigError, DataError
from damcha_ts.forecasting.intervals import Calibration, require_calibration
from damcha_ts.forecasting.window_scores import split_scores


@dataclass
class Forecast:
    """The forecast of the ``horizon`` steps after one history (model column order)."""

    point: np.ndarray  # [H, C_out], raw scale; the median for a quantile model
    levels: np.ndarray | None  # [Q, H, C_out] in the order of ``quantiles``, or None
    timestamps: pd.DatetimeIndex  # [H], the steps after the history's last timestamp
    columns: list[str]  # the C_out column names
    quantiles: tuple[float, ...] | None = None
    # {level (percent): (lo [H, C_out], hi [H, C_out])}, calibrated (forecasting/intervals.py), or None
    intervals: dict | None = None


class Predictor:
    """Forecasts of ``model`` with the scaler and time marks of the data in ``meta``.

    Args:
        model: the fitted network, ``(x [B, L, C], x_mark [B, L, M]) -> [B, H, C]``, or a
            ``QuantileForecastModel`` (``-> [B, Q, H, C]``), in eval mode.
        meta: the :class:`~damcha_ts.training.metadata.SeriesMeta` of its training data
            (columns, frequency, features mode, scaler mean/scale, time-mark frequency).
        quantiles: the model's levels (default: those of a ``QuantileForecastModel``).
        history: ``(values [L, C], timestamps [L])`` to continue from by default, or None.
        calibration: the :class:`~damcha_ts.forecasting.intervals.Calibration` its intervals come
            from (``level=``), or None.
        fit_record: how the model was fitted (:class:`~damcha_ts.forecasting.estimator.FitRecord`:
            the training facts, the fitted config, the panel), or None.

    A many-entity model's Predictor forecasts through ``for_entity(name)`` (each entity's scalers
    and static covariates); its ``history`` is then ``{entity: (values, timestamps)}``.
    """

    def __init__(self, model, meta, quantiles: Sequence[float] | None = None, history=None, calibration=None,
                 fit_record=None):
        own = getattr(model, "quantiles", None)
        if quantiles is not None and own is not None and tuple(map(float, quantiles)) != tuple(own):
            raise ConfigError(f"Predictor: quantiles {list(quantiles)} differ from the model's {list(own)}")
        levels = own if quantiles is None else quantiles
        self.model = model
        self.meta = meta
        self.quantiles = None if levels is None else tuple(float(q) for q in levels)
        self.history = history
        self.calibration = calibration
        self.fit_record = fit_record

    @classmethod
    def load(cls, directory: str | Path, map_location: str = "cpu") -> Predictor:
        """The Predictor of a saved model directory (or of a run folder's ``model/``), with its history."""
        from damcha_ts.training.artifacts import load_model_dir, model_directory

        return cls.from_saved(load_model_dir(model_directory(directory), map_location=map_location))

    @classmethod
    def from_saved(cls, loaded) -> Predictor:
        """The Predictor of a :class:`~damcha_ts.training.artifacts.LoadedModel`."""
        saved = getattr(loaded, "calibration", None)
        calibration = None if saved is None else Calibration.from_saved(saved)
        return cls(loaded.model, loaded.meta, history=saved_history(loaded), calibration=calibration)

    def save(self, directory: str | Path, *, training: Mapping[str, Any], metrics: Mapping[str, Any] | None = None) -> Path:
        """Write this model, its data description, history and calibration as a saved model directory
        (``training``: the TrainingConfig's dict, ``metrics``: what its forecaster.json reports)."""
        from damcha_ts.training.artifacts import history_arguments, save_model_dir

        calibration = None if self.calibration is None else self.calibration.to_saved()
        return save_model_dir(directory, self.model, self.meta, training=training, metrics=metrics,
                              calibration=calibration, **history_arguments(self.history, self.meta))

    # ------------------------------------------------------------------ what it forecasts
    @property
    def horizon(self) -> int:
        return int(self.meta.pred_len)

    @property
    def lookback(self) -> int:
        return int(self.meta.seq_len)

    @property
    def output_columns(self) -> list[str]:
        """The forecast's columns (C_out), model order: all of them, or the target alone in ``MS`` mode."""
        return list(self.meta.columns[scored_slice(self.meta.features)])

    @property
    def device(self):
        from damcha_ts.models.base import model_device  # torch: loaded with a model

        return model_device(self.model)

    def future_timestamps(self, last: pd.Timestamp) -> pd.DatetimeIndex:
        """The ``horizon`` timestamps after ``last`` at the fitted frequency."""
        return pd.date_range(start=last, periods=self.horizon + 1, freq=self.meta.freq, name="date")[1:]

    # ------------------------------------------------------------------ forecasting
    def for_entity(self, entity: str) -> Predictor:
        """The Predictor of one entity of a many-entity model (its scalers and static covariates;
        its stored history, when there is one); a model of one series is its own one entity's."""
        if not self.entities:
            return self
        entity = str(entity)  # ids are text (the entity column is read as text)
        history = None if self.history is None else self.history.get(entity)  # {entity: (values, timestamps)}
        return Predictor(self.model, self.meta.for_entity(entity), self.quantiles, history=history,
                         calibration=self.calibration)

    @property
    def entities(self) -> list[str]:
        """The entities of a many-entity model ([] for one series)."""
        return list(getattr(self.meta, "entities", []))

    @property
    def future_covariates(self) -> list[str]:
        """The covariates whose values over the horizon a forecast needs (``future=``)."""
        return list(getattr(self.meta, "future_covariates", []))

    def forecast(
        self, histories: np.ndarray, timestamps: Sequence[pd.DatetimeIndex], future: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Raw-scale histories [B, L, K] (the ``meta.history_columns``: model columns, then the
        covariates) and their timestamps -> raw forecasts. ``future`` [B, H, F]: the raw values of
        the future covariates over the horizon, needed when the model has any.

        Returns (point [B, H, C_out], levels [B, Q, H, C_out] or None for a point model).
        """
        import torch

        from damcha_ts.models.quantiles import median_index

        meta = self.meta
        histories = np.asarray(histories, dtype=np.float64)
        expected = (self.lookback, len(meta.history_columns))
        if histories.ndim != 3 or histories.shape[1:] != expected or len(timestamps) != len(histories):
            raise DataError(
                f"forecast() got histories of shape {histories.shape} and {len(timestamps)} timestamp indexes; "
                f"the model reads [B, {expected[0]}, {expected[1]}] (lookback rows of {list(meta.history_columns)}) "
                "with one index per history"
            )
        n_columns = len(meta.columns)
        mean, scale = np.asarray(meta.scaler_mean), np.asarray(meta.scaler_scale)
        scaled = (histories[..., :n_columns] - mean) / scale
        marks = _window_marks(timestamps, meta.time_features_freq or meta.freq, self.lookback)
        device = self.device
        as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float32, device=device)  # noqa: E731
        with torch.no_grad():
            out = self.model(as_tensor(scaled), as_tensor(marks), self._covariates(histories, future, as_tensor))
            out = out.double().cpu().numpy()  # [B, H, C], or [B, Q, H, C] for a quantile model
        # Variates are the last axis either way; scale > 0 keeps the quantiles in order.
        scored = scored_slice(meta.features)
        out = out[..., scored] * scale[scored] + mean[scored]
        check_finite_forecast(out, scaled, self.model, self.output_columns)
        if getattr(meta, "nonnegative", False):
            out = np.maximum(out, 0.0)  # counts, sales: never below 0 (quantiles stay in order)
        if self.quantiles is None:
            return out, None
        return out[:, median_index(self.quantiles)], out

    def _covariates(self, histories: np.ndarray, future: np.ndarray | None, as_tensor):
        """The model's :class:`~damcha_ts.models.base.Covariates` from the covariate columns of raw
        ``histories`` [B, L, K] and ``future`` [B, H, F], scaled with the saved covariate scaler."""
        from damcha_ts.models.base import Covariates

        meta = self.meta
        past_names, future_names = list(getattr(meta, "past_covariates", [])), self.future_covariates
        if not future_names and future is not None:
            raise DataError("future covariate values were given, but this model was fitted without future covariates")
        static = None
        if getattr(meta, "static_covariates", None):  # one entity's (SeriesMeta.for_entity)
            if not meta.static_values:
                raise ConfigError("this model reads static covariates: forecast through the Predictor of one entity "
                                  "(predictor.for_entity(name))")
            values = (np.asarray(meta.static_values) - np.asarray(meta.static_mean)) / np.asarray(meta.static_scale)
            static = as_tensor(np.broadcast_to(values, (len(histories), len(values))).copy())
        if not past_names and not future_names:
            return None if static is None else Covariates(static=static)
        if not future_names:
            future_scaled = None
        else:
            if future is None:
                raise DataError(
                    f"this model reads the future covariates {future_names}: give their values over the {self.horizon} "
                    "forecast steps (predict(future=frame): one row per future timestamp, those columns)"
                )
            future = np.asarray(future, dtype=np.float64)
            if future.shape != (len(histories), self.horizon, len(future_names)):
                raise DataError(f"future covariate values have shape {future.shape}; expected "
                                f"[{len(histories)}, {self.horizon}, {len(future_names)}] ({future_names} over the horizon)")
            if not np.isfinite(future).all():
                raise DataError(f"the future covariate values {future_names} hold NaN/inf")
        columns = len(meta.columns)
        covariate_rows = (histories[..., columns:] - np.asarray(meta.covariate_mean)) / np.asarray(meta.covariate_scale)
        n_past = len(past_names)
        if future_names:
            future_mean = np.asarray(meta.covariate_mean[n_past:])
            future_scale = np.asarray(meta.covariate_scale[n_past:])
            future_scaled = np.concatenate([covariate_rows[..., n_past:], (future - future_mean) / future_scale], axis=1)
        return Covariates(past=as_tensor(covariate_rows[..., :n_past]) if n_past else None,
                          future=None if future_scaled is None else as_tensor(future_scaled), static=static)

    def forecast_after(self, values: np.ndarray, timestamps: pd.DatetimeIndex, future: np.ndarray | None = None) -> Forecast:
        """One history ([L, K] raw values of ``meta.history_columns``, [L] timestamps; ``future`` [H, F]
        the future covariates' values) -> the forecast of the steps after it."""
        point, levels = self.forecast(np.asarray(values, dtype=np.float64)[None], [timestamps],
                                      None if future is None else np.asarray(future, dtype=np.float64)[None])
        return Forecast(point=point[0], levels=None if levels is None else levels[0],
                        timestamps=self.future_timestamps(timestamps[-1]), columns=self.output_columns,
                        quantiles=self.quantiles)

    def evaluate(self, panel, split: str, batch_size: int, levels: tuple[float, ...] = (), *,
                 season_length: int | None = None) -> dict[str, Any]:
        """MSE/MAE over every window of ``split`` of a prepared panel (data/panel.py), each entity's
        through its own predictor (:meth:`for_entity`) and scaler (:meth:`evaluate_series`); with an
        entity column, each entity's scores and all of them pooled (:func:`pooled_scores`).
        ``levels``: as :func:`~damcha_ts.forecasting.intervals.check_levels` gave them;
        ``season_length``: MASE's season (default: the frequency's, :func:`evaluate_series`)."""
        per_entity = {}
        for entity, one in zip(panel.entities, panel.series):
            if one.window_count(split) > 0:
                with panel.errors_of(entity):
                    per_entity[entity] = self.for_entity(entity).evaluate_series(one, split, batch_size, levels,
                                                                                 season_length=season_length)
        if not per_entity:
            raise ConfigError(f"evaluate(): no series of {panel.name} has a {split} window")
        return pooled_scores(panel, per_entity, split, getattr(self.meta, "entity_dtype", None))

    def evaluate_series(self, series, split: str, batch_size: int, levels=(), *,
                        season_length: int | None = None) -> dict[str, Any]:
        """MSE/MAE over every window of ``split`` of one prepared series (its own scaler), z-scale and
        original scale; a quantile model is scored on its median.

        On the original scale through this predictor (its saved scaler), as ``predict`` forecasts:
        ``mase`` (scaled by each variate's seasonal naive MAE over the series' train rows; season
        from the frequency, or ``season_length``), ``smape`` (0–2), ``rmse`` and, for a quantile
        model, ``scaled_crps`` (:mod:`damcha_ts.forecasting.scores`).
        With ``levels`` (checked percentages, e.g. ``[80, 95]``) the calibrated intervals and the quantiles are
        scored too: ``coverage_80``, ``width_80``, ``scaled_crps_intervals``, and for a quantile model
        ``coverage_80_uncalibrated``, ``pinball_loss`` and ``wql`` (see
        :func:`damcha_ts.forecasting.window_scores.split_scores`)."""
        from damcha_ts.data.time_index import season_length_of
        from damcha_ts.training.evaluation import evaluate_loader, scored_scaler, split_loader, summary

        require_calibration(self, levels)  # before any forecast
        season_length_of(self.meta.freq, season_length)  # checked before any forecast too
        loader = split_loader(series, split, batch_size=batch_size)
        errors = evaluate_loader(
            self.model, loader, scaler=scored_scaler(series), device=self.device, target_only=series.target_only,
            nonnegative=bool(getattr(self.meta, "nonnegative", False)),
        )
        scores = summary(errors)
        if not all(np.isfinite(scores[k]) for k in ("mse", "mae")):
            raise DataError(
                f"the {split} MSE/MAE on {series.name} are not finite (MSE {scores['mse']}, MAE {scores['mae']}): "
                + non_finite_cause(self.model)
            )
        scores.update(split_scores(self, series, split, levels, season_length=season_length, batch_size=batch_size))
        return {"dataset": series.name, "split": split, **scores}


def pooled_scores(panel, per_entity: dict[str, dict], split: str, id_dtype: str | None) -> dict[str, Any]:
    """The scores of ``panel``: of its one series as they are, or (with an entity column) of each
    entity and of all of them pooled: each metric the window-weighted mean of the entities' (exactly
    the mean over every window of every entity, since each entity's is the mean over its windows and
    cells); ``rmse``, the root of the window-weighted mean of their squares (the pooled RMSE);
    ``mase`` and the scaled CRPS, ratios per series, the plain mean of the entities' (the M4/M5
    convention, :func:`damcha_ts.forecasting.scores.pooled`); ``wql``, a ratio of sums, stays per
    entity. Ids come back in ``id_dtype`` (the fit data's)."""
    from damcha_ts.forecasting.scores import pooled

    if panel.entity_col is None:
        return next(iter(per_entity.values()))
    windows = sum(scores["windows"] for scores in per_entity.values())
    ids = typed_ids(pd.Series(list(per_entity), dtype=object), id_dtype).tolist()
    return {"dataset": panel.name, "split": split, **pooled(list(per_entity.values())), "windows": int(windows),
            "entities": {i: {k: v for k, v in s.items() if k not in ("dataset", "split")}
                         for i, s in zip(ids, per_entity.values())}}


def _window_marks(timestamps: Sequence[pd.DatetimeIndex], freq: str, lookback: int) -> np.ndarray:
    """Time marks [B, L, M] of B windows' timestamps: computed once over all of them (the features
    are per timestamp; one call per window made evaluate() ten times slower)."""
    stamps = [pd.DatetimeIndex(one) for one in timestamps]
    if any(len(one) != lookback for one in stamps):
        raise DataError(f"forecast() needs {lookback} timestamps per history; got {sorted({len(one) for one in stamps})}")
    marks, _ = time_features(stamps[0].append(stamps[1:]) if len(stamps) > 1 else stamps[0], freq)
    return marks.reshape(len(stamps), lookback, marks.shape[-1])


def saved_history(loaded):
    """What a loaded model continues from, in the form a fit leaves it (``Panel.history``):
    ``(values, timestamps)`` of a model of one series, ``{entity: (values, timestamps)}`` of a model
    of many entities (as its history file is read back), or None when it was saved without."""
    if loaded.history_values is None or loaded.meta.entities:
        return loaded.history_values
    return loaded.history_values, loaded.history_timestamps


def check_finite_forecast(forecast: np.ndarray, scaled_history: np.ndarray, model, columns: Sequence[str]) -> None:
    """The last line of defence: a NaN/inf forecast ([..., H, N]) is an error, never a result."""
    bad = ~np.isfinite(forecast)
    if not bad.any():
        return
    steps = np.flatnonzero(bad.any(axis=tuple(a for a in range(bad.ndim) if a != bad.ndim - 2))) + 1
    variates = [columns[j] for j in np.flatnonzero(bad.any(axis=tuple(range(bad.ndim - 1))))]
    raise DataError(
        f"the forecast holds NaN/inf for variates {_briefly(variates)} at steps {_briefly(steps)} "
        f"(of {forecast.shape[-2]}): {non_finite_cause(model, scaled_history)}"
    )


def _briefly(items, limit: int = 10) -> str:
    items = [str(i) for i in items]
    return ", ".join(items[:limit]) + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def non_finite_cause(model, scaled_history: np.ndarray | None = None) -> str:
    """The likely reason a model's output is not finite, for the error message."""
    import torch

    if scaled_history is not None and not np.isfinite(scaled_history).all():
        return ("the history, scaled by the saved scaler, holds NaN/inf (check the history's values and "
                "data.scaler_mean / data.scaler_scale in forecaster.json)")
    broken = [name for name, tensor in model.state_dict().items()
              if tensor.is_floating_point() and not torch.isfinite(tensor).all()]
    if broken:
        return (f"the model's weights hold NaN/inf ({_briefly(broken, 3)}): its training diverged; retrain it "
                "(e.g. with a lower learning rate)")
    return "the model overflowed on this input (values far outside the range it was trained on?)"
