"""The leaderboard runner on real cells (configs/leaderboard/smoke.yaml: ETTh1, tiny models).

Covers: a rerun skips finished cells; SIGKILL mid-cell loses only that cell and the CSV stays valid,
the rerun resumes it from its last checkpoint; a missing dataset file is reported and skipped; the
per-device worker pool (the CUDA path) runs cells in spawned processes and reports failures.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from damcha_ts.cli.main import main
from damcha_ts.data import get_spec, locate_dataset
from damcha_ts.data.storage import how_to_provide
from damcha_ts.leaderboard.cells import ResolvedCell, resolve_cell, run_cell
from damcha_ts.leaderboard.grid import Cell, load_grid
from damcha_ts.leaderboard.results import append_result, cell_key, read_results
from damcha_ts.leaderboard.runner import run_in_workers

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "leaderboard" / "smoke.yaml"
TRAFFIC = ROOT / "configs" / "leaderboard" / "traffic.yaml"
ELECTRICITY = ROOT / "configs" / "leaderboard" / "electricity.yaml"


@pytest.fixture
def one_thread(monkeypatch):
    """The runner keeps torch's thread count when OMP_NUM_THREADS is set; one thread is fastest for
    these tiny models on a shared 2-core machine."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


def _run_cli(args: list[str], capsys) -> tuple[int, dict]:
    code = main(["leaderboard", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_rerun_skips_finished_cells_and_rows_trace_to_runs(tmp_path, capsys, one_thread):
    results, runs = tmp_path / "results" / "leaderboard.csv", tmp_path / "runs"
    args = ["--config", str(SMOKE), "--results", str(results), "--runs-dir", str(runs)]

    # Two CPU worker processes share the first three cells (the parent alone writes the CSV).
    code, first = _run_cli([*args, "--max-cells", "3", "--cpu-jobs", "2"], capsys)
    assert code == 0 and first["planned"] == 4
    assert len(first["ran"]) == 3 and first["remaining"] == 1 and first["already_finished"] == 0
    after_first = results.read_bytes()

    code, second = _run_cli(args, capsys)
    assert code == 0 and second["already_finished"] == 3 and len(second["ran"]) == 1
    assert second["ran"][0]["model"] == "itransformer_damcha"
    assert results.read_bytes().startswith(after_first)  # finished rows untouched

    code, third = _run_cli(args, capsys)
    assert code == 0 and third["ran"] == [] and third["already_finished"] == 4 and third["remaining"] == 0

    rows = read_results(results)
    assert len(rows) == 4 and len({cell_key(r) for r in rows}) == 4
    by_model = {row["model"]: row for row in rows}
    for method in ("repeat_last", "window_mean"):
        mse, mae = _naive_reference("ETTh1", method, 96, 96)
        assert by_model[method]["mse"] == pytest.approx(mse, rel=1e-9)
        assert by_model[method]["mae"] == pytest.approx(mae, rel=1e-9)
    for model in ("itransformer_mha", "itransformer_damcha"):
        row = by_model[model]
        (run_dir,) = (runs / "smoke" / "ETTh1" / model / "H96").glob(f"seed7-{row['config_hash']}")
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert (row["mse"], row["mae"], row["n_params"]) == (metrics["mse"], metrics["mae"], metrics["n_params"])
        assert metrics["test_windows"] == 2785  # every ETTh1 test window at L=96, H=96
        assert row["epochs_run"] == 2 and row["best_epoch"] in (0, 1)
        assert "torch=" in row["versions"] and "threads=" in row["hardware"]

    # Per-epoch curves beside the CSV: the run's logged losses, and the best epoch is the row's.
    curves = {cell_key(c): c for c in json.loads((results.parent / "curves.json").read_text())}
    assert set(curves) == {cell_key(by_model[m]) for m in ("itransformer_mha", "itransformer_damcha")}
    for model in ("itransformer_mha", "itransformer_damcha"):
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
    code, fourth = _run_cli([*args, "--report-only"], capsys)
    assert code == 0 and fourth["ran"] == [] and (results.parent / "curves.json").read_bytes() == stored

    report = (results.parent / "LEADERBOARD.md").read_text()
    assert "## ETTh1" in report and "configs/leaderboard/smoke.yaml --only-dataset ETTh1" in report
    assert "(plots/curves_ETTh1.png)" in report
    for png in ("average_mse.png", "forecast_ETTh1.png", "head_metrics_ETTh1_itransformer_damcha.png", "curves_ETTh1.png"):
        assert (results.parent / "plots" / png).stat().st_size > 1000
    sample = np.load(results.parent / "samples" / "ETTh1__itransformer_damcha__H96.npz")
    assert sample["pred"].shape == (4, 96, 7) and sample["head_metrics"].shape == (2, 8, 8)


def _one_cell_grid(folder: Path) -> Path:
    """smoke.yaml cut down to one naive and one neural cell, so the kill test trains little."""
    import yaml

    grid = yaml.safe_load(SMOKE.read_text())
    grid["naive"] = ["window_mean"]
    grid["models"] = [{"name": "itransformer_mha", "config": str(ROOT / "configs/itransformer_mha/etth1.yaml")}]
    path = folder / "one_cell.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def test_sigkill_mid_cell_loses_only_that_cell(tmp_path):
    results, runs = tmp_path / "leaderboard.csv", tmp_path / "runs"
    command = [sys.executable, "-m", "damcha_ts.cli.main", "leaderboard", "--config", str(_one_cell_grid(tmp_path)),
               "--results", str(results), "--runs-dir", str(runs)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pattern = "smoke/ETTh1/itransformer_mha/H96/*/checkpoints/last.ckpt"
    killed_at, deadline, last_size = None, time.monotonic() + 240, -1
    try:
        while time.monotonic() < deadline and process.poll() is None:
            found = list(runs.glob(pattern))
            if found:
                size = found[0].stat().st_size
                if size == last_size and size > 0:  # epoch 1 saved: kill inside epoch 2
                    process.send_signal(signal.SIGKILL)
                    killed_at = found[0]
                    break
                last_size = size
            time.sleep(0.01)
    finally:
        if process.poll() is None and killed_at is None:
            process.kill()
        process.wait(timeout=60)
    assert killed_at is not None, "the run finished before its cell could be killed mid-way"
    assert process.returncode == -signal.SIGKILL

    rows = read_results(results)  # still a valid leaderboard CSV: the naive row, not the killed cell
    assert [row["model"] for row in rows] == ["window_mean"]
    report = subprocess.run([*command, "--report-only"], env=env, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr[-3000:]
    assert ("- itransformer_mha: H=96 seed 7 (in progress: 1 epoch checkpointed)"
            in (tmp_path / "LEADERBOARD.md").read_text())

    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"Restoring states from the checkpoint path at {killed_at}" in rerun.stderr
    final = read_results(results)
    assert final[:1] == rows and [row["model"] for row in final] == ["window_mean", "itransformer_mha"]
    assert final[1]["epochs_run"] == 2
    # The resumed cell's curve still starts at epoch 1 (Lightning's logger drops the old log on resume).
    curves = [c for c in json.loads((tmp_path / "curves.json").read_text()) if c["model"] == "itransformer_mha"]
    assert [c["epochs"] for c in curves] == [[1, 2]]
    assert not list(tmp_path.glob(".leaderboard.csv.*.tmp"))


def test_a_cell_another_runner_holds_is_skipped_not_failed(tmp_path, capsys):
    import fcntl

    grid_path = _one_cell_grid(tmp_path)
    grid, runs = load_grid(grid_path), tmp_path / "runs"
    (neural,) = [resolve_cell(c, grid, runs) for c in grid.cells() if not c.is_naive]
    neural.run_dir.mkdir(parents=True)
    holder = os.open(neural.run_dir, os.O_RDONLY)  # what another runner's cell lock looks like
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        code = main(["leaderboard", "--config", str(grid_path), "--results", str(tmp_path / "lb.csv"),
                     "--runs-dir", str(runs), "--json"])
    finally:
        os.close(holder)
    outcome = json.loads(capsys.readouterr().out)
    assert code == 0 and outcome["failed"] == [] and outcome["busy"] == [neural.cell.describe()]
    assert [row["model"] for row in read_results(tmp_path / "lb.csv")] == ["window_mean"]
    assert not (neural.run_dir / "checkpoints").exists()  # nothing of the other runner's was touched


def _fake_row(item) -> dict:
    """A result row for a cell, without training (for tests of the runner's bookkeeping)."""
    return {"dataset": item.cell.dataset, "model": item.cell.model, "horizon": item.cell.horizon,
            "seed": item.cell.seed, "mse": 1.0, "mae": 1.0, "config_hash": item.config_hash, "epochs_run": 1,
            "best_epoch": 0, "n_params": 1, "seconds_per_epoch": 1.0, "wall_seconds": 1.0, "versions": "",
            "hardware": "", "grid": item.grid_name, "timestamp": ""}


def test_cells_another_runner_holds_do_not_use_up_max_cells(tmp_path, monkeypatch):
    """Two runners in pieces (--max-cells 1) on one grid: the second takes the next free cell
    instead of spending its budget on the one the first is training."""
    import fcntl

    from damcha_ts.leaderboard import runner as runner_module
    from damcha_ts.leaderboard.runner import run_leaderboard

    grid, runs = load_grid(SMOKE), tmp_path / "runs"
    only = ("itransformer_mha", "itransformer_damcha")
    first, second = [resolve_cell(c, grid, runs) for c in grid.cells(only_models=only)][:2]
    monkeypatch.setattr(runner_module, "run_cell", lambda item, kwargs: _fake_row(item))
    first.run_dir.mkdir(parents=True)
    holder = os.open(first.run_dir, os.O_RDONLY)  # the other runner, training the first cell
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        run = run_leaderboard(grid, tmp_path / "lb.csv", runs_dir=runs, only_models=only, max_cells=1,
                              log=lambda _: None)
    finally:
        os.close(holder)
    assert run.busy == [first.cell.describe()]
    assert [(row["model"], row["horizon"]) for row in run.ran] == [(second.cell.model, second.cell.horizon)]


def test_a_row_another_runner_wrote_first_counts_as_finished_not_remaining(tmp_path, monkeypatch):
    from damcha_ts.leaderboard import runner as runner_module
    from damcha_ts.leaderboard.runner import run_leaderboard

    results = tmp_path / "lb.csv"

    def other_runner_finishes_first(item, kwargs):
        append_result(results, {**_fake_row(item), "mse": 0.5})  # the other runner's row lands first
        return _fake_row(item)

    monkeypatch.setattr(runner_module, "run_cell", other_runner_finishes_first)
    run = run_leaderboard(load_grid(SMOKE), results, runs_dir=tmp_path / "runs", only_models=("repeat_last",),
                          log=lambda _: None)
    assert run.ran == [] and run.already_finished == 1 and run.remaining == 0
    assert [row["mse"] for row in read_results(results)] == [0.5]


def test_a_cell_that_keeps_failing_does_not_hold_back_the_grid(tmp_path, monkeypatch, one_thread):
    from damcha_ts.leaderboard import runner as runner_module
    from damcha_ts.leaderboard.runner import run_leaderboard

    grid = load_grid(SMOKE)
    broken = "itransformer_mha"

    def run_or_break(item, trainer_kwargs):
        if item.cell.model == broken:
            raise RuntimeError("this cell always fails")
        return _fake_row(item)

    monkeypatch.setattr(runner_module, "run_cell", run_or_break)
    results, runs = tmp_path / "lb.csv", tmp_path / "runs"
    only = ("itransformer_mha", "itransformer_damcha")  # the broken cell comes first in grid order
    first = run_leaderboard(grid, results, runs_dir=runs, only_models=only, max_cells=1, log=lambda _: None)
    assert [f["cell"].split()[1] for f in first.failed] == [broken] and not first.ran
    second = run_leaderboard(grid, results, runs_dir=runs, only_models=only, max_cells=1, log=lambda _: None)
    assert [row["model"] for row in second.ran] == ["itransformer_damcha"]  # the other cell went first
    third = run_leaderboard(grid, results, runs_dir=runs, only_models=only, max_cells=1, log=lambda _: None)
    assert len(third.failed) == 1 and "this cell always fails" in third.failed[0]["error"]  # retried at last


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
    """Rows merged from another machine: nothing is left to run, so the file is not needed."""
    from damcha_ts.leaderboard.runner import run_leaderboard

    grid, results, runs = load_grid(SMOKE), tmp_path / "lb.csv", tmp_path / "runs"
    for item in (resolve_cell(c, grid, runs) for c in grid.cells()):
        append_result(results, _fake_row(item))
    monkeypatch.setenv("DAMCHA_TS_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("DAMCHA_TS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "empty").mkdir()
    run = run_leaderboard(grid, results, runs_dir=runs, download=False, log=lambda _: None)
    assert run.missing_datasets == [] and run.already_finished == len(grid.cells()) and run.remaining == 0


def test_a_report_that_fails_after_cells_ran_keeps_their_rows_and_the_summary(tmp_path, capsys, monkeypatch):
    from damcha_ts.leaderboard import report as report_module
    from damcha_ts.leaderboard import runner as runner_module

    def broken_report(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(runner_module, "run_cell", lambda item, kwargs: _fake_row(item))
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


def test_worker_pool_runs_cells_in_spawned_processes(tmp_path):
    """The CUDA path (one process per device) with two CPU "devices": rows match an in-process
    run, and a broken cell is reported as failed without stopping the others."""
    grid = load_grid(SMOKE)
    naive = [resolve_cell(c, grid, tmp_path) for c in grid.cells() if c.is_naive][:1]
    broken = ResolvedCell(
        Cell("ETTh1", "repeat_last", 96, 0, naive_method="repeat_last"),
        {"naive": "repeat_last", "data": {"dataset": str(tmp_path / "absent.csv"), "seq_len": 96, "pred_len": 96}},
        "broken", None, grid.relative_path, {},
    )
    recorded = {}

    def record(index, item, row, error):
        recorded[index] = (row, error)

    slots = [{"CUDA_VISIBLE_DEVICES": ""}, {"CUDA_VISIBLE_DEVICES": ""}]
    run_in_workers([*naive, broken], slots, {"accelerator": "cpu", "devices": 1}, record)
    assert sorted(recorded) == [0, 1]
    for index, item in enumerate(naive):
        row, error = recorded[index]
        assert error is None
        local = run_cell(item, {"accelerator": "cpu", "devices": 1})
        assert (row["model"], row["mse"], row["mae"]) == (local["model"], local["mse"], local["mae"])
    row, error = recorded[1]
    assert row is None and "absent.csv" in error


def test_bad_arguments_are_named(tmp_path, capsys):
    base = ["leaderboard", "--config", str(SMOKE), "--results", str(tmp_path / "r.csv"), "--runs-dir", str(tmp_path)]
    assert main([*base, "--only-dataset", "Weather"]) == 2
    assert "--only-dataset Weather" in capsys.readouterr().err
    assert main([*base, "--only-dataset", "ETTh9"]) == 2
    assert "ETTh1" in capsys.readouterr().err  # the registry suggests the close name
    assert main([*base, "--only-model", "itransformer_dmacha"]) == 2
    err = capsys.readouterr().err
    assert "--only-model itransformer_dmacha" in err and "itransformer_damcha" in err
    assert main([*base, "--max-cells", "-1"]) == 2
    assert "--max-cells" in capsys.readouterr().err
    assert main([*base, "--cpu-jobs", "0"]) == 2
    assert "--cpu-jobs" in capsys.readouterr().err
    assert not (tmp_path / "r.csv").exists()


def test_a_cell_in_a_worker_process_may_use_dataloader_workers(tmp_path):
    """Worker processes are not daemons: a daemon may not start children, so a cell with
    ``training.num_workers > 0`` would fail on every GPU run (and with --cpu-jobs)."""
    import dataclasses

    grid = load_grid(SMOKE)
    cell = next(c for c in grid.cells() if c.model == "itransformer_mha")
    item = resolve_cell(dataclasses.replace(cell, overrides=(*cell.overrides, "training.num_workers=1")), grid, tmp_path)
    recorded = {}
    run_in_workers([item], [{"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}],
                   {"accelerator": "cpu", "devices": 1}, lambda i, _, row, error: recorded.update({i: (row, error)}))
    row, error = recorded[0]
    assert error is None and row["model"] == "itransformer_mha" and row["epochs_run"] == 2


def test_workers_die_with_a_sigkilled_runner(tmp_path):
    """No orphan may go on training cells whose rows nobody would write (OOM killer, timeout -k)."""
    import yaml

    grid = yaml.safe_load(SMOKE.read_text())
    grid["naive"] = []
    grid["models"] = [{"name": name, "config": str(ROOT / f"configs/{name}/etth1.yaml")}
                      for name in ("itransformer_mha", "itransformer_damcha")]
    grid["overrides"] = [*grid["overrides"], "training.max_epochs=50", "training.patience=50"]
    grid["trainer"] = {"limit_train_batches": 200, "limit_val_batches": 4}
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(grid))
    command = [sys.executable, "-m", "damcha_ts.cli.main", "leaderboard", "--config", str(path), "--cpu-jobs", "2",
               "--results", str(tmp_path / "lb.csv"), "--runs-dir", str(tmp_path / "runs")]
    runner = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def children(pid: int) -> set[int]:
        try:
            return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
        except FileNotFoundError:
            return set()

    try:
        deadline = time.monotonic() + 120
        while len(list((tmp_path / "runs").glob("smoke/ETTh1/*/H96/*/logs"))) < 2:  # both cells training
            assert runner.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        workers = children(runner.pid)
        assert len(workers) >= 2
        runner.kill()
        runner.wait()
        deadline = time.monotonic() + 60
        while (alive := [pid for pid in workers if Path(f"/proc/{pid}").exists()
                         and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]]):
            if time.monotonic() > deadline:
                for pid in alive:
                    os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"workers {alive} outlived their runner")
            time.sleep(0.2)
    finally:
        runner.kill()
        runner.wait()


def test_a_cell_finished_meanwhile_is_not_trained_again(tmp_path, monkeypatch, one_thread):
    """Runners choose their cells from the CSV they read at start; another runner may finish one
    of them in the meantime. The run folder then holds the result, and it is used as it is."""
    import damcha_ts.training as training

    grid_path = _one_cell_grid(tmp_path)
    grid, runs = load_grid(grid_path), tmp_path / "runs"
    (neural,) = [resolve_cell(c, grid, runs) for c in grid.cells() if not c.is_naive]
    first = run_cell(neural, {})
    checkpoint = neural.run_dir / "checkpoints" / "last.ckpt"
    written = checkpoint.stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")

    monkeypatch.setattr(training, "run_experiment", no_training)
    again = run_cell(neural, {})
    assert {k: again[k] for k in ("mse", "mae", "epochs_run", "best_epoch", "n_params", "wall_seconds")} == \
        {k: first[k] for k in ("mse", "mae", "epochs_run", "best_epoch", "n_params", "wall_seconds")}
    assert checkpoint.stat().st_mtime_ns == written

    # A folder whose run did not get as far as its metrics trains as before.
    (neural.run_dir / "metrics.json").unlink()
    with pytest.raises(AssertionError, match="trained again"):
        run_cell(neural, {})


def test_a_checkpoint_cut_off_mid_write_is_dropped_and_an_intact_one_kept(tmp_path):
    import torch

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


def test_cpu_jobs_split_the_cores_among_the_cells_there_are(monkeypatch):
    from damcha_ts.leaderboard.runner import cpu_slots

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert cpu_slots(4, 10, environ={}) == [{"OMP_NUM_THREADS": "2"}] * 4
    assert cpu_slots(4, 2, environ={}) == [{"OMP_NUM_THREADS": "4"}] * 2  # two cells: four cores each
    assert cpu_slots(4, 2, environ={"OMP_NUM_THREADS": "1"}) == [{"OMP_NUM_THREADS": "1"}] * 2  # pinned


def test_a_row_written_from_a_finished_folder_says_where_the_cell_trained(tmp_path, one_thread):
    """A cell finished by another runner (or before a crash) keeps the versions and hardware of the
    process that trained it, not of the one that writes its row."""
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
