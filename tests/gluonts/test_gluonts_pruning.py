"""Optuna pruning with GluonTS: pruned trials must end PRUNED although GluonTS swallows TrialPruned."""

from __future__ import annotations

import numpy as np
import optuna
import pandas as pd
import pytest
from gluonts.dataset.pandas import PandasDataset
from gluonts.dataset.split import split
from gluonts.torch.model.predictor import PyTorchPredictor
from optuna.trial import TrialState
from optuna_integration import PyTorchLightningPruningCallback

from damcha_ts.errors import ConfigError
from damcha_ts.gluonts import DAMCHAEstimator, train_with_pruning

MAX_EPOCHS = 3


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    steps = np.arange(600)
    frame = pd.DataFrame(
        np.sin(2 * np.pi * steps[:, None] / 24 + np.array([0.0, 1.0])) + 0.1 * rng.normal(size=(600, 2)),
        index=pd.date_range("2022-01-01", periods=600, freq="h"),
        columns=["x", "y"],
    )
    dataset = PandasDataset(frame, target=["x", "y"])
    training, _ = split(dataset, offset=-100)
    return training, dataset


@pytest.fixture()
def make_estimator(trainer_kwargs):
    def make() -> DAMCHAEstimator:
        return DAMCHAEstimator(
            prediction_length=12,
            context_length=48,
            model="itransformer_mha",
            hyperparameters={"d_model": 16, "n_heads": 2, "e_layers": 1, "d_ff": 16, "dropout": 0.0},
            lr=1e-3,
            batch_size=8,
            num_batches_per_epoch=2,
            trainer_kwargs=trainer_kwargs(max_epochs=MAX_EPOCHS),
        )

    return make


def run_trial(pruner, objective) -> optuna.trial.FrozenTrial:
    study = optuna.create_study(direction="minimize", pruner=pruner)
    study.optimize(objective, n_trials=1)
    return study.trials[0]


def prune_at_epoch_1():
    """Every val_loss (>= 0) is above the threshold; the warm-up spares epoch 0.

    Pruning at epoch 1 is the case GluonTS swallows: epoch 0 left a checkpoint to "recover" from
    (at epoch 0 itself Lightning runs the pruning callback before the checkpoint callback, so the
    exception propagates).
    """
    return optuna.pruners.ThresholdPruner(upper=-1.0, n_warmup_steps=1)


def test_a_trial_pruned_inside_gluonts_training_ends_pruned(data, make_estimator):
    training, validation = data

    def objective(trial):
        train_with_pruning(make_estimator(), trial, training, validation)
        return 0.0

    trial = run_trial(prune_at_epoch_1(), objective)
    assert trial.state == TrialState.PRUNED
    assert sorted(trial.intermediate_values) == [0, 1]  # training stopped at epoch 1 of 3


def test_an_unpruned_trial_completes_with_every_epoch_reported(data, make_estimator):
    training, validation = data
    predictors = []

    def objective(trial):
        predictors.append(train_with_pruning(make_estimator(), trial, training, validation))
        return 1.0

    trial = run_trial(optuna.pruners.NopPruner(), objective)
    assert trial.state == TrialState.COMPLETE
    assert sorted(trial.intermediate_values) == list(range(MAX_EPOCHS))
    assert all(np.isfinite(v) for v in trial.intermediate_values.values())
    assert isinstance(predictors[0], PyTorchPredictor)


def test_gluonts_still_swallows_trial_pruned_which_is_why_the_helper_exists(data, make_estimator):
    # If this fails, GluonTS stopped catching TrialPruned (awslabs/gluonts#3295 / PR #3346):
    # train_with_pruning still works, but docs/gluonts.md should say the workaround is no longer needed.
    training, validation = data
    returned = []

    def objective(trial):
        estimator = make_estimator()
        estimator.trainer_kwargs["callbacks"] = [PyTorchLightningPruningCallback(trial, monitor="val_loss")]
        returned.append(estimator.train(training, validation))
        return 0.0

    trial = run_trial(prune_at_epoch_1(), objective)
    assert trial.state == TrialState.COMPLETE and returned  # pruned at epoch 1, yet COMPLETE
    assert sorted(trial.intermediate_values) == [0, 1]


def test_pruning_needs_validation_data(data, make_estimator):
    study = optuna.create_study()
    with pytest.raises(ConfigError, match="validation_data"):
        train_with_pruning(make_estimator(), study.ask(), data[0], None)
