"""The artifacts layer saves and loads quantile models whole, and a loaded Forecaster takes its
training defaults from TrainingConfig alone."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch

from damcha_ts.errors import ConfigError
from damcha_ts.models.quantiles import QuantileForecastModel
from damcha_ts.training.artifacts import content_digest, load_model_dir, save_model_dir
from damcha_ts.training.config import TrainingConfig

from handmade import HORIZON, LOOKBACK, hand_meta, tiny_model

LEVELS = [0.1, 0.9]


def training(quantiles=LEVELS) -> dict:
    return dataclasses.asdict(TrainingConfig(quantiles=quantiles))


def history():
    stamps = pd.date_range("2022-01-01", periods=LOOKBACK, freq="h", name="date")
    return np.random.default_rng(1).normal(size=(LOOKBACK, 3)) * 2.0 + 10.0, stamps


def test_a_quantile_model_saves_as_its_point_model_and_loads_wrapped(tmp_path):
    model = tiny_model(quantiles=LEVELS)
    values, stamps = history()
    kwargs = dict(training=training(), history_values=values, history_timestamps=stamps)
    save_model_dir(tmp_path / "whole", model, hand_meta(), **kwargs)
    save_model_dir(tmp_path / "point", model.point_model, hand_meta(), **kwargs)  # as runner.py passes it
    for name in ("forecaster.json", "weights.pt", "history.npz"):  # one file format, old directories load
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "point" / name).read_bytes()
    document = json.loads((tmp_path / "whole" / "forecaster.json").read_text())
    assert document["model"]["pred_len"] == HORIZON * 3 and document["data"]["pred_len"] == HORIZON

    loaded = load_model_dir(tmp_path / "whole")
    assert isinstance(loaded.model, QuantileForecastModel) and not loaded.model.training
    assert loaded.model.quantiles == (0.1, 0.5, 0.9) and loaded.model.horizon == HORIZON
    x = torch.randn(2, LOOKBACK, 3)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), model(x), rtol=0, atol=0)

    from damcha_ts import Forecaster

    forecaster = Forecaster.load(tmp_path / "point")
    assert forecaster.model_ is not None and forecaster.quantiles == (0.1, 0.5, 0.9) and forecaster.horizon == HORIZON
    assert forecaster.predict().shape == (HORIZON, 3 + 3 * 3)  # the point columns and three levels of each


def test_levels_that_differ_from_the_training_config_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"forecasts the quantiles \[0.1, 0.5, 0.9\] but training.quantiles is None"):
        save_model_dir(tmp_path / "m", tiny_model(quantiles=LEVELS), hand_meta(), training=training(None))
    with pytest.raises(ConfigError, match=r"training.quantiles is \[0.25, 0.5, 0.75\]"):
        save_model_dir(tmp_path / "m", tiny_model(quantiles=LEVELS), hand_meta(), training=training([0.25, 0.75]))


def test_a_quantile_model_whose_horizon_is_not_the_datas_is_refused(tmp_path):
    save_model_dir(tmp_path / "m", tiny_model(quantiles=LEVELS), hand_meta(pred_len=9), training=training())
    with pytest.raises(ConfigError, match=r"the quantile model forecasts 6 steps but its data says 9"):
        load_model_dir(tmp_path / "m")


def test_a_loaded_forecaster_takes_missing_training_keys_from_training_config(tmp_path):
    """The defaults live in TrainingConfig (the constructor's training keywords default to None: the
    user-data recipe, TrainingConfig.for_user_data); load() repeats neither: a saved model trains as saved."""
    import inspect

    from damcha_ts import Forecaster

    defaults = TrainingConfig()
    signature = inspect.signature(Forecaster).parameters
    assert (signature["random_state"].default, signature["max_epochs"].default, signature["batch_size"].default,
            signature["learning_rate"].default) == (defaults.seed, None, None, None)
    values, stamps = history()
    directory = save_model_dir(tmp_path / "m", tiny_model(), hand_meta(), training={"seed": 7, "patience": 5},
                               history_values=values, history_timestamps=stamps)
    loaded = Forecaster.load(directory)
    assert loaded.random_state == 7 and loaded.training == dataclasses.replace(defaults, seed=7, patience=5)
    document = json.loads((directory / "forecaster.json").read_text())
    document["training"] = {}
    document["content_sha256"] = content_digest(document)
    (directory / "forecaster.json").write_text(json.dumps(document))
    assert Forecaster.load(directory).training == defaults and Forecaster.load(directory).random_state == defaults.seed
