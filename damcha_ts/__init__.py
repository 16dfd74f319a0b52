"""damcha_ts: multivariate time-series forecasting with DAMCHA attention.

Data flows one way: ``damcha_ts.data`` (registry, protocol, windows) -> ``damcha_ts.models``
(attention inside) -> ``damcha_ts.training`` (Lightning) -> user surfaces (``api``, ``cli``,
``leaderboard``, ``tuning``, ``gluonts``). Heavy optional parts are imported where used, so
``import damcha_ts`` stays fast.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Forecaster", "Predictor", "__version__"]


def __getattr__(name: str):
    # Lazy: importing torch/lightning only when the user asks for the forecaster.
    if name == "Forecaster":
        from damcha_ts.api import Forecaster

        return Forecaster
    if name == "Predictor":  # a saved model's forecasts on arrays (damcha_ts.forecasting)
        from damcha_ts.forecasting import Predictor

        return Predictor
    raise AttributeError(f"module 'damcha_ts' has no attribute {name!r}")
