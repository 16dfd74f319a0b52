"""Optuna hyperparameter studies over damcha_ts run configs (``damcha-ts tune``).

    from damcha_ts.tuning import run_study
    result = run_study("configs/itransformer_damcha/etth1.yaml", "itransformer_damcha_etth1",
                       n_trials=30, workers=2)
    print(result.best_value, result.best_params, result.best_config)

Modules: :mod:`~damcha_ts.tuning.search_file` (search files), :mod:`~damcha_ts.tuning.space`
(parameters, sampling), :mod:`~damcha_ts.workqueue.storage` (SQLite / database URL / journal file),
:mod:`~damcha_ts.tuning.objective` (one trial), :mod:`~damcha_ts.tuning.launch` (the study in its
storage, launch by launch), :mod:`~damcha_ts.tuning.study` (workers, resume, export, test once),
:mod:`~damcha_ts.tuning.result` and :mod:`~damcha_ts.tuning.report`.
Optuna, torch and matplotlib are imported only when a study runs.
"""

from __future__ import annotations

from damcha_ts.tuning.result import StudyResult
from damcha_ts.tuning.search_file import load_search_spec, parse_search_spec
from damcha_ts.tuning.space import ParamSpec, SearchSpec
from damcha_ts.tuning.study import run_study, run_worker
from damcha_ts.workqueue.storage import open_storage, resolve_storage_url

__all__ = [
    "ParamSpec", "SearchSpec", "StudyResult", "load_search_spec", "open_storage", "parse_search_spec",
    "resolve_storage_url", "run_study", "run_worker"
]
