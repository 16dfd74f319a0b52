"""``Estimator``: how a model is fitted to a panel, ``Estimator.fit(panel) -> Predictor`` (GluonTS's shape).

    >>> estimator = Estimator(model_config, given_model, training)          # doctest: +SKIP
    >>> predictor = estimator.fit(prepare(frame, seq_len=96, pred_len=24))   # doctest: +SKIP

The one home of what a fit decides beyond the training loop (``training.runner.fit_series``):
the model's size on user data (:mod:`damcha_ts.models.sizing`), the refit on the train and
validation rows for the first pass's best step (step budget) or epoch count, and the calibration of ``level=`` intervals on the
validation windows (by the first pass, before a refit trains on them). ``Forecaster.fit``, the
refits of ``Forecaster.cross_validation`` and every run (``forecasting/experiment.run_experiment``:
``damcha-ts fit``, a leaderboard cell, a tuning trial: ``Estimator.for_run`` fitted into a
:class:`RunFolder`) fit through it. The Predictor it returns carries a :class:`FitRecord`: the
panel its model trained on and the facts of the training.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.data import prepare
from damcha_ts.data.layout import describe_input, input_columns
from damcha_ts.data.options import PROTOCOL_KEYS, ReadOptions
from damcha_ts.errors import ConfigError, plain_repr
from damcha_ts.forecasting.history import model_data_options
from damcha_ts.forecasting.predictor import Predictor
from damcha_ts.forecasting.window_scores import calibrate
from damcha_ts.schema import plain_values, positive_int
from damcha_ts.training.config import TrainingConfig, batch_size_for_windows, split_keywords

# The data options that define a model's setting, saved with it (JSON-ready): the protocol's but
# lookback and horizon (the constructor's), the value policies, and where a benchmark file lies.
_SETTING_OPTIONS = (*(k for k in PROTOCOL_KEYS if k not in ("seq_len", "pred_len")), *ReadOptions.ALWAYS, "path")


@dataclass
class FitRecord:
    """How a Predictor's model was fitted; a loaded model's: its saved metrics and config, no panel."""

    facts: dict  # Forecaster.fit_result_: losses, epochs, timing, rows, (refit), n_params, windows
    model_config: dict  # the fitted model's complete config (data-sized, with its covariate counts)
    panel: Any = None  # the Panel the kept model trained on (train + val rows after a refit)
    run_dir: Path | None = None  # the folder holding checkpoints and logs (a fit_* one of default_root_dir, a run's)
    trained: Any = None  # fit_series's FitResult of the kept model (its trainer: device, ranks)
    training: TrainingConfig | None = None  # what it trained with (the batch size chosen from the data)


@dataclass(frozen=True)
class RunFolder:
    """A fit that trains in the caller's folder (a run's): its checkpoints/ and logs/ there, continued
    from its last checkpoint with ``resume``; ``callbacks`` join the trainer's (Optuna's pruning);
    ``on_start`` runs once the Trainer accepted its arguments, before anything in the folder changes."""

    path: Path
    resume: bool = False
    callbacks: Sequence[Any] = ()
    progress: bool = True
    on_start: Callable[[], None] | None = None


@dataclass(frozen=True)
class Estimator:
    """What to train and how: ``fit(panel)`` trains, refits, calibrates and returns the Predictor.

    ``model_config`` is complete (``models.registry.resolve_model_config``); ``given_model`` the
    keys named by the caller: on user data the size keys not among them follow the data.
    ``trainer_kwargs`` go to ``lightning.Trainer`` (``default_root_dir``: each training writes
    into a new ``fit_*`` folder inside it); ``verbose`` as ``Forecaster``'s.
    """

    model_config: Mapping[str, Any]
    given_model: Mapping[str, Any]
    training: TrainingConfig
    nonnegative: bool = False
    trainer_kwargs: Mapping[str, Any] = field(default_factory=dict)
    verbose: bool = False
    sized_batch: bool = False  # the batch size follows the panel's train windows (batch_size_for_windows)

    @classmethod
    def from_keywords(cls, model: str, horizon: int, lookback: int, *, random_state: int, quantiles: Sequence[float] | None,
                      max_epochs: int | None = None, batch_size: int | None = None, learning_rate: float | None = None,
                      nonnegative: bool = False, trainer_kwargs: Mapping[str, Any] | None = None,
                      verbose: bool = False, **kwargs: Any) -> Estimator:
        """The estimator of ``Forecaster``'s keywords, routed by field name: keys that name a
        TrainingConfig field go to it, every other key to the model config; ConfigError for invalid
        values or unknown keys. Training keys not given follow the user-data recipe
        (``TrainingConfig.for_user_data``; the batch size from the data's train windows at fit)."""
        from damcha_ts.models.quantiles import validate_quantiles
        from damcha_ts.models.registry import check_takes_quantiles, model_spec, resolve_model_config

        for name, value in (("horizon", horizon), ("lookback", lookback)):
            positive_int(value, name)
        if isinstance(random_state, bool) or not isinstance(random_state, (int, np.integer)) or random_state < 0:
            raise ConfigError(f"random_state must be a non-negative integer (the seed of every run), got {plain_repr(random_state)}")
        model_options, training_options = split_keywords(kwargs)
        levels = None if quantiles is None else validate_quantiles(quantiles, argument="quantiles")
        given = {key: value for key, value in (("max_epochs", max_epochs), ("batch_size", batch_size),
                                                ("learning_rate", learning_rate)) if value is not None}
        training = TrainingConfig.for_user_data(**{**given, "seed": random_state, **training_options,
                                                   "quantiles": None if levels is None else list(levels)})
        model_spec(model, where="model")  # named as the constructor's argument
        if levels is not None:
            check_takes_quantiles(model)
        config = resolve_model_config({"name": model, **model_options, "seq_len": int(lookback), "pred_len": int(horizon)})
        flags = {name: _flag(value, name) for name, value in (("verbose", verbose), ("nonnegative", nonnegative))}
        return cls(config, {"name": model, **model_options}, training, flags["nonnegative"],
                   dict(trainer_kwargs or {}), flags["verbose"], sized_batch="batch_size" not in (given | training_options))

    @classmethod
    def for_run(cls, run, trainer_kwargs: Mapping[str, Any] | None = None) -> Estimator:
        """The estimator of a run config (``training.config.RunConfig``): its model exactly as
        configured (a run's config is complete and hashed, so never sized here) and its training."""
        model = run.model_dict()
        return cls(model, model, run.training, trainer_kwargs=dict(trainer_kwargs or {}))

    @property
    def quantiles(self) -> tuple[float, ...] | None:
        return None if self.training.quantiles is None else tuple(self.training.quantiles)

    def sized_config(self, panel) -> dict:
        """The model config to train on ``panel``: what the config leaves open and the data decides
        (:func:`damcha_ts.models.sizing.decided_by_data`: on user data the size keys not given, a
        seasonal model's season); a benchmark keeps its sizes."""
        from damcha_ts.models.base import COVARIATE_KINDS
        from damcha_ts.models.registry import model_spec, resolve_model_config
        from damcha_ts.models.sizing import decided_by_data

        options = {k: v for k, v in self.given_model.items() if k != "name"}
        decided = decided_by_data(panel, options, model_spec(self.given_model["name"]).keys, size=panel.dataset is None)
        if not decided:
            # An earlier fit's covariate counts are not this data's: the data sets them again.
            return {**self.model_config, **{f"{kind}_covariates": 0 for kind in COVARIATE_KINDS}}
        lengths = {"seq_len": self.model_config["seq_len"], "pred_len": self.model_config["pred_len"]}
        return resolve_model_config({"name": self.given_model["name"], **options, **decided, **lengths})

    def keeping(self, model_config: Mapping[str, Any], training: TrainingConfig | None = None) -> Estimator:
        """This estimator training exactly ``model_config`` (every key given: no sizing) with
        ``training`` (its batch size kept), as the refits of cross-validation train the fitted model's."""
        return dataclasses.replace(self, model_config=dict(model_config), given_model=dict(model_config),
                                   training=training or self.training, sized_batch=training is None and self.sized_batch)

    def training_for(self, panel) -> TrainingConfig:
        """The training of a fit on ``panel``: the batch size from its train windows when not given."""
        if not self.sized_batch:
            return self.training
        return dataclasses.replace(self.training, batch_size=batch_size_for_windows(panel.window_count("train")))

    def fit(self, panel, *, refit: bool = False, calibrated: bool = True, compared: bool = True,
            description: Mapping[str, Any] | None = None, folder: RunFolder | None = None) -> Predictor:
        """The Predictor of a model trained on ``panel`` with early stopping on its validation split.

        ``refit``: then retrain from scratch (same seed) on the train and validation rows for the
        first pass's best step count (step budget) or epoch count, without validation, and keep that model. ``calibrated``: with the
        calibration of ``level=`` intervals on the validation windows, by the model trained without
        them. ``compared``: on user data, a trained model's validation MASE beside the naive rules'
        (:mod:`damcha_ts.forecasting.baseline_check`: a BaselineWarning when a rule wins). ``description``: ``SeriesMeta.from_panel``'s keywords (data_config, input_kind,
        input_options). ``folder``: train there (a run's; no refit) instead of a new ``fit_*`` folder
        of ``default_root_dir`` or a scratch one. Its ``fit_record.facts`` add ``n_params`` and
        ``windows`` per split.
        """
        windows = {split: panel.window_count(split) for split in ("train", "val", "test")}
        predictor = self._fit(panel, refit=refit, calibrated=calibrated, compared=compared, description=description,
                              folder=folder)
        predictor.fit_record.facts.update(self._size_report(predictor, windows))
        return predictor

    def fit_data(self, data: Any, options: Mapping[str, Any], *, refit: bool = False) -> Predictor:
        """:meth:`fit` on ``data`` prepared with ``options`` (:func:`damcha_ts.data.prepare`'s keywords),
        at this estimator's lookback and horizon: ``Forecaster.fit``."""
        panel = prepare(data, seq_len=self.model_config["seq_len"], pred_len=self.model_config["pred_len"], **options)
        return self.fit(panel, refit=refit, description=input_description(data, options, panel))

    def fit_rows(self, meta, rows, *, refit: bool, calibrated: bool) -> tuple[Predictor, dict]:
        """(the Predictor trained on exactly these raw ``rows``, ``{entity: (values [T, K] of
        ``meta.history_columns``, timestamps [T])}``, as the model of ``meta`` was; its facts): the
        model of one ``cross_validation(refit=...)`` window, validated on its ``val_size`` tail."""
        panel = window_panel(meta, rows)
        description = {"data_config": meta.data_config, "input_kind": meta.input_kind,
                       "input_options": meta.input_options}
        predictor = self._fit(panel, refit=refit, calibrated=calibrated, compared=False, description=description)
        return predictor, predictor.fit_record.facts

    def _fit(self, panel, *, refit: bool, calibrated: bool, description: Mapping[str, Any] | None,
             compared: bool = False, folder: RunFolder | None = None) -> Predictor:
        from damcha_ts.forecasting.baseline_check import compare_with_baselines
        from damcha_ts.models.registry import model_spec
        from damcha_ts.training.runner import with_covariate_counts  # Lightning: loaded when a model trains

        if not isinstance(refit, (bool, np.bool_)):
            raise ConfigError(f"fit(refit=...) must be True or False, got {plain_repr(refit)}")
        if refit and folder is not None:
            raise ValueError("a run folder holds one training: fit(refit=True) takes no folder")
        estimator = self.keeping(self.sized_config(panel), self.training_for(panel))
        result, run_dir = estimator._train(panel, folder=folder)
        facts = {"best_val_loss": result.best_val_loss, "epochs_run": result.epochs_run,
                 "best_epoch": result.best_epoch, "best_step": result.best_step, **result.timing}
        calibration = estimator._validation_calibration(panel, result.module.model) if calibrated else None
        if compared and panel.dataset is None and model_spec(estimator.model_config["name"]).trained:
            first_pass = Predictor(result.module.model.cpu().eval(), estimator._meta(panel), self.quantiles)
            facts.update(compare_with_baselines(first_pass, panel, estimator.training.batch_size))
        if refit:
            # As long as the first pass's best weights trained: its steps under a step budget, else its epochs.
            budget = ({"max_steps": max(1, result.best_step)} if self.training.max_steps is not None
                      else {"max_epochs": result.best_epoch + 1})
            panel = panel.train_on_train_and_val()
            result, run_dir = estimator._train(panel, budget=budget, validate=False)
            facts.update(refit=True, **{key.replace("max", "refit"): value for key, value in budget.items()},
                         refit_seconds_per_epoch=result.timing.get("seconds_per_epoch"))
        train_rows, last_timestamp = panel.training_extent()
        facts.update(train_rows=train_rows, last_fit_timestamp=str(last_timestamp))
        record = FitRecord(facts, with_covariate_counts(estimator.model_config, panel), panel, run_dir, result,
                           estimator.training)
        return Predictor(result.module.model.cpu().eval(), estimator._meta(panel, description), self.quantiles,
                         history=panel.history, calibration=calibration, fit_record=record)

    def _meta(self, panel, description: Mapping[str, Any] | None = None):
        """The saved description of ``panel`` (a SeriesMeta) for a model that clips as this estimator says."""
        from damcha_ts.training.metadata import SeriesMeta  # torch: not loaded until a model is fitted

        meta = SeriesMeta.from_panel(panel, **(description or {}))
        meta.nonnegative = self.nonnegative
        return meta

    def _validation_calibration(self, panel, model):
        """The calibration of ``model``, trained on the train split of ``panel``, on its validation windows."""
        predictor = Predictor(model.cpu().eval(), self._meta(panel), self.quantiles)
        return validation_calibration(predictor, panel, self.training.batch_size)

    def _train(self, panel, *, budget: Mapping[str, int] | None = None, validate: bool = True,
               folder: RunFolder | None = None):
        """(``fit_series``'s FitResult, the run folder or None): checkpoints and logs go to ``folder``
        (a run's: its progress and callbacks, Lightning's messages kept, the trainer's arguments as
        given), else to a new ``fit_*`` folder of ``default_root_dir`` when one is given, else to a
        scratch folder. ``budget`` (``max_epochs`` or ``max_steps``) with ``validate=False``: a
        fixed length of training without validation (a refit)."""
        from damcha_ts.training.runner import fit_series  # Lightning: loaded when a model trains
        from damcha_ts.training.trainer import quiet_lightning

        training = dataclasses.replace(self.training, **(budget or {}))
        if folder is not None:
            return fit_series(panel, self.model_config, training, folder.path, resume=folder.resume,
                              callbacks=folder.callbacks, trainer_kwargs=self.trainer_kwargs, progress=folder.progress,
                              on_start=folder.on_start, validate=validate), Path(folder.path)
        trainer_kwargs = dict(self.trainer_kwargs)
        # As damcha-ts fit: a bar on stderr when it is a terminal, else a line per epoch there (verbose: a bar
        # always, with the model summary and Lightning's messages).
        progress = bool(trainer_kwargs.pop("enable_progress_bar", self.verbose or sys.stderr.isatty()))
        trainer_kwargs.setdefault("enable_model_summary", self.verbose)
        root = trainer_kwargs.pop("default_root_dir", None)
        run_dir = None
        if root is not None:
            # A folder of its own: a fresh fit clears checkpoints/ and logs/ in its folder, and
            # those must never be the user's.
            Path(root).mkdir(parents=True, exist_ok=True)
            run_dir = Path(tempfile.mkdtemp(prefix="fit_", dir=root))
        with tempfile.TemporaryDirectory(prefix="damcha_ts_fit_") as scratch:
            with contextlib.nullcontext() if self.verbose else quiet_lightning():
                result = fit_series(panel, self.model_config, training, run_dir or Path(scratch),
                                    trainer_kwargs=trainer_kwargs, progress=progress, validate=validate)
        return result, run_dir

    def _size_report(self, predictor: Predictor, windows: Mapping[str, int]) -> dict:
        """``n_params`` and ``windows`` per split (printed on stderr when verbose)."""
        from damcha_ts.models import count_parameters

        report = {"n_params": count_parameters(predictor.model), "windows": dict(windows)}
        if self.verbose:
            config = predictor.fit_record.model_config
            size = ", ".join(f"{k}={config[k]}" for k in ("d_model", "d_ff", "e_layers", "n_heads"))
            print(f"{config['name']}: {report['n_params']:,} parameters ({size}); windows: train {windows['train']}, "
                  f"val {windows['val']}, test {windows['test']}", file=sys.stderr)
        return report


def validation_calibration(predictor: Predictor, panel, batch_size: int):
    """The calibration (forecasting/intervals.py) of ``level=`` intervals of ``predictor``, whose
    model trained on the train split of ``panel``, on its validation windows; None when it has none.
    Every fit calibrates here: ``Estimator.fit`` (by the first pass of a refit) and ``damcha-ts fit``."""
    if panel.window_count("val") < 1:
        return None
    return calibrate(predictor, panel, "val", batch_size=batch_size)


def input_description(data: Any, options: Mapping[str, Any], panel) -> dict:
    """``SeriesMeta.from_panel``'s keywords for ``panel``, prepared from ``data`` with ``options``:
    the data settings saved with the model (``data_config``: its setting options and, for a file,
    its absolute path, so that evaluate() and a loaded model find it from any folder) and how the
    input was laid out (so that new data is read the same way)."""
    kind, layout = describe_input(data, options)
    layout["input_columns"] = input_columns(data, options, panel)
    settings = {k: plain_values(v) for k, v in options.items() if k in _SETTING_OPTIONS}
    if isinstance(data, (str, Path)):
        file = Path(data).expanduser()
        settings["dataset"] = str(file.resolve()) if file.is_file() else str(data)
    return {"data_config": settings, "input_kind": kind, "input_options": plain_values(layout)}


def training_keywords(training: Mapping[str, Any]) -> dict:
    """``Forecaster`` keywords of a (saved or configured) training section, complete (keys it lacks
    are TrainingConfig's defaults, so that it trains as configured and not with the user-data
    recipe): its ``seed`` is the ``random_state``. The inverse of :meth:`Estimator.from_keywords`."""
    keywords = dataclasses.asdict(TrainingConfig.from_dict(training))
    if "seed" in keywords:
        keywords["random_state"] = keywords.pop("seed")
    return keywords


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be True or False, got {plain_repr(value)}")
    return bool(value)


def window_panel(meta, rows):
    """The Panel of the raw ``rows`` a cross-validation window trains on, prepared as the model
    of ``meta`` was (its columns, target last, frequency, time marks, scaler, value policies), with
    no test split."""
    saved = meta.data_config or {}
    options = {**{key: saved[key] for key in ("val_size", *ReadOptions.ALWAYS) if saved.get(key) is not None},
               **model_data_options(meta)}
    # The model's column order is prepare's (the target last), so the last column keeps it there.
    if meta.entity_col is not None:
        options["time_col"] = "__time__"
    return prepare(_window_table(meta, rows), seq_len=meta.seq_len, pred_len=meta.pred_len, features=meta.features,
                   target=str(meta.columns[-1]), time_features_freq=meta.time_features_freq or meta.freq,
                   freq=meta.freq, test_size=0, **options)


def _window_table(meta, rows) -> pd.DataFrame:
    """The ``rows`` as a frame ``prepare`` reads: one series indexed by time, or (a model with an
    entity column) one table with the entity column and static covariates."""
    if meta.entity_col is None:
        ((values, timestamps),) = rows.values()
        return pd.DataFrame(values, index=pd.DatetimeIndex(timestamps), columns=list(meta.history_columns))
    parts = []
    for entity, (values, stamps) in rows.items():
        part = pd.DataFrame(values, columns=list(meta.history_columns))
        part.insert(0, "__time__", pd.DatetimeIndex(stamps))
        part.insert(0, meta.entity_col, entity)
        for name, value in zip(meta.static_covariates, meta.entity_scalers[entity]["static"]):
            part[name] = value
        parts.append(part)
    return pd.concat(parts, ignore_index=True)
