"""Run configurations: YAML files with ``extends:``, per-horizon sections and ``a.b=value`` overrides.

A run config has three sections, each a flat mapping:

- ``data``: ``dataset`` (a benchmark name or a CSV path) plus keyword arguments of
  :func:`damcha_ts.data.prepare` (``seq_len``, ``pred_len``, ``features``, ...);
- ``model``: ``name`` (one of :data:`damcha_ts.models.MODEL_NAMES`) plus model hyperparameters;
  ``seq_len`` and ``pred_len`` are copied from ``data`` (one source of truth);
- ``training``: the fields of :class:`TrainingConfig`.

A file may also hold ``extends:`` (a path, or a list of paths, relative to the file; the file's own
keys win) and ``horizons:`` (``{96: {model: {...}}, 336: {...}}``: sections merged in when the run's
horizon matches, because the reference scripts tune some settings per horizon).
:func:`load_run_config` resolves all of that into the plain three-section dict the trainer takes.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import difflib
import hashlib
import inspect
import json
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Union, get_args, get_origin, get_type_hints

from damcha_ts.errors import ConfigError


def _find_config_root() -> Path:
    """The checkout's ``configs/`` (editable installs, CI), else the copy a built wheel carries."""
    checkout = Path(__file__).resolve().parents[2] / "configs"
    return checkout if checkout.is_dir() else Path(__file__).resolve().parents[1] / "configs"


#: The shipped configs: ``configs/`` at the repository root; setup.py copies it into wheels.
CONFIG_ROOT = _find_config_root()

SECTIONS = ("data", "model", "training")
_FILE_KEYS = (*SECTIONS, "extends", "horizons")
# Keys of the data section that are not keyword arguments of prepare().
_DATA_OWN_KEYS = ("dataset",)
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


