"""Forecasting with a fitted model, apart from how it was trained.

* :class:`Predictor` (``predictor.py``): the saved scaler, the time-mark convention and the model:
  raw histories ``[B, L, C]`` in, raw forecasts ``[B, H, C_out]`` (and quantiles) with their
  timestamps out. ``Predictor.load(directory)`` reads a saved model directory.
* ``history.py``: new input read the way the fit input was read (layout, columns, frequency).
* ``output.py``: forecast arrays written back in the input's kind (wide, long, NumPy).
* :func:`predict` (``predict.py``) and :func:`backtest` (``backtest.py``): the two put together.
* :func:`cross_validation` (``cross_validation.py``): backtest windows, retraining on the rows
  before each cutoff (every window or every k-th) with a training function it is given.

``damcha_ts.Forecaster`` and ``damcha-ts predict`` are built on these; none of them imports torch
until a forecast is computed.
"""

from __future__ import annotations

from damcha_ts.forecasting.backtest import backtest
from damcha_ts.forecasting.cross_validation import cross_validation
from damcha_ts.forecasting.predict import predict
from damcha_ts.forecasting.predictor import Forecast, Predictor

__all__ = ["Forecast", "Predictor", "backtest", "cross_validation", "predict"]
