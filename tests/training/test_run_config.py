"""RunConfig: one typed, frozen run configuration that files, flags, keywords and dicts all become."""

from __future__ import annotations

import dataclasses

import pytest

from damcha_ts.data.options import ProtocolOptions, ReadOptions, split_options
from damcha_ts.errors import ConfigError
from damcha_ts.models import GateformerConfig, ITransformerConfig
from damcha_ts.training.config import SCHEMA_VERSION, RunConfig, TrainingConfig, config_hash, split_keywords


def test_a_shipped_config_loads_into_typed_sections():
    run = RunConfig.load("itransformer_damcha/etth1", horizon=336)
    assert isinstance(run.model, ITransformerConfig) and run.model.attention == "damcha"
    assert isinstance(run.data.protocol, ProtocolOptions) and isinstance(run.data.read, ReadOptions)
    assert isinstance(run.training, TrainingConfig)
    assert run.data.dataset == "ETTh1" and run.data.protocol.pred_len == 336 == run.model.pred_len
    assert run.model_name == "itransformer_damcha" and run.config_hash() == config_hash(run.to_dict())


def test_sections_are_frozen():
    run = RunConfig.load("gateformer_mha/etth2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.training.seed = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.data = None


def test_the_dict_form_is_a_fixed_point_and_loading_a_runconfig_returns_it():
    run = RunConfig.load("gateformer_damcha/weather", horizon=192, overrides=["training.max_epochs=2"])
    again = RunConfig.from_dict(run.to_dict())
    assert again == run and again.to_dict() == run.to_dict()
    assert RunConfig.load(run) is run
    assert RunConfig.load(run, overrides=["training.seed=5"]).training.seed == 5


def test_typed_updates_apply_before_override_text_which_wins():
    run = RunConfig.load(
        "itransformer_mha/etth1",
        updates={"data": {"seq_len": 48, "sep": ";"}, "training": {"devices": "2", "max_epochs": 4}},
        overrides=["training.max_epochs=3"],
    )
    assert run.data.protocol.seq_len == 48 == run.model.seq_len and run.data.read.sep == ";"
    assert run.training.devices == 2 and run.training.max_epochs == 3
    assert run.to_dict()["data"]["sep"] == ";"


def test_schema_two_fields_appear_in_the_dict_only_when_set():
    assert SCHEMA_VERSION == 2
    plain = RunConfig.load("itransformer_damcha/etth1").to_dict()
    for section, key in (("training", "quantiles"), ("training", "compact_lr_scale"),
                         ("model", "generator_dropout"), ("model", "generator_init")):
        assert key not in plain[section]
    quantile = RunConfig.load("itransformer_damcha/etth1", overrides=["training.quantiles=[0.9, 0.1]"])
    assert quantile.to_dict()["training"]["quantiles"] == [0.1, 0.5, 0.9]
    # Version-1 fields are always spelled out, defaults included.
    assert {"fill", "allow_irregular", "split", "target"} <= set(plain["data"])


@pytest.mark.parametrize(
    ("updates", "message"),
    [({"data": {"time_column": "ts"}}, r"unknown key 'data\.time_column'; did you mean time_col"),
     ({"data": {"seq_len": 0}}, r"data\.seq_len must be a positive integer"),
     ({"data": {"features": "X"}}, r"features must be one of"),
     ({"data": {"layout": "tall"}}, r"layout must be one of"),
     ({"data": {"ignore": 3}}, r"data\.ignore=3: expected a list of column names"),
     ({"model": {"d_modle": 8}}, r"unknown key 'model\.d_modle'; did you mean d_model\?"),
     ({"model": {"name": "itransformer_damch"}}, r"unknown model\.name 'itransformer_damch'; did you mean itransformer_damcha"),
     ({"model": {"seq_len": 12}}, r"model\.seq_len=12 disagrees with data\.seq_len=96"),
     ({"training": {"batch_size": "many"}}, r"training\.batch_size='many' is not a valid int"),
     ({"trainer": {"x": 1}}, r"unknown key 'trainer'")],
)
def test_bad_settings_are_refused_with_the_key_named(updates, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.load("itransformer_mha/etth1", updates=updates)


def test_a_dataset_is_required():
    with pytest.raises(ConfigError, match="data.dataset is missing"):
        RunConfig.from_dict({"data": {}, "model": {"name": "itransformer_mha"}})


def test_data_options_split_into_read_and_protocol_halves():
    read, protocol = split_options({"seq_len": "48", "time_col": "ts", "ignore": "notes", "fill": "zero"})
    assert protocol == ProtocolOptions(seq_len=48) and read.ignore == ("notes",)
    assert read.given() == {"time_col": "ts", "ignore": ["notes"], "fill": "zero", "allow_irregular": False}
    assert ReadOptions().given() == {"fill": None, "allow_irregular": False}  # always part of a run


def test_mixed_keywords_split_into_model_and_training_by_field_name():
    model, training = split_keywords({"d_model": 64, "patience": 5, "dropout": 0.2, "seed": 1})
    assert model == {"d_model": 64, "dropout": 0.2} and training == {"patience": 5, "seed": 1}


def test_a_bare_family_name_with_its_switch_resolves_to_the_full_name():
    run = RunConfig.load({"extends": "gateformer_mha/etth1", "model": {"name": "gateformer", "variate_attention": "damcha"}})
    assert isinstance(run.model, GateformerConfig) and run.model_name == "gateformer_damcha"
    assert run.to_dict()["model"]["name"] == "gateformer_damcha"
