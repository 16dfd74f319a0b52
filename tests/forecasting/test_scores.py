"""Scale-free and probabilistic scores (issue 34, item 3): MASE, sMAPE, RMSE and the scaled CRPS in
``evaluate``, backtests and cross-validation, each against an explicit slow formula written here.

The models are untrained (seeded random weights, tests/forecasting/handmade.py): what is tested is
the arithmetic of the scores over their forecasts, which training does not change.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from damcha_ts.data import prepare
from damcha_ts.errors import ConfigError
from damcha_ts.forecasting import Predictor
from damcha_ts.forecasting.backtest import backtest
from damcha_ts.forecasting.cross_validation import cross_validation
from damcha_ts.forecasting.intervals import interval
from damcha_ts.forecasting.predictor import pooled_scores
from damcha_ts.data.time_index import season_length_of
from damcha_ts.forecasting.scores import ForecastScores
from damcha_ts.forecasting.window_scores import calibrate

from handmade import COLUMNS, HORIZON, LOOKBACK, MEAN, SCALE, hand_meta, tiny_model

QUANTILES = [0.1, 0.5, 0.9]
ROWS = 400


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """Hourly rows near the handmade scaler's range: a daily cycle plus noise per variate."""
    rng = np.random.default_rng(0)
    t = np.arange(ROWS)
    values = MEAN + SCALE * (np.sin(2 * np.pi * t / 24)[:, None] + 0.3 * rng.normal(size=(ROWS, len(COLUMNS))))
    return pd.DataFrame(values, columns=COLUMNS, index=pd.date_range("2024-01-01", periods=ROWS, freq="h", name="date"))


@pytest.fixture(scope="module")
def panel(frame):
    return prepare(frame, seq_len=LOOKBACK, pred_len=HORIZON)


@pytest.fixture(scope="module")
def point_predictor() -> Predictor:
    return Predictor(tiny_model(), hand_meta())


@pytest.fixture(scope="module")
def quantile_predictor(panel) -> Predictor:
    predictor = Predictor(tiny_model(QUANTILES), hand_meta(), quantiles=QUANTILES)
    predictor.calibration = calibrate(predictor, panel, "val")
    return predictor


# ---------------------------------------------------------------------- slow references
def slow_seasonal_scale(rows: np.ndarray, season: int) -> np.ndarray:
    """mean over t >= m of |y_t − y_{t−m}|, per column, by a loop (m = 1 when rows are too few)."""
    if season > len(rows):
        season = 1
    totals = np.zeros(rows.shape[1])
    for t in range(season, len(rows)):
        totals += np.abs(rows[t] - rows[t - season])
    return totals / (len(rows) - season)


def slow_quantile_crps(truth, quantile_values, levels, scale) -> float:
    """mean over levels τ and cells of 2 max(τ u, (τ − 1) u) / s, u = y − q̂_τ."""
    total = 0.0
    for k, tau in enumerate(levels):
        u = truth - quantile_values[k]
        total += np.mean(2 * np.maximum(tau * u, (tau - 1) * u) / scale)
    return total / len(levels)


def slow_scores(truth, point, scale) -> dict:
    """MASE, sMAPE (0–2) and RMSE of cells [..., C], with the scale [C] or broadcastable."""
    error = truth - point
    return {"mase": np.mean(np.abs(error) / scale),
            "smape": np.mean(2 * np.abs(error) / (np.abs(truth) + np.abs(point))),
            "rmse": np.sqrt(np.mean(error**2))}


def window_by_window(predictor, series, split):
    """(truth [W, H, C], point [W, H, C], quantile values [W, Q, H, C] or None) of every window, one by one."""
    border1, _ = series.borders[split]
    truths, points, levels = [], [], []
    for i in range(series.window_count(split)):
        start = border1 + i
        forecast = predictor.forecast_after(series.values[start : start + LOOKBACK],
                                            series.timestamps[start : start + LOOKBACK])
        truths.append(series.values[start + LOOKBACK : start + LOOKBACK + HORIZON])
        points.append(forecast.point)
        levels.append(forecast.levels)
    return np.stack(truths), np.stack(points), None if levels[0] is None else np.stack(levels)



