"""Run a leaderboard grid on the grid's Optuna study: every worker, here or on another machine.

``run_leaderboard`` (what ``damcha-ts leaderboard`` calls) does, in order:

1. import the rows of the results CSV the storage lacks (``queue.import_rows``: a no-op after the first
   time), so cells finished before, or merged from another machine, are never run again;
2. enqueue the grid's cells that the study does not hold yet and whose dataset file is here (missing
   files are reported with how to provide them; a corrupt one is an error); cells that failed for a
   real error stay failed and are reported, unless ``retry_failed``;
3. run workers (``worker.serve_cells``): in this process (one worker) or as ``workers`` processes
   through ``workqueue.launcher`` (a share of the cores, or one GPU, each); each takes the next
   waiting cell until none is left, and waits while cells run elsewhere (a dead worker's cell comes
   back to the queue through its heartbeat and is retried, from its last checkpoint when the run
   folder is shared);
4. export the CSV and ``curves.json`` from the storage (``queue.export_results``) and say what
   happened: cells finished by this run's workers, failed, finished before, still to run.

On CUDA the default is one worker per GPU, in bf16-mixed (the run configs' ``precision: auto``); on
CPU one worker with every core (or ``OMP_NUM_THREADS`` threads when that is set).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from damcha_ts.data.registry import get_spec
from damcha_ts.data.storage import how_to_provide, locate_dataset
from damcha_ts.errors import ChecksumError, ConfigError, DatasetNotFoundError
from damcha_ts.leaderboard.cells import ResolvedCell, checkpointed_epochs, resolve_cell
from damcha_ts.leaderboard.curves import load_curves, read_run_curves, record_curves
from damcha_ts.leaderboard.dataset_results import ExpectedCell
from damcha_ts.leaderboard.environment import detect_devices
from damcha_ts.leaderboard.grid import LeaderboardGrid
from damcha_ts.leaderboard.queue import (
    LAUNCH_ATTR,
    ROW_ATTR,
    CellStates,
    QueueSettings,
    cell_states,
    default_storage,
    enqueue_cells,
    export_results,
    import_rows,
    key_text,
    open_grid_study,
    open_leaderboard_storage,
    study_name,
)
from damcha_ts.leaderboard.results import cell_key, read_results
from damcha_ts.leaderboard.worker import serve_cells
from damcha_ts.workqueue.launcher import run_workers
from damcha_ts.workqueue.queue import ERROR_ATTR, WORKER_ATTR, new_launch_token
from damcha_ts.workqueue.storage import display_url, resolve_storage_url, sqlite_path


@dataclass
class MissingDataset:
    dataset: str
    filename: str
    sha256: str | None
    cells: int
    message: str


@dataclass
class CorruptDataset:
    dataset: str
    filename: str
    cells: int
    message: str  # names the file, the expected and the actual sha256


@dataclass
class LeaderboardRun:
    """What one invocation did (the CLI prints it, ``--json`` as JSON)."""

    grid: str
    results: str
    storage: str = ""  # the storage URL, passwords hidden
    planned: int = 0  # cells of the grid (after --only-dataset), datasets present or not
    already_finished: int = 0  # finished before this invocation (here, elsewhere, or imported)
    ran: list[dict] = field(default_factory=list)  # rows of the cells this invocation's workers finished
    failed: list[dict] = field(default_factory=list)  # {"cell": ..., "error": ...} of this invocation's workers
    failed_before: list[dict] = field(default_factory=list)  # failed earlier, not retried (--retry-failed)
    running_elsewhere: list[str] = field(default_factory=list)  # other workers' cells, still running at the end
    missing_datasets: list[MissingDataset] = field(default_factory=list)
    corrupt_datasets: list[CorruptDataset] = field(default_factory=list)  # an error: the command fails
    imported: int = 0  # rows of the CSV the storage did not have yet
    exported: int = 0  # rows the CSV gained from the storage (this run's, and other machines')
    worker_exit_codes: list[int] = field(default_factory=list)  # worker processes (none in this process)
    remaining: int = 0  # cells without a row yet (failed ones and those after --max-cells included)

    def as_dict(self) -> dict:
        """JSON-ready: NaN (no timing for a resumed run, no epochs for naive rows) becomes None."""
        data = dict(vars(self))
        data["ran"] = [{k: None if v != v else v for k, v in row.items()} for row in self.ran]
        data["missing_datasets"] = [vars(m) for m in self.missing_datasets]
        data["corrupt_datasets"] = [vars(c) for c in self.corrupt_datasets]
        return data


def missing_dataset_message(dataset: str, error: Exception, n_cells: int) -> MissingDataset:
    """A message that says which file is missing and exactly how to provide it."""
    spec = get_spec(dataset)
    message = (
        f"{dataset}: the data file {spec.filename} is missing, so its {n_cells} leaderboard cell(s) are "
        f"skipped (nothing is estimated for them).\n{_advice(spec)}\n  Details: {_details(error, spec)}"
    )
    return MissingDataset(dataset, spec.filename, spec.sha256, n_cells, message)


def corrupt_dataset_message(dataset: str, error: Exception, n_cells: int) -> CorruptDataset:
    """A file that is there but fails its checksum: which one, both digests (in ``error``), what to do."""
    spec = get_spec(dataset)
    # Of a search's error (every place searched, then the rejected files), the rejected files with
    # their digests are what matter here.
    details = "\n  ".join(map(str, getattr(error, "rejected", ()))) or _details(error, spec)
    message = (
        f"{dataset}: the data file {spec.filename} is corrupt (it fails its checksum), so "
        f"its {n_cells} leaderboard cell(s) were not run; replace it with the canonical file.\n"
        f"  {details}\n{_advice(spec)}"
    )
    return CorruptDataset(dataset, spec.filename, n_cells, message)


def _advice(spec) -> str:
    """The data layer's advice, and what the leaderboard adds: its --data-dir, and that a rerun resumes."""
    return (
        f"  {how_to_provide(spec)}\n"
        f"  Or pass --data-dir FOLDER (it sets DAMCHA_TS_DATA=FOLDER); then rerun the same command "
        f"(finished cells are kept)."
    )


