"""A run's folder on the command line: refuse to train over a finished run (``check_out_dir``), and
around the training (``training_command``) turn SIGTERM / Ctrl+C into the stop they are (exit 143 /
130) and leave ``fit_failed.txt`` beside a run an error cut short. ``damcha-ts fit`` (cli/fit.py,
cli/fit_auto.py) and ``quickstart`` use them."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from damcha_ts.errors import ConfigError, Stopped, add_note
from damcha_ts.files import write_atomically

# What a started run leaves in its folder (a config.yaml alone is a run that never started).
RUN_MARKERS = ("checkpoints", "logs", "model", "metrics.json")
# Beside the run a fit's error left unfinished: the next fit into that folder may take it over.
FAILED_MARKER = "fit_failed.txt"


def check_out_dir(out_dir: Path, *, resume: bool, overwrite: bool, config_hash: str | None = None,
                  resumable: bool = True) -> None:
    """Refuse to train over an earlier run unless asked to continue (--resume) or replace it
    (--overwrite): a typo in --out must not cost a finished model. A run of this same config whose
    fit failed (FAILED_MARKER) holds no result to lose: the same command starts it over. A command
    without --resume (``resumable=False``: ``fit --model auto``, whose study --storage keeps) is not told to add it."""
    if resume and overwrite:
        raise ConfigError("--resume continues the run in --out and --overwrite replaces it: give one")
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir}: is a file, not a folder")
    found = [name for name in RUN_MARKERS if (out_dir / name).exists()]
    failed = failed_run_hash(out_dir)
    if found and not (resume or overwrite or (failed is not None and failed == config_hash)):
        unfinished = (f" (an unfinished run of another config: {out_dir / FAILED_MARKER})"
                      if failed is not None else "")
        raise ConfigError(
            f"--out {out_dir} already holds a run ({', '.join(found)}){unfinished}; "
            + ("add --resume to continue it, --overwrite to replace it" if resumable else
               "add --overwrite to replace it (a study kept with --storage goes on from its trials)")
            + ", or choose another --out"
        )


def failed_run_hash(out_dir: Path) -> str | None:
    """The config hash FAILED_MARKER names (its first line), or None without a marker."""
    marker = out_dir / FAILED_MARKER
    if not marker.is_file():
        return None
    first = marker.read_text(errors="replace").partition("\n")[0]
    return first.removeprefix("config ").strip() if first.startswith("config ") else ""


@contextlib.contextmanager
def training_command(command: str, out_dir: Path, *, resume: bool, config_hash: str,
                     overwrite: bool = False) -> Iterator[None]:
    """Around ``damcha-ts COMMAND`` training into ``out_dir`` (fit, quickstart):

    - SIGTERM and Ctrl+C end it as :class:`~damcha_ts.errors.Stopped` (exit 143 / 130), saying that
      ``--resume`` continues the run: the folder keeps its last epoch's checkpoint. (Lightning alone
      ends training on SIGTERM as if it were done, exit 0 with no model, and on Ctrl+C with exit 1.)
      Raised from the signal handler, it leaves Lightning's fit as any error does (its own SIGTERM
      handler runs first, then this one). A signal sent to the whole process group (Ctrl+C,
      ``timeout``, a batch scheduler) also ends the DataLoader's workers (Ctrl+C through this
      handler, which they inherit; SIGTERM through torch's own), and the error their end raises in
      this process is taken for the stop it is.
    - An error of a fresh run (neither --resume nor --overwrite) that began to write its folder and
      had not yet scored (no metrics.json) leaves FAILED_MARKER, naming ``config_hash``, so that the
      same command is not refused for the folder it left, while any other config still is.
    On success the marker of an earlier failure goes."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    owner, stopping = os.getpid(), []

    def stop(signum, frame):
        if os.getpid() != owner:  # a forked DataLoader worker: its loop ends quietly on this
            raise KeyboardInterrupt
        stopping.append(signum)
        if hasattr(signal, "SIGCHLD"):  # workers the same signal ended are reaped quietly from now on
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        raise Stopped(signum)

    # A signal ignored when the command started (nohup, a background job's SIGINT) stays ignored.
    signals = [n for n in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(n) is not signal.SIG_IGN]
    previous = {number: signal.signal(number, stop) for number in signals} if _in_main_thread() else {}
    try:
        try:
            yield
        except Exception as exc:
            # E.g. "DataLoader worker exited unexpectedly": the stop's echo. A signal sent to the group
            # can also end a worker, and torch's SIGCHLD handler raise that, before this process runs
            # its own handler (seen inside Lightning's SIGTERM handler under CI load).
            signum = stopping[0] if stopping else _worker_stop_signal(exc)
            if signum is not None:
                raise Stopped(signum) from None
            raise
    except Stopped as exc:
        raise Stopped(exc.signum, _stopped_message(command, out_dir, exc, overwrite=overwrite)) from None
    except Exception as exc:
        started = any((out_dir / name).exists() for name in RUN_MARKERS)
        if rank_zero_only.rank == 0 and started and not (resume or overwrite):
            _mark_failed(command, out_dir, exc, config_hash)
        raise
    else:
        if rank_zero_only.rank == 0:
            (out_dir / FAILED_MARKER).unlink(missing_ok=True)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _worker_stop_signal(error: BaseException) -> int | None:
    """SIGTERM or SIGINT when ``error`` is torch's report of a DataLoader worker ended by that signal."""
    names = {signal.strsignal(number): number for number in (signal.SIGTERM, signal.SIGINT)}
    match = re.search(r"DataLoader worker \(pid \d+\) is killed by signal: (.+?)\.? *$", str(error))
    return names.get(match.group(1)) if isinstance(error, RuntimeError) and match else None


def _stopped_message(command: str, out_dir: Path, stop: BaseException, *, overwrite: bool) -> str:
    from damcha_ts.training.checkpoints import LAST
    from damcha_ts.training.trainer import CHECKPOINT_DIR

    again = "the same command with --resume" + (" instead of --overwrite" if overwrite else "")
    since = " from its last finished epoch" if (out_dir / CHECKPOINT_DIR / LAST).is_file() else ""
    return f"{command}: {stop}; the run in {out_dir} can be continued{since}: run {again}"


def _mark_failed(command: str, out_dir: Path, error: Exception, config_hash: str) -> None:
    """Leave FAILED_MARKER in a fresh run's folder that ``error`` ended before it scored, and say so."""
    if (out_dir / "metrics.json").is_file():  # trained and scored: what failed after, --resume redoes
        add_note(error, f"{command}: the run in {out_dir} trained and scored (metrics.json); the same "
                        "command with --resume writes what is missing")
        return
    write_atomically(out_dir / FAILED_MARKER,
                     f"config {config_hash}\ndamcha-ts {command} failed: {type(error).__name__}: {error}\n")
    add_note(error, f"{command}: the run in {out_dir} did not finish ({out_dir / FAILED_MARKER} says so): the "
                    "same command starts it over, and with --resume it goes on from its last checkpoint")


def _in_main_thread() -> bool:
    """Signal handlers can only be set there (an in-process caller may run main() in a thread)."""
    return threading.current_thread() is threading.main_thread()
