"""Build any model from a config dict, so configs, CLI, leaderboard and tuning construct models alike.

    build_model({"name": "itransformer_damcha", "seq_len": 96, "pred_len": 96, "d_model": 256})
    build_model("gateformer_mha", pred_len=192)

The name picks the family and sets its attention switch (``attention`` for iTransformer,
``variate_attention`` for Gateformer). The bare family names ``"itransformer"`` / ``"gateformer"``
leave the switch to the explicit keys. ``asdict(model.config) | {"name": model.name}`` rebuilds the model.
"""

from __future__ import annotations

from dataclasses import fields

from damcha_ts.errors import ConfigError
from damcha_ts.models.base import ForecastModel
from damcha_ts.models.gateformer import Gateformer, GateformerConfig
from damcha_ts.models.itransformer import ITransformer, ITransformerConfig

MODEL_NAMES = ("itransformer_mha", "itransformer_damcha", "gateformer_mha", "gateformer_damcha")

# family -> (config class, model class, the config field that the name's suffix sets)
FAMILIES = {
    "itransformer": (ITransformerConfig, ITransformer, "attention"),
    "gateformer": (GateformerConfig, Gateformer, "variate_attention"),
}


def make_config(config: dict | str, **overrides) -> ITransformerConfig | GateformerConfig:
    """The validated config dataclass for a name or a ``{"name": ..., **hyperparameters}`` dict."""
    values = {"name": config} if isinstance(config, str) else dict(config)
    values.update(overrides)
    name = values.pop("name", None)
    family, _, kind = str(name).partition("_")
    if name not in MODEL_NAMES and name not in FAMILIES:
        valid_names = ", ".join(MODEL_NAMES + tuple(FAMILIES))
        raise ConfigError(f"model name {name!r} is unknown; valid names: {valid_names}")
    config_class, _, switch = FAMILIES[family]
    valid = [f.name for f in fields(config_class)]
    for key in values:
        if key not in valid:
            raise ConfigError(
                f"unknown key {key!r} for model {name!r}; valid keys: name, {', '.join(valid)}"
            )
    if kind:
        if values.get(switch, kind) != kind:
            raise ConfigError(f"model name {name!r} contradicts {switch}={values[switch]!r}")
        values[switch] = kind
    return config_class(**values)


def build_model(config: dict | str, **overrides) -> ForecastModel:
    """A new model (random init, float32, train mode) from a name or a config dict; see module doc."""
    model_config = make_config(config, **overrides)
    model_class = next(m for c, m, _ in FAMILIES.values() if isinstance(model_config, c))
    return model_class(model_config)
