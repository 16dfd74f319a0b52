"""Where a study lives: a SQLite file, any SQLAlchemy database URL, or a journal file.

- no storage given -> ``sqlite:///<out_dir>/study.db`` (embedded, nothing to start);
- ``sqlite:///...``, ``postgresql://...``, ``mysql+pymysql://...`` -> :class:`optuna.storages.RDBStorage`
  with heartbeats, so the trial of a killed worker is marked FAILED and queued again;
- ``journal:///abs/path.log``, ``journal://rel/path.log`` or a plain path ending in ``.log`` ->
  :class:`optuna.storages.JournalStorage` (for NFS without a database server), with heartbeats of
  our own (Optuna has none for journals), so a killed worker's trial is failed and queued again there too;
- a plain path ending in ``.db``, ``.sqlite`` or ``.sqlite3`` -> that SQLite file.

A SQLite file that cannot be written (read-only, or opened with ``mode=ro``) is refused with its
name before a run starts; reading it (``leaderboard --status``) works.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import threading
import time
import warnings
from pathlib import Path

from damcha_ts.errors import ConfigError

JOURNAL_PREFIX = "journal://"
_SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
# SQLite waits this long for a lock instead of failing at once when workers write together.
_SQLITE_LOCK_TIMEOUT_S = 120


def resolve_storage_url(storage: str | Path | None, out_dir: str | Path) -> str:
    """The canonical storage URL for a ``--storage`` value (relative paths become absolute)."""
    if storage is None or str(storage) == "":
        return f"sqlite:///{(Path(out_dir) / 'study.db').resolve()}"
    text = str(storage)
    if text.startswith(JOURNAL_PREFIX):
        rest = text[len(JOURNAL_PREFIX) :]
        if not rest:
            raise _storage_error(f"{text!r}: give the journal file, e.g. journal:///tmp/study.log")
        return JOURNAL_PREFIX + str(Path(rest).resolve())
    if "://" in text:
        return _checked_database_url(text)
    path = Path(text)
    if path.suffix == ".log":
        return JOURNAL_PREFIX + str(path.resolve())
    if path.suffix in _SQLITE_SUFFIXES:
        return f"sqlite:///{path.resolve()}"
    raise _storage_error(f"{text!r} is neither a database URL (sqlite:///study.db, postgresql://...) "
                         "nor a file ending in .db/.sqlite (SQLite) or .log (journal)")


def _storage_error(text: str) -> ConfigError:
    """A refused storage, named as Python (``storage=...``) and the command line (``--storage ...``) give it."""
    return ConfigError(f"storage={text}", cli=f"--storage {text}")


def _checked_database_url(url: str) -> str:
    """``url`` itself, or a ConfigError for a URL that cannot hold a shared, resumable study.

    The URL is parsed here, before anything is trained or written, with SQLAlchemy's own parser, so a
    typo fails at once with the storage named (password hidden) instead of as a traceback later.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    scheme, _, rest = url.partition("://")
    shown = display_url(url)
    if scheme == "postgres" or scheme.startswith("postgres+"):
        raise _storage_error(f"{shown!r}: SQLAlchemy spells the scheme 'postgresql://' "
                          "(as in postgresql://user:password@host/db)")
    if scheme.split("+")[0] == "sqlite" and rest.lstrip("/") in ("", ":memory:"):
        raise _storage_error(f"{shown!r}: an in-memory SQLite database lives and dies with one "
                          "process, so worker processes and later resumes would not see the study; "
                          "give a file, e.g. sqlite:///study.db")
    try:
        port = make_url(url).port
    except ArgumentError as exc:
        raise _storage_error(f"{shown!r} is not a database URL (dialect+driver://user:password@host:port/"
                          "database, e.g. postgresql+psycopg2://user@db.example.org:5432/optuna)") from exc
    except ValueError as exc:  # SQLAlchemy's int() of the text after "host:"
        problem = hide_secrets(str(exc), url)
        port_text = re.fullmatch(r"invalid literal for int\(\) with base 10: (.*)", problem)
        if port_text:
            problem = f"the port {port_text[1]} is not a number (write host:port, e.g. db.example.org:5432)"
        raise _storage_error(f"{shown!r}: {problem}") from exc
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.host:
        raise _storage_error(f"{shown!r}: a SQLite file is written with three slashes, "
                          f"sqlite:///{parsed.host}{'/' + parsed.database if parsed.database else ''} "
                          "(four for an absolute path: sqlite:////tmp/study.db)")
    if port is not None and not 0 < port < 65536:
        raise _storage_error(f"{shown!r}: port {port} is out of range (1 to 65535)")
    return url


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (any driver spelling, ``sqlite+pysqlite:///...`` too, and SQLite's
    URI filenames, ``sqlite:///file:/path/study.db?mode=ro&uri=true``), else None."""
    if is_journal(url) or "://" not in url:
        return None
    from urllib.parse import unquote

    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    database = parsed.database
    if _query_flag(parsed, "uri") and database.startswith("file:"):
        # The file of "file:PATH" or "file://HOST/PATH" (SQLite takes an empty or "localhost" host).
        database = unquote(database[len("file:") :].partition("?")[0])
        if database.startswith("//"):
            database = "/" + database[2:].partition("/")[2]
    return Path(database)


def _query_value(parsed, key: str) -> str:
    """A query parameter of a parsed URL, lower-cased ("" when absent; the last of a repeated one)."""
    value = parsed.query.get(key, "")
    return str(value[-1] if isinstance(value, tuple) else value).lower()


def _query_flag(parsed, key: str) -> bool:
    return _query_value(parsed, key) in ("1", "true", "yes", "on")


def read_only_reason(url: str) -> str | None:
    """Why the SQLite file of ``url`` cannot be written, or None (it can, or the storage is no SQLite
    file). What SQLite itself would refuse: ``mode=ro`` or ``immutable=1`` in a URI filename, a file
    without write permission for this user, or a folder where its journal file cannot be created."""
    path = sqlite_path(url)
    if path is None:
        return None
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if _query_flag(parsed, "uri") and (_query_value(parsed, "mode") == "ro" or _query_flag(parsed, "immutable")):
        return "the URL opens it read-only: mode=ro or immutable=1"
    if path.exists() and not os.access(path, os.W_OK):
        return "no write permission"
    if path.parent.is_dir() and not os.access(path.parent, os.W_OK):
        return f"its folder {path.parent} is read-only, and SQLite writes a journal file beside it"
    return None


def refuse_read_only(url: str) -> None:
    """A one-line ConfigError naming the SQLite file when a run could not write its trials there."""
    reason = read_only_reason(url)
    if reason is not None:
        raise ConfigError(f"storage {display_url(url)!r}: the SQLite file {sqlite_path(url)} is read-only "
                          f"({reason}); a run writes its trials there, so make it writable or give another "
                          "--storage")


def is_journal(url: str) -> bool:
    return url.startswith(JOURNAL_PREFIX)


def open_storage(url: str, *, heartbeat_interval: int, grace_period: int, max_retry: int, writable: bool = True):
    """An Optuna storage for a URL from :func:`resolve_storage_url`.

    Every storage gets a heartbeat: a worker's trial whose heartbeat is older than ``grace_period``
    seconds is marked FAILED by the next worker that starts a trial, and queued again (up to
    ``max_retry`` times) with the same parameters. ``writable=False`` (only reading it) accepts a
    read-only SQLite file, which is otherwise refused (:func:`refuse_read_only`).
    """
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    if writable:
        refuse_read_only(url)
    if is_journal(url):
        from optuna.storages.journal import JournalFileBackend

        path = Path(url[len(JOURNAL_PREFIX) :])
        path.parent.mkdir(parents=True, exist_ok=True)
        return interrupts_deferred(_heartbeat_journal_class()(JournalFileBackend(str(path)), heartbeat_interval,
                                                              grace_period, retry_callback(max_retry)))

    engine_kwargs = {}
    sqlite = sqlite_path(url) is not None
    if sqlite:
        sqlite_path(url).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: the driver starts no transaction of its own; _serialised_sqlite does.
        engine_kwargs = {"connect_args": {"timeout": _SQLITE_LOCK_TIMEOUT_S, "isolation_level": None}}
    else:
        engine_kwargs = {"pool_pre_ping": True}  # a long trial may outlive an idle connection
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # Optuna 4.9 renamed the retry callback's argument with the callback.
        name = "heartbeat_stale_trial_callback" if hasattr(optuna.storages, "RetryHeartbeatStaleTrialCallback") \
            else "failed_trial_callback"
        callback = {name: retry_callback(max_retry)}
        try:
            storage = _rdb_storage(url, engine_kwargs=engine_kwargs, grace_period=grace_period,
                                   heartbeat_interval=heartbeat_interval, **callback)
            return interrupts_deferred(_serialised_sqlite(storage) if sqlite else storage)
        except ImportError as exc:
            hint = ""
            if url.startswith("postgresql://"):  # SQLAlchemy 2.1 reads it as psycopg (3)
                hint = ("; the driver of `pip install 'damcha-ts[postgres]'` is psycopg2, named in "
                        "the URL as postgresql+psycopg2://user:password@host/db")
            raise ConfigError(
                f"storage {display_url(url)!r} needs a database driver that is not installed: "
                f"{hide_secrets(str(exc), url)}{hint}"
            ) from exc
        except (SQLAlchemyError, ValueError) as exc:  # unknown dialect, bad option, server not reachable
            raise ConfigError(
                f"storage {display_url(url)!r} cannot be opened: {hide_secrets(_first_line(exc), url)}"
            ) from exc


# Attempts at opening a database whose tables another process may be creating at the same moment.
_CREATE_ATTEMPTS = 5


def _rdb_storage(url: str, **kwargs):
    """``optuna.storages.RDBStorage(url, **kwargs)``, tried again when it lost a race to create the tables.

    Machines (or processes) started together on an empty database all create Optuna's tables; the
    losers fail (PostgreSQL: "duplicate key value violates unique constraint", "relation ... already
    exists"; SQLite: "table ... already exists", "UNIQUE constraint failed"; MySQL: "Duplicate entry"). The winner's tables are there a moment later, so
    opening again succeeds."""
    import optuna
    from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

    for attempt in range(1, _CREATE_ATTEMPTS):
        try:
            return optuna.storages.RDBStorage(url, **kwargs)
        except (IntegrityError, OperationalError, ProgrammingError) as exc:
            if not re.search(r"duplicate (key|entry)|already exists|UNIQUE constraint failed", str(exc), re.IGNORECASE):
                raise
            time.sleep(0.2 * attempt)
    return optuna.storages.RDBStorage(url, **kwargs)


# The system attribute of a journal trial holding its worker's last heartbeat (seconds since the epoch).
JOURNAL_HEARTBEAT_ATTR = "damcha_ts:heartbeat"


@functools.cache
def _heartbeat_journal_class():
    """Optuna's journal storage with heartbeats (a class made on first use: importing this module
    loads no optuna).

    Optuna keeps heartbeats only in databases, so on a journal file ``fail_stale_trials`` did nothing
    and a killed worker's trial stayed RUNNING for ever. Here a beat is a system attribute of the trial,
    the writer's wall-clock time (the machines sharing a journal need clocks in step to well within the
    grace period); implementing Optuna's ``BaseHeartbeat`` makes ``fail_stale_trials``, its retry
    callback and ``workqueue.queue.Heartbeat`` work on it as on a database."""
    import optuna
    from optuna.storages._heartbeat import BaseHeartbeat  # the interface RDBStorage implements
    from optuna.trial import TrialState

    class HeartbeatJournalStorage(optuna.storages.JournalStorage, BaseHeartbeat):
        def __init__(self, backend, heartbeat_interval: int, grace_period: int, stale_trial_callback) -> None:
            super().__init__(backend)
            self.heartbeat_interval, self.grace_period = heartbeat_interval, grace_period
            self.stale_trial_callback = stale_trial_callback

        def record_heartbeat(self, trial_id: int) -> None:
            self.set_trial_system_attr(trial_id, JOURNAL_HEARTBEAT_ATTR, time.time())

        def _get_stale_trial_ids(self, study_id: int) -> list[int]:
            limit = time.time() - self.grace_period
            stale = []
            for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
                beat = trial.system_attrs.get(JOURNAL_HEARTBEAT_ATTR)
                # A queued copy carries its original's system attributes, last beat included: its
                # own start counts as a beat. A trial never beaten is not ours to judge (as in Optuna).
                started = trial.datetime_start.timestamp() if trial.datetime_start else 0.0
                if not isinstance(beat, int | float) or isinstance(beat, bool):
                    continue  # none, or not ours (a hand edit of the journal): never a beat to judge by
                if max(float(beat), started) < limit:
                    stale.append(self.get_trial_id_from_study_id_trial_number(study_id, trial.number))
            return stale

        def get_heartbeat_interval(self) -> int:
            return self.heartbeat_interval

        def get_heartbeat_stale_trial_callback(self):
            return self.stale_trial_callback

        def get_failed_trial_callback(self):  # the name Optuna before 4.9 asks for
            return self.stale_trial_callback

    return HeartbeatJournalStorage


def _serialised_sqlite(storage):
    """Every transaction on the SQLite file takes its write lock when it begins (BEGIN IMMEDIATE).

    SQLite has no ``SELECT ... FOR UPDATE``, and the driver begins a transaction only at its first
    write, so two workers could both read a trial as WAITING and both mark it RUNNING: the same
    trial handed out twice (tests/workqueue shows it, four processes over 120 trials). Taken at
    BEGIN, the lock makes the read and the write one step, as the row lock does on PostgreSQL."""
    from sqlalchemy import event

    @event.listens_for(storage.engine, "begin")
    def _begin_immediate(connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return storage


def interrupts_deferred(storage):
    """``storage`` with every call run whole before a Ctrl+C or SIGTERM that arrives meanwhile is raised.

    Raised inside SQLAlchemy's session code (after ``BEGIN IMMEDIATE``, or while the session closes),
    the KeyboardInterrupt leaves a connection checked out in its transaction, kept alive by the
    exception's frames; the worker's next call, which puts the interrupted trial back in the queue,
    then waited for that connection's lock (``_SQLITE_LOCK_TIMEOUT_S``) and failed, or found the
    session unusable (``IllegalStateChangeError``). Raised between two calls, it finds no transaction
    open. (Wrapped on the instance: Optuna's own calls from one method to another go through it too.)"""
    for name in dir(type(storage)):
        method = getattr(storage, name)
        if not name.startswith("__") and callable(method) and not isinstance(method, type):
            setattr(storage, name, _deferring(method))
    return storage


def _deferring(method):
    @functools.wraps(method)
    def call(*args, **kwargs):
        with signals_held():
            return method(*args, **kwargs)

    return call


@contextlib.contextmanager
def signals_held():
    """SIGINT and SIGTERM that arrive in the block are raised when it is done. Python runs signal
    handlers in the main thread whichever thread the signal reaches, so handlers that only note the
    signal defer it reliably (a thread mask would not: other threads would still take it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.signal(number, lambda signum, frame: arrived.append(signum)) for number in held}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for number in dict.fromkeys(arrived):
            signal.raise_signal(number)


def retry_callback(max_retry: int | None):
    """Optuna's callback that queues a copy of a failed trial (same parameters and user attributes),
    at most ``max_retry`` times per original trial (None: always); renamed in Optuna 4.9."""
    import optuna

    retry_class = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) \
        or optuna.storages.RetryFailedTrialCallback
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return retry_class(max_retry=max_retry)


def _first_line(exc: Exception) -> str:
    return (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__])[0]


# Query parameters whose value is a credential: SQLAlchemy passes them to the driver as connect
# arguments (password, passwd, pwd, sslpassword, ...), and anything that looks like a secret, token
# or key (api_key, auth_token, sslkey, a whole libpq "dsn"), whatever the driver.
_SECRET_KEY = re.compile(r"pass|pwd|secret|token|key|auth|credential|dsn", re.IGNORECASE)
# SQLAlchemy's own reading of the user-info: the user is [^:/]*, the password runs to the next "@".
# Greedy up to the URL's last "@": a password with "/", "?", "#" or a raw "@" (which SQLAlchemy cuts
# at the first one, reading the rest as the host) is hidden whole. An "@" further on (in the query)
# hides more than the password, never less.
_USERINFO = re.compile(r"^[^:/?#]+://[^:/@]*:(?P<password>.*)@")


def _secret_spans(url: str) -> list[tuple[int, int]]:
    """Where ``url`` holds credentials: the user-info password and the value of each query parameter
    whose (percent-decoded) key looks like a secret. Text only: it works on URLs no parser accepts."""
    from urllib.parse import unquote_plus

    head = url.find("://")
    if head < 0 or is_journal(url):
        return []
    spans, start = [], head + 3
    userinfo = _USERINFO.match(url)
    if userinfo:
        spans.append(userinfo.span("password"))
        start = userinfo.end()
    query = url.find("?", start)
    if query >= 0:
        position = query + 1
        for pair in url[query + 1 :].split("&"):
            key, equals, _ = pair.partition("=")
            if equals and _SECRET_KEY.search(unquote_plus(key)):
                spans.append((position + len(key) + 1, position + len(pair)))
            position += len(pair) + 1
    return [(begin, end) for begin, end in spans if end > begin]


def display_url(url: str) -> str:
    """The URL with every credential replaced by ``***``, for logs, reports and error messages."""
    for begin, end in reversed(_secret_spans(url)):
        url = f"{url[:begin]}***{url[end:]}"
    return url


def hide_secrets(text: str, url: str) -> str:
    """``text`` (an error from SQLAlchemy or a driver) with ``url`` as :func:`display_url` shows it and
    every credential of ``url`` it may echo hidden: as written, percent-decoded, or one word of a DSN
    value (libpq quotes the part of a connection string it cannot parse)."""
    from urllib.parse import unquote, unquote_plus

    text = text.replace(url, display_url(url))
    secrets = set()
    for begin, end in _secret_spans(url):
        for value in {url[begin:end], unquote(url[begin:end]), unquote_plus(url[begin:end])}:
            secrets.add(value)
            secrets.update(word.partition("=")[2] or word for word in value.split())
            secrets.update(value.split("@"))  # SQLAlchemy reads what follows a raw "@" as the host
    for secret in sorted({s.strip("'\"") for s in secrets} - {""}, key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", "***", text)
    return text
