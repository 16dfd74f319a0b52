"""The command line as a process (issue 32): how ``damcha-ts fit`` ends when it is stopped or fails,
and what its messages say.

- SIGTERM (kill, timeout, a batch scheduler) or Ctrl+C during a fit → exit 143 / 130, ``--resume``
  named, and ``--resume`` finishes the run (real processes: a signal is the input).
- A fit that fails after training → no folder that refuses the same command, no user file lost.
- Matrix rows: the Python API's keywords reach the user as the command's flags (``--future``, not
  ``future=``), numbers as numbers (``nan``, not ``np.float64(nan)``), and a warning that each read
  of the data repeats is shown once per command.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from damcha_ts.data.options import check_size
from damcha_ts.errors import ConfigError, DataError
from damcha_ts.forecasting.intervals import check_levels
from damcha_ts.models.quantiles import validate_quantiles
from matrix import Case, check_case, fit_argv, fit_case, hourly_frame, run_cli, write_csv

STOPPED_BY = {signal.SIGTERM: (143, "stopped by SIGTERM"), signal.SIGINT: (130, "stopped by SIGINT")}


@pytest.mark.parametrize(("signum", "workers"), [(signal.SIGTERM, 0), (signal.SIGINT, 0), (signal.SIGTERM, 2),
                                                (signal.SIGINT, 2)],
                         ids=["SIGTERM", "SIGINT", "SIGTERM-to-the-group-with-loader-workers",
                              "SIGINT-to-the-group-with-loader-workers"])
def test_a_fit_stopped_by_a_signal_exits_non_zero_and_resumes(signum, workers, tmp_path):
    """Lightning ends training on SIGTERM as if it were done: the command exited 0 with no model
    (and 1 on Ctrl+C), so ``fit … && predict …`` or a batch scheduler read success. Ctrl+C,
    ``timeout`` and batch schedulers signal the whole process group, DataLoader workers included:
    that too is a stop, not a failure (it gave exit 1, tracebacks and a fit_failed.txt)."""
    data = write_csv(hourly_frame(), tmp_path / "series.csv")
    # Far more epochs than the test waits for: the signal always lands during training.
    argv = [str(a) for a in fit_argv(data, tmp_path / "run", "--set", "training.max_epochs=1000",
                                     "--set", "training.patience=1000", "--set", f"training.num_workers={workers}")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with (tmp_path / "stderr.txt").open("w") as stderr:
        fit = subprocess.Popen([sys.executable, "-m", "damcha_ts.cli.main", *argv], stderr=stderr,
                               stdout=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            last = tmp_path / "run" / "checkpoints" / "last.ckpt"
            deadline = time.monotonic() + 240
            while not last.is_file() and fit.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert last.is_file(), f"no checkpoint written: {(tmp_path / 'stderr.txt').read_text()}"
            if workers:
                os.killpg(fit.pid, signum)
            else:
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
    assert not (tmp_path / "run" / "fit_failed.txt").exists()  # a stop is no failure: --resume, not a restart
    # The same command with --resume finishes it (capped at 3 epochs to stay fast; a Trainer
    # argument, so the config, which a resume checks, is the same).
    resumed = run_cli([*argv, "--resume", "--trainer", "max_epochs=3"])
    assert resumed.code == 0, resumed.stderr
    assert "starting from scratch" not in resumed.stderr
    assert (tmp_path / "run" / "metrics.json").is_file() and (tmp_path / "run" / "model" / "weights.pt").is_file()


def test_a_fit_that_fails_after_training_leaves_no_folder_that_refuses_its_rerun(tmp_path, monkeypatch):
    """An error at test scoring (as the entity + covariate CSV of issue 32 had) left checkpoints/ and
    logs/ behind, and the same command then refused the folder as "already holds a run"."""
    import damcha_ts.forecasting.experiment as experiment

    def scoring_fails(fit, series):
        raise DataError("test scoring failed (injected)")

    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file")  # a folder of the user's: nothing of it is lost
    argv = fit_argv(write_csv(hourly_frame(), tmp_path / "series.csv"), out)
    monkeypatch.setattr(experiment, "evaluate_test_split", scoring_fails)
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


def test_a_failed_fit_lets_only_its_own_config_take_over_the_folder(tmp_path, monkeypatch):
    """The marker of a failed fit names its config: another config into that --out is refused as
    any run in the folder is (without this, any fit could replace what the folder held)."""
    import damcha_ts.forecasting.experiment as experiment

    def scoring_fails(fit, series):
        raise DataError("test scoring failed (injected)")

    data = write_csv(hourly_frame(), tmp_path / "series.csv")
    monkeypatch.setattr(experiment, "evaluate_test_split", scoring_fails)
    assert run_cli(fit_argv(data, tmp_path / "run")).code == 2
    monkeypatch.undo()
    other = run_cli([*fit_argv(data, tmp_path / "run"), "--lookback", "8"])
    assert other.code == 2
    assert (f"--out {tmp_path / 'run'} already holds a run (checkpoints, logs) (an unfinished run of another "
            f"config: {tmp_path / 'run' / 'fit_failed.txt'}); add --resume") in other.stderr


def test_a_fit_that_fails_after_scoring_is_not_marked_to_start_over(tmp_path, monkeypatch):
    """Trained and scored (metrics.json), a run whose plot then failed is finished work: no marker
    lets the next fit replace it, and the message says --resume writes what is missing."""
    import damcha_ts.cli.fit as fit

    def plot_fails(out_dir, series):
        raise OSError(28, "No space left on device")

    data = write_csv(hourly_frame(), tmp_path / "series.csv")
    argv = [a for a in fit_argv(data, tmp_path / "run") if a != "--no-plot"]
    monkeypatch.setattr(fit, "write_forecast_plot", plot_fails)
    failed = run_cli(argv)
    assert failed.code == 2, failed.stderr
    assert not (tmp_path / "run" / "fit_failed.txt").exists()
    assert (f"damcha-ts fit: the run in {tmp_path / 'run'} trained and scored (metrics.json); the same command "
            "with --resume writes what is missing") in failed.stderr
    assert run_cli([*argv, "--lookback", "8"]).code == 2  # the finished model is not replaced


def _semicolon_csv(folder: Path, fixtures: dict) -> list[str]:
    data = folder / "series.csv"
    hourly_frame().to_csv(data, index=False, sep=";")
    return fit_argv(data, folder / "run")


def _nan_future(folder: Path, fixtures: dict) -> list[str]:
    import pandas as pd

    fit = run_cli(fit_argv(write_csv(hourly_frame(), folder / "series.csv"), folder / "run", "--future-covariates", "v2"))
    assert fit.code == 0, fit.stderr
    future = pd.DataFrame({"date": pd.date_range("2024-01-17 16:00", periods=4, freq="h"), "v2": [0.5, np.nan, 0.5, 0.5]})
    return ["predict", "--model", folder / "run", "--future", write_csv(future, folder / "future.csv")]


def _with_nan(folder: Path, fixtures: dict) -> list[str]:
    frame = hourly_frame()
    frame.loc[5, "v1"] = np.nan
    return fit_argv(write_csv(frame, folder / "series.csv"), folder / "run")


CASES = [
    # The Python API's keywords become this command's flags; numbers print as numbers.
    Case("future file with a missing value", _nan_future, 2,
         "--future column 'v2' row 1 (2024-01-17 17:00:00) holds nan, not a finite number"),
    Case("data with a missing value", _with_nan, 2, "Clean the data or pass --fill ffill, 'interpolate' or 'zero'"),
    Case("validation size of no window", fit_case("--val-size", "0.001"), 2,
         "--val-size 0.001 gives 0 validation rows"),
    Case("no test split to score", fit_case("--test-size", "0"), 2,
         "data.test_size=0 leaves no test split for the run to score: give --test-size > 0, or leave it out"),
    # Each warning once per command, in the command line's words (test_a_warning_...: the count).
    Case("semicolon CSV", _semicolon_csv, 0,
         "read with delimiter ';' (detected from the header); pass --sep to choose another"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matrix(case, tmp_path):
    check_case(case, tmp_path)


def test_a_warning_that_each_read_repeats_is_shown_once_per_fit(tmp_path):
    """A fit reads its CSV three times (to size the model, to train, to calibrate): the semicolon
    warning came three times."""
    outcome = run_cli(_semicolon_csv(tmp_path, {}))
    assert outcome.code == 0 and outcome.stderr.count("read with delimiter ';'") == 1, outcome.stderr


@pytest.mark.parametrize("call, message", [
    (lambda: check_levels(np.array([80.0, 120.0])), "level holds 120.0; a level is a percentage"),
    (lambda: validate_quantiles(np.array([0.1, 1.5])), "quantiles holds 1.5; every level must lie strictly between 0 and 1"),
    (lambda: check_size("val_size", np.float64(1.5)), "val_size must be a number of rows (an integer >= 0) or a "
                                                      "fraction of the rows in (0, 1), got 1.5"),
], ids=["levels", "quantiles", "val_size"])
def test_numbers_in_python_messages_print_as_numbers(call, message):
    """NumPy 2 writes np.float64(1.5) for a value that came in an array; the user gave 1.5."""
    with pytest.raises(ConfigError) as raised:
        call()
    assert message in str(raised.value) and "np." not in str(raised.value)


@pytest.mark.parametrize("marker", [b"", b"\xff\xfe garbage\n", b"config \n", b"config 0123456789ab\n"],
                         ids=["empty", "binary", "no-hash", "another-hash"])
def test_a_failure_marker_that_does_not_name_this_config_lets_nothing_in(tmp_path, marker):
    """fit_failed.txt is read back: empty, corrupt or naming another config, it opens the folder to
    no run (only the same config's rerun may take over a failed run's folder)."""
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "last.ckpt").write_bytes(b"the earlier run's")
    (out / "fit_failed.txt").write_bytes(marker)
    refused = run_cli(fit_argv(write_csv(hourly_frame(), tmp_path / "series.csv"), out))
    assert refused.code == 2, refused.stderr
    assert "(an unfinished run of another config" in refused.stderr
    assert (out / "checkpoints" / "last.ckpt").read_bytes() == b"the earlier run's"


def test_a_resumed_fit_that_fails_keeps_every_earlier_epoch_in_its_log(tmp_path, monkeypatch):
    """A resume sets the earlier epochs' log rows aside (Lightning deletes metrics.csv) and puts them
    back when the fit ends; a resumed fit that failed or was stopped left metrics.csv without them."""
    import pandas as pd

    import damcha_ts.training.runner as runner

    out = tmp_path / "run"
    argv = fit_argv(write_csv(hourly_frame(), tmp_path / "series.csv"), out)
    assert run_cli(argv).code == 0
    logged = pd.read_csv(out / "logs" / "metrics.csv")
    assert logged["epoch"].max() == 1  # two epochs logged

    def fails(self):
        raise DataError("training failed (injected)")

    monkeypatch.setattr(runner.ForecastModule, "on_train_epoch_start", fails)
    resumed = run_cli([*argv, "--resume", "--trainer", "max_epochs=4"])
    assert resumed.code == 2, resumed.stderr
    assert "training failed (injected)" in resumed.stderr
    after = pd.read_csv(out / "logs" / "metrics.csv")
    pd.testing.assert_frame_equal(after.iloc[: len(logged)][list(logged.columns)], logged)  # every earlier row, first


@pytest.mark.parametrize(("signum", "name"), [(signal.SIGTERM, "Terminated"), (signal.SIGINT, "Interrupt")])
def test_a_worker_ended_by_the_groups_signal_before_this_process_saw_it_is_a_stop(signum, name, tmp_path):
    """A signal sent to the whole group can end a DataLoader worker, and torch's SIGCHLD handler raise
    that, before this process runs its own handler (CI saw it inside Lightning's SIGTERM handler):
    that error is the stop (exit 143 / 130, the --resume message), not a failure with a traceback
    and a fit_failed.txt. Any other worker death stays an error."""
    from damcha_ts.cli.run_folder import FAILED_MARKER, training_command
    from damcha_ts.errors import Stopped

    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)  # the run had started
    with pytest.raises(Stopped) as stopped:
        with training_command("fit", out, resume=False, config_hash="abc"):
            raise RuntimeError(f"DataLoader worker (pid 4940) is killed by signal: {name}. ")
    assert stopped.value.exit_code == STOPPED_BY[signum][0]
    assert f"fit: {STOPPED_BY[signum][1]}; the run in {out} can be continued" in str(stopped.value)
    assert not (out / FAILED_MARKER).exists()
    with pytest.raises(RuntimeError, match="Killed"):
        with training_command("fit", out, resume=False, config_hash="abc"):
            raise RuntimeError("DataLoader worker (pid 4940) is killed by signal: Killed. ")
    assert (out / FAILED_MARKER).is_file()
