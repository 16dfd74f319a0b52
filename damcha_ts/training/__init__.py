"""Training: run configs, the Lightning module, and the train/select/test runner.

    >>> from damcha_ts.training import load_run_config, run_experiment
    >>> config = load_run_config("itransformer_damcha/etth1", horizon=96)   # doctest: +SKIP
    >>> metrics = run_experiment(config, "runs/etth1_96")                   # doctest: +SKIP

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
    "run_experiment"
]

_LAZY = {
    "ForecastModule": "damcha_ts.training.module",
    "build_trainer": "damcha_ts.training.trainer",
    "fit_series": "damcha_ts.training.runner",
    "run_experiment": "damcha_ts.training.runner",
}

# Lightning loads only when the trainer is needed, not for reading configs.
__getattr__ = lazy_attributes("damcha_ts.training", _LAZY)
