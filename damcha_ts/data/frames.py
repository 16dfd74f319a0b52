"""Turning any supported source into one validated wide frame.

Every source (benchmark name, CSV path, wide or long DataFrame, NumPy array) goes through the same
checks and comes out as a DataFrame with a DatetimeIndex named ``date`` and float64 columns, one per
variate, in source order. What we learnt about it (dataset name, frequency, origin) is kept in
``frame.attrs["damcha_ts"]``, so ``prepare(load_frame("ETTm1"), ...)`` applies the benchmark's
protocol without reading the file again (as long as the frame keeps the benchmark's full shape;
a cut-down frame counts as user data).
"""

from __future__ import annotations

import bz2
import contextlib
import csv
import gzip
import lzma
import os
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from damcha_ts.data.options import check_fill, check_layout
from damcha_ts.data.registry import (
    DatasetSpec,
    DataWarning,
    get_spec,
    is_benchmark_name,
)
from damcha_ts.data.storage import locate_dataset
from damcha_ts.errors import ConfigError, DataError, DatasetNotFoundError

ATTRS_KEY = "damcha_ts"
# Column names recognised as the time axis when ``time_col`` is not given (compared lower-case).
TIME_COLUMN_NAMES = ("date", "time", "timestamp", "datetime", "ds")
# Delimiters recognised in a CSV header when ``sep`` is not given; the first wins a tie.
SEPARATORS = (",", ";", "\t", "|")
# From this many columns on, a CSV is parsed in one pass (see read_csv_frame).
WIDE_CSV_COLUMNS = 2_000

Source = str | os.PathLike | pd.DataFrame | np.ndarray


def frame_info(frame: pd.DataFrame) -> dict:
    """The metadata ``load_frame`` attached: ``name``, ``dataset`` (benchmark or None), ``freq``, ``source``."""
    return dict(frame.attrs.get(ATTRS_KEY, {}))


