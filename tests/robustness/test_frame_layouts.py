"""Tables of many series (issue 32): whether a frame or CSV is one series or many entities is decided
in one place (``entity_column.decide_entities``), the same for ``damcha-ts fit`` and ``Forecaster.fit``.

A ``unique_id`` column, an entity column given, or a text column repeated over repeated timestamps
names the series: each is then an entity, read on its own (its own length and start: ragged
neuralforecast frames are never filled with invented values). A long table's ``id, date, value``
stays one multivariate series while its ids share one span. What cannot be told apart (two such
text columns; a long table with covariates inside each entity) is refused before any training,
naming the columns and the flag or keyword to set.

Matrix rows: a CSV and ``damcha-ts fit`` / ``data info`` on it → exit code and message; a fit that
succeeds is checked afterwards (what was saved, what ``predict`` forecasts). Beside them, the
Python API on the same frames.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from matrix import Case, check_case, fit_argv, run_cli, write_csv

from damcha_ts.data import prepare
from damcha_ts.errors import DataError

HORIZON, LOOKBACK = 4, 16  # fit_argv's
IDS = ("s1", "s2", "s3")


def neuralforecast_frame(ragged: bool = False, promo: bool = False, rows: int = 160) -> pd.DataFrame:
    """``unique_id, ds, y`` (and ``promo``): hourly ids of different levels; ``ragged``: each later
    id starts 10 hours later and has 30 rows fewer."""
    parts = []
    for k, uid in enumerate(IDS):
        n = rows - 30 * k if ragged else rows
        t = np.arange(n)
        start = pd.Timestamp("2024-01-01") + pd.Timedelta(hours=10 * k if ragged else 0)
        part = pd.DataFrame({"unique_id": uid, "ds": pd.date_range(start, periods=n, freq="h"),
                             "y": (k + 1) * np.sin(2 * np.pi * t / 24) + 0.1 * np.random.default_rng(k).standard_normal(n)})
        if promo:
            part["promo"] = (t % 5 == 0).astype(float)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def store_table(rows: int = 160, region: bool = False) -> pd.DataFrame:
    """``store, date, v0, v1``: a wide table per store, the stores one after the other."""
    parts = []
    for k, store in enumerate(("a", "b")):
        t = np.arange(rows)
        part = pd.DataFrame({"store": store, "date": pd.date_range("2024-01-01", periods=rows, freq="h"),
                             "v0": np.sin(2 * np.pi * t / 24) + k, "v1": np.cos(2 * np.pi * t / 24) - k})
        if region:
            part.insert(1, "region", "north")
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def long_store_table(rows: int = 160) -> pd.DataFrame:
    """``store, date, promo, id, value``: each store a long table of two ids, with a promo column."""
    wide = store_table(rows)
    long = wide.melt(id_vars=["store", "date"], var_name="id", value_name="value")
    long["promo"] = (np.arange(len(long)) % 3 == 0).astype(float)
    return long[["store", "date", "promo", "id", "value"]]


def _csv(make, name: str = "series.csv"):
    def write(folder: Path) -> Path:
        return write_csv(make(), folder / name)

    return write


def _fit(write, *flags: str):
    def make(folder: Path, fixtures: dict) -> list[str]:
        return fit_argv(write(folder), folder / "run", *flags)

    return make


def _info(write, *flags: str):
    def make(folder: Path, fixtures: dict) -> list[str]:
        return ["data", "info", write(folder), "--lookback", str(LOOKBACK), "--horizon", str(HORIZON), *flags]

    return make


def _no_run(folder: Path) -> None:
    assert not (folder / "run").exists(), "a fit refused up front must leave no run folder"


def _saved_entities(column: str, entities: list[str]):
    def after(folder: Path) -> None:
        saved = json.loads((folder / "run" / "model" / "forecaster.json").read_text())["data"]
        assert (saved["entity_col"], saved["entities"]) == (column, entities), saved

    return after


def _forecasts_each_id_from_its_own_end(future: bool = False):
    """After a fit on a neuralforecast CSV: each id was an entity, and ``predict`` (with ``--future``
    promo values) forecasts every id from its own last timestamp, in the input's columns."""

    def after(folder: Path) -> None:
        _saved_entities("unique_id", list(IDS))(folder)
        history = pd.read_csv(folder / "series.csv", parse_dates=["ds"])
        last = history.groupby("unique_id")["ds"].max()
        argv = ["predict", "--model", folder / "run", "--output", folder / "forecast.csv"]
        if future:
            steps = [pd.DataFrame({"unique_id": uid, "ds": pd.date_range(end, periods=HORIZON + 1, freq="h")[1:],
                                   "promo": 0.0}) for uid, end in last.items()]
            argv += ["--future", write_csv(pd.concat(steps), folder / "future.csv")]
        outcome = run_cli(argv)
        assert outcome.code == 0, outcome.stderr
        forecast = pd.read_csv(folder / "forecast.csv", parse_dates=["ds"])
        assert list(forecast.columns) == ["unique_id", "ds", "y"] and len(forecast) == len(IDS) * HORIZON
        first = forecast.groupby("unique_id")["ds"].min()
        assert (first == last + pd.Timedelta(hours=1)).all(), (first, last)

    return after


