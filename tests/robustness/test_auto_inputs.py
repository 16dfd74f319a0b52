"""Issue 35's new inputs, bad: ``Forecaster("auto")``'s time budget, search space (a mapping or a YAML
file: missing, a folder, empty, corrupt, hostile, wrong keys and values), storage and workers, and
their flags on ``damcha-ts fit --model auto``, and a lookback, which auto searches. Each is refused with a
message naming it (``storage=`` in Python, ``--storage`` on the command line), before any data is read or
anything is written; a storage file that is not a database is refused when opened."""

from __future__ import annotations

import pytest

from damcha_ts import Forecaster
from damcha_ts.errors import ConfigError
from matrix import hourly_frame, run_cli, write_csv


@pytest.mark.parametrize(("settings", "named"), [
    ({"time_budget": "300"}, "time_budget must be a positive, finite number of seconds, got '300'"),
    ({"time_budget": -1}, "time_budget must be a positive, finite number"),
    ({"time_budget": float("nan")}, "time_budget must be a positive, finite number"),
    ({"time_budget": True}, "time_budget must be a positive, finite number"),
    ({"workers": 0}, "workers must be a positive integer"),
    ({"workers": "2"}, "workers must be a positive integer"),
    ({"workers": 1.5}, "workers must be a positive integer"),
    ({"storage": 5}, "storage must be a SQLite file or an Optuna storage URL, got 5"),
    ({"storage": "  "}, "storage must be a SQLite file or an Optuna storage URL"),
    ({"storage": "study.txt"}, r"storage='study.txt' is neither a database URL"),
    ({"storage": "sqlite://"}, r"storage='sqlite://': an in-memory SQLite database"),
    ({"storage": "postgres://u@db/x"}, r"storage='postgres://u@db/x': SQLAlchemy spells the scheme 'postgresql://'"),
    ({"lookback": 336}, r"searches the lookback; lookback=336 cannot be given to it: narrow the search instead, "
                        r"search=\{'lookbacks': \[336\]\}"),
    ({"lookback": "96"}, "lookback must be a positive integer, got '96'"),
    ({"lookback": None}, "lookback must be a positive integer, got None"),
    ({"search": ["naive"]}, "search must be a mapping or a YAML file of one"),
    ({"search": {"max_trials": 0}}, "search.max_trials must be a positive integer or null"),
    ({"search": {"max_trials": "many"}}, "search.max_trials must be a positive integer or null"),
    ({"search": {"models": "naive"}}, "search.models must be a non-empty list"),
    ({"search": {"models": ["auto"]}}, r"search.models: \['auto'\] are not models"),
    ({"search": {"lookbacks": [24, -1]}}, "search.lookbacks must hold positive integers"),
    ({"search": {"learning_rate": [1e-3, 1e-4]}}, r"search.learning_rate must be \[low, high\]"),
    ({"search": {"learning_rate": [1e-4, float("inf")]}}, r"search.learning_rate must be \[low, high\]"),
    ({"search": {"dropout": [0.1]}}, r"search.dropout must be \[low, high\]"),
    ({"max_epochs": 3}, r"\['max_epochs'\] cannot be given to it"),
    ({"lookback": 96, "e_layers": 2}, r"\['e_layers'\] cannot be given to it"),
])
def test_bad_search_settings_are_refused_by_name(settings, named):
    with pytest.raises(ConfigError, match=named):
        Forecaster("auto", horizon=6, **settings)


@pytest.mark.parametrize(("content", "named"), [
    (None, "no such search file"),
    ("", "it is empty"),
    ("models: [naive\n", "not valid YAML"),
    ("models: !!python/object/apply:os.system ['echo pwned']\n", "not valid YAML"),  # safe_load: no code runs
    ("- naive\n- linear\n", "it holds list, not a mapping of AutoSpace keys"),
    ("modles: [naive]\n", "modles"),
    ("learning_rate: [fast, faster]\n", r"search.learning_rate must be \[low, high\]"),
])
def test_a_bad_search_file_is_refused_naming_the_file(tmp_path, content, named):
    path = tmp_path / "search.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=named):
        Forecaster("auto", horizon=6, search=path)
    with pytest.raises(ConfigError, match="a folder, not a search file"):
        Forecaster("auto", horizon=6, search=tmp_path)


def test_a_storage_file_that_is_not_a_database_is_refused_and_kept(tmp_path):
    storage = tmp_path / "study.db"
    storage.write_text("my notes, not a database")
    forecaster = Forecaster("auto", horizon=6, time_budget=1, storage=storage, search={"models": ["naive"]})
    with pytest.raises(ConfigError, match="cannot be opened: file is not a database"):
        forecaster.fit(hourly_frame(rows=300, variates=1).set_index("date"))
    assert storage.read_text() == "my notes, not a database"


@pytest.mark.parametrize(("flags", "named"), [
    (["--time-budget", "-5"], "time_budget must be a positive, finite number"),
    (["--time-budget", "inf"], "time_budget must be a positive, finite number"),
    (["--workers", "0"], "workers must be a positive integer"),
    (["--seed", "-1"], "random_state must be a non-negative integer"),
    (["--search", "missing.yaml"], "no such search file"),
    (["--lookback", "48"], "--model auto takes no --lookback"),
    (["--storage", "notes.txt"], "--storage 'notes.txt' is neither a database URL"),
    (["--set", "training.max_steps=5"], "--model auto takes no --set"),
])
def test_bad_flags_of_fit_model_auto_are_refused_and_nothing_is_written(tmp_path, flags, named):
    data = write_csv(hourly_frame(rows=300, variates=1), tmp_path / "series.csv")
    out = tmp_path / "run"
    done = run_cli(["fit", "--data", data, "--model", "auto", "--horizon", "6", "--out", out, *flags])
    assert done.code == 2 and named in done.stderr, done.stderr
    assert not out.exists()


def test_search_flags_without_model_auto_are_refused(tmp_path):
    data = write_csv(hourly_frame(rows=300, variates=1), tmp_path / "series.csv")
    done = run_cli(["fit", "--data", data, "--model", "naive", "--horizon", "6", "--workers", "2", "--out", tmp_path / "r"])
    assert done.code == 2 and "--workers: only with --model auto" in done.stderr, done.stderr
