"""The command line as a process (issue 32): how ``damcha-ts fit`` ends when it is stopped or fails.

- SIGTERM (kill, timeout, a batch scheduler) or Ctrl+C during a fit → exit 143 / 130, ``--resume``
  named, and ``--resume`` finishes the run (real processes: a signal is the input).
- A fit that fails after training → no folder that refuses the same command, no user file lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from damcha_ts.errors import DataError
from matrix import fit_argv, hourly_frame, run_cli, write_csv

STOPPED_BY = {signal.SIGTERM: (143, "stopped by SIGTERM"), signal.SIGINT: (130, "stopped by SIGINT")}


@pytest.mark.parametrize("signum", list(STOPPED_BY), ids=lambda s: signal.Signals(s).name)
def test_a_fit_stopped_by_a_signal_exits_non_zero_and_resumes(signum, tmp_path):
    """Lightning ends training on SIGTERM as if it were done: the command exited 0 with no model
    (and 1 on Ctrl+C), so ``fit … && predict …`` or a batch scheduler read success."""
    data = write_csv(hourly_frame(), tmp_path / "series.csv")
    # Far more epochs than the test waits for: the signal always lands during training.
    argv = [str(a) for a in fit_argv(data, tmp_path / "run", "--set", "training.max_epochs=1000",
                                     "--set", "training.patience=1000")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with (tmp_path / "stderr.txt").open("w") as stderr:
        fit = subprocess.Popen([sys.executable, "-m", "damcha_ts.cli.main", *argv], stderr=stderr,
                               stdout=subprocess.DEVNULL, env=env)
        try:
            last = tmp_path / "run" / "checkpoints" / "last.ckpt"
            deadline = time.monotonic() + 240
            while not last.is_file() and fit.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert last.is_file(), f"no checkpoint written: {(tmp_path / 'stderr.txt').read_text()}"
            fit.send_signal(signum)
            code = fit.wait(timeout=120)
        finally:
            fit.kill()
            fit.wait()
    said = (tmp_path / "stderr.txt").read_text()
    expected_code, message = STOPPED_BY[signum]
    assert code == expected_code, said
    assert f"damcha-ts fit: {message}; the run in {tmp_path / 'run'} can be continued from its last finished " \
           "epoch: run the same command with --resume" in said
    assert "Traceback" not in said
    assert not (tmp_path / "run" / "metrics.json").exists()  # nothing claims a finished run
    # The same command with --resume finishes it (capped at 3 epochs to stay fast; a Trainer
    # argument, so the config, which a resume checks, is the same).
    resumed = run_cli([*argv, "--resume", "--trainer", "max_epochs=3"])
    assert resumed.code == 0, resumed.stderr
    assert "starting from scratch" not in resumed.stderr
    assert (tmp_path / "run" / "metrics.json").is_file() and (tmp_path / "run" / "model" / "weights.pt").is_file()


def test_a_fit_that_fails_after_training_leaves_no_folder_that_refuses_its_rerun(tmp_path, monkeypatch):
    """An error at test scoring (as the entity + covariate CSV of issue 32 had) left checkpoints/ and
    logs/ behind, and the same command then refused the folder as "already holds a run"."""
    import damcha_ts.training.runner as runner

    def scoring_fails(fit, series):
        raise DataError("test scoring failed (injected)")

    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file")  # a folder of the user's: nothing of it is lost
    argv = fit_argv(write_csv(hourly_frame(), tmp_path / "series.csv"), out)
    monkeypatch.setattr(runner, "evaluate_test_split", scoring_fails)
    failed = run_cli(argv)
    assert failed.code == 2, failed.stderr
    assert "damcha-ts: error: test scoring failed (injected)" in failed.stderr
    monkeypatch.undo()
    rerun = run_cli(argv)
    assert rerun.code == 0, rerun.stderr
    assert (out / "metrics.json").is_file() and not (out / "fit_failed.txt").exists()
    assert (out / "notes.txt").read_text() == "the user's own file"
    assert (f"damcha-ts fit: the run in {out} did not finish ({out / 'fit_failed.txt'} says so): the same command "
            "starts it over, and with --resume it goes on from its last checkpoint") in failed.stderr
