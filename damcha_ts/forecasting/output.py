"""Forecast arrays written back in the kind of the input: wide frame, long frame or NumPy.

The columns come back in the fit input's order (``input_columns``; the model keeps the target
last), quantile levels as extra columns (``OT_q0.1`` wide, ``value_q0.1`` long) or, for NumPy,
as ``{"point": [H, N], "quantiles": [Q, H, N]}``. Calibrated intervals (``level=``) add
``OT-lo-80`` / ``OT-hi-80`` (wide), ``value-lo-80`` / ``value-hi-80`` (long; named after the
forecast column) or the keys ``"lo-80"`` / ``"hi-80"`` (NumPy, with ``"point"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from damcha_ts.forecasting.intervals import interval_column_name, level_name
from damcha_ts.forecasting.predictor import Forecast


def format_forecast(forecast: Forecast, kind: str, input_options: Mapping[str, Any], input_columns: Sequence[str] | None):
    """A :class:`Forecast` -> ``kind`` (``"wide"``, ``"long"`` or ``"numpy"``), its columns in the
    order of ``input_columns`` (the fit input's variates; None: the model's order).

    ``input_options`` name the long layout's columns (``id_col``, ``time_col``, ``value_col``,
    ``order``) and the wide frame's index (``time_col``).
    """
    from damcha_ts.models.quantiles import quantile_column_name, quantile_columns

    columns, future = forecast.columns, forecast.timestamps
    position = {c: i for i, c in enumerate(columns)}  # a dict: linear in the columns
    order = [position[c] for c in list(input_columns or columns) if c in position]
    point, columns = forecast.point[:, order], [columns[i] for i in order]
    levels = None if forecast.levels is None else forecast.levels[..., order]
    bounds = {a: (lo[:, order], hi[:, order]) for a, (lo, hi) in (forecast.intervals or {}).items()}
    if kind == "numpy":
        if levels is None and not bounds:
            return point
        result = {"point": point} if levels is None else {"point": point, "quantiles": levels}
        for a, (lo, hi) in bounds.items():
            result[f"lo-{level_name(a)}"], result[f"hi-{level_name(a)}"] = lo, hi
        return result
    wide = pd.DataFrame(point, index=future, columns=columns)
    if kind == "long":
        long = wide_to_long(wide, input_options)
        value_col = input_options.get("value_col", "value")
        extras = {} if levels is None else {
            quantile_column_name(value_col, level): values for level, values in zip(forecast.quantiles, levels)}
        for a, (lo, hi) in bounds.items():
            extras[interval_column_name(value_col, "lo", a)] = lo
            extras[interval_column_name(value_col, "hi", a)] = hi
        for name, values in extras.items():
            # Same melt as the point frame, so the rows line up.
            melted = wide_to_long(pd.DataFrame(values, index=future, columns=columns), input_options)
            long[name] = melted[value_col].to_numpy()
        return long
    if levels is not None:
        extra = pd.DataFrame(quantile_columns(columns, forecast.quantiles, levels), index=future)
        wide = pd.concat([wide, extra], axis=1)
    if bounds:
        extra = {interval_column_name(column, side, a): values[:, c]
                 for c, column in enumerate(columns) for a, pair in bounds.items()
                 for side, values in zip(("lo", "hi"), pair)}
        wide = pd.concat([wide, pd.DataFrame(extra, index=future)], axis=1)
    wide.index.name = input_options.get("time_col") or "date"
    return wide


def long_names(input_options: Mapping[str, Any]) -> tuple[str, str, str]:
    """(id, time, value) column names of the input's long layout (defaults ``id``, ``date``, ``value``)."""
    return (input_options.get("id_col", "id"), input_options.get("time_col") or "date",
            input_options.get("value_col", "value"))


def wide_to_long(wide: pd.DataFrame, input_options: Mapping[str, Any]) -> pd.DataFrame:
    id_col, time_col, value_col = long_names(input_options)
    long = wide.rename_axis(time_col).reset_index().melt(id_vars=time_col, var_name=id_col, value_name=value_col)
    return long[list(input_options.get("order") or (id_col, time_col, value_col))]
