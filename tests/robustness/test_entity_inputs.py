"""Forecasts of many entities (issue 32): ids, entity selections, future frames and the integer
arguments of backtests and cross-validation.

Matrix rows: ``damcha-ts predict --future`` of an entity model with a row of an unknown entity, or
too short for one entity → exit 2, the flag and entity named, no forecast written. Python-API rows
(plain tests): numeric ids come back as numbers from ``predict``, ``cross_validation``,
``backtest`` and ``evaluate`` (also after save and load); ``entities=[]`` and repeated entities,
``n_windows`` / ``step`` / ``refit`` that are not integers, and errors about one entity's history
or future are ConfigError / DataError naming the argument or entity.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from damcha_ts import Forecaster
from damcha_ts.errors import ConfigError, DataError
from matrix import Case, check_case, copy_run, fitted_run, run_cli, write_csv

HORIZON, LOOKBACK = 4, 16  # fit_argv's
SMALL = {"d_model": 16, "d_ff": 16, "n_heads": 2, "e_layers": 1, "max_epochs": 1}


def panel(rows: int = 120) -> pd.DataFrame:
    """Two stores with integer ids (1 and 2) at different levels, hourly, with a known promotion."""
    parts = []
    for k, store in enumerate((1, 2)):
        t = np.arange(rows)
        parts.append(pd.DataFrame({
            "store": store,
            "date": pd.date_range("2024-01-01", periods=rows, freq="h"),
            "sales": 10.0 * (k + 1) + np.sin(2 * np.pi * t / 24),
            "promo": np.random.default_rng(k).normal(size=rows),
        }))
    return pd.concat(parts, ignore_index=True)


def future_of(table: pd.DataFrame, stores=None) -> pd.DataFrame:
    """The promotion over each store's forecast steps (``stores``: these ids instead of the table's)."""
    last = table.groupby("store", sort=False)["date"].max()
    stamps = pd.date_range(last.iloc[0], periods=HORIZON + 1, freq="h")[1:]
    return pd.concat([pd.DataFrame({"store": store, "date": stamps, "promo": 0.0})
                      for store in (last.index if stores is None else stores)], ignore_index=True)


@pytest.fixture(scope="module")
def fitted() -> Forecaster:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Forecaster("itransformer_mha", horizon=HORIZON, lookback=LOOKBACK, future_covariates=["promo"],
                          **SMALL).fit(panel(), entity_col="store")


# ---------------------------------------------------------------------- ids keep their dtype
def test_integer_ids_come_back_as_integers_and_the_forecast_merges_back_on_them(fitted, tmp_path):
    table, future = panel(), future_of(panel())
    forecast = fitted.predict(future=future)
    assert forecast["store"].dtype == table["store"].dtype and set(forecast["store"]) == {1, 2}
    merged = forecast.merge(future, on=["store", "date"])  # the merge that failed on '1' vs 1
    assert len(merged) == len(forecast) == 2 * HORIZON
    assert fitted.predict(future=future, entities=[2])["store"].tolist() == [2] * HORIZON
    for frame in (fitted.cross_validation(n_windows=2), fitted.backtest(table, n_windows=2)):
        assert frame["store"].dtype == table["store"].dtype and set(frame["store"]) == {1, 2}
    assert list(fitted.evaluate()["entities"]) == [1, 2]
    loaded = Forecaster.load(fitted.save(tmp_path / "model"))
    assert json.loads((tmp_path / "model" / "forecaster.json").read_text())["data"]["entity_dtype"] == "int64"
    pd.testing.assert_frame_equal(loaded.predict(future=future), forecast)
    assert list(loaded.evaluate(table)["entities"]) == [1, 2]


def test_ids_of_a_refit_cross_validation_keep_their_dtype(fitted):
    frame = fitted.cross_validation(n_windows=2, refit=True)
    assert frame["store"].dtype == np.int64 and set(frame["store"]) == {1, 2}


@pytest.mark.parametrize("saved", ["datetime64[ns]", "no-such-dtype", "", 5, ["int64"]])
def test_a_saved_id_dtype_the_ids_cannot_take_is_refused(fitted, tmp_path, saved):
    from damcha_ts.training.artifacts import CONTENT_DIGEST, META_FILE, content_digest

    model = fitted.save(tmp_path / "model")
    document = json.loads((model / META_FILE).read_text())
    document["data"]["entity_dtype"] = saved
    document[CONTENT_DIGEST] = content_digest(document)  # resealed: the check is on the value, not the seal
    (model / META_FILE).write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=r"data\.entity_dtype=.* is neither null \(text ids\) nor a numeric dtype"):
        Forecaster.load(model)


# ---------------------------------------------------------------------- entity selections and arguments
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: f.predict(future=future_of(panel()), entities=[]), r"entities=\[\] names no entity: name at least one"),
        (lambda f: f.predict(future=future_of(panel()), entities=[1, 1]),
         r"entities= names \['1'\] more than once; name each entity once"),
        (lambda f: f.cross_validation(n_windows=2.0), r"n_windows must be a positive integer, got 2\.0"),
        (lambda f: f.cross_validation(n_windows=True), r"n_windows must be a positive integer, got True"),
        (lambda f: f.backtest(n_windows=2.5), r"n_windows must be a positive integer, got 2\.5"),
        (lambda f: f.cross_validation(n_windows=2, step=2.0), r"step must be a positive integer \(rows between cutoffs\)"),
        (lambda f: f.cross_validation(n_windows=2, refit=2.0),
         r"refit must be False, True or a number of windows k >= 1 \(retrain every k windows\), got 2\.0"),
    ],
    ids=["no-entity", "an-entity-twice", "windows-a-float", "windows-a-bool", "backtest-windows-a-float",
         "step-a-float", "refit-a-float"],
)
def test_bad_selections_and_counts_are_errors_naming_the_argument(fitted, call, message):
    with pytest.raises(ConfigError, match=message):
        call(fitted)


def test_numpy_integers_are_counts(fitted):
    frame = fitted.cross_validation(n_windows=np.int64(2), step=np.int32(2))
    assert frame["cutoff"].nunique() == 2


# ---------------------------------------------------------------------- errors name the entity
def _short_second_store() -> pd.DataFrame:
    table = panel()
    return pd.concat([table[table.store == 1], table[table.store == 2].tail(20)], ignore_index=True)


def _nan_in_second_store() -> pd.DataFrame:
    table = panel()
    table.loc[table.index[-3], "sales"] = np.nan
    return table


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda f: f.predict(future=future_of(panel(), stores=[1, 2, 9])), ConfigError,
         r"future= has rows for the entities \['9'\], which the model was not fitted on \(it knows \['1', '2'\]\)"),
        (lambda f: f.predict(future=future_of(panel()).iloc[:-1]), DataError,
         r"entity '2': future= has 3 rows; the forecast has 4 steps"),
        (lambda f: f.cross_validation(_short_second_store(), n_windows=2), DataError,
         r"entity '2': 2 windows 4 rows apart need 24 rows .*; the data has 20"),
        (lambda f: f.backtest(_nan_in_second_store(), n_windows=2), DataError,
         r"entity '2': DataFrame: column 'sales' row 117 .* is nan"),
    ],
    ids=["future-of-an-unknown-entity", "future-short-for-one-entity", "history-short-for-one-entity",
         "nan-in-one-entity"],
)
def test_errors_about_one_entity_name_it(fitted, call, error, message):
    with pytest.raises(error, match=message):
        call(fitted)


# ---------------------------------------------------------------------- the command line
@pytest.fixture(scope="module")
def entity_run(tmp_path_factory) -> Path:
    """``damcha-ts fit`` of the two-store table (integer ids) with the promotion as future covariate."""
    return fitted_run(tmp_path_factory.mktemp("entity_run"), panel(), "--set", "data.entity_col=store",
                      "--future-covariates", "promo")


def _predict_with_future(future):
    def make(folder: Path, fixtures: dict) -> list[str]:
        run = copy_run(fixtures["entity_run"], folder)
        return ["predict", "--model", run, "--future", write_csv(future, folder / "future.csv"),
                "--output", folder / "forecast.csv"]

    return make


def _no_forecast(folder: Path) -> None:
    assert not (folder / "forecast.csv").exists(), "a refused predict must write nothing"


CASES = [
    Case("future of an unknown entity", _predict_with_future(future_of(panel(), stores=[1, 2, 9])), 2,
         "--future has rows for the entities ['9'], which the model was not fitted on (it knows ['1', '2'])", _no_forecast),
    Case("future short for one entity", _predict_with_future(future_of(panel()).iloc[:-1]), 2,
         "entity '2': ", _no_forecast),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_entity_futures_on_the_command_line(case, tmp_path, entity_run):
    check_case(case, tmp_path, {"entity_run": entity_run})


def test_the_entity_run_forecasts_both_stores_with_a_good_future(entity_run, tmp_path):
    # Otherwise the rows above could pass for the wrong reason.
    out = tmp_path / "forecast.csv"
    outcome = run_cli(["predict", "--model", entity_run, "--future", write_csv(future_of(panel()), tmp_path / "f.csv"),
                       "--output", out])
    assert outcome.code == 0, outcome.stderr
    assert pd.read_csv(out)["store"].tolist() == [1] * HORIZON + [2] * HORIZON
