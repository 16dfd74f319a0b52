"""Run an Optuna study over run configs: workers, resume, export, test once, report.

Flow of :func:`run_study` (what ``damcha-ts tune`` calls):

1. resolve the base config (``--config`` + ``--set``) and check every search path against it;
2. create or load the study (``load_if_exists``: the same command resumes and adds trials);
3. queue the launch's ``n_trials`` trials (WAITING, tagged with the launch's token): first the waiting
   trials nobody has taken on (enqueued by hand with ``study.enqueue_trial``, or the queued copy of a
   killed worker's trial, same parameters), then new ones; run them on ``workers`` processes that
   share the storage: each worker claims the launch's next waiting trial
   (:class:`damcha_ts.workqueue.queue.StudyQueue`, atomic in the storage), so together they add
   exactly ``n_trials`` COMPLETE + PRUNED trials and none idles while trials remain; a trial that
   fails is replaced by a new one (at most ``n_trials`` times). Optuna's
   ``MaxTrialsCallback`` would count the whole study, which on a database shared by several
   machines would stop one machine's workers early because of another's trials;
4. export the best trial's config as a ready run config, test it once, and write the report.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from damcha_ts.errors import ConfigError
from damcha_ts.files import write_atomically
from damcha_ts.training import RunConfig, config_hash
from damcha_ts.tuning.launch import (
    launch_finished,
    open_study,
    open_study_storage,
    queue_launch,
    record_invocation,
    release_unstarted,
    replace_failed,
)
from damcha_ts.tuning.objective import LAUNCH_ATTR, BaseConfig, TrialObjective, jsonable, one_device_per_run
from damcha_ts.tuning.report import export_best_config, write_report
from damcha_ts.tuning.result import StudyResult, summarize
from damcha_ts.tuning.search_file import load_search_spec, parse_search_spec
from damcha_ts.tuning.space import SearchSpec
from damcha_ts.workqueue.launcher import run_workers
from damcha_ts.workqueue.queue import StudyQueue, Superseded, new_launch_token
from damcha_ts.workqueue.storage import display_url, refuse_read_only, resolve_storage_url

DEFAULT_OUT_ROOT = Path("runs") / "tune"
BEST_CONFIG_FILE = "best_config.yaml"
SUMMARY_FILE = "summary.json"
WORKERS_DIR = "workers"


def log(message: str) -> None:
    print(f"[tune] {message}", file=sys.stderr, flush=True)


def worker_seed(base_seed: int, launch_token: int, index: int) -> int:
    """A sampler seed per (launch, worker): the workers of one launch, a resumed launch, and launches
    started at the same moment on other machines (each sees the same trial count) must not replay
    the same random start-up samples. ``launch_token`` is drawn at random per launch and recorded
    in the study's invocation history, so every trial's sampler seed can be traced."""
    import numpy as np

    return int(np.random.SeedSequence([base_seed, launch_token, index]).generate_state(1)[0])


def _hash(data: Any) -> str:
    return config_hash(json.loads(json.dumps(data, default=str)))


def _trial_line(study, trial) -> None:
    from optuna.trial import TrialState

    params = ", ".join(f"{k}={v}" for k, v in trial.params.items())
    if trial.state == TrialState.COMPLETE:
        outcome = f"val_mse={trial.value:.6f}"
    elif trial.state == TrialState.PRUNED:
        last = max(trial.intermediate_values) if trial.intermediate_values else -1
        outcome = f"pruned after epoch {last}"
    else:
        outcome = trial.state.name
    seconds = (
        (trial.datetime_complete - trial.datetime_start).total_seconds() if trial.datetime_complete else 0.0
    )
    log(f"trial {trial.number} {outcome} in {seconds:.1f} s ({params})")


def run_worker(spec: Mapping[str, Any], index: int) -> dict:
    """Run the launch's waiting trials against the study's storage (in this process) until none is left.

    ``spec`` is what :func:`run_study` hands its workers (JSON data, so a worker can be a separate
    process): study name, storage URL, out_dir, base config source, search file data, Lightning
    arguments, the launch number and token, and ``n_trials``. A worker takes the launch's waiting
    trials only; more machines join a study by running ``damcha-ts tune`` against the same storage URL.
    """
    import gc

    import optuna
    from optuna.trial import TrialState

    search = parse_search_spec(spec["search"], source=spec["search_source"])
    storage = open_study_storage(spec["storage"], search)
    sampler = search.make_sampler(worker_seed(search.sampler_seed, spec["launch_token"], index))
    study = optuna.load_study(study_name=spec["study_name"], storage=storage, sampler=sampler,
                              pruner=search.make_pruner())
    base = BaseConfig(spec["config"]["source"], spec["config"]["horizon"], tuple(spec["config"]["overrides"]))
    objective = TrialObjective(base, search, spec["out_dir"], trainer_kwargs=spec.get("trainer_kwargs"),
                               launch_token=spec["launch_token"])
    queue = StudyQueue(study, storage)
    token = spec["launch_token"]
    finished = failed = 0
    while True:
        queue.fail_stale()  # a killed worker's trial is queued again with the same launch token
        claimed = queue.claim(lambda trial: trial.user_attrs.get(LAUNCH_ATTR) == token)
        if claimed is None:
            break
        # A numerical error, or an invalid combination of values (d_model not divisible by n_heads),
        # fails that trial only; every single value was checked before the study.
        try:
            with queue.holding(claimed):
                trial = queue.run(claimed, objective, catch=(RuntimeError, ConfigError))
        except Superseded as lost:  # this worker was taken for dead; the trial's retry is another's
            log(str(lost))
            continue
        _trial_line(study, trial)
        gc.collect()
        if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
            finished += 1
        else:
            failed += 1
            replace_failed(study, trial, token, int(spec["n_trials"]))
    return {"finished": finished, "failed": failed}


def evaluate_config(
    config: Mapping, out_dir: Path, *, trainer_kwargs: Mapping | None, progress: bool = False
) -> dict:
    """Train ``config`` once and test it; reuse the result when the same run is already on disk."""
    from damcha_ts.forecasting.experiment import run_experiment  # Lightning, only when a config is trained

    run = RunConfig.load(config)
    resolved = run.to_dict()
    key = {"config_hash": run.config_hash(), "trainer_kwargs": dict(trainer_kwargs or {})}
    record_path = out_dir / "evaluation.json"
    if record_path.is_file():
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:  # unreadable (written by a version without atomic writes): rerun
            record = {}
        if record.get("key") == json.loads(json.dumps(key, default=str)):
            return record["metrics"]
    result = run_experiment(run, out_dir, evaluate_test=True, progress=progress,
                            trainer_kwargs=one_device_per_run(resolved, trainer_kwargs or {}))
    scores = ("mse", "mae", "mse_inverse", "mae_inverse", "epochs_run", "best_epoch", "n_params")
    metrics = {"val_mse": result["best_val_loss"], **{k: result[k] for k in scores},
               "config_hash": result["config_hash"], "out_dir": str(out_dir)}
    write_atomically(record_path, json.dumps({"key": key, "metrics": metrics}, indent=2, default=str))
    return metrics


def run_study(
    config: str | Path | Mapping,
    search: str | Path | SearchSpec,
    *,
    n_trials: int,
    storage: str | None = None,
    study_name: str | None = None,
    workers: int = 1,
    overrides: Sequence[str] = (),
    horizon: int | None = None,
    out_dir: str | Path | None = None,
    trainer_kwargs: Mapping | None = None,
    evaluate_test: bool = True,
    compare_default: bool = False,
    command: str | None = None,
) -> StudyResult:
    """Run (or resume) a study and add ``n_trials`` COMPLETE/PRUNED trials to it.

    Args:
        config: the base run config (a YAML path, a shipped config name, or a dict).
        search: a search file (path or name under ``configs/search``) or a parsed spec.
        n_trials: trials this call adds (a rerun of the same call resumes and adds as many again).
        storage: a database URL or file (see :mod:`damcha_ts.workqueue.storage`); default SQLite in
            ``out_dir``. Point several machines at one database URL to share a study.
        study_name: default: the search file's ``study_name`` or stem.
        workers: worker processes on this machine (1 runs in this process).
        overrides: ``section.key=value`` applied to the base config (as ``fit --set``).
        horizon: picks the config's per-horizon section.
        out_dir: study folder; default ``runs/tune/<study_name>``.
        trainer_kwargs: extra ``L.Trainer`` arguments for every run (over the file's ``trainer``).
        evaluate_test: retrain the best config once and test it (the study itself never tests).
        compare_default: also train and test the base config, for the report.
        command: the command line, written into the report.
    """
    setup = _set_up(config, search, n_trials=n_trials, workers=workers, storage=storage, study_name=study_name,
                    overrides=overrides, horizon=horizon, out_dir=out_dir, trainer_kwargs=trainer_kwargs)
    study = _open_pinned_study(setup)
    worker_spec = _new_launch(study, setup, trainer_kwargs, n_trials)
    record_invocation(study, worker_spec, command=command, workers=workers)
    try:
        exit_codes = _run_trials(worker_spec, setup.out_dir, workers)
    except (KeyboardInterrupt, SystemExit):  # Lightning turns an interrupt in training into SystemExit
        release_unstarted(study, open_study_storage(setup.url, setup.spec), worker_spec["launch_token"])
        raise

    result = summarize(study, setup.spec, setup.url, setup.out_dir)
    result.worker_exit_codes = exit_codes
    result.n_added = launch_finished(study, worker_spec["launch_token"])
    if result.best_trial is not None:
        _export_and_test_best(study, result, setup, evaluate_test=evaluate_test, compare_default=compare_default)
    result.report = str(write_report(study, setup.spec, result, setup.out_dir, command=command))
    write_atomically(setup.out_dir / SUMMARY_FILE, json.dumps(result.to_json(), indent=2, default=str) + "\n")
    return result


@dataclass(frozen=True)
class _StudySetup:
    """What a launch works on, resolved and checked before anything is written."""

    spec: SearchSpec
    base: Any  # objective.BaseConfig: how workers rebuild the base config
    base_config: dict  # the resolved base run config
    name: str
    out_dir: Path
    url: str
    trainer_kwargs: dict  # the search file's ``trainer`` with the caller's arguments over it


def _set_up(
    config: str | Path | Mapping, search: str | Path | SearchSpec, *, n_trials: int, workers: int,
    storage: str | None, study_name: str | None, overrides: Sequence[str], horizon: int | None,
    out_dir: str | Path | None, trainer_kwargs: Mapping | None,
) -> _StudySetup:
    """Check the arguments, the search file and every search path against the base config, and
    the storage URL; then create the study folder."""
    if n_trials < 0 or workers < 1:
        raise ConfigError(f"--n-trials must be >= 0 and --workers >= 1 (got {n_trials}, {workers})")
    spec = search if isinstance(search, SearchSpec) else load_search_spec(search)
    base = BaseConfig.of(config, horizon, overrides)
    base_config = base.resolve()
    spec.check_against(lambda values: base.resolve(values, complete=True))
    name = study_name or spec.study_name
    out_dir = (Path(out_dir) if out_dir is not None else DEFAULT_OUT_ROOT / name).resolve()
    url = resolve_storage_url(storage, out_dir)  # a bad --storage fails before anything is written
    refuse_read_only(url)
    out_dir.mkdir(parents=True, exist_ok=True)
    return _StudySetup(spec, base, base_config, name, out_dir, url, {**spec.trainer_kwargs, **(trainer_kwargs or {})})


def _open_pinned_study(setup: _StudySetup):
    """The study, pinned to the hashes of the base config and of the space + trainer arguments."""
    pins = {
        "base_config_hash": _hash(setup.base_config),
        "search_hash": _hash({"space": setup.spec.raw.get("space"), "trainer": setup.trainer_kwargs}),
    }
    study = open_study(setup.name, setup.url, setup.spec, pins)
    if "base_config" not in study.user_attrs:  # for whoever inspects the study (optuna-dashboard)
        study.set_user_attr("base_config", jsonable(setup.base_config))
    return study


def _new_launch(study, setup: _StudySetup, trainer_kwargs: Mapping | None, n_trials: int) -> dict:
    """The spec this launch's workers run on (JSON data), with its trials queued in the study."""
    launch = len(study.get_trials(deepcopy=False))
    base = setup.base
    worker_spec = {
        "study_name": setup.name, "storage": setup.url, "out_dir": str(setup.out_dir),
        "config": {"source": base.source, "horizon": base.horizon, "overrides": list(base.overrides)},
        "search": setup.spec.raw, "search_source": setup.spec.source, "trainer_kwargs": jsonable(trainer_kwargs or {}),
        "launch": launch, "launch_token": new_launch_token(), "n_trials": n_trials,
    }
    adopted = queue_launch(study, open_study_storage(setup.url, setup.spec), worker_spec["launch_token"], n_trials)
    log(f"study {setup.name!r} in {display_url(setup.url)}: {launch} trials so far, adding {n_trials}"
        + (f" ({adopted} of them queued before)" if adopted else ""))
    return worker_spec


def _run_trials(worker_spec: dict, out_dir: Path, workers: int) -> list[int]:
    """Run the launch's trials in this process (one worker) or in worker processes; returns their
    exit codes (none in this process)."""
    started = time.perf_counter()
    exit_codes: list[int] = []
    if worker_spec["n_trials"] > 0:
        exit_codes = run_workers("damcha_ts.tuning.worker", run_worker, worker_spec, out_dir / WORKERS_DIR, workers,
                                 tag=f"{worker_spec['launch']:05d}_{os.getpid()}", log=log)
    log(f"trials done in {time.perf_counter() - started:.1f} s")
    return exit_codes


def _export_and_test_best(
    study, result: StudyResult, setup: _StudySetup, *, evaluate_test: bool, compare_default: bool
) -> None:
    """Export the best trial's config as a run config; test it (and the base config) once."""
    # The trial summarize() chose, not study.best_trial: on a shared database another machine
    # may finish a better one in between, and the report and best_config.yaml must agree.
    best = next(t for t in study.get_trials(deepcopy=False) if t.number == result.best_trial)
    result.best_config = str(export_best_config(best, setup.out_dir / BEST_CONFIG_FILE, study_name=setup.name,
                                                trainer_kwargs=setup.trainer_kwargs))
    if evaluate_test:
        log(f"testing the best config (trial {best.number}) once")
        result.tuned = evaluate_config(
            best.user_attrs["config"], setup.out_dir / "best_test", trainer_kwargs=setup.trainer_kwargs
        )
    if compare_default:
        log("training and testing the default (base) config for comparison")
        result.default = evaluate_config(
            setup.base_config, setup.out_dir / "default_test", trainer_kwargs=setup.trainer_kwargs
        )
