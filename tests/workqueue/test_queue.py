"""A study's WAITING trials as a work queue (damcha_ts.workqueue.queue), on real SQLite storages.

Covers: racing processes claim every trial exactly once; how work ends (value, pruned, caught error,
a value that is no number, an uncaught error, an interrupt that puts the work back); a worker whose
heartbeat stops has its trial failed and queued again, one that beats keeps it.
"""

from __future__ import annotations

import multiprocessing
import time

import optuna
import pytest
from optuna.trial import TrialState

from damcha_ts.workqueue.queue import ERROR_ATTR, WORKER_ATTR, Heartbeat, StudyQueue, Superseded, worker_label
from damcha_ts.workqueue.storage import open_storage


TRIALS = 80  # without BEGIN IMMEDIATE, racing processes were handed some trials twice


def _queue(url: str, name: str = "queue", *, heartbeat: int = 60, grace: int = 180) -> StudyQueue:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(url, heartbeat_interval=heartbeat, grace_period=grace, max_retry=3)
    study = optuna.create_study(study_name=name, storage=storage, load_if_exists=True)
    return StudyQueue(study, storage)


def _claim_all(url: str, claimed) -> None:
    queue = _queue(url)
    while (trial := queue.claim()) is not None:
        claimed.put(queue.storage.get_trial(trial).number)


@pytest.mark.parametrize("scheme", ["sqlite", "sqlite+pysqlite"])  # every spelling of SQLite is serialised
def test_racing_processes_claim_every_trial_exactly_once(tmp_path, scheme):
    url = f"{scheme}:///{tmp_path / 'queue.db'}"
    queue = _queue(url)
    for index in range(TRIALS):
        queue.study.enqueue_trial({}, user_attrs={"index": index})
    context = multiprocessing.get_context("spawn")
    claimed = context.Queue()
    workers = [context.Process(target=_claim_all, args=(url, claimed)) for _ in range(4)]
    for worker in workers:
        worker.start()
    numbers = []
    while len(numbers) < TRIALS and any(w.is_alive() for w in workers) or not claimed.empty():
        try:
            numbers.append(claimed.get(timeout=1))
        except Exception:  # noqa: BLE001 - queue.Empty while the workers are still at it
            pass
    for worker in workers:
        worker.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert sorted(numbers) == list(range(TRIALS))  # each once: none twice, none left out
    states = {t.state for t in queue.study.get_trials()}
    assert states == {TrialState.RUNNING} and queue.claim() is None  # nothing is made up when the queue is empty
    assert len(queue.study.get_trials()) == TRIALS


def test_claim_takes_only_accepted_trials_in_number_order_and_names_the_worker(tmp_path):
    queue = _queue(f"sqlite:///{tmp_path / 'queue.db'}")
    for kind in ("other", "mine", "mine"):
        queue.study.enqueue_trial({}, user_attrs={"kind": kind})
    first = queue.claim(lambda trial: trial.user_attrs["kind"] == "mine")
    assert queue.storage.get_trial(first).number == 1
    assert queue.storage.get_trial(first).user_attrs[WORKER_ATTR] == worker_label()
    assert queue.storage.get_trial(queue.claim(lambda t: t.user_attrs["kind"] == "mine")).number == 2
    assert queue.claim(lambda t: t.user_attrs["kind"] == "mine") is None
    assert queue.study.get_trials()[0].state == TrialState.WAITING  # the other kind stays queued


def _claimed(queue: StudyQueue, **attrs) -> int:
    queue.study.enqueue_trial({}, user_attrs=attrs)
    return queue.claim(lambda trial: trial.user_attrs == attrs)


def test_run_records_how_the_work_ended(tmp_path):
    queue = _queue(f"sqlite:///{tmp_path / 'queue.db'}")

    def pruned(trial):
        raise optuna.TrialPruned("hopeless")

    def broken(trial):
        raise RuntimeError("diverged at step 7")

    done = queue.run(_claimed(queue, case="value"), lambda trial: 0.25)
    assert (done.state, done.value) == (TrialState.COMPLETE, 0.25)
    assert queue.run(_claimed(queue, case="pruned"), pruned).state == TrialState.PRUNED
    failed = queue.run(_claimed(queue, case="caught"), broken, catch=(RuntimeError,))
    assert failed.state == TrialState.FAIL and "diverged at step 7" in failed.user_attrs[ERROR_ATTR]
    not_a_number = queue.run(_claimed(queue, case="nan"), lambda trial: float("nan"))
    assert not_a_number.state == TrialState.FAIL and "not a finite number" in not_a_number.user_attrs[ERROR_ATTR]

    uncaught = _claimed(queue, case="uncaught")
    with pytest.raises(ValueError, match="a bug"):
        queue.run(uncaught, lambda trial: (_ for _ in ()).throw(ValueError("a bug")))
    assert queue.storage.get_trial(uncaught).state == TrialState.FAIL
    assert not queue.study.get_trials(states=(TrialState.WAITING,))  # an error is not work to redo


