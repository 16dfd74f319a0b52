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

from damcha_ts.data.layout import INPUT_OPTIONS, READ_OPTIONS, describe_input, input_columns
from damcha_ts.errors import ConfigError, DataError
from damcha_ts.training.config import plain_values

# prepare options that define the data setting of a model, saved with it (JSON-ready).
_SETTING_OPTIONS = ("features", "target", "time_features_freq", "split", "fill", "allow_irregular", "path")


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
    """

    def __init__(
        self,
        model: str = "itransformer_damcha",
        horizon: int = 96,
        lookback: int = 96,
        freq: str | None = None,
        random_state: int = 2023,
        max_epochs: int = 10,
        batch_size: int = 32,
        learning_rate: float = 1e-4,
        trainer_kwargs: Mapping[str, Any] | None = None,
        quantiles: Sequence[float] | None = None,
        **model_hyperparameters: Any,
    ):
        from damcha_ts.probabilistic import validate_quantiles
        from damcha_ts.training.config import TrainingConfig

        for name, value in (("horizon", horizon), ("lookback", lookback)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(random_state, bool) or not isinstance(random_state, (int, np.integer)) or random_state < 0:
            raise ConfigError(f"random_state must be a non-negative integer (the seed of every run), got {random_state!r}")
        training_fields = {f.name for f in dataclasses.fields(TrainingConfig)}
        training_options = {k: v for k, v in model_hyperparameters.items() if k in training_fields}
        model_options = {k: v for k, v in model_hyperparameters.items() if k not in training_fields}
        self.horizon = int(horizon)
        self.lookback = int(lookback)
        self.freq = freq
        self.random_state = random_state
        self.trainer_kwargs = dict(trainer_kwargs or {})
        # Validated levels (sorted, 0.5 added): the quantile columns of every output follow them.
        self.quantiles = None if quantiles is None else validate_quantiles(quantiles, argument="quantiles")
        self.training = TrainingConfig.from_dict(
            {
                "max_epochs": max_epochs,
                "batch_size": batch_size,
                "learning_rate": learning_rate,
                "seed": random_state,
                "quantiles": None if self.quantiles is None else list(self.quantiles),
                **training_options,
            }
        )
        self.model_config = _model_config(model, self.lookback, self.horizon, model_options)
        # Data settings of a run config (features, target, time marks, split); empty by default.
        # ``data_config`` is what the last fit used (saved with the model); refits start from
        # ``_configured_data``.
        self.data_config: dict[str, Any] = {}
        self._configured_data: dict[str, Any] = {}
        self.model_: Any = None
        self.meta_: Any = None
        self.fit_result_: dict = {}
        self._series = None
        self._history: tuple[np.ndarray, pd.DatetimeIndex] | None = None
        self.run_dir_: Path | None = None  # where fit kept checkpoints and logs (with default_root_dir)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(
        cls,
        config: str | Path | Mapping,
        *,
        horizon: int | None = None,
        overrides: Sequence[str] = (),
        trainer_kwargs: Mapping[str, Any] | None = None,
    ) -> Forecaster:
        """A Forecaster with the settings of a run config (e.g. ``"itransformer_damcha/etth1"``).

        ``fit()`` without data then trains on the config's dataset.
        """
        from damcha_ts.training.config import load_run_config

        resolved = load_run_config(config, horizon=horizon, overrides=overrides)
        data, model, training = resolved["data"], dict(resolved["model"]), dict(resolved["training"])
        name = model.pop("name")
        lookback, horizon = model.pop("seq_len"), model.pop("pred_len")
        forecaster = cls(
            name,
            horizon=horizon,
            lookback=lookback,
            random_state=training.pop("seed"),
            max_epochs=training.pop("max_epochs"),
            batch_size=training.pop("batch_size"),
            learning_rate=training.pop("learning_rate"),
            trainer_kwargs=trainer_kwargs,
            **model,
            **training,
        )
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
        from damcha_ts.training.runner import fit_series

        if data is None:
            if not self._configured_data.get("dataset"):
                raise ConfigError("fit() needs data: a benchmark name, a CSV path, a DataFrame or a NumPy array")
            data = self._configured_data["dataset"]
        options = self._prepare_options(data, data_options)
        kind, input_options = describe_input(data, options)
        series = prepare(data, seq_len=self.lookback, pred_len=self.horizon, **options)

        trainer_kwargs = dict(self.trainer_kwargs)
        progress = bool(trainer_kwargs.pop("enable_progress_bar", True))
        root = trainer_kwargs.pop("default_root_dir", None)
        with tempfile.TemporaryDirectory(prefix="damcha_ts_fit_") as scratch:
            if root is not None:
                # A folder of its own: a fresh fit clears checkpoints/ and logs/ in its folder, and
                # those must never be the user's.
                Path(root).mkdir(parents=True, exist_ok=True)
                self.run_dir_ = Path(tempfile.mkdtemp(prefix="fit_", dir=root))
            result = fit_series(
                series,
                self.model_config,
                self.training,
                self.run_dir_ if root is not None else Path(scratch),
                trainer_kwargs=trainer_kwargs,
                progress=progress,
            )
        self.model_ = result.module.model.cpu().eval()
        input_options["input_columns"] = input_columns(data, options, series)
        self.data_config = {k: plain_values(v) for k, v in options.items() if k in _SETTING_OPTIONS}
        if isinstance(data, (str, Path)):
            # An absolute path, so that evaluate() and a loaded model find the file from any folder.
            file = Path(data).expanduser()
            self.data_config["dataset"] = str(file.resolve()) if file.is_file() else str(data)
        self.meta_ = SeriesMeta.from_series(
            series, data_config=self.data_config, input_kind=kind, input_options=plain_values(input_options)
        )
        self._series = series
        self._history = (series.latest_values, series.latest_timestamps)  # the source's last rows
        self.fit_result_ = {
            "best_val_loss": result.best_val_loss,
            "epochs_run": result.epochs_run,
            "best_epoch": result.best_epoch,
            **result.timing,
        }
        return self

    def _prepare_options(self, data: Any, data_options: Mapping[str, Any]) -> dict:
        from damcha_ts.data.registry import is_benchmark_name

        # From the configured settings (from_config / load), not from what an earlier fit() was told:
        # a refit on other data must not inherit its fill, borders or target.
        options = {k: v for k, v in self._configured_data.items() if k not in ("dataset", "seq_len", "pred_len")}
        if str(data) != str(self._configured_data.get("dataset")):
            options.pop("path", None)  # where the fitted benchmark's file lies, not this data's
        if self.freq is not None and not (isinstance(data, str) and is_benchmark_name(data)):
            options.setdefault("freq", self.freq)
        if not (isinstance(data, str) and is_benchmark_name(data)):
            # User data: time marks from its own frequency (the benchmark convention is "h").
            options.setdefault("time_features_freq", None)
        _check_data_options("fit/evaluate", data_options, with_protocol=True)
        options.update(data_options)
        return options

    def _saved_read_options(self, data: Any) -> dict:
        """How the fit input's file or frame was laid out (time_col, date_format, ...), for reading
        ``data`` the same way; nothing for arrays and benchmark names."""
        from damcha_ts.data.registry import is_benchmark_name

        if isinstance(data, np.ndarray) or (isinstance(data, str) and is_benchmark_name(data) and not Path(data).is_file()):
            return {}
        return _stamps_from_index(data, {k: v for k, v in self.meta_.input_options.items() if k in READ_OPTIONS})

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
        self._check_fitted("predict")
        if data is None:
            if data_options:
                raise ConfigError(
                    f"predict(): {sorted(data_options)} only apply to new data (predict(data, ...)); the horizon is "
                    f"fixed at fit time ({self.horizon} steps)"
                )
            values, stamps = self._stored_history()
            kind, input_options = self.meta_.input_kind, self.meta_.input_options
        else:
            kind, input_options, values, stamps = self._history_from(data, data_options)
        point, levels = self._forecast(values[None], [stamps])
        future = self.future_timestamps(stamps[-1])
        return self._format(point[0], future, kind, input_options, None if levels is None else levels[0])

    def future_timestamps(self, last: pd.Timestamp) -> pd.DatetimeIndex:
        """The ``horizon`` timestamps after ``last`` at the fitted frequency."""
        self._check_fitted("future_timestamps")
        return pd.date_range(start=last, periods=self.horizon + 1, freq=self.meta_.freq, name="date")[1:]

    def _stored_history(self) -> tuple[np.ndarray, pd.DatetimeIndex]:
        if self._history is None:
            raise ConfigError("this model was saved without history; pass the history to predict(data)")
        return self._history

    def _history_from(self, data: Any, data_options: Mapping[str, Any]):
        """(kind, input options, raw values [L, C] in model column order, timestamps [L])."""
        kind, input_options, frame = self._load_history(data, data_options)
        if len(frame) < self.lookback:
            raise DataError(
                f"the history has {len(frame)} rows; the model needs lookback={self.lookback} rows to forecast"
            )
        values = frame[self.meta_.columns].to_numpy(dtype=np.float64)[-self.lookback :]
        return kind, input_options, values, frame.index[-self.lookback :]

    def _load_history(self, data: Any, data_options: Mapping[str, Any]) -> tuple[str, dict, pd.DataFrame]:
        """Read new data as the fit input was read, and check it has the fitted columns."""
        from damcha_ts.data import load_frame

        meta = self.meta_
        fitted = list(meta.input_options.get("input_columns") or meta.columns)
        options = _stamps_from_index(data, {k: v for k, v in meta.input_options.items() if k in INPUT_OPTIONS})
        _check_data_options("predict/backtest", data_options, with_protocol=False)
        options.update(data_options)
        if isinstance(data, np.ndarray):
            width = 1 if data.ndim == 1 else data.shape[1]
            if width != len(fitted):
                raise DataError(f"the history has {width} columns; the model was fitted on {len(fitted)}")
            options["columns"] = fitted  # positions carry the fitted names
            options.setdefault("freq", meta.freq)
        kind, input_options = describe_input(data, options)
        frame = load_frame(data, **options)
        _check_same_freq(frame, meta.freq)
        given = [str(c) for c in frame.columns]
        given_set, fitted_set = set(given), set(fitted)  # sets: linear in the columns
        missing = [c for c in fitted if c not in given_set]
        extra = [c for c in given if c not in fitted_set]
        if missing or extra:
            raise DataError(
                f"the history's columns differ from those at fit time: missing {missing}, unexpected {extra} "
                f"(fitted on {fitted})"
            )
        return kind, input_options, frame

    def _forecast(
        self, histories: np.ndarray, timestamps: Sequence[pd.DatetimeIndex]
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Raw-scale histories [B, L, C] (model column order) -> raw-scale forecasts.

        Returns (point [B, H, C_out], quantiles [B, Q, H, C_out] or None for a point model).
        """
        import torch

        from damcha_ts.data import time_features
        from damcha_ts.probabilistic import median_index

        meta = self.meta_
        mean, scale = np.asarray(meta.scaler_mean), np.asarray(meta.scaler_scale)
        scaled = (histories - mean) / scale
        marks = np.stack([time_features(stamps, meta.time_features_freq or meta.freq)[0] for stamps in timestamps])
        device = self.device
        with torch.no_grad():
            out = self.model_(
                torch.as_tensor(scaled, dtype=torch.float32, device=device),
                torch.as_tensor(marks, dtype=torch.float32, device=device),
            ).double().cpu().numpy()  # [B, H, N], or [B, Q, H, N] for a quantile model
        # Variates are the last axis either way; scale > 0 keeps the quantiles in order.
        if meta.features == "MS":
            out = out[..., -1:] * scale[-1] + mean[-1]
        else:
            out = out * scale + mean
        _check_finite_forecast(out, scaled, self.model_, self._output_columns())
        if self.quantiles is None:
            return out, None
        return out[:, median_index(self.quantiles)], out

    def _output_columns(self) -> list[str]:
        return list(self.meta_.columns[-1:]) if self.meta_.features == "MS" else list(self.meta_.columns)

    def _format(
        self,
        forecast: np.ndarray,
        future: pd.DatetimeIndex,
        kind: str,
        input_options: Mapping,
        levels: np.ndarray | None = None,
    ):
        """[H, C_out] raw forecast (model column order) -> the output kind, columns in input order.

        ``levels``: the quantile forecasts [Q, H, C_out] of a quantile model (see :meth:`predict`).
        """
        from damcha_ts.probabilistic import quantile_column_name, quantile_columns

        columns = self._output_columns()
        fitted_order = list(self.meta_.input_options.get("input_columns") or columns)
        position = {c: i for i, c in enumerate(columns)}  # a dict: linear in the columns
        order = [position[c] for c in fitted_order if c in position]
        forecast, columns = forecast[:, order], [columns[i] for i in order]
        if levels is not None:
            levels = levels[..., order]
        if kind == "numpy":
            return forecast if levels is None else {"point": forecast, "quantiles": levels}
        wide = pd.DataFrame(forecast, index=future, columns=columns)
        if kind == "long":
            long = _wide_to_long(wide, input_options)
            if levels is not None:
                value_col = input_options.get("value_col", "value")
                for level, values in zip(self.quantiles, levels):
                    # Same melt as the point frame, so the rows line up.
                    melted = _wide_to_long(pd.DataFrame(values, index=future, columns=columns), input_options)
                    long[quantile_column_name(value_col, level)] = melted[value_col].to_numpy()
            return long
        if levels is not None:
            extra = pd.DataFrame(quantile_columns(columns, self.quantiles, levels), index=future)
            wide = pd.concat([wide, extra], axis=1)
        wide.index.name = input_options.get("time_col") or "date"
        return wide

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, data: Any = None, *, split: str = "test", borders: Any = None, **data_options: Any) -> dict:
        """MSE/MAE over every window of a split, on the z-scale and the original scale.

        ``data`` None: the fitted data (a benchmark keeps its protocol split). Otherwise a benchmark
        name, CSV path, frame or array is prepared as in ``fit`` (its scaler is fitted on its own
        train rows, as the protocol does); ``borders`` are its split (fractions or row borders).
        ``split`` picks ``"train"``, ``"val"`` or ``"test"``.
        """
        from damcha_ts.data import prepare
        from damcha_ts.training.evaluation import (
            evaluate_loader,
            scored_scaler,
            split_loader,
            summary,
        )

        self._check_fitted("evaluate")
        if data is None and self._series is not None and borders is None and not data_options:
            series = self._series
        else:
            if data is None:
                data = self.data_config.get("dataset")
                if data is None:
                    raise ConfigError("evaluate() needs data: this model was fitted on in-memory data "
                                      "(pass the data; command line: damcha-ts evaluate --dataset FILE)")
            options = {**self._saved_read_options(data), **self._prepare_options(data, data_options)}
            if borders is not None:
                options["split"] = borders
            series = prepare(data, seq_len=self.lookback, pred_len=self.horizon, **options)
        loader = split_loader(series, split, batch_size=self.training.batch_size)
        errors = evaluate_loader(
            self.model_, loader, scaler=scored_scaler(series), device=self.device, target_only=series.features == "MS"
        )
        scores = summary(errors)
        if not all(np.isfinite(scores[k]) for k in ("mse", "mae")):
            raise DataError(
                f"the {split} MSE/MAE on {series.name} are not finite (MSE {scores['mse']}, MAE {scores['mae']}): "
                + _non_finite_cause(self.model_)
            )
        return {"dataset": series.name, "split": split, **scores}

    def backtest(self, data: Any = None, n_windows: int = 5, step: int | None = None, **data_options: Any) -> pd.DataFrame:
        """Rolling-origin forecasts without refitting, as a long frame with a ``cutoff`` column.

        The last window's forecast ends at the last row of ``data`` (without ``data``: of the training
        series, which for ETT benchmarks is the protocol's last used row); earlier cutoffs are ``step``
        (default: ``horizon``) rows apart. Columns: id, time, ``cutoff``, the true value and
        ``forecast`` (names follow the input's long layout; defaults ``id``, ``date``, ``value``).
        With ``quantiles``, ``forecast`` is the median and ``forecast_q0.1``, ... hold the levels.
        """
        from damcha_ts.probabilistic import quantile_column_name

        self._check_fitted("backtest")
        step = self.horizon if step is None else int(step)
        if n_windows < 1 or step < 1:
            raise ConfigError(f"n_windows and step must be >= 1, got {n_windows} and {step}")
        if data is None:
            if self._series is None:
                raise ConfigError("backtest() needs data: this model was loaded without its training series")
            values, stamps = self._series.values, self._series.timestamps
            input_options = self.meta_.input_options
        else:
            _, input_options, frame = self._load_history(data, data_options)
            values, stamps = frame[self.meta_.columns].to_numpy(dtype=np.float64), frame.index
        last_cutoff = len(values) - self.horizon - 1
        cutoffs = [last_cutoff - k * step for k in reversed(range(n_windows))]
        if cutoffs[0] - self.lookback + 1 < 0:
            raise DataError(
                f"{n_windows} windows {step} rows apart need {self.lookback + self.horizon + (n_windows - 1) * step} "
                f"rows (lookback + horizon + (n_windows - 1) * step); the data has {len(values)}"
            )
        histories = np.stack([values[c - self.lookback + 1 : c + 1] for c in cutoffs])
        forecasts, levels = self._forecast(histories, [stamps[c - self.lookback + 1 : c + 1] for c in cutoffs])
        columns = self._output_columns()
        position = {c: i for i, c in enumerate(self.meta_.columns)}  # a dict: linear in the columns
        truth_columns = [position[c] for c in columns]
        id_col = input_options.get("id_col", "id")
        time_col = input_options.get("time_col") or "date"
        value_col = input_options.get("value_col", "value")
        pieces = []
        for k, cutoff in enumerate(cutoffs):
            future = stamps[cutoff + 1 : cutoff + 1 + self.horizon]
            truth = values[cutoff + 1 : cutoff + 1 + self.horizon][:, truth_columns]
            for j, column in enumerate(columns):
                piece = {
                    id_col: column,
                    time_col: future,
                    "cutoff": stamps[cutoff],
                    value_col: truth[:, j],
                    "forecast": forecasts[k, :, j],
                }
                if levels is not None:
                    for q, level in enumerate(self.quantiles):
                        piece[quantile_column_name("forecast", level)] = levels[k, q, :, j]
                pieces.append(pd.DataFrame(piece))
        return pd.concat(pieces, ignore_index=True)

    # ------------------------------------------------------------------ plotting
    def plot(
        self,
        data: Any = None,
        *,
        truth: Any = None,
        variates: Sequence[str] | None = None,
        history_steps: int | None = None,
        path: str | Path | None = None,
        ax=None,
        **data_options: Any,
    ):
        """Plot history, forecast and (when given) the truth of one or more variates.

        ``truth``: a wide DataFrame indexed by the forecast timestamps, or an array ``[H, N]``.
        Saves to ``path`` when given. Needs matplotlib (``pip install damcha-ts[plot]``).
        """
        from damcha_ts.plotting import plot_forecast

        self._check_fitted("plot")
        if data is None:
            values, stamps = self._stored_history()
        else:
            _, _, values, stamps = self._history_from(data, data_options)
        columns = list(self.meta_.columns)
        history = pd.DataFrame(values, index=stamps, columns=columns)
        future = self.future_timestamps(stamps[-1])
        point, _ = self._forecast(values[None], [stamps])
        forecast = pd.DataFrame(point[0], index=future, columns=self._output_columns())
        if truth is not None and not isinstance(truth, pd.DataFrame):
            truth = pd.DataFrame(np.asarray(truth, dtype=np.float64), index=future, columns=self._output_columns())
        if history_steps is not None:
            history = history.iloc[-history_steps:]
        return plot_forecast(history, forecast, truth, variates=variates, path=path, ax=ax, title=self.model_config["name"])

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        """Write config, weights, scaler, column/frequency metadata and the history tail."""
        from damcha_ts.training.artifacts import save_model_dir

        self._check_fitted("save")
        values, stamps = self._history if self._history is not None else (None, None)
        # A quantile model is saved as its point model (pred_len H·Q), which load_model_dir can
        # rebuild; the levels are in the training config, and load() wraps it again.
        return save_model_dir(
            directory,
            getattr(self.model_, "point_model", self.model_),
            self.meta_,
            training=dataclasses.asdict(self.training),
            history_values=values,
            history_timestamps=stamps,
            metrics=self.fit_result_,
        )

    @classmethod
    def load(cls, directory: str | Path, map_location: str = "cpu") -> Forecaster:
        """A fitted Forecaster from :meth:`save` or from ``run_experiment``'s ``model/`` directory.

        ``map_location`` is the device the loaded model forecasts on (``"cpu"``, ``"cuda"``, ...).
        Weights load with ``weights_only=True``; a modified weights file or one that does not fit
        the saved config is refused (ChecksumError / ConfigError).
        """
        from damcha_ts.probabilistic import QuantileForecastModel, validate_quantiles
        from damcha_ts.training.artifacts import load_model_dir, model_directory

        directory = model_directory(directory)  # a run directory's model/ folder
        loaded = load_model_dir(directory, map_location=map_location)
        model = loaded.model
        model_config = dict(model.config.__dict__)
        training = dict(loaded.training)
        horizon = model_config.pop("pred_len")
        if training.get("quantiles") is not None:
            # Saved as its point model, whose pred_len is H·Q: wrap it again; the horizon is H.
            model = QuantileForecastModel(model, validate_quantiles(training["quantiles"], argument="training.quantiles"))
            horizon = model.horizon
            if horizon != loaded.meta.pred_len:
                raise ConfigError(
                    f"{directory}: the quantile model forecasts {horizon} steps but its data says {loaded.meta.pred_len}"
                )
            model.eval()
        forecaster = cls(
            model.name,
            horizon=horizon,
            lookback=model_config.pop("seq_len"),
            freq=loaded.meta.freq,
            random_state=training.pop("seed", 2023),
            max_epochs=training.pop("max_epochs", 10),
            batch_size=training.pop("batch_size", 32),
            learning_rate=training.pop("learning_rate", 1e-4),
            **model_config,
            **training,
        )
        forecaster.model_ = model.to(map_location)
        forecaster.meta_ = loaded.meta
        forecaster.data_config = dict(loaded.meta.data_config or {})
        forecaster._configured_data = dict(forecaster.data_config)  # a refit keeps the saved setting
        forecaster.fit_result_ = loaded.metrics
        if loaded.history_values is not None:
            forecaster._history = (loaded.history_values, loaded.history_timestamps)
        return forecaster

    @property
    def device(self):
        """The device the fitted model's weights are on (inputs go there, forecasts come back to NumPy)."""
        self._check_fitted("device")
        return next(self.model_.parameters()).device

    @property
    def is_fitted(self) -> bool:
        """Whether there is a model to forecast with (after ``fit`` or ``Forecaster.load``)."""
        return self.model_ is not None

    def _check_fitted(self, action: str) -> None:
        if not self.is_fitted:
            raise ConfigError(f"{action}() called before fit(): call fit(data) or Forecaster.load(directory) first")

    def __repr__(self) -> str:
        state = "fitted" if self.model_ is not None else "not fitted"
        return f"Forecaster(model={self.model_config['name']!r}, horizon={self.horizon}, lookback={self.lookback}, {state})"


