"""Train one model on a prepared panel with early stopping (``fit_series``): the training loop every fit
runs (``forecasting.estimator.Estimator``), with resume from its folder's checkpoints."""

from __future__ import annotations

import inspect
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.rank_zero import rank_zero_info, rank_zero_only

from damcha_ts.data import ForecastDataModule
from damcha_ts.data.registry import DataWarning
from damcha_ts.errors import ConfigError
from damcha_ts.models import count_parameters
from damcha_ts.training.callbacks import EpochTimer
from damcha_ts.training.checkpoints import restore_log_history, resume_point, set_log_aside
from damcha_ts.training.config import TrainingConfig
from damcha_ts.training.module import ForecastModule
from damcha_ts.training.trainer import CHECKPOINT_DIR, LOG_DIR, build_trainer

#: Fewer validation windows than this make early stopping a guess (DataWarning).
MIN_VAL_WINDOWS = 16


def warn_few_windows(series, batch_size: int) -> None:
    """A DataWarning when the validation split has fewer than ``MIN_VAL_WINDOWS`` windows or the
    train split fewer than one batch, with the counts and what would give more."""
    train, val = series.window_count("train"), series.window_count("val")
    problems = []
    if val < MIN_VAL_WINDOWS:
        problems.append(f"the validation split has {val} window(s) to early-stop on (fewer than {MIN_VAL_WINDOWS})")
    if train < batch_size:
        problems.append(f"the train split has {train} window(s), fewer than one batch of {batch_size}")
    if problems:
        rows = {split: b - a for split, (a, b) in series.borders.items()}
        warnings.warn(
            f"{series.name}: {' and '.join(problems)} (rows: train {rows['train']}, val {rows['val']}, "
            f"test {rows['test']}, val and test counting the lookback rows before them; a split of R rows has "
            f"R - lookback - horizon + 1 = R - {series.seq_len} - {series.pred_len} + 1 windows). For more "
            "windows use a shorter lookback or horizon, more data, or a larger validation share "
            "(val_size=, or split=[0.7, 0.2, 0.1] as fractions)",
            DataWarning, stacklevel=_caller_level(),
        )


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside damcha_ts (where the user called fit), from
    the function that calls this one."""
    package = str(Path(__file__).resolve().parents[1])
    frames = inspect.stack(0)[2:]
    for level, frame in enumerate(frames, start=2):
        if not str(Path(frame.filename).resolve()).startswith(package):
            return level
    return 1


@dataclass
class FitResult:
    """What :func:`fit_series` leaves behind: the module with the best weights and its trainer."""

    module: ForecastModule
    trainer: L.Trainer
    datamodule: Any
    best_checkpoint: str
    best_val_loss: float
    epochs_run: int
    best_epoch: int
    timing: dict
    best_step: int = 0  # the optimiser steps the kept weights had taken (a step-budget refit trains as many)


def with_covariate_counts(model_config: Mapping[str, Any], series) -> dict:
    """``model_config`` with the covariate counts of ``series`` (``covariate_counts()``): the data
    decides how many covariate tokens the model reads. ConfigError when the config counts others."""
    counts = series.covariate_counts()
    for key, count in counts.items():
        given = model_config.get(key, 0)
        if given not in (0, count):
            raise ConfigError(f"model.{key}={given} but the data has {count} {key.replace('_', ' ')} "
                              "(name them in data.past_covariates / future_covariates / static_covariates; "
                              "the model counts follow)")
    return {**model_config, **{k: v for k, v in counts.items() if v or k in model_config}}


def fit_series(
    series,
    model_config: Mapping[str, Any],
    training: TrainingConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    callbacks: Sequence[L.Callback] = (),
    trainer_kwargs: Mapping[str, Any] | None = None,
    progress: bool = True,
    on_start: Callable[[], None] | None = None,
    validate: bool = True,
) -> FitResult:
    """Train on a prepared panel (``data.prepare``; one series is a panel of one) with early stopping, then
    reload the best checkpoint's weights.

    With ``resume=True`` training continues from ``out_dir/checkpoints/last.ckpt`` when it exists
    (weights, optimizer, scheduler, loop and callback state, and the train sampler's generator,
    see :class:`ForecastModule`), so an interrupted run ends where an uninterrupted one would; an
    unreadable ``last.ckpt`` falls back to ``best.ckpt`` or is refused (:func:`resume_point`).
    ``timing`` covers the epochs run by this call. ``on_start`` is called (on every rank) once the
    Trainer has accepted its arguments, before anything in ``out_dir`` changes.
    ``validate=False`` trains ``training.max_epochs`` epochs on the train split alone and keeps the
    last epoch's weights (a refit for an epoch count chosen earlier; ``best_val_loss`` is NaN).
    """
    out_dir = Path(out_dir)
    ckpt_path = _resume_checkpoint(out_dir, resume)
    if validate and rank_zero_only.rank == 0:
        warn_few_windows(series, training.batch_size)
    # The Trainer first: arguments it rejects must fail before anything in out_dir is touched.
    trainer = build_trainer(
        training, out_dir, callbacks=callbacks, progress=progress, trainer_kwargs=trainer_kwargs, validate=validate
    )
    if on_start is not None:
        on_start()
    if rank_zero_only.rank == 0:
        _take_over_folders(out_dir, resumed=ckpt_path is not None)

    L.seed_everything(training.seed, workers=True, verbose=False)
    datamodule = ForecastDataModule(
        series, batch_size=training.batch_size, num_workers=training.num_workers, seed=training.seed
    )
    module = ForecastModule(with_covariate_counts(model_config, series), training, target_only=series.target_only)
    if count_parameters(module.model) == 0:  # a fixed rule (models/baselines.py): nothing to learn
        return _validated_only(trainer, module, datamodule, validate)
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    finally:  # a resumed fit stopped or failed too: logs/metrics.csv holds every epoch again
        if ckpt_path is not None and trainer.is_global_zero:
            restore_log_history(out_dir / LOG_DIR)
    return _with_best_weights(trainer, module, datamodule)


def _resume_checkpoint(out_dir: Path, resume: bool) -> str | None:
    """The checkpoint a resume starts from, or None to start afresh; checked before anything starts:
    an unreadable last.ckpt falls back to best.ckpt or is refused."""
    start = resume_point(out_dir / CHECKPOINT_DIR) if resume else None
    if resume and start is None:
        rank_zero_info(f"resume: no {out_dir / CHECKPOINT_DIR / 'last.ckpt'} yet, starting from scratch")
    return str(start) if start is not None else None


def _take_over_folders(out_dir: Path, *, resumed: bool) -> None:
    """A fresh run owns checkpoints/ and logs/: stale checkpoints would be mistaken for this run's.
    A resumed run keeps the log rows of its earlier epochs aside (Lightning deletes them)."""
    if resumed:
        set_log_aside(out_dir / LOG_DIR)
        return
    for stale in (out_dir / CHECKPOINT_DIR, out_dir / LOG_DIR):
        shutil.rmtree(stale, ignore_errors=True)


def _validated_only(trainer: L.Trainer, module: ForecastModule, datamodule, validate: bool) -> FitResult:
    """The result of a model with nothing to learn: no epoch run, its validation MSE (the val_loss a
    trained model is selected on) as ``best_val_loss`` (NaN without validation)."""
    best_val = float("nan")
    if validate:
        (scores,) = trainer.validate(module, datamodule=datamodule, verbose=False)
        best_val = float(scores["val_loss"])
    return FitResult(module=module, trainer=trainer, datamodule=datamodule, best_checkpoint="", best_val_loss=best_val,
                     epochs_run=0, best_epoch=0, timing={}, best_step=0)


def _with_best_weights(trainer: L.Trainer, module: ForecastModule, datamodule) -> FitResult:
    """The fit's result, its module holding the best checkpoint's weights (the last epoch's without
    validation, where the best checkpoint is the last)."""
    checkpoint = trainer.checkpoint_callback
    best_path = checkpoint.best_model_path if checkpoint is not None else ""
    best_val = float(checkpoint.best_model_score) if checkpoint and checkpoint.best_model_score is not None else float("nan")
    trainer.strategy.barrier("damcha_ts.best_checkpoint")
    best_epoch, best_step = trainer.current_epoch - 1, trainer.global_step
    if best_path:
        state = torch.load(best_path, map_location="cpu", weights_only=True)
        module.load_state_dict(state["state_dict"])
        best_epoch, best_step = int(state["epoch"]), int(state["global_step"])
    timer = next(c for c in trainer.callbacks if isinstance(c, EpochTimer))
    return FitResult(module=module, trainer=trainer, datamodule=datamodule, best_checkpoint=best_path,
                     best_val_loss=best_val, epochs_run=trainer.current_epoch, best_epoch=best_epoch,
                     timing=timer.summary(), best_step=best_step)
