"""Library messages in the command line's words (cli/messages.py): keywords become the flags of the
command that ran, and nothing else in the message changes."""

from __future__ import annotations

import pytest

from damcha_ts.cli.messages import in_cli_words

FLAGS = {"future": "--future", "fill": "--fill", "val_size": "--val-size", "ignore": "--ignore",
         "resume": "--resume", "split": "--set data.split=", "target": "--set data.target=",
         "start": "--set data.start="}


@pytest.mark.parametrize(("python", "cli"), [
    ("future= has 3 rows", "--future has 3 rows"),
    ("pass fill='ffill'", "pass --fill ffill"),
    ("val_size=0.001 gives 0 validation rows", "--val-size 0.001 gives 0 validation rows"),
    ("leave out ignore=['a', 'b']", "leave out --ignore a,b"),
    ("start='2020-01-01 00:00' is after the data", "--set data.start='2020-01-01 00:00' is after the data"),
    ("(damcha-ts fit --overwrite, or resume=False)", "(damcha-ts fit --overwrite, or without --resume)"),
])
def test_keywords_become_the_flags_of_the_command(python, cli):
    assert in_cli_words(python, FLAGS) == cli


@pytest.mark.parametrize("text", [
    "/data/split=2024/sales.csv: column 'b' is not numeric",  # a partitioned folder's name
    "column 'target=y' is not numeric",  # a column's name
    "/tmp/future=x.csv: no such file",
    "Forecaster.fit(data, val_size=0.1)",  # Python's own call, quoted as such
])
def test_paths_quoted_names_and_python_calls_are_left_as_they_are(text):
    assert in_cli_words(text, FLAGS) == text
