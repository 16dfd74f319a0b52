"""What ``Forecaster("auto")`` searches (:class:`AutoSpace`, given as ``search=``), one point of it
(:class:`Candidate`), the first points tried (:func:`first_candidates`) and how an Optuna trial draws
a trained one (:func:`sample`). The search: tuning/auto.py."""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from damcha_ts.data.registry import DataWarning
from damcha_ts.errors import ConfigError, plain_repr
from damcha_ts.schema import DEFAULT_MODEL, read_yaml, reject_unknown_keys, yaml_number

FIXED_RULES = ("naive", "seasonal_naive", "window_mean", "drift")
TRAINED_MODELS = ("linear", "itransformer_mha", "itransformer_damcha_static", "gateformer_mha", DEFAULT_MODEL)


def is_trained(model: str) -> bool:
    """Whether ``model`` learns from data (every model but the fixed rules): the one place that asks."""
    from damcha_ts.models.registry import model_spec

    return model_spec(model).trained


@dataclass(frozen=True)
class AutoSpace:
    """What ``Forecaster("auto")`` searches: a mapping or YAML file (``search=``) of these keys.

    ``lookback_multiples`` multiply the base lookback ``max(2 * horizon, season)``; ``lookbacks``
    (row counts) replace them. ``d_model`` None leaves the width to the data (models/sizing.py).
    ``learning_rate`` and ``dropout`` are ``[low, high]`` ranges; the others lists of choices.
    """

    models: tuple[str, ...] = (*FIXED_RULES, *TRAINED_MODELS)
    lookbacks: tuple[int, ...] | None = None
    lookback_multiples: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    learning_rate: tuple[float, float] = (1e-4, 3e-3)
    max_steps: tuple[int, ...] = (250, 500, 1000, 2000)
    d_model: tuple[int | None, ...] = (None, 64, 128, 256)
    dropout: tuple[float, float] = (0.0, 0.3)
    max_trials: int | None = None  # at most this many trials per fit, all workers together, repeated draws too (None: the budget decides)

    @classmethod
    def of(cls, search: Any) -> AutoSpace:
        """The space of ``search=``: None (the default), a mapping, or a YAML file of one; ConfigError
        naming the key for a value of the wrong kind."""
        if search is None:
            return cls()
        if isinstance(search, (str, Path)):
            path = Path(search)
            if not path.is_file():
                raise ConfigError(f"search={str(search)!r}: " + ("a folder, not a search file" if path.is_dir()
                                                                 else "no such search file"))
            search = read_yaml(path)
            if not isinstance(search, Mapping):
                raise ConfigError(f"search file {path}: " + ("it is empty" if search is None else
                                  f"it holds {type(search).__name__}, not a mapping of AutoSpace keys"))
        if not isinstance(search, Mapping):
            raise ConfigError(f"search must be a mapping or a YAML file of one, got {plain_repr(search)}")
        reject_unknown_keys(search, [f.name for f in dataclasses.fields(cls)], "search")
        return cls(**{key: _checked(key, value) for key, value in search.items()})

    def lookback_choices(self, horizon: int, season: int, train_rows: int) -> list[int]:
        """The lookbacks to try, those that leave at least two training windows' worth of rows: the
        given ones, or the multiples of the base lookback (and the base one, or the most there is room for)."""
        base = max(2 * horizon, season)
        room = max(1, (train_rows - horizon) // 2)
        if self.lookbacks:
            fitting = sorted(lookback for lookback in set(self.lookbacks) if lookback <= room)
            if not fitting:
                raise ConfigError(f"search.lookbacks {sorted(self.lookbacks)}: none leaves two training windows in the "
                                  f"{train_rows} rows candidates train on (at most {room} does)")
            dropped = sorted(set(self.lookbacks) - set(fitting))
            if dropped:  # said, not dropped silently
                warnings.warn(f"search.lookbacks {dropped}: longer than the {train_rows} rows candidates train on allow "
                              f"(at most {room} leaves two training windows); searching {fitting}", DataWarning,
                              stacklevel=4)
            return fitting
        choices = {max(1, round(multiple * base)) for multiple in self.lookback_multiples}
        return sorted({choice for choice in choices if choice <= room} | {min(base, room)})


def _checked(key: str, value: Any) -> Any:
    """A search key's value, typed (YAML's ``1e-4`` text is a number) and checked."""
    from damcha_ts.models.registry import known_model_name

    if key == "max_trials":
        if value is not None and not _positive_int(value):
            raise ConfigError(f"search.max_trials must be a positive integer or null, got {plain_repr(value)}")
        return value
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(f"search.{key} must be a non-empty list, got {plain_repr(value)}")
    values = tuple(yaml_number(v) for v in value)
    if key == "models":
        unknown = [name for name in values if name == "auto" or not known_model_name(name)]
        if unknown:
            raise ConfigError(f"search.models: {unknown} are not models (give names as Forecaster takes)")
    elif key in ("learning_rate", "dropout"):
        rate = key == "learning_rate"
        if not (len(values) == 2 and _real(*values) and values[0] <= values[1]
                and (0 < values[0] if rate else 0 <= values[0] and values[1] < 1)):
            raise ConfigError(f"search.{key} must be [low, high] with "
                              f"{'0 < low <= high' if rate else '0 <= low <= high < 1'}, got {list(value)}")
    elif key == "lookback_multiples":
        if not all(_real(v) and v > 0 for v in values):
            raise ConfigError(f"search.lookback_multiples must hold positive numbers, got {list(value)}")
    elif not all((v is None and key == "d_model") or _positive_int(v) for v in values):
        raise ConfigError(f"search.{key} must hold positive integers{' or null' if key == 'd_model' else ''}, "
                          f"got {list(value)}")
    return values


def _real(*values) -> bool:
    return all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def _positive_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True)