# ---------------------------------------------------------------------- the season
@pytest.mark.parametrize("freq, season", [("h", 24), ("30min", 48), ("15min", 96), ("MS", 12), ("D", 1), ("B", 5),
                                          ("W-SUN", 1), ("QS", 4), (None, 1)])
def test_the_season_follows_the_frequency(freq, season):
    assert season_length_of(freq) == season
    assert season_length_of(freq, season_length=7) == 7  # a given season wins


@pytest.mark.parametrize("bad", [0, -1, 2.5, 24.0, True, "24"])
def test_a_bad_season_length_is_refused_naming_it(bad, point_predictor, panel):
    with pytest.raises(ConfigError, match="season_length"):
        season_length_of("h", bad)
    with pytest.raises(ConfigError, match="season_length"):
        point_predictor.evaluate(panel, "test", 64, season_length=bad)


# ---------------------------------------------------------------------- the formulas on hand numbers
def test_scores_of_hand_numbers():
    """Two cells of one variate, scale 2: errors 2 and 1; sMAPE on the 0–2 scale."""
    truth, point = np.array([[[1.0], [4.0]]]), np.array([[[3.0], [3.0]]])
    scores = ForecastScores()
    scores.update(truth, point, scale=np.array([2.0]))
    result = scores.result()
    assert result["mase"] == pytest.approx((2 / 2 + 1 / 2) / 2)
    assert result["smape"] == pytest.approx((2 * 2 / 4 + 2 * 1 / 7) / 2)
    assert result["rmse"] == pytest.approx(np.sqrt((4 + 1) / 2))


def test_the_scaled_crps_of_many_quantiles_is_the_gaussian_crps():
    """The quantile form of the CRPS, mean over τ of 2 ρ_τ, tends to the CRPS: for N(μ, σ²) forecasts
    the closed form σ [z (2Φ(z) − 1) + 2φ(z) − 1/√π], z = (y − μ)/σ (Gneiting and Raftery 2007)."""
    from scipy.stats import norm

    rng = np.random.default_rng(1)
    levels = np.arange(1, 200) / 200
    mu, sigma = rng.normal(size=(50, 4, 2)), rng.uniform(0.5, 2.0, size=(50, 4, 2))
    truth = mu + sigma * rng.normal(size=mu.shape)
    quantile_values = np.stack([mu + sigma * norm.ppf(t) for t in levels], axis=1)  # [B, Q, H, C]
    scores = ForecastScores(quantiles=levels)
    scores.update(truth, mu, quantile_values, scale=np.array([2.0, 0.5]))
    z = (truth - mu) / sigma
    crps = sigma * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / np.sqrt(np.pi))
    assert scores.result()["scaled_crps"] == pytest.approx(np.mean(crps / np.array([2.0, 0.5])), rel=0.01)


# ---------------------------------------------------------------------- evaluate
def test_evaluate_scores_match_slow_formulas(quantile_predictor, panel):
    """MASE scaled by each variate's seasonal naive MAE over the train rows (m = 24, hourly), sMAPE,
    RMSE, the scaled CRPS of the quantile head and of the calibrated bands, on the raw scale."""
    (series,) = panel.series
    scores = quantile_predictor.evaluate(panel, "test", 32, (80.0,))
    truth, point, quantile_values = window_by_window(quantile_predictor, series, "test")
    train_start, train_end = series.borders["train"]
    scale = slow_seasonal_scale(series.values[train_start:train_end], 24)
    for key, value in slow_scores(truth, point, scale).items():  # rel 1e-6: float32 batches of one vs of 32
        assert scores[key] == pytest.approx(value, rel=1e-6), key
    assert scores["rmse"] == pytest.approx(np.sqrt(scores["mse_inverse"]), rel=1e-5)  # the loader's pass agrees
    head = [quantile_values[:, k] for k in range(len(QUANTILES))]
    assert scores["scaled_crps"] == pytest.approx(slow_quantile_crps(truth, head, QUANTILES, scale), rel=1e-6)
    lo, hi = interval(point, quantile_predictor.calibration, 80, quantile_values=quantile_values, quantiles=QUANTILES)
    bands = slow_quantile_crps(truth, [lo, point, hi], [0.1, 0.5, 0.9], scale)
    assert scores["scaled_crps_intervals"] == pytest.approx(bands, rel=1e-6)
    assert 0 < scores["smape"] < 2

    by_day = quantile_predictor.evaluate(panel, "test", 32, season_length=1)  # the naive's scale instead
    one_step = slow_seasonal_scale(series.values[train_start:train_end], 1)
    assert by_day["mase"] == pytest.approx(np.mean(np.abs(truth - point) / one_step), rel=1e-6)
    assert "scaled_crps_intervals" not in by_day and "coverage_80" not in by_day