def _model_config(model: str, lookback: int, horizon: int, options: Mapping[str, Any]) -> dict:
    """The validated, complete model config (ConfigError for unknown names or keys)."""
    from damcha_ts.models import MODEL_NAMES, make_config, registry

    if not isinstance(model, str) or (model not in MODEL_NAMES and model not in registry.FAMILIES):
        raise ConfigError(f"unknown model {model!r}; choose one of {', '.join(MODEL_NAMES)}")
    config = make_config({"name": model, **options, "seq_len": lookback, "pred_len": horizon})
    family = model.partition("_")[0]
    name = f"{family}_{getattr(config, registry.FAMILIES[family].attention_field)}"
    return {"name": name, **dataclasses.asdict(config)}


def _check_data_options(method: str, given: Mapping[str, Any], *, with_protocol: bool) -> None:
    """Data options are keywords of ``load_frame`` (how to read the data), plus, where a split is
    prepared, of ``prepare`` (features, target, split...); anything else is a typo or a model
    setting (lookback and horizon belong to the constructor)."""
    import inspect

    from damcha_ts.data import load_frame, prepare

    def keywords(function) -> set[str]:
        return {p.name for p in inspect.signature(function).parameters.values() if p.kind is p.KEYWORD_ONLY}

    allowed = keywords(load_frame) | (keywords(prepare) - {"seq_len", "pred_len"} if with_protocol else set())
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise ConfigError(
            f"{method}(): unknown data option(s) {unknown}; valid: {sorted(allowed)} "
            "(lookback, horizon and model settings go to Forecaster(...))"
        )


