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
the point forecast), trained on the pinball loss; see ``damcha_ts.probabilistic``.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from damcha_ts.data.layout import describe_input, input_columns
from damcha_ts.data.options import PROTOCOL_KEYS, ReadOptions
from damcha_ts.errors import ConfigError
from damcha_ts.forecasting.history import history_from, load_history, prepare_options, saved_read_options
from damcha_ts.training.config import TrainingConfig, plain_values, split_keywords

# The data options that define a model's setting, saved with it (JSON-ready): the protocol's but
# lookback and horizon (the constructor's), the value policies, and where a benchmark file lies.
_SETTING_OPTIONS = (*(k for k in PROTOCOL_KEYS if k not in ("seq_len", "pred_len")), *ReadOptions.ALWAYS, "path")
# The training defaults live in TrainingConfig alone; the constructor's come from there.
_DEFAULT = {f.name: f.default for f in dataclasses.fields(TrainingConfig)}


class Forecaster:
    """A forecasting model with scikit-learn-style ``fit`` / ``predict``.

    Args:
        model: one of ``itransformer_mha``, ``itransformer_damcha``, ``gateformer_mha``,
            ``gateformer_damcha`` (or a bare family name with explicit attention keys).
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
        **model_hyperparameters: model config keys (``d_model``, ``e_layers``, ``n_heads``,
            ``dropout``, DAMCHA options...) and other training keys (``patience``,
            ``lr_schedule``, ``weight_decay``, ``variate_fraction``...).

    Forecasting itself is a :class:`damcha_ts.forecasting.Predictor` (the model with its scaler
    and time marks) shared by ``predict``, ``backtest``, ``plot`` and ``evaluate``.
    """

    def __init__(self, model: str = "itransformer_damcha", horizon: int = 96, lookback: int = 96,
                 freq: str | None = None, random_state: int = _DEFAULT["seed"], max_epochs: int = _DEFAULT["max_epochs"],
                 batch_size: int = _DEFAULT["batch_size"], learning_rate: float = _DEFAULT["learning_rate"],
                 trainer_kwargs: Mapping[str, Any] | None = None, quantiles: Sequence[float] | None = None,
                 **model_hyperparameters: Any):
        self.model_config, self.training = _settings(
            model, horizon, lookback, random_state, max_epochs, batch_size, learning_rate, quantiles,
            **model_hyperparameters,
        )
        self.horizon, self.lookback = int(horizon), int(lookback)
        self.freq = freq
        self.random_state = random_state
        self.trainer_kwargs = dict(trainer_kwargs or {})
        # Validated levels (sorted, 0.5 added): the quantile columns of every output follow them.
        self.quantiles = None if self.training.quantiles is None else tuple(self.training.quantiles)
        # Data settings of a run config (features, target, time marks, split); empty by default.
        # ``data_config`` is what the last fit used (saved with the model); refits start from
        # ``_configured_data``.
        self.data_config: dict[str, Any] = {}
        self._configured_data: dict[str, Any] = {}
        self.model_: Any = None
        self.meta_: Any = None
        self.fit_result_: dict = {}
        self._series = None
        self._history = None  # (raw values [L, C], timestamps [L]) that predict() continues
        self.run_dir_: Path | None = None  # where fit kept checkpoints and logs (with default_root_dir)

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
        forecaster._configured_data = dict(forecaster.data_config)
        return forecaster

    # ------------------------------------------------------------------ fitting
    def fit(self, data: Any = None, **data_options: Any) -> Forecaster:
        """Train on ``data`` with early stopping on its validation split; returns ``self``.

        ``data``: a benchmark name (protocol split), a CSV path, a wide or long DataFrame or a NumPy
        array (70/10/20 split unless ``split=`` gives fractions or borders). ``data_options`` go to
        :func:`damcha_ts.data.prepare` (``id_col``, ``time_col``, ``value_col``, ``freq``, ``start``,
        ``fill``, ``features``, ``target``, ``split``...). Without ``data``, a Forecaster made by
        :meth:`from_config` uses the config's dataset.
        """
        from damcha_ts.data import prepare
        from damcha_ts.training.artifacts import SeriesMeta

        if data is None:
            if not self._configured_data.get("dataset"):
                raise ConfigError("fit() needs data: a benchmark name, a CSV path, a DataFrame or a NumPy array")
            data = self._configured_data["dataset"]
        options = prepare_options(self._configured_data, self.freq, data, data_options)
        kind, input_options = describe_input(data, options)
        series = prepare(data, seq_len=self.lookback, pred_len=self.horizon, **options)
        result = _train(self, series)
        self.model_ = result.module.model.cpu().eval()
        input_options["input_columns"] = input_columns(data, options, series)
        self.data_config = _data_settings(data, options)
        self.meta_ = SeriesMeta.from_series(
            series, data_config=self.data_config, input_kind=kind, input_options=plain_values(input_options)
        )
        self._series = series
        self._history = (series.latest_values, series.latest_timestamps)  # the source's last rows
        self.fit_result_ = {"best_val_loss": result.best_val_loss, "epochs_run": result.epochs_run,
                            "best_epoch": result.best_epoch, **result.timing}
        return self

    # ------------------------------------------------------------------ forecasting
    def predict(self, data: Any = None, **data_options: Any):
        """Forecast the ``horizon`` steps after the end of ``data`` (default: the fitted data).

        Returns the input's kind: a wide DataFrame indexed by the future timestamps, a long DataFrame
        (id, time, value columns named as in the input) or a NumPy array ``[H, N]``.

        With ``quantiles``, the point forecast is the predicted median and the levels come too: a wide
        frame gets one column per variate and level (``OT_q0.1``, ``OT_q0.5``, ...), a long frame one
        per level (``value_q0.1``, ...), and NumPy input gives ``{"point": [H, N], "quantiles":
        [Q, H, N]}`` (levels in the order of ``self.quantiles``). Quantiles never cross.
        """
        from damcha_ts.forecasting import predict

        return predict(self._predictor("predict"), data, **data_options)

    def future_timestamps(self, last: pd.Timestamp) -> pd.DatetimeIndex:
        """The ``horizon`` timestamps after ``last`` at the fitted frequency."""
        return self._predictor("future_timestamps").future_timestamps(last)

    def evaluate(self, data: Any = None, *, split: str = "test", borders: Any = None, **data_options: Any) -> dict:
        """MSE/MAE over every window of a split, on the z-scale and the original scale.

        ``data`` None: the fitted data (a benchmark keeps its protocol split). Otherwise a benchmark
        name, CSV path, frame or array is prepared as in ``fit`` (its scaler is fitted on its own
        train rows, as the protocol does); ``borders`` are its split (fractions or row borders).
        ``split`` picks ``"train"``, ``"val"`` or ``"test"``.
        """
        predictor = self._predictor("evaluate")
        return predictor.evaluate(_evaluation_series(self, data, borders, data_options), split, self.training.batch_size)

    def backtest(self, data: Any = None, n_windows: int = 5, step: int | None = None, **data_options: Any) -> pd.DataFrame:
        """Rolling-origin forecasts without refitting, as a long frame with a ``cutoff`` column.

        The last window's forecast ends at the last row of ``data`` (without ``data``: of the training
        series, which for ETT benchmarks is the protocol's last used row); earlier cutoffs are ``step``
        (default: ``horizon``) rows apart. Columns: id, time, ``cutoff``, the true value and
        ``forecast`` (names follow the input's long layout; defaults ``id``, ``date``, ``value``).
        With ``quantiles``, ``forecast`` is the median and ``forecast_q0.1``, ... hold the levels.
        """
        from damcha_ts.forecasting.backtest import backtest, window_step

        predictor = self._predictor("backtest")
        step = window_step(n_windows, step, self.horizon)
        values, stamps, input_options = _backtest_rows(self, data, data_options)
        return backtest(predictor, values, stamps, n_windows=n_windows, step=step, input_options=input_options)

    def plot(self, data: Any = None, *, truth: Any = None, variates: Sequence[str] | None = None,
             history_steps: int | None = None, path: str | Path | None = None, ax=None, **data_options: Any):
        """Plot history, forecast and (when given) the truth of one or more variates.

        ``truth``: a wide DataFrame indexed by the forecast timestamps, or an array ``[H, N]``.
        Saves to ``path`` when given. Needs matplotlib (``pip install damcha-ts[plot]``).
        """
        from damcha_ts.forecasting.predict import stored_history
        from damcha_ts.plotting import plot_prediction

        predictor = self._predictor("plot")
        values, stamps = stored_history(predictor) if data is None else history_from(self.meta_, data, data_options)[2:]
        return plot_prediction(predictor, values, stamps, truth=truth, variates=variates, history_steps=history_steps,
                               path=path, ax=ax, title=self.model_config["name"])

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        """Write config, weights, scaler, column/frequency metadata and the history tail."""
        from damcha_ts.training.artifacts import save_model_dir

        self._check_fitted("save")
        values, stamps = self._history if self._history is not None else (None, None)
        return save_model_dir(directory, self.model_, self.meta_, training=dataclasses.asdict(self.training),
                              history_values=values, history_timestamps=stamps, metrics=self.fit_result_)

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
        model_config = {k: v for k, v in model.config.__dict__.items() if k not in ("seq_len", "pred_len")}
        forecaster = cls(model.name, horizon=meta.pred_len, lookback=meta.seq_len, freq=meta.freq, **model_config,
                         **_keywords(loaded.training))
        forecaster.model_, forecaster.meta_, forecaster.fit_result_ = model, meta, loaded.metrics
        forecaster.data_config = dict(meta.data_config or {})
        forecaster._configured_data = dict(forecaster.data_config)  # a refit keeps the saved setting
        if loaded.history_values is not None:
            forecaster._history = (loaded.history_values, loaded.history_timestamps)
        return forecaster

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
        return Predictor(self.model_, self.meta_, self.quantiles, history=self._history)

    def __repr__(self) -> str:
        state = "fitted" if self.model_ is not None else "not fitted"
        return f"Forecaster(model={self.model_config['name']!r}, horizon={self.horizon}, lookback={self.lookback}, {state})"


