"""How the trials of a ``Forecaster("auto")`` search run and read (tuning/auto.py): pruned on the inner
validation loss, stopped when the budget is spent, spread over helper processes (``workers=``), and
summed up as the table ``leaderboard_`` shows."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import multiprocessing
import pickle
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from damcha_ts.data.registry import DataWarning
from damcha_ts.errors import ConfigError, ConvergenceWarning, DataError


def pruning_callback(trial):
    """A Lightning callback that reports each inner validation loss to ``trial`` (at the optimiser
    step) and stops training, gracefully, when Optuna's pruner says so (``pruned_at``: the step); not
    at the last step, where there is nothing left to save and the candidate is scored as it is."""
    import lightning as L

    class Pruning(L.Callback):
        pruned_at: int | None = None

        def on_validation_end(self, trainer, pl_module) -> None:
            loss = trainer.callback_metrics.get("val_loss")
            if trainer.sanity_checking or loss is None or not math.isfinite(float(loss)):
                return
            trial.report(float(loss), step=int(trainer.global_step))
            last = 0 <= trainer.max_steps <= trainer.global_step
            if not last and trial.should_prune():
                self.pruned_at, trainer.should_stop = int(trainer.global_step), True

    return Pruning()


def scored_candidates(study) -> dict[str, tuple[float | None, str | None]]:
    """Each candidate the study has scored (by any process or machine): its score, or the reason it
    failed; not an interrupted one (it may run again)."""
    return {t.user_attrs["candidate"]: (t.value, t.user_attrs.get("reason"))
            for t in study.get_trials(deepcopy=False) if "candidate" in t.user_attrs
            and (t.state.name == "COMPLETE" or (t.state.name == "FAIL" and "reason" in t.user_attrs))}


def trained_elsewhere(study, key: str, number: int) -> bool:
    """Whether another trial of the study (another process's) is training candidate ``key`` right now."""
    from optuna.trial import TrialState

    return any(t.user_attrs.get("candidate") == key and t.number != number
               for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))


def stop_when_spent(deadline: float, reserve: Callable[[], float], least: float):
    """An Optuna callback: stop once what is left after ``reserve()`` is below ``least`` seconds."""
    def callback(study, trial) -> None:
        if time.monotonic() + reserve() + least > deadline:
            study.stop()
    return callback


@contextlib.contextmanager
def quiet_search():
    """A short trial still improving, or an inner tail of few windows, is the search's business, not the
    user's; so is a candidate that failed with a ConfigError or DataError: its reason is in the table
    (and said), where Optuna logged a traceback per trial (hundreds of lines when they all fail)."""
    import optuna

    optimize_log = logging.getLogger("optuna.study._optimize")
    candidate_failures = _CandidateFailures()
    optimize_log.addFilter(candidate_failures)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.simplefilter("ignore", DataWarning)
            warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
            yield
    finally:
        optimize_log.removeFilter(candidate_failures)


