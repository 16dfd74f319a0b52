"""The leaderboard runner on real cells (configs/leaderboard/smoke.yaml: ETTh1, tiny models) and on
the grid's Optuna study, its work queue.

Covers: two worker processes on one SQLite grid run every cell exactly once (one trial per cell),
and a rerun skips finished cells; the rows' numbers (naive reference, run metrics, curves, report,
prediction samples); a worker SIGKILLed mid-cell: another worker retries the cell after the grace
period, from its last checkpoint, in the same command; a SIGKILLed launcher's workers stop and put
their cells back in the queue; two workers on PostgreSQL; importing the committed CSV is idempotent
and exporting it loses or doubles no row; an edited grid queues only its new cells; a cell queued
twice runs once; a failing cell fails once, is not retried by a rerun unless --retry-failed;
--status; a cell running elsewhere is neither run here nor counted against --max-cells, and is
retried when its worker's heartbeat stops; missing dataset files; checkpoint handling, provenance
and prediction samples of single cells.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from damcha_ts.cli.main import main
from damcha_ts.data import get_spec, locate_dataset
from damcha_ts.data.storage import how_to_provide
from damcha_ts.leaderboard.cells import resolve_cell, run_cell
from damcha_ts.leaderboard.grid import load_grid
from damcha_ts.leaderboard.results import LEGACY_COLUMNS, RESULT_COLUMNS, append_result, cell_key, read_results

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "leaderboard" / "smoke.yaml"
TRAFFIC = ROOT / "configs" / "leaderboard" / "traffic.yaml"
ELECTRICITY = ROOT / "configs" / "leaderboard" / "electricity.yaml"
NEURAL = ("itransformer_mha", "itransformer_damcha")
HOST = socket.gethostname()


@pytest.fixture
def one_thread(monkeypatch):
    """The runner keeps torch's thread count when OMP_NUM_THREADS is set; one thread is fastest for
    these tiny models on a shared 2-core machine."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- helpers ---------------------------------------------------------------------------------------


def _naive_reference(dataset: str, method: str, seq_len: int, pred_len: int) -> tuple[float, float]:
    """repeat_last / window_mean test MSE, MAE straight from the CSV, one window at a time."""
    frame = pd.read_csv(locate_dataset(dataset, download=False)).drop(columns="date")
    values = frame.to_numpy(dtype=np.float64)[: 12 * 30 * 24 + 8 * 30 * 24]
    train = values[: 12 * 30 * 24]
    scaled = (values - train.mean(0)) / train.std(0)  # population std, train rows only
    test = scaled[12 * 30 * 24 + 4 * 30 * 24 - seq_len :]
    squared, absolute, count = 0.0, 0.0, 0
    for start in range(len(test) - seq_len - pred_len + 1):
        lookback = test[start : start + seq_len]
        level = lookback[-1] if method == "repeat_last" else lookback.mean(0)
        error = test[start + seq_len : start + seq_len + pred_len] - level
        squared += float((error**2).sum())
        absolute += float(np.abs(error).sum())
        count += error.size
    return squared / count, absolute / count