CASES = [
    Case("long entity CSV with a covariate column: refused before training",
         _fit(_csv(long_store_table), "--set", "data.entity_col=store", "--future-covariates", "promo"), 2,
         "each 'store' entity holds a long table (id, date, value) with covariate column(s) ['promo']; a long "
         "table's covariate belongs to one id, so each id would be a series inside an entity. Name one column that "
         "tells every series apart (e.g. 'store' and 'id' joined) with --set data.entity_col=...", _no_run),
    Case("long entity CSV with a covariate column, entity column found: refused alike",
         _fit(_csv(long_store_table), "--future-covariates", "promo"), 2,
         "each 'store' entity holds a long table (id, date, value) with covariate column(s) ['promo']", _no_run),
    Case("neuralforecast CSV with an exogenous column: read as the Python API reads it",
         _fit(_csv(lambda: neuralforecast_frame(promo=True)), "--future-covariates", "promo"), 0, "",
         _forecasts_each_id_from_its_own_end(future=True)),
    Case("ragged neuralforecast CSV: each id read on its own, never filled",
         _fit(_csv(lambda: neuralforecast_frame(ragged=True))), 0, "",
         _forecasts_each_id_from_its_own_end()),
    Case("ragged neuralforecast CSV with an exogenous column",
         _fit(_csv(lambda: neuralforecast_frame(ragged=True, promo=True)), "--future-covariates", "promo"), 0, "",
         _forecasts_each_id_from_its_own_end(future=True)),
    Case("a repeated text column names the series: entities by default", _fit(_csv(store_table)), 0, "",
         _saved_entities("store", ["a", "b"])),
    Case("two repeated text columns: which names the series is asked",
         _fit(_csv(lambda: store_table(region=True))), 2,
         "columns ['store', 'region'] each hold text repeated over the rows, so each could name the series; name "
         "the one that does with --set data.entity_col=store (one series per value) and leave out the other(s) with "
         "--ignore region", _no_run),
    Case("ragged neuralforecast CSV read long on request: told to read it per id, not to fill",
         _fit(_csv(lambda: neuralforecast_frame(ragged=True)), "--id-col", "unique_id", "--value-col", "y"), 2,
         "id 's3' runs from 2024-01-01 20:00:00 to 2024-01-05 23:00:00, the ids together from 2024-01-01 00:00:00 "
         "to 2024-01-07 15:00:00; a long file read as one series needs every id over the same span. Read each "
         "unique_id as its own series with --set data.entity_col=unique_id", _no_run),
    Case("data info on a neuralforecast CSV says it holds entities", _info(_csv(neuralforecast_frame)), 0,
         "entities    3 (column 'unique_id')", stream="stdout"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matrix(case, tmp_path):
    check_case(case, tmp_path)


# --------------------------------------------------------------------------- the Python API


def _forecaster(**settings):
    from damcha_ts import Forecaster

    return Forecaster("itransformer_mha", horizon=HORIZON, lookback=LOOKBACK, max_epochs=1, d_model=16, d_ff=16,
                      n_heads=2, e_layers=1, trainer_kwargs={"enable_progress_bar": False, "logger": False}, **settings)


def test_a_ragged_neuralforecast_frame_is_fitted_per_id():
    frame = neuralforecast_frame(ragged=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forecaster = _forecaster().fit(frame)
    assert forecaster.meta_.entity_col == "unique_id" and forecaster.meta_.columns == ["y"]
    forecast = forecaster.predict()
    first = forecast.groupby("unique_id")["ds"].min()
    assert (first == frame.groupby("unique_id")["ds"].max() + pd.Timedelta(hours=1)).all()


def test_a_long_table_with_covariates_inside_each_entity_is_refused_before_training():
    with pytest.raises(DataError, match=r"each 'store' entity holds a long table \(id, date, value\) with covariate "
                                        r"column\(s\) \['promo'\].* with entity_col=\.\.\., or give each entity a wide"):
        _forecaster(future_covariates=["promo"]).fit(long_store_table(), entity_col="store")


def test_the_command_line_and_the_forecaster_decide_alike(tmp_path):
    """One rule for a frame and for its CSV (what the CLI reads): the same entity column or none."""
    from damcha_ts.data.entity_column import with_entity_col

    frames = {
        "neuralforecast": (neuralforecast_frame(), {}, "unique_id"),
        "with exogenous": (neuralforecast_frame(promo=True), {"future_covariates": ["promo"]}, "unique_id"),
        "ragged": (neuralforecast_frame(ragged=True), {}, "unique_id"),
        "with a static column": (neuralforecast_frame().assign(size=lambda f: f["unique_id"].str[1:].astype(float)),
                                 {"static_covariates": ["size"]}, "unique_id"),
        "stores": (store_table(), {}, "store"),
        "read long on request": (neuralforecast_frame(), {"id_col": "unique_id", "value_col": "y"}, None),
        "one wide series": (store_table().query("store == 'a'").drop(columns="store"), {}, None),
    }
    for name, (frame, options, expected) in frames.items():
        path = write_csv(frame, tmp_path / f"{name}.csv")
        assert with_entity_col(frame, options).get("entity_col") == expected, name
        assert with_entity_col(path, options).get("entity_col") == expected, name


def test_decide_entities_rules():
    from damcha_ts.data.entity_column import decide_entities

    columns = ["id", "date", "value"]
    wide = store_table().query("store == 'a'").drop(columns="store")
    aligned = wide.melt(id_vars="date", var_name="id", value_name="value")[columns]
    assert decide_entities(aligned, "t") is None  # a long table whose ids share a span: one series, a variate per id
    ragged = aligned[~((aligned["id"] == "v1") & (aligned.index % 160 < 5))]
    assert decide_entities(ragged, "t") == "id"
    assert decide_entities(ragged, "t", layout="long") is None  # asked for: read long (and told if it cannot be)
    assert prepare(ragged, seq_len=LOOKBACK, pred_len=HORIZON).entities == ["v0", "v1"]
    # The long table inside each store stays the store's variates.
    long = store_table().melt(id_vars=["store", "date"], var_name="id", value_name="value")
    assert decide_entities(long, "t") == "store"
    assert prepare(long, seq_len=LOOKBACK, pred_len=HORIZON).columns == ["v0", "v1"]
    with pytest.raises(DataError, match=r"columns \['store', 'region'\] each hold text repeated over the rows.*"
                                        r"entity_col='store'.*ignore=\['region'\]"):
        decide_entities(store_table(region=True), "t")
