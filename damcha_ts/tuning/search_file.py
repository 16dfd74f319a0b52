"""Search files: what an Optuna study varies, and how it samples, prunes and stores, read and checked
into a :class:`~damcha_ts.tuning.space.SearchSpec`.

A search file is YAML data (``configs/search/*.yaml``)::

    study_name: itransformer_damcha_etth1   # optional; default: the file's stem
    sampler: {seed: 0, n_startup_trials: 8}  # TPE, always multivariate with a constant liar
    pruner: {type: median, n_startup_trials: 4, n_warmup_steps: 1}   # or {type: hyperband, ...}
    storage: {heartbeat_interval: 60, grace_period: 180, max_retry: 2}   # RDB storages only
    trainer: {limit_train_batches: 50}       # Lightning Trainer arguments for every run
    space:
      training.learning_rate: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
      model.e_layers: {type: int, low: 1, high: 4}
      model.name: {type: categorical, choices: [itransformer_mha, itransformer_damcha]}
      model.generator_hidden:                # only sampled when the condition holds
        type: categorical
        choices: [[256, 512], [128]]
        when: {model.name: itransformer_damcha}
    points:                                  # optional: trials queued first, in this order
      - {training.learning_rate: 1.0e-3, model.e_layers: 2, model.name: itransformer_mha}

Every key of ``space`` is a dotted path ``section.key`` of a run config; a trial's values are
applied like ``--set`` overrides (:func:`damcha_ts.training.load_run_config`). Parameters are
sampled in file order, and ``when`` reads the resolved base config plus the values sampled before,
so a condition may test a fixed base value or an earlier parameter. A ``when`` value that is a
list means "any of these".

``points`` is a sweep written as a list: each entry fixes some of the space's parameters (any left
out are sampled), and is queued once, before the sampler's own trials, when a launch opens the study.
A study of a few discrete candidates is then exactly those candidates, each tried once.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from damcha_ts.errors import ConfigError
from damcha_ts.schema import load_shipped, plain_values, reject_unknown_keys, yaml_number
from damcha_ts.tuning.space import ParamSpec, SearchSpec

PARAM_TYPES = ("float", "int", "categorical")
PRUNER_TYPES = ("median", "hyperband")
# Keyword arguments each pruner accepts from the file (the rest of Optuna's are left at defaults).
_PRUNER_ARGUMENTS = {
    "median": ("n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials"),
    "hyperband": ("min_resource", "max_resource", "reduction_factor"),
}
# The smallest value Optuna accepts for each (0 for the others).
_PRUNER_MINIMUM = {"interval_steps": 1, "n_min_trials": 1, "min_resource": 1, "max_resource": 1,
                   "reduction_factor": 2}
_FILE_KEYS = ("study_name", "sampler", "pruner", "storage", "trainer", "space", "points")
_SAMPLER_KEYS = ("seed", "n_startup_trials")
_STORAGE_KEYS = ("heartbeat_interval", "grace_period", "max_retry")
_PARAM_KEYS = ("type", "low", "high", "log", "step", "choices", "when")


def _section(source: str, data: Mapping, key: str, valid: tuple[str, ...] | None = None) -> Mapping:
    """A file section that must be a mapping (``pruner: median`` is not one), of ``valid`` keys if given."""
    section = data.get(key) or {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: {key!r} must be a mapping of keys to values, got {section!r}")
    if valid is not None:
        reject_unknown_keys(section, valid, key, source=source)
    return section


def _number(where: str, value: Any, *, integer: bool = False, at_least: float | None = None) -> float | int:
    value = yaml_number(value)  # YAML 1.1 reads "1e-4" (no dot) as a string
    if isinstance(value, str):
        raise ConfigError(f"{where}={value!r} is not a number")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}={value!r} is not a finite number")
    if at_least is not None and value < at_least:
        raise ConfigError(f"{where}={value!r} must be >= {at_least}")
    if integer:
        if float(value) != int(value):
            raise ConfigError(f"{where}={value!r} is not an integer")
        return int(value)
    return float(value)


# ---------------------------------------------------------------------------- one parameter
def _parse_param(source: str, path: str, body: Any) -> ParamSpec:
    where = f"{source}: space.{path}"
    if not isinstance(path, str) or len(path.split(".")) != 2 or not all(path.split(".")):
        raise ConfigError(f"{where}: a parameter name must be section.key, e.g. model.d_model")
    if not isinstance(body, Mapping):
        raise ConfigError(f"{where}: must be a mapping with a 'type' (one of {', '.join(PARAM_TYPES)})")
    reject_unknown_keys(body, _PARAM_KEYS, f"space.{path}", source=source)
    kind = body.get("type")
    if kind not in PARAM_TYPES:
        raise ConfigError(f"{where}.type={kind!r} is not one of {', '.join(PARAM_TYPES)}")
    when = _parse_when(where, path, body.get("when") or {})
    if kind == "categorical":
        return ParamSpec(path=path, type=kind, choices=_parse_choices(where, body), when=when)
    return ParamSpec(path=path, type=kind, **_parse_range(where, kind, body), when=when)


def _parse_when(where: str, path: str, when: Any) -> tuple[tuple[str, tuple], ...]:
    """``when: {model.name: a}`` -> ``(("model.name", ("a",)),)``; a list of values means any of them."""
    if not isinstance(when, Mapping):
        raise ConfigError(f"{where}.when must map config paths to a value or a list of values")
    conditions = []
    for condition_path, allowed in when.items():
        if condition_path == path:
            raise ConfigError(f"{where}.when: a parameter cannot depend on itself")
        if len(str(condition_path).split(".")) != 2:
            raise ConfigError(f"{where}.when: {condition_path!r} must be section.key")
        allowed_values = allowed if isinstance(allowed, list) else [allowed]
        conditions.append((str(condition_path), tuple(plain_values(v) for v in allowed_values)))
    return tuple(conditions)


def _parse_choices(where: str, body: Mapping) -> tuple:
    """The choices of a categorical parameter: scalars or lists, at least one, no duplicates."""
    for key in ("low", "high", "log", "step"):
        if key in body:
            raise ConfigError(f"{where}: {key!r} does not apply to a categorical parameter")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ConfigError(f"{where}.choices must be a non-empty list")
    for choice in choices:
        if isinstance(choice, Mapping):
            raise ConfigError(f"{where}.choices: {choice!r}: a choice may be a scalar or a list")
    plain = [plain_values(c) for c in choices]
    if len({json.dumps(c) for c in plain}) != len(plain):
        raise ConfigError(f"{where}.choices has duplicates: {choices}")
    return tuple(plain)


def _parse_range(where: str, kind: str, body: Mapping) -> dict[str, Any]:
    """``low``, ``high``, ``log`` and ``step`` of a float or int parameter, checked together."""
    if "choices" in body:
        raise ConfigError(f"{where}: 'choices' only applies to type categorical")
    integer = kind == "int"
    if "low" not in body or "high" not in body:
        raise ConfigError(f"{where}: type {kind} needs 'low' and 'high'")
    low = _number(f"{where}.low", body["low"], integer=integer)
    high = _number(f"{where}.high", body["high"], integer=integer)
    if not low < high:
        raise ConfigError(f"{where}: low={low} must be smaller than high={high}")
    log = body.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{where}.log must be true or false")
    if log and low <= 0:
        raise ConfigError(f"{where}: log scale needs low > 0, got {low}")
    step = body.get("step")
    if step is not None:
        step = _number(f"{where}.step", step, integer=integer)
        if step <= 0:
            raise ConfigError(f"{where}.step must be > 0")
        if log:
            raise ConfigError(f"{where}: 'step' cannot be combined with log scale")
    return {"low": low, "high": high, "log": log, "step": step}


# ---------------------------------------------------------------------------- the whole file
def parse_search_spec(raw: Mapping, *, source: str = "search", default_name: str = "study") -> SearchSpec:
    """Build a :class:`SearchSpec` from the data of a search file (already YAML-loaded)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: a search file must be a mapping with a 'space' section")
    reject_unknown_keys(raw, _FILE_KEYS, "", source=source)
    params = _parse_space(source, raw.get("space"))
    sampler = _section(source, raw, "sampler", _SAMPLER_KEYS)
    pruner_type, pruner_arguments = _parse_pruner(source, raw)
    storage = _section(source, raw, "storage", _STORAGE_KEYS)
    trainer = _parse_trainer(source, raw)
    heartbeat, grace = _heartbeat_and_grace(source, storage)
    return SearchSpec(
        source=source, params=params, study_name=str(raw.get("study_name") or default_name),
        sampler_seed=_number(f"{source}: sampler.seed", sampler.get("seed", 0), integer=True, at_least=0),
        n_startup_trials=_number(f"{source}: sampler.n_startup_trials", sampler.get("n_startup_trials", 10),
                                 integer=True, at_least=0),
        pruner_type=pruner_type, pruner_arguments=pruner_arguments, heartbeat_interval=heartbeat, grace_period=grace,
        max_retry=_number(f"{source}: storage.max_retry", storage.get("max_retry", 2), integer=True, at_least=0),
        trainer_kwargs=dict(trainer), points=_parse_points(source, raw.get("points"), params),
        raw=copy.deepcopy(dict(raw)),
    )


