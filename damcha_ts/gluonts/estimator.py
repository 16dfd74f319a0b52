"""``DAMCHAEstimator``: our iTransformer/Gateformer models (MHA or DAMCHA) as a GluonTS estimator.

One dataset entry is one multivariate series with a 2-D target (N variates, T steps). The pipeline:

    SelectFields -> RequireMultivariateTarget -> AsNumpyArray(float32, 2-D)
    -> AddObservedValuesIndicator (NaNs forward-filled per variate; the loss skips them)
    -> [AddTimeMarks, if the model reads marks] -> InstanceSplitter(past L, future H: [L, N] / [H, N])
    -> FillContextPadding (a context shorter than L is padded flat, not with zeros)

Scaling. The models normalise every window per variate themselves (instance normalisation) and
de-normalise their output, so they would run on raw values. By default (``standardize=True``) the
module still standardises each variate with a mean and standard deviation fitted on the training
data, as the benchmark protocol's StandardScaler does, because the *loss* is computed on the scale
the model works on: on raw values, variates with large units would dominate the MSE or pinball loss
(Weather's radiation in W/m² against rain in mm). It also makes a model trained here and one trained
by ``damcha_ts.training`` / ``Forecaster`` the same computation. ``standardize=False`` keeps raw
values, and the predictor then accepts any number of variates (one N per call, or batch_size=1:
entries of different N cannot share a batch).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch
from gluonts.core.component import validated
from gluonts.dataset.common import Dataset
from gluonts.dataset.field_names import FieldName
from gluonts.dataset.loader import as_stacked_batches
from gluonts.itertools import Cyclic
from gluonts.model.forecast_generator import QuantileForecastGenerator, SampleForecastGenerator
from gluonts.torch.model.estimator import PyTorchLightningEstimator
from gluonts.torch.model.predictor import PyTorchPredictor
from gluonts.transform import (
    AddObservedValuesIndicator,
    AsNumpyArray,
    ExpectedNumInstanceSampler,
    InstanceSplitter,
    RenameFields,
    SelectFields,
    TestSplitSampler,
    Transformation,
    ValidationSplitSampler,
)

from damcha_ts.data.options import ProtocolOptions
from damcha_ts.data.protocol import time_features
from damcha_ts.errors import ConfigError, DataError, plain_repr
from damcha_ts.gluonts.lightning_module import COVARIATE_FIELDS, KNOWN_COVARIATES, DAMCHALightningModule, input_names
from damcha_ts.gluonts.transform import (
    TIME_MARKS,
    AddTimeMarks,
    FillContextPadding,
    ForwardFillImputation,
    RequireCovariates,
    RequireMultivariateTarget,
)
from damcha_ts.models import MODEL_NAMES, make_config
from damcha_ts.models.registry import VARIANT_NAMES, known_model_name
from damcha_ts.models.quantiles import validate_quantiles
from damcha_ts.training.config import TrainingConfig

PAST_TARGET = "past_target"
TRAINING_FIELDS = ["future_target", "future_observed_values"]
# GluonTS estimators train for 100 epochs of ``num_batches_per_epoch`` batches unless told otherwise.
DEFAULT_TRAINER_KWARGS = {"max_epochs": 100}


class DAMCHAEstimator(PyTorchLightningEstimator):
    """Train an iTransformer- or Gateformer-style model, with MHA or DAMCHA attention, in GluonTS.

    Args:
        prediction_length: horizon H.
        context_length: lookback L (the model's ``seq_len``); 96 as in the benchmark protocol.
        model: one of ``damcha_ts.models.MODEL_NAMES``, or a variant of ``VARIANT_NAMES``.
        hyperparameters: further ``build_model`` keys (``d_model``, ``e_layers``, ``n_heads``, ...);
            ``seq_len``/``pred_len`` come from the two lengths above.
        quantiles: quantile levels for a probabilistic forecast (0.5 is always added; the predictor
            returns ``QuantileForecast`` with these keys plus ``"mean"``); None (default) for a point
            forecast trained with MSE (``SampleForecast`` with one sample).
        lr, weight_decay, batch_size: AdamW's rate and (decoupled) decay, and windows per batch for
            training and prediction; defaults from ``damcha_ts.training.config.TrainingConfig``.
        num_batches_per_epoch: an "epoch" is this many batches of a cyclic, randomly windowed stream.
        trainer_kwargs: passed to ``lightning.pytorch.Trainer`` over ``{"max_epochs": 100}``.
        time_features_freq: time marks for models that read them (iTransformer's ``use_time_marks``),
            as in ``damcha_ts.data.prepare``: ``"h"`` (benchmark convention, 4 marks) or None for the
            series' own frequency.
        standardize: fit a per-variate mean and standard deviation on the training data and train
            on that scale (see the module docstring); the predictor then needs the same N variates.
        num_feat_dynamic_real: covariates known in advance, GluonTS's ``feat_dynamic_real`` [F, T]
            (the model's future covariates: at prediction time the field spans T + H steps).
        num_past_feat_dynamic_real: covariates observed up to the forecast start,
            ``past_feat_dynamic_real`` [P, T] (past covariates).
        num_feat_static_real: per-entry constants, ``feat_static_real`` [S] (static covariates).
            Covariates are standardised with statistics of the training data (as the target) and
            never forecast; every entry must carry each field the model reads, with these counts.
    """

    @validated()
    def __init__(
        self,
        prediction_length: int,
        context_length: int = ProtocolOptions.seq_len,
        model: str = "itransformer_damcha",
        hyperparameters: dict[str, Any] | None = None,
        quantiles: list[float] | None = None,
        lr: float = TrainingConfig.learning_rate,
        weight_decay: float = TrainingConfig.weight_decay,
        batch_size: int = TrainingConfig.batch_size,
        num_batches_per_epoch: int = 50,
        trainer_kwargs: dict[str, Any] | None = None,
        time_features_freq: str | None = ProtocolOptions.time_features_freq,
        standardize: bool = True,
        num_feat_dynamic_real: int = 0,
        num_past_feat_dynamic_real: int = 0,
        num_feat_static_real: int = 0,
    ) -> None:
        super().__init__(trainer_kwargs={**DEFAULT_TRAINER_KWARGS, **(trainer_kwargs or {})})
        self.covariate_counts = {"feat_dynamic_real": num_feat_dynamic_real,
                                 "past_feat_dynamic_real": num_past_feat_dynamic_real,
                                 "feat_static_real": num_feat_static_real}
        check_arguments(model, {"prediction_length": prediction_length, "context_length": context_length,
                                "batch_size": batch_size, "num_batches_per_epoch": num_batches_per_epoch},
                        lr, weight_decay, time_features_freq, self.covariate_counts)
        self.prediction_length, self.context_length = prediction_length, context_length
        self.model_config = model_config(model, hyperparameters, self.covariate_counts, context_length,
                                         prediction_length)
        # Bad hyperparameters fail here, naming the key, rather than when training starts.
        self.uses_time_marks = bool(getattr(make_config(self.model_config), "use_time_marks", False))
        self.quantiles = None if quantiles is None else list(validate_quantiles(quantiles))
        self.lr, self.weight_decay, self.batch_size = lr, weight_decay, batch_size
        self.num_batches_per_epoch, self.time_features_freq = num_batches_per_epoch, time_features_freq
        self.standardize = standardize
        # (mean, scale) fitted by train_model; the module is built after it, from these values.
        self._target_statistics: tuple[list[float], list[float]] | None = None
        self._covariate_statistics: dict[str, list[list[float]]] | None = None

    def train_model(self, training_data: Dataset, validation_data: Dataset | None = None, **kwargs):
        """``PyTorchLightningEstimator.train_model``, after checking that the data yields windows and
        fitting the standardisation on ``training_data``."""
        # Without these checks GluonTS fails with "Reached maximum number of idle transformation
        # calls" (no training window), or trains without validation, silently.
        statistics = target_statistics(training_data)
        needed = self.context_length + self.prediction_length
        if statistics.longest < needed:
            raise DataError(
                f"training_data: the longest entry has {statistics.longest} steps, and a training window "
                f"needs context_length + prediction_length = {needed}; give longer series or "
                "shorten those lengths (entries shorter than that are never sampled for training)"
            )
        if validation_data is not None:
            longest = max((np.shape(entry[FieldName.TARGET])[-1] for entry in validation_data), default=0)
            if longest < self.prediction_length:
                raise DataError(
                    f"validation_data: the longest entry has {longest} steps, fewer than "
                    f"prediction_length = {self.prediction_length}, so it has no validation window"
                )
        self._target_statistics = (statistics.mean, statistics.scale) if self.standardize else None
        self._covariate_statistics = {}
        for field in self._covariate_fields():  # scaled like the target, always: their units are arbitrary
            fitted = target_statistics(training_data, field=field, rows=self.covariate_counts[field])
            self._covariate_statistics[field] = [fitted.mean, fitted.scale]
        return super().train_model(training_data, validation_data, **kwargs)

    def _covariate_fields(self) -> list[str]:
        return [field for field, count in self.covariate_counts.items() if count]

    # -- the five PyTorchLightningEstimator hooks --------------------------------------------

    def create_transformation(self) -> Transformation:
        covariates = self._covariate_fields()
        transformation = (
            SelectFields([FieldName.ITEM_ID, FieldName.INFO, FieldName.START, FieldName.TARGET, *covariates],
                         allow_missing=True)
            + RequireMultivariateTarget()
            + RequireCovariates({field: self.covariate_counts[field] for field in covariates}, self.prediction_length)
            # float32: PandasDataset keeps float64 columns, and the model's weights are float32.
            + AsNumpyArray(field=FieldName.TARGET, expected_ndim=2)
            + AddObservedValuesIndicator(
                target_field=FieldName.TARGET,
                output_field=FieldName.OBSERVED_VALUES,
                imputation_method=ForwardFillImputation(),
            )
        )
        for field in covariates:
            transformation += AsNumpyArray(field=field, expected_ndim=1 if field == FieldName.FEAT_STATIC_REAL else 2)
        if FieldName.FEAT_DYNAMIC_REAL in covariates:
            transformation += RenameFields({FieldName.FEAT_DYNAMIC_REAL: KNOWN_COVARIATES})
        return transformation

    def create_lightning_module(self) -> DAMCHALightningModule:
        if self.standardize and self._target_statistics is None:
            raise ConfigError("standardize=True: the module is built by train() (which fits the standardisation)")
        mean, scale = self._target_statistics if self.standardize else (None, None)
        return DAMCHALightningModule(model_config=self.model_config, quantiles=self.quantiles, lr=self.lr,
                                     weight_decay=self.weight_decay, target_mean=mean, target_scale=scale,
                                     covariate_statistics=self._covariate_statistics or None)

    def create_training_data_loader(
        self, data: Dataset, module: DAMCHALightningModule, shuffle_buffer_length: int | None = None, **kwargs
    ) -> Iterable:
        instances = self._window_transform("training").apply(Cyclic(data).stream(), is_train=True)
        return self._training_batches(instances, shuffle_buffer_length=shuffle_buffer_length,
                                      num_batches_per_epoch=self.num_batches_per_epoch)

    def create_validation_data_loader(self, data: Dataset, module: DAMCHALightningModule, **kwargs) -> Iterable:
        return self._training_batches(self._window_transform("validation").apply(data, is_train=True))

    def create_predictor(self, transformation: Transformation, module: DAMCHALightningModule) -> PyTorchPredictor:
        if module.quantiles is None:
            generator = SampleForecastGenerator()
        else:
            # Keys in the order of the network's last axis: the levels, then the mean estimate.
            generator = QuantileForecastGenerator(quantiles=[str(q) for q in module.quantiles] + ["mean"])
        return PyTorchPredictor(input_names=self._input_names(), prediction_net=module, batch_size=self.batch_size,
                                prediction_length=self.prediction_length, forecast_generator=generator, device="auto",
                                input_transform=transformation + self._window_transform("test"))

    # -- helpers ------------------------------------------------------------------------------

    def _input_names(self) -> list[str]:
        return input_names(self.uses_time_marks, self.covariate_counts)

    def _training_batches(self, instances, **options) -> Iterable:
        """Batches of training or validation windows: the inputs and the target with its mask."""
        return as_stacked_batches(instances, batch_size=self.batch_size, output_type=torch.tensor,
                                  field_names=self._input_names() + TRAINING_FIELDS, **options)

    def _window_transform(self, mode: str) -> Transformation:
        """Cut (context, horizon) windows, with their time marks if the model reads them."""
        sampler = {
            # One window per series per pass on average, at a uniformly random position with a full
            # context (as the protocol's windows; a zero-padded context would teach the model padding).
            "training": ExpectedNumInstanceSampler(num_instances=1.0, min_past=self.context_length,
                                                   min_future=self.prediction_length),
            # The last window of each validation series.
            "validation": ValidationSplitSampler(min_future=self.prediction_length),
            # The window that ends where the series ends: forecast what comes next.
            "test": TestSplitSampler(),
        }[mode]
        splitter = InstanceSplitter(
            target_field=FieldName.TARGET, is_pad_field=FieldName.IS_PAD, start_field=FieldName.START,
            forecast_start_field=FieldName.FORECAST_START, instance_sampler=sampler,
            past_length=self.context_length, future_length=self.prediction_length,
            time_series_fields=[FieldName.OBSERVED_VALUES] + ([TIME_MARKS] if self.uses_time_marks else [])
            + [KNOWN_COVARIATES if f == FieldName.FEAT_DYNAMIC_REAL else f
               for f in self._covariate_fields() if f != FieldName.FEAT_STATIC_REAL],
        )
        windows = splitter + FillContextPadding(self.uses_time_marks, self.time_features_freq)
        if self.uses_time_marks:
            return AddTimeMarks(time_features_freq=self.time_features_freq) + windows
        return windows


def check_arguments(model: str, positive: dict[str, int], lr: float, weight_decay: float,
                    time_features_freq: str | None, covariate_counts: dict[str, int]) -> None:
    """ConfigError naming the first bad ``DAMCHAEstimator`` argument (``positive``: name -> a count
    that must be >= 1; ``covariate_counts``: GluonTS field -> number of covariates)."""
    if not known_model_name(model):
        raise ConfigError(f"model={model!r} is not one of {list(MODEL_NAMES + VARIANT_NAMES)}")
    for name, value in positive.items():
        if value < 1:  # @validated() has already made it an int (pydantic truncates 2.7 to 2)
            raise ConfigError(f"{name} must be >= 1, got {value}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ConfigError(f"lr must be a finite number > 0, got {plain_repr(lr)}")
    if not (isinstance(weight_decay, (int, float)) and math.isfinite(weight_decay) and weight_decay >= 0):
        raise ConfigError(f"weight_decay must be a finite number >= 0, got {plain_repr(weight_decay)}")
    if time_features_freq is not None:
        time_features(pd.DatetimeIndex([]), time_features_freq)  # names the argument if unknown
    for field, count in covariate_counts.items():
        if count < 0:
            raise ConfigError(f"num_{field}={count}: expected a number of covariates >= 0")


def model_config(model: str, hyperparameters: dict[str, Any] | None, covariate_counts: dict[str, int],
                 context_length: int, prediction_length: int) -> dict:
    """The ``build_model`` config of an estimator: its model name and hyperparameters, the covariate
    counts of its GluonTS fields and the two lengths; ConfigError for a hyperparameter that one of
    the estimator's own arguments sets."""
    hyperparameters = dict(hyperparameters or {})
    counts = {f"{COVARIATE_FIELDS[field]}_covariates": n for field, n in covariate_counts.items()}
    for key in ("name", "seq_len", "pred_len"):
        if key in hyperparameters:
            raise ConfigError(
                f"hyperparameters[{key!r}] is set by DAMCHAEstimator from model=, context_length= and "
                "prediction_length=; remove it"
            )
    for key, count in counts.items():
        if hyperparameters.pop(key, count) != count:  # a complete model config carries 0s
            raise ConfigError(f"hyperparameters[{key!r}] is set by DAMCHAEstimator from the num_*_real "
                              "counts (num_feat_dynamic_real, num_past_feat_dynamic_real, num_feat_static_real)")
    counts = {key: n for key, n in counts.items() if n}  # a model without covariates hashes as before
    return {"name": model, **hyperparameters, **counts, "seq_len": context_length, "pred_len": prediction_length}


class TargetStatistics(NamedTuple):
    mean: list[float]  # [N] per variate
    scale: list[float]  # [N] population standard deviation, 1 where a variate has no spread
    longest: int  # steps in the longest entry


def target_statistics(dataset: Dataset, *, field: str = FieldName.TARGET, rows: int | None = None) -> TargetStatistics:
    """Per-variate mean and population standard deviation over all entries' targets (N, T), NaNs skipped;
    with ``field``, of another field of ``rows`` rows (covariates [F, T]; ``feat_static_real`` [S]:
    over the entries).

    Each entry's centred statistics are merged with Chan et al.'s pairwise update, which stays
    exact where ``E[x²] − E[x]²`` cancels (a level of 1e9 with a spread of 0.01). A variate with
    zero spread gets scale 1 (as scikit-learn's StandardScaler does). Every entry must have the
    same N: entries of different N could not share a batch.
    """
    count = mean = squares = None  # running count, mean and sum of squared deviations, [N] each
    longest = 0
    for entry in dataset:
        if field != FieldName.TARGET:
            target = np.asarray(entry[field], dtype=np.float64).reshape(rows, -1)
            target = target[:, : np.shape(entry[FieldName.TARGET])[-1]]  # training rows only, not a horizon beyond
        else:
            target = np.asarray(entry[FieldName.TARGET], dtype=np.float64)
        if target.ndim != 2:
            raise DataError(
                f"entry {entry.get(FieldName.ITEM_ID)!r}: target has shape {target.shape}; DAMCHAEstimator needs "
                "(N variates, T steps): use PandasDataset(wide_df, target=columns) or MultivariateGrouper"
            )
        if count is not None and target.shape[0] != count.shape[0]:
            raise DataError(
                f"entry {entry.get(FieldName.ITEM_ID)!r} has {target.shape[0]} variates, an earlier one "
                f"{count.shape[0]}; training needs the same variates in every entry (windows of different "
                "N cannot share a batch)"
            )
        longest = max(longest, target.shape[1])
        observed = np.isfinite(target)
        entry_count = observed.sum(axis=1).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            entry_mean = np.where(entry_count > 0, np.where(observed, target, 0.0).sum(axis=1) / entry_count, 0.0)
        entry_squares = (np.where(observed, target - entry_mean[:, None], 0.0) ** 2).sum(axis=1)
        if count is None:
            count, mean, squares = entry_count, entry_mean, entry_squares
            continue
        total = count + entry_count
        with np.errstate(invalid="ignore", divide="ignore"):
            weight = np.where(total > 0, entry_count / total, 0.0)
        delta = entry_mean - mean
        squares = squares + entry_squares + delta**2 * count * weight
        mean = mean + delta * weight
        count = total
    if count is None or (count == 0).any():
        raise DataError("the training data is empty, or a variate has no observed value: nothing to standardise on")
    scale = np.sqrt(squares / count)
    scale[scale == 0] = 1.0
    return TargetStatistics(mean.tolist(), scale.tolist(), longest)
