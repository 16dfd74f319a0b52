"""Run a leaderboard grid: resumable, one result row per finished cell, every device used.

Resumption: a cell whose (dataset, model, horizon, seed, config hash) already has a row in the
results CSV is skipped. A cell interrupted mid-training resumes from its run directory's last
checkpoint. Rows are appended atomically (``results.append_result``), so a crash or kill loses at
most the cells in progress. Each finished cell's per-epoch losses go to ``curves.json`` beside the CSV
(``curves.py``); cells finished before that get theirs when the report is next regenerated, if their
run folder is there (``keep_missing_curves``).
Several runners may share one CSV with overlapping grids: a cell's run folder is locked while it
trains, so another runner skips that cell ("busy"), and a row already in the CSV is never appended
twice. Cells that failed on an earlier run go after the others.

Devices: on CUDA one worker process per GPU (each pinned with ``CUDA_VISIBLE_DEVICES``) pulls the
next cell from a shared queue and trains in bf16-mixed (the run configs' ``precision: auto``); the
parent process alone writes the CSV. On CPU the cells run one at a time in this process with every
core (or ``OMP_NUM_THREADS`` threads when that is set), or with ``cpu_jobs=N`` in N worker processes
that split the cores, through the same queue.

Missing dataset files (Traffic and Electricity are not redistributed here) are reported with the
file name, where to put it and its sha256; their cells are skipped, the rest of the grid runs. A file
that is there but fails its checksum is an error, not a missing file: its cells are not run either,
the summary lists it under ``corrupt_datasets`` with both digests, and the command exits non-zero.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from damcha_ts.errors import ChecksumError, DatasetNotFoundError
from damcha_ts.files import write_atomically
from damcha_ts.leaderboard.cells import (
    SAMPLE_FILE,
    CellBusy,
    ResolvedCell,
    checkpointed_epochs,
    held_elsewhere,
    resolve_cell,
    run_cell,
)
from damcha_ts.leaderboard.curves import load_curves, read_run_curves, record_curves
from damcha_ts.leaderboard.grid import LeaderboardGrid
from damcha_ts.leaderboard.results import (
    append_result,
    cell_key,
    read_results,
    sample_path,
)
from damcha_ts.training.devices import threads_per_worker


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
    planned: int = 0  # cells of the grid (after --only-dataset), datasets present or not
    already_finished: int = 0
    ran: list[dict] = field(default_factory=list)  # rows written by this invocation
    failed: list[dict] = field(default_factory=list)  # {"cell": ..., "error": ...}
    busy: list[str] = field(default_factory=list)  # cells another runner was running: skipped
    missing_datasets: list[MissingDataset] = field(default_factory=list)
    corrupt_datasets: list[CorruptDataset] = field(default_factory=list)  # an error: the command fails
    remaining: int = 0  # runnable cells still without a row (e.g. after --max-cells)

    def as_dict(self) -> dict:
        """JSON-ready: NaN (no timing for a resumed run, no epochs for naive rows) becomes None."""
        return {
            "grid": self.grid,
            "results": self.results,
            "planned": self.planned,
            "already_finished": self.already_finished,
            "ran": [{k: None if v != v else v for k, v in row.items()} for row in self.ran],
            "failed": self.failed,
            "busy": self.busy,
            "missing_datasets": [vars(m) for m in self.missing_datasets],
            "corrupt_datasets": [vars(c) for c in self.corrupt_datasets],
            "remaining": self.remaining,
        }


def missing_dataset_message(dataset: str, error: Exception, n_cells: int) -> MissingDataset:
    """A message that says which file is missing and exactly how to provide it."""
    from damcha_ts.data import get_spec

    spec = get_spec(dataset)
    message = (
        f"{dataset}: the data file {spec.filename} is missing, so its {n_cells} leaderboard cell(s) are "
        f"skipped (nothing is estimated for them).\n{_advice(spec)}\n  Details: {_details(error, spec)}"
    )
    return MissingDataset(dataset, spec.filename, spec.sha256, n_cells, message)


def corrupt_dataset_message(dataset: str, error: Exception, n_cells: int) -> CorruptDataset:
    """A file that is there but fails its checksum: which one, both digests (in ``error``), what to do."""
    from damcha_ts.data import get_spec

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
    from damcha_ts.data.storage import how_to_provide

    return (
        f"  {how_to_provide(spec)}\n"
        f"  Or pass --data-dir FOLDER (it sets DAMCHA_TS_DATA=FOLDER); then rerun the same command "
        f"(finished cells are kept)."
    )


def _details(error: Exception, spec) -> str:
    """The data layer's error without its advice on providing the file, which the message gives once."""
    from damcha_ts.data.storage import how_to_provide

    return str(error).replace(how_to_provide(spec), "").strip()


