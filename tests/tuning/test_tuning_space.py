"""Search files: parsing, errors that name the file and key, conditional sampling, storage URLs."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import optuna
import pytest
import yaml

from damcha_ts.errors import ConfigError
from damcha_ts.tuning import load_search_spec, parse_search_spec, resolve_storage_url
from damcha_ts.tuning.space import as_updates, set_path
from damcha_ts.tuning.study import worker_seed
from damcha_ts.workqueue.queue import new_launch_token

REPO = Path(__file__).resolve().parents[2]
SEARCH_DIR = REPO / "configs" / "search"

CONDITIONAL = {
    "sampler": {"seed": 3, "n_startup_trials": 4},
    "pruner": {"type": "median", "n_startup_trials": 2, "n_warmup_steps": 0},
    "space": {
        "model.name": {"type": "categorical", "choices": ["itransformer_mha", "itransformer_damcha"]},
        "training.learning_rate": {"type": "float", "low": "1e-5", "high": 1.0e-2, "log": True},
        "model.e_layers": {"type": "int", "low": 1, "high": 5, "step": 2},
        "model.dropout": {"type": "float", "low": 0.0, "high": 0.3, "step": 0.1},
        "model.generator_hidden": {
            "type": "categorical",
            "choices": [[8], [16, 32]],
            "when": {"model.name": "itransformer_damcha"},
        },
        "model.share_generator": {
            "type": "categorical",
            "choices": [True, False],
            "when": {"model.name": ["itransformer_damcha"], "model.e_layers": [3, 5]},
        },
    },
}
BASE = {"data": {"dataset": "ETTh1"}, "model": {"name": "itransformer_damcha", "d_model": 16}, "training": {}}


def test_conditional_parameters_are_sampled_only_when_their_condition_holds():
    spec = parse_search_spec(CONDITIONAL, source="cond.yaml")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = []

    def objective(trial):
        values = spec.sample(trial, BASE)
        config = copy.deepcopy(BASE)
        for path, value in values.items():
            set_path(config, path, value)
        seen.append((config, values, dict(trial.params)))
        return 0.0

    study.optimize(objective, n_trials=60)
    damcha = [s for s in seen if s[0]["model"]["name"] == "itransformer_damcha"]
    assert damcha and len(damcha) < len(seen)  # both branches were explored
    for config, values, params in seen:
        model, lr = config["model"], config["training"]["learning_rate"]
        assert 1e-5 <= lr <= 1e-2
        assert model["e_layers"] in (1, 3, 5)
        assert min(abs(model["dropout"] - k / 10) for k in range(4)) < 1e-9
        is_damcha = model["name"] == "itransformer_damcha"
        assert ("generator_hidden" in model) == is_damcha
        assert ("model.generator_hidden" in params) == is_damcha
        if is_damcha:
            # Optuna stores list choices as JSON text; the config gets the list back.
            assert model["generator_hidden"] in ([8], [16, 32])
            assert params["model.generator_hidden"] in ("[8]", "[16, 32]")
        assert ("share_generator" in model) == (is_damcha and model["e_layers"] in (3, 5))
        assert list(values) == [k for k in CONDITIONAL["space"] if k in values]  # file order
    assert BASE["model"] == {"name": "itransformer_damcha", "d_model": 16}  # only read


def test_log_scale_spreads_samples_over_decades():
    spec = parse_search_spec(
        {"space": {"training.learning_rate": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True}}}
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    values = []
    study.optimize(
        lambda t: values.append(spec.sample(t, BASE)["training.learning_rate"]) or 0.0, n_trials=200
    )
    decades = [sum(10 ** (k - 1) <= v < 10**k for v in values) for k in range(-4, 0)]
    # Uniform in log10 over 4 decades: about 50 per decade; a linear scale would put ~90% in the top one.
    assert all(25 <= n <= 80 for n in decades), decades


def test_conditions_read_keys_derived_from_sampled_values():
    from damcha_ts.training import RunConfig

    spec = parse_search_spec({"space": {
        "model.name": {"type": "categorical", "choices": ["itransformer_mha", "itransformer_damcha"]},
        "model.share_generator": {"type": "categorical", "choices": [True, False],
                                  "when": {"model.attention": "damcha"}},
    }})

    def resolve(values):
        return RunConfig.load(BASE, updates=as_updates(values)).to_dict()

    # The base is DAMCHA; a trial that samples MHA must not also sample (and record) a DAMCHA option.
    mha = spec.sample(optuna.trial.FixedTrial({"model.name": "itransformer_mha"}), BASE, resolve)
    assert mha == {"model.name": "itransformer_mha"}
    damcha = {"model.name": "itransformer_damcha", "model.share_generator": False}
    assert spec.sample(optuna.trial.FixedTrial(damcha), BASE, resolve) == damcha


def test_fixed_trial_values_become_config_overrides():
    from damcha_ts.training import RunConfig

    spec = parse_search_spec(CONDITIONAL)
    chosen = {
        "model.name": "itransformer_mha",
        "training.learning_rate": 3e-5,
        "model.e_layers": 3,
        "model.dropout": 0.2,
    }
    values = spec.sample(optuna.trial.FixedTrial(chosen), BASE)
    assert values == chosen  # mha: no generator parameters asked for
    damcha = {
        **chosen,
        "model.name": "itransformer_damcha",
        "model.generator_hidden": "[16, 32]",
        "model.share_generator": False,
    }
    values = spec.sample(optuna.trial.FixedTrial(damcha), BASE)
    assert values["model.generator_hidden"] == [16, 32]
    # Applied as overrides, before defaults are filled in: a searched model name re-derives the
    # attention switch of a resolved base config instead of contradicting it.
    resolved = RunConfig.load(BASE, updates=as_updates(values)).to_dict()
    assert resolved["model"]["generator_hidden"] == [16, 32] and resolved["model"]["share_generator"] is False
    assert resolved["training"]["learning_rate"] == 3e-5  # "3e-05" survives YAML parsing as a float
    mha = RunConfig.load(BASE, updates=as_updates({"model.name": "itransformer_mha"})).to_dict()
    assert (mha["model"]["name"], mha["model"]["attention"]) == ("itransformer_mha", "mha")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"spaces": {}}, "search.yaml: unknown key 'spaces'; did you mean space? (valid keys: study_name,"),
        ({"space": {"d_model": {"type": "int", "low": 1, "high": 2}}}, "section.key"),
        ({"space": {"model.d_model": {"type": "integer", "low": 1, "high": 2}}}, "model.d_model.type"),
        ({"space": {"model.d_model": {"type": "int", "low": 4, "high": 2}}}, "low=4 must be smaller"),
        ({"space": {"model.d_model": {"type": "int", "low": 1.5, "high": 2}}}, "not an integer"),
        (
            {"space": {"training.learning_rate": {"type": "float", "low": 0, "high": 1, "log": True}}},
            "log scale needs low > 0",
        ),
        ({"space": {"model.d_model": {"type": "categorical", "choices": []}}}, "non-empty list"),
        ({"space": {"model.d_model": {"type": "categorical", "choices": [1, 1]}}}, "duplicates"),
        (
            {"space": {"model.d_model": {"type": "categorical", "choices": [1], "low": 0}}},
            "'low' does not apply",
        ),
        (
            {"space": {"model.d_model": {"type": "int", "low": 1, "high": 4, "spet": 1}}},
            "search.yaml: unknown key 'space.model.d_model.spet' (valid keys: type, low, high, log, step,",
        ),
        (
            {"space": {"model.d_model": {"type": "int", "low": 1, "high": 4, "hihg": 1}}},
            "unknown key 'space.model.d_model.hihg'; did you mean high?",
        ),
        ({"pruner": {"type": "percentile"}}, "pruner.type='percentile'"),
        (
            {"pruner": {"type": "median", "min_resource": 1}},
            "search.yaml (pruner type median): unknown key 'pruner.min_resource' (valid keys: type, n_startup_trials,",
        ),
        ({"sampler": {"sed": 1}}, "search.yaml: unknown key 'sampler.sed'; did you mean seed?"),
        (
            {"storage": {"heartbeat": 5}},
            "search.yaml: unknown key 'storage.heartbeat'; did you mean heartbeat_interval?",
        ),
        ({"storage": {"heartbeat_interval": 10, "grace_period": 5}}, "grace_period > heartbeat_interval"),
        ({"trainer": {"callbacks": []}}, "trainer.callbacks is set by the study"),
        ({"pruner": "median"}, "'pruner' must be a mapping"),
        ({"sampler": 5}, "'sampler' must be a mapping"),
        ({"storage": ["max_retry"]}, "'storage' must be a mapping"),
        ({"trainer": "fast"}, "'trainer' must be a mapping"),
        ({"pruner": {"n_warmup_steps": -3}}, "pruner.n_warmup_steps=-3 must be >= 0"),
        ({"pruner": {"interval_steps": 0}}, "pruner.interval_steps=0 must be >= 1"),
        ({"pruner": {"type": "hyperband", "reduction_factor": 1}}, "pruner.reduction_factor=1 must be >= 2"),
        ({"sampler": {"n_startup_trials": -1}}, "sampler.n_startup_trials=-1 must be >= 0"),
        ({"sampler": {"seed": -7}}, "sampler.seed=-7 must be >= 0"),
        ({"storage": {"max_retry": -1}}, "storage.max_retry=-1 must be >= 0"),
    ],
)
def test_bad_search_files_name_the_file_and_key(change, message):
    data = {"space": {"model.d_model": {"type": "int", "low": 8, "high": 16}}, **change}
    with pytest.raises(ConfigError, match="search.yaml") as info:
        parse_search_spec(data, source="search.yaml")
    assert message in str(info.value)


def test_condition_on_a_later_parameter_is_rejected():
    data = {
        "space": {
            "model.generator_hidden": {"type": "categorical", "choices": [[8]], "when": {"model.name": "x"}},
            "model.name": {"type": "categorical", "choices": ["itransformer_mha", "itransformer_damcha"]},
        }
    }
    with pytest.raises(ConfigError, match="uses model.name, which is sampled later"):
        parse_search_spec(data, source="order.yaml")


def test_search_paths_are_checked_against_the_run_config():
    from damcha_ts.training import RunConfig

    def resolve(values):
        return RunConfig.load(BASE, updates=as_updates(values)).to_dict()

    good = parse_search_spec(CONDITIONAL, source="cond.yaml")
    good.check_against(resolve)
    typo = parse_search_spec(
        {"space": {"model.d_modle": {"type": "int", "low": 8, "high": 16}}}, source="typo.yaml"
    )
    with pytest.raises(ConfigError, match=r"typo.yaml: space.model.d_modle.*d_model"):
        typo.check_against(resolve)
    bad_value = parse_search_spec(
        {"space": {"training.lr_schedule": {"type": "categorical", "choices": ["type1", "linear"]}}},
        source="v.yaml",
    )
    with pytest.raises(ConfigError, match=r"v.yaml: space.training.lr_schedule='linear'"):
        bad_value.check_against(resolve)


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ({"model.nmae": "itransformer_damcha"}, "model.nmae is not a key of the run config"),
        ({"model.use_norm": "true"}, "compares model.use_norm (e.g. True, a bool) with ['true']"),
        ({"model.name": "itransformer_damhca"}, "none of ['itransformer_damhca'] is one of its choices"),
    ],
)
def test_a_condition_that_can_never_hold_is_rejected(when, message):
    """A typo in ``when`` would otherwise switch its parameter off for the whole study, silently."""
    from damcha_ts.training import RunConfig

    data = {"space": {
        "model.name": {"type": "categorical", "choices": ["itransformer_mha", "itransformer_damcha"]},
        "model.generator_hidden": {"type": "categorical", "choices": [[8], [16]], "when": when},
    }}
    spec = parse_search_spec(data, source="when.yaml")
    with pytest.raises(ConfigError, match="when.yaml: space.model.generator_hidden.when") as info:
        spec.check_against(lambda values: RunConfig.load(BASE, updates=as_updates(values)).to_dict())
    assert message in str(info.value)


def test_a_condition_on_a_key_derived_from_an_earlier_parameter_is_accepted():
    from damcha_ts.training import RunConfig

    data = {"space": {
        "model.name": {"type": "categorical", "choices": ["itransformer_mha", "itransformer_damcha"]},
        "model.generator_hidden": {"type": "categorical", "choices": [[8], [16]],
                                   "when": {"model.attention": "damcha", "model.d_model": 16}},
    }}
    parse_search_spec(data, source="derived.yaml").check_against(
        lambda values: RunConfig.load(BASE, updates=as_updates(values)).to_dict())


# The --set a shipped search file's documented command gives its base config.
SHIPPED_BASE_OVERRIDES = {"itransformer_damcha_gated.yaml": ["model.metric_gate=true"]}


@pytest.mark.parametrize("path", sorted(SEARCH_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_search_files_fit_their_configs(path):
    from damcha_ts.tuning.objective import BaseConfig

    spec = load_search_spec(path)
    assert spec.study_name == (yaml.safe_load(path.read_text()).get("study_name") or path.stem)
    model = "itransformer_mha" if "mha" in path.stem else "itransformer_damcha"
    base = BaseConfig.of(f"{model}/etth1", overrides=SHIPPED_BASE_OVERRIDES.get(path.name, ()))
    spec.check_against(lambda values: base.resolve(values, complete=True))


def test_a_search_over_a_newer_key_may_include_its_default():
    """Run configs leave newer keys out at their default; the check must still see them kept."""
    from damcha_ts.tuning.objective import BaseConfig

    spec = parse_search_spec({"space": {
        "training.compile": {"type": "categorical", "choices": [False, True]},
        "model.metric_gate": {"type": "categorical", "choices": [False, True]},
    }}, source="newer.yaml")
    base = BaseConfig.of("itransformer_damcha/etth1")
    spec.check_against(lambda values: base.resolve(values, complete=True))
    assert "metric_gate" not in base.resolve({})["model"]  # the hashed form still leaves it out


POINTS_SPACE = {
    "training.learning_rate": {"type": "float", "low": 1.0e-4, "high": 1.0e-2, "log": True},
    "model.e_layers": {"type": "int", "low": 1, "high": 3},
    "model.generator_hidden": {"type": "categorical", "choices": [[8], [4, 8]]},
}


def test_points_are_a_sweep_of_values_the_space_can_take():
    spec = parse_search_spec({"space": POINTS_SPACE, "points": [
        {"training.learning_rate": 1.0e-3, "model.generator_hidden": [4, 8]},
        {"model.e_layers": 2},
    ]}, source="points.yaml")
    assert spec.points == ({"training.learning_rate": 1.0e-3, "model.generator_hidden": [4, 8]}, {"model.e_layers": 2})
    assert spec.encoded_point(spec.points[0]) == {"training.learning_rate": 1.0e-3, "model.generator_hidden": "[4, 8]"}
    # What a FixedTrial of the encoded point samples is the point (list choices decoded again).
    fixed = optuna.trial.FixedTrial({**spec.encoded_point(spec.points[0]), "model.e_layers": 1})
    assert spec.sample(fixed, {}) == {"training.learning_rate": 1.0e-3, "model.e_layers": 1,
                                      "model.generator_hidden": [4, 8]}


@pytest.mark.parametrize("points, message", [
    ({"model.e_layers": 2}, "'points' must be a list"),
    ([{}], "points[0] must be a non-empty mapping"),
    ([{"model.e_layer": 2}], "points[0].model.e_layer is not a parameter of 'space'"),
    ([{"model.generator_hidden": [16]}], "points[0].model.generator_hidden=[16] is not one of its choices"),
    ([{"model.e_layers": 4}], "points[0].model.e_layers=4; expected a int in [1, 3]"),
    ([{"model.e_layers": 1.5}], "points[0].model.e_layers=1.5; expected a int"),
    ([{"training.learning_rate": "fast"}], "points[0].training.learning_rate='fast'; expected a float"),
    ([{"model.e_layers": 2}, {"model.e_layers": 2}], "points[1] repeats points[0]"),
])
def test_bad_points_name_the_file_and_entry(points, message):
    with pytest.raises(ConfigError, match="points.yaml") as info:
        parse_search_spec({"space": POINTS_SPACE, "points": points}, source="points.yaml")
    assert message in str(info.value)


def test_a_point_that_is_no_valid_config_is_named_before_the_study():
    from damcha_ts.tuning.objective import BaseConfig

    spec = parse_search_spec({"space": {
        "model.metric_delta_norm": {"type": "categorical", "choices": [False, True]},
    }, "points": [{"model.metric_delta_norm": True}]}, source="gate.yaml")
    base = BaseConfig.of("itransformer_damcha/etth1")
    with pytest.raises(ConfigError, match=r"gate.yaml: points\[0\] is not a valid config: .*needs metric_gate=True"):
        spec.check_against(lambda values: base.resolve(values, complete=True))


def test_search_files_are_found_by_shipped_name_and_a_near_miss_is_named():
    by_name = load_search_spec("itransformer_damcha_etth1")
    assert Path(by_name.source) == SEARCH_DIR / "itransformer_damcha_etth1.yaml"
    assert by_name.study_name == load_search_spec(SEARCH_DIR / "itransformer_damcha_etth1.yaml").study_name
    assert load_search_spec("search/itransformer_damcha_etth1").source == by_name.source
    with pytest.raises(ConfigError, match=r"search file 'itransformer_damcha_etth' is neither a file nor a shipped "
                                          r"search file; did you mean itransformer_damcha_etth1"):
        load_search_spec("itransformer_damcha_etth")


def test_mha_study_searches_the_damcha_study_space_without_the_generator():
    """Tuned-vs-tuned comparisons need the same budget and the same shared space."""
    damcha = yaml.safe_load((SEARCH_DIR / "itransformer_damcha_etth1.yaml").read_text())
    mha = yaml.safe_load((SEARCH_DIR / "itransformer_mha_etth1.yaml").read_text())
    generator_keys = {"model.generator_hidden", "model.share_generator"}
    assert {k: v for k, v in damcha["space"].items() if k not in generator_keys} == mha["space"]
    assert {k: damcha[k] for k in ("sampler", "pruner", "storage")} == {k: mha[k] for k in ("sampler", "pruner", "storage")}


def test_storage_urls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_storage_url(None, "runs/x") == f"sqlite:///{tmp_path / 'runs/x/study.db'}"
    assert resolve_storage_url("s.db", "o") == f"sqlite:///{tmp_path / 's.db'}"
    assert resolve_storage_url("sqlite:///rel.db", "o") == "sqlite:///rel.db"
    assert resolve_storage_url("postgresql://u@h/db", "o") == "postgresql://u@h/db"
    assert resolve_storage_url("j/study.log", "o") == f"journal://{tmp_path / 'j/study.log'}"
    assert resolve_storage_url("journal:///abs/s.log", "o") == "journal:///abs/s.log"
    with pytest.raises(ConfigError, match="study.txt"):
        resolve_storage_url("study.txt", "o")
    # URLs that cannot hold a shared, resumable study, and a password that must not be shown.
    for url in ("sqlite://", "sqlite:///:memory:"):
        with pytest.raises(ConfigError, match="in-memory SQLite"):
            resolve_storage_url(url, "o")
    with pytest.raises(ConfigError, match=r"'postgres://alice:\*\*\*@db/x'.*postgresql://") as info:
        resolve_storage_url("postgres://alice:s3cret@db/x", "o")
    assert "s3cret" not in str(info.value)


def test_storages_that_cannot_open_are_config_errors_without_the_password():
    from damcha_ts.workqueue.storage import open_storage

    for url, message in (("sqlit:///x.db", "sqlit"),
                         ("postgresql+psycopg2://alice:s3cret@127.0.0.1:1/db", "127.0.0.1")):
        with pytest.raises(ConfigError, match="cannot be opened") as info:
            open_storage(url, heartbeat_interval=60, grace_period=180, max_retry=1)
        assert message in str(info.value) and "s3cret" not in str(info.value)


def test_the_recorded_command_hides_the_database_password():
    from damcha_ts.cli.main import build_parser
    from damcha_ts.cli.tune import command_line

    args = build_parser().parse_args(["tune", "--config", "c.yaml", "--search", "s.yaml", "--n-trials", "3",
                                      "--storage", "postgresql+psycopg2://alice:s3cret@db:5432/optuna"])
    command = command_line(args)
    assert "s3cret" not in command
    assert "--storage postgresql+psycopg2://alice:***@db:5432/optuna" in command.replace("'", "")


def test_worker_seeds_differ_per_launch_and_worker():
    seeds = {worker_seed(0, token, index) for token in (0, 6) for index in range(3)}
    assert len(seeds) == 6
    assert worker_seed(0, 6, 1) == worker_seed(0, 6, 1)  # traceable from the recorded token


def test_launches_that_start_together_get_different_seeds():
    # Machines joining one study at the same moment all see the same trial count.
    tokens = {new_launch_token() for _ in range(20)}
    assert len(tokens) == 20
    assert len({worker_seed(0, token, 0) for token in tokens}) == 20


def test_each_worker_gets_one_gpu_and_each_run_one_device():
    from damcha_ts.tuning.objective import one_device_per_run
    from damcha_ts.workqueue.launcher import worker_environment

    base = {"PATH": "/bin"}
    assert "CUDA_VISIBLE_DEVICES" not in worker_environment(0, 2, gpus=0, environ=base)
    assert [worker_environment(i, 3, gpus=2, environ=base)["CUDA_VISIBLE_DEVICES"] for i in range(3)] == ["0", "1", "0"]
    pinned = {**base, "CUDA_VISIBLE_DEVICES": "3,5"}
    assert [worker_environment(i, 2, gpus=2, environ=pinned)["CUDA_VISIBLE_DEVICES"] for i in range(2)] == ["3", "5"]
    # CPU threads: the launcher's OMP_NUM_THREADS is kept, else each worker gets its share of the cores.
    assert worker_environment(0, 2, gpus=0, environ={**base, "OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"
    assert worker_environment(0, 2, gpus=0, environ=base)["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))
    # devices="auto" would start DDP over every GPU inside a trial; an explicit choice is kept.
    auto = {"training": {"devices": "auto"}}
    assert one_device_per_run(auto, {"max_epochs": 2}) == {"max_epochs": 2, "devices": 1}
    assert one_device_per_run(auto, {"devices": 2}) == {"devices": 2}
    assert one_device_per_run({"training": {"devices": 4}}, {}) == {}


def test_the_search_file_in_the_tuning_guide_is_valid():
    """docs/tuning.md's example must parse and fit the config its command names."""
    import re

    from damcha_ts.tuning.objective import BaseConfig

    guide = (REPO / "docs" / "tuning.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", guide, flags=re.S) if "space:" in b]
    spec = parse_search_spec(yaml.safe_load(block), source="docs/tuning.md")
    assert spec.study_name == "my_study" and spec.trainer_kwargs == {"limit_train_batches": 200}
    spec.check_against(BaseConfig.of("itransformer_damcha/etth1", 96).resolve)
