"""Optuna pruning for GluonTS estimators, working around GluonTS swallowing ``TrialPruned``.

``PyTorchLightningEstimator.train_model`` (gluonts 0.17) wraps ``trainer.fit`` in
``except Exception``: once a checkpoint exists it logs "Recovering from a checkpoint after training
failed" and returns the best weights. Optuna's pruning callback stops a trial by raising
``optuna.TrialPruned`` from inside ``fit``, so that exception is swallowed and the trial would end
COMPLETE with a half-trained model (ecosystem.md §1.7; upstream awslabs/gluonts#3295, PR #3346).
(At epoch 0 no checkpoint exists yet, since Lightning runs checkpoint callbacks last, and the
exception does propagate; from epoch 1 on it is swallowed.) The callback has already reported the
pruned epoch's value to the trial, so asking the trial again after training recovers the decision.
"""

from __future__ import annotations

from gluonts.dataset.common import Dataset
from gluonts.torch.model.estimator import PyTorchLightningEstimator
from gluonts.torch.model.predictor import PyTorchPredictor

from damcha_ts.errors import ConfigError


def train_with_pruning(
    estimator: PyTorchLightningEstimator,
    trial,
    training_data: Dataset,
    validation_data: Dataset,
    *,
    monitor: str = "val_loss",
    **train_kwargs,
) -> PyTorchPredictor:
    """``estimator.train(...)`` with an Optuna pruning callback; raises ``optuna.TrialPruned`` if pruned.

    Use a fresh estimator per trial: ``train_model`` pops ``trainer_kwargs["callbacks"]``, so a
    second ``train()`` of the same estimator would run without the callback.

    Args:
        estimator: any GluonTS ``PyTorchLightningEstimator`` (``DAMCHAEstimator`` included).
        trial: the ``optuna.trial.Trial`` being evaluated.
        training_data, validation_data: as for ``estimator.train``; validation data is required
            because the callback reports ``monitor`` once per validation epoch.
        monitor: the logged metric to report (``val_loss`` for ``DAMCHAEstimator``).
        train_kwargs: passed on to ``estimator.train`` (``cache_data``, ``shuffle_buffer_length``...).
    """
    import optuna
    from optuna_integration import PyTorchLightningPruningCallback

    if validation_data is None:
        raise ConfigError("train_with_pruning needs validation_data: the pruning callback reports per validation epoch")
    callbacks = list(estimator.trainer_kwargs.get("callbacks", []))
    estimator.trainer_kwargs["callbacks"] = callbacks + [PyTorchLightningPruningCallback(trial, monitor=monitor)]
    predictor = estimator.train(training_data, validation_data, **train_kwargs)
    # The callback raised TrialPruned inside fit() and GluonTS caught it; the report it made stays.
    if trial.should_prune():
        raise optuna.TrialPruned(f"trial {trial.number} pruned (re-checked after GluonTS training had caught it)")
    return predictor
