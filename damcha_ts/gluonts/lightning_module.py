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
from damcha_ts.gluonts.transform import PAST_TIME_MARKS
from damcha_ts.models.base import Covariates
from damcha_ts.models.quantiles import quantile_mean
from damcha_ts.training.config import TrainingConfig
from damcha_ts.training.module import ForecastModule

#: GluonTS's covariate fields -> our covariate kinds (docs/ecosystem.md): known-in-advance
#: ``feat_dynamic_real`` is a future covariate, ``past_feat_dynamic_real`` a past one,
#: ``feat_static_real`` a static one.
COVARIATE_FIELDS = {"feat_dynamic_real": "future", "past_feat_dynamic_real": "past", "feat_static_real": "static"}
#: ``feat_dynamic_real`` is renamed to this before the InstanceSplitter: split as it is, its
#: ``past_feat_dynamic_real`` piece would overwrite the past-covariate field of that name.
KNOWN_COVARIATES = "known_covariates"


def input_names(uses_time_marks: bool, counts: dict[str, int]) -> list[str]:
    """The network's inputs, in ``forward``'s order, after GluonTS's InstanceSplitter: the target's
    context, its time marks when the model reads them, then the covariate fields the model has
    (``counts``: field -> number of covariates)."""
    names = ["past_target", *([PAST_TIME_MARKS] if uses_time_marks else [])]
    if counts.get("feat_dynamic_real"):
        names += [f"past_{KNOWN_COVARIATES}", f"future_{KNOWN_COVARIATES}"]
    if counts.get("past_feat_dynamic_real"):
        names.append("past_past_feat_dynamic_real")
    if counts.get("feat_static_real"):
        names.append("feat_static_real")
    return names


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

        covariate_statistics: ``{field: [mean, scale]}`` per covariate of each GluonTS covariate
            field the model reads (:data:`COVARIATE_FIELDS`), fitted on the training data; the
            model sees them standardised as the target. None: no covariates.

    Batches hold ``past_target`` [B, L, N], ``future_target`` [B, H, N],
    ``future_observed_values`` [B, H, N] (0 where the target was NaN: the loss skips those),
    when the model reads time marks, ``past_time_marks`` [B, L, M], and the covariates:
    ``past_known_covariates`` [B, L, F] with ``future_known_covariates`` [B, H, F] (GluonTS's
    ``feat_dynamic_real``, renamed),
    ``past_past_feat_dynamic_real`` [B, L, P], ``feat_static_real`` [B, S].
    """

    # GluonTS draws its training windows from NumPy's global RNG as one cyclic stream: re-seeding
    # it every epoch, as the trainer's exact resume does, would change which windows are drawn.
    reseed_each_epoch = False

    @validated()
    def __init__(
        self,
        model_config: dict[str, Any],
        quantiles: list[float] | None = None,
        lr: float = TrainingConfig.learning_rate,
        weight_decay: float = TrainingConfig.weight_decay,
        target_mean: list[float] | None = None,
        target_scale: list[float] | None = None,
        covariate_statistics: dict[str, list[list[float]]] | None = None,
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
        statistics = dict(covariate_statistics or {})
        unknown = sorted(set(statistics) - set(COVARIATE_FIELDS))
        if unknown:
            raise ConfigError(f"covariate_statistics: unknown fields {unknown}; expected some of {list(COVARIATE_FIELDS)}")
        for field, (mean, scale) in statistics.items():
            if len(mean) != len(scale) or min(scale, default=1.0) <= 0:
                raise ConfigError(f"covariate_statistics[{field!r}]: one mean and one positive scale per covariate")
            counted = getattr(self._model_config(), f"{COVARIATE_FIELDS[field]}_covariates")
            if counted != len(mean):
                raise ConfigError(f"covariate_statistics[{field!r}] has {len(mean)} covariates; the model reads {counted}")
            self.register_buffer(f"{field}_mean", torch.tensor(mean, dtype=torch.float32), persistent=False)
            self.register_buffer(f"{field}_scale", torch.tensor(scale, dtype=torch.float32), persistent=False)
        self.covariate_fields = sorted(statistics)

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

    def _model_config(self):
        return getattr(self.model, "point_model", self.model).config  # a quantile model wraps its point model

    def _covariates(self, batch: dict):
        """GluonTS's covariate fields of a batch, standardised, as the model's ``Covariates``."""
        if not self.covariate_fields:
            return None

        def scaled(field: str, values: torch.Tensor) -> torch.Tensor:
            return (values - getattr(self, f"{field}_mean")) / getattr(self, f"{field}_scale")

        given = {}
        if "feat_dynamic_real" in self.covariate_fields:  # known in advance: lookback and horizon
            given["future"] = scaled("feat_dynamic_real", torch.cat(
                [batch[f"past_{KNOWN_COVARIATES}"], batch[f"future_{KNOWN_COVARIATES}"]], dim=1))
        if "past_feat_dynamic_real" in self.covariate_fields:
            given["past"] = scaled("past_feat_dynamic_real", batch["past_past_feat_dynamic_real"])
        if "feat_static_real" in self.covariate_fields:
            given["static"] = scaled("feat_static_real", batch["feat_static_real"])
        return Covariates(**{kind: value.float() for kind, value in given.items()})

    def _batch(self, batch: dict):
        """GluonTS's keys -> ForecastModule's (x, x_mark, y, observed), standardised."""
        return (
            self._standardize(batch["past_target"]),
            batch.get("past_time_marks"),
            self._standardize(batch["future_target"]),
            batch["future_observed_values"],  # NaNs were imputed; they must not count
        )

    def forward(self, past_target: torch.Tensor, past_time_marks: torch.Tensor | None = None,
                past_known_covariates: torch.Tensor | None = None, future_known_covariates: torch.Tensor | None = None,
                past_past_feat_dynamic_real: torch.Tensor | None = None, feat_static_real: torch.Tensor | None = None):
        """What ``PyTorchPredictor`` hands to its forecast generator, on the data's scale; the
        inputs are those of :func:`input_names` (the predictor passes them by name).

        Point: samples [B, 1, H, N] for ``SampleForecastGenerator``. Quantiles: ``((values,), None,
        None)`` with values [B, H, N, Q+1] (the Q levels, then the mean estimate) for
        ``QuantileForecastGenerator``; loc/scale are None because the forecast is already rescaled.
        """
        covariates = self._covariates({
            f"past_{KNOWN_COVARIATES}": past_known_covariates, f"future_{KNOWN_COVARIATES}": future_known_covariates,
            "past_past_feat_dynamic_real": past_past_feat_dynamic_real, "feat_static_real": feat_static_real})
        forecast = self._destandardize(self.model(self._standardize(past_target), past_time_marks, covariates))
        if self.quantiles is None:
            return forecast.unsqueeze(1)
        mean = quantile_mean(forecast, self.quantiles, dim=1)  # [B, H, N]
        values = torch.cat([forecast, mean.unsqueeze(1)], dim=1)  # [B, Q+1, H, N]
        return (values.permute(0, 2, 3, 1),), None, None
