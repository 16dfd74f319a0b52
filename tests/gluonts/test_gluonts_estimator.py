"""DAMCHAEstimator on real ETTh1: train, predict on rolling windows, evaluate, serialise."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from gluonts.dataset.multivariate_grouper import MultivariateGrouper
from gluonts.dataset.pandas import PandasDataset
from gluonts.dataset.split import split
from gluonts.ev.metrics import MAE, MSE, MeanWeightedSumQuantileLoss
from gluonts.model.evaluation import evaluate_model
from gluonts.model.forecast import SampleForecast
from gluonts.model.predictor import Predictor

from damcha_ts.errors import ConfigError, DataError
from damcha_ts.gluonts import DAMCHAEstimator, target_statistics

# Protocol borders of ETTh1 (protocol.md §1.2): train [0, 8640), val [.., 11520), test [.., 14400).
TRAIN_END, VAL_END = 8640, 11520
HORIZON, CONTEXT, WINDOWS = 24, 96, 20
TINY = {"d_model": 32, "n_heads": 4, "e_layers": 1, "d_ff": 32, "dropout": 0.0, "generator_hidden": [16]}


@pytest.fixture(scope="module")
def etth1(etth1_frame):
    """GluonTS views of ETTh1: one entry with target (7, T), cut at the protocol's borders."""
    dataset = PandasDataset(etth1_frame, target=list(etth1_frame.columns), freq="h")  # float64, as users have it
    training, _ = split(dataset, offset=TRAIN_END - len(etth1_frame))
    validation, test_template = split(dataset, offset=VAL_END - len(etth1_frame))
    # Rolling evaluation: WINDOWS non-overlapping windows from the start of the test split.
    test = test_template.generate_instances(prediction_length=HORIZON, windows=WINDOWS, distance=HORIZON)
    return {"frame": etth1_frame, "dataset": dataset, "training": training, "validation": validation, "test": test}


@pytest.fixture(scope="module")
def predictor(etth1, trainer_kwargs):
    estimator = DAMCHAEstimator(
        prediction_length=HORIZON,
        context_length=CONTEXT,
        model="itransformer_damcha",
        hyperparameters=TINY,
        lr=1e-3,
        batch_size=32,
        num_batches_per_epoch=20,
        trainer_kwargs=trainer_kwargs(max_epochs=3),
    )
    return estimator.train(etth1["training"], etth1["validation"], cache_data=True)


@pytest.fixture(scope="module")
def forecasts(predictor, etth1):
    return list(predictor.predict(etth1["test"].input))


def test_forecasts_are_samples_of_shape_samples_h_n_starting_after_each_input(forecasts, etth1):
    frame = etth1["frame"]
    assert len(forecasts) == WINDOWS
    for k, forecast in enumerate(forecasts):
        assert isinstance(forecast, SampleForecast)
        assert forecast.samples.shape == (1, HORIZON, frame.shape[1])
        assert np.isfinite(forecast.samples).all()
        # Window k forecasts rows [VAL_END + k·H, VAL_END + (k+1)·H) of the file.
        assert forecast.start_date == pd.Period(frame.index[VAL_END + k * HORIZON], freq="h")
    labels = list(etth1["test"].label)
    assert [f.start_date for f in forecasts] == [label["start"] for label in labels]


def test_evaluate_model_gives_finite_metrics_that_match_the_forecasts_and_beat_naive(predictor, forecasts, etth1):
    test = etth1["test"]
    metrics = evaluate_model(
        predictor, test_data=test, metrics=[MSE(), MAE(), MeanWeightedSumQuantileLoss([0.1, 0.5, 0.9])]
    )
    row = metrics.iloc[0]
    assert np.isfinite(row.to_numpy(dtype=float)).all()

    # Independent reference: the same errors computed from the forecasts and the file's values.
    truth = np.stack([label["target"].T for label in test.label])  # [W, H, N]
    predicted = np.stack([f.mean for f in forecasts])
    assert row["MSE[mean]"] == pytest.approx(np.mean((predicted - truth) ** 2), rel=1e-5)
    assert row["MAE[0.5]"] == pytest.approx(np.mean(np.abs(predicted - truth)), rel=1e-5)

    # Naive forecast: repeat each window's last observed value over the horizon.
    last_values = np.stack([entry["target"][:, -1] for entry in test.input])[:, None, :]  # [W, 1, N]
    assert row["MSE[mean]"] < np.mean((last_values - truth) ** 2)
    assert row["MAE[0.5]"] < np.mean(np.abs(last_values - truth))

    per_window = evaluate_model(predictor, test_data=test, metrics=[MSE()], axis=(1, 2))
    assert len(per_window) == WINDOWS and np.isfinite(per_window["MSE[mean]"]).all()


