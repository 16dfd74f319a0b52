"""A run: an :class:`~damcha_ts.forecasting.estimator.Estimator` fitted into a folder, tested, written out.

    >>> from damcha_ts.forecasting.experiment import run_experiment
    >>> metrics = run_experiment(load_run_config("itransformer_damcha/etth1", horizon=96), "runs/etth1_96")  # doctest: +SKIP

What ``damcha-ts fit``, a leaderboard cell and a tuning trial run: ``Estimator.for_run(config)``
trains in the run's folder (checkpoints there, resumable), then the test split is scored and the
folder gets its results and ``model/``.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from damcha_ts.errors import ConfigError
from damcha_ts.files import write_atomically
from damcha_ts.forecasting.estimator import Estimator, RunFolder
from damcha_ts.training.artifacts import MODEL_DIR
from damcha_ts.training.config import RunConfig, config_hash


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
    calibrated: bool = False,
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
        calibrated: ``model/`` holds the calibration of ``level=`` intervals on the validation
            windows (``damcha-ts fit``: ``predict --level``).

    Returns:
        ``mse``, ``mae``, ``mse_inverse``, ``mae_inverse``, ``mase``, ``smape``, ``rmse`` and
        ``test_windows`` (when ``evaluate_test``), ``best_val_loss``, ``epochs_run``, ``best_epoch``, ``n_params``, ``world_size``,
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
    panel = run.data.prepare() if panel is None else panel
    _check_runnable(run, panel, evaluate_test)
    folder = RunFolder(out_dir, resume=resume, callbacks=tuple(callbacks), progress=progress,
                       on_start=lambda: _save_config(out_dir, run))
    # compared: a run that is tested is a user's fit, told when the naive rules beat it (a tuning trial is not).
    predictor = Estimator.for_run(run, trainer_kwargs).fit(panel, calibrated=calibrated, compared=evaluate_test,
                                                           folder=folder, description=_description(panel, run.data.to_dict()))
    fit = predictor.fit_record.trained
    result = _run_facts(run, fit, predictor.fit_record.facts["n_params"])
    tables = None
    if evaluate_test:
        scores, tables = _test_scores(fit, panel, predictor)
        result.update(scores)
    result.update(wall_seconds=time.perf_counter() - started, config_hash=run.config_hash(), out_dir=str(out_dir))
    if fit.trainer.is_global_zero:
        _write_outputs(out_dir, run, predictor, result, tables)
    return result


def _check_runnable(run: RunConfig, panel, evaluate_test: bool) -> None:
    """Refuse a run to be tested without a test split, or whose config counts other covariates than its data."""
    from damcha_ts.training.runner import with_covariate_counts  # Lightning: loaded when a model trains

    with_covariate_counts(run.model_dict(), panel)
    if evaluate_test and panel.window_count("test") == 0:
        raise ConfigError("data.test_size=0 leaves no test split for run_experiment to score: give test_size > 0 "
                          "(or leave it out), or train with Forecaster.fit(data, test_size=0)",
                          cli="data.test_size=0 leaves no test split for the run to score: give --test-size > 0, "
                              "or leave it out")


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
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    if rank_zero_only.rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(out_dir / "config.yaml", yaml.safe_dump(run.to_dict(), sort_keys=False))


def _description(panel, data_config: Mapping[str, Any]) -> dict:
    """``SeriesMeta.from_panel``'s keywords for a run's data: its data section and how its file was
    laid out (time column, date format, variate order), so that ``damcha-ts predict`` reads the
    same file without repeating them."""
    from damcha_ts.data.entity_column import with_entity_col
    from damcha_ts.data.layout import describe_input, input_columns

    # Read as prepare read it: a table that names its series is many entities.
    options = with_entity_col(data_config["dataset"], {k: v for k, v in data_config.items() if k != "dataset"})
    kind, layout = describe_input(data_config["dataset"], options)
    layout["input_columns"] = input_columns(data_config["dataset"], options, panel)  # one entity's, for many
    return {"data_config": data_config, "input_kind": kind, "input_options": layout}


def _run_facts(run: RunConfig, fit, n_params: int) -> dict[str, Any]:
    return {"model": run.model_name, "dataset": str(run.data.dataset), "horizon": run.data.protocol.pred_len,
            "best_val_loss": fit.best_val_loss, "epochs_run": fit.epochs_run, "best_epoch": fit.best_epoch,
            "best_step": fit.best_step, "n_params": n_params, "world_size": fit.trainer.world_size, **fit.timing}


def _test_scores(fit, panel, predictor) -> tuple[dict[str, Any], tuple]:
    """The test split's scores (``mse``, ``mae``, ``mse_inverse``, ``mae_inverse``, ``test_windows``;
    scale-free, on the original scale: ``mase``, ``smape``, ``rmse``) and its per-step and per-variate
    breakdown tables."""
    from damcha_ts.forecasting.window_scores import pooled_split_scores, split_scores
    from damcha_ts.training.evaluation import breakdowns, scored_columns, summary

    errors = evaluate_test_split(fit, panel)
    scores = summary(errors)
    batch_size = fit.datamodule.batch_size
    scale_free = pooled_split_scores(
        panel, lambda entity, one: split_scores(predictor.for_entity(entity), one, "test", batch_size=batch_size))
    return ({**{k: scores[k] for k in ("mse", "mae", "mse_inverse", "mae_inverse")}, **scale_free,
             "test_windows": scores["windows"]}, breakdowns(errors, scored_columns(panel)))


def evaluate_test_split(fit, panel):
    """Errors of the best model (``fit``: ``fit_series``'s result) over every test window of every
    entity of ``panel`` (no window dropped, nothing duplicated).

    Each rank evaluates the whole split in a plain loop (not ``trainer.test``, whose DDP sampler
    would pad the split with repeated windows), so all ranks report identical numbers.
    """
    from damcha_ts.training.evaluation import evaluate_loader, scored_scaler, split_loader

    device = fit.trainer.strategy.root_device
    fit.module.to(device)
    # Each entity's windows with its own scaler, in the training batches, then all pooled.
    errors = [evaluate_loader(fit.module.model, split_loader(one, "test", batch_size=fit.datamodule.batch_size),
                              scaler=scored_scaler(one), device=device, target_only=fit.module.target_only)
              for one in panel.series if one.window_count("test") > 0]
    return functools.reduce(lambda a, b: a.merge(b), errors)


def _write_outputs(out_dir: Path, run: RunConfig, predictor, result: dict, tables) -> None:
    """Breakdowns, ``model/`` and, last, ``metrics.json`` (its presence means the whole run is on disk;
    the leaderboard relies on it)."""
    if tables is not None:
        for name, table in zip(("metrics_per_step.csv", "metrics_per_variate.csv"), tables):
            write_atomically(out_dir / name, pd.DataFrame(table).to_csv(index=False))
    # A quantile model too: the saved directory stores its point model, load wraps it.
    predictor.save(out_dir / MODEL_DIR, training=run.training.to_dict(),
                   metrics={k: v for k, v in result.items() if isinstance(v, (int, float, str))})
    write_atomically(out_dir / "metrics.json", json.dumps(result, indent=2) + "\n")
