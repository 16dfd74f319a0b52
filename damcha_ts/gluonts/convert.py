"""Turn a fitted ``damcha_ts.Forecaster`` into a GluonTS predictor (same weights, same forecasts)."""

from __future__ import annotations

import re
import warnings

import pandas as pd
from gluonts.torch.model.predictor import PyTorchPredictor

from damcha_ts.data.protocol import scored_slice
from damcha_ts.errors import ConfigError
from damcha_ts.gluonts.estimator import DAMCHAEstimator
from damcha_ts.gluonts.lightning_module import DAMCHALightningModule
from damcha_ts.training.config import TrainingConfig


def predictor_from_forecaster(forecaster, batch_size: int = TrainingConfig.batch_size) -> PyTorchPredictor:
    """A ``PyTorchPredictor`` that computes exactly what ``forecaster.predict`` does.

    It carries the forecaster's weights, its train-split standardisation (mean and scale per
    variate) and its time-mark convention, so GluonTS tooling (``evaluate_model``, rolling
    ``split`` windows, ``serialize``) can be used on a model trained with ``Forecaster.fit`` or
    ``damcha-ts fit``. Feed it entries whose target rows are the forecaster's columns, in order
    (``PandasDataset(frame[forecaster.meta_.columns], target=...)``). ``forecaster`` may also be a
    :class:`damcha_ts.forecasting.Predictor` (e.g. ``Predictor.load(model_dir)``).
    """
    if getattr(forecaster, "is_fitted", True) is False:
        raise ConfigError("predictor_from_forecaster: the forecaster is not fitted; call fit(data) or Forecaster.load first")
    predictor = getattr(forecaster, "predictor", forecaster)  # the model, its scaler and time marks
    meta = predictor.meta
    if scored_slice(meta.features) != slice(None):
        raise ConfigError(
            "predictor_from_forecaster: features='MS' models forecast only the target from all variates; "
            "GluonTS forecasts have one row per target variate. Use features='M' or 'S'."
        )
    hyperparameters = {key: value for key, value in predictor.model.config.__dict__.items()
                       if key not in ("seq_len", "pred_len")}
    estimator = DAMCHAEstimator(
        prediction_length=predictor.horizon, context_length=predictor.lookback, model=predictor.model.name,
        hyperparameters=hyperparameters, quantiles=predictor.quantiles, batch_size=batch_size,
        # The Predictor's marks: the data's own frequency unless a convention ("h") was recorded.
        time_features_freq=meta.time_features_freq or meta.freq,
    )
    if estimator.uses_time_marks and not _stamped_at_period_start(meta.freq):
        warnings.warn(
            f"predictor_from_forecaster: the forecaster's data ({meta.freq!r}) is stamped at the end of "
            "each period, and GluonTS keeps periods and computes time marks at their start, so the "
            "predictor's marks are shifted by that offset and its forecasts differ slightly from "
            "forecaster.predict",
            stacklevel=2,
        )
    module = DAMCHALightningModule(model_config=estimator.model_config, quantiles=estimator.quantiles,
                                   target_mean=list(meta.scaler_mean), target_scale=list(meta.scaler_scale))
    module.model.load_state_dict(predictor.model.state_dict())
    return estimator.create_predictor(estimator.create_transformation(), module.eval())


def _stamped_at_period_start(freq: str) -> bool:
    """Whether timestamps on this frequency's grid are the starts of their GluonTS periods (hourly,
    daily: yes; weekly W-SUN or month-end ME, whose dates fall on a period's last day: no)."""
    offset = pd.tseries.frequencies.to_offset(freq)
    on_grid = offset.rollforward(pd.Timestamp("2001-03-07"))
    # Period frequencies drop the "end" suffix of offsets: ME -> M, QE-DEC -> Q-DEC, YE -> Y.
    for period_freq in (offset.freqstr, re.sub(r"E(?=$|-)", "", offset.freqstr)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # Period with a BDay freq
                return pd.Period(on_grid, freq=period_freq).start_time == on_grid
        except ValueError:
            continue
    return True  # no period form at all (e.g. "MS"): GluonTS itself refuses such data