def _stamps_from_index(data: Any, saved: dict) -> dict:
    """Saved read options for ``data``: a model fitted on a frame with a time column also reads a
    frame whose timestamps are its DatetimeIndex (the time column is then not there)."""
    if (isinstance(data, pd.DataFrame) and isinstance(data.index, pd.DatetimeIndex)
            and saved.get("time_col") is not None and saved["time_col"] not in map(str, data.columns)):
        return {k: v for k, v in saved.items() if k != "time_col"}
    return saved


def _check_same_freq(frame: pd.DataFrame, fitted_freq: str) -> None:
    """New history must step as the fitted data did: the forecast's timestamps and time features
    follow the fitted frequency."""
    from pandas.tseries.frequencies import to_offset

    from damcha_ts.data import frame_info

    given = frame_info(frame).get("freq")
    if given is not None and to_offset(given) != to_offset(fitted_freq):
        raise DataError(f"the history's timestamps step by {given!r}; the model was fitted on data at {fitted_freq!r}")


def _check_finite_forecast(forecast: np.ndarray, scaled_history: np.ndarray, model, columns: Sequence[str]) -> None:
    """The last line of defence: a NaN/inf forecast ([..., H, N]) is an error, never a result."""
    bad = ~np.isfinite(forecast)
    if not bad.any():
        return
    steps = np.flatnonzero(bad.any(axis=tuple(a for a in range(bad.ndim) if a != bad.ndim - 2))) + 1
    variates = [columns[j] for j in np.flatnonzero(bad.any(axis=tuple(range(bad.ndim - 1))))]
    raise DataError(
        f"the forecast holds NaN/inf for variates {_briefly(variates)} at steps {_briefly(steps)} "
        f"(of {forecast.shape[-2]}): {_non_finite_cause(model, scaled_history)}"
    )