def load_frame(
    source: Source,
    *,
    path: str | os.PathLike | None = None,
    download: bool = True,
    time_col: str | None = None,
    date_format: str | None = None,
    layout: str = "auto",
    id_col: str | None = None,
    value_col: str | None = None,
    freq: str | None = None,
    start: str | pd.Timestamp = "2000-01-01",
    columns: list[str] | None = None,
    fill: str | None = None,
    allow_irregular: bool = False,
    ignore: Iterable[str] | None = None,
    sep: str | None = None,
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
            place = _Place("DataFrame")
            return _finish(source, place, spec=spec, source=frame_info(source)["source"], fill=fill, check_timestamps=False)
        origin = _csv_origin(source)
        return _from_dataframe(source, origin or "DataFrame", time_col, date_format, layout, id_col, value_col,
                               header_lines=1 if origin else None, **user_options)
    if isinstance(source, np.ndarray):
        return _from_array(source, freq=freq, start=start, columns=columns, fill=fill)
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if is_benchmark_name(text) and not Path(text).is_file():
            return _from_benchmark(get_spec(text), path, download, fill)
        file = Path(text).expanduser()
        if file.is_file():
            return _from_csv(file, sep, time_col, date_format, layout, id_col, value_col, **user_options)
        if file.suffix or os.sep in text or "/" in text:
            raise DatasetNotFoundError(f"no such file: {file}")
        get_spec(text)  # not a file and not a benchmark: raises ConfigError suggesting close names
    raise ConfigError(
        f"source must be a benchmark name, a CSV path, a pandas DataFrame or a NumPy array, got {type(source).__name__}"
    )


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


class _Place:
    """Where a row lives, for error messages: ``file.csv row 12 (line 14)`` or ``DataFrame row 12``."""

    def __init__(self, label: str, header_lines: int | None = None):
        self.label = label
        self.header_lines = header_lines

    def row(self, i: int) -> str:
        if self.header_lines is None:
            return f"row {i}"
        return f"row {i} (line {i + 1 + self.header_lines})"


def _from_benchmark(spec: DatasetSpec, path, download: bool, fill: str | None) -> pd.DataFrame:
    file = locate_dataset(spec, path, download=download)
    place = _Place(str(file), header_lines=1)
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


# DataFrame.attrs key: the CSV file a frame was read from by read_csv_frame (for error messages).
CSV_ORIGIN_KEY = "damcha_ts_csv"


def read_csv_frame(path: str | os.PathLike, *, sep: str | None = None) -> pd.DataFrame:
    """The CSV as a raw frame (its own layout, nothing parsed), remembering its file: ``load_frame``
    errors about it then name the file and CSV line instead of ``DataFrame row i``.

    ``sep`` is the delimiter; without it, the one the header is split by (see
    :func:`csv_separator`), with a DataWarning when that is not a comma."""
    file = _user_file(path)
    used, detected = csv_separator(file, sep)
    if detected and used != ",":
        warnings.warn(
            f"{file}: read with delimiter {used!r} (detected from the header); pass sep=... "
            "(command line: --sep) to choose another",
            DataWarning,
            stacklevel=2,
        )
    # pandas' chunked parser takes about 2**20 / columns rows per chunk and concatenates every
    # column once per chunk: quadratic in the columns. A wide file is parsed in one pass instead
    # (that costs about twice the memory, so a narrow, long file keeps the chunks).
    wide = _first_line(file).count(used) + 1 >= WIDE_CSV_COLUMNS
    raw = _read_csv(file, sep=used, low_memory=not wide)
    raw.attrs[CSV_ORIGIN_KEY] = str(file)
    return raw


def read_csv_header(path: str | os.PathLike, *, sep: str | None = None) -> list[str]:
    """The column names of a CSV, split as :func:`read_csv_frame` splits them (nothing else is read)."""
    file = _user_file(path)
    # In one pass: pandas' chunked parser is quadratic in the columns even for no rows.
    header = _read_csv(file, sep=csv_separator(file, sep)[0], nrows=0, low_memory=False)
    return [str(c) for c in header.columns]


def _user_file(path: str | os.PathLike) -> Path:
    file = Path(path).expanduser()
    if not file.is_file():
        raise DatasetNotFoundError(f"no such file: {file}")
    return file


def csv_separator(file: Path, sep: str | None = None) -> tuple[str, bool]:
    """(the delimiter to read ``file`` with, whether it was detected rather than given).

    Detected: of , ; tab and |, the one that splits the header line into the most fields (a comma
    when none splits it), so that a semicolon file is not read as one column named 'date;a;b'.
    """
    if sep is not None:
        if not isinstance(sep, str) or len(sep) != 1 or sep in "\r\n\"":
            raise ConfigError(f"sep must be one character such as ',' ';' '\\t' or '|', got {sep!r}")
        return sep, False
    header = _first_line(file)
    counts = {candidate: len(next(csv.reader([header], delimiter=candidate), [])) for candidate in SEPARATORS}
    best = max(SEPARATORS, key=lambda candidate: counts[candidate])  # max keeps the first of a tie
    return (best if counts[best] > 1 else ","), True


# How a compressed CSV is opened, and what its format is called, by suffix (pandas infers the
# same from the name).
_COMPRESSIONS = {".gz": (gzip.open, "gzip"), ".bz2": (bz2.open, "bzip2"), ".xz": (lzma.open, "xz")}


def _first_line(file: Path, limit: int = 1 << 16) -> str:
    """The start of the file's first line (``limit`` characters are plenty to count delimiters)."""
    opener = _COMPRESSIONS.get(file.suffix.lower(), (open,))[0]
    with _reading(file), opener(file, "rt", encoding="utf-8", errors="replace", newline="") as handle:
        return handle.readline(limit).rstrip("\r\n")


def _read_csv(file: Path, **options) -> pd.DataFrame:
    with _reading(file):
        return pd.read_csv(file, **options)


@contextlib.contextmanager
def _reading(file: Path):
    """What goes wrong reading ``file`` becomes a DataError naming it; an OSError of the file
    system itself (permissions...) goes on as it is, which the command line reports in one line."""
    try:
        yield
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"{file}: cannot be read as CSV: {exc}") from exc
    except (EOFError, zlib.error, lzma.LZMAError, OSError) as exc:
        compression = _COMPRESSIONS.get(file.suffix.lower())
        # A cut-off download or copy ends a compressed stream early (EOFError); a file that is not
        # compressed, or is damaged, fails its header or checksum (gzip and bz2 raise a bare OSError).
        if isinstance(exc, OSError) and not (compression is not None and exc.errno is None):
            raise
        kind = compression[1] if compression else "compressed data"
        raise DataError(f"{file}: is truncated or not valid {kind} ({type(exc).__name__}: {exc})") from exc


