"""Optuna studies end to end: real trials (tiny DAMCHA-iTransformer on ETTh1, real Lightning),
pruning, resume, worker processes on SQLite and PostgreSQL, a SIGKILLed worker, export + report."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
import yaml
from optuna.trial import TrialState

from damcha_ts.cli.main import main
from damcha_ts.errors import ConfigError
from damcha_ts.tuning import run_study
from damcha_ts.tuning.objective import trial_dir
from damcha_ts.tuning.space import get_path

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def load_trials(storage, name: str):
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def median_rule_prunes(trial, completed_before, step: int) -> bool:
    """MedianPruner(n_startup_trials=1, n_warmup_steps=0), written out: prune at ``step`` when the
    trial's best value so far is worse than the median of earlier COMPLETE trials at that step."""
    at_step = [t.intermediate_values[step] for t in completed_before if step in t.intermediate_values]
    if not completed_before or not at_step:
        return False
    best_so_far = min(v for s, v in trial.intermediate_values.items() if s <= step)
    return best_so_far > float(np.median(at_step))


def assert_median_pruning(trials) -> None:
    """Replay a sequential study: every trial stops exactly where the median rule first fires."""
    for trial in trials:
        earlier = [t for t in trials if t.number < trial.number and t.state == TrialState.COMPLETE]
        steps = sorted(trial.intermediate_values)
        fired = [s for s in steps if median_rule_prunes(trial, earlier, s)]
        if trial.state == TrialState.PRUNED:
            assert fired and fired[0] == steps[-1], (trial.number, steps, fired)
        else:
            assert trial.state == TrialState.COMPLETE and not fired, (trial.number, trial.state, fired)


def logged_val_losses(run_dir: Path) -> list[float]:
    """val_loss per epoch from the trial's own Lightning CSV log."""
    frame = pd.read_csv(run_dir / "logs" / "metrics.csv")
    return frame.dropna(subset=["val_loss"]).groupby("epoch")["val_loss"].last().tolist()


