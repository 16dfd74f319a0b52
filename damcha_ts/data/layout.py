"""How a fit input was laid out (wide, long or an array; its time and id columns; its variates in
order), so that later input is read, and forecasts written, the same way. Used by the Forecaster
and by ``damcha-ts fit`` (which saves it with the model)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# load_frame options that say how to read a history again at predict time.
INPUT_OPTIONS = (
    "id_col", "time_col", "value_col", "layout", "freq", "start", "columns", "date_format", "fill", "allow_irregular",
)
# The subset that says how a file or frame is laid out; given at fit time, they are saved so that
# predict / evaluate / backtest read the same CSV again without repeating them.
READ_OPTIONS = ("id_col", "time_col", "value_col", "layout", "date_format")


def describe_input(data: Any, options: Mapping[str, Any]) -> tuple[str, dict]:
    """("wide" | "long" | "numpy", the options needed to read and write that layout again)."""
    from damcha_ts.data.frames import TIME_COLUMN_NAMES

    if isinstance(data, np.ndarray):
        return "numpy", {k: options[k] for k in ("freq", "start", "columns") if options.get(k) is not None}
    if isinstance(data, pd.DataFrame):
        columns = [str(c) for c in data.columns]
        time_col = options.get("time_col") or next((c for c in columns if c.lower() in TIME_COLUMN_NAMES), None)
        id_col, value_col = options.get("id_col", "id"), options.get("value_col", "value")
        layout = options.get("layout", "auto")
        if layout == "long" or (layout == "auto" and set(columns) == {id_col, time_col, value_col}):
            order = [c for c in columns if c in (id_col, time_col, value_col)]
            return "long", {"layout": "long", "id_col": id_col, "time_col": time_col, "value_col": value_col, "order": order}
        wide = {"time_col": time_col} if time_col and not isinstance(data.index, pd.DatetimeIndex) else {}
        return "wide", {**wide, **({"date_format": options["date_format"]} if options.get("date_format") else {})}
    if _is_user_file(data):
        # A CSV: its header decides as a frame's columns would (a long file is written back long).
        return describe_input(pd.read_csv(Path(data).expanduser(), nrows=0), options)
    # A benchmark name: what the caller said about its layout.
    given = {k: options[k] for k in READ_OPTIONS if options.get(k) not in (None, "auto")}
    return ("long" if given.get("layout") == "long" else "wide"), given


def _is_user_file(data: Any) -> bool:
    return isinstance(data, (str, Path)) and Path(data).expanduser().is_file()


def input_columns(data: Any, options: Mapping[str, Any], series) -> list[str]:
    """The variate columns of the fit input, in the input's order, named as load_frame names them."""
    if isinstance(data, np.ndarray):
        names = options.get("columns")
        return [str(c) for c in names] if names is not None else [str(i) for i in range(np.atleast_2d(data.T).shape[0])]
    if isinstance(data, pd.DataFrame):
        kind, layout = describe_input(data, options)
        if kind == "long":
            return [str(v) for v in pd.unique(data[layout["id_col"]].astype(str))]
        return [str(c) for c in data.columns if str(c) != layout.get("time_col")]
    if _is_user_file(data):
        header = pd.read_csv(Path(data).expanduser(), nrows=0)
        if describe_input(header, options)[0] == "wide":
            return input_columns(header, options, series)  # the header lists the variates in order
    elif series.features != "S":
        return list(series.columns)  # a benchmark file lists its target last, as the series does
    # A long file (its ids in order of first appearance) or a benchmark fitted on its target alone.
    from damcha_ts.data import load_frame

    load_options = {k: v for k, v in options.items() if k in INPUT_OPTIONS or k in ("path", "fill", "allow_irregular")}
    return [str(c) for c in load_frame(data, **load_options).columns]
