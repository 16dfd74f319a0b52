"""How a table's columns are read: wide (a time column and one column per variate) or long (time,
id and value columns), which column holds the time, and the columns left out (``ignore``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from damcha_ts.data.options import check_layout
from damcha_ts.errors import ConfigError, DataError

# Column names recognised as the time axis when ``time_col`` is not given (compared lower-case).
TIME_COLUMN_NAMES = ("date", "time", "timestamp", "datetime", "ds")


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
    ignored = ignored_columns(columns, ignore, label)
    left_out = set(ignored)
    kept = tuple(c for c in columns if c not in left_out)
    if time_index and time_col is None:
        return Layout("wide", None, ignored, kept, *long_columns(kept, id_col, value_col))
    time_col = find_time_column(kept, time_col, label)
    id_col, value_col = long_columns(kept, id_col, value_col)
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


def long_columns(columns, id_col: str | None, value_col: str | None) -> tuple[str, str]:
    """The id and value column names: the caller's, else the first convention the header has."""
    if id_col is not None or value_col is not None:
        return id_col or LONG_COLUMNS[0][0], value_col or LONG_COLUMNS[0][1]
    present = set(columns)
    return next((names for names in LONG_COLUMNS if set(names) <= present), LONG_COLUMNS[0])


def ignored_columns(columns: list[str], ignore: Iterable[str] | None, label: str) -> tuple[str, ...]:
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


def find_time_column(columns, time_col: str | None, label: str) -> str:
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