def _details(error: Exception, spec) -> str:
    """The data layer's error without its advice on providing the file, which the message gives once."""
    return str(error).replace(how_to_provide(spec), "").strip()


def expected_cells(grid: LeaderboardGrid, runs_dir: str | Path, rows: Sequence[dict] = ()) -> list:
    """Every cell of the grid with its current config hash, for the report's missing notes; cells
    without a row in ``rows`` also say how many epochs their run folder has checkpointed."""

    finished = {cell_key(row) for row in rows}
    cells = []
    for cell in grid.cells():
        resolved = resolve_cell(cell, grid, Path(runs_dir))
        done = 0 if resolved.key in finished else checkpointed_epochs(resolved.run_dir)
        cells.append(ExpectedCell(cell.dataset, cell.model, cell.horizon, cell.seed, resolved.config_hash,
                                  grid.command(cell.dataset), grid.compare_with, done))
    return cells


def keep_missing_curves(grid: LeaderboardGrid, results_path: str | Path, runs_dir: str | Path) -> int:
    """Cells with a row but no curve (finished before curves were kept, or on another machine): take
    their curves from their run folders where those are here; returns how many were added."""
    results_path = Path(results_path)
    finished = {cell_key(row): row for row in read_results(results_path)}
    have_curves = {cell_key(item) for item in load_curves(results_path)}
    resolved = [resolve_cell(cell, grid, Path(runs_dir)) for cell in grid.cells()]
    wanted = [(finished[r.key], r) for r in resolved if r.key in finished and r.key not in have_curves]
    return _keep_curves(results_path, wanted)


def _keep_curves(results_path: Path, finished: Sequence[tuple[dict, ResolvedCell]]) -> int:
    """Copy finished cells' per-epoch curves out of their run folders into curves.json."""
    return record_curves(results_path, [(row, read_run_curves(item.run_dir)) for row, item in finished if item.run_dir])


