"""``predict``: the forecast after a history, in the kind of that history (wide, long or NumPy)."""

from __future__ import annotations

from typing import Any

from damcha_ts.errors import ConfigError
from damcha_ts.forecasting.history import future_values, history_from
from damcha_ts.forecasting.output import format_forecast


def predict(predictor, data: Any = None, *, future: Any = None, level: Any = None, entities=None, **data_options: Any):
    """Forecast the ``horizon`` steps after the end of ``data`` (default: the predictor's history,
    written in the fit input's kind); ``data_options`` say how to read ``data`` (see
    :func:`damcha_ts.forecasting.history.load_history`). ``future``: the future covariates' values
    over the forecast steps (:func:`~damcha_ts.forecasting.history.future_values`). ``level``
    (percentages, e.g. ``[80, 95]``) adds the calibrated intervals (:mod:`damcha_ts.forecasting.intervals`).
    A many-entity model forecasts every entity, or ``entities`` (:mod:`damcha_ts.forecasting.entities`)."""
    from damcha_ts.forecasting.intervals import check_levels, require_calibration, with_intervals

    levels = check_levels(level)
    require_calibration(predictor, levels)
    if predictor.entities:
        from damcha_ts.forecasting.entities import predict_entities

        return predict_entities(predictor, data, entities=entities, future=future, level=levels,
                                data_options=data_options)
    if entities is not None:
        raise ConfigError("predict(entities=...): this model was fitted on one series, not many entities (entity_col=)")
    meta = predictor.meta
    if data is None:
        if data_options:
            raise ConfigError(
                f"predict(): {sorted(data_options)} only apply to new data (predict(data, ...)); the horizon is "
                f"fixed at fit time ({predictor.horizon} steps)"
            )
        values, stamps = stored_history(predictor)
        kind, input_options = meta.input_kind, meta.input_options
    else:
        kind, input_options, values, stamps = history_from(meta, data, data_options)
    future_rows = future_values(meta, future, predictor.future_timestamps(stamps[-1]))
    forecast = with_intervals(predictor, predictor.forecast_after(values, stamps, future_rows), levels)
    return format_forecast(forecast, kind, input_options, meta.input_options.get("input_columns"))


def stored_history(predictor):
    """(values [L, C], timestamps [L]) the predictor continues from without data."""
    if predictor.history is None:
        raise ConfigError("this model was saved without history; pass the history to predict(data)")
    return predictor.history
