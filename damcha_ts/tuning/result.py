"""What a study leaves behind: :class:`StudyResult`, read back from the storage by :func:`summarize`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from damcha_ts.tuning.space import SearchSpec
from damcha_ts.workqueue.storage import display_url


@dataclass
class StudyResult:
    """What a study run leaves behind (``--json`` prints :meth:`to_json`)."""

    study_name: str
    storage: str
    out_dir: str
    n_trials: int
    n_complete: int
    n_pruned: int
    n_failed: int
    n_running: int
    best_value: float | None
    best_params: dict
    best_trial: int | None
    best_config: str | None = None
    report: str | None = None
    n_added: int = 0  # COMPLETE + PRUNED trials this launch's workers added
    tuned: dict | None = None  # the best config retrained: val_mse, test mse/mae, ...
    default: dict | None = None  # the base config, trained the same way (--compare-default)
    worker_exit_codes: list[int] = field(default_factory=list)
    n_waiting: int = 0  # queued, not started (a stopped launch's trials, ones enqueued by hand)

    def to_json(self) -> dict:
        return asdict(self)


def decoded_params(search: SearchSpec, params: Mapping[str, Any]) -> dict:
    """Trial parameters as config values (list choices back from their JSON text)."""
    by_path = {p.path: p for p in search.params}
    return {k: by_path[k].decode(v) if k in by_path else v for k, v in params.items()}


def summarize(study, search: SearchSpec, url: str, out_dir: Path) -> StudyResult:
    """Counts by state and the best trial, read back from the storage."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    count = {state: sum(t.state == state for t in trials) for state in TrialState}
    complete = [
        t for t in trials if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)
    ]
    best = min(complete, key=lambda t: t.value) if complete else None
    return StudyResult(
        study_name=study.study_name, storage=display_url(url), out_dir=str(out_dir), n_trials=len(trials),
        n_complete=count[TrialState.COMPLETE], n_pruned=count[TrialState.PRUNED], n_failed=count[TrialState.FAIL],
        n_running=count[TrialState.RUNNING], n_waiting=count[TrialState.WAITING],
        best_value=best.value if best else None, best_params=decoded_params(search, best.params) if best else {},
        best_trial=best.number if best else None,
    )