def _with_dataset_files(
    pending: list[ResolvedCell], summary: LeaderboardRun, download: bool, log: Callable[[str], None]
) -> list[ResolvedCell]:
    """The pending cells whose dataset file is here (or downloads); the others are listed in the
    summary as missing or corrupt. Only datasets with cells left need their file, so a finished grid
    reruns anywhere."""
    for dataset in dict.fromkeys(r.cell.dataset for r in pending):
        n_cells = sum(r.cell.dataset == dataset for r in pending)
        try:
            locate_dataset(dataset, download=download)
        except DatasetNotFoundError as exc:
            summary.missing_datasets.append(missing_dataset_message(dataset, exc, n_cells))
            log(summary.missing_datasets[-1].message)
        except ChecksumError as exc:
            summary.corrupt_datasets.append(corrupt_dataset_message(dataset, exc, n_cells))
            log(f"damcha-ts: error: {summary.corrupt_datasets[-1].message}")
        else:
            continue
        pending = [r for r in pending if r.cell.dataset != dataset]
    return pending


def run_leaderboard(
    grid: LeaderboardGrid,
    results_path: str | Path,
    *,
    runs_dir: str | Path,
    storage: str | None = None,
    workers: int | None = None,
    only_datasets: Sequence[str] = (),
    only_models: Sequence[str] = (),
    max_cells: int | None = None,
    download: bool = True,
    retry_failed: bool = False,
    wait: bool = True,
    settings: QueueSettings = QueueSettings(),
    log: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True),
) -> LeaderboardRun:
    """Run the cells of ``grid`` that have no row yet (at most ``max_cells`` here) on the grid's study
    in ``storage`` (default: ``leaderboard.db`` beside ``results_path``), with ``workers`` workers on
    this machine (default: one per GPU, or one); then export the CSV from the storage."""
    results_path, runs_dir = Path(results_path), Path(runs_dir)
    url = resolve_storage_url(storage if storage else default_storage(results_path), results_path.parent)
    cells = grid.cells(tuple(only_datasets), tuple(only_models))
    summary = LeaderboardRun(grid=grid.relative_path, results=str(results_path), storage=display_url(url),
                             planned=len(cells))
    resolved = [resolve_cell(c, grid, runs_dir) for c in cells]
    store = open_leaderboard_storage(url, settings)
    summary.imported = import_committed(store, results_path)
    study = open_grid_study(store, grid.relative_path)
    runnable = _cells_to_run(summary, study, resolved, results_path, retry_failed=retry_failed,
                             max_retry=settings.max_retry, download=download, log=log)
    added = enqueue_cells(study, runnable, retry_failed=retry_failed, max_retry=settings.max_retry)
    workers = _worker_count(workers, len(runnable), max_cells)
    if summary.already_finished == len(resolved):
        log(f"leaderboard {grid.name}: all {len(cells)} cells have a row; nothing to run")
    log(f"leaderboard {grid.name}: {len(cells)} cells, {summary.already_finished} finished, "
        f"{len(runnable)} to run ({len(added)} newly queued) in {summary.storage}"
        + (f", {workers} worker(s) here" if runnable and max_cells != 0 else ""))
    launch = new_launch_token()
    if runnable and max_cells != 0:
        spec = {"grid": str(grid.path), "results": str(results_path), "runs_dir": str(runs_dir), "storage": url,
                "settings": vars(settings), "keys": [key_text(r.key) for r in runnable], "launch": launch,
                "budgets": _shares(max_cells, workers), "wait": wait}
        def export() -> None:  # each finished cell as it comes, so a kill of this process loses no row here
            summary.exported += export_results(store, results_path, [grid.relative_path])

        progress = Progress(study, runnable, log, announce=workers > 1, on_finished=export)
        try:
            summary.worker_exit_codes = _run_workers(spec, workers, runs_dir / grid.name, progress)
        finally:
            progress.close()
    # Always: rows finished elsewhere reach this CSV too (a run with nothing to run just exports).
    summary.exported += export_results(store, results_path, [grid.relative_path])
    _summarise(summary, study, resolved, launch)
    return summary


