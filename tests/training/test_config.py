"""Run configs: the shipped YAMLs against the protocol tables, extends/horizons/overrides, errors."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from damcha_ts.errors import ConfigError
from damcha_ts.training import available_configs, config_hash, load_run_config

ROOT = Path(__file__).resolve().parents[2]

HORIZONS = (96, 192, 336, 720)

# protocol.md §2.3 (iTransformer scripts): dataset -> {horizon: (e_layers, d_model, d_ff, batch, lr)}.
ITRANSFORMER = {
    "etth1": {96: (2, 256, 256, 32, 1e-4), 192: (2, 256, 256, 32, 1e-4), 336: (2, 512, 512, 32, 1e-4), 720: (2, 512, 512, 32, 1e-4)},
    "etth2": {h: (2, 128, 128, 32, 1e-4) for h in HORIZONS},
    "ettm1": {h: (2, 128, 128, 32, 1e-4) for h in HORIZONS},
    "ettm2": {h: (2, 128, 128, 32, 1e-4) for h in HORIZONS},
    "weather": {h: (3, 512, 512, 32, 1e-4) for h in HORIZONS},
    "electricity": {h: (3, 512, 512, 16, 5e-4) for h in HORIZONS},
    "traffic": {h: (4, 512, 512, 16, 1e-3) for h in HORIZONS},
}

# protocol.md §3.2 (Gateformer scripts): dataset -> (n_heads, [(e_layers, d_model, d_ff, lr) per horizon]).
GATEFORMER = {
    "etth1": (4, [(1, 64, 64, 1e-4), (2, 64, 64, 5e-4), (2, 128, 128, 5e-4), (2, 64, 64, 5e-4)]),
    "etth2": (4, [(2, 128, 128, 5e-4), (1, 64, 64, 5e-4), (2, 64, 64, 1e-4), (1, 128, 128, 1e-4)]),
    "ettm1": (4, [(1, 64, 64, 5e-4), (1, 128, 128, 5e-4), (1, 128, 128, 1e-4), (1, 64, 64, 5e-4)]),
    "ettm2": (4, [(1, 64, 64, 5e-4), (1, 64, 64, 1e-4), (2, 64, 64, 5e-4), (2, 64, 64, 5e-4)]),
    "weather": (8, [(2, 512, 1024, 1e-4), (2, 512, 1024, 1e-4), (2, 256, 256, 5e-4), (2, 256, 512, 1e-4)]),
    "traffic": (8, [(2, 512, 1024, 5e-4), (2, 512, 1024, 5e-4), (3, 512, 1024, 5e-4), (3, 512, 512, 5e-4)]),
    "electricity": (8, [(2, 512, 512, 5e-4), (4, 512, 1024, 5e-4), (2, 512, 1024, 5e-4), (2, 512, 1024, 5e-4)]),
}


@pytest.mark.parametrize("dataset", sorted(ITRANSFORMER))
@pytest.mark.parametrize("horizon", HORIZONS)
def test_itransformer_configs_match_the_official_scripts(dataset, horizon):
    config = load_run_config(f"itransformer_mha/{dataset}", horizon=horizon)
    e_layers, d_model, d_ff, batch, lr = ITRANSFORMER[dataset][horizon]
    model, training, data = config["model"], config["training"], config["data"]
    assert (model["e_layers"], model["d_model"], model["d_ff"]) == (e_layers, d_model, d_ff)
    assert (training["batch_size"], training["learning_rate"]) == (batch, lr)
    assert (model["n_heads"], model["dropout"], model["seq_len"], model["pred_len"]) == (8, 0.1, 96, horizon)
    assert (training["max_epochs"], training["patience"], training["lr_schedule"], training["seed"]) == (10, 3, "type1", 2023)
    assert (data["seq_len"], data["pred_len"], data["features"], data["time_features_freq"]) == (96, horizon, "M", "h")


@pytest.mark.parametrize("dataset", sorted(GATEFORMER))
def test_gateformer_configs_match_the_official_scripts_per_horizon(dataset):
    heads, cells = GATEFORMER[dataset]
    for horizon, (e_layers, d_model, d_ff, lr) in zip(HORIZONS, cells):
        config = load_run_config(f"gateformer_mha/{dataset}", horizon=horizon)
        model, training = config["model"], config["training"]
        assert (model["e_layers"], model["d_model"], model["d_ff"], model["n_heads"]) == (e_layers, d_model, d_ff, heads), horizon
        assert training["learning_rate"] == lr, horizon
        assert (training["batch_size"], training["seed"], training["max_epochs"], training["patience"]) == (8, 2021, 10, 3)
        assert (model["patch_len"], model["stride"], model["dropout"]) == (8, 8, 0.1)


@pytest.mark.parametrize("name", [n for n in available_configs() if "_damcha/" in n])
@pytest.mark.parametrize("horizon", HORIZONS)
def test_damcha_variants_differ_from_mha_only_in_the_attention(name, horizon):
    damcha = load_run_config(name, horizon=horizon)
    mha = load_run_config(name.replace("_damcha/", "_mha/"), horizon=horizon)
    switch = "attention" if name.startswith("itransformer") else "variate_attention"
    assert damcha["model"].pop(switch) == "damcha" and mha["model"].pop(switch) == "mha"
    assert damcha["model"].pop("name").endswith("_damcha") and mha["model"].pop("name").endswith("_mha")
    assert damcha == mha


def test_every_model_has_configs_for_the_seven_benchmarks():
    names = set(available_configs())
    for model in ("itransformer_mha", "itransformer_damcha", "gateformer_mha", "gateformer_damcha"):
        for dataset in ("etth1", "etth2", "ettm1", "ettm2", "weather", "traffic", "electricity"):
            assert f"{model}/{dataset}" in names


def test_exchange_keeps_the_single_epoch_quirk_of_the_official_script():
    assert load_run_config("itransformer_mha/exchange", horizon=336)["training"]["max_epochs"] == 1
    assert load_run_config("itransformer_mha/exchange", horizon=96)["training"]["max_epochs"] == 10


def test_overrides_win_over_horizon_sections_and_are_yaml_parsed():
    config = load_run_config(
        "itransformer_mha/etth1",
        horizon=336,
        overrides=["model.d_model=64", "training.learning_rate=1e-3", "model.generator_hidden=[8, 16]", "training.deterministic=true"],
    )
    assert config["model"]["d_model"] == 64  # horizons.336 says 512
    assert config["model"]["d_ff"] == 512  # still from horizons.336
    assert config["training"]["learning_rate"] == pytest.approx(1e-3)  # "1e-3" is a string in YAML 1.1
    assert config["model"]["generator_hidden"] == [8, 16]
    assert config["training"]["deterministic"] is True


def test_overridden_pred_len_selects_the_horizon_section():
    config = load_run_config("itransformer_mha/etth1", overrides=["data.pred_len=720"])
    assert (config["data"]["pred_len"], config["model"]["pred_len"], config["model"]["d_model"]) == (720, 720, 512)


def test_resolved_config_is_a_fixed_point_and_its_hash_ignores_key_order():
    config = load_run_config("gateformer_damcha/weather", horizon=192)
    again = load_run_config(config)
    assert again == config
    reordered = {section: dict(reversed(list(values.items()))) for section, values in reversed(list(config.items()))}
    assert config_hash(reordered) == config_hash(config)
    changed = load_run_config(config, overrides=["training.seed=7"])
    assert config_hash(changed) != config_hash(config)
    assert len(config_hash(config)) == 12


def test_fields_added_later_leave_old_hashes_alone_until_set():
    """A new training field at its default must not change the hash of runs recorded before it existed:
    the committed leaderboard row of this cell was hashed before ``compact_lr_scale``, ``quantiles``,
    ``generator_dropout`` and ``generator_init`` existed."""
    rows = pd.read_csv(ROOT / "benchmarks" / "results" / "leaderboard.csv")
    recorded = rows.query("dataset == 'ETTh1' and model == 'itransformer_damcha' and horizon == 96 and seed == 2023")
    config = load_run_config("itransformer_damcha/etth1", horizon=96, overrides=["training.seed=2023"])
    assert "compact_lr_scale" not in config["training"] and "quantiles" not in config["training"]
    assert config_hash(config) == recorded["config_hash"].iloc[-1]
    ablation = load_run_config(config, overrides=["training.compact_lr_scale=1"])
    assert ablation["training"]["compact_lr_scale"] == 1.0
    assert config_hash(ablation) != config_hash(config)
    with pytest.raises(ConfigError, match="training.compact_lr_scale"):
        load_run_config(config, overrides=["training.compact_lr_scale=0"])
    generator = load_run_config(config, overrides=["model.generator_dropout=0"])
    assert generator["model"]["generator_dropout"] == 0 and config_hash(generator) != config_hash(config)
    assert "generator_init" not in config["model"]
    identity = load_run_config(config, overrides=["model.generator_init=identity"])
    assert identity["model"]["generator_init"] == "identity" and config_hash(identity) != config_hash(config)


def test_dict_config_with_extends_and_bare_family_name(tmp_path):
    config = load_run_config(
        {"extends": "itransformer_mha/etth2", "model": {"name": "itransformer", "attention": "damcha"}}, horizon=192
    )
    assert config["model"]["name"] == "itransformer_damcha"
    assert config["model"]["d_model"] == 128 and config["data"]["dataset"] == "ETTh2"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["data.sequence_len=96"], "data.sequence_len"),
        (["model.d_modle=64"], "model.d_modle"),
        (["training.epochs=3"], "training.epochs"),
        (["optimizer.lr=1"], "optimizer.lr"),
        (["training.lr_schedule=linear"], "training.lr_schedule"),
        (["training.max_epochs=many"], "training.max_epochs"),
        (["model.name=transformer"], "model.name"),
        (["d_model=3"], "d_model"),
    ],
)
def test_bad_keys_and_values_name_the_key(overrides, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_run_config("itransformer_mha/etth1", overrides=overrides)


def test_unknown_model_key_suggests_the_close_one():
    with pytest.raises(ConfigError, match="did you mean d_model"):
        load_run_config("itransformer_mha/etth1", overrides=["model.d_modle=64"])


def test_bad_files(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match="loop"):
        load_run_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("data: {dataset: ETTh1}\nmodels: {name: itransformer_mha}\n")
    with pytest.raises(ConfigError, match="models"):
        load_run_config(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text("model: {name: itransformer_mha}\n")
    with pytest.raises(ConfigError, match="data.dataset"):
        load_run_config(tmp_path / "d.yaml")
    with pytest.raises(ConfigError, match="itransformer_damcha/etth1"):
        load_run_config("itransformer_damcha/etth")
    with pytest.raises(ConfigError, match="horizon"):
        load_run_config("itransformer_mha/etth1", horizon=0)
    with pytest.raises(ConfigError, match="disagrees"):
        load_run_config("itransformer_mha/etth1", overrides=["model.seq_len=48"])


def test_plain_values_round_trip_through_yaml_unchanged():
    import datetime

    import yaml

    from damcha_ts.training.config import plain_values

    value = {"a": (1, [Path("x/y"), pd.Timestamp("2018-06-26 19:00")]), "b": {"c": datetime.date(2020, 1, 2)}}
    plain = plain_values(value)
    assert plain == {"a": [1, ["x/y", "2018-06-26 19:00:00"]], "b": {"c": "2020-01-02"}}
    assert yaml.safe_load(yaml.safe_dump(plain)) == plain


def test_paths_and_tuples_given_in_code_resolve_to_yaml_data(data_root):
    import yaml

    path = next(Path(data_root).glob("ETTh1.csv*"))
    split = {"train": (0, 8640), "val": (8640, 11520), "test": (11520, 14400)}
    config = load_run_config({"extends": "itransformer_mha/etth1", "data": {"dataset": path, "split": split}})
    assert config["data"]["dataset"] == str(path) and config["data"]["split"]["train"] == [0, 8640]
    assert yaml.safe_load(yaml.safe_dump(config)) == config
    assert load_run_config(config) == config