def test_an_interrupt_puts_the_work_back_in_the_queue(tmp_path):
    queue = _queue(f"sqlite:///{tmp_path / 'queue.db'}")
    trial = _claimed(queue, cell="ETTh1 H=96")

    def interrupted(handle):
        handle.suggest_float("learning_rate", 1e-4, 1e-2, log=True)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        queue.run(trial, interrupted)
    stopped = queue.storage.get_trial(trial)
    (again,) = queue.study.get_trials(states=(TrialState.WAITING,))
    assert stopped.state == TrialState.FAIL and stopped.user_attrs[ERROR_ATTR] == "interrupted"
    assert again.user_attrs["cell"] == "ETTh1 H=96" and ERROR_ATTR not in again.user_attrs
    assert again.params == stopped.params and again.system_attrs["failed_trial"] == stopped.number
    # A stop on purpose is not a dead worker: it does not use up the retries the storage grants those.
    assert "retry_history" not in again.system_attrs


def test_a_worker_whose_heartbeat_stops_loses_its_trial_to_the_queue(tmp_path):
    queue = _queue(f"sqlite:///{tmp_path / 'queue.db'}", heartbeat=1, grace=2)
    dead, alive = _claimed(queue, cell="a"), _claimed(queue, cell="b")
    with Heartbeat(queue.storage, dead):  # one beat, then the worker "dies"
        pass
    with Heartbeat(queue.storage, alive):  # this worker goes on beating
        time.sleep(3.5)
        queue.fail_stale()
        assert queue.storage.get_trial(alive).state == TrialState.RUNNING
    assert queue.storage.get_trial(dead).state == TrialState.FAIL
    (retry,) = queue.study.get_trials(states=(TrialState.WAITING,))
    assert retry.user_attrs["cell"] == "a" and retry.system_attrs["failed_trial"] == queue.storage.get_trial(dead).number


@pytest.mark.parametrize("records_on_the_trial", [False, True])
def test_a_worker_taken_for_dead_drops_its_result(tmp_path, records_on_the_trial):
    """A worker paused for longer than the grace period finds its trial failed and retried by another:
    it tells nothing and says so, instead of failing with Optuna's error or overwriting the retry."""
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    queue = _queue(url, heartbeat=1, grace=2)
    trial = _claimed(queue, cell="a")

    def taken_away_meanwhile(handle):
        queue.storage.set_trial_state_values(trial, TrialState.FAIL)  # what another worker's fail_stale does
        if records_on_the_trial:
            handle.set_user_attr("row", {"mse": 0.5})
        time.sleep(1.5)  # a beat of the heartbeat sees it
        return 0.5

    with pytest.raises(Superseded, match="given to another worker"):
        queue.run(trial, taken_away_meanwhile)
    stored = queue.storage.get_trial(trial)
    assert stored.state == TrialState.FAIL and stored.value is None and "row" not in stored.user_attrs


def test_a_slow_database_never_makes_a_healthy_run_look_taken_away(tmp_path, monkeypatch):
    """The heartbeat stops before the result is told: a beat landing after our own tell would read a
    finished trial and take it for one given to another worker."""
    queue = _queue(f"sqlite:///{tmp_path / 'queue.db'}", heartbeat=1, grace=3)
    trial = _claimed(queue, cell="a")
    tell = queue.study.tell

    def slow_tell(*args, **kwargs):
        tell(*args, **kwargs)
        time.sleep(1.5)  # the database answers slowly: a beat would fall in here

    monkeypatch.setattr(queue.study, "tell", slow_tell)
    done = queue.run(trial, lambda handle: 0.5)
    assert (done.state, done.value) == (TrialState.COMPLETE, 0.5)


def test_a_second_stop_while_the_work_is_put_back_waits_until_it_is_queued(tmp_path, monkeypatch):
    """Ctrl+C, then the launcher's SIGTERM: the copy is queued before the second one takes effect,
    even with other threads alive (a thread mask would let one of them take the signal)."""
    import os
    import signal
    import threading

    queue = _queue(f"sqlite:///{tmp_path / 'queue.db'}")
    trial = _claimed(queue, cell="a")
    add_trial = queue.study.add_trial

    def add_trial_under_a_second_signal(frozen):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the handler would run here
        add_trial(frozen)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    monkeypatch.setattr(queue.study, "add_trial", add_trial_under_a_second_signal)
    busy = threading.Event()
    other = threading.Thread(target=busy.wait, daemon=True)
    other.start()
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            queue.requeue(trial, "interrupted")
    finally:
        signal.signal(signal.SIGTERM, previous)
        busy.set()
    (copy,) = queue.study.get_trials(states=(TrialState.WAITING,))
    assert copy.user_attrs["cell"] == "a" and queue.storage.get_trial(trial).state == TrialState.FAIL
