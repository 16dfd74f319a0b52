"""A ``Panel``: the prepared series of one or many entities, and :func:`prepare`, the one place that
decides which.

A table with an entity column (``entity_col="store"``) holds one multivariate series per entity;
any other source is one series, a panel of one entity with no entity column. Each entity is
prepared on its own by :func:`damcha_ts.data.protocol.prepare_series`: its own time index, length
and start (ragged lengths are fine as long as every split of every entity holds a window), its own
split by time and, with ``scaler="entity"`` (the default), its own scaler; ``scaler="global"``
fits one scaler on the train rows of all entities. Training draws windows from every entity
(:meth:`Panel.windows`); a panel of one draws exactly the windows of its series, in their order.

Static covariates are columns constant within each entity (a store's size, a station's altitude):
one value per entity, z-scored over the entities, given to the model as one more token.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.data.csv_files import frame_label, read_csv_frame
from damcha_ts.data.entities import check_entities, check_scaler, entity_errors, errors_of, id_dtype_of, split_entities
from damcha_ts.data.entity_column import with_entity_col
from damcha_ts.data.frames import Source, series_name
from damcha_ts.data.protocol import (
    SPLITS,
    SeriesData,
    check_arguments,
    prepare_series,
    selection_split,
    train_on_train_and_val,
)
from damcha_ts.data.scaling import StandardScaler
from damcha_ts.errors import ConfigError, DataError


def _shared(name: str) -> property:
    """A fact every entity's series has in common, read from the first."""
    return property(lambda self: getattr(self.series[0], name), doc=f"``SeriesData.{name}`` (every entity's).")


@dataclass
class Panel:
    """The prepared series of every entity, in ``entities`` order: ``series[i]`` is entity
    ``entities[i]``'s :class:`~damcha_ts.data.protocol.SeriesData`. ``entity_col`` is the column that
    named them, or None for a single series (one entity); what comes back to the user (forecasts,
    scores, saved history) has an id column or one entry per entity only when it is set."""

    series: list[SeriesData]
    entities: list[str]
    entity_col: str | None = None
    scaler_kind: str = "entity"  # "entity" (one scaler each) or "global" (one over all entities)
    static_columns: list[str] = field(default_factory=list)
    static_values: np.ndarray | None = None  # [E, S] raw, or None without static covariates
    static_scaler: StandardScaler | None = None
    id_dtype: str | None = None  # what the ids come back as (:func:`id_dtype_of`); inside they are text

    @classmethod
    def of(cls, series: SeriesData) -> Panel:
        """A single series as a panel of one entity (named after the series, no entity column)."""
        return cls([series], [series.name])

    @property
    def name(self) -> str:
        if self.entity_col is None:
            return self.series[0].name
        return f"{self.series[0].name} ({len(self.entities)} entities)"

    @property
    def total_rows(self) -> int:
        return sum(s.total_rows for s in self.series)

    @property
    def borders(self) -> dict[str, tuple[int, int]]:
        """A single series' borders; of many entities, rows per split summed as ``(0, rows)`` (for
        messages and reports)."""
        if self.entity_col is None:
            return self.series[0].borders
        return {split: (0, sum(b - a for a, b in (s.borders[split] for s in self.series))) for split in SPLITS}

    def window_count(self, split: str) -> int:
        return sum(s.window_count(split) for s in self.series)

    def windows(self, split: str):
        """The torch windows of ``split`` of every entity (:class:`PanelWindows`; of one series, its
        own ``WindowDataset``, which needs no index over entities)."""
        if len(self.series) == 1:
            return self.series[0].windows(split)
        return PanelWindows([s.windows(split) for s in self.series])

    def covariate_counts(self) -> dict[str, int]:
        return self.series[0].covariate_counts()

    def entity(self, name: str) -> SeriesData:
        """The prepared series of one entity."""
        return self.series[self.entities.index(check_entities(self.entities, [name])[0])]

    def map(self, transform) -> Panel:
        """Every entity's series through ``transform`` (a SeriesData -> SeriesData function); a
        global scaler is then fitted again on the new train rows of all of them."""
        series = [transform(s) for s in self.series]
        return dataclasses.replace(self, series=_one_scaler(series) if self.scaler_kind == "global" else series)

    def train_on_train_and_val(self) -> Panel:
        """Each entity's train split extended over its validation rows, the scalers refitted
        (:func:`~damcha_ts.data.protocol.train_on_train_and_val`): what ``refit=True`` retrains on."""
        return self.map(train_on_train_and_val)

    def selection_split(self, inner_val_rows: int) -> Panel:
        """Each entity's validation rows as its test split, its train rows split again with an inner
        validation tail (:func:`~damcha_ts.data.protocol.selection_split`): where ``Forecaster("auto")``
        trains and scores its candidates, never reading the test rows."""
        return self.map(lambda series: selection_split(series, inner_val_rows))

    def errors_of(self, entity: str):
        """A context in which a DamchaError names ``entity`` (:func:`~damcha_ts.data.entities.entity_errors`),
        when the panel has an entity column (a single series' errors stay as they are)."""
        return errors_of(self.entity_col, entity)

    def training_extent(self) -> tuple[int, pd.Timestamp]:
        """(train rows summed over the entities, the latest timestamp training or validation read)."""
        extents = [s.training_extent() for s in self.series]
        return sum(rows for rows, _ in extents), max(last for _, last in extents)

    @property
    def latest(self) -> dict[str, tuple[np.ndarray, pd.DatetimeIndex]]:
        """Each entity's last ``seq_len`` rows (``history_columns``) and timestamps: where its forecast starts."""
        return {e: s.latest for e, s in zip(self.entities, self.series)}

    @property
    def history(self):
        """What a model of this panel continues from: ``(values, timestamps)`` of a single series,
        ``{entity: (values, timestamps)}`` of many (the saved model's history file holds either)."""
        return self.series[0].latest if self.entity_col is None else self.latest


