"""What ``Forecaster("auto")`` searches (:class:`AutoSpace`, given as ``search=``), one point of it
(:class:`Candidate`) and how an Optuna trial draws one (:func:`sample`). The search: tuning/auto.py."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from damcha_ts.errors import ConfigError, plain_repr
from damcha_ts.schema import DEFAULT_MODEL, read_yaml, reject_unknown_keys

FIXED_RULES = ("naive", "seasonal_naive", "window_mean", "drift")
TRAINED_MODELS = ("linear", "itransformer_mha", "itransformer_damcha_static", "gateformer_mha", DEFAULT_MODEL)


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
    max_trials: int | None = None  # at most this many trials after the fixed rules, per fit (None: the budget decides)

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
        for key in ("lookbacks", "max_steps", "max_trials"):
            values = getattr(space, key)
            for value in (values,) if key == "max_trials" and values is not None else values or ():
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