def expected_cells(grid: LeaderboardGrid, runs_dir: str | Path, rows: Sequence[dict] = ()) -> list:
    """Every cell of the grid with its current config hash, for the report's missing notes; cells
    without a row in ``rows`` also say how many epochs their run folder has checkpointed."""
    from damcha_ts.leaderboard.report import ExpectedCell

    finished = {cell_key(row) for row in rows}
    cells = []
    for cell in grid.cells():
        resolved = resolve_cell(cell, grid, Path(runs_dir))
        done = 0 if resolved.key in finished else checkpointed_epochs(resolved.run_dir)
        cells.append(ExpectedCell(cell.dataset, cell.model, cell.horizon, cell.seed, resolved.config_hash,
                                  grid.command(cell.dataset), grid.compare_with, done))
    return cells


def _keep_sample(resolved: ResolvedCell, grid: LeaderboardGrid, results_path: Path) -> None:
    """Copy the sample of the first seed at the shortest horizon (what the plots show) next to the
    CSV, so the plots can be redrawn from committed files; run folders are not committed."""
    cell = resolved.cell
    if cell.is_naive or cell.horizon != min(grid.horizons):
        return
    if cell.seed != grid.seeds_for(cell.dataset, cell.model)[0]:
        return
    source = resolved.run_dir / SAMPLE_FILE
    if source.is_file():
        target = sample_path(results_path, cell.dataset, cell.model, cell.horizon)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, source.read_bytes())  # a committed file: never half-written


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


def run_leaderboard(
    grid: LeaderboardGrid,
    results_path: str | Path,
    *,
    runs_dir: str | Path,
    only_datasets: Sequence[str] = (),
    only_models: Sequence[str] = (),
    max_cells: int | None = None,
    download: bool = True,
    cpu_jobs: int = 1,
    log: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True),
) -> LeaderboardRun:
    """Run every cell of ``grid`` that has no row in ``results_path`` yet (at most ``max_cells``).

    Without a GPU, ``cpu_jobs`` > 1 runs that many cells at once in worker processes that split the
    cores between them (small models train faster per core on one thread than on several).
    """
    results_path, runs_dir = Path(results_path), Path(runs_dir)
    cells = grid.cells(tuple(only_datasets), tuple(only_models))
    summary = LeaderboardRun(grid=grid.relative_path, results=str(results_path), planned=len(cells))
    resolved = [resolve_cell(c, grid, runs_dir) for c in cells]
    finished = {cell_key(row) for row in read_results(results_path)}  # read once per call
    pending = [r for r in resolved if r.key not in finished]
    summary.already_finished = len(resolved) - len(pending)
    pending = _with_dataset_files(pending, summary, download, log)
    # Cells that failed last time go last, so that with --max-cells a cell that keeps failing cannot
    # hold back the rest of the grid (they are still retried once nothing else is left).
    pending.sort(key=lambda item: _failed_before(item))
    free = _not_held_elsewhere(pending, summary, log)
    todo = free if max_cells is None else free[: max(0, max_cells)]
    log(f"leaderboard {grid.name}: {len(cells)} cells, {summary.already_finished} already in {results_path}, "
        f"{len(pending)} to run, running {len(todo)} now")
    _run_cells(todo, _CellRecorder(summary, grid, results_path, len(todo), log), cpu_jobs)
    # Still to run: what has no row yet (failed cells and those another runner holds included),
    # leaving out the cells of missing or corrupt dataset files.
    summary.remaining = len(resolved) - summary.already_finished - len(summary.ran) - sum(
        item.cells for item in [*summary.missing_datasets, *summary.corrupt_datasets])
    return summary


def _with_dataset_files(
    pending: list[ResolvedCell], summary: LeaderboardRun, download: bool, log: Callable[[str], None]
) -> list[ResolvedCell]:
    """The pending cells whose dataset file is here (or downloads); the others are listed in the
    summary as missing or corrupt. Only datasets with cells left need their file, so a finished grid
    reruns anywhere."""
    from damcha_ts.data import locate_dataset

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