def _parse_points(source: str, points: Any, params: tuple[ParamSpec, ...]) -> tuple[dict[str, Any], ...]:
    """The ``points`` list: each value must be one the space can sample (a choice, or in range)."""
    if points is None:
        return ()
    if not isinstance(points, list):
        raise ConfigError(f"{source}: 'points' must be a list of {{path: value}} mappings")
    by_path = {p.path: p for p in params}
    parsed = []
    for index, point in enumerate(points):
        where = f"{source}: points[{index}]"
        if not isinstance(point, Mapping) or not point:
            raise ConfigError(f"{where} must be a non-empty mapping of space paths to values")
        for path, value in point.items():
            param = by_path.get(path)
            if param is None:
                raise ConfigError(f"{where}.{path} is not a parameter of 'space' ({', '.join(by_path)})")
            if param.type == "categorical":
                if plain_values(value) not in [plain_values(c) for c in param.choices]:
                    raise ConfigError(f"{where}.{path}={value!r} is not one of its choices {list(param.choices)}")
            elif (isinstance(value, bool) or not isinstance(value, (int, float))
                  or (param.type == "int" and not float(value).is_integer())
                  or not param.low <= value <= param.high):
                raise ConfigError(f"{where}.{path}={value!r}; expected a {param.type} in "
                                  f"[{param.low}, {param.high}]")
        if point in parsed:
            raise ConfigError(f"{where} repeats points[{parsed.index(point)}]")
        parsed.append(dict(point))
    return tuple(parsed)


