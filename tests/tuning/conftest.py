"""Fixtures for the Optuna study tests: a tiny real model on real ETTh1, search files (the
PostgreSQL server is in tests/conftest.py, shared with the leaderboard tests).

Each trial trains a ~4k-parameter DAMCHA-iTransformer on a few ETTh1 batches for a few epochs
(about a second), through the real Lightning trainer and the real data pipeline.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

# Few batches per epoch keep each trial about a second; the val limit keeps val_loss comparable.
TRAINER_LIMITS = {"limit_train_batches": 8, "limit_val_batches": 2, "log_every_n_steps": 1}

TINY_RUN_CONFIG = {
    "data": {"dataset": "ETTh1", "seq_len": 48, "pred_len": 24},
    "model": {
        "name": "itransformer_damcha",
        "d_model": 16,
        "d_ff": 16,
        "e_layers": 1,
        "n_heads": 2,
        "dropout": 0.0,
        "generator_hidden": [8],
    },
    "training": {"max_epochs": 3, "patience": 3, "learning_rate": 1.0e-3, "seed": 11, "deterministic": True},
}


def search_data(**sections) -> dict:
    """A search file over learning rate and the generator width, with the tiny trainer limits."""
    data = {
        "sampler": {"seed": 0, "n_startup_trials": 2},
        "pruner": {"type": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
        "trainer": dict(TRAINER_LIMITS),
        "space": {
            "training.learning_rate": {"type": "float", "low": 1.0e-4, "high": 1.0e-2, "log": True},
            "model.generator_hidden": {"type": "categorical", "choices": [[8], [4, 8]]},
        },
    }
    data.update(sections)
    return data



@pytest.fixture
def study_files(tmp_path):
    """Write a run config and a search file; returns a function (search sections...) -> paths."""

    def write(**sections) -> tuple[Path, Path]:
        config_path = tmp_path / "run.yaml"
        config_path.write_text(yaml.safe_dump(TINY_RUN_CONFIG), encoding="utf-8")
        search_path = tmp_path / "search.yaml"
        search_path.write_text(yaml.safe_dump(search_data(**sections)), encoding="utf-8")
        return config_path, search_path

    return write
