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
from damcha_ts.errors import ConfigError, DataError, DatasetNotFoundError, plain_repr

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
        cli_wide_hint = ", or --set data.layout=wide to read every column as a variate" if layout == "auto" else ""
        said = f"{label}: {how} a long file ({id_col}, {time_col}, {value_col}) but also has column(s) {extra}, "
        listed = ",".join(extra)
        raise DataError(
            f"{said}which a long file cannot hold; pass ignore={extra} to leave them out{wide_hint}, or name them as "
            f"covariates (future_covariates={extra} or past_covariates=...) to read each {id_col} as a series with them",
            cli=f"{said}which a long file cannot hold; pass ignore={extra} (command line: --ignore {listed}) to leave "
                f"them out{cli_wide_hint}, or name them as "
                f"covariates (--future-covariates {listed} or --past-covariates ...) to read each {id_col} as a series "
                "with them",
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


# ------------------------------------------------------------------ one series or many entities

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
        return _read_csv(self.table, sep=csv_separator(self.table, self.sep)[0], usecols=names, nrows=rows,
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
        ignored = set(_ignored_columns(columns.names, reading["ignore"], label))
        kept = [c for c in columns.names if c not in ignored | named | per_entity]
        time = None if columns.time_index and reading["time_col"] is None else _find_time_column(
            kept, reading["time_col"], label)
    except DataError:
        return None  # reading the table says what is wrong
    # A long table's id column (ids of variates) never names entities by itself.
    long_id, long_value = _long_columns(kept, reading["id_col"], reading["value_col"])
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
        rest_id, rest_value = _long_columns(rest, reading["id_col"], reading["value_col"])
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
    return _id_spans(keys[shape.id_col].astype(str), keys[shape.time_col]) is not None


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
        raw = _long_to_wide(raw, shape.time_col, shape.id_col, shape.value_col, date_format, place,
                            fill=options.get("fill"))
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
            f"holds {plain_repr(column.iloc[i])}; give every timestamp its offset, or none"
        )
    normal = found.str.replace("Z", "+00:00", regex=False).str.replace(r"^([+-]\d{2})(\d{2})$", r"\1:\2", regex=True)
    return [str(offset) for offset in pd.unique(normal)]


def _long_to_wide(raw, time_col, id_col, value_col, date_format, place: _Place,
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
    spans = _id_spans(keyed["id"], keyed["time"])
    if fill is None and spans is not None:
        # Ids that start or end apart: fill= would invent whole stretches of one series (and forecast
        # it from another's end), so they are read one by one instead. (Holes inside are NaN to fill.)
        short = str((spans["last"] - spans["first"]).idxmin())
        said = (f"{place.label}: id {short!r} runs from {spans['first'][short]} to {spans['last'][short]}, the ids "
                f"together from {wide.index[0]} to {wide.index[-1]}; a long file read as one series needs every id "
                f"over the same span. Read each {id_col} as its own series with ")
        raise DataError(f"{said}entity_col={id_col!r}", cli=f"{said}--set data.entity_col={id_col}")
    return wide


def _id_spans(ids: pd.Series, stamps: pd.Series | pd.DatetimeIndex) -> pd.DataFrame | None:
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
