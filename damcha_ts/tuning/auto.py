"""``Forecaster("auto")``: the best forecast for the user's data within a time budget, chosen on validation.

    >>> f = Forecaster("auto", horizon=24, time_budget=300, random_state=0).fit(frame)   # doctest: +SKIP
    >>> f.fit_result_["auto"]["chosen"]; f.leaderboard_                                  # doctest: +SKIP

How :meth:`AutoSearch.fit_data` runs:

1. **Where candidates are scored.** The data is split as any fit splits it (train, validation,
   test; ``test_size=0``: no test). Each candidate trains on the train rows, stopping early on an
   inner tail of them, and is scored on the validation rows: MASE over every window, pooled over
   the series (:meth:`damcha_ts.data.panel.Panel.selection_split`). No candidate reads a test row.
2. **What is searched** (:class:`~damcha_ts.tuning.auto_space.AutoSpace`): the fixed rules (naive,
   seasonal naive, window mean, drift), scored first and whatever the budget; then the trained linear
   model and the DAMCHA and MHA models of both families, with lookback, learning rate, optimiser
   steps, width and dropout: the linear model and the recommended default under the user-data recipe
   first, then Optuna's TPE sampler. A trained trial whose inner validation loss is above the median
   of at least three earlier trained trials at the same step is pruned.
3. **The budget.** A trained trial may take what is left less the final fit of the best candidate so
   far, and at most what would leave time for its own final fit (:data:`FINAL_FIT_FACTOR` times the
   trial); it stops there (Lightning's ``max_time``), its best weights kept. None starts with less
   than :data:`MIN_TRIAL_SECONDS`. A budget too small for any trained candidate returns the best
   fixed rule, with a BudgetWarning.
4. **The final model.** The chosen candidate is fitted on the data's own split with ``refit=True``
   (a fixed rule: as it is): early stopping on the validation rows, ``level=`` intervals calibrated
   there by that first pass, then retrained on the train and validation rows for its best step count.

``storage=`` (a SQLite file or an Optuna storage URL) keeps the study: the same fit on the same data
continues it (its trials are kept and count; the budget is this fit's), and the same fit running on
other machines at the same time, on one database, joins it (docs/forecasting.md, "More machines"). The sampler is seeded from
``random_state`` and the number of trials the study holds (with ``storage=``, from the process too, so that machines
sharing the study draw different candidates); what a budget covers depends on the machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import numbers
import os
import shutil
import socket
import sys
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from damcha_ts.data.options import ProtocolOptions
from damcha_ts.data.time_index import season_length_of
from damcha_ts.errors import BudgetWarning, ConfigError, DataError, plain_repr
from damcha_ts.tuning.auto_space import AutoSpace, Candidate, first_candidates, is_trained, sample
from damcha_ts.tuning.auto_trials import (
    pruning_callback,
    quiet_search,
    scored_candidates,
    share_cores,
    start_workers,
    stop,
    stop_when_spent,
    summarize,
    trained_elsewhere,
    wait_for,
)
from damcha_ts.workqueue.storage import open_storage, resolve_storage_url

#: Seconds a search may take when ``time_budget`` is not given.
DEFAULT_TIME_BUDGET = 300.0
#: The final fit (first pass and refit, on more rows) takes about this many times its trial.
FINAL_FIT_FACTOR = 3.0
#: The search ends after this many trials in a row drew a candidate already scored.
MAX_REPEATS = 20
#: ... or after this many trained candidates in a row failed (a setting every one of them shares is wrong).
MAX_FAILURES = 10
#: The study's user attribute holding the fixed rules' scores (they are not trials: nothing to sample).
RULES_ATTR = "rules"
#: A trained trial is not started with less time than this left.
MIN_TRIAL_SECONDS = 5.0
#: The candidates' inner validation tail: this fraction of their train rows, at least one horizon.
INNER_VAL_FRACTION = 0.1


def search_of(model: str, base, *, time_budget: Any, search: Any, storage: Any, workers: Any,
              given: Mapping[str, Any], lookback: int) -> AutoSearch | None:
    """The search of ``Forecaster(model="auto", ...)``, or None for another model; ConfigError for search
    settings without ``"auto"``, or model and training keys ``given`` (not None) with it.
    ``base``: the Forecaster's Estimator (horizon, seed, quantiles, value policy, trainer arguments)."""
    settings = [name for name, value in (("time_budget", time_budget), ("search", search), ("storage", storage),
                                         ("workers", workers)) if value is not None]
    if model != "auto":
        if settings:
            raise ConfigError(f"{', '.join(settings)}: only for model='auto' (the search over models), not {model!r}")
        return None
    if lookback != ProtocolOptions.seq_len:  # the default is accepted: sklearn's clone passes it back
        raise ConfigError(f"model='auto' searches the lookback; lookback={plain_repr(lookback)} cannot be given to it: "
                          f"narrow the search instead, search={{'lookbacks': [{plain_repr(lookback)}]}}")
    fixed = [key for key, value in given.items() if value is not None]
    if fixed:
        raise ConfigError(f"model='auto' searches the model and its training; {fixed} cannot be given to it "
                          "(narrow or widen the search with search={...}, docs/forecasting.md)")
    return AutoSearch(base, DEFAULT_TIME_BUDGET if time_budget is None else time_budget, search=search, storage=storage,
                      workers=1 if workers is None else workers)


