"""Bad leaderboard CSVs around the scale-free columns (mase, smape): refused with the file and line, never
half-read; a file with neither today's header nor the older one is not extended."""

from __future__ import annotations

import csv

import pytest

from damcha_ts.errors import DataError
from damcha_ts.leaderboard.results import LEGACY_COLUMNS, RESULT_COLUMNS, append_result, read_results
from tests.leaderboard.test_leaderboard_results import make_row


def write(path, header, rows):
    with path.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows([header, *rows])


def values(row, columns):
    return ["" if row.get(c) is None else repr(row[c]) if isinstance(row.get(c), float) else row[c] for c in columns]


@pytest.mark.parametrize("case, header, fields, message", [
    ("text in mase", RESULT_COLUMNS, lambda r: values({**r, "mase": "n/a"}, RESULT_COLUMNS), "line 2"),
    ("one column short", RESULT_COLUMNS, lambda r: values(r, RESULT_COLUMNS)[:-1], "line 2: expected 18 fields"),
    ("legacy header, new fields", LEGACY_COLUMNS, lambda r: values(r, RESULT_COLUMNS), "line 2: expected 16 fields"),
    ("mase without smape", (*LEGACY_COLUMNS, "mase"), lambda r: values(r, (*LEGACY_COLUMNS, "mase")), "is not the leaderboard header"),
])
def test_a_bad_csv_is_refused_naming_where_and_not_extended(tmp_path, case, header, fields, message):
    path = tmp_path / "leaderboard.csv"
    write(path, header, [fields(make_row())])
    before = path.read_bytes()
    with pytest.raises(DataError, match=message):
        read_results(path)
    with pytest.raises(DataError):
        append_result(path, make_row(seed=9))
    assert path.read_bytes() == before  # nothing lost or rewritten