def _cells_to_run(summary: LeaderboardRun, study, resolved: Sequence[ResolvedCell], results_path: Path, *,
                  retry_failed: bool, max_retry: int, download: bool, log: Callable[[str], None]) -> list:
    """The cells without a row, less those that failed for a real error (unless ``retry_failed``) and
    those whose dataset file is not here; the summary says why each other one is left out."""
    before = cell_states(study)
    # A row in the CSV means done, even one the storage could not take (no finite MSE to store).
    done = set(before.done) | {cell_key(row) for row in read_results(results_path)}
    unfinished = [r for r in resolved if r.key not in done]
    summary.already_finished = len(resolved) - len(unfinished)
    if not retry_failed:
        given_up = [r for r in unfinished if r.key in before.failed and not before.retryable(r.key, max_retry)]
        summary.failed_before = [_failure(r, before.failed[r.key]) for r in given_up]
        for item in summary.failed_before:
            log(f"{item['cell']}: failed before, not retried (--retry-failed retries it): {item['error'].splitlines()[-1]}")
        unfinished = [r for r in unfinished if r not in given_up]
    return _with_dataset_files(unfinished, summary, download, log)


def import_committed(store, results_path: Path) -> int:
    """The rows (and curves) of the results CSV the storage does not hold yet; how many."""
    curves = {cell_key(item): {k: item[k] for k in ("epochs", "train_loss", "val_loss")}
              for item in load_curves(results_path)}
    return import_rows(store, read_results(results_path), curves, source=str(results_path))


def _worker_count(workers: int | None, cells: int, max_cells: int | None) -> int:
    """``--workers`` (checked), else one per GPU or one; never more than there are cells to run."""
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    if workers is None:
        workers = max(1, len(detect_devices().gpu_ids))
    limit = cells if max_cells is None else min(cells, max_cells)
    return max(1, min(workers, limit))


def _shares(max_cells: int | None, workers: int) -> list[int | None]:
    """Each worker's part of ``--max-cells`` (None: no limit): 5 over 2 workers is 3 and 2."""
    if max_cells is None:
        return [None] * workers
    return [max_cells // workers + (index < max_cells % workers) for index in range(workers)]


def _run_workers(spec: dict, workers: int, folder: Path, progress: Progress) -> list[int]:
    """One worker in this process (with every core, unless OMP_NUM_THREADS says otherwise), or
    ``workers`` processes; returns the processes' exit codes."""
    if workers == 1 and not os.environ.get("OMP_NUM_THREADS"):
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
    return run_workers("damcha_ts.leaderboard.worker", lambda s, i: serve_cells(s, i, on_cell=progress.update), spec,
                       folder / "workers", workers, tag=f"{os.getpid()}_{spec['launch'] % 100000:05d}",
                       log=progress.log, on_tick=progress.update)


def _failure(item: ResolvedCell, trial) -> dict:
    error = trial.user_attrs.get(ERROR_ATTR) or "its worker stopped (no heartbeat) and it ran out of retries"
    return {"cell": item.cell.describe(), "error": error}


def _summarise(summary: LeaderboardRun, study, resolved: Sequence[ResolvedCell], launch: int) -> None:
    """Fill in, from the storage, what this invocation's workers finished and failed, and what is left."""
    states = cell_states(study)
    ours = sorted((t for t in states.done.values() if t.user_attrs.get(LAUNCH_ATTR) == launch),
                  key=lambda t: (t.datetime_complete, t.number))
    summary.ran = [dict(t.user_attrs[ROW_ATTR]) for t in ours]
    by_key = {r.key: r for r in resolved}
    summary.failed = [_failure(by_key[key], t) for key, t in states.failed.items()
                      if key in by_key and t.user_attrs.get(LAUNCH_ATTR) == launch]
    summary.running_elsewhere = [by_key[key].cell.describe() for key in states.running if key in by_key]
    skipped = {m.dataset for m in [*summary.missing_datasets, *summary.corrupt_datasets]}
    done = set(states.done) | {cell_key(row) for row in read_results(summary.results)}
    summary.remaining = sum(r.key not in done and r.cell.dataset not in skipped for r in resolved)


class Progress:
    """The foreground view of a run: a bar on a terminal, and with worker processes (whose own lines
    go to their log files) one line per cell as it finishes, read from the storage."""

    def __init__(self, study, cells: Sequence[ResolvedCell], log: Callable[[str], None], *, announce: bool,
                 on_finished: Callable[[], object] = lambda: None) -> None:
        self.study, self.log, self.announce, self.on_finished = study, log, announce, on_finished
        self.cells = {r.key: r for r in cells}
        self.seen: set = set()
        self.bar = None
        if sys.stderr.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=len(cells), unit="cell", file=sys.stderr, dynamic_ncols=True)

    def update(self) -> None:
        states = cell_states(self.study)
        finished = False
        for key, trial in [*states.done.items(), *states.failed.items()]:
            if key in self.cells and key not in self.seen:
                self.seen.add(key)
                finished = finished or key in states.done
                if self.announce:
                    self.log(_cell_line(self.cells[key], trial))
        if finished:
            try:
                self.on_finished()
            except Exception as exc:  # noqa: BLE001 - the rows are safe in the storage; the end of the run exports again
                self.log(f"exporting the finished cells failed ({type(exc).__name__}: {exc}); they are kept in the "
                         "storage and exported at the end of the run")
        if self.bar is not None:
            done = sum(key in states.done for key in self.cells)
            running = sum(key in states.running for key in self.cells)
            failed = sum(key in states.failed for key in self.cells)
            self.bar.n = done + failed
            self.bar.set_postfix(running=running, failed=failed, refresh=False)
            self.bar.refresh()

    def close(self) -> None:
        self.update()
        if self.bar is not None:
            self.bar.close()