# ---------------------------------------------------------------------- constructor settings
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
    from damcha_ts.probabilistic import validate_quantiles

    for name, value in (("horizon", horizon), ("lookback", lookback)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(random_state, bool) or not isinstance(random_state, (int, np.integer)) or random_state < 0:
        raise ConfigError(f"random_state must be a non-negative integer (the seed of every run), got {random_state!r}")
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


# ---------------------------------------------------------------------- fit and evaluate data
def _train(forecaster: Forecaster, series):
    """``fit_series`` with the forecaster's settings; checkpoints and logs go to a new ``fit_*``
    folder of ``default_root_dir`` (``run_dir_``) when one is given, else to a scratch folder."""
    from damcha_ts.training.runner import fit_series

    trainer_kwargs = dict(forecaster.trainer_kwargs)
    progress = bool(trainer_kwargs.pop("enable_progress_bar", True))
    root = trainer_kwargs.pop("default_root_dir", None)
    with tempfile.TemporaryDirectory(prefix="damcha_ts_fit_") as scratch:
        if root is not None:
            # A folder of its own: a fresh fit clears checkpoints/ and logs/ in its folder, and
            # those must never be the user's.
            Path(root).mkdir(parents=True, exist_ok=True)
            forecaster.run_dir_ = Path(tempfile.mkdtemp(prefix="fit_", dir=root))
        out_dir = forecaster.run_dir_ if root is not None else Path(scratch)
        return fit_series(series, forecaster.model_config, forecaster.training, out_dir,
                          trainer_kwargs=trainer_kwargs, progress=progress)


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
            raise ConfigError("evaluate() needs data: this model was fitted on in-memory data "
                              "(pass the data; command line: damcha-ts evaluate --dataset FILE)")
    options = {**saved_read_options(forecaster.meta_, data),
               **prepare_options(forecaster._configured_data, forecaster.freq, data, data_options)}
    if borders is not None:
        options["split"] = borders
    return prepare(data, seq_len=forecaster.lookback, pred_len=forecaster.horizon, **options)


def _backtest_rows(forecaster: Forecaster, data: Any, data_options: Mapping[str, Any]):
    """(raw values [T, C] in model column order, timestamps [T], the input's layout options) of
    ``data``, or of the training series without data."""
    if data is None:
        series = forecaster._series
        if series is None:
            raise ConfigError("backtest() needs data: this model was loaded without its training series")
        return series.values, series.timestamps, forecaster.meta_.input_options
    _, input_options, frame = load_history(forecaster.meta_, data, data_options)
    return frame[forecaster.meta_.columns].to_numpy(dtype=np.float64), frame.index, input_options
