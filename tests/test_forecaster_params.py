"""The Forecaster's parameters, scikit-learn's way: get_params, set_params, clone (issue 33)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from damcha_ts import Forecaster
from damcha_ts.errors import ConfigError

TINY = {"d_model": 16, "d_ff": 16, "n_heads": 2, "generator_hidden": [8]}
QUICK = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False, "limit_train_batches": 3,
         "limit_val_batches": 2, "deterministic": True}


@pytest.fixture(scope="module")
def etth1(data_root: Path) -> pd.DataFrame:
    return pd.read_csv(data_root / "ETTh1.csv.gz", parse_dates=["date"], index_col="date").iloc[:800]


def tiny(**kwargs) -> Forecaster:
    return Forecaster("itransformer_damcha", horizon=12, lookback=24, max_epochs=1, trainer_kwargs=QUICK,
                      random_state=5, **TINY, **kwargs)


def sklearn_clone(estimator):
    """What ``sklearn.base.clone`` does with an object that has ``get_params`` (scikit-learn is not
    a dependency): the class called with deep copies of the parameters, each of which must come
    back as the very object it was given."""
    params = {name: copy.deepcopy(value) for name, value in estimator.get_params(deep=False).items()}
    clone = type(estimator)(**params)
    given = clone.get_params(deep=False)
    assert all(given[name] is value for name, value in params.items())
    return clone


def test_get_params_are_the_constructors_arguments_model_keys_included():
    forecaster = tiny(patience=2)
    params = forecaster.get_params()
    assert params["model"] == "itransformer_damcha" and params["horizon"] == 12 and params["random_state"] == 5
    assert params["d_model"] == 16 and params["patience"] == 2 and params["trainer_kwargs"] is QUICK
    params["horizon"] = 99  # a copy: the forecaster is unchanged
    assert forecaster.get_params()["horizon"] == 12


def test_clone_is_an_unfitted_forecaster_with_the_same_params_and_the_same_forecast(etth1):
    fitted = tiny().fit(etth1)
    for clone in (fitted.clone(), sklearn_clone(fitted)):
        assert not clone.is_fitted and clone.get_params() == fitted.get_params()
        assert clone.model_config == tiny().model_config  # the configured, not the fitted (data-sized) one
    refitted = fitted.clone().fit(etth1)
    np.testing.assert_array_equal(refitted.predict().to_numpy(), fitted.predict().to_numpy())  # bit for bit


def test_a_loaded_or_configured_forecaster_clones_with_its_data_settings(tmp_path, etth1):
    configured = Forecaster.from_config("itransformer_mha/etth1", horizon=96)
    clone = configured.clone()
    assert clone.data_config == configured.data_config and clone.data_config["dataset"] == "ETTh1"
    assert clone.model_config == configured.model_config
    directory = tiny(nonnegative=True).fit(etth1).save(tmp_path / "model")
    loaded = Forecaster.load(directory)
    assert loaded.clone().get_params() == loaded.get_params() and loaded.clone().nonnegative


def test_set_params_changes_the_next_fit_and_returns_self():
    forecaster = tiny()
    assert forecaster.set_params(horizon=6, d_model=32, max_epochs=2) is forecaster
    assert forecaster.horizon == 6 and forecaster.model_config["pred_len"] == 6
    assert forecaster.model_config["d_model"] == 32 and forecaster.training.max_epochs == 2
    assert forecaster.get_params()["horizon"] == 6 and forecaster.get_params()["lookback"] == 24


@pytest.mark.parametrize(("params", "message"), [
    ({"bogus": 1}, r"set_params: unknown key 'bogus'"),
    ({"horizon": 0}, r"set_params: horizon must be a positive integer, got 0"),
    ({"verbose": "yes"}, r"set_params: verbose must be True or False"),
    ({"quantiles": [1.5]}, r"set_params: .*quantiles"),
])
def test_set_params_with_an_unknown_name_or_a_bad_value_is_a_clear_error_and_changes_nothing(params, message):
    forecaster = tiny()
    before = forecaster.get_params()
    with pytest.raises(ConfigError, match=message):
        forecaster.set_params(**params)
    assert forecaster.get_params() == before and forecaster.horizon == 12
