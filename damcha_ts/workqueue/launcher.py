"""Worker processes on one machine: spawn K of them, each with its share of the cores or one GPU,
forward a SIGTERM or Ctrl+C to them, and report their exit codes.

One launcher for every pool of workers: ``damcha-ts tune`` starts its trial workers and
``damcha-ts leaderboard`` its cell workers through it. Each worker is ``python -m MODULE SPEC.json INDEX``: the spec file (owner-only, since it
may hold a storage URL with a password) says what to do, the index which worker it is; its output
goes to its own log file; a storage URL (it may hold a password) travels in the worker's environment
instead of the file. What the workers share (a study, a queue of cells) lives in a storage they
all reach, not in this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path


SECRET_FIELDS = ("storage",)  # spec fields that may hold a password


def _secret_variable(key: str) -> str:
    return f"DAMCHA_TS_WORKER_{key.upper()}"


def read_spec(path: str | Path) -> dict:
    """In a worker: the spec its launcher wrote, with the fields passed in the environment put back."""
    spec = json.loads(Path(path).read_text(encoding="utf-8"))
    for key in SECRET_FIELDS:
        if _secret_variable(key) in os.environ:
            spec[key] = os.environ[_secret_variable(key)]
    return spec


def worker_arguments(module: str, argv: list[str] | None = None) -> tuple[dict, int] | None:
    """In a worker ``python -m module SPEC.json INDEX``: (its spec, its index), SIGTERM now stopping
    it (:func:`stop_on_sigterm`); None, with the usage on stderr, when ``argv`` (default: the command
    line's) is not those two."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(f"usage: python -m {module} SPEC.json INDEX", file=sys.stderr)
        return None
    stop_on_sigterm()  # a stopped worker's work in hand goes back to its queue
    return read_spec(args[0]), int(args[1])


def worker_environment(index: int, workers: int, gpus: int, environ: Mapping[str, str] | None = None) -> dict:
    """The environment of worker ``index``: its share of the CPU cores and, with GPUs, one of them
    (round-robin over the visible ones), so that it trains on that GPU alone."""
    from damcha_ts.training.devices import threads_per_worker, visible_gpu_ids

    env = dict(os.environ if environ is None else environ)
    # Each worker trains on its part of the cores instead of all of them fighting for every core.
    env["OMP_NUM_THREADS"] = str(threads_per_worker(workers, env))
    if gpus > 0:
        visible = visible_gpu_ids(gpus, env)
        env["CUDA_VISIBLE_DEVICES"] = visible[index % len(visible)]
    return env


def launch_workers(module: str, spec: Mapping, folder: Path, workers: int, *, tag: str,
                   log: Callable[[str], None] = print, on_tick: Callable[[], None] | None = None,
                   tick_seconds: float = 2.0) -> list[int]:
    """Start ``workers`` processes ``python -m module SPEC INDEX`` on ``spec`` (written to
    ``folder/spec_<tag>.json``, removed at the end), logs in ``folder/worker_<tag>_<index>.log``; wait
    for them and return their exit codes; ``on_tick`` is called every ``tick_seconds`` meanwhile (a
    progress display). A SIGTERM or Ctrl+C stops them too (terminate, then kill
    after 60 s) and is raised again as KeyboardInterrupt."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    spec_path = folder / f"spec_{tag}.json"
    # A storage URL may hold a database password: it goes to the workers in their environment, never
    # into the file (which a killed launcher would leave behind); the file is owner-only all the same.
    secrets = {_secret_variable(key): str(spec[key]) for key in SECRET_FIELDS if key in spec}
    descriptor = os.open(spec_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump({k: v for k, v in spec.items() if k not in SECRET_FIELDS}, handle, indent=1)
    gpus = torch.cuda.device_count()
    procs = []
    for index in range(workers):
        with open(folder / f"worker_{tag}_{index}.log", "w", encoding="utf-8") as log_file:
            procs.append(subprocess.Popen([sys.executable, "-m", module, str(spec_path), str(index)], stdout=log_file,
                                          stderr=subprocess.STDOUT,
                                          env={**worker_environment(index, workers, gpus), **secrets},
                                          # Their own session: a terminal's Ctrl+C reaches the launcher
                                          # alone, which stops them once (a second signal would land
                                          # in the middle of putting their work back in the queue).
                                          start_new_session=True, preexec_fn=_die_with_parent))
    log(f"{workers} workers started (pids {', '.join(str(p.pid) for p in procs)}); logs in {folder}")
    # A SIGTERM (kill, timeout, a batch scheduler) stops the workers too, as Ctrl+C does; otherwise
    # they would go on with nobody left to collect their results.
    restore = None
    if threading.current_thread() is threading.main_thread():
        restore = signal.signal(signal.SIGTERM, _interrupt)
    try:
        while any(proc.poll() is None for proc in procs):
            if on_tick is not None:
                on_tick()
            time.sleep(tick_seconds if on_tick is not None else 0.2)
        codes = [proc.wait() for proc in procs]
    except BaseException:  # Ctrl+C, SIGTERM, or on_tick failing: no worker goes on unsupervised
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        raise
    finally:
        if restore is not None:
            signal.signal(signal.SIGTERM, restore)
        spec_path.unlink(missing_ok=True)  # it may hold the storage URL, password included
    for index, code in enumerate(codes):
        if code != 0:
            log(f"worker {index} exited with code {code}; see {folder / f'worker_{tag}_{index}.log'}")
    return codes


def run_workers(module: str, serve: Callable[[Mapping, int], object], spec: Mapping, folder: Path, workers: int, *,
                tag: str, log: Callable[[str], None] = print, on_tick: Callable[[], None] | None = None) -> list[int]:
    """One worker runs here, ``serve(spec, 0)``, with SIGTERM turned into KeyboardInterrupt (so its
    work goes back to the queue); more run as ``python -m module`` processes (:func:`launch_workers`).
    Returns the processes' exit codes (none for a worker run here)."""
    if workers == 1:
        with sigterm_interrupts():
            serve(spec, 0)
        return []
    return launch_workers(module, spec, folder, workers, tag=tag, log=log, on_tick=on_tick)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def sigterm_interrupts():
    """Work done in this process (one worker, no launcher): SIGTERM raises KeyboardInterrupt in the
    block, as in a worker process, so the work in hand goes back to its queue; then as it was."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    stop_on_sigterm()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_on_sigterm() -> None:
    """In a worker: SIGTERM (from the launcher, a batch scheduler, or the kernel when the launcher
    dies) raises KeyboardInterrupt, so the work in hand goes back to its queue before the exit."""
    signal.signal(signal.SIGTERM, _interrupt)


def _die_with_parent() -> None:
    """Linux, in the child before it runs: the kernel sends it SIGTERM when the launcher dies, even by
    SIGKILL (the OOM killer, ``timeout -k``), so no orphan goes on holding a GPU."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
