"""``Forecaster``: fit on a benchmark or your own data, forecast the real future, save and load.

    >>> from damcha_ts import Forecaster
    >>> f = Forecaster("itransformer_damcha", horizon=24, lookback=96, max_epochs=3)   # doctest: +SKIP
    >>> f.fit(frame)                      # wide DataFrame (DatetimeIndex, one column per variate)
    >>> future = f.predict()              # the 24 steps after the end of ``frame``, same kind
    >>> f.save("my_model"); f2 = Forecaster.load("my_model")

Inputs: a benchmark name or CSV path, a wide DataFrame, a long DataFrame (``id_col``,
``time_col``, ``value_col`` options) or a NumPy array ``[T, N]`` with ``freq``. Outputs come
back in the kind of the input: wide frame, long frame, or NumPy ``[H, N]``.

With ``quantiles=[0.1, 0.9]`` the model forecasts those quantile levels (and the median, which is
the point forecast), trained on the pinball loss; see ``damcha_ts.models.quantiles``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from damcha_ts.data.covariates import covariate_settings
from damcha_ts.data.entity_column import with_entity_col
from damcha_ts.data.options import ProtocolOptions
from damcha_ts.data.time_index import season_length_of
from damcha_ts.errors import ConfigError
from damcha_ts.forecasting.backtest import window_step
from damcha_ts.forecasting.cross_validation import backtest_rows, refit_every, rolling_forecasts
from damcha_ts.forecasting.entities import one_entity, rolling_rows
from damcha_ts.forecasting.estimator import Estimator, FitRecord, training_keywords
from damcha_ts.forecasting.history import future_values, history_from, prepare_as_fitted, prepare_options
from damcha_ts.forecasting.intervals import check_levels, require_calibration
from damcha_ts.forecasting.predict import predict as predict_with, stored_history
from damcha_ts.forecasting.predictor import Predictor
from damcha_ts.forecasting.window_scores import calibrate, refuse_empty_test_split, refuse_trained_split
from damcha_ts.plotting import plot_prediction
from damcha_ts.schema import DEFAULT_MODEL
from damcha_ts.training.config import TrainingConfig, load_run_config
from damcha_ts.tuning.auto import search_of
from damcha_ts.tuning.auto_trials import leaderboard

# The training defaults live in TrainingConfig alone, the lookback and horizon in ProtocolOptions;
# the constructor's come from there.
_DEFAULT = {f.name: f.default for f in dataclasses.fields(TrainingConfig)}


def _fitted(read, doc: str) -> property:
    """A read-only attribute of the fitted Predictor (``predictor_``), None before fit."""
    return property(lambda self: None if self.predictor_ is None else read(self.predictor_), doc=doc)


class Forecaster:
    """A forecasting model with scikit-learn-style ``fit`` / ``predict``.

    Args:
        model: ``"auto"`` (the candidate best on validation within ``time_budget``, its lookback
            searched too; ``leaderboard_`` says what it tried), or one of ``itransformer_mha``, ``itransformer_damcha`` (the paper's DAMCHA),
            ``gateformer_mha``, ``gateformer_damcha``, a variant such as ``itransformer_damcha_static``
            (DAMCHA with the static metric, the best DAMCHA-iTransformer of the leaderboard; see
            ``damcha_ts.models.registry.VARIANTS``), or a bare family name with explicit attention keys.
        horizon: steps to forecast (H).
        lookback: input length (L).
        freq: pandas frequency of user data when it cannot be inferred (required for NumPy input).
        random_state: seed of the run (``lightning.seed_everything``).
        max_epochs, batch_size, learning_rate: training budget and optimiser settings.
        quantiles: quantile levels in (0, 1) for a probabilistic forecast (0.5 is added: the
            median is the point forecast), or None for a point forecast trained on the MSE.
        trainer_kwargs: passed to ``lightning.Trainer`` (``accelerator``, ``devices``,
            ``strategy``, ``num_nodes``, ``deterministic``, ``limit_train_batches``,
            ``enable_progress_bar``, ``default_root_dir`` to keep checkpoints and logs: each fit
            writes them into a new ``fit_*`` folder inside it, ...).
        verbose: False (default): nothing on stdout; a progress bar on stderr when it is a terminal
            (else one line per epoch there, as ``damcha-ts fit``), no Lightning device lines, model
            summary or logging-interval warning. True: those too, and fit's parameter and window counts.
        nonnegative: keep every forecast (point, quantiles, intervals) at or above 0, for counts,
            sales and other quantities that cannot be negative; saved with the model.
        past_covariates, future_covariates: columns of the data the model reads and never forecasts
            or scores: past ones are observed up to the forecast origin, future ones are known over
            the horizon too (calendars, prices, promotions; ``predict(future=frame)`` gives them).
        static_covariates: per-entity constants (a store's size), for many-entity data: ``fit(table,
            entity_col="store")``; one more token, z-scored over the entities.
        time_budget, search, storage, workers: ``model="auto"``'s seconds (default 300), space (``AutoSpace``'s
            keys), Optuna storage (a study kept there is continued) and processes: :mod:`damcha_ts.tuning.auto`.
        data_settings: the data section ``fit`` starts from (a dataset and its options: what
            :meth:`from_config` and :meth:`load` give), or None.
        **model_hyperparameters: model config keys (``d_model``, ``e_layers``, ``n_heads``,
            ``dropout``, DAMCHA options...) and other training keys (``patience``,
            ``lr_schedule``, ``weight_decay``, ``variate_fraction``...).

    **Model size.** On user data ``fit`` chooses the size keys not given here from the number of
    variates and training windows (:func:`damcha_ts.models.sizing.data_sized`; docs/forecasting.md);
    benchmarks, :meth:`from_config` and :meth:`load` keep their sizes.

    **Parameters and the fitted model.** The constructor's arguments are its parameters
    (:meth:`get_params`, :meth:`set_params`, :meth:`clone`, as scikit-learn's estimators); ``fit``
    trains through a :class:`damcha_ts.forecasting.estimator.Estimator` and keeps one
    :class:`damcha_ts.forecasting.Predictor`, ``predictor_`` (the model with its scaler, time
    marks, history, calibration and fit record), which ``predict``, ``backtest``, ``plot`` and
    ``evaluate`` share; ``model_``, ``meta_``, ``fit_result_``, ``calibration_`` read it.
    """

    def __init__(self, model: str = DEFAULT_MODEL, horizon: int = ProtocolOptions.pred_len,
                 lookback: int = ProtocolOptions.seq_len, freq: str | None = None, random_state: int = _DEFAULT["seed"],
                 max_epochs: int | None = None, batch_size: int | None = None, learning_rate: float | None = None,
                 trainer_kwargs: Mapping[str, Any] | None = None, quantiles: Sequence[float] | None = None,
                 verbose: bool = False, nonnegative: bool = False, past_covariates: Sequence[str] | None = None,
                 future_covariates: Sequence[str] | None = None, static_covariates: Sequence[str] | None = None,
                 data_settings: Mapping[str, Any] | None = None, time_budget: float | None = None,
                 search: Any = None, storage: str | Path | None = None, workers: int | None = None,
                 **model_hyperparameters: Any):
        # The parameters as given (get_params returns these very objects, as sklearn.base.clone checks).
        self._params = {key: value for key, value in locals().items() if key not in ("self", "model_hyperparameters")}
        self._params.update(model_hyperparameters)
        # The data settings fit starts from: the covariates named here, then a configured data section.
        self._data_settings = dict(data_settings or {})
        self._configured_data = {**covariate_settings(past_covariates, future_covariates, static_covariates),
                                 **self._data_settings}
        given = {"max_epochs": max_epochs, "batch_size": batch_size, "learning_rate": learning_rate, **model_hyperparameters}
        self._estimator = Estimator.from_keywords(
            DEFAULT_MODEL if model == "auto" else model, horizon, lookback, random_state=random_state, quantiles=quantiles,
            nonnegative=nonnegative, trainer_kwargs=trainer_kwargs, verbose=verbose, **given)
        # model="auto": a search over candidates (tuning/auto.py); the estimator then holds what they share.
        self._search = search_of(model, self._estimator, time_budget=time_budget, search=search, storage=storage,
                                 workers=workers, given=given, lookback=lookback)
        self.training, self.verbose = self._estimator.training, self._estimator.verbose
        self.nonnegative, self.trainer_kwargs = self._estimator.nonnegative, dict(self._estimator.trainer_kwargs)
        self.horizon, self.lookback, self.freq, self.random_state = int(horizon), int(lookback), freq, random_state
        # Validated levels (sorted, 0.5 added): the quantile columns of every output follow them.
        self.quantiles = self._estimator.quantiles
        self.predictor_: Predictor | None = None  # the fitted model: set by fit and load, the one fitted state

    @classmethod
    def from_config(cls, config: str | Path | Mapping, *, horizon: int | None = None, overrides: Sequence[str] = (),
                    trainer_kwargs: Mapping[str, Any] | None = None) -> Forecaster:
        """A Forecaster with the settings of a run config (e.g. ``"itransformer_damcha/etth1"``).

        ``fit()`` without data then trains on the config's dataset.
        """
        resolved = load_run_config(config, horizon=horizon, overrides=overrides)
        data, model = resolved["data"], dict(resolved["model"])
        name, lookback, horizon = model.pop("name"), model.pop("seq_len"), model.pop("pred_len")
        settings = {k: v for k, v in data.items() if k not in ("seq_len", "pred_len")}
        return cls(name, horizon=horizon, lookback=lookback, trainer_kwargs=trainer_kwargs, data_settings=settings,
                   **model, **training_keywords(resolved["training"]))

    # ------------------------------------------------------------------ parameters
    def get_params(self, deep: bool = False) -> dict[str, Any]:
        """The constructor's arguments as given (model keys included), scikit-learn's way; ``deep``
        changes nothing (a Forecaster holds no estimator)."""
        return dict(self._params)

    def set_params(self, **params: Any) -> Forecaster:
        """Change parameters (checked as the constructor checks them: ConfigError for an unknown name
        or a bad value, the Forecaster unchanged); returns ``self``. The next ``fit`` uses them; a
        fitted model stays until then."""
        try:
            changed = type(self)(**{**self._params, **params})
        except (ConfigError, TypeError) as error:  # TypeError: a keyword given twice (seed and random_state)
            raise ConfigError(f"set_params: {error}") from None
        fitted = self.predictor_
        self.__dict__.update(changed.__dict__)
        self.predictor_ = fitted
        return self

    def clone(self) -> Forecaster:
        """A new, unfitted Forecaster with the same parameters (``sklearn.base.clone`` does the same)."""
        return type(self)(**copy.deepcopy(self.get_params()))

    def estimator(self) -> Estimator:
        """The :class:`~damcha_ts.forecasting.estimator.Estimator` that ``fit`` trains with (``"auto"``: the chosen one)."""
        return self._search.chosen_estimator(self.fit_result_) if self._search else self._estimator

    # ------------------------------------------------------------------ fitting
    def fit(self, data: Any = None, *, refit: bool = False, **data_options: Any) -> Forecaster:
        """Train on ``data`` with early stopping on its validation split; returns ``self``.

        ``data``: a benchmark name (protocol split), a CSV path, a wide or long DataFrame or a NumPy
        array (70/10/20 split unless ``split=`` gives fractions or borders, or ``val_size`` /
        ``test_size`` the tails: rows or fractions, ``test_size=0`` for no test split). ``data_options`` go to
        :func:`damcha_ts.data.prepare` (``id_col``, ``time_col``, ``value_col``, ``freq``, ``start``,
        ``fill``, ``features``, ``target``, ``split``...). Without ``data``, a Forecaster made by
        :meth:`from_config` uses the config's dataset. ``entity_col="store"`` reads a table of many
        entities with the same variates as one model's data (each split and scaled on its own,
        ``scaler="entity"`` or ``"global"``; see :mod:`damcha_ts.data.entities`).

        ``refit=True``: then retrain from scratch (same seed) on the train and validation rows, without
        validation, for the best step or epoch count early stopping found, and keep that model
        (``fit_result_``: ``refit``, ``refit_steps`` or ``refit_epochs``); ``level=`` intervals stay
        calibrated by the first pass. ``model="auto"`` always refits the trained candidate it chose.
        """
        if data is None:
            if not self._configured_data.get("dataset"):
                raise ConfigError("fit() needs data: a benchmark name, a CSV path, a DataFrame or a NumPy array")
            data = self._configured_data["dataset"]
        options = prepare_options(self._configured_data, self.freq, data, data_options)
        options = with_entity_col(data, options)  # a table that names its series: many entities
        fitter = self._search or self._estimator  # model="auto": the search (tuning/auto.py)
        self.predictor_ = fitter.fit_data(data, options, refit=refit)
        # The batch size the data chose (when not given), the lookback the search chose.
        self.training, self.lookback = self.predictor_.fit_record.training, self.predictor_.meta.seq_len
        return self

    # ------------------------------------------------------------------ forecasting
    def predict(self, data: Any = None, *, future: Any = None, level: Any = None, entities: Sequence[str] | None = None,
                **data_options: Any):
        """Forecast the ``horizon`` steps after the end of ``data`` (default: the fitted data).

        Returns the input's kind: a wide DataFrame indexed by the future timestamps, a long DataFrame
        (id, time, value columns named as in the input) or a NumPy array ``[H, N]``.

        With ``quantiles``, the point forecast is the predicted median and the levels come too: a wide
        frame gets one column per variate and level (``OT_q0.1``, ``OT_q0.5``, ...), a long frame one
        per level (``value_q0.1``, ...), and NumPy input gives ``{"point": [H, N], "quantiles":
        [Q, H, N]}`` (levels in the order of ``self.quantiles``). Quantiles never cross.

        ``level=[80, 95]`` (percentages) adds split-conformal intervals calibrated on the validation
        windows: ``OT-lo-80`` / ``OT-hi-80`` (wide), ``value-lo-80`` (long), ``"lo-80"`` keys (NumPy);
        see :mod:`damcha_ts.forecasting.intervals` (CQR for a model trained with the level's quantiles).

        ``future``: for a model with ``future_covariates``, their values at the forecast timestamps (a
        wide frame indexed by them, one column per future covariate); :meth:`future_timestamps` says which.

        A model fitted with ``entity_col=`` forecasts every entity (or ``entities=[...]``): one frame
        with the entity column first (``future`` then has that column too).
        """
        return predict_with(self._predictor("predict"), data, future=future, level=level, entities=entities, **data_options)

    def future_timestamps(self, last: pd.Timestamp) -> pd.DatetimeIndex:
        """The ``horizon`` timestamps after ``last`` at the fitted frequency."""
        return self._predictor("future_timestamps").future_timestamps(last)

    def evaluate(self, data: Any = None, *, split: str = "test", borders: Any = None, level: Any = None,
                 season_length: int | None = None, **data_options: Any) -> dict:
        """Scores over every window of a split: MSE/MAE on the z-scale and the original scale, and on
        the original scale ``mase``, ``smape`` (0-2), ``rmse`` (docs/forecasting.md, "Scores").

        ``data`` None: the fitted data (a benchmark keeps its protocol split). Otherwise a benchmark
        name, CSV path, frame or array is prepared as in ``fit`` (its scaler is fitted on its own
        train rows, as the protocol does); ``borders`` are its split (fractions or row borders).
        ``split`` picks ``"train"``, ``"val"`` or ``"test"``; a model fitted with ``test_size=0`` has no
        test split to score on (ConfigError): pass held-out data, or ``split="val"``.

        ``level=[80, 95]`` also scores intervals and quantiles on the raw scale: ``coverage_80``,
        ``width_80`` and, with ``quantiles``, ``coverage_80_uncalibrated`` (the raw head), ``pinball_loss``
        and ``wql`` (GluonTS' mean weighted quantile loss). ``season_length``: MASE's season
        (default: the data's frequency's, e.g. 24 for hourly data).
        """
        predictor, levels = self._predictor("evaluate"), check_levels(level)
        require_calibration(predictor, levels)  # before the data is read
        season_length_of(None, season_length)  # checked before the data is read
        panel = self._evaluation_panel(data, borders, data_options)
        if split == "test" and panel.window_count(split) == 0:
            refuse_empty_test_split(fitted=data is None and borders is None and not data_options,
                                    refit=bool(self.fit_result_.get("refit")))
        return predictor.evaluate(panel, split, self.training.batch_size, levels, season_length=season_length)

    def calibrate(self, data: Any = None, *, split: str = "val", borders: Any = None, **data_options: Any) -> Forecaster:
        """Compute the calibration of ``level=`` intervals on the windows of ``split`` of ``data``
        (default: the fitted data; other data is prepared as in :meth:`evaluate`); returns ``self``.

        ``fit`` already calibrates on its validation split; this gives one to a model saved without
        (``Forecaster.load(old).calibrate(data).save(new)``) or calibrates on other held-out data.
        The windows must be ones the model did not train on: ``split="train"``, and ``"val"`` after
        ``fit(refit=True)``, are refused (ConfigError; a refit model keeps its first pass's calibration).
        """
        predictor = self._predictor("calibrate")
        refit = bool(self.fit_result_.get("refit"))
        refuse_trained_split(split, refit)  # before the data is read
        panel = self._evaluation_panel(data, borders, data_options)
        predictor.calibration = calibrate(predictor, panel, split, refit=refit, batch_size=self.training.batch_size)
        return self

    def backtest(self, data: Any = None, n_windows: int = 5, step: int | None = None, *, level: Any = None,
                 season_length: int | None = None, **data_options: Any) -> pd.DataFrame:
        """Rolling-origin forecasts without refitting, as a long frame with a ``cutoff`` column.

        The last window's forecast ends at the last row of ``data`` (without ``data``: of the training
        series, which for ETT benchmarks is the protocol's last used row); earlier cutoffs are ``step``
        (default: ``horizon``) rows apart. Columns: id, time, ``cutoff``, the true value and
        ``forecast`` (names follow the input's long layout; defaults ``id``, ``date``, ``value``).
        With ``quantiles``, ``forecast`` is the median and ``forecast_q0.1``, ... hold the levels.
        ``level=[80, 95]`` adds the calibrated intervals ``forecast-lo-80``, ``forecast-hi-80``, ...
        (see :meth:`predict`). ``attrs["scores"]`` holds the windows' scores (as :meth:`evaluate`'s).
        """
        predictor = self._predictor("backtest")
        step, levels = window_step(n_windows, step, self.horizon), check_levels(level)
        require_calibration(predictor, levels)
        season_length_of(None, season_length)  # checked before the data is read
        rows, input_options = rolling_rows(predictor, self.panel_, data, data_options)
        return backtest_rows(predictor, rows, n_windows=n_windows, step=step, input_options=input_options, levels=levels,
                             season_length=season_length)

    def cross_validation(self, data: Any = None, n_windows: int = 3, step: int | None = None,
                         refit: bool | int = False, level: Sequence[float] | None = None,
                         season_length: int | None = None, **data_options: Any) -> pd.DataFrame:
        """Rolling-origin forecasts in neuralforecast's ``cross_validation`` shape, optionally retraining.

        A long frame with one row per forecast timestamp, variate and cutoff: id, time, ``cutoff``,
        the true value and ``forecast`` (the columns of :meth:`backtest`; cutoffs as there: the last
        window ends at the last row of ``data``, or of the training series, ``step`` rows apart).

        ``refit=False`` is :meth:`backtest` (the fitted model may have seen rows after early cutoffs).
        ``refit=True`` trains a model per window on the rows up to its cutoff as ``fit`` does (same
        config and seed, a ``val_size`` validation tail, else 10 %); ``refit=k`` every k-th window.
        ``attrs["refits"]`` lists each training. ``level=`` adds :meth:`backtest`'s interval columns,
        calibrated on each window model's validation tail as ``fit`` calibrates (after ``fit(refit=True)``:
        by the window's first pass, before its refit).
        """
        predictor = self._predictor("cross_validation")
        every, levels = refit_every(refit), check_levels(level)  # checked before any data is read
        step = window_step(n_windows, step, self.horizon)
        if not every:
            require_calibration(predictor, levels)
        season_length_of(None, season_length)  # checked before the data is read
        # Each window's model trains as fit trained this one: its config, its refit, calibrated for level=.
        estimator, again = self._estimator.keeping(self.model_config, self.training), bool(self.fit_result_.get("refit", False))

        def train(rows):
            return estimator.fit_rows(predictor.meta, rows, refit=again, calibrated=bool(levels))

        rows, input_options = rolling_rows(predictor, self.panel_, data, data_options)
        return rolling_forecasts(predictor, rows, n_windows=n_windows, step=step, every=every, train=train,
                                 input_options=input_options, levels=levels, season_length=season_length)

    def plot(self, data: Any = None, *, truth: Any = None, variates: Sequence[str] | None = None,
             history_steps: int | None = None, path: str | Path | None = None, ax=None, level: Any = None,
             future: Any = None, entity: str | None = None, **data_options: Any):
        """Plot history, forecast and (when given) the truth of one or more variates.

        ``truth``: a wide DataFrame indexed by the forecast timestamps, or an array ``[H, N]``.
        ``level=[80, 95]`` shades the calibrated intervals, ``future`` is as in :meth:`predict`;
        a many-entity model plots the ``entity`` named.
        Saves to ``path`` when given. Needs matplotlib (``pip install damcha-ts[plot]``).
        """
        predictor, title, levels = self._predictor("plot"), self.model_config["name"], check_levels(level)
        require_calibration(predictor, levels)
        predictor, data, future = one_entity(predictor, entity, data, future, "plot")
        title = title if entity is None else f"{title}: {entity}"
        values, stamps = stored_history(predictor) if data is None else history_from(predictor.meta, data, data_options)[2:]
        future_rows = future_values(predictor.meta, future, predictor.future_timestamps(stamps[-1]))
        return plot_prediction(predictor, values, stamps, truth=truth, variates=variates, history_steps=history_steps,
                               path=path, ax=ax, title=title, levels=levels, future=future_rows)

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        """Write config, weights, scaler, column/frequency metadata and the history tail."""
        return self._predictor("save").save(directory, training=dataclasses.asdict(self.training),
                                            metrics=self.fit_result_)

    @classmethod
    def load(cls, directory: str | Path, map_location: str = "cpu") -> Forecaster:
        """A fitted Forecaster from :meth:`save` or from ``run_experiment``'s ``model/`` directory.

        ``map_location`` is the device the loaded model forecasts on (``"cpu"``, ``"cuda"``, ...).
        Weights load with ``weights_only=True``; a modified weights file or one that does not fit
        the saved config is refused (ChecksumError / ConfigError).
        """
        from damcha_ts.training.artifacts import load_model_dir, model_directory

        loaded = load_model_dir(model_directory(directory), map_location=map_location)
        model, meta = loaded.model, loaded.meta  # a quantile model comes back wrapped, its horizon checked
        # The covariate counts come from the saved columns (the constructor takes names, not counts).
        model_config = {k: v for k, v in model.config.__dict__.items()
                        if k not in ("seq_len", "pred_len") and not k.endswith("_covariates")}
        forecaster = cls(model.name, horizon=meta.pred_len, lookback=meta.seq_len, freq=meta.freq,
                         nonnegative=bool(meta.nonnegative), data_settings=dict(meta.data_config or {}),
                         **model_config, **training_keywords(loaded.training))  # a refit keeps the saved setting
        forecaster.predictor_ = Predictor.from_saved(loaded)
        forecaster.predictor_.fit_record = FitRecord(loaded.metrics, forecaster._estimator.model_config)
        return forecaster

    # ------------------------------------------------------------------ the fitted model
    @property
    def is_fitted(self) -> bool:
        """Whether there is a model to forecast with (after ``fit`` or ``Forecaster.load``)."""
        return self.predictor_ is not None

    @property
    def predictor(self) -> Predictor:
        """``predictor_``, the fitted :class:`damcha_ts.forecasting.Predictor` (what every forecast runs through)."""
        return self._predictor("predictor")

    @property
    def device(self):
        """The device the fitted model's weights are on (inputs go there, forecasts come back to NumPy)."""
        return self._predictor("device").device

    model_ = _fitted(lambda predictor: predictor.model, "The fitted network (None before fit).")
    meta_ = _fitted(lambda predictor: predictor.meta,
                    "The fitted data's :class:`~damcha_ts.training.metadata.SeriesMeta` (None before fit).")
    panel_ = _fitted(lambda predictor: predictor.fit_record.panel,
                     "The Panel the fitted model trained on (None before fit and after ``load``).")
    run_dir_ = _fitted(lambda predictor: predictor.fit_record.run_dir,
                       "Where fit kept checkpoints and logs (a ``fit_*`` folder of ``default_root_dir``), or None.")

    @property
    def calibration_(self):
        """The validation conformity scores of ``level=`` intervals, or None."""
        return None if self.predictor_ is None else self.predictor_.calibration

    @calibration_.setter
    def calibration_(self, calibration) -> None:
        self._predictor("calibration_").calibration = calibration

    @property
    def fit_result_(self) -> dict:
        """What fit reports (losses, epochs, timing, rows, refit, ``n_params``, ``windows``) or a
        loaded model's saved metrics; {} before fit."""
        return {} if self.predictor_ is None else self.predictor_.fit_record.facts

    @property
    def model_config(self) -> dict:
        """The complete model config: the fitted model's (data-sized, with its covariate counts), or
        before fit the one the parameters give (``{"name": "auto"}`` for a search)."""
        if self.predictor_ is None:
            return {"name": "auto"} if self._search else self._estimator.model_config
        return self.predictor_.fit_record.model_config

    @property
    def leaderboard_(self) -> pd.DataFrame | None:
        """``Forecaster("auto")``'s trials after fit (model, lookback, settings, validation MASE,
        seconds, state), best first; None for other models."""
        return leaderboard(self.fit_result_) if "auto" in self.fit_result_ else None

    @property
    def data_config(self) -> dict:
        """The data settings: those the fit used (saved with the model), or before fit the configured ones."""
        return self._data_settings if self.predictor_ is None else dict(self.predictor_.meta.data_config or {})

    def _predictor(self, action: str) -> Predictor:
        if self.predictor_ is None:
            raise ConfigError(f"{action}() called before fit(): call fit(data) or Forecaster.load(directory) first")
        return self.predictor_

    def _evaluation_panel(self, data: Any, borders: Any, data_options: Mapping[str, Any]):
        """The panel to score: the fitted one, or ``data`` (default: the fitted file or benchmark)
        prepared as in fit and read as the fit input was."""
        if data is None and self.panel_ is not None and borders is None and not data_options:
            return self.panel_
        return prepare_as_fitted(self.meta_, self._configured_data, self.freq, data, data_options, borders)

    def __repr__(self) -> str:
        state = "fitted" if self.is_fitted else "not fitted"
        return f"Forecaster(model={self.model_config['name']!r}, horizon={self.horizon}, lookback={self.lookback}, {state})"
