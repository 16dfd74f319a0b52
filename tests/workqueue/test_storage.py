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
