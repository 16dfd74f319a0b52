"""A real 2-process DDP fit on CPU (gloo): both ranks agree and the results are written once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

SCRIPT = Path(__file__).with_name("ddp_fit_script.py")


def test_two_process_ddp_fit_on_cpu(tmp_path, data_root):
    out = tmp_path / "run"
    env = {**os.environ, "DAMCHA_TS_DATA": str(data_root), "OMP_NUM_THREADS": "1"}
    # DDP re-launches the script for rank 1, so the fit runs in its own interpreter.
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out)], check=False, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "distributed_backend=gloo" in done.stderr + done.stdout

    first, second = (json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1))
    assert first["world_size"] == second["world_size"] == 2
    timing = {"seconds_per_epoch", "train_seconds_per_epoch", "validation_seconds_per_epoch", "data_wait_fraction", "wall_seconds"}
    assert {k: v for k, v in first.items() if k not in timing} == {k: v for k, v in second.items() if k not in timing}
    # limit_train_batches counts per rank: each rank ran 4 batches of its DistributedSampler shard.
    assert first["train_batches_per_epoch"] == 4

    # Written once, by rank 0: one metrics file equal to rank 0's result, one log with one row per epoch.
    assert json.loads((out / "metrics.json").read_text()) == first
    logged = pd.read_csv(out / "logs" / "metrics.csv").dropna(subset=["val_loss"])
    assert list(logged["epoch"]) == [0, 1]
    assert first["best_val_loss"] == logged["val_loss"].min()
    assert first["test_windows"] == 2857  # every test window, not a DistributedSampler shard
    # val_loss is the MSE over every validation window once: 2857 windows do not split evenly over
    # two ranks, and a padded DistributedSampler would count one of them twice.
    from damcha_ts.api import Forecaster

    assert Forecaster.load(out).evaluate(split="val")["mse"] == pytest.approx(first["best_val_loss"], rel=1e-6)


def test_fit_command_under_ddp_speaks_once(tmp_path, data_root):
    """Every DDP rank returns from the fit; only rank 0 plots and prints (one JSON object on stdout)."""
    out = tmp_path / "cli"
    env = {**os.environ, "DAMCHA_TS_DATA": str(data_root), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "damcha_ts.cli.main", "fit", "--config", "itransformer_mha/etth1", "--horizon", "24",
        "--set", "model.d_model=16", "--set", "model.d_ff=16", "--set", "model.n_heads=2",
        "--set", "training.max_epochs=1", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp",
        "--trainer", "limit_train_batches=2", "--trainer", "limit_val_batches=2", "--out", str(out), "--json",
    ]
    done = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Traceback" not in done.stderr and "error" not in done.stderr.lower(), done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["world_size"] == 2 and Path(result["plot"]) == out / "forecast.png" and (out / "forecast.png").is_file()


def test_quickstart_under_ddp_speaks_once(tmp_path, data_root):
    """On a machine with several GPUs the quickstart trains with DDP; only rank 0 plots and prints."""
    out = tmp_path / "quick"
    env = {**os.environ, "DAMCHA_TS_DATA": str(data_root), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "damcha_ts.cli.main", "quickstart", "--out", str(out),
        "--set", "model.d_model=16", "--set", "model.d_ff=16", "--set", "model.n_heads=2",
        "--set", "model.generator_hidden=[8]", "--set", "training.max_epochs=1",
        "--trainer", "accelerator=cpu", "--trainer", "devices=2", "--trainer", "strategy=ddp",
        "--trainer", "limit_train_batches=2", "--trainer", "limit_val_batches=2", "--json",
    ]
    done = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and json.loads(lines[0])["world_size"] == 2
    assert (out / "forecast.png").is_file()