def test_serialize_deserialize_gives_identical_forecasts(predictor, forecasts, etth1, tmp_path):
    predictor.serialize(tmp_path)
    restored = Predictor.deserialize(tmp_path)
    again = list(restored.predict(etth1["test"].input))
    assert len(again) == len(forecasts)
    for original, reloaded in zip(forecasts, again):
        assert reloaded.start_date == original.start_date
        np.testing.assert_array_equal(reloaded.samples, original.samples)


def test_multivariate_grouper_input_gives_the_same_forecasts(predictor, etth1):
    # Long-format users: one univariate entry per variate, grouped into one (N, T) entry.
    frame = etth1["frame"].iloc[:VAL_END]
    univariate = PandasDataset(dict(frame), freq="h")  # 7 entries, target (T,)
    grouped = MultivariateGrouper(max_target_dim=frame.shape[1])(univariate)
    (entry,) = list(grouped)
    assert entry["target"].shape == (frame.shape[1], VAL_END)
    wide = PandasDataset(frame, target=list(frame.columns), freq="h")
    (from_grouped,) = predictor.predict(grouped)
    (from_wide,) = predictor.predict(wide)
    assert from_grouped.start_date == from_wide.start_date
    np.testing.assert_allclose(from_grouped.samples, from_wide.samples, rtol=1e-6, atol=1e-6)


def test_univariate_entries_are_rejected_with_a_hint(predictor, etth1):
    univariate = PandasDataset(dict(etth1["frame"].iloc[:VAL_END]), freq="h")
    with pytest.raises(DataError, match="MultivariateGrouper"):
        list(predictor.predict(univariate))


def test_constructor_rejects_bad_arguments_naming_them():
    with pytest.raises(ConfigError, match="d_modle"):
        DAMCHAEstimator(prediction_length=HORIZON, hyperparameters={"d_modle": 32})
    with pytest.raises(ConfigError, match="seq_len"):
        DAMCHAEstimator(prediction_length=HORIZON, hyperparameters={"seq_len": 48})
    with pytest.raises(ConfigError, match="model="):
        DAMCHAEstimator(prediction_length=HORIZON, model="patchtst")
    with pytest.raises(ConfigError, match="quantiles"):
        DAMCHAEstimator(prediction_length=HORIZON, quantiles=[0.1, 1.5])
    for arguments, name in (({"lr": -1.0}, "lr"), ({"weight_decay": -0.5}, "weight_decay"),
                            ({"time_features_freq": "bogus"}, "time_features_freq"), ({"batch_size": 0}, "batch_size")):
        with pytest.raises(ConfigError, match=name):
            DAMCHAEstimator(prediction_length=HORIZON, **arguments)


def test_training_data_too_short_for_one_window_is_refused_naming_the_lengths(etth1):
    frame = etth1["frame"].iloc[:CONTEXT + HORIZON - 1]
    short = PandasDataset(frame, target=list(frame.columns), freq="h")
    estimator = DAMCHAEstimator(prediction_length=HORIZON, context_length=CONTEXT, hyperparameters=TINY)
    with pytest.raises(DataError, match=rf"training_data: the longest entry has {CONTEXT + HORIZON - 1} steps"
                                        rf".*context_length \+ prediction_length = {CONTEXT + HORIZON}"):
        estimator.train(short)
    tail = etth1["frame"].iloc[:HORIZON - 1]
    with pytest.raises(DataError, match=rf"validation_data: .* {HORIZON - 1} steps, fewer than prediction_length"):
        estimator.train(etth1["training"], PandasDataset(tail, target=list(tail.columns), freq="h"))


def test_training_entries_must_share_their_variates_even_without_standardisation(etth1):
    frame = etth1["frame"].iloc[:TRAIN_END]
    entries = [PandasDataset(frame.iloc[:, :n], target=list(frame.columns[:n]), freq="h") for n in (3, 5)]
    mixed = [entry for dataset in entries for entry in dataset]
    estimator = DAMCHAEstimator(prediction_length=HORIZON, model="gateformer_damcha", standardize=False,
                                hyperparameters={**TINY, "patch_len": 16, "stride": 16})
    with pytest.raises(DataError, match="has 5 variates, an earlier one 3"):
        estimator.train(mixed)


