"""Reading a CSV file as it is: its delimiter, its header, its rows, and errors that name the file
(and a compressed file's format) instead of pandas' parser. ``load_frame`` reads CSVs through here."""

from __future__ import annotations

import bz2
import contextlib
import csv
import gzip
import lzma
import os
import warnings
import zlib
from pathlib import Path

import pandas as pd

from damcha_ts.data.registry import DataWarning
from damcha_ts.errors import ConfigError, DataError, DatasetNotFoundError

# Delimiters recognised in a CSV header when ``sep`` is not given; the first wins a tie.
SEPARATORS = (",", ";", "\t", "|")


# From this many columns on, a CSV is parsed in one pass (see read_csv_frame).
WIDE_CSV_COLUMNS = 2_000


# DataFrame.attrs key: the CSV file a frame was read from by read_csv_frame (for error messages).
CSV_ORIGIN_KEY = "damcha_ts_csv"


def read_csv_frame(path: str | os.PathLike, *, sep: str | None = None) -> pd.DataFrame:
    """The CSV as a raw frame (its own layout, nothing parsed), remembering its file: ``load_frame``
    errors about it then name the file and CSV line instead of ``DataFrame row i``.

    ``sep`` is the delimiter; without it, the one the header is split by (see
    :func:`csv_separator`), with a DataWarning when that is not a comma."""
    file = user_file(path)
    used, detected = csv_separator(file, sep)
    if detected and used != ",":
        warnings.warn(
            f"{file}: read with delimiter {used!r} (detected from the header); pass sep=... "
            "(command line: --sep) to choose another",
            DataWarning, stacklevel=2,
        )
    # pandas' chunked parser takes about 2**20 / columns rows per chunk and concatenates every
    # column once per chunk: quadratic in the columns. A wide file is parsed in one pass instead
    # (that costs about twice the memory, so a narrow, long file keeps the chunks).
    wide = _first_line(file).count(used) + 1 >= WIDE_CSV_COLUMNS
    raw = read_csv(file, sep=used, low_memory=not wide)
    raw.attrs[CSV_ORIGIN_KEY] = str(file)
    return raw


def read_csv_header(path: str | os.PathLike, *, sep: str | None = None) -> list[str]:
    """The column names of a CSV, split as :func:`read_csv_frame` splits them (nothing else is read)."""
    file = user_file(path)
    # In one pass: pandas' chunked parser is quadratic in the columns even for no rows.
    header = read_csv(file, sep=csv_separator(file, sep)[0], nrows=0, low_memory=False)
    return [str(c) for c in header.columns]


def user_file(path: str | os.PathLike) -> Path:
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


def read_csv(file: Path, **options) -> pd.DataFrame:
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


def csv_origin(frame: pd.DataFrame) -> str | None:
    """The file of a frame read_csv_frame returned, while its rows are still the file's rows."""
    index = frame.index
    whole = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
    return frame.attrs.get(CSV_ORIGIN_KEY) if whole else None


def frame_label(frame: pd.DataFrame) -> str:
    """How errors name a frame: its CSV file when read_csv_frame read it, else "DataFrame"."""
    return csv_origin(frame) or "DataFrame"
