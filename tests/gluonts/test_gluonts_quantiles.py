"""Quantile forecasts through GluonTS: monotone, a meaningful mean, calibrated on a known noise."""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import pandas as pd
import pytest
from gluonts.dataset.pandas import PandasDataset
from gluonts.dataset.split import split
from gluonts.ev.metrics import MSE, MeanWeightedSumQuantileLoss
from gluonts.model.evaluation import evaluate_model
from gluonts.model.forecast import QuantileForecast
from gluonts.model.predictor import Predictor
from scipy.stats import norm

from damcha_ts.gluonts import DAMCHAEstimator

# Three daily sinusoids with different phases plus i.i.d. N(0, NOISE²) noise: the true 10 % and 90 %
# quantiles are signal ± 1.2816·NOISE, so the 10-90 % interval should hold 80 % of the outcomes.
AMPLITUDE, NOISE, PERIOD, PHASES = 2.0, 1.0, 24, (0.0, 2.0, 4.0)
TRAIN_ROWS, HORIZON, CONTEXT, WINDOWS = 2400, 12, 96, 40
LEVELS = [0.1, 0.9]
# Nominal 0.80 (each tail 0.10). The sampling error over 40 windows x 12 steps x 3 variates is ±0.011
# (one sd); the rest of the tolerance allows for the tiny model after 160 steps: over seeds 0-7 we
# measured coverage 0.762-0.800, tails 0.087-0.121 and widths within 5 % of the noise's.
COVERAGE_TOLERANCE, TAIL_TOLERANCE, WIDTH_TOLERANCE = 0.06, 0.04, 0.10


@pytest.fixture(scope="module")
def synthetic():
    rng = np.random.default_rng(0)
    steps = np.arange(TRAIN_ROWS + WINDOWS * HORIZON)
    signal = AMPLITUDE * np.sin(2 * np.pi * steps[:, None] / PERIOD + np.array(PHASES))
    frame = pd.DataFrame(
        signal + NOISE * rng.normal(size=signal.shape),
        index=pd.date_range("2021-01-01", periods=len(steps), freq="h"),
        columns=["a", "b", "c"],
    )
    dataset = PandasDataset(frame, target=list(frame.columns))
    training, template = split(dataset, offset=TRAIN_ROWS - len(frame))
    test = template.generate_instances(prediction_length=HORIZON, windows=WINDOWS, distance=HORIZON)
    return {"training": training, "test": test}


@pytest.fixture(scope="module")
def predictor(synthetic, trainer_kwargs):
    pl.seed_everything(0, verbose=False)
    estimator = DAMCHAEstimator(
        prediction_length=HORIZON,
        context_length=CONTEXT,
        model="itransformer_damcha",
        hyperparameters={
            "d_model": 32,
            "n_heads": 4,
            "e_layers": 1,
            "d_ff": 32,
            "dropout": 0.0,
            "generator_hidden": [16],
        },
        quantiles=LEVELS,
        lr=3e-3,
        batch_size=128,  # large batches: the outer quantiles converge with little noise in 160 steps
        num_batches_per_epoch=40,
        trainer_kwargs=trainer_kwargs(max_epochs=4),
    )
    return estimator.train(synthetic["training"], cache_data=True)


@pytest.fixture(scope="module")
def forecasts(predictor, synthetic):
    return list(predictor.predict(synthetic["test"].input))


@pytest.fixture(scope="module")
def outcomes(synthetic):
    return np.stack([label["target"].T for label in synthetic["test"].label])  # [W, H, N]


def test_forecasts_are_quantile_forecasts_monotone_in_q(forecasts):
    assert len(forecasts) == WINDOWS
    grid = [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95]  # stored levels and interpolated ones
    for forecast in forecasts:
        assert isinstance(forecast, QuantileForecast)
        assert forecast.forecast_keys == ["0.1", "0.5", "0.9", "mean"]
        assert forecast.forecast_array.shape == (4, HORIZON, 3)
        values = np.stack([forecast.quantile(q) for q in grid])  # [len(grid), H, N]
        assert np.isfinite(values).all()
        assert (np.diff(values, axis=0) >= 0).all()


def test_mean_integrates_the_predicted_quantile_function(forecasts):
    # Piecewise-linear quantile function on [0.1, 0.9], flat tails: weights 0.3, 0.4, 0.3.
    for forecast in forecasts:
        expected = 0.3 * forecast.quantile(0.1) + 0.4 * forecast.quantile(0.5) + 0.3 * forecast.quantile(0.9)
        np.testing.assert_allclose(forecast.mean, expected, rtol=1e-5, atol=1e-5)


def test_the_10_90_interval_covers_80_percent_of_outcomes_with_known_noise(forecasts, outcomes):
    low = np.stack([f.quantile(0.1) for f in forecasts])
    high = np.stack([f.quantile(0.9) for f in forecasts])
    coverage = np.mean((outcomes >= low) & (outcomes <= high))
    assert abs(coverage - 0.8) <= COVERAGE_TOLERANCE, f"coverage {coverage:.3f}"
    # Both tails miss about 10 %: the interval is centred, not just wide enough.
    assert abs(np.mean(outcomes < low) - 0.1) <= TAIL_TOLERANCE
    assert abs(np.mean(outcomes > high) - 0.1) <= TAIL_TOLERANCE
    # Its width is that of the known noise, 2·z(0.9)·NOISE = 2.563.
    assert np.mean(high - low) == pytest.approx(2 * norm.ppf(0.9) * NOISE, rel=WIDTH_TOLERANCE)


def test_evaluate_model_scores_quantile_forecasts(predictor, synthetic, forecasts, outcomes):
    levels = [0.1, 0.5, 0.9]
    metrics = evaluate_model(
        predictor, test_data=synthetic["test"], metrics=[MSE(), MeanWeightedSumQuantileLoss(levels)]
    ).iloc[0]
    # Independent reference: the weighted quantile loss from its definition,
    # mean over levels of 2·Σ pinball_τ / Σ |y|.
    predicted = {q: np.stack([f.quantile(q) for f in forecasts]) for q in levels}
    wql = np.mean(
        [
            2
            * np.sum(np.maximum(q * (outcomes - predicted[q]), (q - 1) * (outcomes - predicted[q])))
            / np.sum(np.abs(outcomes))
            for q in levels
        ]
    )
    assert metrics["mean_weighted_sum_quantile_loss"] == pytest.approx(wql, rel=1e-5)
    mean_forecast = np.stack([f.mean for f in forecasts])
    assert metrics["MSE[mean]"] == pytest.approx(np.mean((mean_forecast - outcomes) ** 2), rel=1e-5)
    # Better than knowing nothing but the noise level: the signal was learnt (MSE of the
    # unconditional mean 0 would be AMPLITUDE²/2 + NOISE² = 3).
    assert metrics["MSE[mean]"] < 0.5 * (AMPLITUDE**2 / 2 + NOISE**2)


def test_serialize_deserialize_gives_identical_quantile_forecasts(predictor, synthetic, forecasts, tmp_path):
    predictor.serialize(tmp_path)
    again = list(Predictor.deserialize(tmp_path).predict(synthetic["test"].input))
    for original, reloaded in zip(forecasts, again, strict=True):
        assert reloaded.forecast_keys == original.forecast_keys
        np.testing.assert_array_equal(reloaded.forecast_array, original.forecast_array)
