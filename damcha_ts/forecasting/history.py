"""New input read the way a model's fit input was read.

A model remembers (``SeriesMeta.input_options``) how its fit input looked: wide or long, its time
column, date format, separator, variate names and order. New data for ``predict``/``backtest``/
``plot`` is read with those options (plus what the caller adds), must have the fitted columns and
must step at the fitted frequency; ``fit``/``evaluate`` data get the options of :func:`prepare_options`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pandas.tseries.frequencies import to_offset

from damcha_ts.data import frame_info, load_frame, prepare
from damcha_ts.data.layout import INPUT_OPTIONS, READ_OPTIONS, describe_input
from damcha_ts.data.options import PROTOCOL_KEYS, READ_KEYS
from damcha_ts.data.registry import is_benchmark_name
from damcha_ts.data.table_shape import TIME_COLUMN_NAMES
from damcha_ts.errors import ConfigError, DataError, plain_repr


def history_from(meta, data: Any, data_options: Mapping[str, Any]):
    """(kind, input options, raw values [L, C] in model column order, timestamps [L]): the last
    ``lookback`` rows of ``data``."""
    kind, input_options, frame = load_history(meta, data, data_options)
    lookback = int(meta.seq_len)
    if len(frame) < lookback:
        raise DataError(f"the history has {len(frame)} rows; the model needs lookback={lookback} rows to forecast")
    values = frame[meta.history_columns].to_numpy(dtype=np.float64)[-lookback:]
    return kind, input_options, values, frame.index[-lookback:]


def future_values(meta, future: Any, timestamps: pd.DatetimeIndex) -> np.ndarray | None:
    """The future covariates' raw values [H, F] over the forecast steps (``timestamps``) from
    ``predict(future=frame)``: a wide frame indexed by those timestamps (or with a time column), one
    column per future covariate. None when the model has none and none is given; a DataError naming
    what is wrong otherwise (missing frame, columns, rows or timestamps, values)."""
    names = list(getattr(meta, "future_covariates", []))
    if future is None:
        if names:
            raise DataError(
                f"this model reads the future covariates {names}: predict(future=frame) needs their values at the "
                f"{len(timestamps)} forecast timestamps {timestamps[0]} ... {timestamps[-1]} (a frame indexed by them, "
                "one column per covariate)",
                cli=f"this model reads the future covariates {names}: give their values at the {len(timestamps)} "
                    f"forecast timestamps {timestamps[0]} ... {timestamps[-1]} with --future FILE (a CSV with a time "
                    "column and those columns)",
            )
        return None
    if not names:
        raise DataError("future= was given, but this model was fitted without future covariates (future_covariates=[...])")
    if not isinstance(future, pd.DataFrame):
        raise DataError(f"future= must be a pandas DataFrame indexed by the forecast timestamps, got {type(future).__name__}")
    frame = future
    if not isinstance(frame.index, pd.DatetimeIndex):
        time_col = meta.input_options.get("time_col")
        candidates = [c for c in map(str, frame.columns) if c == time_col or c.lower() in TIME_COLUMN_NAMES]
        if not candidates:
            raise DataError(f"future=: no DatetimeIndex and no time column (one of {TIME_COLUMN_NAMES}); columns are "
                            f"{list(map(str, frame.columns))}")
        # Parsed as the fit input's time column was (its date_format).
        stamps = pd.to_datetime(frame[candidates[0]], format=meta.input_options.get("date_format"), errors="coerce")
        frame = frame.set_index(pd.DatetimeIndex(stamps))
        frame = frame.drop(columns=[candidates[0]])
    given = [str(c) for c in frame.columns]
    missing, extra = [c for c in names if c not in given], [c for c in given if c not in names]
    if missing or extra:
        raise DataError(f"future= must hold exactly the future covariates {names}: missing {missing}, unexpected {extra}")
    if len(frame) != len(timestamps):
        raise DataError(f"future= has {len(frame)} rows; the forecast has {len(timestamps)} steps, "
                        f"{timestamps[0]} ... {timestamps[-1]}")
    stamps = frame.index
    if stamps.tz is None and timestamps.tz is not None:
        stamps = stamps.tz_localize(timestamps.tz)
    wrong = np.flatnonzero(np.asarray(stamps != timestamps))
    if wrong.size:
        i = int(wrong[0])
        raise DataError(f"future= row {i} is at {frame.index[i]}; forecast step {i + 1} is at {timestamps[i]} "
                        f"(the steps are {timestamps[0]} ... {timestamps[-1]}, every {meta.freq!r})")
    values = frame[names].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    bad = np.argwhere(~np.isfinite(values))
    if bad.size:
        i, j = (int(v) for v in bad[0])
        raise DataError(f"future= column {names[j]!r} row {i} ({frame.index[i]}) holds {plain_repr(frame[names[j]].iloc[i])}, "
                        f"not a finite number ({len(bad)} such values in all)")
    return values


def load_history(meta, data: Any, data_options: Mapping[str, Any]) -> tuple[str, dict, pd.DataFrame]:
    """(kind, input options, frame): ``data`` read as the fit input was, checked to have the fitted columns."""
    fitted = list(meta.input_options.get("input_columns") or meta.columns)
    options = stamps_from_index(data, {k: v for k, v in meta.input_options.items() if k in INPUT_OPTIONS})
    check_data_options("predict/backtest", data_options, with_protocol=False)
    options.update(data_options)
    if isinstance(data, np.ndarray):
        width = 1 if data.ndim == 1 else data.shape[1]
        if width != len(fitted):
            raise DataError(f"the history has {width} columns; the model was fitted on {len(fitted)}")
        options["columns"] = fitted  # positions carry the fitted names
        options.setdefault("freq", meta.freq)
    kind, input_options = describe_input(data, options)
    frame = load_frame(data, **options)
    check_same_freq(frame, meta.freq)
    given = [str(c) for c in frame.columns]
    given_set, fitted_set = set(given), set(fitted)  # sets: linear in the columns
    missing = [c for c in fitted if c not in given_set]
    extra = [c for c in given if c not in fitted_set]
    if missing or extra:
        raise DataError(
            f"the history's columns differ from those at fit time: missing {missing}, unexpected {extra} "
            f"(fitted on {fitted})"
        )
    return kind, input_options, frame


def prepare_options(configured: Mapping[str, Any], freq: str | None, data: Any, data_options: Mapping[str, Any]) -> dict:
    """The ``prepare`` options of ``fit``/``evaluate`` data: the configured data settings
    (``configured``: from a run config or a saved model, never from an earlier fit), the
    constructor's ``freq``, then the caller's ``data_options``."""
    benchmark = isinstance(data, str) and is_benchmark_name(data)
    options = {k: v for k, v in configured.items() if k not in ("dataset", "seq_len", "pred_len")}
    if str(data) != str(configured.get("dataset")):
        options.pop("path", None)  # where the fitted benchmark's file lies, not this data's
    if freq is not None and not benchmark:
        options.setdefault("freq", freq)
    if not benchmark:
        # User data: time marks from its own frequency (the benchmark convention is "h").
        options.setdefault("time_features_freq", None)
    check_data_options("fit/evaluate", data_options, with_protocol=True)
    options.update(data_options)
    return options


def prepare_as_fitted(meta, configured: Mapping[str, Any], freq: str | None, data: Any,
                      data_options: Mapping[str, Any], borders: Any = None):
    """The Panel of ``data`` (None: the fitted file or benchmark) for ``evaluate``/``calibrate``: read
    as the fit input of the model of ``meta`` was, with its covariates and entities, the options of
    :func:`prepare_options`, and split at ``borders`` (fractions or row borders) when given."""
    if data is None:
        data = (meta.data_config or {}).get("dataset")
        if data is None:
            raise ConfigError(
                "evaluate() needs data: this model was fitted on in-memory data, which is not saved with it; "
                "pass it: evaluate(frame), evaluate(array) or evaluate('file.csv')",
                cli="this model was fitted on in-memory data, which is not saved with it: "
                    "give the data, damcha-ts evaluate --model DIR --dataset FILE",
            )
    options = {**saved_read_options(meta, data), **model_data_options(meta),
               **prepare_options(configured, freq, data, data_options)}
    if borders is not None:
        options["split"] = borders
    return prepare(data, seq_len=meta.seq_len, pred_len=meta.pred_len, **options)


def model_data_options(meta) -> dict:
    """The data options a model's structure fixes, however it was fitted: its covariate columns and,
    for many entities, their column, static covariates and scaler kind (new data for ``evaluate``
    or a retraining is prepared with them)."""
    options = {key: list(getattr(meta, key)) for key in ("past_covariates", "future_covariates", "static_covariates")
               if getattr(meta, key, None)}
    if getattr(meta, "entity_col", None):
        options["entity_col"] = meta.entity_col
        scaler = (meta.data_config or {}).get("scaler")
        if scaler is not None:
            options["scaler"] = scaler
    return options


def saved_read_options(meta, data: Any) -> dict:
    """How the fit input's file or frame was laid out (time_col, date_format, ...), for reading
    ``data`` the same way; nothing for arrays and benchmark names."""
    if isinstance(data, np.ndarray) or (isinstance(data, str) and is_benchmark_name(data) and not Path(data).is_file()):
        return {}
    return stamps_from_index(data, {k: v for k, v in meta.input_options.items() if k in READ_OPTIONS})


def check_data_options(method: str, given: Mapping[str, Any], *, with_protocol: bool) -> None:
    """Data options are keywords of ``load_frame`` (how to read the data), plus, where a split is
    prepared, of ``prepare`` (features, target, split...); anything else is a typo or a model
    setting (lookback and horizon belong to the constructor)."""
    allowed = set(READ_KEYS) | (set(PROTOCOL_KEYS) - {"seq_len", "pred_len"} if with_protocol else set())
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise ConfigError(
            f"{method}(): unknown data option(s) {unknown}; valid: {sorted(allowed)} "
            "(lookback, horizon and model settings go to Forecaster(...))"
        )


def stamps_from_index(data: Any, saved: dict) -> dict:
    """Saved read options for ``data``: a model fitted on a frame with a time column also reads a
    frame whose timestamps are its DatetimeIndex (the time column is then not there)."""
    if (isinstance(data, pd.DataFrame) and isinstance(data.index, pd.DatetimeIndex)
            and saved.get("time_col") is not None and saved["time_col"] not in map(str, data.columns)):
        return {k: v for k, v in saved.items() if k != "time_col"}
    return saved


def check_same_freq(frame: pd.DataFrame, fitted_freq: str) -> None:
    """New history must step as the fitted data did: the forecast's timestamps and time features
    follow the fitted frequency."""
    given = frame_info(frame).get("freq")
    if given is not None and to_offset(given) != to_offset(fitted_freq):
        raise DataError(f"the history's timestamps step by {given!r}; the model was fitted on data at {fitted_freq!r}")