def _parse_space(source: str, space: Any) -> tuple[ParamSpec, ...]:
    """The ``space`` section, in file order; a ``when`` may only read a parameter listed above it."""
    if not isinstance(space, Mapping) or not space:
        raise ConfigError(f"{source}: 'space' must map config paths (section.key) to parameters")
    params = [_parse_param(source, path, body) for path, body in space.items()]
    names = [p.path for p in params]
    for index, param in enumerate(params):
        for condition_path, _ in param.when:
            if condition_path in names[index + 1 :]:
                # Sampling goes in file order, so the condition would read the base value.
                raise ConfigError(
                    f"{source}: space.{param.path}.when uses {condition_path}, which is sampled "
                    "later; list it above"
                )
    return tuple(params)


def _parse_pruner(source: str, data: Mapping) -> tuple[str, dict[str, Any]]:
    """(type, keyword arguments) of the ``pruner`` section; default a median pruner."""
    pruner = dict(_section(source, data, "pruner") or {"type": "median"})
    pruner_type = pruner.pop("type", "median")
    if pruner_type not in PRUNER_TYPES:
        raise ConfigError(f"{source}: pruner.type={pruner_type!r} is not one of {', '.join(PRUNER_TYPES)}")
    # The valid keys depend on the type: say which type they are for.
    reject_unknown_keys(pruner, ("type", *_PRUNER_ARGUMENTS[pruner_type]), "pruner",
                        source=f"{source} (pruner type {pruner_type})")
    for key, value in pruner.items():
        if not (pruner_type == "hyperband" and key == "max_resource" and value == "auto"):
            pruner[key] = _number(f"{source}: pruner.{key}", value, integer=True,
                                  at_least=_PRUNER_MINIMUM.get(key, 0))
    return pruner_type, pruner


def _parse_trainer(source: str, data: Mapping) -> Mapping:
    """Lightning Trainer arguments for every run, less those the study sets itself."""
    trainer = _section(source, data, "trainer")
    for reserved in ("callbacks", "logger", "default_root_dir"):
        if reserved in trainer:
            raise ConfigError(f"{source}: trainer.{reserved} is set by the study itself")
    return trainer


def _heartbeat_and_grace(source: str, storage: Mapping) -> tuple[int, int]:
    """The RDB heartbeat interval and the grace period after which a silent trial counts as dead."""
    heartbeat = _number(
        f"{source}: storage.heartbeat_interval", storage.get("heartbeat_interval", 60), integer=True
    )
    grace = _number(
        f"{source}: storage.grace_period", storage.get("grace_period", 3 * heartbeat), integer=True
    )
    if heartbeat < 1 or grace <= heartbeat:
        raise ConfigError(
            f"{source}: storage needs heartbeat_interval >= 1 and grace_period > heartbeat_interval "
            f"(got {heartbeat} and {grace})"
        )
    return heartbeat, grace


def load_search_spec(path: str | Path) -> SearchSpec:
    """Read and check a search file: a path, or the name of a shipped one (``configs/search/NAME.yaml``)."""
    path, data = load_shipped("search", path)
    return parse_search_spec(data, source=str(path), default_name=path.stem)