def _briefly(items, limit: int = 10) -> str:
    items = [str(i) for i in items]
    return ", ".join(items[:limit]) + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def _non_finite_cause(model, scaled_history: np.ndarray | None = None) -> str:
    """The likely reason a model's output is not finite, for the error message."""
    import torch

    if scaled_history is not None and not np.isfinite(scaled_history).all():
        return ("the history, scaled by the saved scaler, holds NaN/inf (check the history's values and "
                "data.scaler_mean / data.scaler_scale in forecaster.json)")
    broken = [name for name, tensor in model.state_dict().items()
              if tensor.is_floating_point() and not torch.isfinite(tensor).all()]
    if broken:
        return (f"the model's weights hold NaN/inf ({_briefly(broken, 3)}): its training diverged; retrain it "
                "(e.g. with a lower learning rate)")
    return "the model overflowed on this input (values far outside the range it was trained on?)"


def _wide_to_long(wide: pd.DataFrame, input_options: Mapping[str, Any]) -> pd.DataFrame:
    id_col = input_options.get("id_col", "id")
    time_col = input_options.get("time_col") or "date"
    value_col = input_options.get("value_col", "value")
    long = wide.rename_axis(time_col).reset_index().melt(id_vars=time_col, var_name=id_col, value_name=value_col)
    return long[list(input_options.get("order") or (id_col, time_col, value_col))]
