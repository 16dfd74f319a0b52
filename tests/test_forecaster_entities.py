"""Many entities, one global model (issue 20): ``fit(table, entity_col="store")`` prepares each
entity on its own (time index, length, split, scaler), trains on the windows of all of them, and
``predict`` / ``evaluate`` answer per entity (and pooled)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from damcha_ts import Forecaster
from damcha_ts.data import prepare, prepare_series
from damcha_ts.errors import ConfigError, DataError

L, H = 24, 12
SMALL = {"d_model": 16, "d_ff": 32, "e_layers": 1, "n_heads": 2, "dropout": 0.0}
LEVELS = {"a": 10.0, "b": 100.0, "c": 1000.0}


def stores(lengths=(500, 600, 700), seed: int = 0) -> pd.DataFrame:
    """Three stores of different levels, lengths and starts: sales and visits with a daily cycle,
    a known promotion, and a constant size."""
    rng = np.random.default_rng(seed)
    parts = []
    for k, ((store, level), rows) in enumerate(zip(LEVELS.items(), lengths)):
        t = np.arange(rows)
        promo = rng.normal(size=rows)
        parts.append(pd.DataFrame({
            "store": store,
            "date": pd.date_range("2021-01-01", periods=rows, freq="h") + pd.Timedelta(hours=7 * k),
            "size": float(k + 1),
            "sales": level * (1 + 0.1 * np.sin(2 * np.pi * t / 24) + 0.05 * promo),
            "visits": level / 10 * (1 + 0.1 * np.cos(2 * np.pi * t / 24)) + rng.normal(size=rows),
            "promo": promo,
        }))
    return pd.concat(parts, ignore_index=True)


def future_of(table: pd.DataFrame, value: float = 0.0) -> pd.DataFrame:
    pieces = []
    for store, rows in table.groupby("store", sort=False):
        stamps = pd.date_range(rows["date"].iloc[-1], periods=H + 1, freq="h")[1:]
        pieces.append(pd.DataFrame({"store": store, "date": stamps, "promo": value}))
    return pd.concat(pieces, ignore_index=True)


@pytest.fixture(scope="module")
def fitted() -> Forecaster:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forecaster = Forecaster("itransformer_mha", horizon=H, lookback=L, max_epochs=2, **SMALL,
                                static_covariates=["size"], future_covariates=["promo"])
        return forecaster.fit(stores(), entity_col="store")


def test_each_entity_is_prepared_on_its_own_and_training_sees_all_their_windows(fitted):
    table = stores()
    entities = prepare(table, seq_len=L, pred_len=H, entity_col="store", static_covariates=["size"],
                       future_covariates=["promo"], time_features_freq=None)
    assert entities.entities == ["a", "b", "c"]
    for store, one in zip(entities.entities, entities.series):
        rows = table[table.store == store].drop(columns=["store", "size"])
        alone = prepare_series(rows, seq_len=L, pred_len=H, future_covariates=["promo"], time_features_freq=None)
        assert one.borders == alone.borders  # its own 70/10/20 split by time
        np.testing.assert_array_equal(one.values, alone.values)
        np.testing.assert_allclose(one.scaler.mean_, alone.scaler.mean_)  # its own train-row scaler
    counts = {split: sum(s.window_count(split) for s in entities.series) for split in ("train", "val", "test")}
    assert fitted.fit_result_["windows"] == counts
    assert len(entities.windows("train")) == counts["train"]
    assert fitted.model_config["static_covariates"] == 1


def test_windows_of_all_entities_come_back_in_the_order_asked(fitted):
    import torch

    entities = prepare(stores(), seq_len=L, pred_len=H, entity_col="store", time_features_freq=None)
    windows = entities.windows("train")
    first_of_b = entities.series[0].window_count("train")
    batch = windows.batch(torch.tensor([first_of_b, 0, first_of_b + 3]))
    torch.testing.assert_close(batch["x"][0], entities.series[1].windows("train")[0]["x"])
    torch.testing.assert_close(batch["x"][1], entities.series[0].windows("train")[0]["x"])
    torch.testing.assert_close(batch["y"][2], entities.series[1].windows("train")[3]["y"])


def test_a_global_scaler_is_fitted_on_the_train_rows_of_every_entity():
    entities = prepare(stores(), seq_len=L, pred_len=H, entity_col="store", scaler="global", time_features_freq=None)
    train = np.concatenate([s.values[slice(*s.borders["train"])] for s in entities.series])
    for one in entities.series:
        np.testing.assert_allclose(one.scaler.mean_, train.mean(axis=0))


def test_predict_forecasts_every_entity_at_its_own_level_and_time(fitted):
    table = stores()
    forecast = fitted.predict(future=future_of(table))
    assert list(forecast.columns) == ["store", "date", "sales", "visits"]
    for store, level in LEVELS.items():
        rows = forecast[forecast.store == store]
        assert len(rows) == H
        assert rows["date"].iloc[0] == table[table.store == store]["date"].iloc[-1] + pd.Timedelta(hours=1)
        assert 0.7 * level < rows["sales"].mean() < 1.3 * level  # one model, each entity on its own scale
    only_b = fitted.predict(future=future_of(table), entities=["b"])
    pd.testing.assert_frame_equal(only_b, forecast[forecast.store == "b"].reset_index(drop=True))


def test_evaluate_reports_each_entity_and_all_of_them_pooled(fitted):
    scores = fitted.evaluate()
    per_entity = scores["entities"]
    assert sorted(per_entity) == ["a", "b", "c"]
    windows = np.array([per_entity[e]["windows"] for e in "abc"])
    assert scores["windows"] == windows.sum() == fitted.fit_result_["windows"]["test"]
    assert scores["mse"] == pytest.approx(np.dot(windows, [per_entity[e]["mse"] for e in "abc"]) / windows.sum())
    assert per_entity["c"]["mse_inverse"] > per_entity["a"]["mse_inverse"]  # raw errors follow each level


def test_static_covariates_reach_the_forecast(fitted):
    predictor = fitted.predictor
    one = predictor.for_entity("b")
    values, stamps = one.history
    future = np.zeros((H, 1))
    base = one.forecast_after(values, stamps, future).point
    one.meta.static_values = [3.0]  # as if store b were as big as c
    assert not np.allclose(one.forecast_after(values, stamps, future).point, base)


def test_saved_and_loaded_a_many_entity_model_forecasts_the_same(fitted, tmp_path):
    future = future_of(stores(), value=0.5)
    loaded = Forecaster.load(fitted.save(tmp_path / "model"))
    assert loaded.meta_.entities == ["a", "b", "c"]
    pd.testing.assert_frame_equal(loaded.predict(future=future, level=[80]), fitted.predict(future=future, level=[80]))
    # New histories of some of the entities.
    table = stores(lengths=(300, 300, 300), seed=1)
    two = table[table.store != "a"]
    assert sorted(loaded.predict(two, future=future_of(two)).store.unique()) == ["b", "c"]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda f: f.predict(future=future_of(stores()), entities=["z"]), ConfigError,
         r"entities \['z'\] are not among the 3 entities the model knows"),
        (lambda f: f.predict(future=future_of(stores())[lambda d: d.store != "c"]), ConfigError,
         r"future= has no rows for entity 'c'"),
        (lambda f: f.predict(), DataError, r"reads the future covariates \['promo'\]"),
        (lambda f: f.predict(stores().replace({"store": {"c": "d"}}), future=future_of(stores())), ConfigError,
         r"entities \['d'\] of the data were not in the fit data"),
        (lambda f: f.plot(future=future_of(stores())), ConfigError, r"plot\(\): this model has 3 entities; name one \(entity=\.\.\.\)"),
    ],
    ids=["unknown-entity", "future-without-an-entity", "no-future", "new-entity-in-data", "plot-without-entity"],
)
def test_many_entity_mistakes_are_clear_errors(fitted, call, error, message):
    with pytest.raises(error, match=message):
        call(fitted)


@pytest.mark.parametrize(
    ("table", "options", "message"),
    [
        (stores().assign(size=lambda d: np.arange(len(d))), {"static_covariates": ["size"]},
         r"static covariate 'size' is not constant for entity 'a'"),
        (stores(lengths=(500, 40, 700)), {}, r"entity 'b' of DataFrame: .*the train split has 28 rows"),
        (stores(), {"entity_col": "shop"}, r"entity column 'shop' not found"),
        (stores(), {"scaler": "store"}, r"scaler must be one of \('entity', 'global'\)"),
    ],
    ids=["static-varies", "entity-too-short", "no-entity-column", "bad-scaler"],
)
def test_bad_entity_tables_are_errors_naming_entity_and_column(table, options, message):
    options = {"entity_col": "store", **options}
    with pytest.raises((ConfigError, DataError), match=message):
        prepare(table.drop(columns=[] if "static_covariates" in options else ["size"]), seq_len=L, pred_len=H,
                **options)


def test_entity_options_without_an_entity_column_are_refused():
    with pytest.raises(ConfigError, match=r"static_covariates is about many entities: name their column with entity_col"):
        prepare(stores().drop(columns=["store"]), seq_len=L, pred_len=H, static_covariates=["size"])


def test_a_long_table_of_entities_is_read_per_entity_and_forecast_long():
    table = stores().drop(columns=["size", "promo"]).melt(id_vars=["store", "date"], var_name="id", value_name="value")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forecaster = Forecaster("itransformer_mha", horizon=H, lookback=L, max_epochs=1, **SMALL).fit(table, entity_col="store")
    forecast = forecaster.predict()
    assert list(forecast.columns) == ["store", "date", "id", "value"]
    assert len(forecast) == 3 * H * 2 and set(forecast["id"]) == {"sales", "visits"}


def test_a_column_that_names_the_series_is_read_as_entities():
    table = stores().drop(columns=["size"]).rename(columns={"store": "unique_id", "date": "ds"})
    series = prepare(table, seq_len=L, pred_len=H)  # issue 32: no longer a "not numeric" error
    assert series.entity_col == "unique_id" and series.entities == ["a", "b", "c"]
    # Text over rows whose timestamps never repeat is one series: the error suggests entity_col.
    one = table[table.unique_id == "a"].rename(columns={"unique_id": "kind"})
    with pytest.raises(DataError, match=r"column 'kind' is not numeric.*pass entity_col='kind'"):
        prepare(one, seq_len=L, pred_len=H)


def test_damcha_ts_fit_and_predict_take_an_entity_table(tmp_path, capsys):
    """The same on the command line: --set data.entity_col=store with static and future covariates;
    metrics.json pools every entity's test windows, and predict forecasts each entity."""
    import json

    from damcha_ts.cli.main import main

    table = stores()
    path = tmp_path / "stores.csv"
    table.to_csv(path, index=False)
    tiny = [arg for key, value in SMALL.items() for arg in ("--set", f"model.{key}={value}")]
    code = main(["fit", "--data", str(path), "--model", "itransformer_mha", "--horizon", str(H), "--lookback", str(L),
                 "--set", "data.entity_col=store", "--static-covariates", "size", "--future-covariates", "promo",
                 "--set", "training.max_epochs=1", *tiny, "--out", str(tmp_path / "run")])
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    entities = prepare(table, seq_len=L, pred_len=H, entity_col="store", static_covariates=["size"],
                       future_covariates=["promo"], time_features_freq=None)
    assert metrics["test_windows"] == entities.window_count("test")
    assert (tmp_path / "run" / "forecast.png").is_file()
    future_of(table).to_csv(tmp_path / "future.csv", index=False)
    out = tmp_path / "forecast.csv"
    assert main(["predict", "--model", str(tmp_path / "run"), "--future", str(tmp_path / "future.csv"),
                 "--level", "80", "--output", str(out)]) == 0
    forecast = pd.read_csv(out)
    assert list(forecast.columns) == ["store", "date", "sales", "visits", "sales-lo-80", "sales-hi-80",
                                      "visits-lo-80", "visits-hi-80"]
    assert len(forecast) == 3 * H


