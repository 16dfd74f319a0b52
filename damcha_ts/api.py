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

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.data.covariates import covariate_settings
from damcha_ts.data.entity_column import with_entity_col
from damcha_ts.data.layout import describe_input, input_columns
from damcha_ts.data.options import PROTOCOL_KEYS, ReadOptions
from damcha_ts.errors import ConfigError, plain_repr
from damcha_ts.forecasting.history import (
    history_from,
    load_history,
    model_data_options,
    prepare_options,
    saved_read_options,
)
from damcha_ts.forecasting.predictor import saved_history
from damcha_ts.training.config import TrainingConfig, plain_values, split_keywords

# The data options that define a model's setting, saved with it (JSON-ready): the protocol's but
# lookback and horizon (the constructor's), the value policies, and where a benchmark file lies.
_SETTING_OPTIONS = (*(k for k in PROTOCOL_KEYS if k not in ("seq_len", "pred_len")), *ReadOptions.ALWAYS, "path")
# The training defaults live in TrainingConfig alone; the constructor's come from there.
_DEFAULT = {f.name: f.default for f in dataclasses.fields(TrainingConfig)}


class Forecaster:
    """A forecasting model with scikit-learn-style ``fit`` / ``predict``.

    Args:
        model: one of ``itransformer_mha``, ``itransformer_damcha`` (the paper's DAMCHA),
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
        **model_hyperparameters: model config keys (``d_model``, ``e_layers``, ``n_heads``,
            ``dropout``, DAMCHA options...) and other training keys (``patience``,
            ``lr_schedule``, ``weight_decay``, ``variate_fraction``...).

    **Model size.** On user data ``fit`` chooses the size keys not given here from the number of
    variates and training windows (:func:`damcha_ts.models.sizing.data_sized`; docs/forecasting.md);
    benchmarks, :meth:`from_config` and :meth:`load` keep their sizes.

    Forecasting itself is a :class:`damcha_ts.forecasting.Predictor` (the model with its scaler
    and time marks) shared by ``predict``, ``backtest``, ``plot`` and ``evaluate``.
    """

    def __init__(self, model: str = "itransformer_damcha", horizon: int = 96, lookback: int = 96,
                 freq: str | None = None, random_state: int = _DEFAULT["seed"], max_epochs: int = _DEFAULT["max_epochs"],
                 batch_size: int = _DEFAULT["batch_size"], learning_rate: float = _DEFAULT["learning_rate"],
                 trainer_kwargs: Mapping[str, Any] | None = None, quantiles: Sequence[float] | None = None,
                 verbose: bool = False, nonnegative: bool = False, past_covariates: Sequence[str] | None = None,
                 future_covariates: Sequence[str] | None = None, static_covariates: Sequence[str] | None = None,
                 **model_hyperparameters: Any):
        self._configured_data = covariate_settings(past_covariates, future_covariates, static_covariates)
        self.model_config, self.training = _settings(
            model, horizon, lookback, random_state, max_epochs, batch_size, learning_rate, quantiles,
            **model_hyperparameters,
        )
        # The model's given keywords: fit sizes the model from the data for the size keys not among them.
        self._given_model = {"name": model, **split_keywords(model_hyperparameters)[0]}
        self.verbose = _flag(verbose, "verbose")
        self.nonnegative = _flag(nonnegative, "nonnegative")
        self.horizon, self.lookback = int(horizon), int(lookback)
        self.freq = freq
        self.random_state = random_state
        self.trainer_kwargs = dict(trainer_kwargs or {})
        # Validated levels (sorted, 0.5 added): the quantile columns of every output follow them.
        self.quantiles = None if self.training.quantiles is None else tuple(self.training.quantiles)
        # Data settings: what the last fit used (saved with the model); refits start from _configured_data.
        self.data_config: dict[str, Any] = {}
        self.model_: Any = None
        self.meta_: Any = None
        self.fit_result_: dict = {}
        self._series = None
        self._history = None  # (raw values [L, C], timestamps [L]) that predict() continues
        self.run_dir_: Path | None = None  # where fit kept checkpoints and logs (with default_root_dir)
        self.calibration_: Any = None  # validation conformity scores, for level= intervals

    @classmethod
    def from_config(cls, config: str | Path | Mapping, *, horizon: int | None = None, overrides: Sequence[str] = (),
                    trainer_kwargs: Mapping[str, Any] | None = None) -> Forecaster:
        """A Forecaster with the settings of a run config (e.g. ``"itransformer_damcha/etth1"``).

        ``fit()`` without data then trains on the config's dataset.
        """
        from damcha_ts.training.config import load_run_config

        resolved = load_run_config(config, horizon=horizon, overrides=overrides)
        data, model = resolved["data"], dict(resolved["model"])
        name, lookback, horizon = model.pop("name"), model.pop("seq_len"), model.pop("pred_len")
        forecaster = cls(name, horizon=horizon, lookback=lookback, trainer_kwargs=trainer_kwargs, **model,
                         **_keywords(resolved["training"]))
        forecaster.data_config = {k: v for k, v in data.items() if k not in ("seq_len", "pred_len")}
        forecaster._configured_data = {**forecaster._configured_data, **forecaster.data_config}
        return forecaster

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

        ``refit=True``: once early stopping has found the best epoch count on the validation split,
        retrain from scratch (same seed) on the train and validation rows for that many epochs,
        without validation, and keep that model (its scaler fitted on those rows); ``fit_result_``
        then says ``refit: True`` and ``refit_epochs``. With ``test_size=0`` that is every row.
        Its ``level=`` intervals are calibrated on the validation windows by the first pass, before
        the refit trained on them.
        """
        return _fit(self, data, refit, data_options)

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
        from damcha_ts.forecasting import predict

        return predict(self._predictor("predict"), data, future=future, level=level, entities=entities, **data_options)

    def future_timestamps(self, last: pd.Timestamp) -> pd.DatetimeIndex:
        """The ``horizon`` timestamps after ``last`` at the fitted frequency."""
        return self._predictor("future_timestamps").future_timestamps(last)

    def evaluate(self, data: Any = None, *, split: str = "test", borders: Any = None, level: Any = None,
                 **data_options: Any) -> dict:
        """MSE/MAE over every window of a split, on the z-scale and the original scale.

        ``data`` None: the fitted data (a benchmark keeps its protocol split). Otherwise a benchmark
        name, CSV path, frame or array is prepared as in ``fit`` (its scaler is fitted on its own
        train rows, as the protocol does); ``borders`` are its split (fractions or row borders).
        ``split`` picks ``"train"``, ``"val"`` or ``"test"``; a model fitted with ``test_size=0`` has no
        test split to score on (ConfigError): pass held-out data, or ``split="val"``.

        ``level=[80, 95]`` also scores intervals and quantiles on the raw scale: ``coverage_80``,
        ``width_80`` and, with ``quantiles``, ``coverage_80_uncalibrated`` (the raw head), ``pinball_loss``
        and ``wql`` (GluonTS' mean weighted quantile loss).
        """
        return _evaluate(self, data, split, borders, level, data_options)

    def calibrate(self, data: Any = None, *, split: str = "val", borders: Any = None, **data_options: Any) -> Forecaster:
        """Compute the calibration of ``level=`` intervals on the windows of ``split`` of ``data``
        (default: the fitted data; other data is prepared as in :meth:`evaluate`); returns ``self``.

        ``fit`` already calibrates on its validation split; this gives one to a model saved without
        (``Forecaster.load(old).calibrate(data).save(new)``) or calibrates on other held-out data.
        The windows must be ones the model did not train on: ``split="train"``, and ``"val"`` after
        ``fit(refit=True)``, are refused (ConfigError; a refit model keeps its first pass's calibration).
        """
        from damcha_ts.forecasting.window_scores import calibrate, refuse_trained_split

        predictor = self._predictor("calibrate")
        refit = bool(self.fit_result_.get("refit"))
        refuse_trained_split(split, refit)  # before the data is read
        series = _evaluation_series(self, data, borders, data_options)
        self.calibration_ = calibrate(predictor, series, split, refit=refit, batch_size=self.training.batch_size)
        return self

    def backtest(self, data: Any = None, n_windows: int = 5, step: int | None = None, *, level: Any = None,
                 **data_options: Any) -> pd.DataFrame:
        """Rolling-origin forecasts without refitting, as a long frame with a ``cutoff`` column.

        The last window's forecast ends at the last row of ``data`` (without ``data``: of the training
        series, which for ETT benchmarks is the protocol's last used row); earlier cutoffs are ``step``
        (default: ``horizon``) rows apart. Columns: id, time, ``cutoff``, the true value and
        ``forecast`` (names follow the input's long layout; defaults ``id``, ``date``, ``value``).
        With ``quantiles``, ``forecast`` is the median and ``forecast_q0.1``, ... hold the levels.
        ``level=[80, 95]`` adds the calibrated intervals ``forecast-lo-80``, ``forecast-hi-80``, ...
        (see :meth:`predict`).
        """
        return _backtest(self, data, n_windows, step, level, data_options)

    def cross_validation(self, data: Any = None, n_windows: int = 3, step: int | None = None,
                         refit: bool | int = False, level: Sequence[float] | None = None,
                         **data_options: Any) -> pd.DataFrame:
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
        return _cross_validation(self, data, n_windows, step, refit, level, data_options)

    def plot(self, data: Any = None, *, truth: Any = None, variates: Sequence[str] | None = None,
             history_steps: int | None = None, path: str | Path | None = None, ax=None, level: Any = None,
             future: Any = None, entity: str | None = None, **data_options: Any):
        """Plot history, forecast and (when given) the truth of one or more variates.

        ``truth``: a wide DataFrame indexed by the forecast timestamps, or an array ``[H, N]``.
        ``level=[80, 95]`` shades the calibrated intervals, ``future`` is as in :meth:`predict`;
        a many-entity model plots the ``entity`` named.
        Saves to ``path`` when given. Needs matplotlib (``pip install damcha-ts[plot]``).
        """
        return _plot(self, data, truth, variates, history_steps, path, ax, level, future, entity, data_options)

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        """Write config, weights, scaler, column/frequency metadata and the history tail."""
        from damcha_ts.training.artifacts import history_arguments, save_model_dir

        self._check_fitted("save")
        calibration = None if self.calibration_ is None else self.calibration_.to_saved()
        return save_model_dir(directory, self.model_, self.meta_, training=dataclasses.asdict(self.training),
                              **history_arguments(self._history, self.meta_), metrics=self.fit_result_,
                              calibration=calibration)

    @classmethod
    def load(cls, directory: str | Path, map_location: str = "cpu") -> Forecaster:
        """A fitted Forecaster from :meth:`save` or from ``run_experiment``'s ``model/`` directory.

        ``map_location`` is the device the loaded model forecasts on (``"cpu"``, ``"cuda"``, ...).
        Weights load with ``weights_only=True``; a modified weights file or one that does not fit
        the saved config is refused (ChecksumError / ConfigError).
        """
        return _load(cls, directory, map_location)

    @property
    def device(self):
        """The device the fitted model's weights are on (inputs go there, forecasts come back to NumPy)."""
        return self._predictor("device").device

    @property
    def predictor(self):
        """The :class:`damcha_ts.forecasting.Predictor` of the fitted model (what every forecast runs through)."""
        return self._predictor("predictor")

    @property
    def is_fitted(self) -> bool:
        """Whether there is a model to forecast with (after ``fit`` or ``Forecaster.load``)."""
        return self.model_ is not None

    def _check_fitted(self, action: str) -> None:
        if not self.is_fitted:
            raise ConfigError(f"{action}() called before fit(): call fit(data) or Forecaster.load(directory) first")

    def _predictor(self, action: str):
        """The Predictor of the fitted model, as it is now (``model_``, ``meta_`` and the history)."""
        from damcha_ts.forecasting import Predictor

        self._check_fitted(action)
        return Predictor(self.model_, self.meta_, self.quantiles, history=self._history, calibration=self.calibration_)

    def __repr__(self) -> str:
        state = "fitted" if self.model_ is not None else "not fitted"
        return f"Forecaster(model={self.model_config['name']!r}, horizon={self.horizon}, lookback={self.lookback}, {state})"


# ---------------------------------------------------------------------- constructor settings
# ---------------------------------------------------------------------- the facade's work
def _fit(forecaster: Forecaster, data: Any, refit: bool, data_options: Mapping[str, Any]) -> Forecaster:
    """Forecaster.fit (see there)."""
    from damcha_ts.data import prepare
    from damcha_ts.training.metadata import SeriesMeta
    from damcha_ts.training.runner import with_covariate_counts

    if data is None:
        if not forecaster._configured_data.get("dataset"):
            raise ConfigError("fit() needs data: a benchmark name, a CSV path, a DataFrame or a NumPy array")
        data = forecaster._configured_data["dataset"]
    options = prepare_options(forecaster._configured_data, forecaster.freq, data, data_options)
    options = with_entity_col(data, options)  # a table that names its series: many entities
    kind, input_options = describe_input(data, options)
    series = prepare(data, seq_len=forecaster.lookback, pred_len=forecaster.horizon, **options)
    forecaster.model_config = _sized_model_config(forecaster, series)  # user data: the size keys not given follow it
    windows = {split: series.window_count(split) for split in ("train", "val", "test")}
    series, result, facts, calibration = _fit_model(forecaster, series, refit=refit, calibrated=True)
    forecaster.model_ = result.module.model.cpu().eval()
    forecaster.model_config = with_covariate_counts(forecaster.model_config, series)  # as fit_series built it
    input_options["input_columns"] = input_columns(data, options, series)
    forecaster.data_config = _data_settings(data, options)
    forecaster.meta_ = SeriesMeta.from_panel(
        series, data_config=forecaster.data_config, input_kind=kind, input_options=plain_values(input_options)
    )
    forecaster.meta_.nonnegative = forecaster.nonnegative
    forecaster._series = series
    forecaster._history = series.history  # the source's last rows (of each entity, for many)
    forecaster.fit_result_ = facts
    forecaster.fit_result_.update(_size_report(forecaster, windows))
    forecaster.calibration_ = calibration
    return forecaster


def _cross_validation(forecaster: Forecaster, data: Any, n_windows: int, step: int | None, refit: bool | int,
                      level: Sequence[float] | None, data_options: Mapping[str, Any]) -> pd.DataFrame:
    """Forecaster.cross_validation (see there)."""
    from damcha_ts.forecasting.backtest import window_step
    from damcha_ts.forecasting.cross_validation import refit_every, rolling_forecasts
    from damcha_ts.forecasting.intervals import check_levels, require_calibration

    predictor = forecaster._predictor("cross_validation")
    every, levels = refit_every(refit), check_levels(level)  # checked before any data is read
    step = window_step(n_windows, step, forecaster.horizon)
    if not every:
        require_calibration(predictor, levels)
    def train(rows):
        return _window_predictor(forecaster, rows, calibrated=bool(levels))

    rows, input_options = _rolling_rows(forecaster, predictor, data, data_options)
    return rolling_forecasts(predictor, rows, n_windows=n_windows, step=step, refit=refit, train=train,
                             input_options=input_options, level=level)


def _load(cls: type[Forecaster], directory: str | Path, map_location: str) -> Forecaster:
    """Forecaster.load (see there)."""
    from damcha_ts.training.artifacts import load_model_dir, model_directory

    loaded = load_model_dir(model_directory(directory), map_location=map_location)
    model, meta = loaded.model, loaded.meta  # a quantile model comes back wrapped, its horizon checked
    # The covariate counts come from the saved columns (the constructor takes names, not counts).
    model_config = {k: v for k, v in model.config.__dict__.items()
                    if k not in ("seq_len", "pred_len") and not k.endswith("_covariates")}
    forecaster = cls(model.name, horizon=meta.pred_len, lookback=meta.seq_len, freq=meta.freq, **model_config,
                     **_keywords(loaded.training))
    forecaster.model_, forecaster.meta_, forecaster.fit_result_ = model, meta, loaded.metrics
    forecaster.nonnegative = bool(meta.nonnegative)
    forecaster.data_config = dict(meta.data_config or {})
    forecaster._configured_data = dict(forecaster.data_config)  # a refit keeps the saved setting
    forecaster._history = saved_history(loaded)
    if loaded.calibration is not None:
        from damcha_ts.forecasting.intervals import Calibration

        forecaster.calibration_ = Calibration.from_saved(loaded.calibration)
    return forecaster


def _evaluate(forecaster: Forecaster, data: Any, split: str, borders: Any, level: Any,
              data_options: Mapping[str, Any]) -> dict:
    """Forecaster.evaluate (see there)."""
    from damcha_ts.forecasting.intervals import check_levels, require_calibration

    predictor = forecaster._predictor("evaluate")
    require_calibration(predictor, check_levels(level))  # before the data is read
    series = _evaluation_series(forecaster, data, borders, data_options)
    _check_scorable(forecaster, series, split, fitted=data is None and borders is None and not data_options)
    return predictor.evaluate(series, split, forecaster.training.batch_size, level=level)


def _backtest(forecaster: Forecaster, data: Any, n_windows: int, step: int | None, level: Any,
              data_options: Mapping[str, Any]) -> pd.DataFrame:
    """Forecaster.backtest (see there)."""
    from damcha_ts.forecasting.backtest import window_step
    from damcha_ts.forecasting.cross_validation import backtest_rows
    from damcha_ts.forecasting.intervals import check_levels, require_calibration

    predictor = forecaster._predictor("backtest")
    step = window_step(n_windows, step, forecaster.horizon)
    require_calibration(predictor, check_levels(level))
    rows, input_options = _rolling_rows(forecaster, predictor, data, data_options)
    return backtest_rows(predictor, rows, n_windows=n_windows, step=step, input_options=input_options, level=level)


def _plot(forecaster: Forecaster, data: Any, truth: Any, variates: Sequence[str] | None, history_steps: int | None,
          path: str | Path | None, ax, level: Any, future: Any, entity: str | None, data_options: Mapping[str, Any]):
    """Forecaster.plot (see there)."""
    from damcha_ts.forecasting.history import future_values
    from damcha_ts.forecasting.intervals import check_levels, require_calibration
    from damcha_ts.forecasting.entities import one_entity
    from damcha_ts.forecasting.predict import stored_history
    from damcha_ts.plotting import plot_prediction

    predictor, title = forecaster._predictor("plot"), forecaster.model_config["name"]
    require_calibration(predictor, check_levels(level))
    predictor, data, future = one_entity(predictor, entity, data, future, "plot")
    title = title if entity is None else f"{title}: {entity}"
    values, stamps = stored_history(predictor) if data is None else history_from(predictor.meta, data, data_options)[2:]
    future_rows = future_values(predictor.meta, future, predictor.future_timestamps(stamps[-1]))
    return plot_prediction(predictor, values, stamps, truth=truth, variates=variates, history_steps=history_steps,
                           path=path, ax=ax, title=title, level=level, future=future_rows)


def _settings(
    model: str,
    horizon: int,
    lookback: int,
    random_state: int,
    max_epochs: int,
    batch_size: int,
    learning_rate: float,
    quantiles: Sequence[float] | None,
    **kwargs: Any,
) -> tuple[dict, TrainingConfig]:
    """The constructor's keywords routed by field name: (the complete model config, the training
    config). Keys that name a TrainingConfig field go to it, every other key to the model config;
    ConfigError for invalid values or unknown keys."""
    from damcha_ts.models.quantiles import validate_quantiles

    for name, value in (("horizon", horizon), ("lookback", lookback)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ConfigError(f"{name} must be a positive integer, got {plain_repr(value)}")
    if isinstance(random_state, bool) or not isinstance(random_state, (int, np.integer)) or random_state < 0:
        raise ConfigError(f"random_state must be a non-negative integer (the seed of every run), got {plain_repr(random_state)}")
    model_options, training_options = split_keywords(kwargs)
    levels = None if quantiles is None else validate_quantiles(quantiles, argument="quantiles")
    training = TrainingConfig.from_dict(
        {
            "max_epochs": max_epochs,
            "batch_size": batch_size,
            "learning_rate": learning_rate,
            "seed": random_state,
            "quantiles": None if levels is None else list(levels),
            **training_options,
        }
    )
    return _model_config(model, int(lookback), int(horizon), model_options), training


def _keywords(training: Mapping[str, Any]) -> dict:
    """Constructor keywords of a (saved or configured) training section: its ``seed`` is the
    ``random_state``; keys it lacks keep the constructor's defaults (TrainingConfig's)."""
    keywords = dict(training)
    if "seed" in keywords:
        keywords["random_state"] = keywords.pop("seed")
    return keywords


def _model_config(model: str, lookback: int, horizon: int, options: Mapping[str, Any]) -> dict:
    """The validated, complete model config (ConfigError for unknown names or keys)."""
    from damcha_ts.models.registry import model_spec, resolve_model_config

    model_spec(model, where="model")  # named as the constructor's argument
    return resolve_model_config({"name": model, **options, "seq_len": lookback, "pred_len": horizon})


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be True or False, got {plain_repr(value)}")
    return bool(value)


def _sized_model_config(forecaster: Forecaster, series) -> dict:
    """The model config fit builds: on user data, the size keys the constructor was not given
    chosen from ``series`` (:func:`damcha_ts.models.sizing.size_for_series`); a benchmark keeps
    the config as it is."""
    from damcha_ts.models.base import COVARIATE_KINDS
    from damcha_ts.models.sizing import SIZE_KEYS, size_for_series

    given = forecaster._given_model
    if series.dataset is not None or all(key in given for key in SIZE_KEYS):
        # An earlier fit's covariate counts are not this data's: the data sets them again.
        return {**forecaster.model_config, **{f"{kind}_covariates": 0 for kind in COVARIATE_KINDS}}
    options = {k: v for k, v in given.items() if k != "name"}
    sized = {**options, **size_for_series(series, options)}
    return _model_config(given["name"], forecaster.lookback, forecaster.horizon, sized)


def _size_report(forecaster: Forecaster, windows: Mapping[str, int]) -> dict:
    """``fit_result_``'s ``n_params`` and ``windows`` per split (printed on stderr when verbose)."""
    import sys

    from damcha_ts.models import count_parameters

    report = {"n_params": count_parameters(forecaster.model_), "windows": dict(windows)}
    if forecaster.verbose:
        config = forecaster.model_config
        size = ", ".join(f"{k}={config[k]}" for k in ("d_model", "d_ff", "e_layers", "n_heads"))
        print(f"{config['name']}: {report['n_params']:,} parameters ({size}); windows: train {windows['train']}, "
              f"val {windows['val']}, test {windows['test']}", file=sys.stderr)
    return report


# ---------------------------------------------------------------------- fit and evaluate data
def _fit_model(forecaster: Forecaster, series, *, refit: bool = False, calibrated: bool = False):
    """Train on ``series`` as ``fit`` does: (the series the kept model was trained on, its
    FitResult, the ``fit_result_`` facts, its calibration or None). ``refit``: then retrain on
    train + validation rows for the best epoch count (see ``Forecaster.fit``). ``calibrated``:
    with the calibration of ``level=`` intervals on the validation windows, by the model trained
    without them (with ``refit``, the first pass: the kept model trained on them)."""
    if not isinstance(refit, (bool, np.bool_)):
        raise ConfigError(f"fit(refit=...) must be True or False, got {plain_repr(refit)}")
    result = _train(forecaster, series)
    facts = {"best_val_loss": result.best_val_loss, "epochs_run": result.epochs_run,
             "best_epoch": result.best_epoch, **result.timing}
    calibration = _validation_calibration(forecaster, series, result.module.model) if calibrated else None
    if refit:
        epochs = result.best_epoch + 1
        series = series.train_on_train_and_val()
        result = _train(forecaster, series, max_epochs=epochs, validate=False)
        facts.update(refit=True, refit_epochs=epochs,
                     refit_seconds_per_epoch=result.timing.get("seconds_per_epoch"))
    train_rows, last_timestamp = series.training_extent()
    facts.update(train_rows=train_rows, last_fit_timestamp=str(last_timestamp))
    return series, result, facts, calibration


def _validation_calibration(forecaster: Forecaster, series, model):
    """The calibration (forecasting/intervals.py) of ``model``, trained on the train split of
    ``series``, on its validation windows; None when it has none."""
    from damcha_ts.forecasting import Predictor
    from damcha_ts.forecasting.window_scores import calibrate
    from damcha_ts.training.metadata import SeriesMeta

    if series.window_count("val") < 1:
        return None
    meta = SeriesMeta.from_panel(series)
    meta.nonnegative = forecaster.nonnegative  # its forecasts are clipped as the kept model's
    predictor = Predictor(model.cpu().eval(), meta, forecaster.quantiles)
    return calibrate(predictor, series, "val", batch_size=forecaster.training.batch_size)


def _window_predictor(forecaster: Forecaster, rows, *, calibrated: bool = False):
    """(a Predictor trained as ``fit`` trains, on exactly these raw ``rows``, ``{entity: (values [T, K]
    of ``meta.history_columns``, timestamps [T])}``, its ``fit_result_`` facts): the model of one
    ``cross_validation(refit=...)`` window; ``calibrated``: with its calibration on its validation
    tail (for ``level=``; as ``fit`` makes it)."""
    from damcha_ts.data import prepare
    from damcha_ts.forecasting import Predictor
    from damcha_ts.training.metadata import SeriesMeta

    meta = forecaster.meta_
    saved = meta.data_config or {}
    frame = _window_table(meta, rows)
    options = {**{key: saved[key] for key in ("val_size", *ReadOptions.ALWAYS) if saved.get(key) is not None},
               **model_data_options(meta)}
    # The model's column order is prepare's (the target last), so the last column keeps it there.
    if meta.entity_col is not None:
        options["time_col"] = "__time__"
    series = prepare(frame, seq_len=forecaster.lookback, pred_len=forecaster.horizon, features=meta.features,
                     target=str(meta.columns[-1]), time_features_freq=meta.time_features_freq or meta.freq,
                     freq=meta.freq, test_size=0, **options)
    series, result, facts, calibration = _fit_model(forecaster, series, calibrated=calibrated,
                                                    refit=bool(forecaster.fit_result_.get("refit", False)))
    window_meta = SeriesMeta.from_panel(series, data_config=meta.data_config, input_kind=meta.input_kind,
                                        input_options=meta.input_options)
    window_meta.nonnegative = meta.nonnegative  # its forecasts are clipped as the fitted model's
    predictor = Predictor(result.module.model.cpu().eval(), window_meta, forecaster.quantiles, calibration=calibration)
    return predictor, facts


def _window_table(meta, rows) -> pd.DataFrame:
    """The ``rows`` a cross-validation window trains on, as a frame ``prepare`` reads: one series
    indexed by time, or (a model with an entity column) one table with the entity column and
    static covariates."""
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


def _check_scorable(forecaster: Forecaster, series, split: str, *, fitted: bool) -> None:
    """ConfigError when ``split`` of ``series`` has no window (``test_size=0``), saying how to score."""
    if split != "test" or series.window_count(split) > 0:
        return
    if fitted:
        trained_on_val = " (which it also trained on, since fit had refit=True)" if forecaster.fit_result_.get("refit") else ""
        raise ConfigError(
            "evaluate(): this model was fitted without a test split (test_size=0), so there is nothing held out "
            "to score: pass held-out data, evaluate(data, ...), or score the validation tail with "
            f"evaluate(split='val'){trained_on_val}"
        )
    raise ConfigError("evaluate(): this data has no test split (test_size=0): pass test_size > 0 or split='val'")


def _train(forecaster: Forecaster, series, *, max_epochs: int | None = None, validate: bool = True):
    """``fit_series`` with the forecaster's settings; checkpoints and logs go to a new ``fit_*``
    folder of ``default_root_dir`` (``run_dir_``) when one is given, else to a scratch folder.
    ``max_epochs`` / ``validate=False``: a fixed number of epochs without validation (a refit)."""
    import contextlib
    import sys

    from damcha_ts.training.runner import fit_series
    from damcha_ts.training.trainer import quiet_lightning

    training = forecaster.training if max_epochs is None else dataclasses.replace(forecaster.training, max_epochs=max_epochs)
    trainer_kwargs = dict(forecaster.trainer_kwargs)
    # As damcha-ts fit: a bar on stderr when it is a terminal, else a line per epoch there (verbose: a bar
    # always, with the model summary and Lightning's messages).
    progress = bool(trainer_kwargs.pop("enable_progress_bar", forecaster.verbose or sys.stderr.isatty()))
    trainer_kwargs.setdefault("enable_model_summary", forecaster.verbose)
    root = trainer_kwargs.pop("default_root_dir", None)
    with tempfile.TemporaryDirectory(prefix="damcha_ts_fit_") as scratch:
        if root is not None:
            # A folder of its own: a fresh fit clears checkpoints/ and logs/ in its folder, and
            # those must never be the user's.
            Path(root).mkdir(parents=True, exist_ok=True)
            forecaster.run_dir_ = Path(tempfile.mkdtemp(prefix="fit_", dir=root))
        out_dir = forecaster.run_dir_ if root is not None else Path(scratch)
        with contextlib.nullcontext() if forecaster.verbose else quiet_lightning():
            return fit_series(series, forecaster.model_config, training, out_dir,
                              trainer_kwargs=trainer_kwargs, progress=progress, validate=validate)


def _data_settings(data: Any, options: Mapping[str, Any]) -> dict:
    """The data settings saved with a fitted model (``data_config``): its setting options and,
    for a file, its absolute path, so that evaluate() and a loaded model find it from any folder."""
    settings = {k: plain_values(v) for k, v in options.items() if k in _SETTING_OPTIONS}
    if isinstance(data, (str, Path)):
        file = Path(data).expanduser()
        settings["dataset"] = str(file.resolve()) if file.is_file() else str(data)
    return settings


def _evaluation_series(forecaster: Forecaster, data: Any, borders: Any, data_options: Mapping[str, Any]):
    """The series to score: the fitted one, or ``data`` (default: the fitted file or benchmark)
    prepared as in fit and read as the fit input was."""
    from damcha_ts.data import prepare

    if data is None and forecaster._series is not None and borders is None and not data_options:
        return forecaster._series
    if data is None:
        data = forecaster.data_config.get("dataset")
        if data is None:
            raise ConfigError(
                "evaluate() needs data: this model was fitted on in-memory data, which is not saved with it; "
                "pass it: evaluate(frame), evaluate(array) or evaluate('file.csv')",
                cli="this model was fitted on in-memory data, which is not saved with it: "
                    "give the data, damcha-ts evaluate --model DIR --dataset FILE",
            )
    options = {**saved_read_options(forecaster.meta_, data), **model_data_options(forecaster.meta_),
               **prepare_options(forecaster._configured_data, forecaster.freq, data, data_options)}
    if borders is not None:
        options["split"] = borders
    return prepare(data, seq_len=forecaster.lookback, pred_len=forecaster.horizon, **options)


def _rolling_rows(forecaster: Forecaster, predictor, data: Any, data_options: Mapping[str, Any]):
    """(``{entity: (values [T, K], timestamps [T])}``, the input's layout options) that backtest and
    cross-validation roll over: each entity's rows of a many-entity model (laid out as its fit
    input), or the one series' (key None) of ``data``, or of the training series without data."""
    if predictor.entities:
        from damcha_ts.forecasting.entities import entity_rows

        return entity_rows(predictor, forecaster._series, data, data_options), None
    values, stamps, input_options = _backtest_rows(forecaster, data, data_options)
    return {None: (values, stamps)}, input_options


def _backtest_rows(forecaster: Forecaster, data: Any, data_options: Mapping[str, Any]):
    """(raw values [T, K] of ``meta.history_columns``: model columns, then covariates; timestamps [T];
    the input's layout options) of ``data``, or of the training series without data."""
    if data is None:
        if forecaster._series is None:
            raise ConfigError("backtest() needs data: this model was loaded without its training series")
        series = forecaster._series.series[0]  # a model of one series
        return series.history_rows(), series.timestamps, forecaster.meta_.input_options
    _, input_options, frame = load_history(forecaster.meta_, data, data_options)
    return frame[forecaster.meta_.history_columns].to_numpy(dtype=np.float64), frame.index, input_options
