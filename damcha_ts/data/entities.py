"""Many entities (stores, stations, sensor sites) with the same variates, trained as one model.

A table with an entity column (``entity_col="store"``) holds one multivariate series per entity.
:func:`prepare_entities` applies the protocol to each entity on its own, as :func:`prepare` does to
one series: its own time index, length and start (ragged lengths are fine as long as every split
of every entity holds a window), its own split by time and, with ``scaler="entity"`` (the
default), its own scaler; ``scaler="global"`` fits one scaler on the train rows of all entities.
Training draws windows from every entity (:class:`EntityWindows`).

Static covariates are columns constant within each entity (a store's size, a station's altitude):
one value per entity, z-scored over the entities, given to the model as one more token.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from damcha_ts.data.scaling import StandardScaler
from damcha_ts.errors import ConfigError, DamchaError, DataError

if TYPE_CHECKING:
    from damcha_ts.data.protocol import SeriesData

SCALERS = ("entity", "global")


@dataclass
class EntitySeries:
    """The prepared series of every entity, with the surface training reads from one series
    (``windows``, ``window_count``, ``columns``...), so the trainer needs no second code path."""

    entity_col: str
    entities: list[str]
    series: list[SeriesData]  # one per entity, in ``entities`` order
    scaler: str  # "entity" or "global"
    static_columns: list[str]
    static_values: np.ndarray | None  # [E, S] raw, or None without static covariates
    static_scaler: StandardScaler | None
    id_dtype: str | None = None  # what the ids come back as (:func:`id_dtype_of`); inside they are text

    # -- what every entity shares (the first one speaks for all) -----------------------------
    def __getattr__(self, name: str):
        if name in _SHARED:
            return getattr(self.series[0], name)
        raise AttributeError(name)

    @property
    def name(self) -> str:
        return f"{self.series[0].name} ({len(self.entities)} entities)"

    @property
    def dataset(self) -> None:
        return None  # user data: benchmarks are single series

    @property
    def total_rows(self) -> int:
        return sum(s.total_rows for s in self.series)

    @property
    def borders(self) -> dict[str, tuple[int, int]]:
        """Rows per split summed over the entities, as ``(0, rows)`` (for messages and reports)."""
        return {split: (0, sum(b - a for a, b in (s.borders[split] for s in self.series)))
                for split in ("train", "val", "test")}

    def window_count(self, split: str) -> int:
        return sum(s.window_count(split) for s in self.series)

    def windows(self, split: str) -> EntityWindows:
        return EntityWindows([s.windows(split) for s in self.series])

    def covariate_counts(self) -> dict[str, int]:
        return self.series[0].covariate_counts()

    def entity(self, name: str) -> SeriesData:
        """The prepared series of one entity."""
        return self.series[self.entities.index(check_entities(self.entities, [name])[0])]

    def map(self, transform) -> EntitySeries:
        """Every entity's series through ``transform`` (a SeriesData -> SeriesData function); a
        global scaler is then fitted again on the new train rows of all of them."""
        series = [transform(s) for s in self.series]
        return dataclasses.replace(self, series=_one_scaler(series) if self.scaler == "global" else series)

    def training_extent(self) -> tuple[int, pd.Timestamp]:
        """(train rows summed over the entities, the latest timestamp training or validation read)."""
        extents = [s.training_extent() for s in self.series]
        return sum(rows for rows, _ in extents), max(last for _, last in extents)

    @property
    def latest(self) -> dict[str, tuple[np.ndarray, pd.DatetimeIndex]]:
        """Each entity's last ``seq_len`` rows (``history_columns``) and timestamps: where its forecast starts."""
        return {e: (s.latest_values, s.latest_timestamps) for e, s in zip(self.entities, self.series)}


# Attributes that are the same for every entity.
_SHARED = ("columns", "freq", "features", "target", "seq_len", "pred_len", "time_features_freq", "mark_names",
           "n_variates", "history_columns", "target_only", "source")


class EntityWindows:
    """The windows of one split of every entity, indexed one after the other (entity 0's first).

    A batch of indices is gathered entity by entity (one indexing call each) and put back in the
    order asked for, as ``WindowDataset.batch`` returns it."""

    def __init__(self, parts: Sequence[Any]):
        self.parts = list(parts)
        self.offsets = np.cumsum([0, *(len(p) for p in self.parts)])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, i: int):
        if not -len(self) <= i < len(self):
            raise IndexError(f"window {i} out of range for the {len(self)} windows of all entities")
        i %= len(self)
        part = int(np.searchsorted(self.offsets, i, side="right") - 1)
        return self.parts[part][i - int(self.offsets[part])]

    def batch(self, indices):
        import torch

        indices = torch.as_tensor(indices, dtype=torch.long)
        owner = np.searchsorted(self.offsets, indices.numpy(), side="right") - 1
        pieces, order = [], []
        for part in np.unique(owner):
            chosen = np.flatnonzero(owner == part)
            pieces.append(self.parts[part].batch(indices[chosen] - int(self.offsets[part])))
            order.append(chosen)
        back = torch.as_tensor(np.argsort(np.concatenate(order)), dtype=torch.long)
        return {key: torch.cat([p[key] for p in pieces])[back] for key in pieces[0]}

    def __getitems__(self, indices: list[int]):
        return self.batch(indices)


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


def prepare_entities(frame: pd.DataFrame, label: str, *, entity_col: str, scaler: str = "entity",
                     static_covariates: Sequence[str] | None = None, **prepare_options) -> EntitySeries:
    """Every entity of ``frame`` through :func:`damcha_ts.data.prepare` with ``prepare_options``
    (the same protocol for all), then the scalers (see the module docstring)."""
    from damcha_ts.data.protocol import prepare_one as prepare  # each entity is one series: never split again

    check_scaler(scaler)
    static = list(static_covariates or [])
    entities, parts, static_values = split_entities(frame, entity_col, label, static)
    series = []
    for entity, part in zip(entities, parts):
        with entity_errors(entity, label):
            series.append(prepare(part, **prepare_options))
    columns = series[0].history_columns
    for entity, one in zip(entities, series):
        if one.history_columns != columns or one.freq != series[0].freq:
            raise DataError(f"{label}: entity {entity!r} has columns {one.history_columns} at {one.freq!r}; entity "
                            f"{entities[0]!r} has {columns} at {series[0].freq!r} (every entity needs the same)")
    if scaler == "global":
        series = _one_scaler(series)
    static_scaler = None
    if static_values is not None:
        static_scaler = StandardScaler.fit(static_values)  # over the entities: one value each
        scaled = static_scaler.transform(static_values).astype(np.float32)
        series = [dataclasses.replace(s, static_covariates=scaled[i]) for i, s in enumerate(series)]
    return EntitySeries(entity_col, entities, series, scaler, static, static_values, static_scaler,
                        id_dtype_of(frame[entity_col].dtype))


def _one_scaler(series: list[SeriesData]) -> list[SeriesData]:
    """Every entity rescaled with one scaler fitted on the train rows of all of them."""
    train = np.concatenate([s.values[slice(*s.borders["train"])] for s in series])
    shared = StandardScaler.fit(train)
    result = []
    covariate_scaler = None
    if series[0].covariates is not None:
        covariate_scaler = StandardScaler.fit(np.concatenate(
            [s.covariates.values[slice(*s.borders["train"])] for s in series]))
    for s in series:
        covariates = s.covariates
        if covariates is not None:
            covariates = covariates.with_scaler(covariate_scaler)
        result.append(dataclasses.replace(s, scaler=shared, scaled=shared.transform(s.values).astype(np.float32),
                                          covariates=covariates))
    return result
