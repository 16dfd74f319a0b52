"""Reading user CSVs: the layout comes from the header, no column is dropped silently, and a broken
or unusual file (truncated gzip, DST offsets, another delimiter, a very wide header) gets a clear
answer instead of a traceback.

Matrix rows: a CSV and the ``damcha-ts data info`` / ``fit`` / ``predict`` command run on it → the
exit code and the message. A case that succeeds checks afterwards what was read (``data info
--json``: columns and rows, nothing dropped) or that ``predict`` reads the same file again.
Beside it, the Python API: ``load_frame`` and ``describe_input`` decide the layout by one rule,
``ignore=`` and ``sep=`` reach ``load_frame`` from every entry point, ``read_csv_frame`` on a
truncated file.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from matrix import Case, check_case, fit_argv, hourly_frame, run_cli, write_csv

from damcha_ts.data import DataWarning, load_frame, prepare
from damcha_ts.data.csv_files import read_csv_frame
from damcha_ts.errors import DataError

# data info on a 400-row hourly file needs windows shorter than the default 96 + 96.
INFO = ["--lookback", "16", "--horizon", "4"]
ROWS = 400


def _long_frame(ids=("a", "b"), extra: bool = True) -> pd.DataFrame:
    """A long hourly frame (id, date, value), with a ``temp`` column that is not a series value."""
    wide = hourly_frame(ROWS, len(ids)).rename(columns={f"v{j}": name for j, name in enumerate(ids)})
    long = wide.melt(id_vars="date", var_name="id", value_name="value")[["id", "date", "value"]]
    if extra:
        long["temp"] = 20.0 + np.arange(len(long)) % 5
    return long


def _info(path: Path, *flags: str) -> dict:
    """``damcha-ts data info PATH --json`` (it must succeed)."""
    outcome = run_cli(["data", "info", path, *INFO, "--json", *flags])
    assert outcome.code == 0, outcome.stderr
    return json.loads(outcome.stdout)


def _predicts(run: str, data: str, *flags: str, columns: list[str] | None = None):
    """After a fit: ``damcha-ts predict --model RUN --input DATA`` reads the same file again."""

    def after(folder: Path) -> None:
        outcome = run_cli(["predict", "--model", folder / run, "--input", folder / data, "--json", *flags])
        assert outcome.code == 0, outcome.stderr
        summary = json.loads(outcome.stdout)
        assert summary["rows"] > 0
        if columns is not None:
            assert summary["columns"] == columns, summary
        assert "Traceback" not in outcome.stderr

    return after


def _writes_with(run: str, data: str, sep: str):
    """After a fit: ``damcha-ts predict --output`` writes the forecast with the input's delimiter."""

    def after(folder: Path) -> None:
        out = folder / "forecast.csv"
        outcome = run_cli(["predict", "--model", folder / run, "--input", folder / data, "--output", out])
        assert outcome.code == 0, outcome.stderr
        header = out.read_text().splitlines()[0]
        assert header.split(sep) == ["date", "v0", "v1", "v2"], header

    return after


def _reads(data: str, *flags: str, columns: list[str], rows: int = ROWS, freq: str = "h", check=None):
    """After a successful ``data info``: what was read (every variate there, nothing dropped)."""

    def after(folder: Path) -> None:
        info = _info(folder / data, *flags)
        assert info["columns"] == columns, info["columns"]
        assert (info["rows"], info["variates"], info["freq"]) == (rows, len(columns), freq), info
        if check is not None:
            check(info)

    return after


# --------------------------------------------------------------------------- files


def _long_with_extra(ids=("a", "b")):
    def make(folder: Path, fixtures: dict) -> Path:
        return write_csv(_long_frame(ids), folder / "long.csv")

    return make


def _info_case(make_file, *flags: str):
    def make(folder: Path, fixtures: dict) -> list[str]:
        return ["data", "info", make_file(folder, fixtures), *INFO, *flags]

    return make


def _fit_case(make_file, *flags: str):
    def make(folder: Path, fixtures: dict) -> list[str]:
        return fit_argv(make_file(folder, fixtures), folder / "run", *flags)

    return make