def test_new_entity_tables_are_evaluated_per_entity(fitted):
    scores = fitted.evaluate(stores(lengths=(400, 400, 400), seed=2))
    assert sorted(scores["entities"]) == ["a", "b", "c"] and np.isfinite(scores["mse"])


def test_intervals_pool_every_entity_in_its_own_units_and_cover_near_nominal():
    """Stationary stores of levels 10, 100 and 1000: one calibration, scores divided by each
    store's scale; each store's 80 % interval then covers about 80 % of its test values, and its
    width follows its level."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = stores(lengths=(1500, 1500, 1500)).drop(columns=["size", "promo"])
        # The benchmark recipe, pinned: its barely trained model errs in proportion to each store's
        # scale. Under the user-data recipe (test MSE 0.54 against 0.91) the residuals left are noise
        # of other relative sizes, and one pooled calibration covers the stores 0.71 / 0.77 / 0.91
        # (pooled 0.80; measured 2026-12-04).
        forecaster = Forecaster("itransformer_mha", horizon=H, lookback=L, max_epochs=3, learning_rate=1e-4,
                                lr_schedule="type1", batch_size=32, patience=3, **SMALL)
        forecaster.fit(table, entity_col="store", split=(0.5, 0.25, 0.25))
    scores = forecaster.evaluate(level=[80])
    for store in "abc":
        assert abs(scores["entities"][store]["coverage_80"] - 0.8) < 0.08, scores["entities"][store]
    widths = [scores["entities"][store]["width_80"] for store in "abc"]
    assert widths[0] < widths[1] < widths[2]
    assert abs(scores["coverage_80"] - 0.8) < 0.05
    forecast = forecaster.predict(level=[80])
    assert (forecast["sales-lo-80"] <= forecast["sales"]).all() and (forecast["sales"] <= forecast["sales-hi-80"]).all()


def test_backtest_and_cross_validation_run_per_entity_from_its_own_end(fitted):
    table = stores()
    backtest = fitted.backtest(n_windows=2)
    assert list(backtest.columns[:3]) == ["store", "id", "date"] and set(backtest["store"]) == {"a", "b", "c"}
    for store, rows in backtest.groupby("store"):
        assert rows["date"].max() == table[table.store == store]["date"].max()  # the last window ends there
        assert rows["cutoff"].nunique() == 2
    retrained = fitted.cross_validation(n_windows=2, refit=True)
    assert len(retrained) == len(backtest) and len(retrained.attrs["refits"]) == 2
    first = retrained.attrs["refits"][0]
    for store in "abc":  # trained on every store's rows up to its own first cutoff, never after
        assert first["cutoffs"][store] == str(backtest[backtest.store == store]["cutoff"].min())


def test_plot_draws_one_entity(fitted, tmp_path):
    path = tmp_path / "b.png"
    fitted.plot(entity="b", future=future_of(stores()), path=path)
    assert path.stat().st_size > 0


def test_a_neuralforecast_frame_with_covariate_columns_reads_each_id_as_a_series():
    """``unique_id, ds, y, promo`` with ``future_covariates=["promo"]``: neuralforecast's layout,
    where every id is a series of its own (here an entity whose one variate is ``y``)."""
    table = stores().rename(columns={"store": "unique_id", "date": "ds", "sales": "y"})[["unique_id", "ds", "y", "promo"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forecaster = Forecaster("itransformer_mha", horizon=H, lookback=L, max_epochs=1, **SMALL,
                                future_covariates=["promo"]).fit(table)
    assert forecaster.meta_.entity_col == "unique_id" and forecaster.meta_.columns == ["y"]
    future = future_of(table.rename(columns={"unique_id": "store", "ds": "date"})).rename(
        columns={"store": "unique_id", "date": "ds"})
    forecast = forecaster.predict(future=future)
    assert list(forecast.columns) == ["unique_id", "ds", "y"] and len(forecast) == 3 * H
    with pytest.raises(DataError, match=r"or name them as covariates \(future_covariates=\['promo'\]"):
        Forecaster("itransformer_mha", horizon=H, lookback=L).fit(table)


def test_entity_ids_are_text_inside_whatever_their_type(fitted):
    table = stores().replace({"store": {"a": 1, "b": 2, "c": 3}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forecaster = Forecaster("itransformer_mha", horizon=H, lookback=L, max_epochs=1, **SMALL).fit(
            table.drop(columns=["size", "promo"]), entity_col="store")
    assert forecaster.meta_.entities == ["1", "2", "3"]
    assert set(forecaster.predict(entities=2)["store"]) == {2}  # and come back in the input's dtype (issue 32)
    assert forecaster.predictor.for_entity(2).history is not None


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda t: t.assign(size=np.where(t.store == "c", np.nan, t["size"])), DataError,
         r"static covariate 'size' of entity 'c' is nan; every entity needs a finite value"),
    ],
    ids=["static-nan"],
)
def test_bad_static_values_are_errors_naming_the_entity(change, error, message):
    with pytest.raises(error, match=message):
        prepare(change(stores()), seq_len=L, pred_len=H, entity_col="store", static_covariates=["size"])


def test_changed_static_values_at_predict_time_are_refused_and_short_histories_name_their_entity(fitted):
    table = stores()
    with pytest.raises(ConfigError, match=r"static covariate 'size' of entity 'a' is 100.0; the model was fitted with 1.0"):
        fitted.predict(table.assign(size=np.where(table.store == "a", 100.0, table["size"])), future=future_of(table))
    short = pd.concat([table[table.store != "b"], table[table.store == "b"].tail(10)])
    with pytest.raises(DataError, match=r"entity 'b': the history has 10 rows"):
        fitted.predict(short, future=future_of(short))


def test_a_long_entity_model_writes_intervals_as_columns_not_as_ids():
    table = stores().drop(columns=["size", "promo"]).melt(id_vars=["store", "date"], var_name="id", value_name="value")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forecaster = Forecaster("itransformer_mha", horizon=H, lookback=L, max_epochs=1, **SMALL).fit(table, entity_col="store")
    forecast = forecaster.predict(level=[80])
    assert list(forecast.columns) == ["store", "date", "id", "value", "value-lo-80", "value-hi-80"]
    assert set(forecast["id"]) == {"sales", "visits"} and len(forecast) == 3 * 2 * H


def test_a_saved_entity_history_of_the_wrong_shape_is_refused(fitted, tmp_path):
    from damcha_ts.errors import ChecksumError

    directory = fitted.save(tmp_path / "model")
    stored = dict(np.load(directory / "history.npz"))
    np.savez(directory / "history.npz", **{**stored, "values": stored["values"][0], "timestamps": stored["timestamps"][0]})
    with pytest.raises(ChecksumError, match=r"history.npz: holds values of shape \(24, 3\).*the model has 3 entities"):
        Forecaster.load(directory)
