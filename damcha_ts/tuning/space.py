"""The search space of a study: its parameters (:class:`ParamSpec`), how a trial samples them, and the
checks of every searched path against the base run config. Search files are read into a
:class:`SearchSpec` by :mod:`~damcha_ts.tuning.search_file`, whose docstring gives their format.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from damcha_ts.errors import ConfigError
from damcha_ts.schema import plain_values


def get_path(config: Mapping, path: str) -> Any:
    """``get_path(config, "model.d_model")`` -> ``config["model"]["d_model"]`` (KeyError if absent)."""
    node: Any = config
    for part in path.split("."):
        node = node[part]
    return node


def set_path(config: dict, path: str, value: Any) -> None:
    """Set ``config["model"]["d_model"]`` from ``"model.d_model"``, creating missing sections."""
    *parents, last = path.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


@dataclass(frozen=True)
class ParamSpec:
    """One searched hyperparameter.

    ``choices`` may hold lists (e.g. generator widths); Optuna only stores scalars, so such a
    choice is given to Optuna as its JSON text and decoded again by :meth:`decode`.
    """

    path: str
    type: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple = ()
    when: tuple[tuple[str, tuple], ...] = ()  # (config path, allowed values), all must hold

    @property
    def encoded_choices(self) -> tuple:
        return tuple(json.dumps(c) if isinstance(c, list) else c for c in self.choices)

    def decode(self, stored: Any) -> Any:
        """The config value for a value Optuna stored for this parameter."""
        if self.type == "categorical" and any(isinstance(c, list) for c in self.choices):
            if isinstance(stored, str) and stored.startswith("["):
                return json.loads(stored)
        return stored

    def is_active(self, config: Mapping) -> bool:
        for path, allowed in self.when:
            try:
                current = plain_values(get_path(config, path))
            except (KeyError, TypeError):
                return False
            if current not in allowed:
                return False
        return True

    def suggest(self, trial) -> Any:
        """Ask the trial for a value (an ``optuna.Trial`` or ``optuna.trial.FixedTrial``)."""
        if self.type == "float":
            return trial.suggest_float(self.path, self.low, self.high, log=self.log, step=self.step)
        if self.type == "int":
            return trial.suggest_int(self.path, self.low, self.high, log=self.log, step=self.step or 1)
        return self.decode(trial.suggest_categorical(self.path, self.encoded_choices))

    def extreme_values(self) -> list:
        """Values that together exercise the whole range (for checking paths before a study)."""
        if self.type == "categorical":
            return list(self.choices)
        return [self.low, self.high]


@dataclass(frozen=True)
class SearchSpec:
    """A parsed search file (its format: :mod:`~damcha_ts.tuning.search_file`)."""

    source: str
    params: tuple[ParamSpec, ...]
    study_name: str
    sampler_seed: int = 0
    n_startup_trials: int = 10
    pruner_type: str = "median"
    pruner_arguments: Mapping[str, Any] = field(default_factory=dict)
    heartbeat_interval: int = 60
    grace_period: int = 180
    max_retry: int = 2
    trainer_kwargs: Mapping[str, Any] = field(default_factory=dict)
    points: tuple[Mapping[str, Any], ...] = ()  # {path: value} trials to queue first
    raw: Mapping[str, Any] = field(default_factory=dict)  # the file's data, to hand to workers

    def make_sampler(self, seed: int | None = None):
        """TPE over the joint space; the constant liar keeps parallel workers apart."""
        import optuna

        return optuna.samplers.TPESampler(seed=self.sampler_seed if seed is None else seed, multivariate=True,
                                          n_startup_trials=self.n_startup_trials, constant_liar=True)

    def make_pruner(self):
        import optuna

        if self.pruner_type == "median":
            return optuna.pruners.MedianPruner(**self.pruner_arguments)
        return optuna.pruners.HyperbandPruner(**self.pruner_arguments)

    def sample(
        self, trial, base_config: Mapping, resolve: Callable[[Mapping[str, Any]], dict] | None = None
    ) -> dict[str, Any]:
        """Sample the active parameters for ``trial``; returns ``{path: value}`` in file order.

        ``base_config`` (the resolved base run config) is only read, by the ``when`` conditions,
        together with the values sampled before each parameter. With ``resolve`` (as in
        :meth:`check_against`) the conditions read the config those values resolve to, so keys
        derived from a sampled one count too (``model.attention`` from a sampled ``model.name``).
        List choices come back as lists.
        """
        view = copy.deepcopy(dict(base_config))
        values: dict[str, Any] = {}
        for param in self.params:
            if not param.is_active(view):
                continue
            value = param.suggest(trial)
            set_path(view, param.path, value)
            values[param.path] = value
            if resolve is not None:
                # An intermediate combination may not resolve (d_model before n_heads); the raw
                # values then stand, and the complete trial config is checked when it is built.
                with contextlib.suppress(ConfigError):
                    view = resolve(values)
        return values

    def encoded_point(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """A ``points`` entry as Optuna's fixed parameters (list choices as their JSON text)."""
        by_path = {p.path: p for p in self.params}
        return {path: json.dumps(v) if isinstance(v, list) and by_path[path].type == "categorical" else v
                for path, v in point.items()}

    def check_against(self, resolve: Callable[[Mapping[str, Any]], dict]) -> None:
        """Fail early, naming the file and parameter, when a path or value is not a valid config.

        ``resolve(values)`` returns the run config with ``values`` (``{path: value}``) applied
        (:meth:`damcha_ts.tuning.objective.BaseConfig.resolve`). Each parameter's extreme values
        are resolved one at a time, and each must survive resolution: a key the resolver dropped
        or rewrote would make searching it a no-op.
        """
        self._check_conditions(resolve)
        for index, point in enumerate(self.points):
            try:
                resolve(point)
            except ConfigError as exc:
                raise ConfigError(f"{self.source}: points[{index}] is not a valid config: {exc}") from exc
        for param in self.params:
            for value in param.extreme_values():
                try:
                    resolved = resolve({param.path: value})
                except ConfigError as exc:
                    raise ConfigError(f"{self.source}: space.{param.path}={value!r}: {exc}") from exc
                try:
                    kept = plain_values(get_path(resolved, param.path))
                except KeyError:
                    kept = None
                if kept != plain_values(value):
                    raise ConfigError(
                        f"{self.source}: space.{param.path}: the resolved config does not keep "
                        f"the value {value!r} (got {kept!r}), so searching it would change nothing"
                    )

    def _check_conditions(self, resolve: Callable[[Mapping[str, Any]], dict]) -> None:
        """Every ``when`` must be able to hold: a condition on a mistyped key, or on a value of the
        wrong type (``"true"`` for a boolean), would otherwise switch its parameter off silently.

        A condition's key is looked up in the base config and in the configs that the extreme
        values of the parameters sampled before it resolve to (a key derived from a sampled
        ``model.name``); it must exist in one of them with a value of the type of an allowed value.
        """
        for index, param in enumerate(self.params):
            for condition_path, allowed in param.when:
                where = f"{self.source}: space.{param.path}.when.{condition_path}"
                earlier = next((p for p in self.params[:index] if p.path == condition_path), None)
                if earlier is not None and earlier.type == "categorical":
                    if not any(value in earlier.choices for value in allowed):
                        raise ConfigError(f"{where}: none of {list(allowed)} is one of its choices "
                                          f"{list(earlier.choices)}, so the condition never holds")
                    continue
                seen = []
                for values in [{}] + [{p.path: v} for p in self.params[:index] for v in p.extreme_values()]:
                    with contextlib.suppress(ConfigError, KeyError, TypeError):
                        seen.append(plain_values(get_path(resolve(values), condition_path)))
                if not seen:
                    raise ConfigError(f"{where}: {condition_path} is not a key of the run config, so "
                                      "the condition never holds (check its spelling)")
                if not any(current is None or _same_kind(current, value) for current in seen for value in allowed):
                    raise ConfigError(
                        f"{where}: compares {condition_path} (e.g. {seen[0]!r}, a "
                        f"{type(seen[0]).__name__}) with {list(allowed)}, so the condition never holds"
                    )


def _same_kind(a: Any, b: Any) -> bool:
    """Whether two config values can be equal: booleans, numbers, strings and lists apart."""
    def kind(value):
        if isinstance(value, bool):
            return bool
        return float if isinstance(value, (int, float)) else type(value)

    return kind(a) is kind(b)


def as_updates(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"model.d_model": 64}`` -> ``{"model": {"d_model": 64}}``, for ``RunConfig.load(updates=...)``.

    Trial values go through the config loader (not into a resolved dict) so that they apply
    before defaults are filled in: a searched ``model.name`` then re-derives the attention switch
    instead of contradicting the base config's.
    """
    updates: dict[str, dict[str, Any]] = {}
    for path, value in values.items():
        section, _, key = path.partition(".")
        updates.setdefault(section, {})[key] = value
    return updates