def _csv_origin(frame: pd.DataFrame) -> str | None:
    """The file of a frame read_csv_frame returned, while its rows are still the file's rows."""
    index = frame.index
    whole = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
    return frame.attrs.get(CSV_ORIGIN_KEY) if whole else None


def frame_label(frame: pd.DataFrame) -> str:
    """How errors name a frame: its CSV file when read_csv_frame read it, else "DataFrame"."""
    return _csv_origin(frame) or "DataFrame"


@dataclass(frozen=True)
class Layout:
    """How a table's columns are read (see :func:`decide_layout`)."""

    kind: str  # "wide" or "long"
    time_col: str | None  # None: the timestamps are the frame's DatetimeIndex
    ignored: tuple[str, ...]  # columns left out, as the caller asked
    columns: tuple[str, ...]  # the columns read, in the table's order (time, id and value included)
    id_col: str = "id"  # a long table's id and value columns (see LONG_COLUMNS)
    value_col: str = "value"

    @property
    def variates(self) -> list[str]:
        """A wide table's variate columns, in order."""
        return [c for c in self.columns if c != self.time_col]


def decide_layout(
    columns: list[str],
    label: str,
    *,
    time_col: str | None = None,
    time_index: bool = False,
    layout: str = "auto",
    id_col: str | None = None,
    value_col: str | None = None,
    ignore: Iterable[str] | None = None,
) -> Layout:
    """Whether a table with these column names is wide or long: the one rule, for reading
    (load_frame) and for recording how an input was read (layout.describe_input).

    ``time_index``: the table has a DatetimeIndex, which holds the timestamps unless ``time_col``
    is given (the table is then wide). ``layout`` "auto" reads a header that has ``id_col``, a time
    column and ``value_col`` as long, whatever else it has; a long table's other columns are an
    error naming them (never dropped silently) unless ``ignore`` lists them. Without ``id_col`` and
    ``value_col`` the names of :data:`LONG_COLUMNS` are tried in order: ours (``id``, ``value``), then
    neuralforecast's (``unique_id``, ``y``).
    """
    check_layout(layout)
    ignored = _ignored_columns(columns, ignore, label)
    left_out = set(ignored)
    kept = tuple(c for c in columns if c not in left_out)
    if time_index and time_col is None:
        return Layout("wide", None, ignored, kept, *_long_columns(kept, id_col, value_col))
    time_col = _find_time_column(kept, time_col, label)
    id_col, value_col = _long_columns(kept, id_col, value_col)
    looks_long = id_col in kept and value_col in kept
    if layout == "wide" or (layout == "auto" and not looks_long):
        return Layout("wide", time_col, ignored, kept, id_col, value_col)
    for column in (id_col, value_col):
        if column not in kept:
            raise DataError(f"{label}: long layout needs column {column!r}; columns are {list(kept)}")
    extra = [c for c in kept if c not in (id_col, time_col, value_col)]
    if extra:
        how = "looks like" if layout == "auto" else "is read as"
        wide_hint = ", or layout='wide' to read every column as a variate" if layout == "auto" else ""
        said = f"{label}: {how} a long file ({id_col}, {time_col}, {value_col}) but also has column(s) {extra}, "
        raise DataError(
            f"{said}which a long file cannot hold; pass ignore={extra} to leave them out{wide_hint}, or name them as "
            f"covariates (future_covariates={extra} or past_covariates=...) to read each {id_col} as a series with them",
            cli=f"{said}which a long file cannot hold; pass ignore={extra} (command line: --ignore {','.join(extra)}) "
                f"to leave them out{wide_hint}",
        )
    return Layout("long", time_col, ignored, kept, id_col, value_col)


