"""The model families, one :class:`ModelSpec` each: every surface (configs, CLI, leaderboard,
tuning, GluonTS) names, validates and builds models through this file.

    build_model({"name": "itransformer_damcha", "seq_len": 96, "pred_len": 96, "d_model": 256})
    build_model("gateformer_mha", pred_len=192)
    build_model("itransformer_mha", quantiles=[0.1, 0.9])   # [B, Q, H, N] monotone quantiles

A full name (``itransformer_damcha``) picks the family and sets its attention switch (``attention``
for iTransformer, ``variate_attention`` for Gateformer); a bare family name (``itransformer``) leaves
the switch to the explicit keys. ``asdict(model.config) | {"name": model.name}`` rebuilds the model.
A new family is one more ``ModelSpec`` in ``FAMILIES``. The baselines (``BASELINES``: ``naive``,
``seasonal_naive``, ``window_mean``, ``drift``, ``linear``; models/baselines.py) are families without an
attention switch, named by the family alone; the leaderboard's MHA/DAMCHA tables iterate ``FAMILIES`` only.

A *variant* (``VARIANTS``) is a name for a full name with some keys preset, e.g.
``itransformer_damcha_static`` = ``itransformer_damcha`` with ``static_metric=True`` (the DAMCHA
setting the leaderboard recommends). It is accepted wherever a model name is, and resolves to its base
name plus those keys, so its resolved config and hash are exactly those of the base name with the keys
set by hand; a key given explicitly must agree with the preset.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from damcha_ts.errors import ConfigError
from damcha_ts.models.attention_config import ATTENTION_KINDS
from damcha_ts.models.base import ForecastModel
from damcha_ts.models.baselines import (
    Drift,
    DriftConfig,
    Linear,
    LinearConfig,
    Naive,
    NaiveConfig,
    SeasonalNaive,
    SeasonalNaiveConfig,
    WindowMean,
    WindowMeanConfig,
)
from damcha_ts.models.gateformer import Gateformer, GateformerConfig
from damcha_ts.models.itransformer import ITransformer, ITransformerConfig
from damcha_ts.models.quantiles import QuantileForecastModel, validate_quantiles
from damcha_ts.schema import reject_unknown_keys


@dataclass(frozen=True)
class ModelSpec:
    """One model family: its config dataclass, its model class, and the config field that the
    attention suffix of a model name sets (None: a baseline, named by its family alone).
    ``trained=False``: a fixed rule with nothing to learn (fitting scores it on validation)."""

    family: str
    config_class: type
    model_class: type
    attention_field: str | None = None
    trained: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        if self.attention_field is None:
            return (self.family,)
        return tuple(f"{self.family}_{kind}" for kind in ATTENTION_KINDS)

    @property
    def keys(self) -> list[str]:
        """Every key a model config of this family accepts (``name`` first)."""
        return ["name", *(f.name for f in fields(self.config_class))]

    @property
    def mha_and_damcha(self) -> tuple[str, str]:
        """(the family's MHA model, its DAMCHA model): every DAMCHA row of the family, variants
        included, is judged against that MHA row (the leaderboard's comparisons)."""
        return f"{self.family}_mha", f"{self.family}_damcha"

    def canonical_name(self, config) -> str:
        """The full name of a built config: ``itransformer`` + ``attention="damcha"`` -> ``itransformer_damcha``."""
        if self.attention_field is None:
            return self.family
        return f"{self.family}_{getattr(config, self.attention_field)}"

    def attention_kind(self, name: str) -> str:
        """The attention suffix of a full name of this family (``""`` for the bare family name)."""
        return "" if self.attention_field is None or name == self.family else name[len(self.family) + 1:]


FAMILIES = {
    spec.family: spec
    for spec in (
        ModelSpec("itransformer", ITransformerConfig, ITransformer, "attention"),
        ModelSpec("gateformer", GateformerConfig, Gateformer, "variate_attention"),
    )
}
MODEL_NAMES = tuple(name for spec in FAMILIES.values() for name in spec.names)
BASELINES = {
    spec.family: spec
    for spec in (
        ModelSpec("naive", NaiveConfig, Naive, trained=False),
        ModelSpec("seasonal_naive", SeasonalNaiveConfig, SeasonalNaive, trained=False),
        ModelSpec("window_mean", WindowMeanConfig, WindowMean, trained=False),
        ModelSpec("drift", DriftConfig, Drift, trained=False),
        ModelSpec("linear", LinearConfig, Linear),
    )
}
BASELINE_NAMES = tuple(BASELINES)
# Every name a model config may carry: full names, bare family names and baselines.
_SPECS = {name: spec for spec in (*FAMILIES.values(), *BASELINES.values()) for name in (*spec.names, spec.family)}


@dataclass(frozen=True)
class ModelVariant:
    """A named setting of a full model name: ``base`` with the ``presets`` keys set."""

    name: str
    base: str  # a full name of MODEL_NAMES
    presets: Mapping[str, Any]
    summary: str = ""

    def overrides(self) -> tuple[str, ...]:
        """The presets as ``model.key=value`` run-config overrides (YAML values)."""
        return tuple(f"model.{key}={json.dumps(value)}" for key, value in self.presets.items())


VARIANTS = {
    variant.name: variant
    for variant in (
        # LEADERBOARD.md ablation row itransformer_damcha_static: Avg MSE below iTransformer-MHA on all
        # four ETT datasets (configs/leaderboard/ablations.yaml, ablations_ettm.yaml).
        ModelVariant("itransformer_damcha_static", "itransformer_damcha", {"static_metric": True},
                     "DAMCHA-iTransformer with the static (input-independent) metric"),
        # Issue 23's gated metric as selected on validation (benchmarks/results/metric_gate_selection.md);
        # LEADERBOARD.md ablation row itransformer_damcha_gated_norm (configs/leaderboard/ablations_gated.yaml).
        ModelVariant("itransformer_damcha_gated", "itransformer_damcha", {"metric_gate": True, "metric_delta_norm": True},
                     "DAMCHA-iTransformer with a static metric plus a gated, norm-controlled input-adaptive part"),
        # The default for user data (schema.DEFAULT_MODEL): best mean geometric-mean MASE of the candidates
        # on the public user-data benchmark, seeds 0-4 (benchmarks/results/user_data_candidates.md).
        ModelVariant("gateformer_damcha_gated", "gateformer_damcha", {"metric_gate": True, "metric_delta_norm": True},
                     "DAMCHA-Gateformer with a static metric plus a gated, norm-controlled input-adaptive part"),
    )
}
VARIANT_NAMES = tuple(VARIANTS)


def known_model_name(name: Any) -> bool:
    """Whether ``name`` is a full model name, a baseline or a variant name (what ``--model`` and grids accept)."""
    return name in MODEL_NAMES or name in BASELINES or name in VARIANTS


def resolve_variant(name: Any) -> tuple[Any, dict]:
    """(the full name, its preset keys): a variant's base and presets; any other name as it is, no presets."""
    variant = VARIANTS.get(name) if isinstance(name, str) else None
    return (name, {}) if variant is None else (variant.base, dict(variant.presets))


def model_spec(name: Any, *, where: str = "model name") -> ModelSpec:
    """The family of a full, bare, baseline or variant model name; ConfigError naming the valid ones otherwise."""
    name = resolve_variant(name)[0]
    spec = _SPECS.get(name) if isinstance(name, str) else None
    if spec is None:
        close = difflib.get_close_matches(str(name), MODEL_NAMES + VARIANT_NAMES + BASELINE_NAMES, n=2)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        valid = ", ".join(MODEL_NAMES + tuple(FAMILIES) + VARIANT_NAMES + BASELINE_NAMES)
        raise ConfigError(f"unknown {where} {name!r}{hint}; valid names: {valid}")
    return spec


def make_config(config: Mapping | str, **overrides):
    """The validated config dataclass for a name or a ``{"name": ..., **hyperparameters}`` mapping."""
    values = {"name": config} if isinstance(config, str) else dict(config)
    values.update(overrides)
    given = values.pop("name", None)
    name, presets = resolve_variant(given)
    spec = model_spec(name)
    reject_unknown_keys(values, spec.keys, "")
    kind = spec.attention_kind(str(name))
    if kind:
        switch = spec.attention_field
        if values.get(switch, kind) != kind:
            raise ConfigError(f"model name {name!r} contradicts {switch}={values[switch]!r}")
        values[switch] = kind
    model_config = spec.config_class(**{**presets, **values})
    for key, preset in presets.items():  # compared once the config has validated the values
        if getattr(model_config, key) != preset:
            raise ConfigError(f"model name {given!r} sets {key}={preset!r}, which contradicts {key}={values[key]!r}; "
                              f"use {name!r} to choose {key} yourself")
    return model_config


def resolve_model_config(config: Mapping | str, **overrides) -> dict:
    """The complete plain model config: canonical name first, then every hyperparameter (defaults
    included), so that it alone defines the model."""
    model_config = make_config(config, **overrides)
    return {"name": spec_of(model_config).canonical_name(model_config), **asdict(model_config)}


def spec_of(model_config) -> ModelSpec:
    """The family of a config dataclass."""
    return next(spec for spec in (*FAMILIES.values(), *BASELINES.values()) if type(model_config) is spec.config_class)


def build_model(config: Mapping | str, *, quantiles: Sequence[float] | None = None, **overrides) -> ForecastModel:
    """A new model (random init, float32, train mode) from a name or a config mapping; see module doc.

    With ``quantiles`` the model forecasts those levels (0.5 added) as [B, Q, H, N]: the point
    model is built with ``pred_len = H·Q`` and wrapped (:class:`damcha_ts.models.quantiles.QuantileForecastModel`).
    """
    model_config = make_config(config, **overrides)
    spec = spec_of(model_config)
    if quantiles is None:
        return spec.model_class(model_config)
    check_takes_quantiles(spec.family)
    levels = validate_quantiles(quantiles)
    point_config = replace(model_config, pred_len=model_config.pred_len * len(levels))
    return QuantileForecastModel(spec_of(point_config).model_class(point_config), levels)


def check_takes_quantiles(name: str) -> None:
    """ConfigError for quantiles of a model with nothing to learn (a fixed-rule baseline)."""
    if not model_spec(name, where="model").trained:
        raise ConfigError(f"quantiles: {name} is a fixed rule with one forecast per step; its intervals come "
                          "from calibration (level=), or train a model with quantiles")