class Candidate:
    """One point of the space: a model, its lookback and the trained models' settings."""

    model: str
    lookback: int
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # learning_rate, max_steps, d_model, dropout

    @property
    def trained(self) -> bool:
        return is_trained(self.model)

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


def first_candidates(space: AutoSpace, lookback: int, trained: Sequence[str]) -> list[dict]:
    """The trained trials every new study starts with, as Optuna parameters: the linear model and the
    recommended default (those among the ``trained`` models searched) under the user-data recipe (``USER_DATA_DEFAULTS``, the model's own dropout),
    or the nearest values the space holds."""
    from damcha_ts.models.registry import resolve_model_config
    from damcha_ts.training.config import USER_DATA_DEFAULTS

    recipe = {"lookback": lookback,
              "learning_rate": min(max(USER_DATA_DEFAULTS["learning_rate"], space.learning_rate[0]), space.learning_rate[1]),
              "max_steps": min(space.max_steps, key=lambda steps: abs(steps - USER_DATA_DEFAULTS["max_steps"]))}
    dropout = resolve_model_config(DEFAULT_MODEL)["dropout"]
    default = {"d_model": None if None in space.d_model else space.d_model[0],
               "dropout": min(max(dropout, space.dropout[0]), space.dropout[1])}
    return [{"model": model, **recipe, **(default if model != "linear" else {})}
            for model in ("linear", DEFAULT_MODEL) if model in trained]


def sample(trial, space: AutoSpace, models: Sequence[str], lookbacks: Sequence[int]) -> Candidate:
    """The trained candidate of an Optuna trial (the fixed rules are scored outside the sampler)."""
    model = trial.suggest_categorical("model", list(models))
    lookback = trial.suggest_categorical("lookback", list(lookbacks))
    settings = {"learning_rate": trial.suggest_float("learning_rate", *space.learning_rate, log=True),
                "max_steps": trial.suggest_categorical("max_steps", list(space.max_steps))}
    if model != "linear":
        settings["d_model"] = trial.suggest_categorical("d_model", list(space.d_model))
        settings["dropout"] = trial.suggest_float("dropout", *space.dropout)
    return Candidate(model, lookback, settings)
