"""Forecasts and scores of a many-entity model (data/entities.py): every entity, or some of them.

A many-entity model is one network; each entity has its own scalers (or all share one) and static
covariates, so each forecast runs through that entity's :class:`Predictor`
(``predictor.for_entity(name)``). Output frames carry the entity column first: wide (entity, time,
variates) or long (the input's long columns with the entity). ``evaluate`` reports each entity and
all of them pooled (every window of every entity counts once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.data.entities import check_entities, split_entities
from damcha_ts.errors import ConfigError

# Not yet for many entities (the note of issue 20 says so): each raises a ConfigError saying it.
NOT_YET = ("backtest", "cross_validation", "plot", "calibrate", "level")


def refuse_entities(predictor, action: str) -> None:
    """ConfigError when ``predictor`` is a many-entity model and ``action`` is not supported for it."""
    if predictor.entities:
        raise ConfigError(
            f"{action}: not supported yet for a model of many entities ({len(predictor.entities)} of them); "
            "fit/predict/evaluate work, per entity and pooled"
        )


def entity_tables(meta, data: Any, label: str = "data") -> dict[str, pd.DataFrame]:
    """``data`` (a frame or CSV with the model's entity column) cut into one table per entity."""
    from damcha_ts.data.frames import frame_label, read_csv_frame

    if isinstance(data, pd.DataFrame):
        table, label = (data.reset_index() if isinstance(data.index, pd.DatetimeIndex) else data), frame_label(data)
    else:
        table, label = read_csv_frame(data, sep=meta.input_options.get("sep")), str(data)
    present = [c for c in meta.static_covariates if c in map(str, table.columns)]
    entities, parts, _ = split_entities(table, meta.entity_col, label, present)
    return dict(zip(entities, parts))


def predict_entities(predictor, data: Any = None, *, entities: Sequence[str] | None = None, future: Any = None,
                     data_options: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """The forecast of every entity (or ``entities``) after its history (default: the stored one),
    one frame with the entity column first; ``future``: a frame with the entity column and the
    future covariates at each entity's forecast timestamps."""
    from damcha_ts.forecasting.history import future_values, history_from
    from damcha_ts.forecasting.output import format_forecast

    meta = predictor.meta
    tables = None if data is None else entity_tables(meta, data)
    known = predictor.entities if tables is None else [e for e in predictor.entities if e in tables]
    chosen = check_entities(predictor.entities, entities if entities is not None else known)
    futures = None if future is None else entity_tables(meta, future, "future")
    pieces = []
    for entity in chosen:
        one = predictor.for_entity(entity)
        if tables is None:
            if one.history is None:
                raise ConfigError("this model was saved without history; pass the history to predict(data)")
            values, stamps = one.history
        else:
            if entity not in tables:
                raise ConfigError(f"entity {entity!r} is not in the data given to predict()")
            values, stamps = history_from(one.meta, tables[entity], dict(data_options or {}))[2:]
        given = None if futures is None else futures.get(entity)
        if futures is not None and given is None:
            raise ConfigError(f"future= has no rows for entity {entity!r} (its {meta.entity_col!r} column)")
        rows = future_values(one.meta, given, one.future_timestamps(stamps[-1]))
        forecast = one.forecast_after(values, stamps, rows)
        wide = format_forecast(forecast, "wide", meta.input_options, meta.input_options.get("input_columns"))
        wide = wide.reset_index()
        wide.insert(0, meta.entity_col, entity)
        pieces.append(wide)
    frame = pd.concat(pieces, ignore_index=True)
    if meta.input_kind == "long":
        from damcha_ts.forecasting.output import long_names

        id_col, time_col, value_col = long_names(meta.input_options)
        frame = frame.melt(id_vars=[meta.entity_col, time_col], var_name=id_col, value_name=value_col)
    return frame


def evaluate_entities(predictor, series, split: str, batch_size: int) -> dict[str, Any]:
    """Scores of each entity of ``series`` (an EntitySeries) through its own predictor, and of all
    of them pooled: each metric the window-weighted mean of the entities' (exactly the mean over
    every window of every entity, since each entity's is the mean over its windows)."""
    per_entity = {}
    for entity in series.entities:
        one = series.entity(entity)
        if one.window_count(split) > 0:
            per_entity[entity] = predictor.for_entity(entity).evaluate(one, split, batch_size)
    if not per_entity:
        raise ConfigError(f"evaluate(): no entity has a {split} window")
    windows = np.array([scores["windows"] for scores in per_entity.values()], dtype=np.float64)
    pooled = {key: float(np.dot(windows, [s[key] for s in per_entity.values()]) / windows.sum())
              for key in ("mse", "mae", "mse_inverse", "mae_inverse") if key in next(iter(per_entity.values()))}
    return {"dataset": series.name, "split": split, **pooled, "windows": int(windows.sum()),
            "entities": {e: {k: v for k, v in s.items() if k not in ("dataset", "split")} for e, s in per_entity.items()}}