def test_a_point_model_gets_the_point_scores_and_the_bands_crps(point_predictor, panel):
    (series,) = panel.series
    predictor = Predictor(point_predictor.model, point_predictor.meta, calibration=calibrate(point_predictor, panel))
    scores = predictor.evaluate(panel, "test", 64, (80.0, 95.0))
    assert "scaled_crps" not in scores and "wql" not in scores
    truth, point, _ = window_by_window(predictor, series, "test")
    train_start, train_end = series.borders["train"]
    scale = slow_seasonal_scale(series.values[train_start:train_end], 24)
    bounds = {a: interval(point, predictor.calibration, a) for a in (80, 95)}
    bands = [bounds[95][0], bounds[80][0], point, bounds[80][1], bounds[95][1]]
    expected = slow_quantile_crps(truth, bands, [0.025, 0.1, 0.5, 0.9, 0.975], scale)
    assert scores["scaled_crps_intervals"] == pytest.approx(expected, rel=1e-6)
    assert scores["mase"] == pytest.approx(slow_scores(truth, point, scale)["mase"], rel=1e-6)


def test_ms_scores_the_target_alone_on_its_own_scale(frame, point_predictor):
    """features="MS": every variate in, the target (last) scored, scaled by its own train rows."""
    panel = prepare(frame, seq_len=LOOKBACK, pred_len=HORIZON, features="MS")
    (series,) = panel.series
    predictor = Predictor(point_predictor.model, hand_meta(features="MS"))
    scores = predictor.evaluate(panel, "test", 64)
    truth, point, _ = window_by_window(predictor, series, "test")
    assert truth.shape[-1] == len(COLUMNS) and point.shape[-1] == 1
    train_start, train_end = series.borders["train"]
    scale = slow_seasonal_scale(series.values[train_start:train_end, -1:], 24)
    for key, value in slow_scores(truth[..., -1:], point, scale).items():
        assert scores[key] == pytest.approx(value, rel=1e-6), key
    values, stamps = series.history_rows(), series.timestamps
    frame = backtest(predictor, values, stamps, n_windows=2)
    assert set(frame["id"]) == {"OT"}
    expected = np.mean([np.mean(np.abs(rows["value"] - rows["forecast"]))
                        / slow_seasonal_scale(values[: stamps.get_loc(cutoff) + 1, -1:], 24)[0]
                        for cutoff, rows in frame.groupby("cutoff")])
    assert frame.attrs["scores"]["mase"] == pytest.approx(expected, rel=1e-9)


