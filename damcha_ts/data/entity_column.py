"""One series or many entities: the column whose values name the series of a table (each one an
entity, read on its own), decided once (:func:`decide_entities`) for ``prepare``, the Forecaster
and the command line alike (:func:`with_entity_col`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from damcha_ts.data.csv_files import csv_separator, frame_label, read_csv, read_csv_header
from damcha_ts.data.frames import id_spans
from damcha_ts.data.layout import is_user_file
from damcha_ts.data.table_shape import (LONG_COLUMNS, Layout, decide_layout, find_time_column, ignored_columns,
                                        long_columns)
from damcha_ts.errors import DataError

#: Rows of a CSV read to tell its text columns from its number columns before reading them whole.
TEXT_SAMPLE_ROWS = 1_000


def decide_entities(
    table: pd.DataFrame | Path,
    label: str,
    *,
    entity_col: str | None = None,
    covariates: Iterable[str] = (),
    static: Iterable[str] = (),
    sep: str | None = None,
    time_col: str | None = None,
    layout: str = "auto",
    id_col: str | None = None,
    value_col: str | None = None,
    ignore: Iterable[str] | None = None,
) -> str | None:
    """The column whose values name the series of a table of many (each one an entity, read on its
    own), or None when the table is one series: the one rule, for the Forecaster and the command line.

    ``entity_col`` given: that column (checked below). Otherwise, of a ``table`` (a frame, or a CSV
    file read with ``sep``) whose other columns are read by :func:`decide_layout`:
      - a long table whose other columns are ``covariates`` or ``static`` ones: its id column
        (neuralforecast's way of giving covariates; in a long table a covariate belongs to one id);
      - a long table read by its own header (no ``layout="long"``, ``id_col`` or ``value_col``) whose
        id column is neuralforecast's ``unique_id``, or whose ids start or end apart: its id column
        (one multivariate series would need values invented where an id has none); any other long
        table is one series with a variate per id;
      - else a ``unique_id`` column, or a text column whose values repeat while the timestamps
        repeat too (several series over one time span). Of several, the one whose values leave
        each a table of its own (the others at most a long table's id column); else a DataError
        names them all.
    A long table with ``covariates`` inside each entity is refused (each id would be a series inside
    an entity).
    """
    columns = _TableColumns(table, sep)
    if len(set(columns.names)) < len(columns.names):
        return entity_col  # a column name twice: reading the table says so
    named, per_entity = set(covariates), set(static)
    reading = dict(time_col=time_col, layout=layout, id_col=id_col, value_col=value_col, ignore=ignore)
    if entity_col is None:
        entity_col = _series_column(columns, label, named, per_entity, reading)
    if entity_col is not None:
        _refuse_long_entities_with_covariates(columns, label, entity_col, named, per_entity, reading)
    return entity_col


class _TableColumns:
    """A table's column names, and the values of some columns read only when asked for."""

    def __init__(self, table: pd.DataFrame | Path, sep: str | None):
        self.table, self.sep = table, sep
        if isinstance(table, pd.DataFrame):
            self.names = [str(c) for c in table.columns]
            self.time_index = isinstance(table.index, pd.DatetimeIndex)
        else:
            self.names, self.time_index = read_csv_header(table, sep=sep), False

    def values(self, names: list[str], rows: int | None = None) -> pd.DataFrame:
        if isinstance(self.table, pd.DataFrame):
            frame = self.table.set_axis(self.names, axis=1)[names]
            return frame if rows is None else frame.iloc[:rows]
        return read_csv(self.table, sep=csv_separator(self.table, self.sep)[0], usecols=names, nrows=rows,
                         low_memory=False)

    def stamps(self, time_col: str | None) -> pd.Series:
        """The timestamps as written (a time column's values, or the frame's DatetimeIndex)."""
        if time_col is None:
            return pd.Series(self.table.index)
        return self.values([time_col])[time_col]


def _series_column(columns: _TableColumns, label: str, named: set, per_entity: set, reading: dict) -> str | None:
    given_long = reading["layout"] == "long" or reading["id_col"] is not None or reading["value_col"] is not None
    given = named | per_entity
    try:
        shape = decide_layout([c for c in columns.names if c not in given], label, time_index=columns.time_index,
                              **reading)
    except DataError:
        shape = None  # not readable as one table: a column naming the series may explain why
    if shape is not None and shape.kind == "long":
        if given & set(columns.names):
            return shape.id_col
        if not given_long and (shape.id_col == "unique_id" or _ragged(columns, shape)):
            return shape.id_col
        return None
    try:
        ignored = set(ignored_columns(columns.names, reading["ignore"], label))
        kept = [c for c in columns.names if c not in ignored | named | per_entity]
        time = None if columns.time_index and reading["time_col"] is None else find_time_column(
            kept, reading["time_col"], label)
    except DataError:
        return None  # reading the table says what is wrong
    # A long table's id column (ids of variates) never names entities by itself.
    long_id, long_value = long_columns(kept, reading["id_col"], reading["value_col"])
    others = [c for c in kept if c != time and not (c == long_id and long_value in kept)]
    found = ["unique_id"] if "unique_id" in others and reading["id_col"] is None else []
    if others and columns.stamps(time).duplicated().any():
        sample = columns.values(others, TEXT_SAMPLE_ROWS)
        maybe = [c for c in others if _is_text(sample[c])]
        whole = columns.values(maybe) if maybe else None
        found += [c for c in maybe if _is_text(whole[c]) and whole[c].nunique() < whole[c].notna().sum()]
    found = list(dict.fromkeys(found))
    if len(found) <= 1:
        return found[0] if found else None
    # Several: the one whose values leave one series each (the others, at most a long table's ids).
    fitting = []
    for candidate in found:
        rest = [c for c in kept if c != candidate]
        rest_id, rest_value = long_columns(rest, reading["id_col"], reading["value_col"])
        if all(c == rest_id and rest_value in rest for c in found if c != candidate):
            fitting.append(candidate)
    if len(fitting) == 1:
        return fitting[0]
    others_of = [c for c in found if c != found[0]]
    said = (f"{label}: columns {found} each hold text repeated over the rows, so each could name the series; "
            f"name the one that does")
    raise DataError(f"{said} with entity_col={found[0]!r} (one series per value) and leave out the other(s) with "
                    f"ignore={others_of}",
                    cli=f"{said} with --set data.entity_col={found[0]} (one series per value) and leave out the "
                        f"other(s) with --ignore {','.join(others_of)}")


def _ragged(columns: _TableColumns, shape: Layout) -> bool:
    """Whether a long table's ids start or end apart."""
    keys = columns.values([shape.id_col, shape.time_col])
    return id_spans(keys[shape.id_col].astype(str), keys[shape.time_col]) is not None


def _is_text(column: pd.Series) -> bool:
    """Values that are words, not numbers or times (a number written as text is a number)."""
    if not (pd.api.types.is_object_dtype(column) or pd.api.types.is_string_dtype(column)
            or isinstance(column.dtype, pd.CategoricalDtype)):
        return False
    given = column.dropna()
    return len(given) > 0 and bool(pd.to_numeric(given.astype(str), errors="coerce").isna().all())


def _refuse_long_entities_with_covariates(columns: _TableColumns, label: str, entity_col: str, named: set,
                                          per_entity: set, reading: dict) -> None:
    present = [c for c in columns.names if c in named]
    if not present:
        return
    rest = [c for c in columns.names if c not in named | per_entity | {entity_col}]
    try:
        shape = decide_layout(rest, label, time_index=columns.time_index, **reading)
    except DataError:
        return  # each entity's reading says what is wrong
    if shape.kind != "long":
        return
    said = (f"{label}: each {entity_col!r} entity holds a long table ({shape.id_col}, {shape.time_col}, "
            f"{shape.value_col}) with covariate column(s) {present}; a long table's covariate belongs to one "
            f"{shape.id_col}, so each {shape.id_col} would be a series inside an entity. Name one column that tells "
            f"every series apart (e.g. {entity_col!r} and {shape.id_col!r} joined) with ")
    wide = (f", or give each entity a wide table: one row per {shape.time_col}, a column per {shape.id_col}, and "
            f"{present} beside them")
    raise DataError(f"{said}entity_col=...{wide}", cli=f"{said}--set data.entity_col=...{wide}")


def with_entity_col(source: Any, options: Mapping[str, Any]) -> dict:
    """``options`` (prepare's keywords) with ``entity_col`` set when ``source`` is a table of many
    series, or checked when given: :func:`decide_entities` decides, for the Forecaster and the
    command line alike. Other sources (benchmarks, arrays) keep their options."""
    if isinstance(source, pd.DataFrame):
        table, label = source, frame_label(source)
    elif is_user_file(source):
        table = label = Path(source).expanduser()
    else:
        return dict(options)
    named = []
    for key in ("past_covariates", "future_covariates"):
        given = options.get(key) or []
        named += [given] if isinstance(given, str) else list(given)
    static = options.get("static_covariates") or []
    entity_col = decide_entities(
        table, str(label), entity_col=options.get("entity_col"), covariates=named,
        static=[static] if isinstance(static, str) else static,
        **{key: options[key] for key in ("sep", "time_col", "layout", "id_col", "value_col", "ignore")
           if options.get(key) is not None},
    )
    if entity_col is None:
        return dict(options)
    resolved = {**options, "entity_col": entity_col}
    if entity_col == options.get("id_col") or (options.get("id_col") is None
                                               and entity_col in {ids for ids, _ in LONG_COLUMNS}):
        # A long table's ids name the entities: each entity's own table is wide.
        resolved = {k: v for k, v in resolved.items() if k not in ("id_col", "layout")}
    return resolved