def _cell_line(item: ResolvedCell, trial) -> str:
    where = trial.user_attrs.get(WORKER_ATTR, "?")
    if ROW_ATTR in trial.user_attrs and trial.state.name == "COMPLETE":
        row = trial.user_attrs[ROW_ATTR]
        return (f"{item.cell.describe()}: mse={row['mse']:.4f} mae={row['mae']:.4f} "
                f"({row['wall_seconds']:.1f} s on {where})")
    error = (trial.user_attrs.get(ERROR_ATTR) or "FAILED").strip().splitlines()[-1]
    return f"{item.cell.describe()}: FAILED on {where}: {error}"


def _stored_states(url: str, grid_column: str):
    """The study's cell states, read only: a storage or study not created yet holds no cell (and
    --status creates neither)."""
    import optuna

    if sqlite_path(url) is not None and not sqlite_path(url).is_file():
        return CellStates()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=study_name(grid_column),
                                  storage=open_leaderboard_storage(url, writable=False))
    except KeyError:  # no such study yet
        return CellStates()
    return cell_states(study)


def leaderboard_status(
    grid: LeaderboardGrid, results_path: str | Path, *, runs_dir: str | Path, storage: str | None = None,
    only_datasets: Sequence[str] = (), only_models: Sequence[str] = (),
) -> dict:
    """Where every cell of the grid stands in the storage (read only; nothing is queued or run):
    done, running (on which worker, since when), waiting, failed (the error's last line), or not
    queued yet; the CSV's rows the storage lacks count as done."""
    results_path = Path(results_path)
    url = resolve_storage_url(storage if storage else default_storage(results_path), results_path.parent)
    resolved = [resolve_cell(c, grid, Path(runs_dir)) for c in grid.cells(tuple(only_datasets), tuple(only_models))]
    in_csv = {cell_key(row) for row in read_results(results_path)}
    states = _stored_states(url, grid.relative_path)
    status = {"grid": grid.relative_path, "storage": display_url(url), "cells": len(resolved),
              "done": 0, "running": [], "waiting": 0, "failed": [], "not_queued": 0}
    for item in resolved:
        state = "done" if item.key in in_csv else states.state(item.key)
        if state == "done":
            status["done"] += 1
        elif state == "running":
            trial = states.running[item.key]
            status["running"].append({"cell": item.cell.describe(), "worker": trial.user_attrs.get(WORKER_ATTR),
                                      "since": str(trial.datetime_start)})
        elif state == "waiting":
            status["waiting"] += 1
        elif state == "failed":
            status["failed"].append(_failure(item, states.failed[item.key]))
        else:
            status["not_queued"] += 1
    return status
