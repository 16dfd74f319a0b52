"""Training: run configs, the Lightning module, and the training loop (``fit_series``).

    >>> from damcha_ts.training import load_run_config
    >>> config = load_run_config("itransformer_damcha/etth1", horizon=96)   # doctest: +SKIP

A run (train, select, test, write its folder) is ``damcha_ts.forecasting.experiment.run_experiment``.

``config`` is light (YAML only); the Lightning parts load on first use.
"""

from __future__ import annotations

from damcha_ts.lazy import lazy_attributes
from damcha_ts.training.config import (
    CONFIG_ROOT,
    LR_SCHEDULES,
    RunConfig,
    TrainingConfig,
    available_configs,
    config_hash,
    find_config,
    load_run_config,
    official_config_name,
)

__all__ = [
    "CONFIG_ROOT", "LR_SCHEDULES", "ForecastModule", "RunConfig", "TrainingConfig", "available_configs",
    "build_trainer", "config_hash", "find_config", "fit_series", "load_run_config", "official_config_name",
]

_LAZY = {
    "ForecastModule": "damcha_ts.training.module",
    "build_trainer": "damcha_ts.training.trainer",
    "fit_series": "damcha_ts.training.runner",
}

# Lightning loads only when the trainer is needed, not for reading configs.
__getattr__ = lazy_attributes("damcha_ts.training", _LAZY)
