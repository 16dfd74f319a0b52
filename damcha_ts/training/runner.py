"""Train, select and test one model: the function behind the CLI, the leaderboard and the tuner."""

from __future__ import annotations

import functools
import inspect
import json
import shutil
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import pandas as pd
import torch
import yaml
from lightning.fabric.utilities.rank_zero import rank_zero_info, rank_zero_only

from damcha_ts.data import ForecastDataModule
from damcha_ts.data.entity_column import with_entity_col
from damcha_ts.data.layout import describe_input, input_columns
from damcha_ts.data.registry import DataWarning
from damcha_ts.errors import ConfigError
from damcha_ts.files import write_atomically
from damcha_ts.models import count_parameters
from damcha_ts.training.artifacts import history_arguments, save_model_dir
from damcha_ts.training.callbacks import EpochTimer
from damcha_ts.training.checkpoints import restore_log_history, resume_point, set_log_aside
from damcha_ts.training.config import RunConfig, TrainingConfig, config_hash
from damcha_ts.training.evaluation import (
    breakdowns,
    evaluate_loader,
    scored_columns,
    scored_scaler,
    split_loader,
    summary,
)
from damcha_ts.training.metadata import SeriesMeta
from damcha_ts.training.module import ForecastModule
from damcha_ts.training.trainer import CHECKPOINT_DIR, LOG_DIR, build_trainer

MODEL_DIR = "model"


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


def _with_best_weights(trainer: L.Trainer, module: ForecastModule, datamodule) -> FitResult:
    """The fit's result, its module holding the best checkpoint's weights (the last epoch's without
    validation, where the best checkpoint is the last)."""
    checkpoint = trainer.checkpoint_callback
    best_path = checkpoint.best_model_path if checkpoint is not None else ""
    best_val = float(checkpoint.best_model_score) if checkpoint and checkpoint.best_model_score is not None else float("nan")
    trainer.strategy.barrier("damcha_ts.best_checkpoint")
    best_epoch = trainer.current_epoch - 1
    if best_path:
        state = torch.load(best_path, map_location="cpu", weights_only=True)
        module.load_state_dict(state["state_dict"])
        best_epoch = int(state["epoch"])
    timer = next(c for c in trainer.callbacks if isinstance(c, EpochTimer))
    return FitResult(module=module, trainer=trainer, datamodule=datamodule, best_checkpoint=best_path,
                     best_val_loss=best_val, epochs_run=trainer.current_epoch, best_epoch=best_epoch,
                     timing=timer.summary())


def run_experiment(
    config: RunConfig | Mapping[str, Any],
    out_dir: str | Path,
    *,
    resume: bool = False,
    callbacks: Sequence = (),
    trainer_kwargs: dict | None = None,
    evaluate_test: bool = True,
    progress: bool = True,
    panel=None,
) -> dict:
    """Train one configured model, select it on validation, test it, and write the results.

    Writes into ``out_dir``: ``config.yaml`` (the resolved config), ``checkpoints/{best,last}.ckpt``,
    ``logs/metrics.csv`` (CSVLogger), ``metrics.json``, ``metrics_per_step.csv`` and
    ``metrics_per_variate.csv`` (test breakdowns), and ``model/`` (a directory that
    :meth:`damcha_ts.Forecaster.load` reads). Files are written once, by the global-zero rank.

    Args:
        config: a :class:`RunConfig`, or a resolved or raw run config mapping (see :meth:`RunConfig.load`).
        resume: continue from ``out_dir/checkpoints/last.ckpt`` if present; the saved config
            must hash the same as ``config``.
        callbacks: extra Lightning callbacks (e.g. Optuna's pruning callback on ``val_loss``).
        trainer_kwargs: passed to ``L.Trainer`` last (``devices``, ``strategy``, ``num_nodes``, ...).
        evaluate_test: False never touches the test split (for tuning on validation only).
        panel: the config's data already prepared (``run.data.prepare()``), not to prepare it again.

    Returns:
        ``mse``, ``mae``, ``mse_inverse``, ``mae_inverse`` and ``test_windows`` (when
        ``evaluate_test``), ``best_val_loss``, ``epochs_run``, ``best_epoch``, ``n_params``, ``world_size``,
        ``seconds_per_epoch``, ``train_seconds_per_epoch``, ``data_wait_fraction``,
        ``wall_seconds``, ``config_hash``, ``out_dir``.
    """
    started = time.perf_counter()
    run = RunConfig.load(config)
    out_dir = Path(out_dir)
    if resume:
        _check_resumable(out_dir, run)
    # Data settings are checked before out_dir is touched: a run that cannot start leaves an
    # earlier run's folder as it was.
    series = run.data.prepare() if panel is None else panel
    if evaluate_test:
        _refuse_without_test_split(series)
    fit = fit_series(series, run.model_dict(), run.training, out_dir, resume=resume, callbacks=callbacks,
                     trainer_kwargs=trainer_kwargs, progress=progress, on_start=lambda: _save_config(out_dir, run))
    result = _run_facts(run, fit)
    tables = None
    if evaluate_test:
        scores, tables = _test_scores(fit, series)
        result.update(scores)
    result.update(wall_seconds=time.perf_counter() - started, config_hash=run.config_hash(), out_dir=str(out_dir))
    if fit.trainer.is_global_zero:
        _write_outputs(out_dir, run, fit, series, result, tables)
    return result


