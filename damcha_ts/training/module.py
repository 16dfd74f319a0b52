"""One LightningModule for every forecasting model: MSE (or pinball) loss, Adam, per-group LR factors."""

from __future__ import annotations

import random
from collections.abc import Mapping

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F

from damcha_ts.models import build_model
from damcha_ts.probabilistic import build_quantile_model, pinball_loss
from damcha_ts.training.config import TrainingConfig
from damcha_ts.training.optim import TiedGradientClipping, adamw, lr_factor


class ForecastModule(TiedGradientClipping, L.LightningModule):
    """Trains any model of :func:`damcha_ts.models.build_model` on dict batches.

    Batches are ``{"x": [B, L, N], "y": [B, H, N], "x_mark": [B, L, M], "y_mark": [B, H, M]}``.
    The model maps (x, x_mark) to [B, H, N]; in the ``MS`` setting (``target_only``) the loss
    and metrics use the last variate only, as the reference code does.

    With ``training["quantiles"]`` set, the model is a
    :class:`damcha_ts.probabilistic.QuantileForecastModel` mapping (x, x_mark) to [B, Q, H, N], and
    the loss is the pinball loss instead of the MSE.

    Logged: ``train_loss`` (epoch mean), ``train_loss_step`` and ``val_loss`` every epoch. ``val_loss`` is the
    MSE (or mean pinball loss) over *all* validation windows (sum of losses / count, summed across DDP
    ranks), not a mean of per-batch means, which would over-weight a short last batch (protocol.md §1.5).
    """

    def __init__(self, model_config: Mapping, training: Mapping, target_only: bool = False):
        super().__init__()
        # Plain dicts, so checkpoints stay loadable with torch.load(weights_only=True).
        self.save_hyperparameters(
            {"model_config": dict(model_config), "training": dict(training), "target_only": target_only}
        )
        self.training_config = TrainingConfig.from_dict(training)
        self.quantiles = self.training_config.quantiles  # validated levels, or None
        if self.quantiles is None:
            self.model = build_model(dict(model_config))
        else:
            self.model = build_quantile_model(dict(model_config), self.quantiles)
        self.target_only = target_only
        self._val_sse = torch.zeros((), dtype=torch.float64)
        self._val_count = 0

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        """[B, L, N] (+ marks [B, L, M]) -> [B, H, N], or [B, Q, H, N] for a quantile model."""
        return self.model(x, x_mark)

    def _scored(self, pred: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Variates are the last axis of both [B, H, N] and [B, Q, H, N].
        if self.target_only:
            return pred[..., -1:], y[..., -1:]
        return pred, y

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        x, y = batch["x"], batch["y"]
        fraction = self.training_config.variate_fraction
        if fraction < 1.0 and not self.target_only:
            # Partial-variate training: one random subset of variates for the whole batch.
            n_variates = x.shape[-1]
            keep = max(1, round(fraction * n_variates))
            chosen = torch.randperm(n_variates, device=x.device)[:keep]
            x, y = x[..., chosen], y[..., chosen]
        pred, true = self._scored(self(x, batch.get("x_mark")), y)
        loss = self._loss(pred.float(), true)
        # The epoch mean is synced across DDP ranks once per epoch; the step value stays local.
        self.log("train_loss", loss, on_step=False, on_epoch=True, batch_size=x.shape[0], sync_dist=True)
        self.log("train_loss_step", loss, on_step=True, on_epoch=False, prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_sse = torch.zeros((), dtype=torch.float64, device=self.device)
        self._val_count = 0

    def _loss(self, pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
        """Mean MSE, or mean pinball loss over levels, steps, variates and the batch."""
        if self.quantiles is None:
            return F.mse_loss(pred, true)
        return pinball_loss(pred, true, self.quantiles)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        pred, true = self._scored(self(batch["x"], batch.get("x_mark")), batch["y"])
        # Sums and counts (not batch means), so val_loss is the mean over every window.
        if self.quantiles is None:
            self._val_sse = self._val_sse + (pred.double() - true.double()).square().sum()
            self._val_count += true.numel()
        else:
            self._val_sse = self._val_sse + pinball_loss(pred.double(), true.double(), self.quantiles) * pred.numel()
            self._val_count += pred.numel()

    def on_validation_epoch_end(self) -> None:
        totals = torch.stack([self._val_sse, torch.tensor(float(self._val_count), dtype=torch.float64, device=self.device)])
        if self.trainer.world_size > 1:
            totals = self.trainer.strategy.reduce(totals, reduce_op="sum")
        val_loss = (totals[0] / totals[1].clamp_min(1)).float()
        # Already summed over ranks, so every rank holds the same value (sync_dist averages equals).
        self.log("val_loss", val_loss, prog_bar=True, sync_dist=True)

    def configure_optimizers(self):
        config = self.training_config
        groups = self.model.parameter_groups(config.learning_rate, config.weight_decay, config.compact_lr_scale)
        optimizer = adamw(groups, config.learning_rate)
        # LambdaLR multiplies each group's *own* initial lr, keeping DAMCHA's group ratios.
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lr_factor(config.lr_schedule, config.max_epochs)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}

    # Exact resume. Lightning restores weights, optimizer, scheduler, loops and callbacks; two
    # sources of randomness it does not restore are handled here:
    # - dropout and partial-variate sampling draw from the global RNGs, which Lightning's loops
    #   also draw from at moments that differ between a fresh and a resumed run (loader set-up,
    #   sanity check). So every epoch re-seeds them from (seed, epoch) at its first batch;
    # - the train sampler's shuffling generator advances each epoch: its state is saved in the
    #   checkpoint (a tensor, so weights_only=True loading works) and set back before the first
    #   resumed epoch draws its order.
    def on_train_batch_start(self, batch: dict, batch_idx: int) -> None:
        if batch_idx == 0:
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