def test_entities_pool_ratios_as_the_mean_of_the_series_and_the_rest_by_windows():
    """pooled_scores: MASE and the scaled CRPS the plain mean of the entities' (M4/M5); RMSE the root
    of the mean square over every window; MSE and sMAPE window-weighted; wql stays per entity."""
    a = {"mse": 1.0, "mase": 1.0, "smape": 0.2, "rmse": 3.0, "scaled_crps": 0.5, "wql": 0.1, "windows": 10}
    b = {"mse": 4.0, "mase": 3.0, "smape": 0.5, "rmse": 1.0, "scaled_crps": 1.5, "wql": 0.3, "windows": 30}
    panel = SimpleNamespace(entity_col="store", name="stores")
    pooled = pooled_scores(panel, {"a": a, "b": b}, "test", None)
    assert pooled["mase"] == pytest.approx(2.0) and pooled["scaled_crps"] == pytest.approx(1.0)
    assert pooled["mse"] == pytest.approx((10 * 1.0 + 30 * 4.0) / 40)
    assert pooled["smape"] == pytest.approx((10 * 0.2 + 30 * 0.5) / 40)
    assert pooled["rmse"] == pytest.approx(np.sqrt((10 * 9.0 + 30 * 1.0) / 40))
    assert "wql" not in pooled and pooled["entities"]["a"]["wql"] == 0.1 and pooled["windows"] == 40


# ---------------------------------------------------------------------- backtests and cross-validation
def test_backtest_scores_scale_each_window_by_the_rows_up_to_its_cutoff(quantile_predictor, panel):
    (series,) = panel.series
    values, stamps = series.history_rows(), series.timestamps
    frame = backtest(quantile_predictor, values, stamps, n_windows=4, step=5, level=[80])
    scores = frame.attrs["scores"]
    truth, point, scale, head, lo, hi = [], [], [], [], [], []
    for (cutoff, column), rows in frame.groupby(["cutoff", "id"], sort=False):
        c, j = stamps.get_loc(cutoff), COLUMNS.index(column)
        truth.append(rows["value"].to_numpy())
        point.append(rows["forecast"].to_numpy())
        head.append(rows[[f"forecast_q{q}" for q in QUANTILES]].to_numpy().T)
        lo.append(rows["forecast-lo-80"].to_numpy())
        hi.append(rows["forecast-hi-80"].to_numpy())
        scale.append(slow_seasonal_scale(values[: c + 1, j : j + 1], 24)[0])
    truth, point, scale = np.array(truth), np.array(point), np.array(scale)[:, None]  # [W·C, H], [W·C, 1]
    assert scores["windows"] == 4 and len(truth) == 4 * len(COLUMNS)
    for key, value in slow_scores(truth, point, scale).items():
        assert scores[key] == pytest.approx(value, rel=1e-9), key
    head = np.stack(head, axis=1)  # [Q, W·C, H]
    assert scores["scaled_crps"] == pytest.approx(slow_quantile_crps(truth, head, QUANTILES, scale), rel=1e-9)
    bands = slow_quantile_crps(truth, [np.array(lo), point, np.array(hi)], [0.1, 0.5, 0.9], scale)
    assert scores["scaled_crps_intervals"] == pytest.approx(bands, rel=1e-9)
    inside = (truth >= np.array(lo)) & (truth <= np.array(hi))
    assert scores["coverage_80"] == pytest.approx(inside.mean(), abs=1e-12)


def test_cross_validation_scores_every_window_over_its_models(quantile_predictor, panel):
    """Windows forecast by two models (refit=2 of 4 windows) score as all four windows at once: the
    window models here are the same predictor, so the scores are the backtest's."""
    (series,) = panel.series
    values, stamps = series.history_rows(), series.timestamps
    trained = []

    def train(rows, timestamps):
        trained.append(len(rows))
        return quantile_predictor

    frame = cross_validation(quantile_predictor, values, stamps, n_windows=4, refit=2, train=train)
    whole = backtest(quantile_predictor, values, stamps, n_windows=4).attrs["scores"]
    assert len(trained) == 2 and frame.attrs["scores"]["windows"] == 4
    for key in ("mase", "smape", "rmse", "scaled_crps"):
        assert frame.attrs["scores"][key] == pytest.approx(whole[key], rel=1e-6), key
    with pytest.raises(ConfigError, match="season_length"):
        cross_validation(quantile_predictor, values, stamps, n_windows=2, refit=True, train=train, season_length=0)
    assert len(trained) == 2  # refused before any training


