"""``Forecaster("auto")``: the best forecast for the user's data within a time budget, chosen on validation.

    >>> f = Forecaster("auto", horizon=24, time_budget=300, random_state=0).fit(frame)   # doctest: +SKIP
    >>> f.fit_result_["auto"]["chosen"]; f.leaderboard_                                  # doctest: +SKIP

How :meth:`AutoSearch.fit` runs:

1. **Where candidates are scored.** The data is split as any fit splits it (train, validation,
   test; ``test_size=0``: no test). Each candidate trains on the train rows, stopping early on an
   inner tail of them, and is scored on the validation rows: MASE over every window, pooled over
   the series (:meth:`damcha_ts.data.panel.Panel.selection_split`). No candidate reads a test row.
2. **What is searched** (:class:`AutoSpace`): the baselines (naive, seasonal naive, window mean,
   drift), the trained linear model and the DAMCHA and MHA models of both families, with lookback,
   learning rate, optimiser steps, width and dropout. The baselines, the linear model and the
   recommended default run first (enqueued trials), then Optuna's TPE samples; a trained trial whose
   inner validation loss is above the median of earlier ones at the same step is pruned.
3. **The budget.** A trained trial starts while the budget, less the final fit of the best candidate
   so far (:data:`FINAL_FIT_FACTOR` times its trial), leaves :data:`MIN_TRIAL_SECONDS`; it stops at the
   budget (Lightning's ``max_time``), its best weights kept. The baselines run whatever the budget,
   so a budget too small for any trained candidate returns the best baseline, with a BudgetWarning.
4. **The final model.** The chosen candidate is fitted on the data's own split with ``refit=True``
   (a fixed rule: as it is): early stopping on the validation rows, ``level=`` intervals calibrated
   there by that first pass, then retrained on the train and validation rows for its best step count.

``storage=`` (a SQLite file or an Optuna storage URL) keeps the study: the same fit on the same data
continues it (its trials are kept and count; the budget is this fit's). The sampler is seeded from
``random_state`` and the number of trials the study holds; what a budget covers depends on the machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from damcha_ts.data.time_index import season_length_of
from damcha_ts.errors import BudgetWarning, ConfigError, ConvergenceWarning, DataError, plain_repr
from damcha_ts.schema import DEFAULT_MODEL, read_yaml, reject_unknown_keys

FIXED_RULES = ("naive", "seasonal_naive", "window_mean", "drift")
TRAINED_MODELS = ("linear", "itransformer_mha", "itransformer_damcha_static", "gateformer_mha", DEFAULT_MODEL)
#: Seconds a search may take when ``time_budget`` is not given.
DEFAULT_TIME_BUDGET = 300.0
#: The final fit (first pass and refit on more rows) takes about this many times its trial.
FINAL_FIT_FACTOR = 2.2
#: A trained trial is not started with less time than this left.
MIN_TRIAL_SECONDS = 5.0
#: The candidates' inner validation tail: this fraction of their train rows, at least one horizon.
INNER_VAL_FRACTION = 0.1


@dataclass(frozen=True)
class AutoSpace:
    """What ``Forecaster("auto")`` searches: a mapping or YAML file (``search=``) of these keys.

    ``lookback_multiples`` multiply the base lookback ``max(2 * horizon, season)``; ``lookbacks``
    (row counts) replace them. ``d_model`` None leaves the width to the data (models/sizing.py).
    """

    models: tuple[str, ...] = (*FIXED_RULES, *TRAINED_MODELS)
    lookbacks: tuple[int, ...] | None = None
    lookback_multiples: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    learning_rate: tuple[float, float] = (1e-4, 3e-3)
    max_steps: tuple[int, ...] = (250, 500, 1000, 2000)
    d_model: tuple[int | None, ...] = (None, 64, 128, 256)
    dropout: tuple[float, float] = (0.0, 0.3)

    @classmethod
    def of(cls, search: Any) -> AutoSpace:
        """The space of ``search=``: None (the default), a mapping, or a YAML file of one."""
        from damcha_ts.models.registry import known_model_name

        if search is None:
            return cls()
        if isinstance(search, (str, Path)):
            if not Path(search).is_file():
                raise ConfigError(f"search={str(search)!r}: no such search file")
            search = read_yaml(Path(search))
        if not isinstance(search, Mapping):
            raise ConfigError(f"search must be a mapping or a YAML file of one, got {plain_repr(search)}")
        reject_unknown_keys(search, [f.name for f in dataclasses.fields(cls)], "search")
        values = {key: tuple(value) if isinstance(value, (list, tuple)) else value for key, value in search.items()}
        space = cls(**values)
        unknown = [name for name in space.models if name == "auto" or not known_model_name(name)]
        if not space.models or unknown:
            raise ConfigError(f"search.models: {unknown or 'none given'} are not models (give names as Forecaster takes)")
        for key in ("learning_rate", "dropout"):
            low, high = getattr(space, key)
            if not 0 <= low <= high:
                raise ConfigError(f"search.{key} must be [low, high] with 0 <= low <= high, got {[low, high]}")
        for key in ("lookbacks", "max_steps"):
            for value in getattr(space, key) or ():
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ConfigError(f"search.{key} must hold positive integers, got {plain_repr(value)}")
        return space

    def lookback_choices(self, horizon: int, season: int, train_rows: int) -> list[int]:
        """The lookbacks to try: given, or the multiples of the base lookback that leave at least two
        training windows' worth of rows per lookback (the base one always)."""
        base = max(2 * horizon, season)
        if self.lookbacks:
            return sorted(set(self.lookbacks))
        room = max(1, (train_rows - horizon) // 2)
        choices = {max(1, round(multiple * base)) for multiple in self.lookback_multiples}
        return sorted({choice for choice in choices if choice <= room} | {min(base, room)})


@dataclass(frozen=True)
class Candidate:
    """One point of the space: a model, its lookback and the trained models' settings."""

    model: str
    lookback: int
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # learning_rate, max_steps, d_model, dropout

    @property
    def trained(self) -> bool:
        from damcha_ts.models.registry import model_spec

        return model_spec(self.model).trained

    @property
    def key(self) -> str:
        return json.dumps({"model": self.model, "lookback": self.lookback, **self.settings}, sort_keys=True)

    def estimator(self, base, horizon: int, trainer_kwargs: Mapping[str, Any]):
        """The Estimator of this candidate, keeping ``base``'s seed, quantiles and value policy."""
        from damcha_ts.forecasting.estimator import Estimator

        training = {k: v for k, v in self.settings.items() if k in ("learning_rate", "max_steps")}
        model = {k: v for k, v in self.settings.items() if k in ("d_model", "dropout") and v is not None}
        return Estimator.from_keywords(self.model, horizon, self.lookback, random_state=base.training.seed,
                                       quantiles=base.quantiles, nonnegative=base.nonnegative,
                                       trainer_kwargs=trainer_kwargs, verbose=False, **training, **model)


def sample(trial, space: AutoSpace, models: Sequence[str], lookbacks: Sequence[int], base_lookback: int) -> Candidate:
    """The candidate of an Optuna trial: a fixed rule reads the base lookback and nothing else."""
    from damcha_ts.models.registry import model_spec

    model = trial.suggest_categorical("model", list(models))
    if not model_spec(model).trained:
        return Candidate(model, base_lookback)
    lookback = trial.suggest_categorical("lookback", list(lookbacks))
    settings = {"learning_rate": trial.suggest_float("learning_rate", *space.learning_rate, log=True),
                "max_steps": trial.suggest_categorical("max_steps", list(space.max_steps))}
    if model != "linear":
        settings["d_model"] = trial.suggest_categorical("d_model", list(space.d_model))
        settings["dropout"] = trial.suggest_float("dropout", *space.dropout)
    return Candidate(model, lookback, settings)


class _Pruning:
    """Reports each inner validation loss to the trial (at the optimiser step) and stops training,
    gracefully, when Optuna's pruner says so; the objective then records the trial as PRUNED."""

    def __new__(cls, trial):
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


class AutoSearch:
    """The search behind ``Forecaster("auto")``: :meth:`fit` returns the chosen candidate's Predictor."""

    def __init__(self, horizon: int, time_budget: float, *, search: Any = None, storage: str | Path | None = None,
                 study_name: str | None = None, season_length: int | None = None, verbose: bool = False):
        if isinstance(time_budget, bool) or not isinstance(time_budget, (int, float)) or not time_budget > 0:
            raise ConfigError(f"time_budget must be a positive number of seconds, got {plain_repr(time_budget)}")
        self.horizon, self.time_budget = int(horizon), float(time_budget)
        self.space, self.storage, self.study_name = AutoSpace.of(search), storage, study_name
        self.season_length, self.verbose = season_length, verbose

    # ------------------------------------------------------------------ the search
    def fit(self, panel_for: Callable[[int], Any], base, describe: Callable[[Any], Mapping[str, Any]]):
        """The Predictor of the best candidate for the data ``panel_for(lookback)`` prepares (with the
        user's split), trained as ``base`` (an Estimator: seed, quantiles, trainer arguments) says;
        ``describe(panel)``: its SeriesMeta keywords. Its ``fit_record.facts["auto"]`` tell the search."""
        import optuna

        start = time.monotonic()
        deadline = start + self.time_budget
        first = panel_for(max(2 * self.horizon, 1))
        season = season_length_of(first.freq, self.season_length)
        inner_rows = self._inner_val_rows(first)
        base_lookback = max(2 * self.horizon, season)
        lookbacks = self.space.lookback_choices(self.horizon, season, self._train_rows(first) - inner_rows)
        base_lookback = min(base_lookback, lookbacks[-1])
        models = self._models(base)
        search_panels: dict[int, Any] = {}

        def search_panel(lookback: int):
            if lookback not in search_panels:
                search_panels[lookback] = panel_for(lookback).selection_split(inner_rows)
            return search_panels[lookback]

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = self._study(first, base, models, lookbacks, base_lookback)
        scored: dict[str, float] = {}  # a fixed rule scores the same every time: once
        for trial in study.get_trials(deepcopy=False):
            if trial.state.name == "COMPLETE" and "candidate" in trial.user_attrs:
                scored[trial.user_attrs["candidate"]] = trial.value

        def objective(trial) -> float:
            candidate = sample(trial, self.space, models, lookbacks, base_lookback)
            trial.set_user_attr("candidate", candidate.key)
            if candidate.key in scored:
                trial.set_user_attr("seconds", 0.0)
                return scored[candidate.key]
            left = deadline - time.monotonic() - self._final_reserve(study)
            if candidate.trained and left < MIN_TRIAL_SECONDS:
                study.stop()
                trial.set_user_attr("reason", "time budget spent")
                raise optuna.TrialPruned("the time budget is spent")
            value = self._run_trial(trial, candidate, search_panel(candidate.lookback), base, season, left)
            scored[candidate.key] = value
            return value

        stop_when_spent = _stop_when_spent(deadline, lambda: self._final_reserve(study))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # a short trial still improving is the search's business
            warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
            study.optimize(objective, timeout=max(deadline - time.monotonic(), 0.001), callbacks=[stop_when_spent],
                           catch=(ConfigError, DataError))
            # The baselines run whatever the budget (optimize's timeout may have come first).
            while any(t.state.name == "WAITING" and not _trained(t.params.get("model")) for t in study.get_trials(deepcopy=False)):
                study.optimize(objective, n_trials=1, catch=(ConfigError, DataError))
        search_seconds = time.monotonic() - start
        summary = self._summary(study)
        completed = [row for row in summary if row["state"] == "COMPLETE" and row["validation_mase"] is not None]
        if not completed:
            raise ConfigError("auto: no candidate could be scored on the validation rows: " +
                              "; ".join(f"{row['model']}: {row.get('error', row['state'])}" for row in summary[:5]))
        best = completed[0]
        chosen = Candidate(best["model"], best["lookback"], best["settings"])
        if not any(_trained(row["model"]) for row in completed):
            warnings.warn(f"time_budget={self.time_budget:g} s left no time for a trained candidate: returning the best "
                          f"baseline, {chosen.model} (validation MASE {best['validation_mase']:.4f}); raise time_budget",
                          BudgetWarning, stacklevel=3)
        self._say(f"chose {chosen.model} (lookback {chosen.lookback}), validation MASE {best['validation_mase']:.4f}; "
                  "fitting it on the train and validation rows")
        final_start = time.monotonic()
        panel = panel_for(chosen.lookback)
        estimator = chosen.estimator(base, self.horizon, base.trainer_kwargs)
        predictor = estimator.fit(panel, refit=chosen.trained, calibrated=True, description=describe(panel))
        predictor.fit_record.facts["auto"] = {
            "chosen": {"model": chosen.model, "lookback": chosen.lookback, **chosen.settings,
                       "validation_mase": best["validation_mase"], "trial": best["number"]},
            "time_budget": self.time_budget, "search_seconds": search_seconds,
            "final_fit_seconds": time.monotonic() - final_start,
            "seconds": time.monotonic() - start, "season_length": season, "inner_val_rows": inner_rows,
            "study_name": study.study_name, "trials": summary,
        }
        return predictor

    def _run_trial(self, trial, candidate: Candidate, panel, base, season: int, left: float) -> float:
        """Train ``candidate`` on the search panel's train rows (at most ``left`` seconds) and return
        its validation MASE; records seconds, steps and scores on the trial."""
        import optuna

        pruning = _Pruning(trial)
        trainer_kwargs = {**base.trainer_kwargs, "callbacks": [*base.trainer_kwargs.get("callbacks", ()), pruning]}
        if candidate.trained:
            trainer_kwargs["max_time"] = {"seconds": max(left, 1.0)}
        started = time.monotonic()
        predictor = candidate.estimator(base, self.horizon, trainer_kwargs).fit(panel, calibrated=False)
        facts = predictor.fit_record.facts
        trial.set_user_attr("seconds", time.monotonic() - started)
        trial.set_user_attr("best_step", facts.get("best_step"))
        if pruning.pruned_at is not None:
            trial.set_user_attr("reason", f"pruned at step {pruning.pruned_at}")
            self._say(f"trial {trial.number} {candidate.model}: pruned at step {pruning.pruned_at}")
            raise optuna.TrialPruned(f"pruned at step {pruning.pruned_at}")
        scores = predictor.evaluate(panel, "test", predictor.fit_record.training.batch_size, season_length=season)
        trial.set_user_attr("smape", _finite(scores.get("smape")))
        value = float(scores["mase"])
        self._say(f"trial {trial.number} {candidate.model} (lookback {candidate.lookback}): validation MASE "
                  f"{value:.4f}, {time.monotonic() - started:.1f} s")
        return value if math.isfinite(value) else float("nan")

    # ------------------------------------------------------------------ pieces
    def _models(self, base) -> list[str]:
        """The space's models that can serve ``base`` (with quantiles: those that forecast them)."""
        from damcha_ts.models.registry import check_takes_quantiles

        if base.quantiles is None:
            return list(self.space.models)
        models = []
        for name in self.space.models:
            with contextlib.suppress(ConfigError):
                check_takes_quantiles(name)
                models.append(name)
        if not models:
            raise ConfigError(f"search.models {list(self.space.models)}: none forecasts quantiles")
        return models

    def _inner_val_rows(self, panel) -> int:
        rows = min(self._train_rows_of(series) for series in panel.series)
        return max(self.horizon, int(rows * INNER_VAL_FRACTION))

    def _train_rows(self, panel) -> int:
        return min(self._train_rows_of(series) for series in panel.series)

    @staticmethod
    def _train_rows_of(series) -> int:
        return series.borders["train"][1]

    def _study(self, panel, base, models, lookbacks, base_lookback: int):
        """The study (in ``storage`` when given: loaded when it exists), its first trials enqueued when new."""
        import optuna

        storage = None
        if self.storage is not None:
            from damcha_ts.workqueue.storage import open_storage, resolve_storage_url

            storage = open_storage(resolve_storage_url(self.storage, Path.cwd()), heartbeat_interval=60,
                                   grace_period=180, max_retry=0)
        name = self.study_name or f"auto-{self._fingerprint(panel, base, models, lookbacks)}"
        existing = 0
        if storage is not None:
            with contextlib.suppress(KeyError):
                existing = len(optuna.load_study(study_name=name, storage=storage).trials)
        seed = int(np.random.SeedSequence([base.training.seed, existing]).generate_state(1)[0])
        study = optuna.create_study(study_name=name, storage=storage, load_if_exists=True, direction="minimize",
                                    sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=4),
                                    pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=100))
        if existing:
            self._say(f"continuing study {name}: {existing} trials so far")
            return study
        for model in models:  # the baselines, the linear model and the recommended default first
            if not _trained(model):
                study.enqueue_trial({"model": model})
        defaults = {"lookback": base_lookback, "learning_rate": 1e-3, "max_steps": 1000}
        for model in ("linear", DEFAULT_MODEL):
            if model in models:
                extra = {} if model == "linear" else {"d_model": None, "dropout": 0.1}
                study.enqueue_trial({"model": model, **defaults, **extra}, skip_if_exists=True)
        return study

    def _fingerprint(self, panel, base, models, lookbacks) -> str:
        """What makes a study the same one: the data's train and validation rows, the horizon, the
        space, the seed and the quantiles."""
        digest = hashlib.sha256()
        for series in panel.series:
            rows = series.borders["val"][1]
            digest.update(np.ascontiguousarray(series.values[:rows]).tobytes())
            digest.update(json.dumps([list(map(str, series.columns)), str(series.timestamps[0]), rows]).encode())
        digest.update(json.dumps([self.horizon, dataclasses.asdict(self.space), list(models), list(lookbacks),
                                  base.training.seed, base.quantiles], default=str).encode())
        return digest.hexdigest()[:16]

    def _final_reserve(self, study) -> float:
        """The time the final fit of the best trained candidate so far will take (0 for a fixed rule)."""
        best = None
        for trial in study.get_trials(deepcopy=False):
            if trial.state.name == "COMPLETE" and trial.value is not None and math.isfinite(trial.value):
                if best is None or trial.value < best.value:
                    best = trial
        if best is None or not _trained(best.params.get("model")):
            return 0.0
        return FINAL_FIT_FACTOR * float(best.user_attrs.get("seconds") or 0.0)

    def _summary(self, study) -> list[dict]:
        """Every trial: its candidate, validation MASE, seconds and state, best first."""
        rows = []
        for trial in study.get_trials(deepcopy=False):
            if "candidate" not in trial.user_attrs:
                continue
            candidate = json.loads(trial.user_attrs["candidate"])
            model, lookback = candidate.pop("model"), candidate.pop("lookback")
            value = trial.value if trial.state.name == "COMPLETE" else None
            rows.append({"number": trial.number, "model": model, "lookback": lookback, "settings": candidate,
                         "validation_mase": _finite(value), "seconds": _finite(trial.user_attrs.get("seconds")),
                         "best_step": trial.user_attrs.get("best_step"), "state": trial.state.name,
                         **({"reason": trial.user_attrs["reason"]} if "reason" in trial.user_attrs else {})})
        return sorted(rows, key=lambda row: (row["validation_mase"] is None, row["validation_mase"] or 0.0, row["number"]))

    def _say(self, message: str) -> None:
        if self.verbose or sys.stderr.isatty():
            print(f"[auto] {message}", file=sys.stderr, flush=True)


def leaderboard(facts: Mapping[str, Any]):
    """The search's trials as a DataFrame, best first (``Forecaster.leaderboard_``)."""
    import pandas as pd

    rows = [{**{k: v for k, v in row.items() if k != "settings"}, **row.get("settings", {})}
            for row in facts["auto"]["trials"]]
    return pd.DataFrame(rows)


def _stop_when_spent(deadline: float, reserve: Callable[[], float]):
    def callback(study, trial) -> None:
        if time.monotonic() + reserve() + MIN_TRIAL_SECONDS > deadline:
            study.stop()
    return callback


def _trained(model: Any) -> bool:
    from damcha_ts.models.registry import model_spec

    return isinstance(model, str) and model_spec(model).trained


def _finite(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None

