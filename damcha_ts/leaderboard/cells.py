"""Running one leaderboard cell and turning its outcome into a results-CSV row.

A neural cell is a full ``damcha_ts.forecasting.experiment.run_experiment`` (early stopping on val_loss, best
checkpoint reloaded, every test window scored) in its own run directory
``<runs>/<grid>/<dataset>/<model>/H<horizon>/seed<seed>-<config hash>``; a killed cell resumes there
from ``checkpoints/last.ckpt``. Afterwards a small prediction sample (a few test windows, and the
learned per-head metrics for DAMCHA models) is saved for the report's plots. A naive cell evaluates
``damcha_ts.baselines.evaluate_naive`` on the test split.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from damcha_ts.baselines import evaluate_naive
from damcha_ts.data import prepare
from damcha_ts.data.options import ProtocolOptions
from damcha_ts.files import write_atomically
from damcha_ts.leaderboard.environment import hardware_description, library_versions
from damcha_ts.leaderboard.grid import Cell, LeaderboardGrid
from damcha_ts.leaderboard.results import sample_path
from damcha_ts.models.registry import model_spec
from damcha_ts.training import RunConfig, config_hash

# Naive baselines use the protocol's lookback (protocol.md §7), like every neural config here.
NAIVE_SEQ_LEN = ProtocolOptions.seq_len
SAMPLE_FILE = "prediction_sample.npz"
SAMPLE_WINDOWS = 4  # forecast windows kept for the forecast-vs-truth plot
METRIC_WINDOWS = 64  # test windows whose head metrics are averaged for the heatmap


@dataclass(frozen=True)
class ResolvedCell:
    """A cell with its fully resolved run config, identity hash and run directory."""

    cell: Cell
    config: dict  # run config (neural) or the naive cell's description
    config_hash: str
    run_dir: Path | None  # None for naive cells
    grid_name: str  # the grid file, relative to the project root (the CSV's "grid" column)
    trainer_overrides: dict
    run: Any = None  # the neural cell's RunConfig (``config`` is its dict form)

    @property
    def key(self) -> tuple[str, str, int, int, str]:
        c = self.cell
        return (c.dataset, c.model, c.horizon, c.seed, self.config_hash)


def resolve_cell(cell: Cell, grid: LeaderboardGrid, runs_dir: Path) -> ResolvedCell:
    """Resolve the cell's config (per-horizon sections, overrides, seed) and hash it.

    The hash covers everything that changes the result: the resolved run config plus the grid's
    extra trainer settings. Device settings are not part of it, so a cell finished on a CPU counts
    as finished on a GPU machine too.
    """
    grid_name = grid.relative_path
    if cell.is_naive:
        description = {
            "naive": cell.naive_method,
            "data": {"dataset": cell.dataset, "seq_len": NAIVE_SEQ_LEN, "pred_len": cell.horizon, "features": "M"},
        }
        return ResolvedCell(cell, description, config_hash(description), None, grid_name, {})
    run = RunConfig.load(cell.config_path, horizon=cell.horizon, overrides=[*cell.overrides, f"training.seed={cell.seed}"])
    config = run.to_dict()
    identity = {"run": config, "trainer": grid.trainer} if grid.trainer else config
    digest = config_hash(identity)
    run_dir = runs_dir / grid.name / cell.dataset / cell.model / f"H{cell.horizon}" / f"seed{cell.seed}-{digest}"
    return ResolvedCell(cell, config, digest, run_dir, grid_name, dict(grid.trainer), run)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# In a cell's run folder: the versions, hardware and time of the process that trained it, so that a
# row written later from the finished folder (another runner's, or after a crash) says where it ran.
PROVENANCE_FILE = "provenance.json"


def _provenance() -> dict:
    return {"versions": library_versions(), "hardware": hardware_description(), "timestamp": _now()}


def run_cell(resolved: ResolvedCell, device_trainer_kwargs: dict) -> dict:
    """Run one cell to completion and return its results-CSV row (without writing it)."""
    started = time.perf_counter()
    cell = resolved.cell
    if cell.is_naive:
        outcome = {**_run_naive(resolved), **_provenance()}
    else:
        outcome = _run_neural(resolved, device_trainer_kwargs)
    return {
        "dataset": cell.dataset, "model": cell.model, "horizon": cell.horizon, "seed": cell.seed,
        "mse": float(outcome["mse"]), "mae": float(outcome["mae"]), "config_hash": resolved.config_hash,
        # Scale-free, on the original scale; a run finished before they were scored has none (NaN).
        "mase": float(outcome.get("mase", math.nan)), "smape": float(outcome.get("smape", math.nan)),
        "epochs_run": outcome.get("epochs_run", 0), "best_epoch": outcome.get("best_epoch"),
        "n_params": outcome.get("n_params", 0),
        # A run resumed after its last epoch trains no epoch in this process and has no timing.
        "seconds_per_epoch": float(outcome.get("seconds_per_epoch", math.nan)),
        # The run's own wall time (a finished run found in its folder keeps the time it took).
        "wall_seconds": float(outcome.get("wall_seconds", time.perf_counter() - started)),
        "versions": outcome["versions"], "hardware": outcome["hardware"], "grid": resolved.grid_name,
        "timestamp": outcome["timestamp"],
    }


def _run_naive(resolved: ResolvedCell) -> dict:
    data_options = dict(resolved.config["data"])
    from damcha_ts.forecasting.window_scores import naive_series_scores, pooled_split_scores

    panel = prepare(data_options.pop("dataset"), **data_options)
    method = resolved.cell.naive_method
    return {**evaluate_naive(panel, method, split="test"),
            **pooled_split_scores(panel, lambda entity, one: naive_series_scores(one, method, "test"))}


def checkpointed_epochs(run_dir: Path | None) -> int:
    """How many epochs of an unfinished cell its ``last.ckpt`` holds (0: none, or unreadable); a rerun
    of the grid continues after them."""
    from damcha_ts.training.trainer import CHECKPOINT_DIR

    last = run_dir / CHECKPOINT_DIR / "last.ckpt" if run_dir is not None else None
    if last is None or not last.is_file():
        return 0
    try:  # mmap: only the pickled structure is read, not the weights
        return int(torch.load(last, map_location="cpu", weights_only=True, mmap=True)["epoch"]) + 1
    except Exception:  # noqa: BLE001 - the rerun drops an unreadable file and starts afresh
        return 0


def _drop_unreadable_checkpoint(run_dir: Path) -> None:
    """A cell whose checkpoints cannot be resumed from (neither ``last.ckpt`` nor the ``best.ckpt``
    a resume falls back to reads) would fail forever, so its ``last.ckpt`` is removed and the cell
    starts afresh; a leaderboard cell is the project's own run, so this loses nothing of the user's."""
    from damcha_ts.training.checkpoints import BEST, LAST, checkpoint_problem
    from damcha_ts.training.trainer import CHECKPOINT_DIR

    last, best = run_dir / CHECKPOINT_DIR / LAST, run_dir / CHECKPOINT_DIR / BEST
    problem = checkpoint_problem(last) if last.is_file() else None
    if problem is None or (best.is_file() and checkpoint_problem(best) is None):
        return
    print(f"{run_dir}: {last.name}: {problem}; the cell starts afresh", file=sys.stderr)
    last.unlink()


def _run_neural(resolved: ResolvedCell, device_trainer_kwargs: dict) -> dict:
    from damcha_ts.forecasting.experiment import run_experiment

    # One worker at a time has the cell (the queue hands it out once), so its folder is its own; a
    # retry after a dead worker resumes there from the last checkpoint.
    resolved.run_dir.mkdir(parents=True, exist_ok=True)
    result = finished_result(resolved)
    provenance_file = resolved.run_dir / PROVENANCE_FILE
    if result is None:
        _drop_unreadable_checkpoint(resolved.run_dir)
        trainer_kwargs = {**device_trainer_kwargs, **resolved.trainer_overrides}
        result = run_experiment(
            resolved.run, resolved.run_dir, resume=True, trainer_kwargs=trainer_kwargs, progress=False
        )
        provenance = _provenance()
        write_atomically(provenance_file, json.dumps(provenance) + "\n")
    else:
        try:
            provenance = json.loads(provenance_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # a folder finished before provenance was kept
            provenance = _provenance()
    result = {**result, **provenance}
    if not (resolved.run_dir / SAMPLE_FILE).is_file():
        _try_prediction_sample(resolved)
    return result


def _try_prediction_sample(resolved: ResolvedCell) -> None:
    """The sample only feeds the report's figures: a failure to write it must not cost the cell's
    finished, tested result."""
    try:
        save_prediction_sample(resolved.config, resolved.run_dir)
    except Exception as exc:  # noqa: BLE001 - reported; the row stands without its figures
        print(f"{resolved.run_dir}: prediction sample not saved ({type(exc).__name__}: {exc}); the result row "
              "is kept, this cell's figures are left out", file=sys.stderr)


def finished_result(resolved: ResolvedCell) -> dict | None:
    """The results of a run that already finished in this cell's folder, or None.

    A worker may die after its cell's run finished and before its trial was told (or a CSV row was
    lost with another results file); the retry then finds the result here. ``run_experiment`` writes its ``metrics.json`` last, after the test and the saved model, so such
    a cell is not trained again.
    """
    path = resolved.run_dir / "metrics.json"
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    # The folder's name carries the cell's hash; the run records the hash of its own config.
    if result.get("config_hash") != config_hash(resolved.config) or "mse" not in result:
        return None
    return result


def keep_sample(resolved: ResolvedCell, grid: LeaderboardGrid, results_path: Path) -> None:
    """Copy the sample of the first seed at the shortest horizon (what the plots show) next to the
    CSV, so the plots can be redrawn from committed files; run folders are not committed."""
    cell = resolved.cell
    if cell.is_naive or cell.horizon != min(grid.horizons):
        return
    if cell.seed != grid.seeds_for(cell.dataset, cell.model)[0]:
        return
    source = resolved.run_dir / SAMPLE_FILE
    if source.is_file():
        target = sample_path(results_path, cell.dataset, cell.model, cell.horizon)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, source.read_bytes())  # a committed file: never half-written


def save_prediction_sample(config: dict, run_dir: Path) -> Path:
    """Write ``run_dir/prediction_sample.npz`` from the saved best model.

    Holds ``x`` [k, L, N], ``y`` and ``pred`` [k, H, N] (z-scale) for k test windows spread over the
    test split, ``window`` (their indices), ``start`` (first target timestamp), ``columns``, and for
    DAMCHA models ``head_metrics`` [H, dh, dh] (the first DAMCHA layer's learned per-head metrics
    m_i, averaged over up to 64 test windows) and, with the "full" parameterisation, ``full_metric``
    [D, D] (the cross-head metric M, averaged likewise).
    """
    from damcha_ts.training.artifacts import MODEL_DIR, load_model_dir
    from damcha_ts.training.config import DataConfig

    loaded = load_model_dir(run_dir / MODEL_DIR)
    model = loaded.model.eval()
    series = DataConfig.from_dict(config["data"]).prepare()
    test = series.windows("test")
    n_windows = len(test)
    chosen = torch.linspace(0, n_windows - 1, min(SAMPLE_WINDOWS, n_windows)).round().long()
    batch = test.batch(chosen)
    with torch.no_grad():
        pred = model(batch["x"], batch["x_mark"])
    border1 = series.borders["test"][0]
    starts = [str(series.series[0].timestamps[border1 + int(i) + series.seq_len]) for i in chosen]
    arrays = {
        "x": batch["x"].numpy(),
        "y": batch["y"].numpy(),
        "pred": pred.float().numpy(),
        "window": chosen.numpy(),
        "start": np.array(starts),
        "columns": np.array(series.columns),
    }
    switch = model_spec(config["model"]["name"]).attention_field  # None: a baseline, no attention
    if switch is not None and config["model"][switch] == "damcha":
        probe = test.batch(torch.linspace(0, n_windows - 1, min(METRIC_WINDOWS, n_windows)).round().long())
        with torch.no_grad():
            maps = model.attention_maps(probe["x"], probe["x_mark"])
        # The DAMCHA stack is iTransformer's only encoder, Gateformer's variate-wise one. Its first
        # layer is kept (with a shared generator every layer uses the same metrics).
        first = (maps.get("encoder") or maps.get("variate_encoder"))[0]
        arrays["head_metrics"] = _sample_mean(first.head_metrics, per_sample_dims=4).numpy()
        if first.full_metric is not None:
            arrays["full_metric"] = _sample_mean(first.full_metric, per_sample_dims=3).numpy()
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    # Atomic: the sample's presence is what tells a rerun the cell needs no new one.
    return write_atomically(run_dir / SAMPLE_FILE, buffer.getvalue())


def _sample_mean(metric, per_sample_dims: int):
    """Average data-adaptive metrics over the batch axis; a static metric has none to average."""
    metric = metric.float()
    return metric.mean(0) if metric.dim() == per_sample_dims else metric
