"""Train, select and test one model: the function behind the CLI, the leaderboard and the tuner."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import json
import logging
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.rank_zero import rank_zero_info, rank_zero_only
from lightning.pytorch.callbacks import TQDMProgressBar

from damcha_ts.errors import ConfigError
from damcha_ts.files import write_atomically
from damcha_ts.training.callbacks import EpochLog, EpochTimer
from damcha_ts.training.checkpoints import resume_point
from damcha_ts.training.config import DataConfig, RunConfig, TrainingConfig, config_hash
from damcha_ts.training.evaluation import (
    breakdowns,
    evaluate_loader,
    scored_columns,
    scored_scaler,
    summary,
)
from damcha_ts.training.module import ForecastModule

CHECKPOINT_DIR = "checkpoints"
LOG_DIR = "logs"
MODEL_DIR = "model"


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
    """A Trainer with the protocol's callbacks: early stopping on val_loss, best + last checkpoints.

    ``trainer_kwargs`` go to ``L.Trainer`` last, so they win (``devices``, ``strategy``,
    ``num_nodes``, ``limit_train_batches``, ...). Their ``callbacks`` are added to ours.
    ``validate=False`` trains ``max_epochs`` epochs without validation (no early stopping; "best" is
    the last epoch), whatever ``limit_val_batches`` they give.
    """
    from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor
    from lightning.pytorch.loggers import CSVLogger

    from damcha_ts.training.checkpoints import FolderCheckpoint

    kwargs = dict(trainer_kwargs or {})
    extra_callbacks = list(kwargs.pop("callbacks", []) or [])
    accelerator = kwargs.get("accelerator", training.accelerator)
    all_callbacks = [
        # Without validation there is no "best": the last checkpoint is then trainer.checkpoint_callback.
        *([EarlyStopping(monitor="val_loss", mode="min", patience=training.patience),
           FolderCheckpoint(  # first, so that it is trainer.checkpoint_callback
               dirpath=out_dir / CHECKPOINT_DIR,
               filename="best",
               monitor="val_loss",
               mode="min",
               save_top_k=1,
               enable_version_counter=False,
           )] if validate else []),
        # last.ckpt after every epoch. Lightning's save_last=True writes it only in epochs that also
        # write a best checkpoint, so a resume would redo every epoch since the best one.
        FolderCheckpoint(dirpath=out_dir / CHECKPOINT_DIR, filename="last", save_top_k=1, enable_version_counter=False),
        LearningRateMonitor(logging_interval="epoch"),
        EpochTimer(),
        *callbacks,
        *extra_callbacks,
    ]
    if progress:
        all_callbacks.append(StderrProgressBar(refresh_rate=10))
    else:
        all_callbacks.append(EpochLog(prefix="  "))  # background runs still say where they are
    settings = {
        "max_epochs": training.max_epochs,
        "accelerator": training.accelerator,
        "devices": training.devices,
        "strategy": training.strategy,
        "num_nodes": training.num_nodes,
        "precision": resolve_precision(training, accelerator),
        "deterministic": training.deterministic,
        "gradient_clip_val": training.gradient_clip_val,
        "default_root_dir": str(out_dir),
        "logger": CSVLogger(str(out_dir), name=LOG_DIR, version=""),
        "enable_progress_bar": progress,
        "enable_model_summary": progress,
        "callbacks": all_callbacks,
        "plugins": _with_atomic_checkpoints(kwargs.pop("plugins", None)),
    }
    settings.update(kwargs)
    if not validate:
        settings.update(limit_val_batches=0, num_sanity_val_steps=0)
    if settings["logger"] in (None, False):
        # Nothing to write learning rates to.
        settings["callbacks"] = [c for c in all_callbacks if not isinstance(c, LearningRateMonitor)]
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    _quiet_lightning_noise()
    try:
        return L.Trainer(**settings)
    except (TypeError, ValueError, MisconfigurationException) as exc:  # devices="abc", strategy="foo", ...
        chosen = {k: settings[k] for k in ("accelerator", "devices", "strategy", "num_nodes", "precision")}
        raise ConfigError(f"lightning.Trainer rejected the run's arguments ({chosen}, extra {dict(kwargs)}): "
                          f"{exc}") from exc


def _with_atomic_checkpoints(plugins) -> list:
    """The caller's Trainer plugins, plus atomic checkpoint writes (temporary name, fsync, rename:
    a kill or a full disk never leaves half a checkpoint) unless they bring a CheckpointIO of their own."""
    from lightning.fabric.plugins import CheckpointIO

    from damcha_ts.training.checkpoints import AtomicCheckpointIO

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


#: Fewer validation windows than this make early stopping a guess (DataWarning).
MIN_VAL_WINDOWS = 16


def warn_few_windows(series, batch_size: int) -> None:
    """A DataWarning when the validation split has fewer than ``MIN_VAL_WINDOWS`` windows or the
    train split fewer than one batch, with the counts and what would give more."""
    from damcha_ts.data.registry import DataWarning

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
            DataWarning,
            stacklevel=_caller_level(),
        )


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside damcha_ts (where the user called fit), from
    the function that calls this one."""
    import inspect

    package = str(Path(__file__).resolve().parents[1])
    frames = inspect.stack(0)[2:]
    for level, frame in enumerate(frames, start=2):
        if not str(Path(frame.filename).resolve()).startswith(package):
            return level
    return 1


