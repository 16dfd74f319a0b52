"""Fixtures of the robustness matrix (the matrix itself is in matrix.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from matrix import fit_argv, hourly_frame, run_cli, write_csv


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Path:
    """A finished ``damcha-ts fit`` run folder on a small hourly CSV (copy it before changing it)."""
    folder = tmp_path_factory.mktemp("robustness_run")
    data = write_csv(hourly_frame(), folder / "series.csv")
    outcome = run_cli(fit_argv(data, folder / "run"))
    assert outcome.code == 0, outcome.stderr
    return folder / "run"