@dataclass
class TrainingConfig:
    """How one model is trained (the ``training`` section of a run config).

    Defaults are the iTransformer protocol's (protocol.md §2.2); Gateformer configs override
    ``seed``, ``batch_size`` and ``learning_rate`` (§3.2).
    """

    max_epochs: int = 10
    patience: int = 3  # early stopping on val_loss
    batch_size: int = 32
    learning_rate: float = 1e-4
    weight_decay: float = 0.0
    # "type1": halve after every epoch but the first (TSLib's lradj=type1); "constant"; "cosine"
    # (to zero over max_epochs). Always a per-group factor, so DAMCHA's lr ratios survive.
    lr_schedule: str = "type1"
    seed: int = 2023
    deterministic: bool = False
    precision: str = "auto"  # "auto": bf16-mixed on CUDA, 32-true elsewhere
    accelerator: str = "auto"
    devices: int | str = "auto"
    strategy: str = "auto"
    num_nodes: int = 1
    num_workers: int = 0
    # Gradient-norm clipping; the norm counts each compact DAMCHA parameter H times, as the full
    # D*D layer it stands for would (damcha.md §10), so compact and full still train alike.
    gradient_clip_val: float | None = None
    # Partial-variate training (iTransformer's "efficient training"): each training batch keeps a
    # random subset of this fraction of the variates. 1.0 trains on all of them.
    variate_fraction: float = 1.0
    # Quantile levels for a probabilistic model trained on the pinball loss (0.5 is added: the
    # median is the point forecast); None trains a point model on the MSE.
    quantiles: list[float] | None = None
    # Ablation of DAMCHA's compact-generator multiplier (learning rate x scale, weight decay / scale).
    # None: n_heads, which trains exactly as the reference full D*D layer (damcha.md §10 (b)).
    compact_lr_scale: float | None = None

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        for field in dataclasses.fields(self):
            if field.name == "quantiles":
                continue  # a list, not a scalar: validated below
            value = _coerce(getattr(self, field.name), hints[field.name], f"training.{field.name}")
            setattr(self, field.name, value)
        if isinstance(self.quantiles, str) and self.quantiles.lower() in ("none", "null"):
            self.quantiles = None
        if self.quantiles is not None:
            from damcha_ts.probabilistic import validate_quantiles  # imports torch: only now

            # Stored validated (sorted, unique, 0.5 added) as a plain list, so it survives YAML/JSON.
            self.quantiles = list(validate_quantiles(self.quantiles, argument="training.quantiles"))
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(
                f"training.lr_schedule={self.lr_schedule!r} is not one of {sorted(LR_SCHEDULES)}"
            )
        for name in ("max_epochs", "batch_size", "num_nodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"training.{name} must be >= 1, got {getattr(self, name)}")
        if self.patience < 0 or self.num_workers < 0:
            raise ConfigError("training.patience and training.num_workers must be >= 0")
        if self.learning_rate <= 0:
            raise ConfigError(f"training.learning_rate must be > 0, got {self.learning_rate}")
        if self.compact_lr_scale is not None and not self.compact_lr_scale > 0:
            raise ConfigError(f"training.compact_lr_scale must be > 0 (or null), got {self.compact_lr_scale}")
        if not 0.0 < self.variate_fraction <= 1.0:
            raise ConfigError(f"training.variate_fraction must be in (0, 1], got {self.variate_fraction}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainingConfig:
        _reject_unknown(values, [f.name for f in dataclasses.fields(cls)], "training")
        return cls(**values)


#: Learning-rate schedules as multiplicative factors of the epoch index (0 = first epoch).
LR_SCHEDULES = ("type1", "constant", "cosine")


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Convert YAML/CLI scalars to the annotated type (YAML reads ``1e-4`` as a string)."""
    options = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    if value is None:
        if type(None) in options:
            return None
        raise ConfigError(f"{where} must not be null")
    if isinstance(value, str) and value.lower() in ("none", "null") and type(None) in options:
        return None
    for option in options:
        if option is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
        elif option is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value):
                return int(value)
            if isinstance(value, float) and value.is_integer():
                return int(value)
        elif option is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, str) and _NUMBER.match(value):
                return float(value)
        elif option is str and isinstance(value, str):
            return value
    names = " or ".join(getattr(o, "__name__", str(o)) for o in options)
    raise ConfigError(f"{where}={value!r} is not a valid {names}")


def _reject_unknown(values: Mapping[str, Any], valid: Sequence[str], section: str) -> None:
    for key in values:
        if key not in valid:
            close = difflib.get_close_matches(str(key), list(valid), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(
                f"unknown key {section}.{key}{hint} (valid keys: {', '.join(sorted(valid))})"
            )


def _deep_merge(base: dict, update: Mapping) -> dict:
    """Return ``base`` updated recursively by ``update`` (mappings merge, everything else replaces)."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(dict(merged[key]), value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def available_configs() -> list[str]:
    """Names of the shipped configs, e.g. ``"itransformer_damcha/etth1"``."""
    if not CONFIG_ROOT.is_dir():
        return []
    names = (path.relative_to(CONFIG_ROOT) for path in CONFIG_ROOT.rglob("*.yaml"))
    # Run configs only: not the shared bases (_base/), leaderboard grids or search spaces.
    return sorted(str(name.with_suffix("")) for name in names
                  if not name.parts[0].startswith("_") and name.parts[0] not in ("leaderboard", "search"))


def find_config(name: str | Path) -> Path:
    """A config file from a path or a shipped name (``"itransformer_damcha/etth1"``)."""
    path = Path(name)
    if path.is_file():
        return path
    shipped = CONFIG_ROOT / f"{name}.yaml" if not str(name).endswith((".yaml", ".yml")) else None
    if shipped is not None and shipped.is_file():
        return shipped
    names = available_configs()
    close = difflib.get_close_matches(str(name).lower(), names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f" (shipped configs: {', '.join(names)})"
    raise ConfigError(f"config {str(name)!r} is neither a file nor a shipped config{hint}")


def official_config_name(model: str, dataset: str) -> str | None:
    """The shipped config for a model on a benchmark dataset, or None when there is none."""
    name = f"{model}/{dataset.lower()}"
    return name if (CONFIG_ROOT / f"{name}.yaml").is_file() else None


def _read_yaml(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """Read one config file, following ``extends:`` (parents first, this file wins)."""
    import yaml

    path = path.resolve()
    if path in chain:
        loop = " -> ".join(str(p) for p in (*chain, path))
        raise ConfigError(f"config files extend each other in a loop: {loop}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a config must be a mapping with sections {', '.join(SECTIONS)}")
    _reject_unknown(raw, _FILE_KEYS, f"{path.name}:")
    parents = raw.pop("extends", None) or []
    merged: dict = {}
    for parent in [parents] if isinstance(parents, str) else parents:
        # A path relative to this file, or else a shipped config name ("itransformer_mha/etth1").
        parent_path = path.parent / parent
        if not parent_path.is_file():
            try:
                parent_path = find_config(parent)
            except ConfigError:
                raise ConfigError(f"{path}: extends {parent!r}, which is neither a file next to it nor a shipped config") from None
        merged = _deep_merge(merged, _read_yaml(parent_path, (*chain, path)))
    return _deep_merge(merged, raw)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"model.d_model=128"`` -> (["model", "d_model"], 128); values are YAML-parsed."""
    import yaml

    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    key, _, raw_value = text.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if len(parts) != 2 or parts[0] not in SECTIONS:
        raise ConfigError(
            f"override key {key.strip()!r} must be section.key with section in {', '.join(SECTIONS)}"
        )
    try:
        value = yaml.safe_load(raw_value) if raw_value.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: value is not valid YAML: {exc}") from exc
    if isinstance(value, str) and _NUMBER.match(value):
        value = float(value)  # YAML 1.1 reads "1e-4" as a string
    return parts, value


def load_run_config(
    source: str | Path | Mapping,
    *,
    horizon: int | None = None,
    overrides: Sequence[str] = (),
) -> dict:
    """Resolve a run config into ``{"data": {...}, "model": {...}, "training": {...}}``.

    Args:
        source: a YAML path, a shipped config name (``"itransformer_damcha/etth1"``) or a dict
            of the same shape as a file.
        horizon: forecast horizon; picks the matching ``horizons:`` section and sets
            ``data.pred_len``. Default: an overridden ``data.pred_len``, else the file's.
        overrides: ``"section.key=value"`` strings (values YAML-parsed); they win over everything.

    Raises:
        ConfigError: unknown sections or keys (named), bad values, missing dataset or model name.
    """
    if isinstance(source, Mapping):
        raw = copy.deepcopy(dict(source))
        _reject_unknown(raw, _FILE_KEYS, "config:")
        if "extends" in raw:
            parents = raw.pop("extends")
            merged: dict = {}
            for parent in [parents] if isinstance(parents, (str, Path)) else parents:
                merged = _deep_merge(merged, _read_yaml(find_config(parent)))
            raw = _deep_merge(merged, raw)
    else:
        raw = _read_yaml(find_config(source))

    parsed_overrides = [parse_override(text) for text in overrides]
    horizons = raw.pop("horizons", None) or {}
    for section in SECTIONS:
        if not isinstance(raw.get(section) or {}, Mapping):
            raise ConfigError(f"config section {section!r} must be a mapping")
    config = {section: dict(raw.get(section) or {}) for section in SECTIONS}

    if horizon is None:
        overridden = [v for (s, k), v in parsed_overrides if (s, k) == ("data", "pred_len")]
        horizon = overridden[-1] if overridden else config["data"].get("pred_len", 96)
    horizon = _coerce(horizon, int, "horizon")
    if horizon <= 0:
        raise ConfigError(f"horizon (data.pred_len) must be a positive integer, got {horizon}")
    per_horizon = {int(k): v for k, v in horizons.items()}
    if horizon in per_horizon:
        section_update = per_horizon[horizon] or {}
        _reject_unknown(section_update, SECTIONS, f"horizons.{horizon}:")
        config = _deep_merge(config, section_update)
    for (section, key), value in parsed_overrides:
        config[section][key] = value
    config["data"]["pred_len"] = horizon
    return _validate(config)


def _data_keys() -> tuple[list[str], dict]:
    """Keys the ``data`` section accepts, and the defaults of prepare()'s own options."""
    from damcha_ts.data import load_frame, prepare

    keys, defaults = list(_DATA_OWN_KEYS), {}
    for function in (prepare, load_frame):
        for name, p in inspect.signature(function).parameters.items():
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and name != "source" and name not in keys:
                keys.append(name)
                if function is prepare:
                    defaults[name] = p.default
    return keys, defaults


def _validate(config: dict) -> dict:
    """Check every key and fill every default, so that the resolved dict fully defines the run."""
    data, model, training = config["data"], config["model"], config["training"]
    if not data.get("dataset"):
        raise ConfigError("data.dataset is missing: give a benchmark name or a CSV path")
    valid_keys, defaults = _data_keys()
    _reject_unknown(data, valid_keys, "data")
    for key, default in defaults.items():
        data.setdefault(key, default)
    config["data"] = data = {"dataset": data.pop("dataset"), **data}
    for key in ("seq_len", "pred_len"):
        data[key] = _coerce(data[key], int, f"data.{key}")
        if data[key] <= 0:
            raise ConfigError(f"data.{key} must be a positive integer, got {data[key]}")

    from damcha_ts.models import MODEL_NAMES, make_config, registry

    name = model.get("name")
    if name not in MODEL_NAMES and name not in registry.FAMILIES:
        close = difflib.get_close_matches(str(name), MODEL_NAMES, n=2)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"model.name={name!r} is not one of {', '.join(MODEL_NAMES)}{hint}")
    for key in ("seq_len", "pred_len"):
        if key in model and _coerce(model[key], int, f"model.{key}") != data[key]:
            raise ConfigError(
                f"model.{key}={model[key]} disagrees with data.{key}={data[key]}; set it in data only"
            )
        model[key] = data[key]
    for key, value in list(model.items()):
        if isinstance(value, str) and _NUMBER.match(value):
            model[key] = int(value) if re.fullmatch(r"[+-]?\d+", value) else float(value)
    _reject_unknown(model, model_keys(name), "model")
    # Every hyperparameter spelled out (library defaults included): the config defines the run.
    model_config = make_config(dict(model))
    # A bare family name ("itransformer") plus explicit attention keys resolves to the full name.
    family = str(name).partition("_")[0]
    switch = registry.FAMILIES[family].attention_field
    config["model"] = {"name": f"{family}_{getattr(model_config, switch)}", **plain_values(dataclasses.asdict(model_config))}
    config["training"] = dataclasses.asdict(TrainingConfig.from_dict(training))
    for section, key, default in LATE_FIELDS:
        if config[section][key] == default:
            del config[section][key]
    config["data"] = plain_values(config["data"])  # a Path or tuple given in code must still save as YAML
    return config


#: Fields added after runs were recorded: at their default they are left out of the resolved config,
#: so configs resolve (and hash) as before the field existed and earlier runs stay resumable and their
#: leaderboard rows current.
LATE_FIELDS = (
    ("training", "quantiles", None),
    ("training", "compact_lr_scale", None),
    ("model", "generator_dropout", None),
    ("model", "generator_init", "default"),
)


def plain_values(value: Any) -> Any:
    """A copy as plain YAML/JSON data, recursively: mappings to dicts, tuples to lists, paths and
    timestamps to strings. Configs, saved metadata and search values compare equal after a round trip."""
    if isinstance(value, Mapping):
        return {k: plain_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_values(v) for v in value]
    if isinstance(value, (PurePath, datetime.date)):  # pd.Timestamp is a datetime.datetime
        return str(value)
    return value


def model_keys(name: str) -> list[str]:
    """Every key the ``model`` section accepts for a model name."""
    from damcha_ts.models import registry

    family = str(name).partition("_")[0]
    if family not in registry.FAMILIES:
        raise ConfigError(f"model name {name!r} is unknown; valid names: {', '.join(registry.MODEL_NAMES)}")
    config_class = registry.FAMILIES[family].config_class
    return ["name", *(f.name for f in dataclasses.fields(config_class))]


def config_hash(config: Mapping) -> str:
    """A stable 12-hex-digit hash of a resolved config (key order does not matter)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
