"""The one LightningModule every training surface uses, and the one loss.

- :func:`forecast_loss`: MSE for a point forecast, pinball loss for quantiles, optionally over
  observed targets only, as a mean or as (sum, count) for exact means over many batches.
- :class:`ForecastModule`: model (``build_model(config, quantiles=...)``), loss, AdamW over the
  model's parameter groups with a per-epoch (or per-step) LR schedule, exact ``val_loss`` and exact resume. The
  damcha_ts trainer uses it as it is; the GluonTS estimator through a subclass that only maps
  GluonTS's batches and predictor output (:class:`damcha_ts.gluonts.DAMCHALightningModule`).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F

from damcha_ts.errors import ConfigError
from damcha_ts.models import build_model
from damcha_ts.models.base import Covariates
from damcha_ts.models.quantiles import pinball_loss
from damcha_ts.training.config import STEP_SCHEDULES, TrainingConfig
from damcha_ts.training.optim import TiedGradientClipping, adamw, lr_factor, warmup_cosine_factor


def forecast_loss(
    prediction: torch.Tensor,
    target: torch.Tensor,
    quantiles: Sequence[float] | None = None,
    observed: torch.Tensor | None = None,
    *,
    reduction: str = "mean",
):
    """The training loss of point and quantile forecasts.

    prediction: point [B, H, N] (MSE) or, with ``quantiles``, [B, Q, H, N] (pinball loss, see
    :func:`damcha_ts.models.quantiles.pinball_loss`); target: [B, H, N]; observed: optional [B, H, N]
    weights, 1 where the target is observed and 0 where it is missing (those do not count).
    ``reduction="mean"`` returns the mean over every counted element (and level); ``"sum"`` returns
    ``(sum, count)``, so that a mean over many batches is exact: Σ sums / Σ counts.
    """
    if quantiles is not None:
        return pinball_loss(prediction, target, quantiles, observed=observed, reduction=reduction)
    if reduction not in ("mean", "sum"):
        raise ConfigError(f"forecast_loss: reduction must be 'mean' or 'sum', got {reduction!r}")
    if prediction.shape != target.shape:
        raise ConfigError(
            f"forecast_loss expects a point prediction shaped as the target [B, H, N], got shapes "
            f"{tuple(prediction.shape)} and {tuple(target.shape)} (pass quantiles= for [B, Q, H, N])"
        )
    if observed is None:
        if reduction == "mean":
            return F.mse_loss(prediction, target)
        return (prediction - target).square().sum(), target.numel()
    squared = (prediction - target).square() * observed
    if reduction == "mean":
        return squared.sum() / observed.sum().clamp_min(1.0)
    return squared.sum(), observed.sum()


class ForecastModule(TiedGradientClipping, L.LightningModule):
    """Trains any model of :func:`damcha_ts.models.build_model` on dict batches.

    Batches are ``{"x": [B, L, N], "y": [B, H, N], "x_mark": [B, L, M], "y_mark": [B, H, M]}``.
    The model maps (x, x_mark) to [B, H, N]; in the ``MS`` setting (``target_only``) the loss
    and metrics use the last variate only, as the reference code does. A subclass reading other
    batches overrides :meth:`_batch` (the GluonTS module does).

    ``training`` is a :class:`TrainingConfig` or a mapping of its fields. With ``quantiles`` set,
    the model is a :class:`damcha_ts.models.quantiles.QuantileForecastModel` mapping (x, x_mark) to
    [B, Q, H, N], and the loss is the pinball loss instead of the MSE (:func:`forecast_loss`).
    The optimiser is AdamW over ``model.parameter_groups`` (DAMCHA's per-group LR factors), its
    rate scaled per epoch by ``training.lr_schedule`` (per optimiser step for ``warmup_cosine``).

    Logged: ``train_loss`` (epoch mean), ``train_loss_step`` and ``val_loss`` every epoch. ``val_loss`` is the
    loss over *all* validation windows (sum of losses / count, summed across DDP ranks), not a mean
    of per-batch means, which would over-weight a short last batch (protocol.md §1.5).
    """

    #: Re-seed the global RNGs from (seed, epoch) at every epoch's first batch (exact resume, below).
    reseed_each_epoch = True

    def __init__(self, model_config: Mapping, training: TrainingConfig | Mapping, target_only: bool = False):
        super().__init__()
        if isinstance(training, TrainingConfig):  # checked already (its quantiles too): not again
            config, training = training, dataclasses.asdict(training)
        else:  # a mapping, e.g. a checkpoint's hyperparameters
            config, training = TrainingConfig.from_dict(training), dict(training)
        # Plain dicts, so checkpoints stay loadable with torch.load(weights_only=True).
        self.save_hyperparameters({"model_config": dict(model_config), "training": training, "target_only": target_only})
        self.training_config = config
        self.quantiles = self.training_config.quantiles  # validated levels, or None
        self.model = build_model(dict(model_config), quantiles=self.quantiles)
        self.target_only = target_only
        self._val_sum = torch.zeros((), dtype=torch.float64)
        self._val_count = torch.zeros((), dtype=torch.float64)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None, covariates=None) -> torch.Tensor:
        """[B, L, N] (+ marks [B, L, M], covariates) -> [B, H, N], or [B, Q, H, N] for a quantile model."""
        return self.model(x, x_mark, covariates)

    def _network(self, x: torch.Tensor):
        """The model, or with ``training.compile`` its compiled form (built at the first batch, when the
        device is known; kept out of the module's children, so state dicts hold the model's keys only)."""
        if not self.training_config.compile:
            return self.model
        compiled = self.__dict__.get("_compiled_model")
        if compiled is None:
            mode = "reduce-overhead" if x.is_cuda else None
            compiled = torch.compile(self.model, mode=mode, dynamic=False)
            self.__dict__["_compiled_model"] = compiled
        return compiled

    @staticmethod
    def _covariates(batch: dict):
        """The batch's covariates (``past_covariates`` [B, L, P], ``future_covariates`` [B, L + H, F],
        ``static_covariates`` [B, S]) as a :class:`damcha_ts.models.base.Covariates`, or None."""
        return Covariates.from_batch(batch)

    def _batch(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
        """(x [B, L, N], x_mark [B, L, M] or None, y [B, H, N], observed [B, H, N] or None), on the
        scale the model works on; observed None: every target counts."""
        return batch["x"], batch.get("x_mark"), batch["y"], None

    def _scored(self, pred: torch.Tensor, y: torch.Tensor, observed: torch.Tensor | None):
        # Variates are the last axis of [B, H, N] and [B, Q, H, N] alike.
        if self.target_only:
            return pred[..., -1:], y[..., -1:], None if observed is None else observed[..., -1:]
        return pred, y, observed

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        x, x_mark, y, observed = self._batch(batch)
        fraction = self.training_config.variate_fraction
        if fraction < 1.0 and not self.target_only:
            # Partial-variate training: one random subset of variates for the whole batch.
            n_variates = x.shape[-1]
            keep = max(1, round(fraction * n_variates))
            chosen = torch.randperm(n_variates, device=x.device)[:keep]
            x, y = x[..., chosen], y[..., chosen]
            observed = None if observed is None else observed[..., chosen]
        pred, true, observed = self._scored(self._network(x)(x, x_mark, self._covariates(batch)), y, observed)
        loss = forecast_loss(pred.float(), true, self.quantiles, observed)
        # The epoch mean is synced across DDP ranks once per epoch; the step value stays local.
        self.log("train_loss", loss, on_step=False, on_epoch=True, batch_size=x.shape[0], sync_dist=True)
        self.log("train_loss_step", loss, on_step=True, on_epoch=False, prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self._val_count = torch.zeros((), dtype=torch.float64, device=self.device)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        x, x_mark, y, observed = self._batch(batch)
        pred, true, observed = self._scored(self._network(x)(x, x_mark, self._covariates(batch)), y, observed)
        # Sums and counts (not batch means), so val_loss is the mean over every window.
        total, count = forecast_loss(
            pred.double(), true.double(), self.quantiles, None if observed is None else observed.double(),
            reduction="sum",
        )
        self._val_sum = self._val_sum + total
        self._val_count = self._val_count + count

    def on_validation_epoch_end(self) -> None:
        totals = torch.stack([self._val_sum, self._val_count])
        if self.trainer.world_size > 1:
            totals = self.trainer.strategy.reduce(totals, reduce_op="sum")
        val_loss = (totals[0] / totals[1].clamp_min(1)).float()
        # Already summed over ranks, so every rank holds the same value (sync_dist averages equals).
        self.log("val_loss", val_loss, prog_bar=True, sync_dist=True)

    def configure_optimizers(self):
        config = self.training_config
        groups = self.model.parameter_groups(
            config.learning_rate, config.weight_decay, config.compact_lr_scale, config.gate_lr_scale
        )
        optimizer = adamw(groups, config.learning_rate)
        if config.lr_schedule in STEP_SCHEDULES:
            # The step budget, or the epochs' steps (Lightning counts them, limit_train_batches included).
            total = config.max_steps or self.trainer.estimated_stepping_batches
            if not math.isfinite(total):
                raise ConfigError("training.lr_schedule='warmup_cosine' needs training.max_steps when the "
                                  "training loader has no length (an endless loader)")
            total = int(total)
            factor, interval = warmup_cosine_factor(total, config.warmup_fraction, config.lr_floor), "step"
        else:
            factor, interval = lr_factor(config.lr_schedule, config.max_epochs), "epoch"
        # LambdaLR multiplies each group's *own* initial lr, keeping DAMCHA's group ratios.
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": interval}}

    # Exact resume. Lightning restores weights, optimizer, scheduler, loops and callbacks; two
    # sources of randomness it does not restore are handled here:
    # - dropout and partial-variate sampling draw from the global RNGs, which Lightning's loops
    #   also draw from at moments that differ between a fresh and a resumed run (loader set-up,
    #   sanity check). So every epoch re-seeds them from (seed, epoch) at its first batch
    #   (unless ``reseed_each_epoch`` is False);
    # - the train sampler's shuffling generator advances each epoch: its state is saved in the
    #   checkpoint (a tensor, so weights_only=True loading works) and set back before the first
    #   resumed epoch draws its order.
    def on_train_batch_start(self, batch: dict, batch_idx: int) -> None:
        if batch_idx == 0 and self.reseed_each_epoch:
            seed_epoch(self.training_config.seed, self.current_epoch)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        generator = _train_generator(self.trainer)
        if generator is not None:
            checkpoint["train_sampler_state"] = generator.get_state()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self._pending_sampler_state = checkpoint.get("train_sampler_state")

    def on_train_start(self) -> None:
        # Lightning restores EarlyStopping's counters but not trainer.should_stop, so a run resumed
        # from the checkpoint of the epoch that stopped it would train on.
        stopper = self.trainer.early_stopping_callback
        if stopper is not None and stopper.wait_count >= stopper.patience:
            self.trainer.should_stop = True

    def on_train_epoch_start(self) -> None:
        state, self._pending_sampler_state = getattr(self, "_pending_sampler_state", None), None
        generator = _train_generator(self.trainer)
        if state is not None and generator is not None:
            generator.set_state(state)


def seed_epoch(seed: int, epoch: int) -> None:
    """Seed torch, NumPy and Python RNGs from (seed, epoch): each epoch's draws depend on nothing else."""
    epoch_seed = (seed * 1_000_003 + epoch) % 2**32
    torch.manual_seed(epoch_seed)
    np.random.seed(epoch_seed)
    random.seed(epoch_seed)


def _train_generator(trainer) -> torch.Generator | None:
    """The torch.Generator that shuffles the training windows, if the sampler has one."""
    loader = getattr(trainer, "train_dataloader", None)
    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        generator = getattr(sampler, "generator", None)
        if isinstance(generator, torch.Generator):
            return generator
    return None
