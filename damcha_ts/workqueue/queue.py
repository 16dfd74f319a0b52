"""An Optuna study as a work queue: WAITING trials are the work, handed out atomically.

Both the leaderboard (a grid cell is a trial with its cell in ``user_attrs``) and ``damcha-ts tune``
(a trial of the launch's budget) run on this. Optuna's storages already do what a queue for many
machines needs: ``set_trial_state_values(trial, RUNNING)`` succeeds for exactly one caller, so no
piece of work is handed out twice (SQLite serialises writers; PostgreSQL and MySQL lock the row); a
worker records heartbeats while it works; :func:`fail_stale` marks the trial of a worker whose
heartbeat stopped (SIGKILL, a lost machine) FAILED, and the storage's retry callback
(``workqueue.storage.open_storage``) queues a copy of it, with the same parameters and user attributes.

Why not ``study.optimize``: when nothing is waiting, ``Study.ask`` creates a new trial instead of
saying so, and two workers racing for the last waiting trial would then add one more than asked.
:func:`claim_waiting` takes only what is queued. Everything here is Optuna's public API.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import traceback
import warnings
from collections.abc import Callable
from typing import Any

from damcha_ts.workqueue.storage import signals_held

# User attribute of a claimed trial: which worker runs it ("host:pid"), for --status and reports.
WORKER_ATTR = "worker"
# User attribute of a trial failed by its objective: the traceback (a stale trial has none).
ERROR_ATTR = "error"
INTERRUPTED = "interrupted"  # the error of a trial stopped on purpose (a copy of it was queued)


def worker_label() -> str:
    import os

    return f"{socket.gethostname()}:{os.getpid()}"


def heartbeat_interval(storage) -> int | None:
    """Seconds between a worker's heartbeats, or None for a storage without them (one not opened by
    ``workqueue.storage.open_storage``)."""
    get_interval = getattr(storage, "get_heartbeat_interval", None)
    return get_interval() if get_interval is not None else None


def new_launch_token() -> int:
    """A random token per launch (a run of workers), recorded on the work it runs. Random, not derived
    from the trial count: machines joining a shared study together see the same count, so a
    count-based token (and the sampler seeds derived from it) would be the same on each."""
    import secrets

    return secrets.randbits(63)


class StudyQueue:
    """The WAITING trials of one study as a queue: claim one, run it under a heartbeat, tell how it
    ended. ``storage`` is the one the study was opened on (``workqueue.storage.open_storage``)."""

    def __init__(self, study, storage) -> None:
        self.study, self.storage = study, storage
        self.study_id = storage.get_study_id_from_name(study.study_name)

    def trial_id(self, number: int) -> int:
        """The storage's id of trial ``number`` (the storage calls take ids, trials show numbers)."""
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)

    def claim(self, accept: Callable[[Any], bool] = lambda trial: True) -> int | None:
        """Take the first WAITING trial (in number order) that ``accept(frozen_trial)`` approves; its
        storage id, or None when there is none left. The state change to RUNNING is the claim: when
        another worker got there first the storage refuses it and the next trial is tried."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        for frozen in self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            if not accept(frozen):
                continue
            trial = self.trial_id(frozen.number)
            try:
                if self.storage.set_trial_state_values(trial, state=TrialState.RUNNING):
                    # A first beat at once: a worker killed before its Heartbeat starts still leaves
                    # a trial that turns stale, not one RUNNING for ever.
                    if heartbeat_interval(self.storage) is not None:
                        self.storage.record_heartbeat(trial)
                    self.storage.set_trial_user_attr(trial, WORKER_ATTR, worker_label())
                    return trial
            except UpdateFinishedTrialError:  # finished by someone else meanwhile
                continue
        return None

    def fail_stale(self) -> None:
        """Mark RUNNING trials whose worker's heartbeat stopped FAILED; the storage's retry callback
        queues each again (up to its ``max_retry``). Nothing happens on a storage without heartbeats."""
        import optuna

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(self.study)

    def run(self, trial: int, work: Callable[[Any], float], *, catch: tuple[type[BaseException], ...] = ()):
        """Run ``work(optuna.Trial)`` on a claimed trial under its heartbeat and tell the study how it
        ended: COMPLETE with the returned value, PRUNED on ``optuna.TrialPruned``, FAIL (traceback in
        the ``error`` user attribute) on an exception in ``catch``. An interrupt (Ctrl+C, or SIGTERM
        turned into one; Lightning turns it into SystemExit) puts the work back in the queue and
        propagates, as does any other exception after failing the trial. Returns the finished trial
        as stored; raises :class:`Superseded` when the trial was taken away meanwhile (this worker's
        heartbeat was missed for longer than the grace period, and the work went to another)."""
        import optuna
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        handle = optuna.Trial(self.study, trial)
        heartbeat = Heartbeat(self.storage, trial)
        # The heartbeat stops before anything is told: a beat after our own tell would read a
        # finished trial and take it for one taken away.
        with heartbeat:
            try:
                value = work(handle)
                ended = None
            except UpdateFinishedTrialError as exc:  # the work tried to record something on it
                raise Superseded(self._superseded_message(trial)) from exc
            except optuna.TrialPruned:
                ended = TrialState.PRUNED
            except catch:
                ended, error = TrialState.FAIL, traceback.format_exc()
            except (KeyboardInterrupt, SystemExit):
                heartbeat.stop()
                self.requeue(trial, INTERRUPTED)
                raise
            except BaseException:
                heartbeat.stop()
                self.study.tell(handle, state=TrialState.FAIL, skip_if_finished=True)
                raise
        if heartbeat.lost:
            raise Superseded(self._superseded_message(trial))
        try:
            if ended == TrialState.PRUNED:
                _tell_unless_finished(self.study, handle, state=ended)
            elif ended == TrialState.FAIL:
                if not self.fail(trial, error):
                    raise Superseded(self._superseded_message(trial))
            else:
                ended = self._tell_value(trial, handle, value)
        except UpdateFinishedTrialError as exc:  # failed as stale between our check and our tell
            raise Superseded(self._superseded_message(trial)) from exc
        stored = self.storage.get_trial(trial)
        if stored.state != ended:
            raise Superseded(self._superseded_message(trial))
        return stored

    def _superseded_message(self, trial: int) -> str:
        number = self.storage.get_trial(trial).number
        return (f"trial {number} was given to another worker while this one still ran it (no heartbeat for "
                f"longer than the grace period); this worker's result is dropped")

    def fail(self, trial: int, error: str) -> bool:
        """End a claimed trial FAILED with ``error`` recorded (not retried: it is not stale); False,
        and nothing changed, when it had ended already (failed as stale meanwhile)."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        try:
            self.storage.set_trial_user_attr(trial, ERROR_ATTR, error)
            _tell_unless_finished(self.study, self.storage.get_trial(trial).number, state=TrialState.FAIL)
        except UpdateFinishedTrialError:
            return False
        return True

    @contextlib.contextmanager
    def holding(self, trial: int):
        """The block that handles a claimed trial: an interrupt anywhere in it (not only inside
        :meth:`run`) puts the trial back in the queue if it is still RUNNING."""
        from optuna.trial import TrialState

        try:
            yield
        except (KeyboardInterrupt, SystemExit):
            if self.storage.get_trial(trial).state == TrialState.RUNNING:
                self.requeue(trial, INTERRUPTED)
            raise

    def requeue(self, trial: int, why: str) -> None:
        """End a claimed trial FAILED and queue a copy of it (its parameters and user attributes):
        work stopped on purpose comes back at once. Unlike the storage's retry of a dead worker's
        trial, this does not count toward ``max_retry`` (a preempted job is not a broken one), and a
        second Ctrl+C or SIGTERM waits until the copy is queued."""
        import optuna
        from optuna.trial import TrialState

        with signals_held():
            frozen = self.storage.get_trial(trial)
            if frozen.state != TrialState.RUNNING:
                return
            self.fail(trial, why)
            system_attrs = {**frozen.system_attrs, "failed_trial": frozen.system_attrs.get("failed_trial", frozen.number)}
            self.study.add_trial(optuna.trial.create_trial(
                state=TrialState.WAITING, params=frozen.params, distributions=frozen.distributions,
                user_attrs={k: v for k, v in frozen.user_attrs.items() if k != ERROR_ATTR}, system_attrs=system_attrs,
            ))

    def _tell_value(self, trial: int, handle, value: float):
        """COMPLETE with ``value``; a value that is not a finite number fails the trial, saying so.
        Returns the state told."""
        import math

        from optuna.trial import TrialState

        from damcha_ts.errors import plain_repr

        if value is None or not math.isfinite(float(value)):
            return TrialState.FAIL if self.fail(trial, f"the result is not a finite number ({plain_repr(value)})") else None
        _tell_unless_finished(self.study, handle, float(value))
        return TrialState.COMPLETE