# Facts every entity's series has in common, as properties of the panel (``dataset``: a benchmark's
# name, None for entities, which are user data; ``covariates``: the names and kinds they all share).
for _fact in ("columns", "freq", "features", "target", "seq_len", "pred_len", "time_features_freq", "mark_names",
              "n_variates", "history_columns", "target_only", "source", "dataset", "covariates"):
    setattr(Panel, _fact, _shared(_fact))


class PanelWindows:
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


def prepare(source: Source, *, entity_col: str | None = None, static_covariates: Sequence[str] | None = None,
            scaler: str | None = None, **options) -> Panel:
    """Load ``source`` and apply the protocol: the one entry point for benchmark and user data, and
    the one place that decides one series or many entities (:func:`damcha_ts.data.entity_column.with_entity_col`).

    ``options`` are :func:`damcha_ts.data.protocol.prepare_series`'s (``seq_len``, ``pred_len``,
    ``features``, ``split``, covariates...; ``path``, ``time_col``, ``layout``... for reading).
    ``entity_col`` names the column of a table (frame or CSV) holding many entities with the same
    variates (found by itself when the table names its series): each is prepared on its own with
    these options (``static_covariates``: columns constant per entity; ``scaler``: "entity" or
    "global"). Any other source is a panel of one (:meth:`Panel.of`).
    """
    check_arguments(**{k: options[k] for k in ("seq_len", "pred_len", "features") if k in options})  # before reading
    options = with_entity_col(source, {**options, "static_covariates": static_covariates, "entity_col": entity_col})
    entity_col = options.pop("entity_col", None)
    options.pop("static_covariates")
    if entity_col is not None:
        return _prepare_entities(source, entity_col, scaler, static_covariates, options)
    if static_covariates or scaler is not None:
        given = "static_covariates" if static_covariates else f"scaler={scaler!r}"
        raise ConfigError(f"{given} is about many entities: name their column with entity_col=...")
    return Panel.of(prepare_series(source, **options))


def _prepare_entities(source, entity_col, scaler, static_covariates, options) -> Panel:
    """``prepare`` of a table of many entities: each one's rows prepared with ``options``."""
    if isinstance(source, pd.DataFrame):
        table, label = source, frame_label(source)
    elif isinstance(source, (str, os.PathLike)):
        table, label = read_csv_frame(source, sep=options.pop("sep", None)), str(source)
    else:
        raise ConfigError(f"entity_col={entity_col!r} needs a table (a DataFrame or a CSV file) with that column, "
                          f"got {type(source).__name__}")
    scaler = check_scaler(scaler or "entity")
    static = list(static_covariates or [])
    entities, parts, static_values = split_entities(table, entity_col, label, static)
    series = []
    for entity, part in zip(entities, parts):
        with entity_errors(entity, label):
            one = prepare_series(part, **options)
        # Named after the table, as load_frame names a series (each entity's rows alone are a "DataFrame").
        series.append(dataclasses.replace(one, name=series_name(label), source=label))
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
    return Panel(series, entities, entity_col, scaler, static, static_values, static_scaler,
                 id_dtype_of(table[entity_col].dtype))


def _one_scaler(series: list[SeriesData]) -> list[SeriesData]:
    """Every entity rescaled with one scaler fitted on the train rows of all of them."""
    train = np.concatenate([s.values[slice(*s.borders["train"])] for s in series])
    shared = StandardScaler.fit(train)
    covariate_scaler = None
    if series[0].covariates is not None:
        covariate_scaler = StandardScaler.fit(np.concatenate(
            [s.covariates.values[slice(*s.borders["train"])] for s in series]))
    result = []
    for s in series:
        covariates = None if s.covariates is None else s.covariates.with_scaler(covariate_scaler)
        result.append(dataclasses.replace(s, scaler=shared, scaled=shared.transform(s.values).astype(np.float32),
                                          covariates=covariates))
    return result


def describe(data: Panel) -> dict:
    """A JSON-ready summary (rows, variates, frequency, borders, windows per split); of many
    entities, all of them together, with their column and count."""
    parts = data.series
    covariates = parts[0].covariates
    return {
        "name": data.name, "dataset": data.dataset, "source": data.source, "rows": data.total_rows,
        "rows_used": sum(len(part.timestamps) for part in parts), "variates": data.n_variates,
        "columns": list(data.columns), "freq": data.freq,
        "first_timestamp": str(min(part.timestamps[0] for part in parts)),
        "last_timestamp": str(max(part.timestamps[-1] for part in parts)),
        "features": data.features, "target": data.target, "seq_len": data.seq_len, "pred_len": data.pred_len,
        "time_features": data.mark_names,
        **({} if covariates is None else {"past_covariates": covariates.past_columns,
                                          "future_covariates": covariates.future_columns}),
        **({} if data.entity_col is None else {"entity_col": data.entity_col, "entities": len(data.entities)}),
        "borders": {split: list(data.borders[split]) for split in SPLITS},
        "windows": {split: data.window_count(split) for split in SPLITS},
    }


__all__ = ["Panel", "PanelWindows", "describe", "prepare"]
