"""``predict``: the forecast after a history, in the kind of that history (wide, long or NumPy)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from damcha_ts.data.entities import errors_of
from damcha_ts.errors import ConfigError
from damcha_ts.forecasting.entities import predict_inputs, with_typed_ids
from damcha_ts.forecasting.history import future_values, history_from
from damcha_ts.forecasting.intervals import check_levels, require_calibration, with_intervals
from damcha_ts.forecasting.output import format_forecast


def predict(predictor, data: Any = None, *, future: Any = None, level: Any = None, entities=None, **data_options: Any):
    """Forecast the ``horizon`` steps after the end of ``data`` (default: the predictor's history,
    written in the fit input's kind); ``data_options`` say how to read ``data`` (see
    :func:`damcha_ts.forecasting.history.load_history`). ``future``: the future covariates' values
    over the forecast steps (:func:`~damcha_ts.forecasting.history.future_values`). ``level``
    (percentages, e.g. ``[80, 95]``) adds the calibrated intervals (:mod:`damcha_ts.forecasting.intervals`).
    Every entity of the model is forecast the same way, through its own predictor, or ``entities``
    (:func:`damcha_ts.forecasting.entities.predict_inputs`); :func:`framed` writes them out."""
    levels = check_levels(level)
    require_calibration(predictor, levels)
    if data is None and data_options:
        raise ConfigError(
            f"predict(): {sorted(data_options)} only apply to new data (predict(data, ...)); the horizon is "
            f"fixed at fit time ({predictor.horizon} steps)"
        )
    meta, forecasts = predictor.meta, {}
    for entity, (table, future_table) in predict_inputs(predictor, data, future, entities).items():
        one = predictor.for_entity(entity)
        if table is None:
            (values, stamps), kind, input_options = stored_history(one), meta.input_kind, meta.input_options
        with errors_of(getattr(meta, "entity_col", None), entity):  # one entity's short or broken history names it
            if table is not None:
                kind, input_options, values, stamps = history_from(one.meta, table, data_options)
            rows = future_values(one.meta, future_table, one.future_timestamps(stamps[-1]))
            forecasts[entity] = (with_intervals(one, one.forecast_after(values, stamps, rows), levels), kind,
                                 input_options)
    return framed(meta, forecasts)


def framed(meta, forecasts: dict) -> Any:
    """The output of ``{entity: (Forecast, input kind, input options)}``: of a model of one series,
    its forecast in the kind of its input (wide, long or NumPy, :func:`format_forecast`); of many
    entities, one frame laid out as the fit input (wide or long) with the entity column first and
    the ids in the fit data's dtype."""
    columns = meta.input_options.get("input_columns")
    if getattr(meta, "entity_col", None) is None:
        ((forecast, kind, input_options),) = forecasts.values()
        return format_forecast(forecast, kind, input_options, columns)
    kind = "long" if meta.input_kind == "long" else "wide"
    pieces = []
    for entity, (forecast, _, _) in forecasts.items():
        piece = format_forecast(forecast, kind, meta.input_options, columns)
        piece = piece.reset_index() if kind == "wide" else piece.reset_index(drop=True)
        piece.insert(0, meta.entity_col, entity)
        pieces.append(piece)
    return with_typed_ids(pd.concat(pieces, ignore_index=True), meta)


def stored_history(predictor):
    """(values [L, C], timestamps [L]) the predictor continues from without data."""
    if predictor.history is None:
        raise ConfigError("this model was saved without history; pass the history to predict(data)")
    return predictor.history