def _wide_with_note(folder: Path, fixtures: dict) -> Path:
    frame = hourly_frame(ROWS, 2)
    frame["note"] = np.arange(ROWS) % 7
    return write_csv(frame, folder / "wide.csv")


def _truncated_gzip(folder: Path, fixtures: dict) -> Path:
    whole = gzip.compress(hourly_frame(ROWS).to_csv(index=False).encode())
    path = folder / "series.csv.gz"
    path.write_bytes(whole[: len(whole) // 2])  # an interrupted download or copy
    return path


def _plain_csv_named_gz(folder: Path, fixtures: dict) -> Path:
    return write_csv(hourly_frame(ROWS), folder / "series.csv.gz.tmp").rename(folder / "series.csv.gz")


def _dst_stamps(rows: int = ROWS) -> list[str]:
    """Hourly Berlin local times with their offsets, across the 2024-03-31 change (+01:00, then +02:00)."""
    utc = pd.date_range("2024-03-30 00:00", periods=rows, freq="h", tz="UTC")
    return [stamp.isoformat(sep=" ") for stamp in utc.tz_convert("Europe/Berlin")]


def _dst(folder: Path, fixtures: dict) -> Path:
    frame = hourly_frame(ROWS)
    frame["date"] = _dst_stamps()
    return write_csv(frame, folder / "dst.csv")


def _delimited(sep: str, name: str = "series.csv", header: list[str] | None = None):
    def make(folder: Path, fixtures: dict) -> Path:
        frame = hourly_frame(ROWS)
        if header is not None:
            frame.columns = header
        frame.to_csv(folder / name, sep=sep, index=False)
        return folder / name

    return make


# Semicolon-separated, with commas in the names: the header splits into as many fields either way,
# so only --sep tells (and predict must then read it with the saved --sep).
AMBIGUOUS_HEADER = ["date", "price, eur", "load, mw", "temp, c"]


def _wide_csv(columns: int, rows: int = 50):
    def make(folder: Path, fixtures: dict) -> Path:
        rng = np.random.default_rng(0)
        stamps = pd.date_range("2024-01-01", periods=rows, freq="h").strftime("%Y-%m-%d %H:%M:%S")
        values = rng.integers(0, 1000, size=(rows, columns))
        lines = ["date," + ",".join(f"c{j}" for j in range(columns))]
        lines += [stamp + "," + ",".join(map(str, row)) for stamp, row in zip(stamps, values.tolist())]
        path = folder / "wide.csv"
        path.write_text("\n".join(lines) + "\n")
        return path

    return make


def _saved_input_options(run: str, **expected):
    def after(folder: Path) -> None:
        saved = json.loads((folder / run / "model" / "forecaster.json").read_text())["data"]["input_options"]
        for key, value in expected.items():
            assert saved.get(key) == value, saved

    return after


def _both(*checks):
    def after(folder: Path) -> None:
        for check in checks:
            check(folder)

    return after


def _utc_span(info: dict) -> None:
    assert info["first_timestamp"] == "2024-03-30 00:00:00+00:00", info["first_timestamp"]


CASES = [
    # 1. Long files with an extra column.
    Case("long file with an extra column: named as a layout problem", _info_case(_long_with_extra()), 2,
         "looks like a long file (id, date, value) but also has column(s) ['temp']"),
    Case("long file with an extra column and --id-col: not dropped silently", _info_case(_long_with_extra(), "--id-col", "id"),
         2, "pass ignore=['temp'] (command line: --ignore temp)"),
    Case("long file, numeric ids, --allow-irregular: not trained as wide data",
         _fit_case(_long_with_extra(ids=("1", "2")), "--allow-irregular"), 2,
         "looks like a long file (id, date, value) but also has column(s) ['temp']"),
    Case("long file --ignore temp: read long, both series", _info_case(_long_with_extra(), "--ignore", "temp", "--json"), 0,
         '"columns": ["a", "b"]', after=_reads("long.csv", "--ignore", "temp", columns=["a", "b"]), stream="stdout"),
    Case("long file fitted with --ignore temp: predict reads the same file",
         _fit_case(_long_with_extra(), "--ignore", "temp"), 0, "",
         after=_both(_saved_input_options("run", layout="long", ignore=["temp"]), _predicts("run", "long.csv"))),
    Case("wide file --ignore note: that column only is left out", _info_case(_wide_with_note, "--ignore", "note", "--json"), 0,
         '"columns": ["v0", "v1"]', after=_reads("wide.csv", "--ignore", "note", columns=["v0", "v1"]), stream="stdout"),
    Case("wide file fitted with --ignore note: predict reads the same file", _fit_case(_wide_with_note, "--ignore", "note"),
         0, "", after=_predicts("run", "wide.csv", columns=["v0", "v1"])),
    Case("--ignore of a column that is not there", _info_case(_wide_with_note, "--ignore", "nope,note"), 2,
         "ignore names column(s) ['nope'] that are not there"),
    # 2. A truncated .csv.gz.
    Case("truncated .csv.gz: data info", _info_case(_truncated_gzip), 2, "series.csv.gz: is truncated or not valid gzip"),
    Case("truncated .csv.gz: fit", _fit_case(_truncated_gzip), 2, "series.csv.gz: is truncated or not valid gzip"),
    Case("truncated .csv.gz: predict --input (read_csv_frame)",
         lambda folder, fixtures: ["predict", "--model", fixtures["trained_run"], "--input", _truncated_gzip(folder, fixtures)],
         2, "series.csv.gz: is truncated or not valid gzip"),
    # 3. Mixed UTC offsets across DST.
    Case("DST offsets: converted to UTC and said", _info_case(_dst), 0,
         "time column 'date' has mixed UTC offsets (+01:00, +02:00); converted to UTC",
         after=_reads("dst.csv", columns=["v0", "v1", "v2"], check=_utc_span)),
    Case("DST offsets with --date-format %z: fit, then predict", _fit_case(_dst, "--date-format", "%Y-%m-%d %H:%M:%S%z"), 0,
         "mixed UTC offsets (+01:00, +02:00); converted to UTC", after=_predicts("run", "dst.csv")),
    # 4. Other delimiters.
    Case("semicolon-delimited file: detected and said", _info_case(_delimited(";")), 0,
         "read with delimiter ';' (detected from the header)", after=_reads("series.csv", columns=["v0", "v1", "v2"])),
    Case("tab-delimited file: detected", _info_case(_delimited("\t", "series.tsv")), 0, "read with delimiter '\\t'",
         after=_reads("series.tsv", columns=["v0", "v1", "v2"])),
    Case("semicolon file fitted: predict reads the same file", _fit_case(_delimited(";")), 0, "read with delimiter ';'",
         after=_both(_predicts("run", "series.csv", columns=["v0", "v1", "v2"]), _writes_with("run", "series.csv", ";"))),
    Case("--sep of two characters is refused", _info_case(_delimited(";"), "--sep", ";;"), 2,
         "sep must be one character"),
    Case("--sep that is empty is refused", _info_case(_delimited(";"), "--sep", ""), 2, "sep must be one character"),
    Case("--ignore without a column name is refused", _info_case(_wide_with_note, "--ignore", ","), 2,
         "give column names separated by commas"),
    Case("--sep where the header is ambiguous: fit, then predict with the saved --sep",
         _fit_case(_delimited(";", header=AMBIGUOUS_HEADER), "--sep", ";"), 0, "",
         after=_both(_saved_input_options("run", sep=";"), _predicts("run", "series.csv", columns=AMBIGUOUS_HEADER[1:]))),
    # 5. A very wide header (a behaviour check; the timing lives in benchmarks/wide_header.py).
    Case("a 100,000-column CSV loads", _info_case(_wide_csv(100_000), "--json", "--lookback", "8", "--horizon", "4"), 0,
         '"variates": 100000', stream="stdout"),
]


@pytest.mark.timeout(120)  # the 100,000-column case took 142 s when the header was read in quadratic time
@pytest.mark.parametrize("case", CASES, ids=str)
def test_matrix(case, tmp_path, trained_run):
    check_case(case, tmp_path, {"trained_run": trained_run})


# --------------------------------------------------------------------------- the Python API


def test_one_rule_decides_the_layout_for_reading_and_for_saving(tmp_path):
    from damcha_ts.data.table_shape import decide_layout
    from damcha_ts.data.layout import describe_input

    long = _long_frame()
    for frame in (long, read_csv_frame(write_csv(long, tmp_path / "long.csv"))):
        # Reading and describing the input refuse it alike, and name the extra column.
        with pytest.raises(DataError, match=r"also has column\(s\) \['temp'\]"):
            load_frame(frame)
        with pytest.raises(DataError, match=r"also has column\(s\) \['temp'\]"):
            describe_input(frame, {})
        assert decide_layout(list(frame.columns), "t", ignore=["temp"]).kind == "long"
        kind, options = describe_input(frame, {"ignore": ["temp"]})
        assert (kind, options["ignore"], options["order"]) == ("long", ["temp"], ["id", "date", "value"])
        assert list(load_frame(frame, ignore=["temp"]).columns) == ["a", "b"]
    # Three columns, or an explicit layout, as before.
    assert decide_layout(["id", "date", "value"], "t").kind == "long"
    assert decide_layout(["id", "date", "value", "temp"], "t", layout="wide").kind == "wide"
    assert decide_layout(["date", "id", "x"], "t").kind == "wide"  # no value column: a wide file


def test_ignore_reaches_load_frame_from_prepare_and_the_forecaster_options(tmp_path):
    path = write_csv(_long_frame(), tmp_path / "long.csv")
    series = prepare(path, seq_len=16, pred_len=4, ignore="temp")  # one name as a string is fine too
    assert list(series.columns) == ["a", "b"]
    from damcha_ts.forecasting.history import check_data_options
    from damcha_ts.data.layout import input_columns
    from damcha_ts.training.config import KEYS

    check_data_options("fit/evaluate", {"ignore": ["temp"], "sep": ";"}, with_protocol=True)
    assert {"ignore", "sep"} <= set(KEYS["data"])  # the YAML data section accepts them
    assert input_columns(path, {"ignore": ["temp"]}, series) == ["a", "b"]


def test_wide_ignore_drops_only_the_named_columns():
    frame = hourly_frame(50, 3)
    assert list(load_frame(frame, ignore=["v1"]).columns) == ["v0", "v2"]
    with pytest.raises(DataError, match=r"ignore names column\(s\) \['v9'\]"):
        load_frame(frame, ignore=["v9"])


def test_read_csv_frame_truncated_gzip_names_the_file(tmp_path):
    path = _truncated_gzip(tmp_path, {})
    with pytest.raises(DataError, match=r"series\.csv\.gz: is truncated or not valid gzip \(EOFError"):
        read_csv_frame(path)
    # Not gzip at all: a DataError naming the file too (it was a bare "Not a gzipped file").
    with pytest.raises(DataError, match=r"series\.csv\.gz: is truncated or not valid gzip \(BadGzipFile"):
        read_csv_frame(_plain_csv_named_gz(tmp_path, {}))


def test_sep_detection_and_the_given_sep(tmp_path):
    path = _delimited(";")(tmp_path, {})
    with pytest.warns(DataWarning, match="read with delimiter ';'"):
        assert list(read_csv_frame(path).columns) == ["date", "v0", "v1", "v2"]
    ambiguous = _delimited(";", "ambiguous.csv", AMBIGUOUS_HEADER)(tmp_path, {})
    assert list(read_csv_frame(ambiguous, sep=";").columns) == AMBIGUOUS_HEADER
    assert list(load_frame(ambiguous, sep=";").columns) == AMBIGUOUS_HEADER[1:]


def test_mixed_offsets_become_one_utc_timeline():
    frame = hourly_frame(48)
    frame["date"] = _dst_stamps(48)
    with pytest.warns(DataWarning, match=r"mixed UTC offsets \(\+01:00, \+02:00\); converted to UTC"):
        loaded = load_frame(frame, date_format="%Y-%m-%d %H:%M:%S%z")
    assert str(loaded.index.tz) == "UTC" and pd.infer_freq(loaded.index) == "h"
    # Some stamps without an offset: converting those to UTC would be a guess, so it is refused.
    frame["date"] = [stamp[:-6] if i == 10 else stamp for i, stamp in enumerate(_dst_stamps(48))]
    with pytest.raises(DataError, match="mixes timestamps with and without a UTC offset: row 10 holds"):
        load_frame(frame)