def _drop_lightning_tips(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("\U0001f4a1 Tip:")  # adverts for Lightning's cloud services


def _quiet_lightning_noise() -> None:
    """Keep every run's log to what matters: Lightning prints a cloud-service tip with each Trainer,
    and with torch >= 2.10 a deprecation warning about its own use of torch's pytree API."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if _drop_lightning_tips not in logger.filters:
        logger.addFilter(_drop_lightning_tips)
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")


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


def prepare_series(data_config: Mapping[str, Any]):
    """The :class:`damcha_ts.data.SeriesData` a ``data`` config section describes."""
    return DataConfig.from_dict(data_config).prepare()


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
    """Train on a prepared series with early stopping, then reload the best checkpoint's weights.

    With ``resume=True`` training continues from ``out_dir/checkpoints/last.ckpt`` when it exists
    (weights, optimizer, scheduler, loop and callback state, and the train sampler's generator,
    see :class:`ForecastModule`), so an interrupted run ends where an uninterrupted one would; an
    unreadable ``last.ckpt`` falls back to ``best.ckpt`` or is refused (:func:`resume_point`).
    ``timing`` covers the epochs run by this call. ``on_start`` is called (on every rank) once the
    Trainer has accepted its arguments, before anything in ``out_dir`` changes.
    ``validate=False`` trains ``training.max_epochs`` epochs on the train split alone and keeps the
    last epoch's weights (a refit for an epoch count chosen earlier; ``best_val_loss`` is NaN).
    """
    from damcha_ts.data import ForecastDataModule

    out_dir = Path(out_dir)
    # Checked before anything starts: an unreadable last.ckpt falls back to best.ckpt or is refused.
    start = resume_point(out_dir / CHECKPOINT_DIR) if resume else None
    ckpt_path = str(start) if start is not None else None
    if resume and ckpt_path is None:
        rank_zero_info(f"resume: no {out_dir / CHECKPOINT_DIR / 'last.ckpt'} yet, starting from scratch")
    if validate and rank_zero_only.rank == 0:
        warn_few_windows(series, training.batch_size)
    # The Trainer first: arguments it rejects must fail before anything in out_dir is touched.
    trainer = build_trainer(
        training, out_dir, callbacks=callbacks, progress=progress, trainer_kwargs=trainer_kwargs, validate=validate
    )
    if on_start is not None:
        on_start()
    if ckpt_path is None and rank_zero_only.rank == 0:
        # A fresh run owns these folders: stale checkpoints would be mistaken for this run's.
        for stale in (out_dir / CHECKPOINT_DIR, out_dir / LOG_DIR):
            shutil.rmtree(stale, ignore_errors=True)
    if ckpt_path is not None and rank_zero_only.rank == 0:
        _set_log_aside(out_dir / LOG_DIR)

    L.seed_everything(training.seed, workers=True, verbose=False)
    datamodule = ForecastDataModule(
        series, batch_size=training.batch_size, num_workers=training.num_workers, seed=training.seed
    )
    module = ForecastModule(with_covariate_counts(model_config, series), dataclasses.asdict(training),
                            target_only=series.target_only)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    if ckpt_path is not None and trainer.is_global_zero:
        _restore_log_history(out_dir / LOG_DIR)

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
    return FitResult(
        module=module,
        trainer=trainer,
        datamodule=datamodule,
        best_checkpoint=best_path,
        best_val_loss=best_val,
        epochs_run=trainer.current_epoch,
        best_epoch=best_epoch,
        timing=timer.summary(),
    )


# Lightning's CSVLogger deletes logs/metrics.csv when a run starts in a folder that has one, so a
# resumed run would lose the epochs before the interruption. Their rows wait in this file (several
# resumes stack up) and are put back in front of the resumed run's rows when it ends.
EARLIER_LOG = "metrics_before_resume.csv"


def _read_log(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _write_log(path: Path, rows: list[dict]) -> None:
    import io

    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(dict.fromkeys(key for row in rows for key in row)))
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(path, text.getvalue())


def _epoch(row: dict) -> float:
    return float(row["epoch"]) if row.get("epoch") else float("-inf")


def _set_log_aside(log_dir: Path) -> None:
    current = log_dir / "metrics.csv"
    if current.is_file():
        _write_log(log_dir / EARLIER_LOG, _read_log(log_dir / EARLIER_LOG) + _read_log(current))
        current.unlink()


def _restore_log_history(log_dir: Path) -> None:
    """metrics.csv = the earlier rows of epochs before the resumed one, then the resumed run's rows."""
    earlier, current = _read_log(log_dir / EARLIER_LOG), _read_log(log_dir / "metrics.csv")
    if not earlier:
        return
    resumed_from = min((_epoch(row) for row in current if row.get("epoch")), default=float("inf"))
    # Rows of an epoch cut short by the interruption were logged again by the resumed run.
    kept = [row for row in earlier if _epoch(row) < resumed_from]
    _write_log(log_dir / "metrics.csv", kept + current)
    (log_dir / EARLIER_LOG).unlink()


def run_experiment(
    config: RunConfig | Mapping[str, Any],
    out_dir: str | Path,
    *,
    resume: bool = False,
    callbacks: Sequence = (),
    trainer_kwargs: dict | None = None,
    evaluate_test: bool = True,
    progress: bool = True,
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
    series = run.data.prepare()
    if evaluate_test and series.window_count("test") == 0:
        raise ConfigError("data.test_size=0 leaves no test split for run_experiment to score: give test_size > 0 "
                          "(or leave it out), or train with Forecaster.fit(data, test_size=0)",
                          cli="data.test_size=0 leaves no test split for the run to score: give --test-size > 0, "
                              "or leave it out")
    fit = fit_series(
        series,
        run.model_dict(),
        run.training,
        out_dir,
        resume=resume,
        callbacks=callbacks,
        trainer_kwargs=trainer_kwargs,
        progress=progress,
        on_start=lambda: _save_config(out_dir, run),
    )
    result = _run_facts(run, fit)
    tables = None
    if evaluate_test:
        errors = evaluate_test_split(fit, series)
        scores = summary(errors)
        result.update({k: scores[k] for k in ("mse", "mae", "mse_inverse", "mae_inverse")})
        result["test_windows"] = scores["windows"]
        tables = breakdowns(errors, scored_columns(series))
    result.update(wall_seconds=time.perf_counter() - started, config_hash=run.config_hash(), out_dir=str(out_dir))
    if fit.trainer.is_global_zero:
        _write_outputs(out_dir, run, fit, series, result, tables)
    return result


def _check_resumable(out_dir: Path, run: RunConfig) -> None:
    """A resume continues the same run: the folder's config.yaml must hash as this config."""
    import yaml

    saved = out_dir / "config.yaml"
    if saved.is_file():
        previous = config_hash(yaml.safe_load(saved.read_text(encoding="utf-8")))
        if previous != run.config_hash():
            raise ConfigError(
                f"cannot resume in {out_dir}: its config.yaml (hash {previous}) differs "
                f"from this config (hash {run.config_hash()}); use another --out or drop --resume"
            )


def _save_config(out_dir: Path, run: RunConfig) -> None:
    import yaml

    if rank_zero_only.rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(out_dir / "config.yaml", yaml.safe_dump(run.to_dict(), sort_keys=False))


def _run_facts(run: RunConfig, fit: FitResult) -> dict[str, Any]:
    from damcha_ts.models import count_parameters

    return {
        "model": run.model_name,
        "dataset": str(run.data.dataset),
        "horizon": run.data.protocol.pred_len,
        "best_val_loss": fit.best_val_loss,
        "epochs_run": fit.epochs_run,
        "best_epoch": fit.best_epoch,
        "n_params": count_parameters(fit.module.model),
        "world_size": fit.trainer.world_size,
        **fit.timing,
    }


def _write_outputs(out_dir: Path, run: RunConfig, fit: FitResult, series, result: dict, tables) -> None:
    """Breakdowns, ``model/`` and, last, ``metrics.json`` (its presence means the whole run is on disk;
    the leaderboard relies on it)."""
    from damcha_ts.training.artifacts import history_arguments, save_model_dir

    if tables is not None:
        _write_table(out_dir / "metrics_per_step.csv", tables[0])
        _write_table(out_dir / "metrics_per_variate.csv", tables[1])
    save_model_dir(
        out_dir / MODEL_DIR,
        fit.module.model,  # a quantile model too: save_model_dir stores its point model, load wraps it
        _series_meta(series, run.data.to_dict()),
        training=run.training.to_dict(),
        **history_arguments(series.latest),
        metrics={k: v for k, v in result.items() if isinstance(v, (int, float, str))},
    )
    write_atomically(out_dir / "metrics.json", json.dumps(result, indent=2) + "\n")


def _series_meta(series, data_config: Mapping[str, Any]):
    """The saved model's data description, with how its file was laid out (time column, date
    format, variate order), so that ``damcha-ts predict`` reads the same file without repeating them."""
    from damcha_ts.data.layout import describe_input, input_columns, with_entity_col
    from damcha_ts.training.artifacts import SeriesMeta

    # Read as prepare read it: a table that names its series is many entities.
    options = with_entity_col(data_config["dataset"], {k: v for k, v in data_config.items() if k != "dataset"})
    kind, layout = describe_input(data_config["dataset"], options)
    layout["input_columns"] = input_columns(data_config["dataset"], options, series)  # one entity's, for many
    return SeriesMeta.from_series(series, data_config=data_config, input_kind=kind, input_options=layout)


def evaluate_test_split(fit: FitResult, series):
    """Errors of the best model over every test window (no window dropped, nothing duplicated).

    Each rank evaluates the whole split in a plain loop (not ``trainer.test``, whose DDP sampler
    would pad the split with repeated windows), so all ranks report identical numbers.
    """
    device = fit.trainer.strategy.root_device
    fit.module.to(device)
    if hasattr(series, "entities"):  # each entity's windows with its own scaler, then all pooled
        from damcha_ts.training.evaluation import split_loader

        errors = [evaluate_loader(fit.module.model, split_loader(one, "test"), scaler=scored_scaler(one), device=device,
                                  target_only=fit.module.target_only)
                  for one in series.series if one.window_count("test") > 0]
        return functools.reduce(lambda a, b: a.merge(b), errors)
    loader = fit.datamodule.test_dataloader()
    return evaluate_loader(
        fit.module.model, loader, scaler=scored_scaler(series), device=device, target_only=fit.module.target_only
    )


def _write_table(path: Path, table: Mapping[str, list]) -> None:
    import pandas as pd

    write_atomically(path, pd.DataFrame(table).to_csv(index=False))
