"""How the trials of a ``Forecaster("auto")`` search run and read (tuning/auto.py): pruned on the inner
validation loss, stopped when the budget is spent, spread over helper processes (``workers=``), and
summed up as the table ``leaderboard_`` shows."""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import pickle
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from damcha_ts.data.registry import DataWarning
from damcha_ts.errors import ConfigError, ConvergenceWarning


def pruning_callback(trial):
    """A Lightning callback that reports each inner validation loss to ``trial`` (at the optimiser
    step) and stops training, gracefully, when Optuna's pruner says so (``pruned_at``: the step)."""
    import lightning as L

    class Pruning(L.Callback):
        pruned_at: int | None = None

        def on_validation_end(self, trainer, pl_module) -> None:
            loss = trainer.callback_metrics.get("val_loss")
            if trainer.sanity_checking or loss is None or not math.isfinite(float(loss)):
                return
            trial.report(float(loss), step=int(trainer.global_step))
            if trial.should_prune():
                self.pruned_at, trainer.should_stop = int(trainer.global_step), True

    return Pruning()


def stop_when_spent(deadline: float, reserve: Callable[[], float], least: float):
    """An Optuna callback: stop once what is left after ``reserve()`` is below ``least`` seconds."""
    def callback(study, trial) -> None:
        if time.monotonic() + reserve() + least > deadline:
            study.stop()
    return callback


@contextlib.contextmanager
def quiet_search():
    """A short trial still improving, or an inner tail of few windows, is the search's business, not the user's."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", DataWarning)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        yield


# ---------------------------------------------------------------------- helper processes (workers=)
def start_workers(search, data: Any, options: Mapping[str, Any], study_name: str, run) -> list:
    """``search.workers - 1`` helper processes (spawned: a fresh interpreter each, no forked torch
    state) that draw and run trained trials in the shared study until the deadline; each gets its
    share of the cores. The data travels to them pickled, in memory; nothing is read back from disk."""
    from damcha_ts.training.devices import threads_per_worker

    payload = {"search": search, "data": data, "options": dict(options), "study_name": study_name, "storage": run.storage,
               "seconds": run.deadline - time.monotonic(), "threads": threads_per_worker(search.workers)}
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
    first, run = search.setup(payload["data"], payload["options"], payload["seconds"])
    with quiet_search():
        search.optimize(search.study(first, run, worker=index), run, first=False)


def wait_for(helpers: list, deadline: float) -> None:
    """Wait for the helper processes until a little past the deadline; stop those still running."""
    for helper in helpers:
        helper.join(timeout=max(deadline - time.monotonic(), 0.0) + 30.0)
    for helper in helpers:
        if helper.is_alive():
            helper.terminate()
            helper.join(timeout=10.0)


# ---------------------------------------------------------------------- the table of trials
def summarize(study) -> list[dict]:
    """Every trial: its candidate, validation MASE, seconds and state, best first."""
    rows = []
    for trial in study.get_trials(deepcopy=False):
        if "candidate" not in trial.user_attrs:
            continue
        candidate = json.loads(trial.user_attrs["candidate"])
        model, lookback = candidate.pop("model"), candidate.pop("lookback")
        value = trial.value if trial.state.name == "COMPLETE" else None
        rows.append({"number": trial.number, "model": model, "lookback": lookback, "settings": candidate,
                     "validation_mase": finite(value), "seconds": finite(trial.user_attrs.get("seconds")),
                     "state": trial.state.name,
                     **{key: trial.user_attrs[key] for key in ("reason", "worker") if key in trial.user_attrs}})
    return sorted(rows, key=lambda row: (row["validation_mase"] is None, row["validation_mase"] or 0.0, row["number"]))


def leaderboard(facts: Mapping[str, Any]):
    """The search's trials as a DataFrame, best first (``Forecaster.leaderboard_``)."""
    import pandas as pd

    rows = [{**{k: v for k, v in row.items() if k != "settings"}, **row.get("settings", {})}
            for row in facts["auto"]["trials"]]
    return pd.DataFrame(rows)


def finite(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None