def _not_held_elsewhere(
    pending: Sequence[ResolvedCell], summary: LeaderboardRun, log: Callable[[str], None]
) -> list[ResolvedCell]:
    """Cells another runner is training now are left to it (listed as busy), and do not use up --max-cells."""
    free = []
    for item in pending:
        if held_elsewhere(item):
            summary.busy.append(item.cell.describe())
            log(f"{item.cell.describe()}: skipped, another leaderboard process is running it")
        else:
            free.append(item)
    return free


@dataclass
class _CellRecorder:
    """Records what each cell came to, in the calling process alone: its row (with its sample and
    curves), its failure (marked in its run folder, so it goes last next time), or "busy"."""

    summary: LeaderboardRun
    grid: LeaderboardGrid
    results_path: Path
    total: int  # cells run by this invocation, for the [i/n] prefix
    log: Callable[[str], None]

    def __call__(self, index: int, item: ResolvedCell, row: dict | None, error: str | None) -> None:
        """A finished cell (row), a failed one (error) or, with neither, one another runner has."""
        prefix = f"[{index + 1}/{self.total}] {item.cell.describe()}"
        if row is None and error is None:
            self.summary.busy.append(item.cell.describe())
            self.log(f"{prefix}: skipped, another leaderboard process is running it")
        elif row is None:
            self._failed(prefix, item, error)
        else:
            self._finished(prefix, item, row)

    def _failed(self, prefix: str, item: ResolvedCell, error: str) -> None:
        self.summary.failed.append({"cell": item.cell.describe(), "error": error})
        self.log(f"{prefix}: FAILED\n{error}")
        if item.run_dir is not None:
            item.run_dir.mkdir(parents=True, exist_ok=True)
            write_atomically(item.run_dir / FAILED_MARK, str(error))

    def _finished(self, prefix: str, item: ResolvedCell, row: dict) -> None:
        if item.run_dir is not None:
            (item.run_dir / FAILED_MARK).unlink(missing_ok=True)
        if not append_result(self.results_path, row):
            self.log(f"{prefix}: another runner wrote this cell's row first; kept that one")
            self.summary.already_finished += 1
            return
        _keep_sample(item, self.grid, self.results_path)
        _keep_curves(self.results_path, [(row, item)])
        self.summary.ran.append(row)
        self.log(f"{prefix}: mse={row['mse']:.4f} mae={row['mae']:.4f} ({row['wall_seconds']:.1f} s)")


def _run_cells(todo: Sequence[ResolvedCell], record: Callable, cpu_jobs: int) -> None:
    """One worker process per GPU; without one, ``cpu_jobs`` worker processes, or this process."""
    from damcha_ts.leaderboard.environment import detect_devices

    plan = detect_devices()
    if plan.uses_cuda and todo:
        slots = [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in plan.gpu_ids]
        run_in_workers(todo, slots, plan.trainer_kwargs(), record)
    elif cpu_jobs > 1 and todo:
        run_in_workers(todo, cpu_slots(cpu_jobs, len(todo)), plan.trainer_kwargs(), record)
    else:
        _run_in_this_process(todo, plan.trainer_kwargs(), record)


def _run_in_this_process(todo: Sequence[ResolvedCell], trainer_kwargs: dict, record: Callable) -> None:
    """The cells one after another, on every core unless the user pinned a thread count the standard
    way (OMP_NUM_THREADS)."""
    import torch

    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(os.cpu_count() or 1)
    for index, item in enumerate(todo):
        try:
            row = run_cell(item, trainer_kwargs)
        except CellBusy:
            record(index, item, None, None)
        except Exception:  # noqa: BLE001 - one broken cell must not stop the grid
            record(index, item, None, traceback.format_exc())
        else:
            record(index, item, row, None)


def cpu_slots(cpu_jobs: int, cells: int, environ: Mapping[str, str] | None = None) -> list[dict]:
    """Worker environments for ``--cpu-jobs``: one per cell at most, the cores split among them
    (with fewer cells than jobs, the cores go to the cells there are)."""
    workers = max(1, min(cpu_jobs, cells))
    threads = threads_per_worker(workers, environ)
    return [{"OMP_NUM_THREADS": str(threads)} for _ in range(workers)]


