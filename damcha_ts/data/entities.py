"""Entity ids (stores, stations, sensor sites): a table cut into one table per entity, the ids a
caller names checked against the known ones, their dtype on the way back, and errors that name
the entity. The prepared entities themselves are a :class:`damcha_ts.data.panel.Panel`.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.errors import ConfigError, DamchaError, DataError

SCALERS = ("entity", "global")


def check_scaler(scaler: Any) -> str:
    if scaler not in SCALERS:
        raise ConfigError(f"scaler must be one of {SCALERS} (per entity, or one over all entities), got {scaler!r}")
    return scaler


def check_entities(known: Sequence[str], wanted: Sequence[str] | None) -> list[str]:
    """``wanted`` (None: all of ``known``), each one an entity of the model, once (ConfigError
    naming it; an empty list is refused, never an empty forecast)."""
    if wanted is None:
        return list(known)
    if isinstance(wanted, str) or not isinstance(wanted, (list, tuple, set, pd.Index, np.ndarray)):
        wanted = [wanted]  # one entity; ids are compared as text (the entity column is read as text)
    wanted = [str(e) for e in wanted]
    if not wanted:
        raise ConfigError(f"entities=[] names no entity: name at least one of the {len(known)} entities, or give "
                          "entities=None for all of them")
    repeated = sorted(e for e, n in Counter(wanted).items() if n > 1)
    if repeated:  # refused rather than merged: a repeated id is more likely a typo than a wish
        raise ConfigError(f"entities= names {repeated} more than once; name each entity once")
    unknown = [e for e in wanted if e not in set(known)]
    if unknown:
        shown = list(known)[:10]
        raise ConfigError(f"entities {unknown} are not among the {len(known)} entities the model knows "
                          f"({shown}{' ...' if len(known) > 10 else ''})")
    return wanted


def id_dtype_of(dtype: Any) -> str | None:
    """The dtype entity ids come back in (forecasts, scores) when their column had ``dtype``: a
    numeric one stays (int ids stay int, so a forecast merges back on them); None, text, for any
    other (inside, ids are text)."""
    try:
        dtype = pd.api.types.pandas_dtype(dtype)
    except (TypeError, ValueError):
        return None
    return str(dtype) if dtype.kind in "iuf" else None


def typed_ids(ids: pd.Series, dtype: str | None) -> pd.Series:
    """Text ``ids`` back in ``dtype`` (:func:`id_dtype_of`; None: left as text)."""
    return ids if dtype is None else pd.to_numeric(ids).astype(dtype)


@contextlib.contextmanager
def entity_errors(entity: str, label: str | None = None) -> Iterator[None]:
    """A DamchaError raised inside says which entity (of ``label``) it is about: the same error type,
    its command-line wording kept."""
    try:
        yield
    except DamchaError as exc:
        where = f"entity {entity!r}" + (f" of {label}" if label else "")
        raise type(exc)(f"{where}: {exc}", cli=None if exc.cli is None else f"{where}: {exc.cli}") from exc


def errors_of(entity_col: str | None, entity: str):
    """:func:`entity_errors` of ``entity`` when there is an entity column; a single series' errors
    (``entity_col`` None) stay as they are."""
    return contextlib.nullcontext() if entity_col is None else entity_errors(entity)


def split_entities(frame: pd.DataFrame, entity_col: str, label: str, static: Sequence[str] = ()) -> tuple[
        list[str], list[pd.DataFrame], np.ndarray | None]:
    """(entities in order of first appearance, one frame per entity without the entity and static
    columns, static values [E, S] or None): ``frame`` cut by ``entity_col``. DataError naming the
    column, entity and values when the entity column is missing or empty, or a static column varies."""
    columns = [str(c) for c in frame.columns]
    if entity_col not in columns:
        raise DataError(f"{label}: entity column {entity_col!r} not found; columns are {columns}")
    missing = [c for c in static if c not in columns]
    if missing:
        raise DataError(f"{label}: static_covariates {missing} are not columns; columns are {columns}")
    ids = frame[entity_col]
    if ids.isna().any():
        row = int(np.flatnonzero(ids.isna().to_numpy())[0])
        raise DataError(f"{label}: entity column {entity_col!r} is empty at row {row}")
    ids = ids.astype(str)
    entities = [str(e) for e in pd.unique(ids)]
    parts, statics = [], []
    for entity in entities:
        part = frame[(ids == entity).to_numpy()]
        values = []
        for column in static:
            distinct = pd.unique(part[column])
            if len(distinct) != 1:
                raise DataError(f"{label}: static covariate {column!r} is not constant for entity {entity!r} "
                                f"(it takes {list(distinct[:3])}{' ...' if len(distinct) > 3 else ''}); a static "
                                "covariate has one value per entity (else make it a past or future covariate)")
            values.append(distinct[0])
        statics.append(values)
        part = part.drop(columns=[entity_col, *static])
        if not isinstance(part.index, pd.DatetimeIndex):
            part = part.reset_index(drop=True)  # a time column holds the timestamps
        part.attrs = {}  # its rows are no longer the file's: errors name the entity instead
        parts.append(part)
    static_values = None
    if static:
        try:
            static_values = np.asarray(statics, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"{label}: static covariates {list(static)} must be numbers: {exc}") from exc
        bad = np.argwhere(~np.isfinite(static_values))
        if bad.size:
            i, j = (int(v) for v in bad[0])
            raise DataError(f"{label}: static covariate {static[j]!r} of entity {entities[i]!r} is "
                            f"{static_values[i, j]}; every entity needs a finite value")
    return entities, parts, static_values