def _run_cli(args: list, capsys) -> tuple[int, dict, str]:
    """``damcha-ts leaderboard ARGS --json`` in this process: exit code, the JSON summary, stderr."""
    code = main(["leaderboard", *map(str, args), "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def _grid_copy(folder: Path, name: str, **changes) -> Path:
    """smoke.yaml with ``changes`` (top-level keys) as ``folder/name.yaml``; its study is its own,
    since a grid outside the project is named by its file."""
    grid = yaml.safe_load(SMOKE.read_text())
    grid.update(changes)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def _slow_grid(folder: Path, name: str, *, naive: list, models: tuple, epochs: int, train_batches: int) -> Path:
    """A smoke grid whose neural cells train long enough to be caught mid-way."""
    base = yaml.safe_load(SMOKE.read_text())
    return _grid_copy(
        folder, name, naive=naive,
        models=[{"name": model, "config": str(ROOT / f"configs/{model}/etth1.yaml")} for model in models],
        overrides=[*base["overrides"], f"training.max_epochs={epochs}", f"training.patience={epochs}"],
        trainer={"limit_train_batches": train_batches, "limit_val_batches": 4},
    )


def _storage_url(results: Path) -> str:
    return f"sqlite:///{results.parent / 'leaderboard.db'}"


def _study(url: str, grid):
    from damcha_ts.leaderboard.queue import open_grid_study, open_leaderboard_storage

    storage = open_leaderboard_storage(url)
    return open_grid_study(storage, grid.relative_path), storage


def _trials(url: str, grid) -> list:
    return _study(url, grid)[0].get_trials(deepcopy=False)


def _by_cell(trials) -> dict:
    from damcha_ts.leaderboard.queue import trial_key

    cells: dict = {}
    for trial in trials:
        cells.setdefault(trial_key(trial), []).append(trial)
    return cells


def _children(pid: int) -> set[int]:
    try:
        return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except FileNotFoundError:
        return set()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _fake_row(item) -> dict:
    """A result row for a cell, without training (for tests of the runner's bookkeeping)."""
    return {"dataset": item.cell.dataset, "model": item.cell.model, "horizon": item.cell.horizon,
            "seed": item.cell.seed, "mse": 1.0, "mae": 1.0, "config_hash": item.config_hash, "epochs_run": 1,
            "best_epoch": 0, "n_params": 1, "seconds_per_epoch": 1.0, "wall_seconds": 1.0, "versions": "",
            "hardware": "", "grid": item.grid_name, "timestamp": ""}


@pytest.fixture
def fake_cells(monkeypatch):
    """Cells "run" without training (the worker calls ``cells.run_cell``); returns the keys run, in
    order. ``fake_cells.broken`` (model labels) makes those cells raise instead."""
    from damcha_ts.leaderboard import cells as cells_module

    class Fake(list):
        broken: set = set()

    calls = Fake()

    def fake_run_cell(item, trainer_kwargs):
        calls.append(item.key)
        if item.cell.model in calls.broken:
            raise RuntimeError("this cell always fails")
        return _fake_row(item)

    monkeypatch.setattr(cells_module, "run_cell", fake_run_cell)
    return calls


def _quiet(_text: str) -> None:
    pass


# --- many workers, one grid ------------------------------------------------------------------------


def test_two_workers_run_each_cell_once_and_a_rerun_skips_finished_cells(tmp_path, capsys, one_thread):
    results, runs = tmp_path / "results" / "leaderboard.csv", tmp_path / "runs"
    args = ["--config", SMOKE, "--results", results, "--runs-dir", runs]
    grid = load_grid(SMOKE)
    expected = {resolve_cell(c, grid, runs).key for c in grid.cells()}

    # Two worker processes share the first three cells: --max-cells 3 is 2 for one and 1 for the other.
    code, first, err = _run_cli([*args, "--max-cells", 3, "--workers", 2], capsys)
    assert code == 0 and first["planned"] == 4 and first["worker_exit_codes"] == [0, 0]
    assert len(first["ran"]) == 3 and first["remaining"] == 1 and first["already_finished"] == 0
    assert first["storage"] == _storage_url(results) and first["failed"] == first["running_elsewhere"] == []
    pids = re.search(r"2 workers started \(pids (\d+), (\d+)\)", err).groups()
    trials = _trials(_storage_url(results), grid)
    assert len(trials) == 4 and sorted(t.state.name for t in trials) == ["COMPLETE"] * 3 + ["WAITING"]
    # Cells ran in the worker processes (not in the launcher), each worker its share.
    workers = Counter(t.user_attrs["worker"] for t in trials if t.state.name == "COMPLETE")
    assert set(workers) == {f"{HOST}:{pid}" for pid in pids} and sorted(workers.values()) == [1, 2]
    after_first = results.read_bytes()

    code, second, _ = _run_cli([*args, "--workers", 2], capsys)  # one cell left: one worker, in this process
    assert code == 0 and second["already_finished"] == 3 and len(second["ran"]) == 1
    assert second["ran"][0]["model"] == "itransformer_damcha" and second["worker_exit_codes"] == []
    assert results.read_bytes().startswith(after_first)  # finished rows untouched

    code, third, _ = _run_cli(args, capsys)
    assert code == 0 and third["ran"] == [] and third["already_finished"] == 4 and third["remaining"] == 0
    assert third["imported"] == 0  # the CSV's rows are the storage's: nothing to import

    # Exactly the grid's cells, none twice: one COMPLETE trial per cell, nothing else in the study.
    trials = _trials(_storage_url(results), grid)
    per_cell = _by_cell(trials)
    assert len(trials) == 4 and set(per_cell) == expected
    assert all(len(ts) == 1 and ts[0].state.name == "COMPLETE" for ts in per_cell.values())
    rows = read_results(results)
    assert len(rows) == 4 and {cell_key(r) for r in rows} == expected
    by_model = {row["model"]: row for row in rows}
    for trial in trials:  # the CSV row is the trial's row, its value the test MSE
        assert trial.value == by_model[trial.user_attrs["row"]["model"]]["mse"]
    for method in ("repeat_last", "window_mean"):
        mse, mae = _naive_reference("ETTh1", method, 96, 96)
        assert by_model[method]["mse"] == pytest.approx(mse, rel=1e-9)
        assert by_model[method]["mae"] == pytest.approx(mae, rel=1e-9)
    for model in NEURAL:
        row = by_model[model]
        (run_dir,) = (runs / "smoke" / "ETTh1" / model / "H96").glob(f"seed7-{row['config_hash']}")
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert (row["mse"], row["mae"], row["n_params"]) == (metrics["mse"], metrics["mae"], metrics["n_params"])
        assert metrics["test_windows"] == 2785  # every ETTh1 test window at L=96, H=96
        assert row["epochs_run"] == 2 and row["best_epoch"] in (0, 1)
        assert "torch=" in row["versions"] and "threads=" in row["hardware"]

    # Per-epoch curves beside the CSV: the run's logged losses, and the best epoch is the row's.
    curves = {cell_key(c): c for c in json.loads((results.parent / "curves.json").read_text())}
    assert set(curves) == {cell_key(by_model[m]) for m in NEURAL}
    for model in NEURAL:
        row, curve = by_model[model], curves[cell_key(by_model[model])]
        (run_dir,) = (runs / "smoke" / "ETTh1" / model / "H96").glob(f"seed7-{row['config_hash']}")
        logged = pd.read_csv(run_dir / "logs" / "metrics.csv")
        val = logged.dropna(subset=["val_loss"]).sort_values("epoch")
        assert curve["epochs"] == [1, 2] and curve["val_loss"] == pytest.approx(val["val_loss"].tolist())
        assert int(np.argmin(curve["val_loss"])) == row["best_epoch"]
    # Cells finished before curves were kept get them when the report is next regenerated (a run
    # that trains nothing changes no file, so that is --report-only here).
    stored = (results.parent / "curves.json").read_bytes()
    (results.parent / "curves.json").unlink()
    code, fourth, _ = _run_cli([*args, "--report-only"], capsys)
    assert code == 0 and fourth["ran"] == [] and (results.parent / "curves.json").read_bytes() == stored

    report = (results.parent / "LEADERBOARD.md").read_text()
    assert "## ETTh1" in report and "configs/leaderboard/smoke.yaml --only-dataset ETTh1" in report
    assert "(plots/curves_ETTh1.png)" in report
    for png in ("average_mse.png", "forecast_ETTh1.png", "head_metrics_ETTh1_itransformer_damcha.png", "curves_ETTh1.png"):
        assert (results.parent / "plots" / png).stat().st_size > 1000
    sample = np.load(results.parent / "samples" / "ETTh1__itransformer_damcha__H96.npz")
    assert sample["pred"].shape == (4, 96, 7) and sample["head_metrics"].shape == (2, 8, 8)


def test_a_worker_sigkilled_mid_cell_has_its_cell_retried_by_the_other_worker(tmp_path):
    """The killed worker's trial stays RUNNING until its heartbeat is 3 s old; then the other worker,
    waiting while the cell runs elsewhere, fails it as stale and runs the storage's retry copy from the
    run folder's last checkpoint, in the same command."""
    grid_path = _slow_grid(tmp_path, "kill_one", naive=["window_mean"], models=("itransformer_mha",),
                           epochs=4, train_batches=60)
    grid, results, runs = load_grid(grid_path), tmp_path / "leaderboard.csv", tmp_path / "runs"
    (neural,) = [resolve_cell(c, grid, runs) for c in grid.cells() if not c.is_naive]
    command = [sys.executable, "-m", "damcha_ts.cli.main", "leaderboard", "--config", str(grid_path),
               "--results", str(results), "--runs-dir", str(runs), "--workers", "2", "--heartbeat", "1", "--json"]
    launcher = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
    checkpoint = neural.run_dir / "checkpoints" / "last.ckpt"
    victim, killed_at = None, None
    try:
        deadline = time.monotonic() + 180
        while victim is None:  # the worker that claimed the neural cell
            assert launcher.poll() is None and time.monotonic() < deadline, "the neural cell never started"
            if (runs / "smoke" / "workers").is_dir():  # the launcher has set up the storage
                running = [t for t in _trials(_storage_url(results), grid) if t.state.name == "RUNNING"
                           and t.user_attrs["cell"]["model"] == "itransformer_mha" and "worker" in t.user_attrs]
                if running:
                    victim = running[0]
            time.sleep(0.2)
        pid = int(victim.user_attrs["worker"].rsplit(":", 1)[1])
        assert pid in _children(launcher.pid)
        last_size = -1
        while launcher.poll() is None and time.monotonic() < deadline:
            size = checkpoint.stat().st_size if checkpoint.is_file() else -1
            if size > 0 and size == last_size:  # epoch 1 saved: kill inside epoch 2
                os.kill(pid, signal.SIGKILL)
                killed_at = time.monotonic()
                break
            last_size = size
            time.sleep(0.01)
        out, _ = launcher.communicate(timeout=240)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert killed_at is not None, "the cell finished before its worker could be killed mid-way"
    # The command says a worker died (exit 1), yet every cell finished and none failed.
    outcome = json.loads(out)
    assert launcher.returncode == 1 and sorted(outcome["worker_exit_codes"]) == [-signal.SIGKILL, 0]
    assert outcome["failed"] == [] and outcome["remaining"] == 0 and len(outcome["ran"]) == 2

    trials = _by_cell(_trials(_storage_url(results), grid))[neural.key]
    killed, retry = trials
    assert killed.number == victim.number and killed.state.name == "FAIL" and "error" not in killed.user_attrs
    assert retry.state.name == "COMPLETE" and retry.system_attrs["failed_trial"] == killed.number
    assert retry.user_attrs["worker"] != killed.user_attrs["worker"]
    assert retry.datetime_start.timestamp() >= killed.datetime_start.timestamp() + 3  # after the grace period
    logs = "".join(p.read_text() for p in (runs / "smoke" / "workers").glob("worker_*.log"))
    assert f"Restoring states from the checkpoint path at {checkpoint}" in logs

    rows = read_results(results)  # no partial or second row of the killed cell
    assert sorted(row["model"] for row in rows) == ["itransformer_mha", "window_mean"]
    assert len({cell_key(row) for row in rows}) == 2
    (row,) = [row for row in rows if row["model"] == "itransformer_mha"]
    assert row["epochs_run"] == 4 and retry.value == row["mse"]
    # The resumed cell's curve still starts at epoch 1 (Lightning's logger drops the old log on resume).
    curves = [c for c in json.loads((tmp_path / "curves.json").read_text()) if c["model"] == "itransformer_mha"]
    assert [c["epochs"] for c in curves] == [[1, 2, 3, 4]]
    assert not list(tmp_path.glob(".leaderboard.csv.*.tmp"))


def test_workers_stop_with_a_sigkilled_launcher_and_put_their_cells_back(tmp_path, capsys):
    """No orphan may go on training cells nobody waits for (OOM killer, timeout -k): the kernel sends
    the workers SIGTERM, and each puts its cell back in the queue before it exits."""
    grid_path = _slow_grid(tmp_path, "slow", naive=[], models=NEURAL, epochs=50, train_batches=200)
    grid, results, runs = load_grid(grid_path), tmp_path / "lb.csv", tmp_path / "runs"
    command = [sys.executable, "-m", "damcha_ts.cli.main", "leaderboard", "--config", str(grid_path),
               "--workers", "2", "--results", str(results), "--runs-dir", str(runs)]
    launcher = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(list(runs.glob("smoke/ETTh1/*/H96/*/logs"))) < 2:  # both cells training
            assert launcher.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        workers = _children(launcher.pid)
        assert len(workers) == 2
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 60
        while alive := [pid for pid in workers if _alive(pid)]:
            if time.monotonic() > deadline:
                for pid in alive:
                    os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"workers {alive} outlived their launcher")
            time.sleep(0.2)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()

    # Nothing stays RUNNING (it would until the 3-minute grace period): each cell's trial ended FAIL
    # ("interrupted") and a copy of it waits for the next worker.
    per_cell = _by_cell(_trials(_storage_url(results), grid))
    assert len(per_cell) == 2
    for stopped, copy in per_cell.values():
        assert stopped.state.name == "FAIL" and stopped.user_attrs["error"] == "interrupted"
        assert copy.state.name == "WAITING" and copy.system_attrs["failed_trial"] == stopped.number
        assert stopped.user_attrs["worker"] in {f"{HOST}:{pid}" for pid in workers}
    assert read_results(results) == []
    assert main(["leaderboard", "--config", str(grid_path), "--results", str(results), "--status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["done"], status["running"], status["waiting"], status["failed"]) == (0, [], 2, [])


def test_a_sigterm_to_a_run_in_this_process_puts_the_cell_back_and_keeps_the_rows(tmp_path, monkeypatch):
    """One worker in the command's own process (the CPU default, a SLURM task): `timeout`'s SIGTERM
    puts the cell in hand back in the queue, and the rows finished before it are in the CSV."""
    from damcha_ts.leaderboard import cells as cells_module
    from damcha_ts.leaderboard.runner import run_leaderboard

    grid, results, runs = load_grid(SMOKE), tmp_path / "lb.csv", tmp_path / "runs"
    naive = ("repeat_last", "window_mean")
    stopped_cell = next(resolve_cell(c, grid, runs) for c in grid.cells(only_models=("window_mean",)))

    def terminated_at_the_second(item, trainer_kwargs):
        if item.cell.model == "repeat_last":
            return _fake_row(item)
        os.kill(os.getpid(), signal.SIGTERM)  # `timeout`, as the budget ends
        time.sleep(5)
        raise AssertionError("the SIGTERM did not stop the cell")

    def unhandled(signum, frame):
        raise AssertionError("SIGTERM reached the default action: the process would have died, cell RUNNING")

    monkeypatch.setattr(cells_module, "run_cell", terminated_at_the_second)
    previous = signal.signal(signal.SIGTERM, unhandled)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_leaderboard(grid, results, runs_dir=runs, only_models=naive, workers=1, log=_quiet)
        assert signal.getsignal(signal.SIGTERM) is unhandled  # the runner's handler is gone again
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [row["model"] for row in read_results(results)] == ["repeat_last"]  # exported before the stop
    stopped, copy = _by_cell(_trials(_storage_url(results), grid))[stopped_cell.key]
    assert stopped.state.name == "FAIL" and stopped.user_attrs["error"] == "interrupted"
    assert copy.state.name == "WAITING" and copy.system_attrs["failed_trial"] == stopped.number

    monkeypatch.setattr(cells_module, "run_cell", lambda item, trainer_kwargs: _fake_row(item))
    run = run_leaderboard(grid, results, runs_dir=runs, only_models=naive, log=_quiet)
    assert [row["model"] for row in run.ran] == ["window_mean"] and run.failed == run.failed_before == []
    assert sorted(row["model"] for row in read_results(results)) == sorted(naive)


def test_a_run_with_nothing_to_run_exports_the_cells_finished_elsewhere(tmp_path, fake_cells):
    """Machine A finishes the grid on a shared storage; machine B's checkout has no row yet: B's run
    trains nothing and its CSV gets every row."""
    from damcha_ts.leaderboard.runner import run_leaderboard

    grid, shared = load_grid(SMOKE), f"sqlite:///{tmp_path / 'shared.db'}"
    machine_a, machine_b = tmp_path / "a" / "lb.csv", tmp_path / "b" / "lb.csv"
    run_leaderboard(grid, machine_a, runs_dir=tmp_path / "runs", storage=shared, log=_quiet)
    ran_on_a = len(fake_cells)
    run = run_leaderboard(grid, machine_b, runs_dir=tmp_path / "runs", storage=shared, log=_quiet)
    assert len(fake_cells) == ran_on_a == 4 and run.ran == [] and run.exported == 4
    assert read_results(machine_b) == read_results(machine_a)
    # A results file of another grid on the same storage gets none of these rows.
    other = load_grid(_grid_copy(tmp_path, "other", naive=["repeat_last"]))
    elsewhere = run_leaderboard(other, tmp_path / "c" / "lb.csv", runs_dir=tmp_path / "runs", storage=shared,
                                only_models=("repeat_last",), log=_quiet)
    assert {row["grid"] for row in read_results(tmp_path / "c" / "lb.csv")} == {other.relative_path}
    assert elsewhere.exported == 1


def test_a_csv_row_without_a_score_counts_as_done(tmp_path, fake_cells):
    """The storage cannot hold a row without a finite MSE; the CSV's row still means the cell is done."""
    from damcha_ts.leaderboard.runner import leaderboard_status, run_leaderboard

    grid, results, runs = load_grid(SMOKE), tmp_path / "lb.csv", tmp_path / "runs"
    (item,) = [resolve_cell(c, grid, runs) for c in grid.cells(only_models=("repeat_last",))]
    append_result(results, {**_fake_row(item), "mse": float("nan")})
    run = run_leaderboard(grid, results, runs_dir=runs, only_models=("repeat_last",), log=_quiet)
    assert fake_cells == [] and run.already_finished == 1 and run.remaining == 0
    assert leaderboard_status(grid, results, runs_dir=runs, only_models=("repeat_last",))["done"] == 1


def test_a_cell_whose_retry_was_lost_is_queued_again(tmp_path, fake_cells):
    """A worker killed while failing stale trials (Optuna fails them, then queues the copies) leaves a
    cell FAILED with no error and no copy: the next run queues it again, within max_retry."""
    from optuna.trial import TrialState

    from damcha_ts.leaderboard.runner import run_leaderboard
    from damcha_ts.workqueue.queue import StudyQueue

    grid, results, runs = load_grid(SMOKE), tmp_path / "lb.csv", tmp_path / "runs"
    run_leaderboard(grid, results, runs_dir=runs, only_models=("repeat_last",), max_cells=0, log=_quiet)
    study, storage = _study(_storage_url(results), grid)
    queue = StudyQueue(study, storage)
    trial = queue.claim()
    storage.set_trial_state_values(trial, TrialState.FAIL)  # stale, and the copy never made
    run = run_leaderboard(grid, results, runs_dir=runs, only_models=("repeat_last",), log=_quiet)
    assert [row["model"] for row in run.ran] == ["repeat_last"] and run.failed_before == []


def test_two_workers_share_a_grid_on_postgresql(tmp_path, capsys, postgres_url):
    """The storage for many machines: the cells, their claims and rows live in the PostgreSQL server."""
    import sqlalchemy

    from damcha_ts.leaderboard.runner import run_leaderboard

    # The server's database outlives this test (CI's); a uniquely named grid has a study of its own.
    grid_path = _grid_copy(tmp_path, f"postgres_{uuid.uuid4().hex[:12]}", horizons=[96, 192])
    grid, results, runs = load_grid(grid_path), tmp_path / "lb.csv", tmp_path / "runs"
    naive = ("repeat_last", "window_mean")  # four cells of seconds each
    expected = {resolve_cell(c, grid, runs).key for c in grid.cells(only_models=naive)}
    lines: list[str] = []
    run = run_leaderboard(grid, results, runs_dir=runs, storage=postgres_url, workers=2, only_models=naive,
                          log=lines.append)
    assert run.worker_exit_codes == [0, 0] and run.failed == [] and len(run.ran) == 4 and run.remaining == 0
    assert run.storage == postgres_url and not (tmp_path / "leaderboard.db").exists()
    pids = re.search(r"2 workers started \(pids (\d+), (\d+)\)", "\n".join(lines)).groups()

    trials = _trials(postgres_url, grid)
    per_cell = _by_cell(trials)
    assert len(trials) == 4 and set(per_cell) == expected
    assert all(len(ts) == 1 and ts[0].state.name == "COMPLETE" for ts in per_cell.values())
    assert {t.user_attrs["worker"] for t in trials} <= {f"{HOST}:{pid}" for pid in pids}
    rows = read_results(results)
    assert len(rows) == 4 and {cell_key(r) for r in rows} == expected
    engine = sqlalchemy.create_engine(postgres_url)
    with engine.connect() as connection:  # the trials really live in the server
        stored = connection.execute(
            sqlalchemy.text("SELECT count(*) FROM trials JOIN studies ON studies.study_id = trials.study_id "
                            "WHERE studies.study_name = :name"),
            {"name": "leaderboard:" + grid.relative_path},
        ).scalar()
    engine.dispose()
    assert stored == 4
    # Another machine (another results file, without these rows) sees the cells done in the storage.
    assert main(["leaderboard", "--config", str(grid_path), "--results", str(tmp_path / "other" / "lb.csv"),
                 "--storage", postgres_url, "--only-model", *naive, "--status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["cells"], status["done"], status["waiting"], status["not_queued"]) == (4, 4, 0, 0)


# --- the storage and the CSV -----------------------------------------------------------------------


def test_importing_the_committed_csv_is_idempotent_and_exporting_it_loses_no_row(tmp_path):
    import shutil

    from damcha_ts.leaderboard.queue import export_results, open_leaderboard_storage
    from damcha_ts.leaderboard.runner import import_committed

    committed = ROOT / "benchmarks" / "results"
    copy = tmp_path / "copy" / "leaderboard.csv"
    copy.parent.mkdir()
    for name in ("leaderboard.csv", "curves.json"):
        shutil.copy(committed / name, copy.parent / name)
    original, original_curves = copy.read_bytes(), (copy.parent / "curves.json").read_bytes()
    lines = original.decode().splitlines()
    assert len(lines) > 100  # the committed leaderboard, many grids

    storage = open_leaderboard_storage(f"sqlite:///{tmp_path / 'fresh.db'}")
    assert import_committed(storage, copy) == len(lines) - 1
    assert import_committed(storage, copy) == 0  # a second import adds nothing

    exported = tmp_path / "exported" / "leaderboard.csv"
    grids = {row["grid"] for row in read_results(copy)}
    assert export_results(storage, exported, grids) == len(lines) - 1
    new_lines = exported.read_text().splitlines()
    if lines[0] == ",".join(LEGACY_COLUMNS):  # committed before the scale-free columns: exported with them, empty
        lines = [",".join(RESULT_COLUMNS), *(line + ",," for line in lines[1:])]
    assert new_lines[0] == lines[0] and Counter(new_lines) == Counter(lines)  # no row lost or doubled
    curves = json.loads((exported.parent / "curves.json").read_text())
    assert Counter(json.dumps(c, sort_keys=True) for c in curves) == \
        Counter(json.dumps(c, sort_keys=True) for c in json.loads(original_curves))

    # Exporting over the CSV the storage came from adds nothing and rewrites nothing.
    assert export_results(storage, copy, []) == 0
    assert copy.read_bytes() == original and (copy.parent / "curves.json").read_bytes() == original_curves


def test_an_edited_grid_queues_only_its_new_cells(tmp_path, fake_cells):
    from damcha_ts.leaderboard.runner import run_leaderboard

    results, runs = tmp_path / "lb.csv", tmp_path / "runs"
    grid_path = _grid_copy(tmp_path, "edited")
    first = run_leaderboard(load_grid(grid_path), results, runs_dir=runs, log=_quiet)
    assert len(first.ran) == 4 and len(fake_cells) == 4

    _grid_copy(tmp_path, "edited", seeds=[7, 8])  # a second seed of both neural models
    grid = load_grid(grid_path)
    fake_cells.clear()
    second = run_leaderboard(grid, results, runs_dir=runs, log=_quiet)
    new = [resolve_cell(c, grid, runs).key for c in grid.cells() if c.seed == 8]
    assert fake_cells == new and [(r["model"], r["seed"]) for r in second.ran] == [(m, 8) for m in NEURAL]
    assert second.planned == 6 and second.already_finished == 4 and second.remaining == 0
    trials = _trials(_storage_url(results), grid)
    assert len(trials) == 6 and all(len(ts) == 1 for ts in _by_cell(trials).values())
    assert len(read_results(results)) == 6


def test_a_cell_enqueued_twice_runs_once(tmp_path, fake_cells):
    """Two machines enqueueing a new cell at the same moment may both add it; it still runs once."""
    from damcha_ts.leaderboard.queue import CELL_ATTR, DUPLICATE_ATTR, duplicate_of
    from damcha_ts.leaderboard.runner import run_leaderboard
    from damcha_ts.leaderboard.results import key_fields
    from damcha_ts.workqueue.queue import StudyQueue

    grid, results, runs = load_grid(SMOKE), tmp_path / "lb.csv", tmp_path / "runs"
    naive = grid.cells(only_models=("repeat_last", "window_mean"))
    repeat_last, window_mean = [resolve_cell(c, grid, runs) for c in naive]
    study, storage = _study(_storage_url(results), grid)
    for _ in range(2):
        study.enqueue_trial({}, user_attrs={CELL_ATTR: key_fields(repeat_last.key)})

    run = run_leaderboard(grid, results, runs_dir=runs, only_models=("repeat_last",), log=_quiet)
    assert fake_cells == [repeat_last.key] and len(run.ran) == 1 and run.failed == [] and run.remaining == 0
    kept, duplicate = study.get_trials(deepcopy=False)
    assert kept.state.name == "COMPLETE" and DUPLICATE_ATTR not in kept.user_attrs
    assert duplicate.state.name == "FAIL" and duplicate.user_attrs[DUPLICATE_ATTR] == kept.number
    assert [row["model"] for row in read_results(results)] == ["repeat_last"]

    # Both copies claimed at once (by two workers): both see the same start times, so exactly one
    # of them goes on, the one that started first.
    for _ in range(2):
        study.enqueue_trial({}, user_attrs={CELL_ATTR: key_fields(window_mean.key)})
    queue = StudyQueue(study, storage)
    claimed = [storage.get_trial(queue.claim()) for _ in range(2)]
    assert duplicate_of(study, claimed[0]) is None and duplicate_of(study, claimed[1]) == claimed[0].number


def test_a_failing_cell_fails_once_and_only_retry_failed_runs_it_again(tmp_path, capsys, fake_cells):
    results, runs = tmp_path / "lb.csv", tmp_path / "runs"
    args = ["--config", SMOKE, "--results", results, "--runs-dir", runs, "--only-model", *NEURAL]
    grid = load_grid(SMOKE)
    broken = resolve_cell(next(c for c in grid.cells() if c.model == "itransformer_mha"), grid, runs)
    fake_cells.broken = {"itransformer_mha"}  # first in grid order

    code, first, err = _run_cli(args, capsys)
    assert code == 1 and [row["model"] for row in first["ran"]] == ["itransformer_damcha"]  # the grid goes on
    (failure,) = first["failed"]
    assert failure["cell"] == broken.cell.describe() and "Traceback" in failure["error"]
    assert "RuntimeError: this cell always fails" in failure["error"] and "this cell always fails" in err
    assert first["remaining"] == 1 and fake_cells.count(broken.key) == 1

    code, second, err = _run_cli(args, capsys)  # a rerun does not try it again, and still says it failed
    assert code == 1 and second["ran"] == second["failed"] == [] and fake_cells.count(broken.key) == 1
    assert [item["cell"] for item in second["failed_before"]] == [broken.cell.describe()]
    assert "this cell always fails" in second["failed_before"][0]["error"] and "--retry-failed" in err
    assert second["remaining"] == 1 and second["already_finished"] == 1

    fake_cells.broken = set()  # the cause is fixed
    code, third, _ = _run_cli([*args, "--retry-failed"], capsys)
    assert code == 0 and [row["model"] for row in third["ran"]] == ["itransformer_mha"]
    assert third["failed_before"] == third["failed"] == [] and third["remaining"] == 0
    failed, retried = _by_cell(_trials(_storage_url(results), grid))[broken.key]
    assert failed.state.name == "FAIL" and "this cell always fails" in failed.user_attrs["error"]
    assert retried.state.name == "COMPLETE"
    assert sorted(row["model"] for row in read_results(results)) == sorted(NEURAL)


def test_status_says_where_every_cell_stands(tmp_path, capsys):
    from damcha_ts.leaderboard.queue import ROW_ATTR, enqueue_cells, stored_row, trial_key
    from damcha_ts.workqueue.queue import StudyQueue

    grid_path = _grid_copy(tmp_path, "status", seeds=[7, 8])
    grid, results, runs = load_grid(grid_path), tmp_path / "lb.csv", tmp_path / "runs"
    done, running, failed, waiting, *not_queued = [resolve_cell(c, grid, runs) for c in grid.cells()]
    study, storage = _study(_storage_url(results), grid)
    enqueue_cells(study, [done, running, failed, waiting])
    queue = StudyQueue(study, storage)

    def claim(item):
        return queue.claim(lambda frozen: trial_key(frozen) == item.key)

    queue.run(claim(done), lambda handle: handle.set_user_attr(ROW_ATTR, stored_row(_fake_row(done))) or 1.0)
    storage.record_heartbeat(claim(running))
    queue.fail(claim(failed), "Traceback (most recent call last):\nRuntimeError: out of memory\n")

    args = ["leaderboard", "--config", str(grid_path), "--results", str(results), "--runs-dir", str(runs), "--status"]
    assert main([*args, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["grid"], status["storage"], status["cells"]) == (grid.relative_path, _storage_url(results), 6)
    assert (status["done"], status["waiting"], status["not_queued"]) == (1, 1, 2)
    assert [(r["cell"], r["worker"]) for r in status["running"]] == [(running.cell.describe(), f"{HOST}:{os.getpid()}")]
    assert [f["cell"] for f in status["failed"]] == [failed.cell.describe()]
    assert status["failed"][0]["error"].endswith("RuntimeError: out of memory\n")

    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"{grid.relative_path} ({_storage_url(results)}): 6 cells: 1 done, 1 running, 1 waiting, "
                        "1 failed, 2 not queued yet")
    assert lines[1].startswith(f"  running  {running.cell.describe()} on {HOST}:{os.getpid()} since ")
    assert lines[2] == f"  failed   {failed.cell.describe()}: RuntimeError: out of memory"
    # Read only: nothing was queued, run or written.
    assert len(study.get_trials(deepcopy=False)) == 4 and not results.exists()
    assert not (tmp_path / "LEADERBOARD.md").exists() and not runs.exists()


def test_a_cell_running_elsewhere_is_not_run_here_nor_counted_against_max_cells(tmp_path, fake_cells, monkeypatch):
    """Another worker (this test process) holds the first cell: a runner with --max-cells 1 and
    --no-wait takes the next cell instead. When that worker's heartbeat stops, a waiting runner
    retries the cell."""
    from damcha_ts.leaderboard import worker as worker_module
    from damcha_ts.leaderboard.queue import QueueSettings, enqueue_cells, trial_key
    from damcha_ts.leaderboard.runner import run_leaderboard
    from damcha_ts.workqueue.queue import StudyQueue

    grid, results, runs = load_grid(SMOKE), tmp_path / "lb.csv", tmp_path / "runs"
    first, second = [resolve_cell(c, grid, runs) for c in grid.cells(only_models=NEURAL)]
    study, storage = _study(_storage_url(results), grid)
    enqueue_cells(study, [first, second])
    queue = StudyQueue(study, storage)
    held = queue.claim(lambda frozen: trial_key(frozen) == first.key)
    storage.record_heartbeat(held)

    run = run_leaderboard(grid, results, runs_dir=runs, only_models=NEURAL, max_cells=1, wait=False, log=_quiet)
    assert fake_cells == [second.key] and [(r["model"], r["seed"]) for r in run.ran] == [(second.cell.model, 7)]
    assert run.running_elsewhere == [first.cell.describe()] and run.failed == [] and run.remaining == 1
    assert storage.get_trial(held).state.name == "RUNNING"  # untouched: its heartbeat is fresh

    # The other worker dies (no heartbeat after the one above): after the grace period a runner that
    # waits for cells running elsewhere fails it as stale and runs the retry copy.
    monkeypatch.setattr(worker_module, "POLL_SECONDS", 0.2)
    run = run_leaderboard(grid, results, runs_dir=runs, only_models=NEURAL, settings=QueueSettings(1, 2),
                          log=_quiet)
    assert fake_cells == [second.key, first.key] and [r["model"] for r in run.ran] == [first.cell.model]
    assert run.running_elsewhere == [] and run.remaining == 0
    stale, retry = _by_cell(study.get_trials(deepcopy=False))[first.key]
    assert stale.state.name == "FAIL" and retry.state.name == "COMPLETE"
    assert retry.system_attrs["failed_trial"] == stale.number


def test_worker_counts_and_max_cells_shares():
    from damcha_ts.errors import ConfigError
    from damcha_ts.leaderboard.runner import _shares, _worker_count

    assert _worker_count(4, 10, None) == 4
    assert _worker_count(4, 2, None) == 2  # never more workers than cells to run
    assert _worker_count(4, 10, 3) == 3 and _worker_count(2, 0, None) == 1
    assert _worker_count(None, 5, None) == 1  # no GPU here: one worker
    with pytest.raises(ConfigError, match="--workers"):
        _worker_count(0, 5, None)
    assert _shares(5, 2) == [3, 2] and _shares(1, 2) == [1, 0] and _shares(None, 3) == [None] * 3


# --- datasets, reports, arguments ------------------------------------------------------------------


def test_missing_dataset_files_are_named_with_how_to_provide_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DAMCHA_TS_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("DAMCHA_TS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "empty").mkdir()
    results = tmp_path / "leaderboard.csv"
    code = main(["leaderboard", "--config", str(TRAFFIC), "--config", str(ELECTRICITY), "--results", str(results),
                 "--runs-dir", str(tmp_path / "runs"), "--no-download", "--json"])
    captured = capsys.readouterr()
    assert code == 0
    outcome = json.loads(captured.out)
    assert outcome["ran"] == [] and outcome["failed"] == [] and outcome["remaining"] == 0
    missing = {m["dataset"]: m for m in outcome["missing_datasets"]}
    assert sorted(missing) == ["Electricity", "Traffic"]
    for dataset, filename, shape in (("Traffic", "traffic.csv", "17544 rows x 862 variates"),
                                     ("Electricity", "electricity.csv", "26304 rows x 321 variates")):
        assert (missing[dataset]["filename"], missing[dataset]["cells"]) == (filename, 16)
        message = missing[dataset]["message"]
        for text in (filename, "DAMCHA_TS_DATA", "--data-dir", get_spec(dataset).sha256, shape):
            assert text in message and text in captured.err
        # The data layer's advice, said once (not again in the details of its error).
        assert message.count(how_to_provide(get_spec(dataset))) == 1
    assert read_results(results) == []
    # Nothing ran, so no file was written; --report-only writes the report with the missing files' notes.
    assert outcome["report"] is None and not (tmp_path / "LEADERBOARD.md").exists()
    assert main(["leaderboard", "--config", str(TRAFFIC), "--config", str(ELECTRICITY), "--results", str(results),
                 "--runs-dir", str(tmp_path / "runs"), "--report-only"]) == 0
    report = (tmp_path / "LEADERBOARD.md").read_text()
    for dataset, filename in (("Traffic", "traffic.csv"), ("Electricity", "electricity.csv")):
        assert f"## {dataset}" in report and f"Data: `{filename}` was not found" in report
    assert "- itransformer_damcha: H=96 seed 2023, H=192 seed 2023, H=336 seed 2023, H=720 seed 2023" in report


def test_a_finished_grid_reruns_without_its_dataset_file(tmp_path, monkeypatch):
    """Rows merged from another machine: imported into the storage, nothing is left to run, so the
    file is not needed."""
    from damcha_ts.leaderboard.runner import run_leaderboard

    grid, results, runs = load_grid(SMOKE), tmp_path / "lb.csv", tmp_path / "runs"
    for item in (resolve_cell(c, grid, runs) for c in grid.cells()):
        append_result(results, _fake_row(item))
    monkeypatch.setenv("DAMCHA_TS_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("DAMCHA_TS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "empty").mkdir()
    run = run_leaderboard(grid, results, runs_dir=runs, download=False, log=_quiet)
    assert run.missing_datasets == [] and run.already_finished == len(grid.cells()) and run.remaining == 0
    assert run.imported == len(grid.cells()) and run.ran == []


def test_a_report_that_fails_after_cells_ran_keeps_their_rows_and_the_summary(tmp_path, capsys, monkeypatch,
                                                                             fake_cells):
    from damcha_ts.leaderboard import report as report_module

    def broken_report(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(report_module, "write_report", broken_report)
    results = tmp_path / "lb.csv"
    base = ["leaderboard", "--config", str(SMOKE), "--results", str(results), "--runs-dir", str(tmp_path / "runs")]
    code = main([*base, "--only-model", "repeat_last", "--json"])
    captured = capsys.readouterr()
    outcome = json.loads(captured.out)
    assert code == 1 and len(outcome["ran"]) == 1 and outcome["report_error"] == "OSError: disk full"
    assert "--report-only" in captured.err and [row["model"] for row in read_results(results)] == ["repeat_last"]
    # With nothing run, the report is the whole job: its error is the command's (one line, exit 2).
    assert main([*base, "--report-only"]) == 2
    assert capsys.readouterr().err.strip() == "damcha-ts: error: disk full"


def test_bad_arguments_are_named(tmp_path, capsys):
    base = ["leaderboard", "--config", str(SMOKE), "--results", str(tmp_path / "r.csv"), "--runs-dir", str(tmp_path)]
    assert main([*base, "--only-dataset", "Weather"]) == 2
    assert "--only-dataset Weather" in capsys.readouterr().err
    assert main([*base, "--only-dataset", "ETTh9"]) == 2
    assert "ETTh1" in capsys.readouterr().err  # the registry suggests the close name
    assert main([*base, "--only-model", "itransformer_dmacha"]) == 2
    err = capsys.readouterr().err
    assert "--only-model itransformer_dmacha" in err and "itransformer_damcha" in err
    for flag, value in (("--max-cells", "-1"), ("--workers", "0"), ("--heartbeat", "0")):
        assert main([*base, flag, value]) == 2
        assert flag in capsys.readouterr().err
    assert main([*base, "--storage", "sqlite:///:memory:"]) == 2
    assert "in-memory SQLite" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # refused before anything was written


# --- single cells: checkpoints, provenance, samples ------------------------------------------------


def _one_cell_grid(folder: Path) -> Path:
    """smoke.yaml cut down to one naive and one neural cell."""
    return _grid_copy(folder, "one_cell", naive=["window_mean"],
                      models=[{"name": "itransformer_mha", "config": str(ROOT / "configs/itransformer_mha/etth1.yaml")}])


def test_a_cell_finished_meanwhile_is_not_trained_again(tmp_path, monkeypatch, one_thread):
    """A worker may die after its cell's run finished and before its trial was told; the retry then
    finds the result in the run folder and uses it as it is."""
    import damcha_ts.forecasting.experiment as experiment

    grid_path = _one_cell_grid(tmp_path)
    grid, runs = load_grid(grid_path), tmp_path / "runs"
    (neural,) = [resolve_cell(c, grid, runs) for c in grid.cells() if not c.is_naive]
    first = run_cell(neural, {})
    checkpoint = neural.run_dir / "checkpoints" / "last.ckpt"
    written = checkpoint.stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")

    monkeypatch.setattr(experiment, "run_experiment", no_training)
    again = run_cell(neural, {})
    assert {k: again[k] for k in ("mse", "mae", "epochs_run", "best_epoch", "n_params", "wall_seconds")} == \
        {k: first[k] for k in ("mse", "mae", "epochs_run", "best_epoch", "n_params", "wall_seconds")}
    assert checkpoint.stat().st_mtime_ns == written

    # A folder whose run did not get as far as its metrics trains as before.
    (neural.run_dir / "metrics.json").unlink()
    with pytest.raises(AssertionError, match="trained again"):
        run_cell(neural, {})


def test_a_checkpoint_cut_off_mid_write_is_dropped_and_an_intact_one_kept(tmp_path):
    from damcha_ts.leaderboard.cells import _drop_unreadable_checkpoint, checkpointed_epochs

    intact, cut = tmp_path / "intact", tmp_path / "cut"
    for run_dir in (intact, cut):
        (run_dir / "checkpoints").mkdir(parents=True)
        torch.save({"epoch": 2, "state_dict": {"w": torch.randn(256, 256)}, "callbacks": {}}, run_dir / "checkpoints" / "last.ckpt")
    data = (cut / "checkpoints" / "last.ckpt").read_bytes()
    (cut / "checkpoints" / "last.ckpt").write_bytes(data[: len(data) // 2])  # a kill mid-write
    assert checkpointed_epochs(intact) == 3 and checkpointed_epochs(cut) == 0
    for run_dir in (intact, cut):
        _drop_unreadable_checkpoint(run_dir)
    assert (intact / "checkpoints" / "last.ckpt").is_file()
    assert not (cut / "checkpoints" / "last.ckpt").exists()


def test_a_prediction_sample_that_cannot_be_written_does_not_cost_the_result(tmp_path, monkeypatch, capsys, one_thread):
    from damcha_ts.leaderboard import cells as cells_module

    def broken_sample(config, run_dir):
        raise OSError("disk full")

    monkeypatch.setattr(cells_module, "save_prediction_sample", broken_sample)
    grid = load_grid(SMOKE)
    item = resolve_cell(next(c for c in grid.cells() if c.model == "itransformer_mha"), grid, tmp_path)
    row = run_cell(item, {"accelerator": "cpu", "devices": 1})
    assert row["model"] == "itransformer_mha" and np.isfinite(row["mse"])
    assert "prediction sample not saved (OSError: disk full)" in capsys.readouterr().err


def test_a_row_written_from_a_finished_folder_says_where_the_cell_trained(tmp_path, one_thread):
    """A cell finished by a worker that died before telling its trial keeps the versions and hardware
    of the process that trained it, not of the one that writes its row."""
    from damcha_ts.leaderboard.cells import PROVENANCE_FILE

    grid = load_grid(SMOKE)
    item = resolve_cell(next(c for c in grid.cells() if c.model == "itransformer_mha"), grid, tmp_path)
    first = run_cell(item, {"accelerator": "cpu", "devices": 1})
    recorded = json.loads((item.run_dir / PROVENANCE_FILE).read_text())
    assert (first["versions"], first["hardware"], first["timestamp"]) == (
        recorded["versions"], recorded["hardware"], recorded["timestamp"])
    trained_elsewhere = {**recorded, "hardware": "gpu=NVIDIA H200 cpu=Intel Xeon threads=16"}
    (item.run_dir / PROVENANCE_FILE).write_text(json.dumps(trained_elsewhere))
    again = run_cell(item, {"accelerator": "cpu", "devices": 1})  # reused from the folder, not trained
    assert again["mse"] == first["mse"] and again["hardware"] == "gpu=NVIDIA H200 cpu=Intel Xeon threads=16"


def test_a_grid_runs_baselines_as_models_beside_the_naive_methods(tmp_path, one_thread):
    """``models: [{name: naive}, {name: seasonal_naive}]`` are cells of the shipped baseline configs,
    run like any model (validated, tested, saved); ``naive`` scores exactly as the naive method
    ``repeat_last`` of the same cells."""
    grid_path = tmp_path / "baselines.yaml"
    grid_path.write_text(yaml.safe_dump({
        "name": "baselines", "horizons": [24], "seeds": [1], "naive": ["repeat_last"],
        "models": [{"name": "naive"}, {"name": "seasonal_naive"}], "datasets": {"ETTh1": {}},
    }))
    grid = load_grid(grid_path)
    cells = {c.model: resolve_cell(c, grid, tmp_path / "runs") for c in grid.cells()}
    assert cells["naive"].cell.config_path == ROOT / "configs" / "baselines" / "etth1.yaml"
    results = {name: run_cell(cell, {}) for name, cell in cells.items()}
    assert results["naive"]["mse"] == pytest.approx(results["repeat_last"]["mse"], rel=1e-6)
    assert results["naive"]["mae"] == pytest.approx(results["repeat_last"]["mae"], rel=1e-6)
    assert results["naive"]["n_params"] == 0 and results["naive"]["epochs_run"] == 0
    saved = yaml.safe_load((cells["seasonal_naive"].run_dir / "model" / "forecaster.json").read_text())
    assert saved["model"]["season_length"] == 24  # ETTh1 is hourly: the data decided the season at fit
    assert results["seasonal_naive"]["mse"] < results["naive"]["mse"]  # a daily cycle: the season helps