def test_pruned_trials_end_pruned_and_a_rerun_resumes(study_files, tmp_path, capsys):
    wide_lr = {"type": "float", "low": 1.0e-6, "high": 1.0e-2, "log": True}
    config, search = study_files(
        space={
            "training.learning_rate": wide_lr,
            "model.generator_hidden": {"type": "categorical", "choices": [[8], [4, 8]]},
        }
    )
    url, out = f"sqlite:///{tmp_path / 'study.db'}", tmp_path / "out"
    # A good and a hopeless learning rate first, so the pruner certainly has something to prune.
    seeded = optuna.create_study(study_name="prune", storage=url, direction="minimize")
    seeded.enqueue_trial({"training.learning_rate": 1.0e-2, "model.generator_hidden": "[8]"})
    seeded.enqueue_trial({"training.learning_rate": 1.0e-6, "model.generator_hidden": "[8]"})

    result = run_study(
        config, search, n_trials=3, storage=url, study_name="prune", out_dir=out, evaluate_test=False
    )

    trials = load_trials(url, "prune")
    assert [t.number for t in trials] == [0, 1, 2]
    assert trials[0].state == TrialState.COMPLETE and sorted(trials[0].intermediate_values) == [0, 1, 2]
    assert trials[1].state == TrialState.PRUNED and sorted(trials[1].intermediate_values) == [0]
    assert_median_pruning(trials)
    # What the pruner saw is the val_loss Lightning logged each epoch; the objective is its minimum.
    assert trials[0].intermediate_values == pytest.approx(
        dict(enumerate(logged_val_losses(trial_dir(out, 0))))
    )
    assert trials[0].value == pytest.approx(min(trials[0].intermediate_values.values()))
    assert (result.n_trials, result.n_complete + result.n_pruned, result.n_failed) == (3, 3, 0)
    assert result.n_pruned == sum(t.state == TrialState.PRUNED for t in trials) >= 1
    assert not (trial_dir(out, 0) / "checkpoints").exists()  # trial checkpoints are not kept

    before = {t.number: (t.state, t.value, t.params) for t in trials}
    code = main(
        [
            "tune",
            "--config",
            str(config),
            "--search",
            str(search),
            "--n-trials",
            "2",
            "--storage",
            url,
            "--study-name",
            "prune",
            "--out",
            str(out),
            "--no-test",
            "--json",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1  # stdout holds the JSON object and nothing else
    summary = json.loads(printed[0])

    trials = load_trials(url, "prune")
    assert len(trials) == 5 and sum(t.state in FINISHED for t in trials) == 5
    assert {t.number: (t.state, t.value, t.params) for t in trials[:3]} == before  # resumed, not restarted
    assert_median_pruning(trials)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = min(complete, key=lambda t: t.value)
    assert summary["n_trials"] == 5
    assert summary["n_complete"] == len(complete)
    assert summary["n_pruned"] == sum(t.state == TrialState.PRUNED for t in trials)
    assert summary["n_failed"] == 0
    assert summary["best_value"] == pytest.approx(best.value)
    assert summary["best_params"] == {
        "training.learning_rate": best.params["training.learning_rate"],
        "model.generator_hidden": json.loads(best.params["model.generator_hidden"]),
    }

    # A rerun with --n-trials 0 adds nothing and only reports; the report lists every command that
    # fed the study, so a resumed study's numbers still trace to the runs that made them.
    argv = ["tune", "--config", str(config), "--search", str(search), "--storage", url, "--study-name", "prune",
            "--out", str(out), "--no-test", "--n-trials", "0"]
    assert main(argv) == 0
    assert len(load_trials(url, "prune")) == 5
    report = (out / "report.md").read_text()
    assert "Invocations of this study (oldest first):" in report
    assert "--n-trials 2" in report and "3 trials before, 2 added" in report
    assert "--n-trials 0" in report and "5 trials before, 0 added" in report
    assert "`run_study() from Python` (" in report and "2 trials before, 3 added" in report  # 2 enqueued
    # Each launch, from Python too, drew its own sampler token and recorded it (see worker_seed).
    invocations = optuna.load_study(study_name="prune", storage=url).user_attrs["invocations"]
    tokens = [item["launch_token"] for item in invocations]
    assert len(tokens) == 3 and len(set(tokens)) == 3 and all(isinstance(t, int) for t in tokens)
    assert f"launch tokens {', '.join(map(str, tokens))})" in report


def test_exported_best_config_reproduces_the_best_validation_mse(study_files, tmp_path):
    from damcha_ts.forecasting.experiment import run_experiment
    from damcha_ts.training import load_run_config

    config, search = study_files()
    out = tmp_path / "out"
    result = run_study(config, search, n_trials=2, study_name="repro", out_dir=out)

    assert result.best_trial is not None and Path(result.best_config).is_file()
    exported = load_run_config(result.best_config)
    for path, value in result.best_params.items():
        assert get_path(exported, path) == value
    trainer_limits = yaml.safe_load(search.read_text())["trainer"]
    header = Path(result.best_config).read_text().split("\n", 4)[3]  # what the trials ran with
    assert all(f"--trainer {key}={value}" in header for key, value in trainer_limits.items())
    again = run_experiment(
        exported, tmp_path / "again", evaluate_test=False, trainer_kwargs=trainer_limits, progress=False
    )
    assert again["best_val_loss"] == pytest.approx(result.best_value, rel=1e-6, abs=0)

    # The best config was then trained once more and tested once.
    tuned = result.tuned
    assert tuned["val_mse"] == pytest.approx(result.best_value, rel=1e-6, abs=0)
    assert math.isfinite(tuned["mse"]) and math.isfinite(tuned["mae"]) and tuned["mse"] > 0

    import matplotlib.image

    report = Path(result.report).read_text()
    assert f"Trial {result.best_trial}: validation MSE" in report and f"{tuned['mse']:.4f}" in report
    for png in ("optimization_history.png", "param_importances.png", "intermediate_values.png"):
        assert f"]({png})" in report
        image = matplotlib.image.imread(out / png)
        assert image.ndim == 3 and min(image.shape[:2]) >= 100
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(result.to_json()))


def test_two_worker_processes_complete_exactly_n_trials_together(study_files, tmp_path):
    config, search = study_files()
    result = run_study(
        config,
        search,
        n_trials=4,
        workers=2,
        study_name="pair",
        out_dir=tmp_path / "out",
        evaluate_test=False,
    )

    assert result.worker_exit_codes == [0, 0] and result.n_added == 4
    trials = load_trials(f"sqlite:///{tmp_path / 'out' / 'study.db'}", "pair")
    assert len(trials) == 4 and all(t.state in FINISHED for t in trials)
    (launch,) = optuna.load_study(study_name="pair", storage=f"sqlite:///{tmp_path / 'out' / 'study.db'}").user_attrs["invocations"]
    assert {t.user_attrs["launch_token"] for t in trials} == {launch["launch_token"]}  # each trial names its launch
    per_worker = Counter(t.user_attrs["worker"] for t in trials)
    # Which worker ran how many is first come, first served (the study's queue); together exactly 4.
    assert sum(per_worker.values()) == 4
    assert not any(label.endswith(f":{os.getpid()}") for label in per_worker)
    # The workers' spec held the storage URL (a database password, for PostgreSQL): it is written
    # owner-only and deleted when the workers are done; their logs stay.
    assert not list((tmp_path / "out" / "workers").glob("spec_*.json"))
    assert len(list((tmp_path / "out" / "workers").glob("worker_*.log"))) == 2


def test_sigkilled_workers_trial_fails_and_is_retried(study_files, tmp_path):
    config, search = study_files(storage={"heartbeat_interval": 1, "grace_period": 3, "max_retry": 1})
    url, out = f"sqlite:///{tmp_path / 'study.db'}", tmp_path / "out"
    long_trials = ["training.max_epochs=8", "training.patience=8"]  # time to kill it mid-trial
    command = [
        sys.executable,
        "-m",
        "damcha_ts.cli.main",
        "tune",
        "--config",
        str(config),
        "--search",
        str(search),
        "--n-trials",
        "1",
        "--storage",
        url,
        "--study-name",
        "kill",
        "--out",
        str(out),
        "--no-test",
        *[arg for override in long_trials for arg in ("--set", override)],
    ]
    log_path = tmp_path / "worker.log"
    with open(log_path, "w") as log:
        worker = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        storage, deadline = optuna.storages.RDBStorage(url), time.monotonic() + 180
        while True:  # wait until trial 0 is mid-training: running, with an epoch reported
            assert worker.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the worker never started training"
            try:
                trials = storage.get_all_trials(storage.get_study_id_from_name("kill"), deepcopy=False)
            except KeyError:  # the worker has not created the study yet
                trials = []
            if trials and trials[0].state == TrialState.RUNNING and trials[0].intermediate_values:
                break
            time.sleep(0.05)
        os.kill(worker.pid, signal.SIGKILL)
    finally:
        worker.kill()
        worker.wait()
    killed = load_trials(url, "kill")[0]
    assert killed.state == TrialState.RUNNING  # nobody is left to finish it

    time.sleep(3 + 1.5)  # past the grace period since the last heartbeat
    result = run_study(
        config,
        search,
        n_trials=1,
        storage=url,
        study_name="kill",
        out_dir=out,
        overrides=long_trials,
        evaluate_test=False,
    )

    trials = load_trials(url, "kill")
    assert trials[0].state == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == 0]
    assert len(retries) == 1
    assert retries[0].state == TrialState.COMPLETE and retries[0].params == killed.params
    assert (result.n_complete, result.n_failed, result.n_running) == (1, 1, 0)


