"""Test metrics over every window of a split, on the z-scale and on the original scale.

The sums live in :class:`damcha_ts.metrics.ErrorAccumulator` (per horizon step and variate, in
float64), so memory stays at [H, N] however many windows there are; this module runs a model over
a loader and lays the result out as the runner writes it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from damcha_ts.data.protocol import scored_slice
from damcha_ts.data.windows import keep_batch
from damcha_ts.metrics import ErrorAccumulator
from damcha_ts.models.base import Covariates, model_device
from damcha_ts.models.quantiles import QuantileForecastModel


@torch.no_grad()
def evaluate_loader(
    model: torch.nn.Module, loader, *, scaler=None, device=None, target_only: bool = False, nonnegative: bool = False
) -> ErrorAccumulator:
    """Run ``model`` over every batch of ``loader`` and accumulate its errors.

    Args:
        model: maps (x [B, L, N], x_mark [B, L, M], covariates) to [B, H, N]; a ``QuantileForecastModel``
            (output [B, Q, H, N]) is scored on its median, the point forecast.
        loader: yields {"x", "y", "x_mark", ...}; nothing may be dropped (drop_last=False).
        scaler: the StandardScaler of the scored columns, for original-scale ("inverse") errors.
        target_only: score only the last variate (the ``MS`` setting: all in, target out).
        nonnegative: score forecasts clipped at 0 on the original scale, as a
            ``Forecaster(nonnegative=True)`` forecasts (needs ``scaler``).
    """
    device = torch.device(device) if device is not None else model_device(model)
    quantile_model = isinstance(model, QuantileForecastModel)
    was_training = model.training
    model.eval()
    errors = ErrorAccumulator(scaler)
    floor = None
    if nonnegative:  # raw >= 0 is z >= -mean / scale, per scored column
        floor = torch.as_tensor(-np.asarray(scaler.mean_) / np.asarray(scaler.scale_), dtype=torch.float32, device=device)
    try:
        for batch in loader:
            marks = batch.get("x_mark")
            pred = model(batch["x"].to(device), marks.to(device) if marks is not None else None,
                         Covariates.from_batch(batch, device))
            if quantile_model:
                pred = model.median(pred)  # MSE/MAE are point metrics
            true = batch["y"]
            if target_only:
                pred, true = pred[..., -1:], true[..., -1:]
            if floor is not None:
                pred = torch.maximum(pred.float(), floor)
            errors.update(pred.float(), true)
    finally:
        model.train(was_training)
    if errors.windows == 0:
        raise ValueError("the evaluation loader yielded no batches")
    return errors


def summary(errors: ErrorAccumulator) -> dict:
    """``mse``, ``mae`` (z-scale), ``mse_inverse``, ``mae_inverse`` (original scale), ``windows``."""
    computed = errors.compute()
    result = {"mse": computed["mse"], "mae": computed["mae"], "windows": computed["windows"]}
    if "raw_mse" in computed:
        result["mse_inverse"] = computed["raw_mse"]
        result["mae_inverse"] = computed["raw_mae"]
    return result


def breakdowns(errors: ErrorAccumulator, columns: Sequence[str]) -> tuple[dict, dict]:
    """Per-horizon-step and per-variate tables (column name -> list), inverse metrics included."""
    computed = errors.compute()
    per_step = {"step": list(range(1, len(computed["mse_per_horizon"]) + 1))}
    per_variate = {"variate": list(columns)}
    for key, name in (("mse", "mse"), ("mae", "mae"), ("raw_mse", "mse_inverse"), ("raw_mae", "mae_inverse")):
        if key in computed:
            per_step[name] = computed[f"{key}_per_horizon"].tolist()
            per_variate[name] = computed[f"{key}_per_variate"].tolist()
    return per_step, per_variate


def split_loader(series, split: str, batch_size: int = 256):
    """Every window of ``split`` in order, nothing dropped, as gathered dict batches."""
    dataset = series.windows(split)
    order = BatchSampler(SequentialSampler(dataset), batch_size, drop_last=False)
    return DataLoader(dataset, batch_sampler=order, collate_fn=keep_batch)


def scored_scaler(series):
    """The scaler of the columns that are scored: the target alone in ``MS`` mode."""
    return series.scaler.select([-1]) if series.target_only else series.scaler


def scored_columns(series) -> list[str]:
    return list(series.columns[scored_slice(series.features)])
