"""One typed run configuration, parsed and validated once at the edge, trusted by every layer after.

    run = RunConfig.load("itransformer_damcha/etth1", horizon=96, overrides=["training.max_epochs=3"])
    run.data.protocol.seq_len, run.model.d_model, run.training.learning_rate
    run.to_dict()        # {"data": {...}, "model": {...}, "training": {...}}: what config.yaml holds
    run.config_hash()    # 12 hex digits identifying the run (leaderboard rows, resumes, studies)

A run config has three sections:

- ``data``: ``dataset`` (a benchmark name or a CSV path), the protocol options
  (:class:`damcha_ts.data.options.ProtocolOptions`: ``seq_len``, ``pred_len``, ``features``, ...)
  and the read options (:class:`damcha_ts.data.options.ReadOptions`: ``time_col``, ``sep``, ...);
- ``model``: ``name`` (one of :data:`damcha_ts.models.MODEL_NAMES`) plus the family's
  hyperparameters; ``seq_len`` and ``pred_len`` are copied from ``data`` (one source of truth);
- ``training``: the fields of :class:`TrainingConfig`.

Files, command lines, ``Forecaster`` keywords and search samples all end as a ``RunConfig``
(files are read by :mod:`damcha_ts.training.config_files`). Its dict form spells every setting out
(defaults included), so that the saved ``config.yaml`` alone defines the run.

**Schema versions.** A field added after runs were recorded carries ``metadata={"since": N}``; at
its default it is left out of the dict form, so a config that does not use it resolves and hashes
exactly as before the field existed (earlier runs stay resumable, their leaderboard rows current).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from damcha_ts.data.options import PROTOCOL_KEYS, READ_KEYS, split_options
from damcha_ts.errors import ConfigError, plain_repr
from damcha_ts.schema import SHIPPED_ROOT, coerce, plain_values, reject_unknown_keys, yaml_number
from damcha_ts.training.config_files import (
    SECTIONS,
    available_configs,
    find_config,
    official_config_name,
    parse_override,
    read_config,
)

#: The shipped configs: ``configs/`` at the repository root; setup.py copies it into wheels.
CONFIG_ROOT = SHIPPED_ROOT
#: The newest schema: version 1 plus the fields marked ``since: 2``.
SCHEMA_VERSION = 2
#: Learning-rate schedules: factors of the epoch index (0 = first epoch), or of the optimiser step
#: index for those in STEP_SCHEDULES.
LR_SCHEDULES = ("type1", "constant", "cosine", "warmup_cosine")
#: Schedules that change the rate at every optimiser step rather than every epoch.
STEP_SCHEDULES = ("warmup_cosine",)
#: The training recipe for data nobody tuned for (issue 34), in one place: TrainingConfig.for_user_data.
#: The benchmark's recipe (lr 1e-4 halved every epoch for 10 epochs) leaves the rate negligible
#: before a small series has converged; this one keeps it at >= lr_floor x 1e-3 for the whole
#: budget, counts the budget in optimiser steps (neuralforecast's max_steps = 1000) and
#: validates every val_check_steps steps, patience counting validations.
USER_DATA_DEFAULTS = {
    "learning_rate": 1e-3, "lr_schedule": "warmup_cosine", "warmup_fraction": 0.05, "lr_floor": 0.1,
    "max_steps": 1000, "val_check_steps": 50, "patience": 5,
}

__all__ = [
    "CONFIG_ROOT", "LR_SCHEDULES", "SCHEMA_VERSION", "SECTIONS", "STEP_SCHEDULES", "USER_DATA_DEFAULTS",
    "DataConfig", "RunConfig", "TrainingConfig", "available_configs", "batch_size_for_windows", "config_hash", "find_config", "load_run_config", "model_keys", "official_config_name",
    "parse_override", "plain_values", "split_keywords",
]


def _since(version: int) -> dict:
    return {"since": version}


@dataclass(frozen=True)
class TrainingConfig:
    """How one model is trained (the ``training`` section of a run config).

    Defaults are the iTransformer protocol's (protocol.md §2.2); Gateformer configs override
    ``seed``, ``batch_size`` and ``learning_rate`` (§3.2). Every other place takes its defaults
    from here.
    """

    max_epochs: int = 10
    patience: int = 3  # early stopping on val_loss
    batch_size: int = 32
    learning_rate: float = 1e-4
    weight_decay: float = 0.0
    # "type1": halve after every epoch but the first (TSLib's lradj=type1); "constant"; "cosine"
    # (to zero over max_epochs); "warmup_cosine": per optimiser step, see warmup_fraction below.
    # Always a per-group factor, so DAMCHA's lr ratios survive.
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
    quantiles: list[float] | None = field(default=None, metadata=_since(2))
    # Ablation of DAMCHA's compact-generator multiplier (learning rate x scale, weight decay / scale).
    # None: n_heads, which trains exactly as the reference full D*D layer (damcha.md §10 (b)).
    compact_lr_scale: float | None = field(default=None, metadata=_since(2))
    # The gates of a gated metric (model.metric_gate) train at learning rate x this (None: x 1).
    gate_lr_scale: float | None = field(default=None, metadata=_since(2))
    # torch.compile the model for training and validation: on CUDA with CUDA graphs
    # ("reduce-overhead"; small models are bound by kernel launches there), elsewhere with inductor.
    # The weights, checkpoints and saved models are those of the plain model either way.
    compile: bool = field(default=False, metadata=_since(2))
    # A budget in optimiser steps (neuralforecast's max_steps). When set it ends training, and
    # max_epochs is not used.
    max_steps: int | None = field(default=None, metadata=_since(2))
    # Validate, early-stop and keep the best checkpoint every this many optimiser steps (counted
    # across epochs); None: at the end of every epoch. patience counts validations either way.
    val_check_steps: int | None = field(default=None, metadata=_since(2))
    # lr_schedule="warmup_cosine" only: the rate rises linearly over the first warmup_fraction of
    # the steps, then falls along a half cosine to lr_floor x the rate at the last step.
    warmup_fraction: float = field(default=0.0, metadata=_since(2))
    lr_floor: float = field(default=0.0, metadata=_since(2))

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        for f in dataclasses.fields(self):
            if f.name != "quantiles":  # a list, not a scalar: validated below
                object.__setattr__(self, f.name, coerce(getattr(self, f.name), hints[f.name], f"training.{f.name}"))
        quantiles = self.quantiles
        if isinstance(quantiles, str) and quantiles.lower() in ("none", "null"):
            quantiles = None
        if quantiles is not None:
            from damcha_ts.models.quantiles import validate_quantiles  # imports torch: only now

            # Stored validated (sorted, unique, 0.5 added) as a plain list, so it survives YAML/JSON.
            quantiles = list(validate_quantiles(quantiles, argument="training.quantiles"))
        object.__setattr__(self, "quantiles", quantiles)
        self._check_ranges()

    def _check_ranges(self) -> None:
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(f"training.lr_schedule={self.lr_schedule!r} is not one of {sorted(LR_SCHEDULES)}")
        for name in ("max_epochs", "batch_size", "num_nodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"training.{name} must be >= 1, got {getattr(self, name)}")
        if self.patience < 0 or self.num_workers < 0:
            raise ConfigError("training.patience and training.num_workers must be >= 0")
        if self.learning_rate <= 0:
            raise ConfigError(f"training.learning_rate must be > 0, got {self.learning_rate}")
        for name in ("compact_lr_scale", "gate_lr_scale"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ConfigError(f"training.{name} must be > 0 (or null), got {getattr(self, name)}")
        if not 0.0 < self.variate_fraction <= 1.0:
            raise ConfigError(f"training.variate_fraction must be in (0, 1], got {self.variate_fraction}")
        self._check_step_budget()

    def _check_step_budget(self) -> None:
        for name in ("max_steps", "val_check_steps"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"training.{name} must be >= 1 (or null), got {getattr(self, name)}")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ConfigError(f"training.warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        if not 0.0 <= self.lr_floor <= 1.0:
            raise ConfigError(f"training.lr_floor must be in [0, 1] (a fraction of learning_rate), got {self.lr_floor}")
        for name in ("warmup_fraction", "lr_floor"):
            if getattr(self, name) and self.lr_schedule != "warmup_cosine":
                raise ConfigError(f"training.{name}={getattr(self, name)} applies to lr_schedule='warmup_cosine' "
                                  f"only, not {self.lr_schedule!r}")

    @classmethod
    def for_user_data(cls, train_windows: int | None = None, **changes: Any) -> TrainingConfig:
        """The recommended recipe for data nobody tuned for: :data:`USER_DATA_DEFAULTS`, the batch
        size from the number of training windows when ``train_windows`` is given
        (:func:`batch_size_for_windows`), then ``changes`` (any TrainingConfig field) on top."""
        values = dict(USER_DATA_DEFAULTS)
        if train_windows is not None:
            values["batch_size"] = batch_size_for_windows(train_windows)
        # A preset key yields to a given key it depends on: an epoch budget (max_epochs without
        # max_steps) validates every epoch; another schedule has no warm-up or floor.
        if "max_epochs" in changes and "max_steps" not in changes:
            values = {k: v for k, v in values.items() if k not in ("max_steps", "val_check_steps")}
        if changes.get("lr_schedule", values["lr_schedule"]) not in STEP_SCHEDULES:
            values = {k: v for k, v in values.items() if k not in ("warmup_fraction", "lr_floor")}
        return cls.from_dict({**values, **changes})

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainingConfig:
        reject_unknown_keys(values, KEYS["training"], "training")
        return cls(**values)

    def to_dict(self, complete: bool = False) -> dict:
        return _section_dict(self, complete)


def batch_size_for_windows(train_windows: int) -> int:
    """The batch size for ``train_windows`` training windows (all entities together): about 64
    optimiser steps per pass over them, as a power of two between 16 and 256, and never more than
    the windows there are. 600 windows -> 16, 8 500 (ETTh1) -> 128, 50 000 -> 256."""
    try:
        windows = operator.index(train_windows)  # NumPy integers too
    except TypeError:
        windows = 0
    if isinstance(train_windows, bool) or windows < 1:
        raise ConfigError(f"train_windows must be a positive integer, got {plain_repr(train_windows)}")
    power = round(math.log2(windows / 64)) if windows > 64 else 0
    return min(windows, max(16, min(256, 2**power)))


@dataclass(frozen=True)
class DataConfig:
    """The ``data`` section: what to read (``dataset``), how to read it, how to cut it into windows."""

    dataset: str
    protocol: Any  # damcha_ts.data.options.ProtocolOptions
    read: Any  # damcha_ts.data.options.ReadOptions

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> DataConfig:
        values = dict(values)
        dataset = values.pop("dataset", None)
        if not dataset:
            raise ConfigError("data.dataset is missing: give a benchmark name or a CSV path")
        read, protocol = split_options(values, where="data")
        return cls(str(dataset) if isinstance(dataset, Path) else dataset, protocol, read)

    def to_dict(self) -> dict:
        return plain_values({"dataset": self.dataset, **self.protocol.keywords(), **self.read.given()})

    def prepare(self):
        """The :class:`damcha_ts.data.panel.Panel` this section describes (one series: a panel of one)."""
        from damcha_ts.data import prepare  # pandas: only when data is read

        return prepare(self.dataset, **self.protocol.keywords(), **self.read.keywords())


@dataclass(frozen=True)
class RunConfig:
    """A whole run: data, model (the family's config dataclass) and training settings."""

    data: DataConfig
    model: Any  # ITransformerConfig | GateformerConfig (see damcha_ts.models.registry)
    training: TrainingConfig

    @classmethod
    def load(
        cls,
        source: str | Path | Mapping | RunConfig,
        *,
        horizon: int | None = None,
        updates: Mapping[str, Mapping[str, Any]] | None = None,
        overrides: Sequence[str] = (),
    ) -> RunConfig:
        """From a YAML path, a shipped name (``"itransformer_damcha/etth1"``), a mapping of the same
        shape (raw or resolved) or a RunConfig; see :func:`damcha_ts.training.config_files.read_config`
        for ``horizon``, ``updates`` (typed values) and ``overrides`` (``section.key=value`` text).

        Raises:
            ConfigError: unknown sections or keys (named, with close names), bad values, missing
                dataset or model name.
        """
        if isinstance(source, RunConfig):
            if horizon is None and not updates and not overrides:
                return source
            source = source.to_dict()
        return cls.from_dict(read_config(source, horizon=horizon, updates=updates, overrides=overrides))

    @classmethod
    def from_dict(cls, config: Mapping[str, Mapping[str, Any]]) -> RunConfig:
        """From a mapping with the three sections (no ``extends``/``horizons``: see :meth:`load`)."""
        reject_unknown_keys(config, SECTIONS, "", source="config")
        data = DataConfig.from_dict(config.get("data") or {})
        model = _model_section(config.get("model") or {}, data.protocol)
        return cls(data, model, TrainingConfig.from_dict(config.get("training") or {}))

    @property
    def model_name(self) -> str:
        from damcha_ts.models.registry import spec_of  # the models import torch: only now

        return spec_of(self.model).canonical_name(self.model)

    def model_dict(self, complete: bool = False) -> dict:
        """The model section: canonical name, then every hyperparameter (``build_model`` takes it)."""
        return {"name": self.model_name, **_section_dict(self.model, complete)}

    def to_dict(self, complete: bool = False) -> dict:
        """Plain data; fields newer than schema 1 are left out at their default (so hashes of old
        configs stay) unless ``complete``."""
        return {"data": self.data.to_dict(), "model": self.model_dict(complete),
                "training": self.training.to_dict(complete)}

    def config_hash(self) -> str:
        return config_hash(self.to_dict())


def _model_section(values: Mapping[str, Any], protocol) -> Any:
    """The model config dataclass: the name checked, numbers written as text read as numbers, and
    ``seq_len`` / ``pred_len`` taken from the data section (a different value there is an error)."""
    from damcha_ts.models.registry import make_config, model_spec  # the models import torch: only now

    values = {key: yaml_number(value) for key, value in values.items()}
    spec = model_spec(values.get("name"), where="model.name")
    reject_unknown_keys(values, spec.keys, "model")
    for key in ("seq_len", "pred_len"):
        wanted = getattr(protocol, key)
        if key in values and coerce(values[key], int, f"model.{key}") != wanted:
            raise ConfigError(f"model.{key}={values[key]} disagrees with data.{key}={wanted}; set it in data only")
        values[key] = wanted
    return make_config(values)


def _section_dict(section, complete: bool = False) -> dict:
    """A dataclass section as plain data, leaving out fields newer than schema 1 at their default
    unless ``complete``."""
    return {
        f.name: plain_values(getattr(section, f.name))
        for f in dataclasses.fields(section)
        if complete or not (f.metadata.get("since", 1) > 1 and getattr(section, f.name) == f.default)
    }


def _keys() -> dict[str, list[str]]:
    """Every key each section accepts (the data section's from its typed options)."""
    return {
        "data": ["dataset", *PROTOCOL_KEYS, *READ_KEYS],
        "training": [f.name for f in dataclasses.fields(TrainingConfig)],
    }


KEYS = _keys()


def model_keys(name: str) -> list[str]:
    """Every key the ``model`` section accepts for a model name."""
    from damcha_ts.models.registry import model_spec  # the models import torch: only now

    return model_spec(name).keys


def split_keywords(keywords: Mapping[str, Any]) -> tuple[dict, dict]:
    """Keyword arguments of mixed sections (``Forecaster(..., d_model=64, patience=5)``) split
    into (model, training) by field name: the one place of that rule."""
    training = {k: v for k, v in keywords.items() if k in KEYS["training"]}
    return {k: v for k, v in keywords.items() if k not in training}, training


def load_run_config(
    source: str | Path | Mapping | RunConfig,
    *,
    horizon: int | None = None,
    overrides: Sequence[str] = (),
) -> dict:
    """``RunConfig.load(...).to_dict()``: the resolved three-section dict that fully defines a run."""
    return RunConfig.load(source, horizon=horizon, overrides=overrides).to_dict()


def config_hash(config: Mapping) -> str:
    """A stable 12-hex-digit hash of a resolved config (key order does not matter)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
