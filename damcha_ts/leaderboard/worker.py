"""A leaderboard worker: take the next waiting cell from the grid's study, run it, report it; repeat.

    python -m damcha_ts.leaderboard.worker SPEC.json INDEX     (started by damcha_ts.workqueue.launcher)

``damcha-ts leaderboard`` runs one of these in its own process (``--workers 1``) or K of them as
processes; another machine running the same command against the same storage URL adds its own. A
worker takes only cells it can run: those of the grid file as it reads it, with their dataset file
on this machine (the ``keys`` of its spec). When nothing is waiting but cells are still running
elsewhere it waits (``wait``), since a cell whose worker dies comes back to the queue.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from damcha_ts.leaderboard import cells
from damcha_ts.leaderboard.curves import read_run_curves
from damcha_ts.leaderboard.environment import detect_devices
from damcha_ts.leaderboard.grid import load_grid
from damcha_ts.leaderboard.queue import (
    CURVES_ATTR,
    DUPLICATE_ATTR,
    LAUNCH_ATTR,
    ROW_ATTR,
    QueueSettings,
    duplicate_of,
    key_text,
    open_grid_study,
    open_leaderboard_storage,
    stored_row,
    trial_key,
)
from damcha_ts.workqueue.launcher import worker_arguments
from damcha_ts.workqueue.queue import ERROR_ATTR, StudyQueue, Superseded

POLL_SECONDS = 5.0  # while waiting for cells running elsewhere


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def serve_cells(spec: Mapping[str, Any], index: int = 0, log: Callable[[str], None] = _stderr,
                on_cell: Callable[[], None] = lambda: None) -> dict:
    """Run waiting cells of ``spec`` until none is left (or this worker's share of ``--max-cells``);
    returns {"ran": n, "failed": n}. ``on_cell`` is called after each cell (the foreground progress)."""
    grid = load_grid(spec["grid"])
    runs_dir, results = Path(spec["runs_dir"]), Path(spec["results"])
    wanted = set(spec["keys"])
    runnable = {item.key: item for item in (cells.resolve_cell(c, grid, runs_dir) for c in grid.cells())
                if key_text(item.key) in wanted}
    storage = open_leaderboard_storage(spec["storage"], QueueSettings(**spec["settings"]))
    queue = StudyQueue(open_grid_study(storage, grid.relative_path), storage)
    trainer_kwargs = detect_devices().trainer_kwargs()
    budget = spec["budgets"][index]
    counts = {"ran": 0, "failed": 0}
    while budget is None or counts["ran"] + counts["failed"] < budget:
        queue.fail_stale()
        trial = queue.claim(lambda frozen: trial_key(frozen) in runnable)
        if trial is None:
            if spec["wait"] and _running(queue.study, runnable):
                time.sleep(float(spec.get("poll_seconds", POLL_SECONDS)))
                continue
            break
        with queue.holding(trial):
            outcome = _serve(queue, trial, runnable, spec["launch"], log,
                             lambda handle, item: _run(handle, item, grid, results, trainer_kwargs))
        if outcome is not None:
            counts[outcome] += 1
            on_cell()
    return counts


def _serve(queue, trial: int, runnable: Mapping, launch: int, log: Callable[[str], None], work) -> str | None:
    """Run one claimed cell: "ran", "failed", or None for a cell that is another trial's (a duplicate, or
    one taken from this worker after its heartbeat stopped)."""
    claimed = queue.storage.get_trial(trial)
    item = runnable[trial_key(claimed)]
    winner = duplicate_of(queue.study, claimed)
    if winner is not None:  # enqueued twice by two machines at once: the other copy is the cell's
        queue.storage.set_trial_user_attr(trial, DUPLICATE_ATTR, winner)
        queue.fail(trial, f"a duplicate of trial {winner}, which holds this cell")
        return None
    queue.storage.set_trial_user_attr(trial, LAUNCH_ATTR, launch)
    log(f"{item.cell.describe()}: started (trial {claimed.number})")
    try:
        finished = queue.run(trial, lambda handle: work(handle, item), catch=(Exception,))
    except Superseded as lost:  # this worker was taken for dead; the cell's retry is another's
        log(f"{item.cell.describe()}: {lost}")
        return None
    if ROW_ATTR in finished.user_attrs and finished.state.name == "COMPLETE":
        row = finished.user_attrs[ROW_ATTR]
        log(f"{item.cell.describe()}: mse={row['mse']:.4f} mae={row['mae']:.4f} ({row['wall_seconds']:.1f} s)")
        return "ran"
    log(f"{item.cell.describe()}: FAILED\n{finished.user_attrs.get(ERROR_ATTR, finished.state.name)}")
    return "failed"


def _running(study, runnable: Mapping) -> bool:
    from optuna.trial import TrialState

    return any(trial_key(t) in runnable for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def _run(handle, item, grid, results: Path, trainer_kwargs: dict) -> float:
    """Train and test the cell; its row and curves go with its trial, its sample beside the CSV."""
    row = cells.run_cell(item, trainer_kwargs)
    handle.set_user_attr(ROW_ATTR, stored_row(row))
    if item.run_dir is not None:
        curves = read_run_curves(item.run_dir)
        if curves:
            handle.set_user_attr(CURVES_ATTR, curves)
    cells.keep_sample(item, grid, results)
    return row["mse"]


def main(argv: list[str] | None = None) -> int:
    started = worker_arguments("damcha_ts.leaderboard.worker", argv)
    if started is None:
        return 2
    return 1 if serve_cells(*started)["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
