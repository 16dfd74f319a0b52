"""A grid's cells as the trials of one Optuna study: the leaderboard's work queue and its record.

One study per grid file, named ``leaderboard:<grid column>`` (the CSV's ``grid`` value, e.g.
``leaderboard:configs/leaderboard/ett.yaml``), in one storage: by default the SQLite file
``leaderboard.db`` beside the results CSV, or any URL ``damcha-ts tune`` takes (PostgreSQL for many
machines). A cell is a trial whose ``cell`` user attribute is its identity (dataset, model, horizon,
seed, config hash); its state is the cell's:

    WAITING   enqueued, not started          RUNNING   a worker has it (``worker``: host:pid)
    COMPLETE  finished: ``row`` holds its CSV row, ``curves`` its per-epoch losses, value = test MSE
    FAIL      an error (``error``: the traceback), or a worker that died (stale heartbeat; the
              storage queues a copy, up to ``max_retry`` times)

Trials are handed out by :class:`damcha_ts.workqueue.StudyQueue`. Two machines enqueueing the same new
cell at the same moment may both add it; the copy that starts later sees the other and ends FAILED
with ``duplicate_of`` (:func:`duplicate_of`), and every count here is per cell, not per trial. The
CSV is exported from the storage (:func:`export_results`); rows already in it are imported once
(:func:`import_rows`), so no row is lost or doubled by either.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from damcha_ts.errors import ConfigError
from damcha_ts.leaderboard.curves import record_curves
from damcha_ts.leaderboard.results import CellKey, add_results, cell_key, check_labels, key_fields, read_results
from damcha_ts.workqueue.queue import ERROR_ATTR, INTERRUPTED
from damcha_ts.workqueue.storage import open_storage

STUDY_PREFIX = "leaderboard:"
CELL_ATTR = "cell"
ROW_ATTR = "row"
CURVES_ATTR = "curves"
LAUNCH_ATTR = "launch"  # the token of the invocation whose worker ran the cell
IMPORTED_ATTR = "imported_from"
DUPLICATE_ATTR = "duplicate_of"
STORAGE_FILE = "leaderboard.db"  # beside the results CSV, unless --storage says otherwise


@dataclass(frozen=True)
class QueueSettings:
    """How a dead worker is noticed: a RUNNING cell whose heartbeat is older than ``grace_period``
    seconds is failed and queued again, at most ``max_retry`` times."""

    heartbeat_interval: int = 60
    grace_period: int = 180
    max_retry: int = 3

    @classmethod
    def every(cls, heartbeat_interval: int) -> QueueSettings:
        """Beats every ``heartbeat_interval`` s; a worker is dead after three missed beats."""
        return cls(heartbeat_interval, 3 * heartbeat_interval)


def study_name(grid_column: str) -> str:
    """The study of a grid, from the CSV's ``grid`` column (``LeaderboardGrid.relative_path``)."""
    return STUDY_PREFIX + grid_column


def default_storage(results_path: str | Path) -> Path:
    return Path(results_path).parent / STORAGE_FILE


def open_leaderboard_storage(url: str, settings: QueueSettings = QueueSettings(), *, writable: bool = True):
    return open_storage(url, heartbeat_interval=settings.heartbeat_interval,
                        grace_period=settings.grace_period, max_retry=settings.max_retry, writable=writable)