def test_gateformer_trains_and_predicts_without_time_marks_on_any_number_of_variates(etth1, trainer_kwargs):
    estimator = DAMCHAEstimator(
        prediction_length=HORIZON,
        context_length=CONTEXT,
        model="gateformer_damcha",
        hyperparameters={**TINY, "patch_len": 16, "stride": 16},
        lr=1e-3,
        batch_size=16,
        num_batches_per_epoch=2,
        trainer_kwargs=trainer_kwargs(max_epochs=1),
        standardize=False,  # raw values: the variate-token model then takes any N
    )
    predictor = estimator.train(etth1["training"], cache_data=True)
    assert predictor.input_names == ["past_target"]  # Gateformer reads no time marks
    (forecast,) = predictor.predict(etth1["validation"])
    assert forecast.samples.shape == (1, HORIZON, etth1["frame"].shape[1])
    assert forecast.start_date == pd.Period(etth1["frame"].index[VAL_END], freq="h")
    subset = etth1["frame"].iloc[:VAL_END, :3]
    (forecast,) = predictor.predict(PandasDataset(subset, target=list(subset.columns), freq="h"))
    assert forecast.samples.shape == (1, HORIZON, 3)


def test_a_standardised_predictor_refuses_other_variates(predictor, etth1):
    subset = etth1["frame"].iloc[:VAL_END, :3]
    with pytest.raises(DataError, match="7 variates"):
        list(predictor.predict(PandasDataset(subset, target=list(subset.columns), freq="h")))


def test_target_statistics_are_the_per_variate_mean_and_population_std():
    rng = np.random.default_rng(3)
    first = rng.normal(5.0, 2.0, size=(3, 50))
    second = rng.normal(-1.0, 0.5, size=(3, 30))
    second[1, 4] = np.nan  # a missing value is skipped, not counted
    first[2] = 7.0  # no spread: scale 1, as StandardScaler does
    second[2] = 7.0
    third = np.full((3, 5), np.nan)  # an entry with nothing observed changes nothing
    statistics = target_statistics([{"target": first}, {"target": third}, {"target": second}])
    pooled = np.concatenate([first, second], axis=1)
    np.testing.assert_allclose(statistics.mean, np.nanmean(pooled, axis=1), rtol=1e-12)
    np.testing.assert_allclose(statistics.scale[:2], np.nanstd(pooled, axis=1)[:2], rtol=1e-9)
    assert statistics.scale[2] == 1.0 and statistics.longest == 50
    with pytest.raises(DataError, match="same variates"):
        target_statistics([{"target": first}, {"target": second[:2]}])


def test_target_statistics_keep_a_small_spread_on_a_large_level():
    """E[x²] − E[x]² cancels here (it gave scale 1 for a true 0.01); merging centred sums does not."""
    rng = np.random.default_rng(5)
    entries = [1e9 + rng.normal(0.0, 0.01, size=(2, 40)) for _ in range(3)]
    statistics = target_statistics([{"target": entry} for entry in entries])
    pooled = np.concatenate(entries, axis=1)
    np.testing.assert_allclose(statistics.scale, pooled.std(axis=1), rtol=1e-4)
    np.testing.assert_allclose(statistics.mean, pooled.mean(axis=1), rtol=1e-15)


def test_a_leading_gap_takes_the_mean_not_a_future_value():
    from damcha_ts.gluonts.transform import ForwardFillImputation

    values = np.array([[np.nan, np.nan, 4.0, 8.0, np.nan], [1.0, np.nan, 3.0, 5.0, 7.0],
                       [np.nan] * 5], dtype=np.float32)
    np.testing.assert_array_equal(ForwardFillImputation()(values),
                                  [[6.0, 6.0, 4.0, 8.0, 8.0], [1.0, 1.0, 3.0, 5.0, 7.0], [0.0] * 5])


def test_missing_values_and_a_short_context_are_filled_flat_not_with_zeros(predictor, etth1):
    """GluonTS's default writes 0 for NaN and for padding: on data around 10-40 that is an outlier
    that moves the whole forecast. Here a NaN forecasts like the value before it, and a context
    shorter than the lookback like one padded with its first row."""
    frame = etth1["frame"].iloc[:VAL_END].copy()

    def forecast(values: pd.DataFrame) -> np.ndarray:
        (result,) = predictor.predict(PandasDataset(values, target=list(values.columns), freq="h"))
        return result.samples

    holed = frame.copy()
    holed.iloc[-10, 0] = np.nan
    filled = frame.copy()
    filled.iloc[-10, 0] = frame.iloc[-11, 0]
    np.testing.assert_allclose(forecast(holed), forecast(filled), rtol=1e-6)
    assert not np.allclose(forecast(holed), forecast(frame), rtol=1e-3)  # the hole does matter

    short = frame.iloc[-(CONTEXT - 30):]
    padded = pd.concat([short.iloc[[0] * 30].set_axis(frame.index[-CONTEXT:-(CONTEXT - 30)]), short])
    np.testing.assert_allclose(forecast(short), forecast(padded), rtol=1e-6)
