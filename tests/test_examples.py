"""The scripts in examples/ run as shipped (on small budgets) and produce what they describe."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_intervals_and_cross_validation_example(data_root, capsys):
    outcome = _load("intervals_and_cross_validation").main(quick=True)
    scores = outcome["scores"]
    assert 0.0 <= scores["coverage_80"] <= scores["coverage_95"] <= 1.0 and scores["width_95"] > scores["width_80"]
    kept, retrained = outcome["cross_validation"]
    assert kept["cutoff"].nunique() == retrained["cutoff"].nunique() == 3
    assert len(retrained.attrs["refits"]) == 3 and not kept.attrs.get("refits")
    future = outcome["future"]
    assert len(future) == 14 and (future["OT-lo-80"] <= future["OT"]).all() and (future["OT"] <= future["OT-hi-80"]).all()
    assert "80 % interval covers" in capsys.readouterr().out


def test_covariates_example(data_root, capsys):
    outcome = _load("covariates").main(quick=True)
    assert set(outcome["scores"]) == {"loads observed up to now", "two loads scheduled a day ahead"}
    forecast = outcome["forecast"]
    assert list(forecast.columns) == ["OT"] and len(forecast) == 24  # the loads are read, never forecast
    assert "test MSE of OT" in capsys.readouterr().out


def test_many_entities_example(data_root, capsys):
    outcome = _load("many_entities").main(quick=True)
    scores, forecast, table = outcome["scores"], outcome["forecast"], outcome["table"]
    assert sorted(scores["entities"]) == ["ETTh1", "ETTh2"]
    assert scores["windows"] == sum(own["windows"] for own in scores["entities"].values())
    for station, rows in forecast.groupby("station"):  # each station continues after its own last row
        assert rows["date"].min() == table[table.station == station]["date"].max() + pd.Timedelta(hours=1)
    assert "both stations pooled" in capsys.readouterr().out
