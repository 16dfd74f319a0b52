"""build_model, configs, parameter groups and the import weight of damcha_ts.models."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from damcha_ts.errors import ConfigError
from damcha_ts.models import (
    MODEL_NAMES,
    AttentionConfig,
    DamchaAttention,
    Gateformer,
    GateformerConfig,
    ITransformer,
    ITransformerConfig,
    MetricGenerator,
    MultiHeadAttention,
    build_model,
    make_config,
)

SMALL = {"d_model": 16, "n_heads": 4, "d_ff": 16, "e_layers": 2, "generator_hidden": (8,)}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_config_round_trips_through_build_model(name):
    model = build_model({"name": name, "seq_len": 48, "pred_len": 12, **SMALL})
    assert model.name == name
    rebuilt = build_model(dataclasses.asdict(model.config) | {"name": model.name})
    assert rebuilt.config == model.config and type(rebuilt) is type(model)
    assert model(torch.randn(2, 48, 3)).shape == (2, 12, 3)


def test_name_sets_the_attention_switch():
    itransformer = build_model("itransformer_damcha", **SMALL)
    assert isinstance(itransformer, ITransformer) and itransformer.config.attention == "damcha"
    assert all(isinstance(l.attention, DamchaAttention) for l in itransformer.encoder.layers)
    gateformer = build_model("gateformer_damcha", **SMALL)
    assert isinstance(gateformer, Gateformer) and gateformer.config.variate_attention == "damcha"
    assert all(isinstance(l.attention, MultiHeadAttention) for l in gateformer.temporal_encoder.layers)
    assert all(isinstance(l.attention, DamchaAttention) for l in gateformer.variate_encoder.layers)
    # the family name leaves the choice to the explicit keys
    explicit = build_model("gateformer", temporal_attention="damcha", variate_attention="damcha", **SMALL)
    assert all(isinstance(l.attention, DamchaAttention) for l in explicit.temporal_encoder.layers)
    assert build_model({"name": "itransformer", "attention": "damcha", **SMALL}).name == "itransformer_damcha"
    assert build_model("itransformer_mha", attention="mha", **SMALL).config.attention == "mha"


def test_unknown_key_names_the_key_and_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown key 'dmodel'.*valid keys: name, .*d_model"):
        build_model({"name": "itransformer_damcha", "dmodel": 64})
    with pytest.raises(ConfigError, match=r"unknown key 'patch_len'"):
        build_model("itransformer_mha", patch_len=8)  # a Gateformer key
    with pytest.raises(ConfigError, match=r"unknown model name 'patchtst'; valid names: itransformer_mha"):
        build_model("patchtst")
    with pytest.raises(ConfigError, match="contradicts attention='mha'"):
        build_model({"name": "itransformer_damcha", "attention": "mha"})


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("n_heads", 3, "divisible by n_heads=3"),
        ("parameterization", "dense", "parameterization='dense'"),
        ("attn_backend", "flash", "attn_backend='flash'"),
        ("dropout", 1.5, "dropout=1.5"),
        ("e_layers", 0, "e_layers=0"),
        ("generator_hidden", (64, -1), "generator_hidden"),
        ("generator_hidden", "256", "generator_hidden='256'; expected a sequence"),  # not widths 2, 5, 6
        ("share_generator", "yes", "share_generator='yes'"),
        ("activation", "swish", "activation='swish'"),
    ],
)
def test_bad_values_are_refused_with_the_field_named(key, value, message):
    with pytest.raises(ConfigError, match=message):
        make_config("itransformer_damcha", **{key: value})


def test_config_classes_and_lists_from_yaml():
    config = make_config({"name": "gateformer_damcha", "generator_hidden": [32, 64]})
    assert isinstance(config, GateformerConfig) and config.generator_hidden == (32, 64)
    assert isinstance(make_config("itransformer_mha"), ITransformerConfig)
    attention = ITransformerConfig(attention="damcha", n_heads=4, d_model=16).attention_config("damcha")
    assert attention == AttentionConfig(kind="damcha", n_heads=4, dropout=0.1)


@pytest.mark.parametrize("name", ["itransformer_damcha", "gateformer_damcha"])
@pytest.mark.parametrize("share", [True, False])
def test_parameter_groups_cover_every_parameter_once(name, share):
    model = build_model(name, share_generator=share, **SMALL)
    groups = model.parameter_groups(1e-3, weight_decay=0.08)
    grouped = [id(p) for g in groups for p in g["params"]]
    assert sorted(grouped) == sorted(id(p) for p in model.parameters())
    assert len(grouped) == len(set(grouped))
    by_name = {g["name"]: g for g in groups}
    assert set(by_name) == {"default", "damcha_compact_x4"}
    assert by_name["default"]["lr"] == 1e-3 and by_name["default"]["weight_decay"] == 0.08
    compact = by_name["damcha_compact_x4"]
    assert compact["lr"] == pytest.approx(4e-3) and compact["weight_decay"] == pytest.approx(0.02)
    n_generators = 1 if share else 2
    assert len(compact["params"]) == 2 * n_generators  # reduced weight and bias per generator
    assert all(p.shape[0] == 16 * 4 for p in compact["params"])  # D * dh rows


def test_full_parameterization_and_mha_have_one_group():
    for model in (build_model("itransformer_damcha", parameterization="full", **SMALL), build_model("gateformer_mha", **SMALL)):
        (group,) = model.parameter_groups(5e-4)
        assert group["lr"] == 5e-4 and group["weight_decay"] == 0.0 and group["name"] == "default"


@pytest.mark.parametrize("static", [False, True])
def test_compact_lr_scale_replaces_the_head_factor(static):
    model = build_model("itransformer_damcha", static_metric=static, **SMALL)
    groups = {g["name"]: g for g in model.parameter_groups(1e-3, weight_decay=0.08, compact_lr_scale=1.0)}
    assert set(groups) == {"default", "damcha_compact_x1"}
    assert groups["damcha_compact_x1"]["lr"] == 1e-3 and groups["damcha_compact_x1"]["weight_decay"] == 0.08
    halves = {g["name"]: g for g in model.parameter_groups(1e-3, weight_decay=0.08, compact_lr_scale=0.5)}
    assert halves["damcha_compact_x0.5"]["lr"] == pytest.approx(5e-4)
    assert halves["damcha_compact_x0.5"]["weight_decay"] == pytest.approx(0.16)


@pytest.mark.parametrize("name, extra", [("itransformer_mha", {}), ("itransformer_damcha", {"parameterization": "full"})])
def test_compact_lr_scale_without_compact_parameters_is_an_error(name, extra):
    model = build_model(name, **extra, **SMALL)
    with pytest.raises(ConfigError, match="compact_lr_scale=2.0 needs a DAMCHA model"):
        model.parameter_groups(1e-3, compact_lr_scale=2.0)


@pytest.mark.parametrize("name", ["itransformer_damcha", "gateformer_damcha"])
@pytest.mark.parametrize("share", [True, False])
def test_generator_dropout_defaults_to_the_attention_dropout_and_can_differ(name, share):
    def generator_dropouts(model):
        return {m.p for g in model.modules() if isinstance(g, MetricGenerator) for m in g.modules() if isinstance(m, torch.nn.Dropout)}

    def attention_dropouts(model):
        return {m.dropout for m in model.modules() if isinstance(m, DamchaAttention)}

    assert generator_dropouts(build_model(name, dropout=0.3, share_generator=share, **SMALL)) == {0.3}
    ablated = build_model(name, dropout=0.3, generator_dropout=0.0, share_generator=share, **SMALL)
    assert generator_dropouts(ablated) == {0.0} and attention_dropouts(ablated) == {0.3}
    with pytest.raises(ConfigError, match="generator_dropout=1.5"):
        build_model(name, generator_dropout=1.5, **SMALL)


@pytest.mark.parametrize("name", ["itransformer_damcha", "gateformer_damcha"])
@pytest.mark.parametrize("share", [True, False])
def test_generator_init_reaches_every_generator_of_the_model(name, share):
    generators = [m for m in build_model(name, generator_init="identity", share_generator=share, **SMALL).modules()
                  if isinstance(m, MetricGenerator)]
    assert generators and all(g.init == "identity" for g in generators)
    assert all(g.init == "default" for g in build_model(name, share_generator=share, **SMALL).modules()
               if isinstance(g, MetricGenerator))
    with pytest.raises(ConfigError, match="generator_init='zero'"):
        build_model(name, generator_init="zero", **SMALL)


def test_a_lambda_schedule_keeps_the_group_ratio():
    model = build_model("itransformer_damcha", **SMALL)
    optimizer = torch.optim.Adam(model.parameter_groups(1e-3))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 0.5**epoch)
    for _ in range(3):
        optimizer.step()
        schedule.step()
    rates = {g["name"]: g["lr"] for g in optimizer.param_groups}
    assert rates["damcha_compact_x4"] == pytest.approx(4 * rates["default"])
    assert rates["default"] == pytest.approx(1e-3 / 8)


def test_importing_the_models_stays_light():
    code = (
        "import sys, damcha_ts, damcha_ts.models; "
        "heavy = [m for m in ('triton', 'matplotlib', 'optuna', 'gluonts', 'lightning', 'pandas') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
