"""A study in its storage, launch by launch: opened under its pins, the search file's points queued
once, each launch's ``n_trials`` waiting trials tagged with its token (taken over, replaced when they
fail, handed back when it is interrupted), and every launch recorded in the study's history.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping

from damcha_ts.errors import ConfigError
from damcha_ts.tuning.objective import LAUNCH_ATTR
from damcha_ts.tuning.space import SearchSpec
from damcha_ts.workqueue.queue import StudyQueue, heartbeat_interval
from damcha_ts.workqueue.storage import display_url, open_storage

# Study attributes that pin what a stored study means, so a rerun cannot silently mix setups.
_PINNED_ATTRS = ("base_config_hash", "search_hash")
# The index in the search file's ``points`` of a trial queued from it.
POINT_ATTR = "search_point"
TAKEN_OVER_ATTR = "taken_over_at"  # when a launch took a waiting trial over (seconds since the epoch)
# Study user attribute: [{"command", "trials_before", "n_trials", "started", "launch_token", "workers"}].
INVOCATIONS_ATTR = "invocations"


def open_study_storage(url: str, spec: SearchSpec):
    """The storage at ``url`` with the search file's heartbeat, grace period and retries."""
    return open_storage(url, heartbeat_interval=spec.heartbeat_interval, grace_period=spec.grace_period,
                        max_retry=spec.max_retry)


def open_study(name: str, url: str, spec: SearchSpec, pins: Mapping[str, str]):
    """Create or load the study, and refuse to resume it under another setup.

    ``pins`` (hashes of the base config and of the search space + trainer arguments) are stored on
    a new study and compared on every later launch, so a rerun never mixes incomparable trials.
    A killed worker's trial from an earlier launch is marked FAILED (and queued again) here.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=open_study_storage(url, spec), direction="minimize",
                                load_if_exists=True, sampler=spec.make_sampler(), pruner=spec.make_pruner())
    for key in _PINNED_ATTRS:
        stored = study.user_attrs.get(key)
        if stored is None:
            study.set_user_attr(key, pins[key])
        elif stored != pins[key]:
            what = (
                "base config (--config/--set/--horizon)"
                if key == "base_config_hash"
                else "search space or trainer arguments"
            )
            raise ConfigError(
                f"study {name!r} in {display_url(url)} was created with another {what}; "
                "resume with the same one or pick a new --study-name"
            )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    _queue_points(study, spec)
    return study


def _queue_points(study, spec: SearchSpec) -> None:
    """Queue the search file's ``points`` not queued before (each once per study, in file order);
    untagged, so the next launch takes them before the sampler's trials (``queue_launch``)."""
    queued = {t.user_attrs.get(POINT_ATTR) for t in study.get_trials(deepcopy=False)}
    for index, point in enumerate(spec.points):
        if index not in queued:
            study.enqueue_trial(spec.encoded_point(point), user_attrs={POINT_ATTR: index})


def queue_launch(study, storage, token: int, n_trials: int) -> int:
    """Tag ``n_trials`` waiting trials with the launch's token: first those no launch has (enqueued by
    hand, as Optuna users seed a study) or whose launch is over (the queued copy of a killed
    worker's trial), then new empty ones the sampler fills. Returns how many were there before."""
    from optuna.trial import TrialState

    queue = StudyQueue(study, storage)
    # A launch with a trial running is alive, and so is one that took a trial over within the grace
    # period (its workers may still be starting): the copies of their killed workers' trials are theirs.
    alive = {t.user_attrs.get(LAUNCH_ATTR) for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    interval = heartbeat_interval(storage) or 60
    recent = time.time() - 3 * interval  # a grace period's worth, as for a worker's heartbeat
    untaken = [t for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
               if t.user_attrs.get(LAUNCH_ATTR) is None
               or ("failed_trial" in t.system_attrs and t.user_attrs[LAUNCH_ATTR] not in alive
                   and t.user_attrs.get(TAKEN_OVER_ATTR, 0) < recent)][:n_trials]
    for trial in untaken:
        queue.storage.set_trial_user_attr(queue.trial_id(trial.number), LAUNCH_ATTR, token)
        queue.storage.set_trial_user_attr(queue.trial_id(trial.number), TAKEN_OVER_ATTR, time.time())
    for _ in range(n_trials - len(untaken)):
        study.enqueue_trial({}, user_attrs={LAUNCH_ATTR: token})
    return len(untaken)


def record_invocation(study, worker_spec: Mapping, *, command: str | None, workers: int) -> None:
    """The study's own history: a resumed study's report lists every launch that fed it, with the
    token its workers' sampler seeds came from."""
    history = list(study.user_attrs.get(INVOCATIONS_ATTR, []))
    history.append({"command": command or "run_study() from Python", "trials_before": worker_spec["launch"],
                    "n_trials": worker_spec["n_trials"], "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "launch_token": worker_spec["launch_token"], "workers": workers})
    study.set_user_attr(INVOCATIONS_ATTR, history)


def release_unstarted(study, storage, token: int) -> None:
    """An interrupted launch hands its trials that never started to the next launch (which takes
    waiting trials without a launch first), instead of leaving them queued for nobody."""
    from optuna.trial import TrialState

    queue = StudyQueue(study, storage)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if trial.user_attrs.get(LAUNCH_ATTR) == token:
            storage.set_trial_user_attr(queue.trial_id(trial.number), LAUNCH_ATTR, None)


def replace_failed(study, trial, token: int, n_trials: int) -> None:
    """A failed trial of the launch is replaced by a new one, so the launch still adds ``n_trials``;
    not forever: once the launch has failed ``n_trials`` times, no more."""
    from optuna.trial import TrialState

    fails = sum(t.user_attrs.get(LAUNCH_ATTR) == token for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)))
    if fails <= n_trials:
        study.enqueue_trial({}, user_attrs={LAUNCH_ATTR: token})


def launch_finished(study, launch_token: int) -> int:
    """The launch's COMPLETE + PRUNED trials (what its ``n_trials`` counts); other launches' and
    other machines' trials in a shared study are not its own."""
    from optuna.trial import TrialState

    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    return sum(t.user_attrs.get(LAUNCH_ATTR) == launch_token for t in finished)
