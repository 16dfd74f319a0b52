"""Opening a study's storage (damcha_ts.workqueue.storage) from many processes at once: a new SQLite
file, and a new database on a real PostgreSQL server."""

from __future__ import annotations

import multiprocessing
import time
import uuid

import pytest

from damcha_ts.workqueue.storage import open_storage

PROCESSES = 4


def _open_at(url: str, start: float, outcomes) -> None:
    time.sleep(max(start - time.time(), 0.0))
    try:
        open_storage(url, heartbeat_interval=60, grace_period=180, max_retry=1)
        outcomes.put("opened")
    except Exception as error:  # noqa: BLE001 - what a machine would see is the point
        outcomes.put(f"{type(error).__name__}: {error}")


@pytest.fixture
def empty_database(postgres_url):
    """The URL of a new, empty database on the test server (dropped afterwards)."""
    import sqlalchemy

    name = f"fresh_{uuid.uuid4().hex[:12]}"
    server = sqlalchemy.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with server.connect() as connection:
        connection.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    yield sqlalchemy.engine.make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    with server.connect() as connection:
        connection.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    server.dispose()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_machines_started_together_on_an_empty_database_all_open_it(kind, tmp_path, request):
    """Every machine (or process) creates Optuna's tables on an empty database; those that lose the race
    to create them open the winner's instead of failing ("duplicate key value violates unique
    constraint", "table alembic_version already exists")."""
    url = f"sqlite:///{tmp_path / 'new.db'}" if kind == "sqlite" else request.getfixturevalue("empty_database")
    context = multiprocessing.get_context("spawn")
    outcomes = context.Queue()
    start = time.time() + 5.0  # after every interpreter has started and imported optuna
    processes = [context.Process(target=_open_at, args=(url, start, outcomes)) for _ in range(PROCESSES)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        if process.is_alive():  # hung: stop it, and say so rather than wait on an empty queue
            process.terminate()
            pytest.fail("a process opening the storage hung for 120 s")
    assert sorted(outcomes.get(timeout=5) for _ in processes) == ["opened"] * PROCESSES


@pytest.mark.parametrize(("kind", "moment"), [("sqlite", "begin"), ("sqlite", "commit"), ("postgresql", "begin")])
def test_a_sigterm_inside_a_storage_call_is_raised_when_the_call_is_done(kind, moment, tmp_path, request, monkeypatch):
    """SIGTERM (turned into KeyboardInterrupt, as in a worker) arriving while a storage call holds its
    transaction (as it begins, or just before it commits) stops the worker after the call, which
    completes; the worker's next calls, which put its trial back in the queue, run at once. Raised
    inside the call, it left a connection in its transaction: the session unusable
    (IllegalStateChangeError), or the next call waiting for that connection's lock until it failed."""
    import signal

    import optuna
    from optuna.trial import TrialState
    from sqlalchemy import event

    import damcha_ts.workqueue.storage as storage_module
    from damcha_ts.workqueue.launcher import sigterm_interrupts
    from damcha_ts.workqueue.queue import INTERRUPTED, StudyQueue

    monkeypatch.setattr(storage_module, "_SQLITE_LOCK_TIMEOUT_S", 3)
    url = f"sqlite:///{tmp_path / 'study.db'}" if kind == "sqlite" else request.getfixturevalue("empty_database")
    storage = open_storage(url, heartbeat_interval=60, grace_period=180, max_retry=1)
    study = optuna.create_study(study_name="interrupted", storage=storage)
    queue = StudyQueue(study, storage)
    study.enqueue_trial({"x": 1.0})
    trial = queue.claim()
    armed = [True]

    @event.listens_for(storage.engine, moment)
    def sigterm(connection) -> None:  # after the storage's own listener (BEGIN IMMEDIATE on SQLite)
        if armed[0]:
            armed[0] = False
            signal.raise_signal(signal.SIGTERM)

    with sigterm_interrupts(), pytest.raises(KeyboardInterrupt):
        storage.set_trial_intermediate_value(trial, 0, 0.5)
    assert not armed[0] and storage.get_trial(trial).intermediate_values == {0: 0.5}
    started = time.monotonic()
    queue.requeue(trial, INTERRUPTED)
    assert time.monotonic() - started < 2
    assert [t.state for t in study.get_trials(deepcopy=False)] == [TrialState.FAIL, TrialState.WAITING]