def test_two_workers_share_a_postgresql_study(study_files, tmp_path, postgres_url):
    import sqlalchemy

    config, search = study_files()
    name = f"pg_{uuid.uuid4().hex[:8]}"
    result = run_study(
        config,
        search,
        n_trials=4,
        workers=2,
        storage=postgres_url,
        study_name=name,
        out_dir=tmp_path / "out",
        evaluate_test=False,
    )

    assert result.worker_exit_codes == [0, 0]
    assert result.storage.startswith("postgresql")
    trials = load_trials(postgres_url, name)
    assert len(trials) == 4 and all(t.state in FINISHED for t in trials)
    # Workers claim trials first come, first served from the study's queue: together exactly 4, in any split.
    assert sum(Counter(t.user_attrs["worker"] for t in trials).values()) == 4
    engine = sqlalchemy.create_engine(postgres_url)
    with engine.connect() as connection:  # the rows really live in the PostgreSQL server
        stored = connection.execute(
            sqlalchemy.text(
                "SELECT count(*) FROM trials JOIN studies ON studies.study_id = trials.study_id "
                "WHERE studies.study_name = :name"
            ),
            {"name": name},
        ).scalar()
    engine.dispose()
    assert stored == 4


def test_journal_file_storage(study_files, tmp_path):
    config, search = study_files()
    journal = tmp_path / "journal" / "study.log"
    result = run_study(
        config,
        search,
        n_trials=2,
        storage=str(journal),
        study_name="journal",
        out_dir=tmp_path / "out",
        evaluate_test=False,
    )

    assert result.storage == f"journal://{journal}" and journal.stat().st_size > 0
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    trials = load_trials(JournalStorage(JournalFileBackend(str(journal))), "journal")
    assert len(trials) == 2 and all(t.state in FINISHED for t in trials)