def open_grid_study(storage, grid_column: str):
    """The grid's study (created on first use; ``load_if_exists`` makes creating it race-free)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=study_name(grid_column), storage=storage, direction="minimize",
                                load_if_exists=True)
    if len(study.directions) != 1:  # a study of that name made by something else
        raise ConfigError(f"the storage holds a study {study.study_name!r} with {len(study.directions)} "
                          "objectives, so it is not this grid's; use another --storage")
    return study


def key_text(key: CellKey) -> str:
    return "|".join(map(str, key))


def trial_key(trial) -> CellKey | None:
    """The cell of a trial, or None for a trial that is not a leaderboard cell."""
    cell = trial.user_attrs.get(CELL_ATTR)
    return cell_key(cell) if isinstance(cell, Mapping) else None


@dataclass
class CellStates:
    """What the study says of each cell (duplicates left out): finished (its COMPLETE trial),
    running, waiting, or failed (every trial of it FAILED; the last one)."""

    done: dict[CellKey, Any] = field(default_factory=dict)
    running: dict[CellKey, Any] = field(default_factory=dict)
    waiting: dict[CellKey, Any] = field(default_factory=dict)
    failed: dict[CellKey, Any] = field(default_factory=dict)
    deaths: dict[CellKey, int] = field(default_factory=dict)  # trials failed with no error: a worker died

    def retryable(self, key: CellKey, max_retry: int) -> bool:
        """A failed cell whose last worker died (no error recorded) with retries left: the storage's
        retry was lost (a worker killed while failing stale trials), so it is queued again here."""
        last = self.failed.get(key)
        return last is not None and _died(last) and self.deaths.get(key, 0) <= max_retry

    def state(self, key: CellKey) -> str | None:
        for name in ("done", "running", "waiting", "failed"):
            if key in getattr(self, name):
                return name
        return None


def _died(trial) -> bool:
    """A trial whose worker died (no error recorded) or was stopped on purpose (its copy may be lost
    with a second kill): the cell did nothing wrong and may run again."""
    return trial.user_attrs.get(ERROR_ATTR) in (None, INTERRUPTED)


def cell_states(study) -> CellStates:
    from optuna.trial import TrialState

    states = CellStates()
    slot = {TrialState.COMPLETE: states.done, TrialState.RUNNING: states.running, TrialState.WAITING: states.waiting}
    for trial in study.get_trials(deepcopy=False):
        key = trial_key(trial)
        if key is None or DUPLICATE_ATTR in trial.user_attrs:
            continue
        if trial.state in slot:
            slot[trial.state].setdefault(key, trial)  # the first one: the lowest trial number
        elif trial.state == TrialState.FAIL:
            states.failed[key] = trial  # the last one: the latest failure
            if _died(trial):
                states.deaths[key] = states.deaths.get(key, 0) + 1
    for key in [*states.done, *states.running, *states.waiting]:
        states.failed.pop(key, None)
    return states


def enqueue_cells(study, cells: Sequence, *, retry_failed: bool = False, max_retry: int = 3) -> list:
    """Add the cells (``ResolvedCell``) the study does not hold yet, in grid order, and failed ones
    whose worker died with retries left; with ``retry_failed`` every failed one. Returns those added."""
    states = cell_states(study)
    added = []
    for item in cells:
        state = states.state(item.key)
        again = state == "failed" and (retry_failed or states.retryable(item.key, max_retry))
        if state is None or again:
            study.enqueue_trial({}, user_attrs={CELL_ATTR: key_fields(item.key)})
            added.append(item)
    return added


def duplicate_of(study, claimed) -> int | None:
    """For a trial just claimed: the number of another trial of the same cell that wins over it (one
    finished, or one running that started first), or None when the claimed one is the cell's. Both
    claimants of a doubly enqueued cell see the same start times, so exactly one of them goes on."""
    from optuna.trial import TrialState

    key = trial_key(claimed)
    mine = (claimed.datetime_start, claimed.number)
    for other in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
        if other.number == claimed.number or trial_key(other) != key or DUPLICATE_ATTR in other.user_attrs:
            continue
        if other.state == TrialState.COMPLETE or (other.datetime_start, other.number) < mine:
            return other.number
    return None


def stored_row(row: Mapping) -> dict:
    """A CSV row as JSON data: NaN (no timing for a resumed cell) becomes None, as the CSV writes both."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


def import_rows(storage, rows: Iterable[Mapping], curves: Mapping[CellKey, dict], source: str) -> int:
    """Rows of a results CSV as COMPLETE trials of their grids' studies, where the study does not have
    the cell finished yet (so importing twice adds nothing). Returns how many were added."""
    import optuna

    by_grid: dict[str, list[Mapping]] = {}
    for row in rows:
        if isinstance(row["mse"], float) and math.isfinite(row["mse"]):  # an unscored row stays in the CSV only
            by_grid.setdefault(row["grid"], []).append(row)
    added = 0
    for grid_column, grid_rows in by_grid.items():
        study = open_grid_study(storage, grid_column)
        done = set(cell_states(study).done)
        for row in grid_rows:
            key = cell_key(row)
            if key in done:
                continue
            attrs = {CELL_ATTR: key_fields(key), ROW_ATTR: stored_row(row), IMPORTED_ATTR: source}
            if curves.get(key):
                attrs[CURVES_ATTR] = curves[key]
            study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE,
                                                      value=float(row["mse"]), user_attrs=attrs))
            done.add(key)
            added += 1
    return added


def leaderboard_studies(storage, grids: Iterable[str] | None = None) -> list:
    """The storage's grid studies (of ``grids``, the CSV's ``grid`` values, when given)."""
    import optuna

    names = [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
    wanted = None if grids is None else {study_name(grid) for grid in grids}
    return [optuna.load_study(study_name=name, storage=storage) for name in sorted(names)
            if name.startswith(STUDY_PREFIX) and (wanted is None or name in wanted)]


def finished_cells(storage, grids: Iterable[str] | None = None) -> list[tuple[dict, dict | None]]:
    """(row, curves) of every finished cell of the grids' studies in the storage (every grid's when
    ``grids`` is None), in the order they finished."""
    finished = []
    for study in leaderboard_studies(storage, grids):
        for trial in cell_states(study).done.values():
            if ROW_ATTR in trial.user_attrs:  # a shared storage's rows name sample and plot files too
                check_labels(trial.user_attrs[ROW_ATTR], f"study {study.study_name!r}, trial {trial.number}, row")
            finished.append(trial)
    # The row's own timestamp first: imported rows keep the order they finished in, not the import's.
    finished.sort(key=lambda t: (str(t.user_attrs.get(ROW_ATTR, {}).get("timestamp") or ""), t.datetime_complete, t.number))
    return [(dict(t.user_attrs[ROW_ATTR]), t.user_attrs.get(CURVES_ATTR)) for t in finished if ROW_ATTR in t.user_attrs]


def export_results(storage, results_path: str | Path, grids: Iterable[str]) -> int:
    """Write the results CSV and ``curves.json`` from the storage, atomically: the rows already in the
    CSV keep their order, the finished cells of ``grids`` and of the grids the CSV already holds
    follow in the order they finished. A storage shared with other results files (a smoke check's,
    another project's) gives this CSV nothing of their grids. Returns how many rows the CSV gained."""
    ours = {*grids, *(row["grid"] for row in read_results(results_path))}
    finished = finished_cells(storage, ours)
    added = add_results(results_path, [row for row, _ in finished])
    record_curves(results_path, [(row, curves) for row, curves in finished if curves])
    return len(added)
