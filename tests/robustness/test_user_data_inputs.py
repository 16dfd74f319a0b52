"""Issue 34's new inputs, bad: the baselines' ``season_length``, the step-budget training keys, a saved
baseline whose season was tampered with, baseline names in grids and on the command line. Each is
refused with a message naming the argument, before any data is read or anything is written."""

from __future__ import annotations

import json

import pytest
import yaml

from damcha_ts import Forecaster
from damcha_ts.errors import ConfigError
from damcha_ts.training.artifacts import content_digest
from matrix import hourly_frame, run_cli, write_csv


@pytest.mark.parametrize("season", ["24", 2.5, True, -1, 0])
def test_a_bad_season_length_of_the_seasonal_naive_model_is_refused_by_name(season):
    with pytest.raises(ConfigError, match=r"season_length=.*expected a positive integer"):
        Forecaster("seasonal_naive", horizon=6, lookback=24, season_length=season)


@pytest.mark.parametrize(("settings", "named"), [
    ({"max_steps": "abc"}, "training.max_steps='abc'"),
    ({"max_steps": 0}, "training.max_steps must be >= 1"),
    ({"max_steps": True}, "training.max_steps=True"),
    ({"val_check_steps": 0}, "training.val_check_steps must be >= 1"),
    ({"warmup_fraction": 1.0}, r"training.warmup_fraction must be in \[0, 1\)"),
    ({"lr_floor": 1.5}, r"training.lr_floor must be in \[0, 1\]"),
    ({"lr_schedule": "type1", "lr_floor": 0.1}, "training.lr_floor=0.1 applies to lr_schedule='warmup_cosine' only"),
    ({"batch_size": "auto"}, "training.batch_size='auto'"),
])
def test_bad_training_keys_of_the_user_data_recipe_are_refused_by_name(settings, named):
    with pytest.raises(ConfigError, match=named):
        Forecaster(horizon=6, lookback=24, **settings)


def test_a_saved_baseline_whose_season_was_changed_to_nonsense_is_refused_on_load(tmp_path):
    fitted = Forecaster("seasonal_naive", horizon=6, lookback=48, trainer_kwargs={"enable_progress_bar": False})
    directory = fitted.fit(hourly_frame(rows=300, variates=1)).save(tmp_path / "model")
    path = directory / "forecaster.json"
    document = json.loads(path.read_text())
    document["model"]["season_length"] = 0
    document["content_sha256"] = content_digest(document)  # sealed again: the value itself must be checked
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match="season_length=0; expected a positive integer"):
        Forecaster.load(directory)


def test_a_misspelt_baseline_is_refused_with_a_suggestion_and_nothing_is_written(tmp_path):
    data = write_csv(hourly_frame(rows=200, variates=1), tmp_path / "series.csv")
    out = tmp_path / "run"
    done = run_cli(["fit", "--data", data, "--model", "seasonal_naiv", "--horizon", "4", "--lookback", "24", "--out", out])
    assert done.code == 2 and "seasonal_naiv" in done.stderr and "seasonal_naive" in done.stderr, done.stderr
    assert not out.exists()
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "g", "horizons": [24], "seeds": [1], "models": [{"name": "drif"}],
                                    "datasets": {"ETTh1": {}}}))
    from damcha_ts.leaderboard.grid import load_grid

    with pytest.raises(ConfigError, match=r"models\[0\]: name 'drif' is not one of .*'drift'"):
        load_grid(grid)
