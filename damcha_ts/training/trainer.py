"""The Lightning Trainer every run trains under: the protocol's callbacks (early stopping on
val_loss, best + last checkpoints written atomically, the record of every validation and its
ConvergenceWarning), its budget (epochs or optimiser steps) and validation rhythm, its precision,
and a log that keeps to what matters (progress on stderr, no cloud-service tips)."""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins import CheckpointIO
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger

from damcha_ts.errors import ConfigError
from damcha_ts.training.callbacks import EpochLog, EpochTimer, ValidationRecord
from damcha_ts.training.checkpoints import AtomicCheckpointIO, FolderCheckpoint
from damcha_ts.training.config import STEP_SCHEDULES, TrainingConfig

CHECKPOINT_DIR = "checkpoints"
LOG_DIR = "logs"


def resolve_precision(training: TrainingConfig, accelerator: str) -> str:
    """``"auto"`` -> bf16-mixed on CUDA, 32-true elsewhere (bf16 on CPU is slower, not faster)."""
    if training.precision != "auto":
        return training.precision
    on_cuda = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    return "bf16-mixed" if on_cuda else "32-true"


def build_trainer(
    training: TrainingConfig,
    out_dir: Path,
    *,
    callbacks: Sequence[L.Callback] = (),
    progress: bool = True,
    trainer_kwargs: Mapping[str, Any] | None = None,
    validate: bool = True,
) -> L.Trainer:
    """A Trainer with the protocol's callbacks: early stopping on val_loss, best + last checkpoints,
    a :class:`ValidationRecord` (ConvergenceWarning when the best validation is the last).

    ``trainer_kwargs`` go to ``L.Trainer`` last, so they win (``devices``, ``strategy``,
    ``num_nodes``, ``limit_train_batches``, ...). Their ``callbacks`` are added to ours.
    ``validate=False`` trains ``max_epochs`` epochs without validation (no early stopping; "best" is
    the last epoch), whatever ``limit_val_batches`` they give.
    """
    kwargs = dict(trainer_kwargs or {})
    extra_callbacks = list(kwargs.pop("callbacks", []) or [])
    accelerator = kwargs.get("accelerator", training.accelerator)
    all_callbacks = _protocol_callbacks(training, out_dir, [*callbacks, *extra_callbacks],
                                        validate=validate, progress=progress)
    settings = {
        **_budget(training, validate), "accelerator": training.accelerator, "devices": training.devices,
        "strategy": training.strategy, "num_nodes": training.num_nodes,
        "precision": resolve_precision(training, accelerator), "deterministic": training.deterministic,
        "gradient_clip_val": training.gradient_clip_val, "default_root_dir": str(out_dir),
        "logger": CSVLogger(str(out_dir), name=LOG_DIR, version=""),
        "enable_progress_bar": progress, "enable_model_summary": progress, "callbacks": all_callbacks,
        "plugins": _with_atomic_checkpoints(kwargs.pop("plugins", None)),
    }
    settings.update(kwargs)
    if not validate:
        settings.update(limit_val_batches=0, num_sanity_val_steps=0)
    if settings["logger"] in (None, False):
        # Nothing to write learning rates to.
        settings["callbacks"] = [c for c in all_callbacks if not isinstance(c, LearningRateMonitor)]
    _quiet_lightning_noise()
    try:
        return L.Trainer(**settings)
    except (TypeError, ValueError, MisconfigurationException) as exc:  # devices="abc", strategy="foo", ...
        chosen = {k: settings[k] for k in ("accelerator", "devices", "strategy", "num_nodes", "precision")}
        raise ConfigError(f"lightning.Trainer rejected the run's arguments ({chosen}, extra {dict(kwargs)}): "
                          f"{exc}") from exc


def _budget(training: TrainingConfig, validate: bool) -> dict:
    """The Trainer's budget and validation rhythm: epochs, or optimiser steps (max_epochs unused);
    validation at each epoch's end, or every ``val_check_steps`` steps counted across epochs."""
    budget = {"max_epochs": training.max_epochs}
    if training.max_steps is not None:
        budget = {"max_epochs": -1, "max_steps": training.max_steps}
    # Without validation, last.ckpt must still be written at epoch ends (not at validations that never come).
    if training.val_check_steps is not None and validate:
        budget.update(val_check_interval=training.val_check_steps, check_val_every_n_epoch=None)
    return budget


def _protocol_callbacks(
    training: TrainingConfig, out_dir: Path, given: list[L.Callback], *, validate: bool, progress: bool
) -> list[L.Callback]:
    """The protocol's callbacks around the caller's ``given`` ones, the progress report last."""
    return [
        # Without validation there is no "best": the last checkpoint is then trainer.checkpoint_callback.
        *([EarlyStopping(monitor="val_loss", mode="min", patience=training.patience),
           FolderCheckpoint(dirpath=out_dir / CHECKPOINT_DIR, filename="best", monitor="val_loss", mode="min",
                            save_top_k=1, enable_version_counter=False)] if validate else []),
        # last.ckpt after every epoch. Lightning's save_last=True writes it only in epochs that also
        # write a best checkpoint, so a resume would redo every epoch since the best one.
        FolderCheckpoint(dirpath=out_dir / CHECKPOINT_DIR, filename="last", save_top_k=1, enable_version_counter=False),
        LearningRateMonitor(logging_interval="step" if training.lr_schedule in STEP_SCHEDULES else "epoch"),
        EpochTimer(),
        *([ValidationRecord()] if validate else []),
        *given,
        # Background runs still say where they are, one line per epoch.
        StderrProgressBar(refresh_rate=10) if progress else EpochLog(prefix="  "),
    ]


def _with_atomic_checkpoints(plugins) -> list:
    """The caller's Trainer plugins, plus atomic checkpoint writes (temporary name, fsync, rename:
    a kill or a full disk never leaves half a checkpoint) unless they bring a CheckpointIO of their own."""
    given = [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    return given if any(isinstance(p, CheckpointIO) for p in given) else [AtomicCheckpointIO(), *given]


class StderrProgressBar(TQDMProgressBar):
    """Lightning's progress bar on stderr: its own writes to stdout, where a user's prints and
    ``--json`` output go."""

    @staticmethod
    def _on_stderr(make_bar):
        with contextlib.redirect_stdout(sys.stderr):
            return make_bar()

    def init_sanity_tqdm(self):
        return self._on_stderr(super().init_sanity_tqdm)

    def init_train_tqdm(self):
        return self._on_stderr(super().init_train_tqdm)

    def init_validation_tqdm(self):
        return self._on_stderr(super().init_validation_tqdm)

    def init_predict_tqdm(self):
        return self._on_stderr(super().init_predict_tqdm)

    def init_test_tqdm(self):
        return self._on_stderr(super().init_test_tqdm)


@contextlib.contextmanager
def quiet_lightning():
    """Within it, Lightning says only what is wrong: no "GPU available / TPU available" lines, no
    "`Trainer.fit` stopped" and other info, no warning that an epoch has fewer batches than
    ``log_every_n_steps`` (what ``Forecaster(verbose=False)`` trains under)."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric", "lightning")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*log_every_n_steps.*")
        for logger in loggers:
            logger.setLevel(logging.WARNING)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def _drop_lightning_tips(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("\U0001f4a1 Tip:")  # adverts for Lightning's cloud services


def _quiet_lightning_noise() -> None:
    """Keep every run's log to what matters: Lightning prints a cloud-service tip with each Trainer,
    and with torch >= 2.10 a deprecation warning about its own use of torch's pytree API."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if _drop_lightning_tips not in logger.filters:
        logger.addFilter(_drop_lightning_tips)
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
