"""Turning any supported source into one validated wide frame.

Every source (benchmark name, CSV path, wide or long DataFrame, NumPy array) goes through the same
checks and comes out as a DataFrame with a DatetimeIndex named ``date`` and float64 columns, one per
variate, in source order. What we learnt about it (dataset name, frequency, origin) is kept in
``frame.attrs["damcha_ts"]``, so ``prepare(load_frame("ETTm1"), ...)`` applies the benchmark's
protocol without reading the file again (as long as the frame keeps the benchmark's full shape;
a cut-down frame counts as user data).
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from damcha_ts.data.csv_files import csv_origin, read_csv_frame
from damcha_ts.data.options import check_fill, check_layout
from damcha_ts.data.registry import (
    DatasetSpec,
    DataWarning,
    get_spec,
    is_benchmark_name,
)
from damcha_ts.data.storage import locate_dataset
from damcha_ts.data.table_shape import decide_layout
from damcha_ts.data.time_index import Place, check_freq, check_steps_match, inferred_freq, irregularity
from damcha_ts.errors import ConfigError, DataError, DatasetNotFoundError, plain_repr

ATTRS_KEY = "damcha_ts"

Source = str | os.PathLike | pd.DataFrame | np.ndarray


def frame_info(frame: pd.DataFrame) -> dict:
    """The metadata ``load_frame`` attached: ``name``, ``dataset`` (benchmark or None), ``freq``, ``source``."""
    return dict(frame.attrs.get(ATTRS_KEY, {}))


def load_frame(
    source: Source,
    *,
    path: str | os.PathLike | None = None, download: bool = True,
    time_col: str | None = None, date_format: str | None = None,
    layout: str = "auto", id_col: str | None = None, value_col: str | None = None,
    freq: str | None = None, start: str | pd.Timestamp = "2000-01-01", columns: list[str] | None = None,
    fill: str | None = None, allow_irregular: bool = False,
    ignore: Iterable[str] | None = None, sep: str | None = None,
) -> pd.DataFrame:
    """Load ``source`` as a validated wide frame (DatetimeIndex ``date``, float64 columns).

    ``source`` is one of:
      - a benchmark name (``"ETTh1"``, ``"weather"``, ``"ecl"``...): located (``path`` overrides
        the search, ``download`` allows fetching), checksum-verified and parsed with the
        registry's date format. Its duplicate or irregular stamps (Weather has one of each) are
        kept, as the protocol does, with a DataWarning;
      - a CSV path (``.csv`` or ``.csv.gz``) or a DataFrame, wide (DatetimeIndex or a time column,
        one column per variate) or long (``id_col``, time, ``value_col`` columns; ``layout``
        "auto" picks long when the header has those three). Every other column is read: in a long
        file it is an error, never dropped silently; ``ignore`` names columns to leave out (wide or
        long; a name that is not a column is an error). The time column is ``time_col`` or one
        named date/time/timestamp/datetime/ds; ``date_format`` is an optional strptime format.
        Timestamps with mixed UTC offsets (a DST change) are converted to UTC, with a DataWarning.
        A CSV's delimiter is ``sep`` or, without it, detected from the header among , ; tab and |
        (a DataWarning says which when it is not a comma).
        Duplicate or irregular timestamps are an error unless ``allow_irregular``;
      - a NumPy array ``[T, C]`` (or ``[T]``) with ``freq`` (required), ``start`` and ``columns``.

    ``freq`` overrides the inferred sampling frequency for user data. NaN/inf values are an error
    naming the column and first row unless ``fill`` is one of ``"ffill"`` (forward, then backward
    for a leading gap), ``"interpolate"`` (linear, edges held) or ``"zero"``. Filling runs on the
    whole series, before any split: ``"interpolate"`` reads the value after each gap, so a gap
    across a train/validation border is filled partly from validation data; ``"ffill"`` and
    ``"zero"`` never look ahead (except ``"ffill"`` for a gap at the very start).
    """
    check_fill(fill)
    check_layout(layout)
    user_options = dict(freq=freq, fill=fill, allow_irregular=allow_irregular, ignore=ignore)
    if isinstance(source, pd.DataFrame):
        spec = _still_benchmark(source)
        if spec is not None:
            # Loaded from the registry and still whole: keep its conventions. Its timestamps were
            # reported when it was loaded, so only the values are checked again.
            return _finish(source, Place("DataFrame"), spec=spec, source=frame_info(source)["source"], fill=fill,
                           check_timestamps=False)
        origin = csv_origin(source)
        return _from_dataframe(source, origin or "DataFrame", time_col, date_format, layout, id_col, value_col,
                               header_lines=1 if origin else None, **user_options)
    if isinstance(source, np.ndarray):
        return _from_array(source, freq=freq, start=start, columns=columns, fill=fill)
    if isinstance(source, (str, os.PathLike)):
        frame = _from_name(os.fspath(source), path, download, sep, time_col, date_format, layout, id_col, value_col,
                           **user_options)
        if frame is not None:
            return frame
    raise ConfigError(
        f"source must be a benchmark name, a CSV path, a pandas DataFrame or a NumPy array, got {type(source).__name__}"
    )


def _from_name(text: str, path, download: bool, sep, time_col, date_format, layout, id_col, value_col,
               **user_options) -> pd.DataFrame | None:
    """:func:`load_frame` of a benchmark name or a CSV path (a name that is neither is an error)."""
    if is_benchmark_name(text) and not Path(text).is_file():
        return _from_benchmark(get_spec(text), path, download, user_options["fill"])
    file = Path(text).expanduser()
    if file.is_file():
        return _from_csv(file, sep, time_col, date_format, layout, id_col, value_col, **user_options)
    if file.suffix or os.sep in text or "/" in text:
        raise DatasetNotFoundError(f"no such file: {file}")
    get_spec(text)  # not a file and not a benchmark: raises ConfigError suggesting close names
    return None


def _still_benchmark(frame: pd.DataFrame) -> DatasetSpec | None:
    """The spec of a frame ``load_frame`` returned for a benchmark, if it still has its full shape.

    Values may have been edited, but a frame cut to fewer rows or columns, or without its
    DatetimeIndex, is user data: the benchmark's split would no longer mean anything for it.
    """
    name = frame_info(frame).get("dataset")
    if not name:
        return None
    spec = get_spec(name)
    whole = frame.shape == (spec.n_rows, spec.n_variates) and isinstance(frame.index, pd.DatetimeIndex)
    return spec if whole else None


def _from_benchmark(spec: DatasetSpec, path, download: bool, fill: str | None) -> pd.DataFrame:
    file = locate_dataset(spec, path, download=download)
    place = Place(str(file), header_lines=1)
    raw = pd.read_csv(file)
    if spec.time_column not in raw.columns:
        raise DataError(f"{file}: no {spec.time_column!r} column; columns are {list(raw.columns)}")
    stamps = _parse_times(raw[spec.time_column], spec.time_column, spec.date_format, place)
    values = raw.drop(columns=[spec.time_column])
    if values.shape != (spec.n_rows, spec.n_variates):
        raise DataError(
            f"{file}: expected {spec.n_rows} rows x {spec.n_variates} variates for {spec.name}, "
            f"got {values.shape[0]} x {values.shape[1]}"
        )
    values.index = pd.DatetimeIndex(stamps, name="date")
    return _finish(values, place, spec=spec, source=str(file), fill=fill)


def _from_csv(file: Path, sep, time_col, date_format, layout, id_col, value_col, **options) -> pd.DataFrame:
    return _from_dataframe(
        read_csv_frame(file, sep=sep), str(file), time_col, date_format, layout, id_col, value_col, header_lines=1,
        **options,
    )


def _from_dataframe(
    raw: pd.DataFrame, label: str, time_col, date_format, layout, id_col, value_col, *, header_lines=None, ignore=None,
    **options,
) -> pd.DataFrame:
    place = Place(label, header_lines)
    raw = raw.copy(deep=False)  # new column labels only; the values are copied once, in _finish
    raw.columns = [str(c) for c in raw.columns]
    shape = decide_layout(
        list(raw.columns), label, time_col=time_col, time_index=isinstance(raw.index, pd.DatetimeIndex),
        layout=layout, id_col=id_col, value_col=value_col, ignore=ignore,
    )
    if shape.ignored:
        raw = raw.drop(columns=list(shape.ignored))
    if shape.kind == "long":
        raw = _long_to_wide(raw, shape.time_col, shape.id_col, shape.value_col, date_format, place,
                            fill=options.get("fill"))
        place = Place(f"{label} (long layout, pivoted)")
        stamps = raw.index
    elif shape.time_col is None:
        stamps = raw.index
    else:
        stamps = _parse_times(raw[shape.time_col], shape.time_col, date_format, place)
        raw = raw.drop(columns=[shape.time_col])
    raw.index = pd.DatetimeIndex(stamps, name="date")
    return _finish(raw, place, spec=None, source=label, **options)


def _parse_times(column: pd.Series, name: str, date_format: str | None, place: Place) -> pd.DatetimeIndex:
    parsed = _to_datetime(column, date_format)
    if not isinstance(parsed, pd.Series) or parsed.dtype == object:
        # Several UTC offsets (a DST change in local time) have no single pandas dtype: they are one
        # timeline only once converted to UTC.
        offsets = _utc_offsets(column, name, place)
        if len(offsets) > 1:
            warnings.warn(
                f"{place.label}: time column {name!r} has mixed UTC offsets ({', '.join(offsets)}); converted to UTC",
                DataWarning, stacklevel=4,
            )
            parsed = _to_datetime(column, date_format, utc=True)
    if not isinstance(parsed, pd.Series) or parsed.dtype == object:
        problem = parsed if isinstance(parsed, Exception) else "the values are not one kind of timestamp"
        raise DataError(f"{place.label}: column {name!r} cannot be parsed as timestamps: {problem}")
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if bad.size:
        i = int(bad[0])
        problem = "is empty" if pd.isna(column.iloc[i]) else f"holds {plain_repr(column.iloc[i])}, which is not a timestamp"
        hint = f" in format {date_format!r}" if date_format else ""
        raise DataError(f"{place.label}: time column {name!r} {place.row(i)} {problem}{hint} ({bad.size} bad rows in all)")
    return pd.DatetimeIndex(parsed)


def _to_datetime(column: pd.Series, date_format: str | None, utc: bool = False) -> pd.Series | Exception:
    """``pd.to_datetime`` (unparseable values become NaT), or the exception it raised."""
    with warnings.catch_warnings():
        # Without a format pandas warns when it falls back to per-element parsing, and today it
        # warns (later it will raise) on mixed offsets; the result is checked either way.
        warnings.filterwarnings("ignore", message="Could not infer format", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*mixed time zones", category=FutureWarning)
        try:
            return pd.to_datetime(column, format=date_format, errors="coerce", utc=utc)
        except (ValueError, TypeError) as exc:
            return exc


def _utc_offsets(column: pd.Series, name: str, place: Place) -> list[str]:
    """The distinct UTC offsets the timestamps end with, as +HH:MM in order of appearance; none if
    no timestamp has one. Some with and some without is an error: UTC would be a guess for those."""
    text = column.dropna().astype(str).str.strip()
    found = text.str.extract(r"(Z|[+-]\d{2}:?\d{2})$", expand=False)
    missing = np.flatnonzero(found.isna().to_numpy())
    if missing.size == len(found):
        return []
    if missing.size:
        i = column.index.get_loc(text.index[int(missing[0])])
        raise DataError(
            f"{place.label}: time column {name!r} mixes timestamps with and without a UTC offset: {place.row(i)} "
            f"holds {plain_repr(column.iloc[i])}; give every timestamp its offset, or none"
        )
    normal = found.str.replace("Z", "+00:00", regex=False).str.replace(r"^([+-]\d{2})(\d{2})$", r"\1:\2", regex=True)
    return [str(offset) for offset in pd.unique(normal)]


def _long_to_wide(raw, time_col, id_col, value_col, date_format, place: Place,
                  fill: str | None = None) -> pd.DataFrame:
    stamps = _parse_times(raw[time_col], time_col, date_format, place)
    keyed = pd.DataFrame({"id": raw[id_col].astype(str).to_numpy(), "time": stamps, "value": raw[value_col].to_numpy()})
    duplicated = np.flatnonzero(keyed.duplicated(["id", "time"]).to_numpy())
    if duplicated.size:
        i = int(duplicated[0])
        raise DataError(
            f"{place.label}: {place.row(i)} repeats id {plain_repr(keyed['id'].iloc[i])} at {keyed['time'].iloc[i]} "
            "(each id may have one value per timestamp)"
        )
    _require_numeric(keyed["value"], value_col, place)
    wide = keyed.pivot(index="time", columns="id", values="value")
    # Variates keep the order in which their ids first appear, as a wide file would list them.
    wide = wide[list(pd.unique(keyed["id"]))]
    wide.columns.name = None
    spans = id_spans(keyed["id"], keyed["time"])
    if fill is None and spans is not None:
        # Ids that start or end apart: fill= would invent whole stretches of one series (and forecast
        # it from another's end), so they are read one by one instead. (Holes inside are NaN to fill.)
        short = str((spans["last"] - spans["first"]).idxmin())
        said = (f"{place.label}: id {short!r} runs from {spans['first'][short]} to {spans['last'][short]}, the ids "
                f"together from {wide.index[0]} to {wide.index[-1]}; a long file read as one series needs every id "
                f"over the same span. Read each {id_col} as its own series with ")
        raise DataError(f"{said}entity_col={id_col!r}", cli=f"{said}--set data.entity_col={id_col}")
    return wide


def id_spans(ids: pd.Series, stamps: pd.Series | pd.DatetimeIndex) -> pd.DataFrame | None:
    """Each id's first and last timestamp when the ids do not all start and end together (ragged
    series), else None; None too for timestamps that do not parse (reading them says why)."""
    parsed = pd.Series(stamps)
    if not pd.api.types.is_datetime64_any_dtype(parsed):
        parsed = _to_datetime(parsed, None, utc=True)  # as written: on one timeline to compare
        if not isinstance(parsed, pd.Series) or parsed.dtype == object:
            return None
    by_id = pd.DataFrame({"id": np.asarray(ids), "time": parsed.to_numpy()}).groupby("id", sort=False)["time"]
    spans = pd.DataFrame({"first": by_id.min(), "last": by_id.max()})
    return spans if spans["first"].nunique() > 1 or spans["last"].nunique() > 1 else None


def _require_numeric(column: pd.Series, name: str, place: Place) -> np.ndarray:
    if pd.api.types.is_datetime64_any_dtype(column) or pd.api.types.is_timedelta64_dtype(column):
        raise DataError(f"{place.label}: column {name!r} holds times, not numbers (is it a second time column?)")
    if pd.api.types.is_bool_dtype(column) or pd.api.types.is_numeric_dtype(column):
        return column.to_numpy(dtype=np.float64, na_value=np.nan)
    numbers = pd.to_numeric(column, errors="coerce")
    bad = np.flatnonzero((numbers.isna() & column.notna()).to_numpy())
    if bad.size:
        i = int(bad[0])
        # Text repeated over many rows is more likely an entity's name than a broken number.
        names_entities = bad.size == len(column) and column.nunique() < len(column)
        said = (f"{place.label}: column {name!r} is not numeric: {place.row(i)} holds {plain_repr(column.iloc[i])} "
                f"({bad.size} non-numeric rows in all)")
        hint = "; if it names entities (one series each, same variates), pass "
        raise DataError(f"{said}{hint}entity_col={name!r}" if names_entities else said,
                        cli=f"{said}{hint}--set data.entity_col={name}" if names_entities else None)
    return numbers.to_numpy(dtype=np.float64, na_value=np.nan)


def _from_array(array: np.ndarray, *, freq, start, columns, fill) -> pd.DataFrame:
    if freq is None:
        raise ConfigError("freq is required when the source is a NumPy array (for example freq='h')")
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2:
        raise DataError(f"array: expected shape [T, C] or [T], got {array.shape}")
    names = [str(i) for i in range(array.shape[1])] if columns is None else [str(c) for c in columns]
    if len(names) != array.shape[1]:
        raise ConfigError(f"columns: {len(names)} names given for an array with {array.shape[1]} columns")
    check_freq(freq, "freq")
    try:
        index = pd.date_range(start=start, periods=array.shape[0], freq=freq, name="date")
    except ValueError as exc:
        raise ConfigError(f"start={start!r}: {exc}") from exc
    frame = pd.DataFrame(array, index=index, columns=names)
    return _finish(frame, Place("array"), spec=None, source="array", freq=freq, fill=fill)


def _finish(
    frame: pd.DataFrame,
    place: Place,
    *,
    spec: DatasetSpec | None,
    source: str,
    freq: str | None = None,
    fill: str | None = None,
    allow_irregular: bool = False,
    check_timestamps: bool = True,
) -> pd.DataFrame:
    """Numeric and finite checks, the regularity check, and the metadata: shared by every source."""
    if frame.shape[1] == 0:
        raise DataError(f"{place.label}: no value columns besides the time column")
    names = [str(c) for c in frame.columns]
    repeated = sorted(name for name, count in Counter(names).items() if count > 1)
    if repeated:
        raise DataError(f"{place.label}: column name(s) {repeated} appear more than once; each variate needs its own name")
    if all(pd.api.types.is_numeric_dtype(dtype) for dtype in frame.dtypes):
        values = frame.to_numpy(dtype=np.float64, na_value=np.nan)  # one pass for the usual case
    else:
        values = np.column_stack([_require_numeric(frame.iloc[:, j], name, place) for j, name in enumerate(names)])
    values = _handle_non_finite(values, names, frame.index, place, fill)
    index = pd.DatetimeIndex(frame.index, name="date")
    problem = irregularity(index, place) if check_timestamps else None
    if problem is not None:
        if spec is not None:
            warnings.warn(f"{problem}; kept as in the published benchmark protocol", DataWarning, stacklevel=4)
        elif allow_irregular:
            warnings.warn(f"{problem}; kept because allow_irregular=True", DataWarning, stacklevel=4)
        else:
            raise DataError(f"{problem}. Fix the timestamps, resample, or pass allow_irregular=True to keep the rows "
                            "as they are",
                            cli=f"{problem}. Fix the timestamps, resample, or pass allow_irregular=True (command line: "
                                "--allow-irregular) to keep the rows as they are")
    if spec is not None:
        freq = spec.freq
    elif freq is None:
        freq = inferred_freq(index, place)
    else:
        check_freq(freq, "freq")
        if problem is None:
            check_steps_match(index, freq, place)
    result = pd.DataFrame(values, index=index, columns=names)
    name = spec.name if spec is not None else series_name(source)
    result.attrs[ATTRS_KEY] = {
        "name": name,
        "dataset": spec.name if spec is not None else None,
        "freq": freq,
        "source": source,
    }
    return result


def series_name(source: str) -> str:
    """What a user series is called: its file's name without suffixes, or "DataFrame" / "array"."""
    return source if source in ("DataFrame", "array") else Path(source).name.split(".")[0]


def _handle_non_finite(values: np.ndarray, names: list[str], index, place: Place, fill: str | None) -> np.ndarray:
    finite = np.isfinite(values)
    if finite.all():
        return values
    if fill is None:
        rows, cols = np.nonzero(~finite)
        first = int(np.argmin(rows))  # earliest bad row; its column
        i, j = int(rows[first]), int(cols[first])
        raise DataError(
            f"{place.label}: column {names[j]!r} {place.row(i)} ({index[i]}) is {values[i, j]} "
            f"({(~finite).sum()} NaN/inf values in all). Clean the data or pass fill='ffill', "
            "'interpolate' or 'zero'"
        )
    frame = pd.DataFrame(np.where(finite, values, np.nan))
    fillers: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {
        "ffill": lambda f: f.ffill().bfill(),
        "interpolate": lambda f: f.interpolate(method="linear", limit_direction="both"),
        "zero": lambda f: f.fillna(0.0),
    }
    filled = fillers[fill](frame).to_numpy()
    empty = np.flatnonzero(np.isnan(filled).all(axis=0))
    if empty.size:
        raise DataError(f"{place.label}: column {names[int(empty[0])]!r} has no finite value, nothing to fill from")
    return filled