class _CandidateFailures(logging.Filter):
    """Optuna's two records of a failed trial: its traceback and "failed with value None". The search
    catches only ConfigError and DataError (a candidate's reason, not a bug); any other error is raised."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, (ConfigError, DataError)) or record.getMessage().endswith("failed with value None."))


# ---------------------------------------------------------------------- helper processes (workers=)
def start_workers(search, data: Any, options: Mapping[str, Any], study_name: str, run, least: float) -> list:
    """``search.workers - 1`` helper processes (spawned: a fresh interpreter each, no forked torch
    state) that draw and run trained trials in the shared study until the deadline (the same instant
    for all: wall-clock time), each with its share of the cores; none when less than ``least`` seconds
    are left. The data travels to them pickled, in memory; nothing is read back from disk."""
    from damcha_ts.training.devices import threads_per_worker

    left = run.deadline - time.monotonic()
    if left < least:
        return []
    payload = {"search": search, "data": data, "options": dict(options), "study_name": study_name, "storage": run.storage,
               "deadline": time.time() + left, "threads": threads_per_worker(search.workers)}
    try:
        pickle.dumps(payload)
    except Exception as error:  # noqa: BLE001 - whatever cannot be pickled (a callback in trainer_kwargs, ...)
        raise ConfigError(f"workers={search.workers}: the data and settings must be picklable to reach the helper "
                          f"processes ({error}); use workers=1") from error
    context = multiprocessing.get_context("spawn")
    helpers = [context.Process(target=_work, args=(payload, index), daemon=True, name=f"damcha-auto-{index}")
               for index in range(1, search.workers)]
    for helper in helpers:
        helper.start()
    return helpers


def _work(payload: dict, index: int) -> None:
    """A helper process: the same search on the same study, trained trials only, until the deadline."""
    import torch

    torch.set_num_threads(payload["threads"])
    search = payload["search"]
    search.study_name, search.storage, search.verbose = payload["study_name"], payload["storage"], False
    with quiet_search():  # what setup warns of, the search's own process has said
        first, run = search.setup(payload["data"], payload["options"], payload["deadline"] - time.time())
        search.optimize(search.study(first, run, worker=index), run, worker=index)


@contextlib.contextmanager
def share_cores(workers: int):
    """This process's share of the cores while ``workers`` processes train (all of them again after)."""
    if workers < 2:
        yield
        return
    import torch

    from damcha_ts.training.devices import threads_per_worker

    previous = torch.get_num_threads()
    torch.set_num_threads(threads_per_worker(workers))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def wait_for(helpers: list, deadline: float) -> None:
    """Wait for the helper processes until a little past the ``deadline`` (time.monotonic()), stop those
    still running, and warn about any that failed (its trials are missing from the search)."""
    for helper in helpers:
        helper.join(timeout=max(deadline - time.monotonic(), 0.0) + 30.0)
    stop(helpers)
    failed = [f"{helper.name} (exit {helper.exitcode})" for helper in helpers if helper.exitcode not in (0, None)]
    if failed:
        warnings.warn(f"auto: helper processes failed: {', '.join(failed)}; the search ran without their trials "
                      "(a script that starts workers needs `if __name__ == \"__main__\":` around its code)",
                      RuntimeWarning, stacklevel=4)


def stop(helpers: list) -> None:
    """Stop the helper processes still running (terminate, then wait up to 10 s each)."""
    for helper in helpers:
        if helper.is_alive():
            helper.terminate()
            helper.join(timeout=10.0)


# ---------------------------------------------------------------------- the table of trials
def summarize(study, rules_attr: str) -> list[dict]:
    """Every candidate scored: the fixed rules (the study's user attribute ``rules_attr``; number None)
    and every trial, with its validation MASE, seconds, state, and why it failed or was pruned; best first."""
    rows = [_row(None, key, outcome.get("value"), outcome.get("seconds"), outcome["state"],
                 {"reason": outcome["reason"]} if "reason" in outcome else {})
            for key, outcome in study.user_attrs.get(rules_attr, {}).items()]
    for trial in study.get_trials(deepcopy=False):
        if "candidate" in trial.user_attrs:
            rows.append(_row(trial.number, trial.user_attrs["candidate"],
                             trial.value if trial.state.name == "COMPLETE" else None, trial.user_attrs.get("seconds"),
                             trial.state.name, {k: trial.user_attrs[k] for k in ("reason", "worker") if k in trial.user_attrs}))
    return sorted(rows, key=lambda row: (row["validation_mase"] is None, row["validation_mase"] or 0.0, row["number"] or -1))


def _row(number, key: str, value, seconds, state: str, extra: Mapping[str, Any]) -> dict:
    candidate = json.loads(key)
    model, lookback = candidate.pop("model"), candidate.pop("lookback")
    return {"number": number, "model": model, "lookback": lookback, "settings": candidate,
            "validation_mase": finite(value), "seconds": finite(seconds), "state": state, **extra}


def leaderboard(facts: Mapping[str, Any]):
    """The search's trials as a DataFrame, best first (``Forecaster.leaderboard_``)."""
    import pandas as pd

    rows = [{**{k: v for k, v in row.items() if k != "settings"}, **row.get("settings", {})}
            for row in facts["auto"]["trials"]]
    return pd.DataFrame(rows)


def finite(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None