#: The (id, value) column names a long table is recognised by when the caller names neither:
#: damcha_ts's own, then neuralforecast's ``unique_id, ds, y`` frames.
LONG_COLUMNS = (("id", "value"), ("unique_id", "y"))


def _long_columns(columns, id_col: str | None, value_col: str | None) -> tuple[str, str]:
    """The id and value column names: the caller's, else the first convention the header has."""
    if id_col is not None or value_col is not None:
        return id_col or LONG_COLUMNS[0][0], value_col or LONG_COLUMNS[0][1]
    present = set(columns)
    return next((names for names in LONG_COLUMNS if set(names) <= present), LONG_COLUMNS[0])


def _ignored_columns(columns: list[str], ignore: Iterable[str] | None, label: str) -> tuple[str, ...]:
    if ignore is None:
        return ()
    names = [ignore] if isinstance(ignore, str) else ignore
    try:
        names = tuple(dict.fromkeys(str(name) for name in names))
    except TypeError:
        raise ConfigError(f"ignore must be a list of column names, got {ignore!r}") from None
    present = set(columns)
    absent = [name for name in names if name not in present]
    if absent:
        raise DataError(f"{label}: ignore names column(s) {absent} that are not there; columns are {list(columns)}")
    return names


def _from_csv(file: Path, sep, time_col, date_format, layout, id_col, value_col, **options) -> pd.DataFrame:
    return _from_dataframe(
        read_csv_frame(file, sep=sep), str(file), time_col, date_format, layout, id_col, value_col, header_lines=1,
        **options,
    )


def _from_dataframe(
    raw: pd.DataFrame, label: str, time_col, date_format, layout, id_col, value_col, *, header_lines=None, ignore=None,
    **options,
) -> pd.DataFrame:
    place = _Place(label, header_lines)
    raw = raw.copy(deep=False)  # new column labels only; the values are copied once, in _finish
    raw.columns = [str(c) for c in raw.columns]
    shape = decide_layout(
        list(raw.columns), label, time_col=time_col, time_index=isinstance(raw.index, pd.DatetimeIndex),
        layout=layout, id_col=id_col, value_col=value_col, ignore=ignore,
    )
    if shape.ignored:
        raw = raw.drop(columns=list(shape.ignored))
    if shape.kind == "long":
        raw = _long_to_wide(raw, shape.time_col, shape.id_col, shape.value_col, date_format, place)
        place = _Place(f"{label} (long layout, pivoted)")
        stamps = raw.index
    elif shape.time_col is None:
        stamps = raw.index
    else:
        stamps = _parse_times(raw[shape.time_col], shape.time_col, date_format, place)
        raw = raw.drop(columns=[shape.time_col])
    raw.index = pd.DatetimeIndex(stamps, name="date")
    return _finish(raw, place, spec=None, source=label, **options)


def _find_time_column(columns, time_col: str | None, label: str) -> str:
    if time_col is not None:
        if time_col not in columns:
            raise DataError(f"{label}: time column {time_col!r} not found; columns are {list(columns)}")
        return time_col
    for column in columns:
        if column.lower() in TIME_COLUMN_NAMES:
            return column
    said = (f"{label}: no time column: expected a DatetimeIndex or a column named one of {TIME_COLUMN_NAMES}; "
            f"columns are {list(columns)}.")
    raise DataError(f"{said} Pass time_col=... to name it.",
                    cli=f"{said} Pass time_col=... (command line: --time-col) to name it.")


