"""The LightningModule GluonTS trains and serialises: the trainer's ``ForecastModule``, adapted.

Model, loss (:func:`damcha_ts.training.module.forecast_loss`), AdamW and ``val_loss`` are those of
:class:`damcha_ts.training.module.ForecastModule`; this subclass adds only what GluonTS needs: a
serialisable constructor, its batch keys and standardisation, and the output ``PyTorchPredictor``'s
forecast generators read.
"""

from __future__ import annotations

from typing import Any

import torch
from gluonts.core.component import validated

from damcha_ts.errors import ConfigError, DataError
from damcha_ts.probabilistic import quantile_mean
from damcha_ts.training.module import ForecastModule


class DAMCHALightningModule(ForecastModule):
    """``ForecastModule`` of ``build_model(model_config, quantiles=quantiles)`` (point: MSE; quantiles:
    pinball loss), trained with AdamW at a constant rate, on GluonTS batches.

    The constructor is ``@validated()``: ``PyTorchPredictor.serialize`` stores its arguments as JSON
    and rebuilds the module from them before loading the weights (``model.*``), so they are plain
    types only, and they stay these six for serialised predictors to load.

    Args:
        model_config: a ``damcha_ts.models.build_model`` config with ``name``, ``seq_len`` (the
            context length L) and ``pred_len`` (the horizon H).
        quantiles: quantile levels (0.5 is added), or None for a point forecast.
        lr: AdamW learning rate (the base rate of ``model.parameter_groups``).
        weight_decay: AdamW (decoupled) weight decay (base value of ``model.parameter_groups``).
        target_mean, target_scale: per-variate standardisation [N] fitted on the training data
            (as the protocol's StandardScaler), or None for none. The model sees (y − mean) / scale,
            the loss is computed on that scale, and forecasts are mapped back to the data's scale.

    Batches hold ``past_target`` [B, L, N], ``future_target`` [B, H, N],
    ``future_observed_values`` [B, H, N] (0 where the target was NaN: the loss skips those) and,
    when the model reads time marks, ``past_time_marks`` [B, L, M].
    """

    # GluonTS draws its training windows from NumPy's global RNG as one cyclic stream: re-seeding
    # it every epoch, as the trainer's exact resume does, would change which windows are drawn.
    reseed_each_epoch = False

    @validated()
    def __init__(
        self,
        model_config: dict[str, Any],
        quantiles: list[float] | None = None,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        target_mean: list[float] | None = None,
        target_scale: list[float] | None = None,
    ) -> None:
        if (target_mean is None) != (target_scale is None) or (
            target_mean is not None and len(target_mean) != len(target_scale)
        ):
            raise ConfigError("target_mean and target_scale must both be None or both list one value per variate")
        if target_scale is not None and min(target_scale) <= 0:
            raise ConfigError(f"target_scale must be positive, got {target_scale}")
        # GluonTS trains for the epochs its trainer_kwargs say, at the one rate lr.
        training = {"learning_rate": lr, "weight_decay": weight_decay, "quantiles": quantiles, "lr_schedule": "constant"}
        super().__init__(model_config, training)
        self.standardized = target_mean is not None
        # Buffers follow the module to its device; not persistent: they are constructor arguments.
        self.register_buffer("target_mean", torch.tensor(target_mean or [], dtype=torch.float32), persistent=False)
        self.register_buffer("target_scale", torch.tensor(target_scale or [], dtype=torch.float32), persistent=False)

    def _standardize(self, values: torch.Tensor) -> torch.Tensor:
        """[..., N] data scale -> the scale the model works on."""
        if not self.standardized:
            return values
        if values.shape[-1] != self.target_mean.numel():
            raise DataError(
                f"this model standardises the {self.target_mean.numel()} variates it was trained on; the target "
                f"has {values.shape[-1]}. Predict on the same variates, or train with standardize=False."
            )
        return (values - self.target_mean) / self.target_scale

    def _destandardize(self, values: torch.Tensor) -> torch.Tensor:
        """Inverse of ``_standardize``; [..., N], any leading axes (quantiles included: scale > 0)."""
        return values * self.target_scale + self.target_mean if self.standardized else values

    def _batch(self, batch: dict):
        """GluonTS's keys -> ForecastModule's (x, x_mark, y, observed), standardised."""
        return (
            self._standardize(batch["past_target"]),
            batch.get("past_time_marks"),
            self._standardize(batch["future_target"]),
            batch["future_observed_values"],  # NaNs were imputed; they must not count
        )

    def forward(self, past_target: torch.Tensor, past_time_marks: torch.Tensor | None = None):
        """What ``PyTorchPredictor`` hands to its forecast generator, on the data's scale.

        Point: samples [B, 1, H, N] for ``SampleForecastGenerator``. Quantiles: ``((values,), None,
        None)`` with values [B, H, N, Q+1] (the Q levels, then the mean estimate) for
        ``QuantileForecastGenerator``; loc/scale are None because the forecast is already rescaled.
        """
        forecast = self._destandardize(self.model(self._standardize(past_target), past_time_marks))
        if self.quantiles is None:
            return forecast.unsqueeze(1)
        mean = quantile_mean(forecast, self.quantiles, dim=1)  # [B, H, N]
        values = torch.cat([forecast, mean.unsqueeze(1)], dim=1)  # [B, Q+1, H, N]
        return (values.permute(0, 2, 3, 1),), None, None
