"""What a many-entity model (data/panel.py) forecasts: every entity, or some of them.

A many-entity model is one network; each entity has its own scalers (or all share one) and static
covariates, so each forecast runs through that entity's :class:`Predictor`
(``predictor.for_entity(name)``). Output frames carry the entity column first: wide (entity, time,
variates) or long (the input's long columns with the entity). ``evaluate`` reports each entity and
all of them pooled (every window of every entity counts once: ``predictor.pooled_scores``);
``backtest`` and ``cross_validation`` count each entity's cutoffs from its own last row
(``cross_validation.rolling_forecasts``). Inside, ids are text; in what comes back they have the
dtype of the fit data's entity column (int ids stay int), and an error about one entity names it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.data.csv_files import frame_label, read_csv_frame
from damcha_ts.data.entities import check_entities, entity_errors, split_entities, typed_ids
from damcha_ts.errors import ConfigError
from damcha_ts.forecasting.history import load_history


def one_entity(predictor, entity: str | None, data: Any = None, future: Any = None, action: str = "plot") -> tuple:
    """(the predictor of ``entity``, its rows of ``data`` and ``future``) for what shows one series
    (``action``, e.g. "plot"): a many-entity model needs ``entity`` named (its table of ``data``, or its stored
    history without; its rows of a ``future`` with the entity column); a model of one series refuses
    one and keeps ``data`` and ``future`` as they are."""
    if not predictor.entities:
        if entity is not None:
            raise ConfigError(f"{action}(entity=...): this model was fitted on one series, not many entities "
                              "(entity_col=)")
        return predictor, data, future
    if entity is None:
        raise ConfigError(f"{action}(): this model has {len(predictor.entities)} entities; name one (entity=...), "
                          f"e.g. {predictor.entities[0]!r}")
    data = None if data is None else entity_tables(predictor.meta, data).get(entity)
    if future is not None and predictor.meta.entity_col in map(str, future.columns):
        future = entity_tables(predictor.meta, future, "future").get(entity)
    return predictor.for_entity(entity), data, future


def entity_tables(meta, data: Any, label: str = "data") -> dict[str, pd.DataFrame]:
    """``data`` (a frame or CSV with the model's entity column) cut into one table per entity. Its
    static covariate columns, when there, must hold the values the model was fitted with (they are
    part of the model; a changed value is an error, never ignored)."""
    if isinstance(data, pd.DataFrame):
        table, label = data, frame_label(data)
    else:
        table, label = read_csv_frame(data, sep=meta.input_options.get("sep")), str(data)
    present = [c for c in meta.static_covariates if c in map(str, table.columns)]
    entities, parts, statics = split_entities(table, meta.entity_col, label, present)
    for entity, values in zip(entities, [] if statics is None else statics):
        fitted = dict(zip(meta.static_covariates, meta.entity_scalers.get(entity, {}).get("static", [])))
        for column, value in zip(present, values):
            if column in fitted and not np.isclose(value, fitted[column]):
                raise ConfigError(f"{label}: static covariate {column!r} of entity {entity!r} is {value}; the model was "
                                  f"fitted with {fitted[column]} (static covariates are fixed at fit time: refit to change them)")
    return dict(zip(entities, parts))


def predict_inputs(predictor, data: Any = None, future: Any = None, entities: Sequence[str] | None = None) -> dict:
    """What :func:`~damcha_ts.forecasting.predict.predict` forecasts: ``{entity: (its history table,
    or None for the stored history; its future table or None)}`` for every entity of the model
    that ``data`` has (or ``entities``), checked: an id the model does not know, or an entity
    missing from the data or the future, is an error. A model of one series: its one entry,
    ``{None: (data, future)}``."""
    if not predictor.entities:
        if entities is not None:
            raise ConfigError("predict(entities=...): this model was fitted on one series, not many entities "
                              "(entity_col=)")
        return {None: (data, future)}
    meta = predictor.meta
    tables = None if data is None else entity_tables(meta, data)
    if tables is not None:
        unknown = [e for e in tables if e not in set(predictor.entities)]
        if unknown:  # never skipped silently
            raise ConfigError(f"entities {unknown[:10]} of the data were not in the fit data; the model knows "
                              f"{predictor.entities[:10]} (a new entity needs a model fitted with it)")
    known = predictor.entities if tables is None else [e for e in predictor.entities if e in tables]
    chosen = check_entities(predictor.entities, entities if entities is not None else known)
    futures = None if future is None else future_tables(predictor, future)
    for entity in chosen:
        if tables is not None and entity not in tables:
            raise ConfigError(f"entity {entity!r} is not in the data given to predict()")
        if futures is not None and entity not in futures:
            raise ConfigError(f"future= has no rows for entity {entity!r} (its {meta.entity_col!r} column)",
                              cli=f"--future has no rows for entity {entity!r} (its {meta.entity_col!r} column)")
    return {e: (None if tables is None else tables[e], None if futures is None else futures[e]) for e in chosen}


def future_tables(predictor, future: Any) -> dict[str, pd.DataFrame]:
    """``future`` cut into one table per entity; rows of an entity the model does not know are
    refused (a typo in an id would otherwise leave that entity's future unread, silently)."""
    tables = entity_tables(predictor.meta, future, "future")
    unknown = [e for e in tables if e not in set(predictor.entities)]
    if unknown:
        count = len(predictor.entities)
        detail = (f"has rows for the entities {unknown[:10]}, which the model was not fitted on (it knows "
                  f"{predictor.entities[:10]}{' ...' if count > 10 else ''}); give the future of its entities only "
                  f"(the {predictor.meta.entity_col!r} column)")
        raise ConfigError(f"future= {detail}", cli=f"--future {detail}")
    return tables


def with_typed_ids(frame: pd.DataFrame, meta) -> pd.DataFrame:
    """``frame`` with its entity column in the dtype of the fit data's ids (int ids stay int, so
    the forecast merges back on them)."""
    frame[meta.entity_col] = typed_ids(frame[meta.entity_col], meta.entity_dtype)
    return frame


def rolling_rows(predictor, panel=None, data: Any = None, data_options: Mapping[str, Any] | None = None):
    """(``{entity: (raw rows [T, K] of ``meta.history_columns``, timestamps [T])}``, the input's layout
    options) that backtest and cross-validation roll over: without ``data``, every series of the
    fitted ``panel``; else each entity's table in ``data`` of a many-entity model (laid out as its
    fit input), or the one series of ``data``. A model of one series has the one key None."""
    history = predictor.meta.history_columns
    if data is None:
        if panel is None:
            raise ConfigError("backtest() needs data: this model was loaded without its training series")
        return {None if panel.entity_col is None else entity: (one.history_rows(), one.timestamps)
                for entity, one in zip(panel.entities, panel.series)}, predictor.meta.input_options
    if not predictor.entities:
        _, input_options, frame = load_history(predictor.meta, data, dict(data_options or {}))
        return {None: (frame[history].to_numpy(dtype=np.float64), frame.index)}, input_options
    rows = {}
    for entity, table in entity_tables(predictor.meta, data).items():
        if entity not in predictor.entities:
            raise ConfigError(f"entity {entity!r} of the data is not one of the model's {predictor.entities[:10]}")
        with entity_errors(entity):
            frame = load_history(predictor.for_entity(entity).meta, table, dict(data_options or {}))[2]
        rows[entity] = (frame[history].to_numpy(dtype=np.float64), frame.index)
    return rows, None
