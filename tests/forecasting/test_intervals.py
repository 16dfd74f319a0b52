"""Calibrated prediction intervals (``level=``): split-conformal residuals of a point model,
conformalised quantile regression of a quantile model, their columns, their scores, and their
life in a saved model directory."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from damcha_ts import Forecaster
from damcha_ts.errors import ChecksumError, ConfigError
from damcha_ts.forecasting.intervals import (
    Calibration,
    check_levels,
    conformal_quantile,
    interval,
    interval_column_name,
)
from damcha_ts.forecasting.window_scores import split_forecasts

NOISE = 0.3  # the Gaussian noise of the synthetic series: sd
LOOKBACK, HORIZON = 48, 12
MODEL = {"d_model": 16, "d_ff": 16, "n_heads": 2, "e_layers": 1, "dropout": 0.0}
QUICK = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False, "deterministic": True}
PAIRS = [0.025, 0.1, 0.9, 0.975]  # the pairs of the 95 % and 80 % intervals


def noisy_sines(rows: int = 5000, variates: int = 4, seed: int = 0) -> pd.DataFrame:
    """A daily sine per variate (its own phase and amplitude) plus N(0, NOISE²) noise, hourly."""
    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    values = {f"v{j}": (1 + 0.3 * j) * np.sin(2 * np.pi * (t + 5 * j) / 24) + NOISE * rng.standard_normal(rows)
              for j in range(variates)}
    return pd.DataFrame(values, index=pd.date_range("2024-01-01", periods=rows, freq="h", name="date"))


def tiny(**kwargs) -> Forecaster:
    return Forecaster("itransformer_mha", horizon=HORIZON, lookback=LOOKBACK, max_epochs=4, trainer_kwargs=QUICK,
                      **MODEL, **kwargs)


@pytest.fixture(scope="module")
def series() -> pd.DataFrame:
    return noisy_sines()


@pytest.fixture(scope="module")
def point_model(series) -> Forecaster:
    return tiny().fit(series)  # 70/10/20: calibrated on the validation windows, scored on the test windows


@pytest.fixture(scope="module")
def quantile_model(series) -> Forecaster:
    return tiny(quantiles=PAIRS).fit(series)


# ---------------------------------------------------------------------- the conformal quantile
def test_the_conformal_quantile_is_the_finite_sample_order_statistic():
    """Q̂ = the ceil((n + 1)(1 − α))-th smallest score, i.e. the empirical quantile at
    ceil((n + 1)(1 − α)) / n, per step and variate; the interval is the point forecast ± Q̂."""
    rng = np.random.default_rng(3)
    n, steps, variates = 29, 3, 2
    scores = np.abs(rng.normal(size=(n, steps, variates)))
    calibration = Calibration(scores=scores[None])
    for level in (50, 80, 90, 95):
        k = math.ceil((n + 1) * level / 100)  # 15, 24, 27, 29
        by_hand = np.sort(scores, axis=0)[k - 1]
        np.testing.assert_array_equal(calibration.quantile(level), by_hand)
        np.testing.assert_array_equal(conformal_quantile(scores, level), by_hand)
        point = rng.normal(size=(5, steps, variates))
        lo, hi = interval(point, calibration, level)
        np.testing.assert_array_equal(lo, point - by_hand)
        np.testing.assert_array_equal(hi, point + by_hand)
    # Nine windows with the scores 1, ..., 9 (shuffled): the 50, 80, 90 % quantiles are the 5th, 8th, 9th.
    shuffled = np.array([7.0, 2.0, 9.0, 4.0, 1.0, 8.0, 3.0, 6.0, 5.0]).reshape(9, 1, 1)
    nine = Calibration(scores=shuffled[None])
    assert [float(nine.quantile(a)[0, 0]) for a in (50, 80, 90)] == [5.0, 8.0, 9.0]
    assert float(nine.quantile(70)[0, 0]) == 7.0  # ceil(10 · 0.7) = 7
    with pytest.raises(ConfigError, match=r"level=95 needs at least 19 calibration windows"):
        nine.quantile(95)
    # 29 windows cover at most the level with ceil(30 · a) <= 29: 96.6 %; 97 % needs 33 windows.
    with pytest.raises(ConfigError, match=r"level=97 needs at least 33 calibration windows.*has 29"):
        calibration.quantile(97)


def test_cqr_widens_or_shrinks_the_quantile_pair_by_the_conformal_score():
    """Romano et al. 2019: E = max(q_lo − y, y − q_hi); the interval is [q_lo − Q̂(E), q_hi + Q̂(E)]."""
    rng = np.random.default_rng(4)
    n = 19
    truth = rng.normal(size=(n, 2, 1))
    q_lo, q_hi = truth - 0.5 + 0.3 * rng.normal(size=truth.shape), truth + 0.5 + 0.3 * rng.normal(size=truth.shape)
    conformity = np.maximum(q_lo - truth, truth - q_hi)
    calibration = Calibration(scores=np.stack([np.abs(truth), conformity]), pairs=((0.1, 0.9),))
    assert calibration.method(80) == "cqr" and calibration.method(90) == "cqr"  # one method for every level
    k = math.ceil((n + 1) * 0.8)
    bound = np.sort(conformity, axis=0)[k - 1]
    assert (bound < 0).all()  # the raw pair over-covers here: CQR shrinks it
    median = rng.normal(size=(3, 2, 1))
    forecast = np.stack([median - 1.0, median, median + 1.0], axis=1)  # [B, Q, H, C] at (0.1, 0.5, 0.9)
    lo, hi = interval(median, calibration, 80, quantile_values=forecast, quantiles=(0.1, 0.5, 0.9))
    np.testing.assert_allclose(lo, median - 1.0 - bound)
    np.testing.assert_allclose(hi, median + 1.0 + bound)
    # Where shrinking would cross the bounds, both are their midpoint.
    flat = np.stack([median, median, median], axis=1)
    lo, hi = interval(median, calibration, 80, quantile_values=flat, quantiles=(0.1, 0.5, 0.9))
    np.testing.assert_allclose(lo, median) and np.testing.assert_allclose(hi, median)
    # A level without its own pair: CQR of the pair below it, calibrated at that level (CQR covers at any
    # level with any pair), not residuals around the median, whose band crossed the 80 % one (issue 32).
    lo, hi = interval(median, calibration, 90, quantile_values=forecast, quantiles=(0.1, 0.5, 0.9))
    bound_90 = np.sort(conformity, axis=0)[math.ceil(20 * 0.9) - 1]
    np.testing.assert_allclose(lo, median - 1.0 - bound_90)
    np.testing.assert_allclose(hi, median + 1.0 + bound_90)


# ---------------------------------------------------------------------- nested bands (issue 32)
PAIR_SETS = [(), ((0.1, 0.9),), ((0.025, 0.975),), ((0.025, 0.975), (0.1, 0.9)), ((0.05, 0.95), (0.25, 0.75))]


def random_case(rng, pairs):
    """A calibration with ``pairs`` (none: a point model) on 20-200 windows, CQR scores of either
    sign (heads that under- and over-cover), and a forecast [B, Q, H, C] of sorted quantiles
    (one unpaired level too, as ``quantiles=[0.3, ...]`` makes) whose 0.5 row is the point."""
    n, shape = int(rng.integers(20, 200)), (5, 3, 2)
    scores = [np.abs(rng.normal(size=(n, *shape[1:]))) * rng.uniform(0.1, 3.0)]
    scores += [rng.normal(rng.uniform(-1.0, 1.0), rng.uniform(0.05, 2.0), size=(n, *shape[1:])) for _ in pairs]
    quantiles = sorted({0.3, 0.5, *(q for pair in pairs for q in pair)})
    values = np.sort(rng.normal(size=(shape[0], len(quantiles), *shape[1:])) * rng.uniform(0.01, 2.0, size=shape[1:]),
                     axis=1) + rng.normal(size=shape[1:])
    return Calibration(scores=np.stack(scores), pairs=pairs), quantiles, values


def test_bands_are_nested_and_hold_the_point_for_random_level_sets():
    """For any set of levels a > b: lo_a <= lo_b and hi_b <= hi_a, and lo <= point <= hi; the same
    level's band whatever else is asked. 1000 seeded draws (hypothesis is not in the dev extra) of
    calibrations with and without quantile pairs, forecasts, level sets (the pairs' levels among
    them half the time), entity units and nonnegative clipping, through forecast_intervals (every
    surface's path). Before issue 32 a level without its pair used residuals and crossed CQR's bands."""
    from types import SimpleNamespace

    from damcha_ts.forecasting.intervals import forecast_intervals, pair_level

    rng = np.random.default_rng(32)
    for draw in range(1000):
        pairs = PAIR_SETS[draw % len(PAIR_SETS)]
        calibration, quantiles, values = random_case(rng, pairs)
        top = 100.0 * calibration.windows / (calibration.windows + 1)  # the highest level n windows allow
        levels = {round(float(a), 3) for a in rng.uniform(0.5, top, size=rng.integers(1, 6))}
        if rng.random() < 0.5:
            levels |= {pair_level(pair) for pair in pairs}
        nonnegative = bool(rng.random() < 0.3)
        meta = SimpleNamespace(nonnegative=nonnegative, entity_col=None)
        predictor = SimpleNamespace(calibration=calibration, horizon=3, output_columns=["a", "b"], meta=meta,
                                    quantiles=tuple(quantiles) if pairs else None)
        point = values[:, quantiles.index(0.5)]
        if nonnegative:
            point = np.maximum(point, 0.0)  # as the predictor clips its forecasts
        bands = forecast_intervals(predictor, point, values if pairs else None, sorted(levels))
        ordered = sorted(bands)
        for narrow, wide in zip(ordered, ordered[1:]):
            assert (bands[wide][0] <= bands[narrow][0]).all() and (bands[narrow][1] <= bands[wide][1]).all(), \
                f"draw {draw}: pairs {pairs}, the {wide} % band does not hold the {narrow} % one"
        for level, (lo, hi) in bands.items():
            assert (lo <= point).all() and (point <= hi).all(), f"draw {draw}: the {level} % band leaves the point"
            alone = forecast_intervals(predictor, point, values if pairs else None, [level])[level]
            np.testing.assert_array_equal(alone[0], lo) and np.testing.assert_array_equal(alone[1], hi)


@pytest.mark.parametrize("level", [0, 100, -5, 150, float("nan"), "80", True, [], [80, None]])
def test_bad_levels_are_refused_naming_the_argument(level, point_model):
    with pytest.raises(ConfigError, match=r"^level "):
        check_levels(level)
    with pytest.raises(ConfigError, match=r"^level "):
        point_model.predict(level=level)


# ---------------------------------------------------------------------- coverage
def test_calibrated_intervals_cover_held_out_windows_at_their_level(point_model, quantile_model):
    """Sine plus Gaussian noise: on the test windows (never seen in training or calibration) the 80 %
    and 95 % intervals cover within 3 points of nominal, for the point model (residuals) and the
    quantile model (CQR); the raw quantile head's coverage is reported beside it."""
    point = point_model.evaluate(level=[80, 95])
    quantile = quantile_model.evaluate(level=[80, 95])
    print(f"\ncalibration windows: {point_model.calibration_.windows}; test windows: {point['windows']}")
    for level in (80, 95):
        print(f"{level} %: residual conformal {point[f'coverage_{level}']:.3f} (width {point[f'width_{level}']:.3f}), "
              f"CQR {quantile[f'coverage_{level}']:.3f} (width {quantile[f'width_{level}']:.3f}), "
              f"uncalibrated quantile head {quantile[f'coverage_{level}_uncalibrated']:.3f}")
        assert abs(point[f"coverage_{level}"] - level / 100) <= 0.03
        assert abs(quantile[f"coverage_{level}"] - level / 100) <= 0.03
        assert 0.0 <= quantile[f"coverage_{level}_uncalibrated"] <= 1.0
        # No better than known noise allows: a perfect model's interval is 2 · z · NOISE wide.
        z = {80: 1.2816, 95: 1.9600}[level]
        assert point[f"width_{level}"] > 2 * z * NOISE * 0.95
    assert quantile_model.calibration_.method(80) == "cqr" and point_model.calibration_.method(80) == "residual"
    assert "coverage_80_uncalibrated" not in point and "wql" not in point


def test_a_refit_model_keeps_its_first_pass_calibration_and_covers_held_out_windows(series, point_model):
    """Issue 32: fit(test_size=0, refit=True) trains on every row, its validation windows too, so its
    intervals keep the scores its first pass had there, before the refit; on later rows neither pass
    saw, they cover near their level (calibrate() on the trained windows had covered 0.63 / 0.84)."""
    seen = series.iloc[:4000]
    refit = tiny().fit(seen, test_size=0, refit=True)
    first_pass = tiny().fit(seen, test_size=0)  # the same seed: the refit's first pass
    assert refit.fit_result_["refit"] and refit.calibration_.split == "val"
    np.testing.assert_allclose(refit.calibration_.scores, first_pass.calibration_.scores, rtol=1e-6)
    held_out = refit.evaluate(series, split="test", level=[80, 95])  # the last 20 % of the rows: after all it saw
    print(f"\nrefit model, {held_out['windows']} held-out windows: coverage {held_out['coverage_80']:.3f} / "
          f"{held_out['coverage_95']:.3f}")
    for level in (80, 95):
        assert abs(held_out[f"coverage_{level}"] - level / 100) <= 0.03
    assert list(refit.predict(level=[80]).columns[-2:]) == ["v3-lo-80", "v3-hi-80"]  # production models get level=


def test_evaluate_scores_match_a_slow_reference_and_gluonts(quantile_model):
    """coverage, width, pinball loss and wQL over every test window, against a window-by-window loop
    and gluonts.ev's MeanWeightedSumQuantileLoss."""
    from gluonts.ev.metrics import MeanWeightedSumQuantileLoss

    scores = quantile_model.evaluate(level=[80])
    predictor, (series,) = quantile_model.predictor, quantile_model.panel_.series
    border1, _ = series.borders["test"]
    truths, points, levels = [], [], []
    for i in range(series.window_count("test")):
        start = border1 + i
        forecast = predictor.forecast_after(series.values[start : start + LOOKBACK],
                                            series.timestamps[start : start + LOOKBACK])
        truths.append(series.values[start + LOOKBACK : start + LOOKBACK + HORIZON])
        points.append(forecast.point)
        levels.append(forecast.levels)
    truth, point, quantiles = np.stack(truths), np.stack(points), np.stack(levels)  # [W, H, C], [W, Q, H, C]
    lo, hi = interval(point, quantile_model.calibration_, 80, quantile_values=quantiles,
                      quantiles=quantile_model.quantiles)
    assert scores["coverage_80"] == pytest.approx(((truth >= lo) & (truth <= hi)).mean(), abs=1e-12)
    assert scores["width_80"] == pytest.approx((hi - lo).mean(), rel=1e-9)
    raw = ((truth >= quantiles[:, 1]) & (truth <= quantiles[:, 3])).mean()  # levels 0.1 and 0.9
    assert scores["coverage_80_uncalibrated"] == pytest.approx(raw, abs=1e-12)

    import torch

    from damcha_ts.models.quantiles import pinball_loss

    expected = pinball_loss(torch.as_tensor(quantiles), torch.as_tensor(truth), quantile_model.quantiles).item()
    assert scores["pinball_loss"] == pytest.approx(expected, rel=1e-9)
    metric = MeanWeightedSumQuantileLoss(quantile_levels=list(quantile_model.quantiles))(axis=None)
    metric.update({"label": truth, **{str(q): quantiles[:, k] for k, q in enumerate(quantile_model.quantiles)}})
    assert scores["wql"] == pytest.approx(float(metric.get()), rel=1e-9)


# ---------------------------------------------------------------------- output columns
def test_interval_columns_in_wide_long_and_numpy_output(point_model, series):
    forecast = point_model.predict(level=[95, 80])
    columns = list(series.columns)
    extra = [interval_column_name(c, side, a) for c in columns for a in (80, 95) for side in ("lo", "hi")]
    assert list(forecast.columns) == columns + extra
    assert extra[:4] == ["v0-lo-80", "v0-hi-80", "v0-lo-95", "v0-hi-95"]
    pd.testing.assert_frame_equal(forecast[columns], point_model.predict())  # the point forecast unchanged
    for c in columns:
        assert (forecast[f"{c}-lo-95"] <= forecast[f"{c}-lo-80"]).all()
        assert (forecast[f"{c}-lo-80"] <= forecast[c]).all() and (forecast[c] <= forecast[f"{c}-hi-80"]).all()

    backtest = point_model.backtest(n_windows=2, level=[80, 95])
    assert list(backtest.columns) == ["id", "date", "cutoff", "value", "forecast", "forecast-lo-80",
                                      "forecast-hi-80", "forecast-lo-95", "forecast-hi-95"]
    last = backtest[backtest["cutoff"] == backtest["cutoff"].max()]
    assert (last["forecast-hi-80"] - last["forecast-lo-80"] > 0).all()

    from damcha_ts.forecasting.output import format_forecast

    predicted = point_model.predictor.forecast_after(*point_model.predictor_.history)
    from damcha_ts.forecasting.intervals import with_intervals

    calibrated = with_intervals(point_model.predictor, predicted, (80,))
    long = format_forecast(calibrated, "long", {"id_col": "unique_id", "time_col": "ds", "value_col": "y"}, None)
    assert list(long.columns) == ["unique_id", "ds", "y", "y-lo-80", "y-hi-80"]
    row = long[(long["unique_id"] == "v2")].iloc[3]
    assert row["y-lo-80"] == forecast["v2-lo-80"].iloc[3] and row["y-hi-80"] == forecast["v2-hi-80"].iloc[3]
    arrays = format_forecast(calibrated, "numpy", {}, None)
    assert sorted(arrays) == ["hi-80", "lo-80", "point"] and arrays["lo-80"].shape == (HORIZON, 4)


def test_quantile_model_intervals_come_beside_its_quantile_columns(quantile_model):
    forecast = quantile_model.predict(level=[80])
    assert list(forecast.columns[:4]) == ["v0", "v1", "v2", "v3"]
    assert "v0_q0.1" in forecast.columns and list(forecast.columns[-2:]) == ["v3-lo-80", "v3-hi-80"]
    # CQR moves the raw 0.1/0.9 quantiles by the same Q̂ at each step and variate.
    shift_lo = forecast["v1_q0.1"] - forecast["v1-lo-80"]
    shift_hi = forecast["v1-hi-80"] - forecast["v1_q0.9"]
    np.testing.assert_allclose(shift_lo, shift_hi, atol=1e-9)


def test_plot_shades_the_intervals(point_model, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.collections import PolyCollection

    figure = point_model.plot(level=[80, 95], variates=["v1"])
    bands = [c for c in figure.axes[0].collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    assert {t.get_text() for t in figure.axes[0].get_legend().get_texts()} >= {"80% interval", "95% interval"}


# ---------------------------------------------------------------------- saved models
def test_a_saved_model_keeps_its_calibration(point_model, quantile_model, tmp_path):
    from damcha_ts.forecasting import Predictor, predict

    for name, model in (("point", point_model), ("quantile", quantile_model)):
        directory = model.save(tmp_path / name)
        assert (directory / "calibration.npz").is_file()
        document = json.loads((directory / "forecaster.json").read_text())
        assert document["calibration"]["windows"] == model.calibration_.windows
        loaded = Forecaster.load(directory)
        np.testing.assert_array_equal(loaded.calibration_.scores, model.calibration_.scores)
        assert loaded.calibration_.pairs == model.calibration_.pairs
        pd.testing.assert_frame_equal(loaded.predict(level=[80, 95]), model.predict(level=[80, 95]))
        pd.testing.assert_frame_equal(predict(Predictor.load(directory), level=[80]), model.predict(level=[80]))
    # A point model saved again without calibration leaves no stale calibration.npz behind.
    point_model.calibration_, kept = None, point_model.calibration_
    try:
        point_model.save(tmp_path / "point")
    finally:
        point_model.calibration_ = kept
    assert not (tmp_path / "point" / "calibration.npz").exists()


def test_a_changed_or_malformed_calibration_is_refused(point_model, tmp_path):
    from damcha_ts.training.artifacts import content_digest

    directory = point_model.save(tmp_path / "m")
    with np.load(directory / "calibration.npz") as stored:
        scores = stored["scores"]
    np.savez(directory / "calibration.npz", scores=scores * 1.01)  # still valid: only the digest tells
    with pytest.raises(ChecksumError, match=r"calibration\.npz: sha256 .* recorded as calibration\.sha256"):
        Forecaster.load(directory)

    directory = point_model.save(tmp_path / "m")
    document = json.loads((directory / "forecaster.json").read_text())
    document["calibration"]["windows"] = 0
    document["content_sha256"] = content_digest(document)
    (directory / "forecaster.json").write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=r"forecaster\.json: calibration\.windows=0 is not a positive integer"):
        Forecaster.load(directory)
    document["calibration"]["windows"] = point_model.calibration_.windows
    document["calibration"]["pairs"] = [[0.1, 0.9]]  # a point model has no quantile pairs
    document["content_sha256"] = content_digest(document)
    (directory / "forecaster.json").write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=r"calibration\.pairs holds \[0\.1, 0\.9\]"):
        Forecaster.load(directory)


def test_an_old_model_directory_without_calibration_refuses_level_clearly(point_model, series, tmp_path):
    """As a damcha_ts before intervals wrote it: no calibration section, no calibration.npz."""
    from damcha_ts.training.artifacts import content_digest

    directory = point_model.save(tmp_path / "old")
    document = json.loads((directory / "forecaster.json").read_text())
    del document["calibration"]
    document["content_sha256"] = content_digest(document)
    (directory / "forecaster.json").write_text(json.dumps(document, indent=2) + "\n")
    (directory / "calibration.npz").unlink()

    old = Forecaster.load(directory)
    pd.testing.assert_frame_equal(old.predict(), point_model.predict())  # it still forecasts
    for call in (lambda: old.predict(level=80), lambda: old.backtest(level=[80]), lambda: old.evaluate(series, level=80),
                 lambda: old.plot(level=80)):
        with pytest.raises(ConfigError, match=r"this model has no calibration \(it was saved without one.*"
                                              r"\.calibrate\(data\) and save it again"):
            call()
    # What the message says works: calibrate on the data's validation windows, save, load.
    old.calibrate(series).save(tmp_path / "new")
    pd.testing.assert_frame_equal(Forecaster.load(tmp_path / "new").predict(level=80), point_model.predict(level=80))


def test_cli_fit_calibrates_and_predict_takes_level(tmp_path, capsys):
    from damcha_ts.cli.main import main

    data = tmp_path / "series.csv"
    noisy_sines(rows=600, variates=2).reset_index().to_csv(data, index=False)
    run = tmp_path / "run"
    tiny_flags = [item for key, value in MODEL.items() for item in ("--set", f"model.{key}={value}")]
    assert main(["fit", "--data", str(data), "--model", "itransformer_mha", "--horizon", "6", "--lookback", "24",
                 *tiny_flags, "--set", "training.max_epochs=1", "--no-plot", "--out", str(run)]) == 0
    capsys.readouterr()
    assert (run / "model" / "calibration.npz").is_file()
    out = tmp_path / "forecast.csv"
    assert main(["predict", "--model", str(run), "--level", "80", "95", "--output", str(out)]) == 0
    forecast = pd.read_csv(out)
    assert list(forecast.columns) == ["date", "v0", "v1", "v0-lo-80", "v0-hi-80", "v0-lo-95", "v0-hi-95",
                                      "v1-lo-80", "v1-hi-80", "v1-lo-95", "v1-hi-95"]
    capsys.readouterr()
    assert main(["predict", "--model", str(run), "--level", "100"]) == 2
    assert "--level holds 100.0" in capsys.readouterr().err
    # damcha-ts evaluate --level scores the intervals on the test split, as evaluate(level=) does.
    assert main(["evaluate", "--model", str(run), "--level", "80", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores == pytest.approx({**scores, **Forecaster.load(run).evaluate(level=[80])})
    assert 0.0 <= scores["coverage_80"] <= 1.0 and scores["width_80"] > 0


def test_split_forecasts_are_the_predictors_forecasts_of_each_window(point_model):
    (series,), predictor = point_model.panel_.series, point_model.predictor
    (point, _, truth), = list(split_forecasts(predictor, series, "val", windows=np.array([0, 7]), batch_size=8))
    border1, _ = series.borders["val"]
    for row, i in enumerate((0, 7)):
        start = border1 + i
        expected = predictor.forecast_after(series.values[start : start + LOOKBACK],
                                            series.timestamps[start : start + LOOKBACK])
        np.testing.assert_allclose(point[row], expected.point, rtol=1e-6)
        np.testing.assert_array_equal(truth[row], series.values[start + LOOKBACK : start + LOOKBACK + HORIZON])