class AutoSearch:
    """The search behind ``Forecaster("auto")``: :meth:`fit_data` returns the chosen candidate's Predictor."""

    def __init__(self, base, time_budget: float, *, search: Any = None, storage: str | Path | None = None,
                 workers: int = 1):
        if not (isinstance(time_budget, numbers.Real) and not isinstance(time_budget, bool)
                and math.isfinite(time_budget) and time_budget > 0):
            raise ConfigError(f"time_budget must be a positive, finite number of seconds, got {plain_repr(time_budget)}")
        if storage is not None and not (isinstance(storage, (str, Path)) and str(storage).strip()):
            raise ConfigError(f"storage must be a SQLite file or an Optuna storage URL, got {plain_repr(storage)}")
        if storage is not None:
            resolve_storage_url(storage, Path.cwd())  # a bad one is refused now, not after the data is read
        if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1:
            raise ConfigError(f"workers must be a positive integer (processes running trials), got {plain_repr(workers)}")
        self.base, self.horizon, self.time_budget = base, int(base.model_config["pred_len"]), float(time_budget)
        self.workers = int(workers)
        self.space, self.storage, self.verbose = AutoSpace.of(search), storage, base.verbose
        self.study_name: str | None = None  # set in helper processes: the study their search shares

    def chosen_estimator(self, facts: Mapping[str, Any]):
        """The Estimator of the candidate a fit chose (``facts``: its ``fit_result_``), as the final fit
        made it but for the time cap; before a fit there is none to give."""
        if "auto" not in facts:
            raise ConfigError("model='auto' chooses its estimator in fit; fit first (fit_result_['auto']['chosen'] "
                              "then names the candidate, and estimator() returns it)")
        chosen = dict(facts["auto"]["chosen"])
        settings = {k: v for k, v in chosen.items() if k not in ("model", "lookback", "validation_mase", "trial")}
        return Candidate(chosen["model"], chosen["lookback"], settings).estimator(self.base, self.horizon,
                                                                                  self.base.trainer_kwargs)

    # ------------------------------------------------------------------ the search
    def fit_data(self, data: Any, options: Mapping[str, Any], *, refit: bool = True):
        """The Predictor of the best candidate for ``data``, prepared with ``options`` (``prepare``'s, the
        user's split among them); its ``fit_record.facts["auto"]`` tell the search. The chosen trained
        candidate is always refitted (``refit`` is the Estimator's keyword, accepted and unused)."""
        first, run = self.setup(data, options, self.time_budget)
        study, helpers = self.study(first, run), []
        try:
            with quiet_search():
                self._score_rules(study, run)
                if self.workers > 1:
                    helpers = start_workers(self, data, options, study.study_name, run, MIN_TRIAL_SECONDS * (1 + FINAL_FIT_FACTOR))
                with share_cores(self.workers):
                    self.optimize(study, run)
                wait_for(helpers, run.deadline)
            return self._final_fit(study, run, data, options)
        finally:
            stop(helpers)  # an error or a signal here: the helpers stop too (nothing to do once they are done)
            if run.storage is not None and self.storage is None:  # the helpers' scratch study
                shutil.rmtree(Path(run.storage).parent, ignore_errors=True)

    def setup(self, data: Any, options: Mapping[str, Any], seconds: float) -> tuple[Any, _Run]:
        """(the data's Panel at the shortest lookback, the search's :class:`_Run` ending ``seconds`` from now)."""
        from damcha_ts.data import prepare

        start = time.monotonic()

        def panel_for(lookback: int):
            return prepare(data, seq_len=lookback, pred_len=self.horizon, **options)

        first = panel_for(self.horizon)
        season = season_length_of(first.freq)
        train_rows = min(s.borders["train"][1] - s.borders["train"][0] for s in first.series)
        inner_rows = max(self.horizon, int(train_rows * INNER_VAL_FRACTION))
        lookbacks = self.space.lookback_choices(self.horizon, season, train_rows - inner_rows)
        # The benchmark's rule, max(2H, season), or the nearest lookback of the space: the fixed rules' and the first trials'.
        base_lookback = min(lookbacks, key=lambda lookback: (abs(lookback - max(2 * self.horizon, season)), lookback))
        models = self._models()
        return first, _Run(panel_for, season, inner_rows, lookbacks, base_lookback,
                           [m for m in models if not is_trained(m)], [m for m in models if is_trained(m)],
                           start, start + seconds)

    def _score_rules(self, study, run: _Run) -> None:
        """Score every fixed rule the study has not, and keep the results beside its trials (the study's
        user attribute ``rules``): a rule has nothing to draw, and as a trial it would skew the sampler's
        model of the trained candidates."""
        rules = dict(study.user_attrs.get(RULES_ATTR, {}))
        for rule in run.rules:
            candidate = Candidate(rule, run.base_lookback)
            if candidate.key in rules:
                continue
            try:
                value, seconds = self._score(candidate, run.search_panel(candidate.lookback), run.season)
                rules[candidate.key] = {"value": value, "seconds": seconds, "state": "COMPLETE"}
                self._say(f"{rule}: validation MASE {value:.4f}")
            except (ConfigError, DataError) as error:
                rules[candidate.key] = {"value": None, "seconds": None, "state": "FAIL", "reason": str(error)[:500]}
                self._say(f"{rule}: failed: {error}")
        study.set_user_attr(RULES_ATTR, rules)

    def optimize(self, study, run: _Run, *, worker: int = 0) -> None:
        """Trained trials while the budget lasts: the linear model and the default first (queued by the
        search's own process, ``worker`` 0), then TPE's; ``max_trials`` shared out over the workers."""
        import optuna

        if not run.trained:
            return
        outcomes = scored_candidates(study)
        repeats, failures = [0], [0]  # trials in a row that drew a candidate already scored; that failed training

        def objective(trial) -> float:
            candidate = sample(trial, self.space, run.trained, run.lookbacks)
            trial.set_user_attr("candidate", candidate.key)
            trial.set_user_attr("worker", os.getpid())
            if candidate.key not in outcomes and run.storage is not None:
                outcomes.update(scored_candidates(study))  # another process or machine may have scored it since
                if trained_elsewhere(study, candidate.key, trial.number):
                    trial.set_user_attr("reason", "being trained by another process")
                    raise optuna.TrialPruned("being trained by another process")
            if candidate.key in outcomes:
                repeats[0] += 1
                if repeats[0] >= MAX_REPEATS:  # a small space, searched through
                    study.stop()
                value, reason = outcomes[candidate.key]
                trial.set_user_attr("seconds", 0.0)
                if reason is not None:
                    trial.set_user_attr("reason", reason)
                    raise ConfigError(reason)
                return value
            repeats[0] = 0
            left = run.deadline - time.monotonic()
            # Time for this trial that leaves the final fit of the best so far, or of this one, room.
            allowed = min(left - self._final_reserve(study), left / (1 + FINAL_FIT_FACTOR))
            if allowed < MIN_TRIAL_SECONDS:
                study.stop()
                study.enqueue_trial(trial.params)  # a study continued with storage= runs it first
                trial.set_user_attr("reason", "time budget spent")
                raise optuna.TrialPruned("the time budget is spent")
            try:
                value = self._run_trial(trial, candidate, run.search_panel(candidate.lookback), run.season, allowed)
            except (ConfigError, DataError) as error:
                trial.set_user_attr("reason", str(error)[:500])
                outcomes[candidate.key] = (None, str(error)[:500])
                self._say(f"trial {trial.number} {candidate.model} (lookback {candidate.lookback}): failed: {error}")
                failures[0] += 1
                if failures[0] >= MAX_FAILURES:
                    study.stop()
                raise
            outcomes[candidate.key], failures[0] = (value, None), 0
            return value

        for params in first_candidates(self.space, run.base_lookback, run.trained) if worker == 0 else ():
            study.enqueue_trial(params, skip_if_exists=True)
        limit = self.space.max_trials
        share = None if limit is None else limit // self.workers + (worker < limit % self.workers)
        if time.monotonic() + MIN_TRIAL_SECONDS < run.deadline and share != 0:
            study.optimize(objective, n_trials=share, timeout=run.deadline - time.monotonic(),
                           callbacks=[stop_when_spent(run.deadline, lambda: self._final_reserve(study), MIN_TRIAL_SECONDS)],
                           catch=(ConfigError, DataError))
        run.search_seconds = time.monotonic() - run.start

    def _final_fit(self, study, run: _Run, data: Any, options: Mapping[str, Any]):
        """The best candidate fitted on the data's own split (refitted when trained), with the search's facts."""
        from damcha_ts.forecasting.estimator import input_description

        summary = summarize(study, RULES_ATTR)
        completed = [row for row in summary if row["state"] == "COMPLETE" and row["validation_mase"] is not None]
        if not completed:
            raise ConfigError(f"auto: no candidate could be scored on the validation rows within time_budget="
                              f"{self.time_budget:g} s (" + "; ".join(
                                  f"{row['model']}: {row.get('reason', row['state'])}" for row in summary[:6]) + ")")
        best = completed[0]
        chosen = Candidate(best["model"], best["lookback"], best["settings"])
        self._warn_without_trained(summary, completed, chosen, best["validation_mase"], run)
        self._say(f"chose {chosen.model} (lookback {chosen.lookback}), validation MASE {best['validation_mase']:.4f}; "
                  "fitting it on the train and validation rows")
        final_start = time.monotonic()
        panel = run.panel_for(chosen.lookback)
        trainer_kwargs = dict(self.base.trainer_kwargs)
        if chosen.trained:
            # Each of its two trainings: half the time left, but never less than its trial had (not a crippled model).
            floor = min(1.5 * (best["seconds"] or 0.0), self.time_budget / 2)  # a trial of an earlier, longer fit
            seconds = max((run.deadline - final_start) / 2, floor, MIN_TRIAL_SECONDS)
            trainer_kwargs["max_time"] = {"seconds": seconds}
        predictor = chosen.estimator(self.base, self.horizon, trainer_kwargs).fit(
            panel, refit=chosen.trained, calibrated=True, compared=False,
            description=input_description(data, options, panel))
        predictor.fit_record.facts["auto"] = {
            "chosen": {"model": chosen.model, "lookback": chosen.lookback, **chosen.settings,
                       "validation_mase": best["validation_mase"], "trial": best["number"]},
            "time_budget": self.time_budget, "search_seconds": run.search_seconds,
            "final_fit_seconds": time.monotonic() - final_start, "seconds": time.monotonic() - run.start,
            "season_length": run.season, "inner_val_rows": run.inner_rows, "study_name": study.study_name,
            "trials": summary,
        }
        return predictor

    def _warn_without_trained(self, summary, completed, chosen: Candidate, value: float, run: _Run) -> None:
        """When no trained candidate was scored although the space has some: why (budget or failures)."""
        if not run.trained or any(is_trained(row["model"]) for row in completed):
            return
        failed = [row for row in summary if is_trained(row["model"]) and row["state"] == "FAIL"]
        if failed:  # the budget let them run (the search's last trial is always one the budget stopped)
            warnings.warn(f"every trained candidate failed ({failed[0]['model']}: {failed[0].get('reason')}): returning "
                          f"the best fixed rule, {chosen.model} (validation MASE {value:.4f})", BudgetWarning, stacklevel=5)
        else:
            warnings.warn(f"time_budget={self.time_budget:g} s left no time for a trained candidate: returning the best "
                          f"baseline, {chosen.model} (validation MASE {value:.4f}); raise time_budget",
                          BudgetWarning, stacklevel=5)

    def _score(self, candidate: Candidate, panel, season: int, trainer_kwargs: Mapping[str, Any] | None = None):
        """(validation MASE, seconds) of ``candidate`` trained on the search panel's train rows."""
        started = time.monotonic()
        estimator = candidate.estimator(self.base, self.horizon, trainer_kwargs or self.base.trainer_kwargs)
        predictor = estimator.fit(panel, calibrated=False, compared=False)
        scores = predictor.evaluate(panel, "test", predictor.fit_record.training.batch_size, season_length=season)
        value = float(scores["mase"])
        if not math.isfinite(value):
            raise DataError(f"validation MASE is {value}: a series is constant over its train rows (no seasonal-naive "
                            "error to scale by), or the forecasts are not finite")
        return value, time.monotonic() - started

    def _run_trial(self, trial, candidate: Candidate, panel, season: int, allowed: float) -> float:
        """Train ``candidate`` (at most ``allowed`` seconds) and return its validation MASE, or raise
        TrialPruned when the pruner stopped it; records seconds and the kept step on the trial."""
        import optuna

        pruning = pruning_callback(trial)
        trainer_kwargs = {**self.base.trainer_kwargs, "max_time": {"seconds": max(allowed, 1.0)},
                          "callbacks": [*self.base.trainer_kwargs.get("callbacks", ()), pruning]}
        value, seconds = self._score(candidate, panel, season, trainer_kwargs)
        trial.set_user_attr("seconds", seconds)
        if pruning.pruned_at is not None:
            trial.set_user_attr("reason", f"pruned at step {pruning.pruned_at}")
            self._say(f"trial {trial.number} {candidate.model}: pruned at step {pruning.pruned_at}")
            raise optuna.TrialPruned(f"pruned at step {pruning.pruned_at}")
        self._say(f"trial {trial.number} {candidate.model} (lookback {candidate.lookback}): validation MASE "
                  f"{value:.4f}, {seconds:.1f} s")
        return value

    # ------------------------------------------------------------------ pieces
    def _models(self) -> list[str]:
        """The space's models that can serve the base estimator (with quantiles: those that forecast them)."""
        from damcha_ts.models.registry import check_takes_quantiles

        if self.base.quantiles is None:
            return list(self.space.models)
        models = []
        for name in self.space.models:
            with contextlib.suppress(ConfigError):
                check_takes_quantiles(name)
                models.append(name)
        if not models:
            raise ConfigError(f"search.models {list(self.space.models)}: none forecasts quantiles")
        return models

    def study(self, panel, run: _Run, worker: int = 0):
        """The study, in ``storage`` when given (continued when it holds this one); its sampler seeded
        from ``random_state``, the trials it holds and the ``worker`` (each helper process draws its
        own), its pruner waiting for three trained trials."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        run.storage = self.storage
        if run.storage is None and self.workers > 1:  # helper processes share this fit's study through a file
            run.storage = Path(tempfile.mkdtemp(prefix="damcha_ts_auto_")) / "study.db"
        storage = None
        if run.storage is not None:
            # A trial whose process was killed is failed once its heartbeat is 3 minutes old, and queued again once.
            storage = open_storage(resolve_storage_url(run.storage, Path.cwd()), heartbeat_interval=60,
                                   grace_period=180, max_retry=1)
        name = self.study_name or f"auto-{self._fingerprint(panel, run)}"
        existing = 0
        if storage is not None:
            with contextlib.suppress(KeyError):
                existing = len(optuna.load_study(study_name=name, storage=storage).trials)
        if existing:
            self._say(f"continuing study {name}: {existing} trials so far")
        entropy = [self.base.training.seed, existing, worker]
        if self.storage is not None:  # processes on other machines may open the study at the same moment: each draws its own
            entropy.append(zlib.crc32(f"{socket.gethostname()}:{os.getpid()}".encode()))
        seed = int(np.random.SeedSequence(entropy).generate_state(1)[0])
        return optuna.create_study(
            study_name=name, storage=storage, load_if_exists=True, direction="minimize",
            # With storage, other processes or machines may be drawing from the study too: running trials count as bad.
            sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=4, constant_liar=run.storage is not None),
            pruner=optuna.pruners.MedianPruner(n_startup_trials=0, n_warmup_steps=100, n_min_trials=3))

    def _fingerprint(self, panel, run: _Run) -> str:
        """What makes a study the same one: everything a candidate's score depends on. The data's train
        and validation rows (targets and covariates) and the border between them, columns, frequency, modes and scaler, the static
        covariates, the horizon, the space, the seed, the quantiles and the value policy."""
        digest = hashlib.sha256()
        for series in panel.series:
            rows = series.borders["val"][1]
            digest.update(np.ascontiguousarray(series.history_rows()[:rows]).tobytes())
            digest.update(json.dumps([list(map(str, series.history_columns)), str(series.timestamps[0]),
                                      series.borders["train"], rows, series.freq, series.features,
                                      series.target]).encode())
        if panel.static_values is not None:
            digest.update(np.ascontiguousarray(panel.static_values).tobytes())
        space = {k: v for k, v in dataclasses.asdict(self.space).items() if k != "max_trials"}  # a limit, not a point
        digest.update(json.dumps([self.horizon, space, run.rules, run.trained, run.lookbacks, run.season,
                                  panel.scaler_kind, self.base.training.seed, self.base.quantiles,
                                  self.base.nonnegative], default=str).encode())
        return digest.hexdigest()[:16]

    def _final_reserve(self, study) -> float:
        """The time the final fit of the best candidate so far will take: 0 for a fixed rule, else
        :data:`FINAL_FIT_FACTOR` times its trial, at most the budget."""
        scored = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE" and t.value is not None]
        best = min(scored, key=lambda trial: trial.value, default=None)
        rules = [r["value"] for r in study.user_attrs.get(RULES_ATTR, {}).values() if r["value"] is not None]
        if best is None or (rules and min(rules) <= best.value):
            return 0.0
        return min(FINAL_FIT_FACTOR * float(best.user_attrs.get("seconds") or 0.0), self.time_budget)

    def _say(self, message: str) -> None:
        if self.verbose or sys.stderr.isatty():
            print(f"[auto] {message}", file=sys.stderr, flush=True)


@dataclass
class _Run:
    """One fit's search: how to prepare the data at a lookback, and what the search decided from it."""

    panel_for: Callable[[int], Any]  # lookback -> the Panel of the data, with the user's split
    season: int  # MASE's season (the frequency's)
    inner_rows: int  # the candidates' early-stopping tail, cut from the train rows
    lookbacks: list[int]
    base_lookback: int  # the fixed rules' and the first trained trials'
    rules: list[str]  # the fixed rules of the space
    trained: list[str]  # its trained models
    start: float  # time.monotonic() at the start of the fit
    deadline: float
    search_seconds: float = 0.0
    storage: str | Path | None = None  # where the study lives (storage=, a scratch file for workers, or memory)
    search_panels: dict[int, Any] = dataclasses.field(default_factory=dict)

    def search_panel(self, lookback: int):
        """The Panel the candidates of ``lookback`` train and are scored on (Panel.selection_split)."""
        if lookback not in self.search_panels:
            self.search_panels[lookback] = self.panel_for(lookback).selection_split(self.inner_rows)
        return self.search_panels[lookback]