def test_a_study_cannot_be_resumed_with_another_base_config(study_files, tmp_path):
    config, search = study_files()
    out = tmp_path / "out"
    run_study(config, search, n_trials=0, study_name="pinned", out_dir=out)  # creates the study only
    with pytest.raises(ConfigError, match="pinned.*another base config"):
        run_study(
            config, search, n_trials=1, study_name="pinned", out_dir=out, overrides=["model.d_model=32"]
        )


def test_cli_names_a_bad_search_file(study_files, tmp_path, capsys):
    config, search = study_files(space={"model.d_modle": {"type": "int", "low": 8, "high": 16}})
    code = main(
        [
            "tune",
            "--config",
            str(config),
            "--search",
            str(search),
            "--n-trials",
            "1",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 2
    error = capsys.readouterr().err
    assert "search.yaml" in error and "model.d_modle" in error and "d_model" in error


def test_cli_fails_when_no_trial_of_the_launch_finishes(study_files, tmp_path, capsys):
    # Every value is valid on its own (so the study starts), but no d_model here divides by any
    # n_heads: each trial fails when its config is built, and the command must not report success.
    config, search = study_files(space={
        "model.d_model": {"type": "categorical", "choices": [10, 14]},
        "model.n_heads": {"type": "categorical", "choices": [4, 3]},
    })
    out = tmp_path / "out"
    code = main(["tune", "--config", str(config), "--search", str(search), "--n-trials", "1",
                 "--set", "model.d_model=12", "--out", str(out), "--no-test"])
    assert code == 1
    assert "none of the 1 trials finished (2 failed in the study)" in capsys.readouterr().err
    trials = load_trials(f"sqlite:///{out / 'study.db'}", "search")
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.FAIL]
    assert not list((out / "workers").glob("*.json")) if (out / "workers").exists() else True


def test_sigterm_to_the_launcher_stops_its_worker_processes(study_files, tmp_path):
    """kill, timeout or a batch scheduler's SIGTERM must not leave workers spending the budget."""
    import re

    config, search = study_files()
    command = [sys.executable, "-m", "damcha_ts.cli.main", "tune", "--config", str(config), "--search", str(search),
               "--n-trials", "6", "--workers", "2", "--out", str(tmp_path / "out"), "--no-test",
               "--set", "training.max_epochs=8", "--set", "training.patience=8"]
    log_path = tmp_path / "launcher.log"
    with open(log_path, "w") as log:
        launcher = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (found := re.search(r"2 workers started \(pids (\d+), (\d+)\)", log_path.read_text())):
            assert launcher.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.1)
        workers = [int(pid) for pid in found.groups()]
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=90) != 0
    finally:
        launcher.kill()
        launcher.wait()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    survivors = [pid for pid in workers if alive(pid)]
    for pid in survivors:  # do not leave them training after a failure
        os.kill(pid, signal.SIGKILL)
    assert not survivors
    # The stopped workers put their trials back, and the launch handed its unstarted ones on: nothing
    # is left RUNNING for nobody, and every waiting trial is free for the next launch to take.
    trials = load_trials(f"sqlite:///{tmp_path / 'out' / 'study.db'}", "search")
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    assert waiting and all(t.user_attrs.get("launch_token") is None for t in waiting)