def _parse_times(column: pd.Series, name: str, date_format: str | None, place: _Place) -> pd.DatetimeIndex:
    parsed = _to_datetime(column, date_format)
    if not isinstance(parsed, pd.Series) or parsed.dtype == object:
        # Several UTC offsets (a DST change in local time) have no single pandas dtype: they are one
        # timeline only once converted to UTC.
        offsets = _utc_offsets(column, name, place)
        if len(offsets) > 1:
            warnings.warn(
                f"{place.label}: time column {name!r} has mixed UTC offsets ({', '.join(offsets)}); converted to UTC",
                DataWarning,
                stacklevel=4,
            )
            parsed = _to_datetime(column, date_format, utc=True)
    if not isinstance(parsed, pd.Series) or parsed.dtype == object:
        problem = parsed if isinstance(parsed, Exception) else "the values are not one kind of timestamp"
        raise DataError(f"{place.label}: column {name!r} cannot be parsed as timestamps: {problem}")
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if bad.size:
        i = int(bad[0])
        problem = "is empty" if pd.isna(column.iloc[i]) else f"holds {column.iloc[i]!r}, which is not a timestamp"
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


def _utc_offsets(column: pd.Series, name: str, place: _Place) -> list[str]:
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
            f"holds {column.iloc[i]!r}; give every timestamp its offset, or none"
        )
    normal = found.str.replace("Z", "+00:00", regex=False).str.replace(r"^([+-]\d{2})(\d{2})$", r"\1:\2", regex=True)
    return [str(offset) for offset in pd.unique(normal)]


def _long_to_wide(raw, time_col, id_col, value_col, date_format, place: _Place) -> pd.DataFrame:
    stamps = _parse_times(raw[time_col], time_col, date_format, place)
    keyed = pd.DataFrame({"id": raw[id_col].astype(str).to_numpy(), "time": stamps, "value": raw[value_col].to_numpy()})
    duplicated = np.flatnonzero(keyed.duplicated(["id", "time"]).to_numpy())
    if duplicated.size:
        i = int(duplicated[0])
        raise DataError(
            f"{place.label}: {place.row(i)} repeats id {keyed['id'].iloc[i]!r} at {keyed['time'].iloc[i]} "
            "(each id may have one value per timestamp)"
        )
    _require_numeric(keyed["value"], value_col, place)
    wide = keyed.pivot(index="time", columns="id", values="value")
    # Variates keep the order in which their ids first appear, as a wide file would list them.
    wide = wide[list(pd.unique(keyed["id"]))]
    wide.columns.name = None
    return wide


def _require_numeric(column: pd.Series, name: str, place: _Place) -> np.ndarray:
    if pd.api.types.is_datetime64_any_dtype(column) or pd.api.types.is_timedelta64_dtype(column):
        raise DataError(f"{place.label}: column {name!r} holds times, not numbers (is it a second time column?)")
    if pd.api.types.is_bool_dtype(column) or pd.api.types.is_numeric_dtype(column):
        return column.to_numpy(dtype=np.float64, na_value=np.nan)
    numbers = pd.to_numeric(column, errors="coerce")
    bad = np.flatnonzero((numbers.isna() & column.notna()).to_numpy())
    if bad.size:
        i = int(bad[0])
        # Text repeated over many rows is more likely an entity's name than a broken number.
        hint = (f"; if it names entities (one series each, same variates), pass entity_col={name!r}"
                if bad.size == len(column) and column.nunique() < len(column) else "")
        raise DataError(
            f"{place.label}: column {name!r} is not numeric: {place.row(i)} holds {column.iloc[i]!r} "
            f"({bad.size} non-numeric rows in all){hint}"
        )
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
    return _finish(frame, _Place("array"), spec=None, source="array", freq=freq, fill=fill)