FAILED_MARK = "failed.txt"  # in a cell's run folder: the traceback of its last failure


def _failed_before(item: ResolvedCell) -> bool:
    return item.run_dir is not None and (item.run_dir / FAILED_MARK).is_file()


def _worker(environment: dict, threads: int, trainer_kwargs: dict, tasks, results) -> None:
    """A worker process: pinned to its device by ``environment`` before torch touches CUDA."""
    os.environ.update(environment)
    _die_with_parent()
    import torch

    # A CPU slot names its thread count; a GPU worker shares the cores for data and Python work.
    torch.set_num_threads(int(environment.get("OMP_NUM_THREADS") or threads))
    while True:
        task = tasks.get()
        if task is None or not multiprocessing.parent_process().is_alive():
            return
        index, item = task
        results.put(("started", index, os.getpid()))
        try:
            results.put(("done", index, run_cell(item, trainer_kwargs)))
        except CellBusy:
            results.put(("busy", index, None))
        except Exception:  # noqa: BLE001 - reported to the parent, which records the failure
            results.put(("failed", index, traceback.format_exc()))


def _die_with_parent() -> None:
    """Linux: the kernel sends this worker SIGTERM when the runner dies, even by SIGKILL (the OOM
    killer, ``timeout -k``), so no orphan goes on training cells whose rows nobody would write."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def run_in_workers(
    todo: Sequence[ResolvedCell],
    slots: Sequence[dict],
    trainer_kwargs: dict,
    record: Callable[[int, ResolvedCell, dict | None, str | None], None],
) -> None:
    """Run cells on one worker process per slot (a slot = the environment pinning one device).

    Workers pull cells from a shared queue (the first round goes out round-robin, then whoever
    finishes first takes the next); only the calling process records results. A worker that dies
    (e.g. killed by the OOM killer) fails its current cell; the others go on.
    """
    context = multiprocessing.get_context("spawn")  # no CUDA state is inherited across fork
    tasks, results = context.Queue(), context.Queue()
    for index, item in enumerate(todo):
        tasks.put((index, item))
    workers = []
    threads = threads_per_worker(len(slots))
    for slot in slots:
        # Not a daemon: a daemon may not start children, and a cell may use DataLoader workers. The
        # `finally` below and _die_with_parent make sure no worker outlives the runner.
        process = context.Process(
            target=_worker, args=(dict(slot), threads, trainer_kwargs, tasks, results), daemon=False
        )
        process.start()
        workers.append(process)
        tasks.put(None)  # one stop sign per worker, queued behind the cells

    # A SIGTERM (e.g. from `timeout`) must not leave orphaned workers training on the GPUs.
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous_handler = signal.signal(signal.SIGTERM, _exit_on_sigterm) if in_main_thread else None
    completed = False
    try:
        _collect(todo, workers, results, record)
        completed = True
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous_handler)
        for process in workers:
            if completed:
                process.join(timeout=30)  # each worker stops at its stop sign
            if process.is_alive():
                process.terminate()
                process.join(timeout=30)
            if process.is_alive():  # e.g. stuck in a CUDA call that ignores SIGTERM
                process.kill()
                process.join()


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _collect(todo, workers, results, record) -> None:
    """Record each worker message until every cell is done or failed."""
    import queue

    running: dict[int, int] = {}  # pid -> cell index
    outstanding = set(range(len(todo)))
    while outstanding:
        try:
            kind, index, payload = results.get(timeout=5.0)
        except queue.Empty:
            alive = {p.pid for p in workers if p.is_alive()}
            for pid, index in list(running.items()):
                if pid not in alive:
                    del running[pid]
                    outstanding.discard(index)
                    record(index, todo[index], None, f"worker process {pid} died while running this cell")
            if not alive and outstanding:
                for index in sorted(outstanding):
                    record(index, todo[index], None, "no worker process left to run this cell")
                outstanding.clear()
            continue
        if kind == "started":
            running[payload] = index
            continue
        running = {pid: i for pid, i in running.items() if i != index}
        outstanding.discard(index)
        # "busy" (another runner has the cell) comes with neither a row nor an error.
        record(index, todo[index], payload if kind == "done" else None, payload if kind == "failed" else None)
