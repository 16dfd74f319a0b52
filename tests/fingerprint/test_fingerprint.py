"""The redesign of the wiring layer (issue 19) changes no result: configs hash, models initialise and
train exactly as recorded in ``recorded.json`` by the code before it (see ``fingerprints.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fingerprints import RECORDED, ROOT, config_fingerprints, init_fingerprints, trained_fingerprints

RECORD = json.loads(RECORDED.read_text(encoding="utf-8"))


def test_every_shipped_config_and_grid_cell_hashes_as_before():
    """Every recorded config and grid cell still exists and hashes as recorded; a config or grid file
    added since (e.g. configs/leaderboard/ablations_gated.yaml) only adds keys."""
    current = config_fingerprints()
    assert not RECORD["config_hash"].keys() - current.keys()
    changed = {k: (old, current[k]) for k, old in RECORD["config_hash"].items() if current[k] != old}
    assert not changed


def test_every_committed_leaderboard_row_recomputes_to_its_hash():
    from damcha_ts.leaderboard.cells import resolve_cell
    from damcha_ts.leaderboard.grid import load_grid

    rows = pd.read_csv(ROOT / "benchmarks" / "results" / "leaderboard.csv")
    grids = {name: load_grid(ROOT / name) for name in rows["grid"].unique()}
    for grid_name, grid in grids.items():
        cells = {(c.dataset, c.model, c.horizon, c.seed): c for c in grid.cells()}
        for row in rows[rows["grid"] == grid_name].itertuples():
            cell = cells[(row.dataset, row.model, row.horizon, row.seed)]
            assert resolve_cell(cell, grid, Path("runs")).config_hash == row.config_hash, row


def test_models_initialise_to_the_same_weights():
    assert init_fingerprints() == RECORD["model_init"]


def test_three_training_steps_give_the_same_forecast(data_root):
    current = trained_fingerprints(data_root)
    assert current.keys() == RECORD["after_3_steps"].keys()
    for name, values in current.items():
        # Float sums may round differently on another CPU; anything a refactor breaks moves far more.
        assert values == pytest.approx(RECORD["after_3_steps"][name], rel=1e-4, abs=1e-5), name