def _refuse_without_test_split(series) -> None:
    if series.window_count("test") == 0:
        raise ConfigError("data.test_size=0 leaves no test split for run_experiment to score: give test_size > 0 "
                          "(or leave it out), or train with Forecaster.fit(data, test_size=0)",
                          cli="data.test_size=0 leaves no test split for the run to score: give --test-size > 0, "
                              "or leave it out")


def _test_scores(fit: FitResult, series) -> tuple[dict[str, Any], tuple]:
    """The test split's scores (``mse``, ``mae``, ``mse_inverse``, ``mae_inverse``, ``test_windows``)
    and its per-step and per-variate breakdown tables."""
    errors = evaluate_test_split(fit, series)
    scores = summary(errors)
    return ({**{k: scores[k] for k in ("mse", "mae", "mse_inverse", "mae_inverse")}, "test_windows": scores["windows"]},
            breakdowns(errors, scored_columns(series)))


def _check_resumable(out_dir: Path, run: RunConfig) -> None:
    """A resume continues the same run: the folder's config.yaml must hash as this config."""
    saved = out_dir / "config.yaml"
    if saved.is_file():
        previous = config_hash(yaml.safe_load(saved.read_text(encoding="utf-8")))
        if previous != run.config_hash():
            raise ConfigError(
                f"cannot resume in {out_dir}: its config.yaml (hash {previous}) differs "
                f"from this config (hash {run.config_hash()}); use another --out or drop --resume"
            )


def _save_config(out_dir: Path, run: RunConfig) -> None:
    if rank_zero_only.rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(out_dir / "config.yaml", yaml.safe_dump(run.to_dict(), sort_keys=False))


def _run_facts(run: RunConfig, fit: FitResult) -> dict[str, Any]:
    return {"model": run.model_name, "dataset": str(run.data.dataset), "horizon": run.data.protocol.pred_len,
            "best_val_loss": fit.best_val_loss, "epochs_run": fit.epochs_run, "best_epoch": fit.best_epoch,
            "n_params": count_parameters(fit.module.model), "world_size": fit.trainer.world_size, **fit.timing}


def _write_outputs(out_dir: Path, run: RunConfig, fit: FitResult, series, result: dict, tables) -> None:
    """Breakdowns, ``model/`` and, last, ``metrics.json`` (its presence means the whole run is on disk;
    the leaderboard relies on it)."""
    if tables is not None:
        _write_table(out_dir / "metrics_per_step.csv", tables[0])
        _write_table(out_dir / "metrics_per_variate.csv", tables[1])
    meta = _series_meta(series, run.data.to_dict())
    # A quantile model too: save_model_dir stores its point model, load wraps it.
    save_model_dir(out_dir / MODEL_DIR, fit.module.model, meta, training=run.training.to_dict(),
                   **history_arguments(series.history, meta),
                   metrics={k: v for k, v in result.items() if isinstance(v, (int, float, str))})
    write_atomically(out_dir / "metrics.json", json.dumps(result, indent=2) + "\n")


def _series_meta(series, data_config: Mapping[str, Any]):
    """The saved model's data description, with how its file was laid out (time column, date
    format, variate order), so that ``damcha-ts predict`` reads the same file without repeating them."""
    # Read as prepare read it: a table that names its series is many entities.
    options = with_entity_col(data_config["dataset"], {k: v for k, v in data_config.items() if k != "dataset"})
    kind, layout = describe_input(data_config["dataset"], options)
    layout["input_columns"] = input_columns(data_config["dataset"], options, series)  # one entity's, for many
    return SeriesMeta.from_panel(series, data_config=data_config, input_kind=kind, input_options=layout)


def evaluate_test_split(fit: FitResult, series):
    """Errors of the best model over every test window (no window dropped, nothing duplicated).

    Each rank evaluates the whole split in a plain loop (not ``trainer.test``, whose DDP sampler
    would pad the split with repeated windows), so all ranks report identical numbers.
    """
    device = fit.trainer.strategy.root_device
    fit.module.to(device)
    # Each entity's windows with its own scaler, in the training batches, then all pooled.
    errors = [evaluate_loader(fit.module.model, split_loader(one, "test", batch_size=fit.datamodule.batch_size),
                              scaler=scored_scaler(one), device=device, target_only=fit.module.target_only)
              for one in series.series if one.window_count("test") > 0]
    return functools.reduce(lambda a, b: a.merge(b), errors)


def _write_table(path: Path, table: Mapping[str, list]) -> None:
    write_atomically(path, pd.DataFrame(table).to_csv(index=False))