def _tell_unless_finished(study, trial, *args, **kwargs) -> None:
    """``study.tell`` that leaves a trial ended meanwhile (failed as stale) as it is; the caller sees
    that in the stored state."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna warns when it skips a finished trial
        study.tell(trial, *args, skip_if_finished=True, **kwargs)


class Superseded(Exception):
    """The trial was failed as stale and queued again while this worker still ran it: drop the result."""


class Heartbeat:
    """Records the trial's heartbeat now and every ``get_heartbeat_interval()`` seconds until the
    block ends, in a daemon thread, so the trial of a worker that dies turns stale."""

    def __init__(self, storage, trial: int) -> None:
        self.storage, self.trial = storage, trial
        self.interval = heartbeat_interval(storage)
        self._stop = threading.Event()
        self._thread = None
        self.lost = False

    def _beat(self) -> None:
        from optuna.trial import TrialState

        while not self._stop.wait(self.interval):
            try:
                if self.storage.get_trial(self.trial).state != TrialState.RUNNING:
                    self.lost = True  # failed as stale by another worker: the work is someone else's now
                    return
                self.storage.record_heartbeat(self.trial)
            except Exception:  # noqa: BLE001 - a database hiccup must not kill the work; the next beat retries
                pass

    def __enter__(self) -> Heartbeat:
        if self.interval is not None:
            self.storage.record_heartbeat(self.trial)
            self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __exit__(self, *exc) -> None:
        self.stop()