# ---------------------------------------------------------------------- many entities, end to end
@pytest.fixture(scope="module")
def stores_model():
    """A tiny global model of three stores of levels 10, 100 and 1000 (one epoch of two batches)."""
    from damcha_ts import Forecaster

    rng = np.random.default_rng(2)
    parts = []
    for store, level, rows in (("a", 10.0, 300), ("b", 100.0, 350), ("c", 1000.0, 400)):
        t = np.arange(rows)
        sales = level * (2 + np.sin(2 * np.pi * t / 24) + 0.2 * rng.normal(size=rows))
        parts.append(pd.DataFrame({"store": store, "date": pd.date_range("2024-01-01", periods=rows, freq="h"),
                                   "sales": sales}))
    quick = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False,
             "limit_train_batches": 2, "deterministic": True}
    model = Forecaster("itransformer_mha", horizon=HORIZON, lookback=LOOKBACK, max_epochs=1, d_model=16, e_layers=1,
                       n_heads=2, d_ff=16, trainer_kwargs=quick, random_state=0)
    return model.fit(pd.concat(parts, ignore_index=True), entity_col="store")


def test_entities_are_scored_each_on_its_own_scale_and_pooled_as_documented(stores_model):
    scores = stores_model.evaluate()
    per_entity = scores["entities"]
    for store, series in zip(stores_model.panel_.entities, stores_model.panel_.series):
        predictor = stores_model.predictor.for_entity(store)
        truth, point, _ = window_by_window(predictor, series, "test")
        train_start, train_end = series.borders["train"]
        scale = slow_seasonal_scale(series.values[train_start:train_end], 24)
        for key, value in slow_scores(truth, point, scale).items():
            assert per_entity[store][key] == pytest.approx(value, rel=1e-6), (store, key)
    windows = np.array([per_entity[s]["windows"] for s in "abc"])
    assert scores["mase"] == pytest.approx(np.mean([per_entity[s]["mase"] for s in "abc"]), rel=1e-12)
    squares = np.array([per_entity[s]["rmse"] ** 2 for s in "abc"])
    assert scores["rmse"] == pytest.approx(np.sqrt(windows @ squares / windows.sum()), rel=1e-12)
    assert scores["smape"] == pytest.approx(windows @ [per_entity[s]["smape"] for s in "abc"] / windows.sum())

    frame = stores_model.backtest(n_windows=2)
    pooled = frame.attrs["scores"]
    assert sorted(pooled["entities"]) == ["a", "b", "c"] and pooled["windows"] == 6
    assert pooled["mase"] == pytest.approx(np.mean([pooled["entities"][s]["mase"] for s in "abc"]), rel=1e-12)


def test_the_forecaster_takes_the_season_of_mase_and_checks_it_before_reading_data(stores_model):
    """``season_length=`` on evaluate / backtest / cross_validation: the scale of MASE follows it (a
    daily season of hourly rows against the last value's scale), and a bad one is refused by name."""
    scores, naive_scaled = stores_model.evaluate(), stores_model.evaluate(season_length=1)
    for store, series in zip(stores_model.panel_.entities, stores_model.panel_.series):
        truth, point, _ = window_by_window(stores_model.predictor.for_entity(store), series, "test")
        train_start, train_end = series.borders["train"]
        scale = slow_seasonal_scale(series.values[train_start:train_end], 1)
        assert naive_scaled["entities"][store]["mase"] == pytest.approx(slow_scores(truth, point, scale)["mase"], rel=1e-6)
    assert naive_scaled["mase"] != pytest.approx(scores["mase"])
    assert stores_model.backtest(n_windows=1, season_length=1).attrs["scores"]["mase"] != pytest.approx(
        stores_model.backtest(n_windows=1).attrs["scores"]["mase"])
    for method in (stores_model.evaluate, stores_model.backtest, stores_model.cross_validation):
        with pytest.raises(ConfigError, match="season_length"):
            method("no/such/file.csv", season_length=0)  # refused before the (missing) file is read