def test_sigterm_to_a_one_worker_launch_puts_its_trial_back(study_files, tmp_path):
    """One worker in the command's own process: `timeout`'s SIGTERM fails nothing for good; the trial in
    hand is queued again (same parameters) and the launch's unstarted trials are free for the next one."""
    config, search = study_files()
    url = f"sqlite:///{tmp_path / 'study.db'}"
    command = [sys.executable, "-m", "damcha_ts.cli.main", "tune", "--config", str(config), "--search", str(search),
               "--n-trials", "3", "--storage", url, "--study-name", "term", "--out", str(tmp_path / "out"),
               "--no-test", "--set", "training.max_epochs=8", "--set", "training.patience=8"]
    log_path = tmp_path / "launcher.log"
    with open(log_path, "w") as log:
        launcher = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        storage, deadline = optuna.storages.RDBStorage(url), time.monotonic() + 120
        while True:  # trial 0 mid-training
            assert launcher.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            try:
                trials = storage.get_all_trials(storage.get_study_id_from_name("term"), deepcopy=False)
            except KeyError:
                trials = []
            if any(t.state == TrialState.RUNNING and t.intermediate_values for t in trials):
                break
            time.sleep(0.05)
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=90) != 0
    finally:
        launcher.kill()
        launcher.wait()
    trials = load_trials(url, "term")
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    (stopped,) = [t for t in trials if t.state == TrialState.FAIL]
    assert stopped.user_attrs["error"] == "interrupted"
    (copy,) = [t for t in trials if t.system_attrs.get("failed_trial") == stopped.number]
    assert copy.state == TrialState.WAITING and copy.params == stopped.params
    assert all(t.user_attrs.get("launch_token") is None for t in trials if t.state == TrialState.WAITING)


def test_a_launch_takes_over_only_what_no_live_launch_holds(tmp_path):
    """Trials queued by hand, and the queued copies of a dead launch's trials, count toward the next
    launch; the copy of a trial of a launch still running (another machine's) stays that launch's."""
    from damcha_ts.tuning.launch import queue_launch
    from damcha_ts.workqueue.queue import StudyQueue
    from damcha_ts.workqueue.storage import open_storage

    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval=60, grace_period=180, max_retry=3)
    study = optuna.create_study(study_name="adopt", storage=storage)
    queue = StudyQueue(study, storage)
    study.enqueue_trial({"x": 1.0})  # by hand
    study.enqueue_trial({}, user_attrs={"launch_token": 111})  # launch 111's, running on another machine
    queue.claim(lambda t: t.user_attrs.get("launch_token") == 111)
    for token in (111, 222):  # a queued copy of a killed worker's trial of each launch; 222 is over
        study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, user_attrs={"launch_token": token},
                                                  system_attrs={"failed_trial": 0}))
    assert queue_launch(study, storage, 333, n_trials=4) == 2
    owner = {t.number: t.user_attrs.get("launch_token") for t in study.get_trials(states=(TrialState.WAITING,))}
    assert owner == {0: 333, 2: 111, 3: 333, 4: 333, 5: 333}
    # A launch started at the same moment does not take back what 333 just took over.
    assert queue_launch(study, storage, 444, n_trials=1) == 0


def test_a_search_files_points_run_first_each_once_per_study(study_files, tmp_path):
    """``points`` are queued when the study opens, before the sampler's trials, and a rerun does not
    queue them again; the space may hold a newer key at its default (metric_gate: false)."""
    config, search = study_files(
        pruner={"type": "median", "n_startup_trials": 100},
        space={
            "training.learning_rate": {"type": "float", "low": 1.0e-4, "high": 1.0e-2, "log": True},
            "model.metric_gate": {"type": "categorical", "choices": [False, True]},
        },
        points=[{"model.metric_gate": True, "training.learning_rate": 3.0e-3},
                {"model.metric_gate": False}],
    )
    out = tmp_path / "out"
    run_study(config, search, n_trials=2, study_name="points", out_dir=out, evaluate_test=False)
    url = f"sqlite:///{out / 'study.db'}"
    trials = load_trials(url, "points")
    assert [(t.number, t.user_attrs.get("search_point"), t.state) for t in trials] == [
        (0, 0, TrialState.COMPLETE), (1, 1, TrialState.COMPLETE)]
    assert trials[0].params == {"model.metric_gate": True, "training.learning_rate": 3.0e-3}
    assert trials[1].params["model.metric_gate"] is False  # its learning rate was sampled
    trial_config = yaml.safe_load((trial_dir(out, 0) / "config.yaml").read_text())
    assert trial_config["model"]["metric_gate"] is True

    run_study(config, search, n_trials=1, study_name="points", out_dir=out, evaluate_test=False)
    trials = load_trials(url, "points")
    assert len(trials) == 3 and "search_point" not in trials[2].user_attrs  # the sampler's own
