"""How a fit input was laid out (wide, long or an array; its time and id columns; its variates in
order), so that later input is read, and forecasts written, the same way. Used by the Forecaster
and by ``damcha-ts fit`` (which saves it with the model)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.data.csv_files import frame_label, read_csv_header
from damcha_ts.data.frames import load_frame
from damcha_ts.data.options import READ_KEYS
from damcha_ts.data.registry import DataWarning
from damcha_ts.data.table_shape import decide_layout

# load_frame options that say how to read a history again at predict time: all but where a
# benchmark's file lies.
INPUT_OPTIONS = tuple(key for key in READ_KEYS if key not in ("path", "download"))
# The subset that says how a file or frame is laid out; given at fit time, they are saved so that
# predict / evaluate / backtest read the same CSV again without repeating them.
READ_OPTIONS = ("id_col", "time_col", "value_col", "layout", "date_format", "ignore", "sep")


def describe_input(data: Any, options: Mapping[str, Any]) -> tuple[str, dict]:
    """("wide" | "long" | "numpy", the options needed to read and write that layout again)."""
    if isinstance(data, np.ndarray):
        return "numpy", {k: options[k] for k in ("freq", "start", "columns") if options.get(k) is not None}
    if isinstance(data, pd.DataFrame) or is_user_file(data):
        shape = _layout_of(data, options)
        # How the table was read beyond its layout: a predict on the same kind of file needs them too.
        read = {k: options[k] for k in ("date_format", "sep") if options.get(k) is not None}
        if shape.ignored:
            read["ignore"] = list(shape.ignored)
        if shape.kind == "long":
            id_col, value_col = shape.id_col, shape.value_col
            order = [c for c in shape.columns if c in (id_col, shape.time_col, value_col)]
            long = {"layout": "long", "id_col": id_col, "time_col": shape.time_col, "value_col": value_col}
            return "long", {**long, "order": order, **read}
        wide = {"time_col": shape.time_col} if shape.time_col is not None else {}
        if options.get("layout") == "wide":
            wide["layout"] = "wide"  # a header that would otherwise read as long
        return "wide", {**wide, **read}
    # A benchmark name: what the caller said about its layout.
    given = {k: options[k] for k in READ_OPTIONS if options.get(k) not in (None, "auto")}
    return ("long" if given.get("layout") == "long" else "wide"), given


def _layout_of(data: pd.DataFrame | str | Path, options: Mapping[str, Any]):
    """How load_frame reads this frame or CSV file with these options (its header decides)."""
    if isinstance(data, pd.DataFrame):
        columns, label, time_index = [str(c) for c in data.columns], frame_label(data), isinstance(data.index, pd.DatetimeIndex)
    else:
        file = Path(data).expanduser()
        columns, label, time_index = read_csv_header(file, sep=options.get("sep")), str(file), False
    # Many entities: each entity's table is read without its entity and static columns.
    per_entity = {options.get("entity_col"), *(options.get("static_covariates") or [])}
    columns = [c for c in columns if c not in per_entity]
    return decide_layout(
        columns, label, time_col=options.get("time_col"), time_index=time_index, layout=options.get("layout", "auto"),
        id_col=options.get("id_col"), value_col=options.get("value_col"), ignore=options.get("ignore"),
    )


def is_user_file(data: Any) -> bool:
    return isinstance(data, (str, Path)) and Path(data).expanduser().is_file()


def input_columns(data: Any, options: Mapping[str, Any], series) -> list[str]:
    """The variate columns of the fit input, in the input's order, named as load_frame names them
    (many entities: one entity's table, without the entity and static columns)."""
    per_entity = {options.get("entity_col"), *(options.get("static_covariates") or [])}
    return [c for c in _input_columns(data, options, series) if c not in per_entity]


def _input_columns(data: Any, options: Mapping[str, Any], series) -> list[str]:
    if isinstance(data, np.ndarray):
        names = options.get("columns")
        return [str(c) for c in names] if names is not None else [str(i) for i in range(np.atleast_2d(data.T).shape[0])]
    if isinstance(data, pd.DataFrame) or is_user_file(data):
        shape = _layout_of(data, options)
        if shape.kind == "wide":
            return shape.variates  # the header lists the variates in order
        if isinstance(data, pd.DataFrame):
            return [str(v) for v in pd.unique(data[shape.id_col].astype(str))]
    elif series.features != "S":
        return list(series.columns)  # a benchmark file lists its target last, as the series does
    if options.get("entity_col"):
        return list(series.history_columns)  # a long file of entities: each one's ids, in model order
    # A long file (its ids in order of first appearance) or a benchmark fitted on its target alone.
    load_options = {k: v for k, v in options.items() if k in INPUT_OPTIONS or k in ("path", "fill", "allow_irregular")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # said when the series was prepared from this same data
        return [str(c) for c in load_frame(data, **load_options).columns]
