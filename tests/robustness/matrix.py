"""The robustness matrix: bad input, faults and tampering, each as a row of a table.

(A module with its own name rather than conftest.py: ``from conftest import`` would find whichever
of the suite's conftest modules was imported last.)

Every test module here holds a list of :class:`Case` rows (what the user does → the exit code and a
fragment of the message they must see) and runs them through :func:`check_case`. A case builds its
files in a fresh folder, runs ``damcha-ts`` in-process, and then checks what must still hold
afterwards (nothing overwritten, nothing half-written). A traceback is never an acceptable answer:
any exception that escapes ``main`` fails the case.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from damcha_ts.cli.main import main

TINY = ["--set", "model.d_model=16", "--set", "model.d_ff=16", "--set", "model.n_heads=2", "--set", "model.e_layers=1"]


@dataclass(frozen=True)
class Case:
    """One row of the matrix.

    ``make(folder, fixtures)`` writes what the case needs under ``folder`` and returns the
    ``damcha-ts`` arguments; ``fixtures`` is a dict of shared, already-built things (a trained
    run, ...). ``exit_code`` and ``message`` (a fragment, compared case-insensitively, of stderr,
    or of stdout when ``stream="stdout"``) are what the user must see; ``after(folder)`` asserts what
    must hold once the command has ended.
    """

    name: str
    make: Callable[[Path, dict], list[str]]
    exit_code: int
    message: str
    after: Callable[[Path], None] | None = None
    stream: str = "stderr"

    def __str__(self) -> str:  # the test id
        return self.name


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def run_cli(argv: list[str]) -> Outcome:
    """``damcha-ts ARGV`` in-process; an exception escaping ``main`` fails the test as a traceback.

    Warnings end up in ``stderr`` (as ``Category: message`` lines), as the console script shows them.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse errors exit 2 with their usage line
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # noqa: BLE001 - the point of the matrix
            pytest.fail(f"damcha-ts {' '.join(map(str, argv))} raised {type(exc).__name__}: {exc}\n"
                        f"stderr:\n{err.getvalue()}")
    warned = "".join(f"{w.category.__name__}: {w.message}\n" for w in shown)
    return Outcome(code, out.getvalue(), err.getvalue() + warned)


def check_case(case: Case, folder: Path, fixtures: dict | None = None) -> Outcome:
    folder.mkdir(parents=True, exist_ok=True)
    argv = case.make(folder, fixtures or {})
    outcome = run_cli(argv)
    shown = outcome.stderr if case.stream == "stderr" else outcome.stdout
    assert outcome.code == case.exit_code, (
        f"{case.name}: exit {outcome.code}, expected {case.exit_code}\nstdout:\n{outcome.stdout}\nstderr:\n{outcome.stderr}"
    )
    assert case.message.lower() in shown.lower(), (
        f"{case.name}: {case.message!r} not in {case.stream}:\n{shown}"
    )
    assert "Traceback" not in outcome.stderr, f"{case.name}: a traceback reached the user:\n{outcome.stderr}"
    if case.after is not None:
        case.after(folder)
    return outcome


def hourly_frame(rows: int = 400, variates: int = 3, seed: int = 0) -> pd.DataFrame:
    """A wide hourly frame with a ``date`` column: daily cycles plus noise, one column per variate."""
    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    values = {f"v{j}": np.sin(2 * np.pi * (t + 5 * j) / 24) + 0.1 * rng.standard_normal(rows) for j in range(variates)}
    return pd.DataFrame({"date": pd.date_range("2024-01-01", periods=rows, freq="h"), **values})


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    frame.to_csv(path, index=False)
    return path


def fit_argv(data: Path, out: Path, *extra: str) -> list[str]:
    """A few seconds of training on a small CSV: a tiny iTransformer-MHA, horizon 4, lookback 16."""
    return ["fit", "--data", data, "--model", "itransformer_mha", "--horizon", "4", "--lookback", "16", *TINY,
            "--set", "training.max_epochs=2", "--set", "training.batch_size=16", "--no-plot", "--out", out, *extra]


def fitted_run(folder: Path, frame: pd.DataFrame, *extra: str) -> Path:
    """The run folder of a ``damcha-ts fit`` (:func:`fit_argv` with ``extra``) on ``frame``, written
    as ``folder/data.csv``; the fit must succeed (a fixture for the rows that use its model)."""
    outcome = run_cli(fit_argv(write_csv(frame, folder / "data.csv"), folder / "run", *extra))
    assert outcome.code == 0, outcome.stderr
    return folder / "run"


def fit_case(*extra: str):
    """A Case's ``make``: ``damcha-ts fit`` of :func:`fit_argv` on a fresh :func:`hourly_frame` CSV, with ``extra``."""
    def make(folder: Path, fixtures: dict) -> list[str]:
        return fit_argv(write_csv(hourly_frame(), folder / "series.csv"), folder / "run", *extra)

    return make


def copy_run(run: Path, folder: Path, name: str = "run") -> Path:
    target = folder / name
    shutil.copytree(run, target)
    return target