def _finish(
    frame: pd.DataFrame,
    place: _Place,
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
    problem = _irregularity(index, place) if check_timestamps else None
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
        freq = _inferred_freq(index, place)
    else:
        check_freq(freq, "freq")
        if problem is None:
            _check_steps_match(index, freq, place)
    result = pd.DataFrame(values, index=index, columns=names)
    name = spec.name if spec is not None else (Path(source).name.split(".")[0] if source not in ("DataFrame", "array") else source)
    result.attrs[ATTRS_KEY] = {
        "name": name,
        "dataset": spec.name if spec is not None else None,
        "freq": freq,
        "source": source,
    }
    return result


def _handle_non_finite(values: np.ndarray, names: list[str], index, place: _Place, fill: str | None) -> np.ndarray:
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


def _irregularity(index: pd.DatetimeIndex, place: _Place) -> str | None:
    """Sentences naming the first duplicate, backwards and off-step timestamps; None if regular."""
    problems = []
    duplicated = np.flatnonzero(index.duplicated())
    if duplicated.size:
        i = int(duplicated[0])
        problems.append(f"duplicate timestamp {index[i]} at {place.row(i)} ({duplicated.size} duplicates in all)")
    steps = np.diff(index.asi8)
    backwards = np.flatnonzero(steps < 0)
    if backwards.size:
        i = int(backwards[0]) + 1
        problems.append(f"timestamps go backwards at {place.row(i)} ({index[i]} after {index[i - 1]})")
    if not problems and (len(index) < 3 or pd.infer_freq(index) is not None):
        return None
    forward = steps[steps > 0]
    if forward.size:
        usual = _modal_step(forward)
        off = np.flatnonzero((steps > 0) & (steps != usual))
        if off.size:
            i = int(off[0]) + 1
            problems.append(
                f"irregular step at {place.row(i)} ({index[i]} comes {pd.Timedelta(int(steps[i - 1]))} after "
                f"{index[i - 1]}; the usual step is {pd.Timedelta(int(usual))}; {off.size} irregular steps in all)"
            )
    return f"{place.label}: " + "; ".join(problems) if problems else None


def _modal_step(steps: np.ndarray) -> int:
    values, counts = np.unique(steps, return_counts=True)
    return int(values[np.argmax(counts)])


def check_freq(freq: str, argument: str) -> None:
    """A ConfigError naming ``argument`` unless ``freq`` is a pandas frequency string ("h", "15min")."""
    try:
        pd.tseries.frequencies.to_offset(freq)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{argument}={freq!r} is not a pandas frequency string (e.g. 'h', '15min', 'D'): {exc}") from exc


def _check_steps_match(index: pd.DatetimeIndex, freq: str, place: _Place) -> None:
    """A given ``freq`` must be the one the timestamps step by: the forecast's timestamps and time
    features follow it (``freq="W"`` means Sundays; Monday data is ``"W-MON"``)."""
    if len(index) < 2:
        return
    offset = pd.tseries.frequencies.to_offset(freq)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pd.errors.PerformanceWarning)  # calendar offsets apply per element
        expected = index[:-1] + offset
    bad = np.flatnonzero(expected != index[1:])
    if bad.size:
        i = int(bad[0]) + 1
        raise DataError(
            f"{place.label}: freq={freq!r} does not match the timestamps: {place.row(i)} is {index[i]}, "
            f"but one {freq!r} step after {index[i - 1]} is {expected[i - 1]}. Leave freq out to infer it"
        )


def _inferred_freq(index: pd.DatetimeIndex, place: _Place) -> str:
    if len(index) >= 3:
        inferred = pd.infer_freq(index)
        if inferred is not None:
            return inferred
    if len(index) < 2:
        raise DataError(f"{place.label}: {len(index)} timestamp(s) are too few to tell the frequency; pass freq=...")
    # Irregular but allowed: the most common step stands for the frequency.
    return pd.tseries.frequencies.to_offset(pd.Timedelta(_modal_step(np.diff(index.asi8)))).freqstr
