"""Quantile (probabilistic) forecasts on top of any damcha_ts point model: the quantile head.

``build_model(config, quantiles=...)`` (registry.py) wraps a point model in ``QuantileForecastModel``;
training (the pinball loss), forecasting (quantile columns) and GluonTS (the mean estimate) read the
levels with the functions here.

How it works, without a second model implementation:

* **One point model, H·Q outputs.** The point model is built by ``build_model`` with
  ``pred_len = H·Q`` and its output ``[B, H·Q, N]`` is read as ``[B, Q, H, N]``: one horizon per
  quantile level. Our models de-normalise their output per variate as ``out·σ + μ`` with ``σ > 0``
  (instance normalisation, ``use_norm``). That map is affine and increasing, so it is applied
  correctly to every quantile (the τ-quantile of ``σ·Z + μ`` is ``σ·q_τ(Z) + μ``).
* **Monotone quantiles by rearrangement.** The Q outputs of each (step, variate) are sorted along
  the quantile axis, at training and at prediction time (Chernozhukov, Fernández-Val & Galichon,
  "Quantile and probability curves without crossing", Econometrica 2010: sorting never moves the
  curves further from the true ones). We sort rather than build quantiles from cumulative softplus
  increments because sorting commutes with the model's positive affine de-normalisation: the
  increments would be produced after de-normalisation, in data units, where a softplus is not
  scale-equivariant (and the de-normalisation would add μ to every increment).
* **Pinball loss** (quantile loss) ``ρ_τ(u) = max(τ·u, (τ−1)·u)`` with ``u = y − q̂_τ``, averaged over
  levels, steps, variates and the batch. With the single level 0.5 it equals half the MAE.
* **Median and mean.** The level 0.5 is always included, so the point forecast is the predicted
  median. The mean is estimated by integrating the predicted quantile function
  (``E[Y] = ∫₀¹ Q(u) du``), taken piecewise linear between levels and flat beyond the outermost ones
  (``quantile_mean_weights``). For a symmetric predictive distribution it equals the median.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import nn

from damcha_ts.errors import ConfigError, plain_repr

MEDIAN_LEVEL = 0.5

__all__ = [
    "MEDIAN_LEVEL", "QuantileForecastModel", "median_index", "pinball_loss", "quantile_column_name",
    "quantile_columns", "quantile_mean", "quantile_mean_weights", "validate_quantiles"
]


def validate_quantiles(quantiles: Sequence[float], *, argument: str = "quantiles") -> tuple[float, ...]:
    """Return the quantile levels sorted, de-duplicated and with the median 0.5 added.

    Every level must be a finite number strictly between 0 and 1; otherwise ``ConfigError`` names
    ``argument`` and the bad value.
    """
    if isinstance(quantiles, (str, bytes, Mapping)) or not isinstance(quantiles, Iterable):
        raise ConfigError(f"{argument} must be a sequence of levels in (0, 1), got {plain_repr(quantiles)}")
    quantiles = list(quantiles)  # also NumPy arrays and tuples
    if len(quantiles) == 0:
        raise ConfigError(f"{argument} must not be empty (give e.g. [0.1, 0.5, 0.9]; None means a point forecast)")
    levels = set()
    for level in quantiles:
        if isinstance(level, bool) or not isinstance(level, numbers.Real):
            raise ConfigError(f"{argument} holds {plain_repr(level)}, which is not a number")
        value = float(level)
        if not math.isfinite(value) or not 0.0 < value < 1.0:
            raise ConfigError(f"{argument} holds {plain_repr(level)}; every level must lie strictly between 0 and 1")
        levels.add(value)
    levels.add(MEDIAN_LEVEL)
    return tuple(sorted(levels))


def median_index(quantiles: Sequence[float]) -> int:
    """Position of the level 0.5 in validated ``quantiles``."""
    return list(quantiles).index(MEDIAN_LEVEL)


def quantile_column_name(column: str, level: float) -> str:
    """Name of the column holding quantile ``level`` of variate ``column``, e.g. ``OT_q0.1``."""
    return f"{column}_q{float(level):g}"


def quantile_columns(columns: Sequence[str], quantiles: Sequence[float], values) -> dict:
    """Name -> [H] array of every (variate, level) pair, for tables of forecasts.

    ``values`` is [Q, H, C] (levels in the order of ``quantiles``, variates in the order of
    ``columns``); names are ``quantile_column_name(column, level)``, variate-major
    (``a_q0.1, a_q0.5, a_q0.9, b_q0.1, ...``).
    """
    if len(values) != len(quantiles) or values[0].shape[-1] != len(columns):
        raise ConfigError(
            f"quantile_columns: values of shape {tuple(getattr(values, 'shape', ()))} do not match "
            f"{len(quantiles)} levels x {len(columns)} columns"
        )
    return {
        quantile_column_name(column, level): values[k][:, c]
        for c, column in enumerate(columns)
        for k, level in enumerate(quantiles)
    }


def quantile_mean_weights(quantiles: Sequence[float]) -> list[float]:
    """Weights w_k with ``mean ≈ Σ_k w_k · q_k`` for sorted levels τ_1 < … < τ_K.

    They integrate the quantile function Q(u) over u ∈ [0, 1] when Q is linear between the levels
    (trapezoid rule) and flat beyond them: Q(u) = q_1 for u < τ_1 and q_K for u > τ_K.
    The weights are positive and sum to 1, so the mean lies between q_1 and q_K.
    """
    levels = [float(q) for q in quantiles]
    if len(levels) == 1:
        return [1.0]
    weights = [0.0] * len(levels)
    weights[0] += levels[0]  # flat left tail
    weights[-1] += 1.0 - levels[-1]  # flat right tail
    for k in range(len(levels) - 1):
        half_gap = (levels[k + 1] - levels[k]) / 2.0  # trapezoid between neighbouring levels
        weights[k] += half_gap
        weights[k + 1] += half_gap
    return weights


def quantile_mean(quantile_values: torch.Tensor, quantiles: Sequence[float], dim: int = 1) -> torch.Tensor:
    """Mean estimate from quantile values along ``dim`` (see ``quantile_mean_weights``)."""
    weights = torch.tensor(quantile_mean_weights(quantiles), dtype=quantile_values.dtype, device=quantile_values.device)
    moved = quantile_values.movedim(dim, -1)
    return moved @ weights


def pinball_loss(
    prediction: torch.Tensor,
    target: torch.Tensor,
    quantiles: Sequence[float] | torch.Tensor,
    observed: torch.Tensor | None = None,
    *,
    reduction: str = "mean",
):
    """Mean pinball loss of quantile forecasts.

    prediction: [B, Q, H, N] quantile forecasts; target: [B, H, N]; quantiles: the Q levels;
    observed: optional [B, H, N] weights, 1 where the target is observed and 0 where it is missing.
    Returns a scalar: the mean over B, Q, H and N (observed entries only) of
    ρ_τ(y − q̂_τ) = max(τ·u, (τ−1)·u); with ``reduction="sum"``, ``(sum, count)`` of those terms
    instead (for exact means over many batches).
    """
    if reduction not in ("mean", "sum"):
        raise ConfigError(f"pinball_loss: reduction must be 'mean' or 'sum', got {reduction!r}")
    if prediction.dim() != target.dim() + 1:
        raise ConfigError(
            f"pinball_loss expects prediction [B, Q, H, N] and target [B, H, N], got shapes "
            f"{tuple(prediction.shape)} and {tuple(target.shape)}"
        )
    levels = torch.as_tensor(quantiles, dtype=prediction.dtype, device=prediction.device)
    if levels.numel() != prediction.shape[1]:
        raise ConfigError(f"pinball_loss got {levels.numel()} levels for {prediction.shape[1]} quantile outputs")
    levels = levels.view(1, -1, *([1] * (prediction.dim() - 2)))  # [1, Q, 1, 1]
    error = target.unsqueeze(1) - prediction  # u = y − q̂, [B, Q, H, N]
    losses = torch.maximum(levels * error, (levels - 1.0) * error)
    if observed is None:
        return losses.mean() if reduction == "mean" else (losses.sum(), losses.numel())
    weights = observed.unsqueeze(1).expand_as(losses)
    if reduction == "sum":
        return (losses * weights).sum(), weights.sum()
    return (losses * weights).sum() / weights.sum().clamp_min(1.0)


class QuantileForecastModel(nn.Module):
    """A point model with Q outputs per step and variate, read as monotone quantiles.

    Input ``x`` [B, L, N] and optional time marks ``x_mark`` [B, L, M], as for the point model;
    output [B, Q, H, N], sorted along Q (index k holds level ``quantiles[k]``).

    ``point_model`` must have been built with ``pred_len = H·Q``; ``build_model(config,
    quantiles=...)`` builds and wraps it.
    """

    def __init__(self, point_model, quantiles: Sequence[float]):
        super().__init__()
        levels = tuple(float(q) for q in quantiles)  # checked by its callers; here only that they were
        if list(levels) != sorted(set(levels)) or MEDIAN_LEVEL not in levels:
            raise ConfigError(
                f"QuantileForecastModel needs validated levels (sorted, unique, with 0.5): got {list(quantiles)}; "
                "use validate_quantiles() or build_model(config, quantiles=...)"
            )
        total_steps = int(point_model.config.pred_len)
        if total_steps % len(levels) != 0:
            raise ConfigError(
                f"point model pred_len={total_steps} is not a multiple of the {len(levels)} quantile levels"
            )
        self.point_model = point_model
        self.quantiles = levels
        self.horizon = total_steps // len(levels)

    @property
    def config(self):
        """The point model's config dataclass (its ``pred_len`` is H·Q, not H; see ``horizon``)."""
        return self.point_model.config

    @property
    def name(self) -> str:
        """The point model's registry name (``itransformer_damcha``, ...)."""
        return self.point_model.name

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None, covariates=None) -> torch.Tensor:
        """x: [B, L, N], x_mark: [B, L, M] or None, covariates (future ones [B, L + H, F]) -> [B, Q, H, N]."""
        if covariates is not None and covariates.future is not None:
            # The point model forecasts Q level blocks of H steps: each block reads the same H
            # horizon values of the future covariates, so they are tiled once per level.
            future, lookback = covariates.future, x.shape[1]
            if future.shape[1] != lookback + self.horizon:
                raise ConfigError(f"future covariates of shape {list(future.shape)}; this quantile model reads "
                                  f"[B, {lookback + self.horizon}, F] (lookback and horizon)")
            tiled = torch.cat([future[:, :lookback], future[:, lookback:].repeat(1, len(self.quantiles), 1)], dim=1)
            covariates = dataclasses.replace(covariates, future=tiled)
        stacked = self.point_model(x, x_mark, covariates)  # [B, Q·H, N]: level-major blocks of H steps
        per_level = stacked.unflatten(1, (len(self.quantiles), self.horizon))  # [B, Q, H, N]
        # Monotone rearrangement (see module docstring); gradients flow to whichever output got each rank.
        return per_level.sort(dim=1).values

    def median(self, quantile_forecast: torch.Tensor) -> torch.Tensor:
        """[B, Q, H, N] -> the predicted median [B, H, N] (the point forecast)."""
        return quantile_forecast[:, median_index(self.quantiles)]

    def parameter_groups(
        self, learning_rate: float, weight_decay: float = 0.0, compact_lr_scale: float | None = None,
        gate_lr_scale: float | None = None,
    ) -> list[dict]:
        """The point model's optimiser groups (keeps DAMCHA's compact-generator lr/wd scaling)."""
        return self.point_model.parameter_groups(learning_rate, weight_decay, compact_lr_scale, gate_lr_scale)
