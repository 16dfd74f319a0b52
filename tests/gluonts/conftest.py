"""Shared fixtures of the GluonTS tests: one thread, quiet Lightning trainers, ETTh1 as a GluonTS dataset."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

# The rows of ETTh1 the benchmark protocol uses (20 months, protocol.md §1.2).
ETTH1_USED_ROWS = 14400



@pytest.fixture(scope="module", autouse=True)
def quiet_lightning():
    # GluonTS's checkpoint callback is verbose at INFO; keep test output readable.
    logger = logging.getLogger("lightning.pytorch")
    previous = logger.level
    logger.setLevel(logging.WARNING)
    yield
    logger.setLevel(previous)


@pytest.fixture(scope="session")
def trainer_kwargs(tmp_path_factory):
    """``trainer_kwargs(max_epochs)``: a quiet CPU trainer writing only checkpoints, each in a new temp dir."""

    def make(max_epochs: int) -> dict:
        return {
            "max_epochs": max_epochs,
            "accelerator": "cpu",
            "logger": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(tmp_path_factory.mktemp("gluonts_run")),
        }

    return make


@pytest.fixture(scope="session")
def etth1_frame():
    """The first 14,400 rows of the real ETTh1 file, as ``damcha_ts.data.load_frame`` reads it."""
    from damcha_ts.data import load_frame

    root = os.environ.get("DAMCHA_TS_DATA")
    if not root or not Path(root).is_dir():
        pytest.fail("set DAMCHA_TS_DATA to the directory of the shared benchmark CSVs (../shared/data)")
    return load_frame("ETTh1", path=root, download=False).iloc[:ETTH1_USED_ROWS]
