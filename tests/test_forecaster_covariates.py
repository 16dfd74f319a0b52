"""Covariates through the whole Forecaster (issue 20): named columns the model reads and never
forecasts or scores, scaled with train-only statistics, saved with the model, and given over the
horizon with ``predict(future=frame)``; each mistake in ``future`` is an error naming it."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from damcha_ts import Forecaster
from damcha_ts.errors import ConfigError, DataError

L, H = 24, 12
SMALL = {"d_model": 32, "d_ff": 64, "e_layers": 1, "n_heads": 2, "dropout": 0.0}


def driven_frame(rows: int = 1500, seed: int = 0) -> pd.DataFrame:
    """``sales`` = 2 x ``promo`` (white noise, known in advance) + a daily cycle + small noise;
    ``temp`` is an unrelated observed series."""
    rng = np.random.default_rng(seed)
    promo = rng.normal(size=rows)
    sales = 2.0 * promo + np.sin(np.arange(rows) * 2 * np.pi / 24) + 0.2 * rng.normal(size=rows)
    index = pd.date_range("2020-01-01", periods=rows, freq="h")
    return pd.DataFrame({"temp": rng.normal(10.0, 3.0, size=rows), "promo": promo, "sales": sales}, index=index)


def fitted(**keywords) -> Forecaster:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forecaster = Forecaster("itransformer_mha", horizon=H, lookback=L, max_epochs=1, **SMALL, **keywords)
        return forecaster.fit(driven_frame(400), features="MS", target="sales")


@pytest.fixture(scope="module")
def with_covariates() -> Forecaster:
    return fitted(past_covariates=["temp"], future_covariates=["promo"])


@pytest.mark.parametrize("name", ["itransformer_damcha", "gateformer_damcha"])
def test_a_target_driven_by_a_future_covariate_is_forecast_far_better_with_it(name):
    """Without ``promo``'s future the model can only forecast the cycle (test MSE about 1 on the
    z-scale, the noise of 2 x promo); told it, the error falls below a third of that."""
    frame = driven_frame()

    def test_mse(**covariates) -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            forecaster = Forecaster(name, horizon=H, lookback=L, max_epochs=6, learning_rate=3e-3, batch_size=32,
                                    **SMALL, **covariates)
            forecaster.fit(frame, features="MS", target="sales")
        return forecaster.evaluate()["mse"]

    without, with_it = test_mse(), test_mse(future_covariates=["promo"])
    print(f"{name}: test MSE without the covariate {without:.3f}, with it {with_it:.3f}")
    assert without > 0.8, without
    assert with_it < 0.3 * without, (without, with_it)


def test_covariates_are_read_never_forecast_and_scaled_on_train_rows(with_covariates):
    meta = with_covariates.meta_
    assert meta.columns == ["sales"] and meta.history_columns == ["sales", "temp", "promo"]
    assert (meta.past_covariates, meta.future_covariates) == (["temp"], ["promo"])
    assert with_covariates.model_config["past_covariates"] == 1
    assert with_covariates.model_config["future_covariates"] == 1
    train_rows = driven_frame(400).iloc[: with_covariates.fit_result_["train_rows"]]
    np.testing.assert_allclose(meta.covariate_mean, train_rows[["temp", "promo"]].mean().to_numpy())
    np.testing.assert_allclose(meta.covariate_scale, train_rows[["temp", "promo"]].std(ddof=0).to_numpy())
    future = pd.DataFrame({"promo": np.zeros(H)}, index=with_covariates.future_timestamps(driven_frame(400).index[-1]))
    assert list(with_covariates.predict(future=future).columns) == ["sales"]


def test_in_m_mode_covariates_are_not_forecast_either():
    forecaster = fitted(future_covariates=["promo"]).fit(driven_frame(400), features="M")
    future = pd.DataFrame({"promo": np.ones(H)}, index=forecaster.future_timestamps(driven_frame(400).index[-1]))
    assert list(forecaster.predict(future=future).columns) == ["temp", "sales"]


def test_the_forecast_follows_the_future_values_given(with_covariates):
    stamps = with_covariates.future_timestamps(driven_frame(400).index[-1])
    low = with_covariates.predict(future=pd.DataFrame({"promo": -np.ones(H)}, index=stamps))
    high = with_covariates.predict(future=pd.DataFrame({"promo": np.ones(H)}, index=stamps))
    assert not np.allclose(low.to_numpy(), high.to_numpy())
    # A time column instead of a DatetimeIndex is read too.
    column = pd.DataFrame({"date": stamps, "promo": np.ones(H)})
    pd.testing.assert_frame_equal(with_covariates.predict(future=column), high)


def _future(forecaster, **changes) -> pd.DataFrame:
    stamps = forecaster.future_timestamps(driven_frame(400).index[-1])
    return pd.DataFrame({"promo": np.zeros(H), **changes}, index=stamps)


@pytest.mark.parametrize(
    ("make_future", "message"),
    [
        (lambda f: None, r"reads the future covariates \['promo'\]: predict\(future=frame\) needs their values at the 12 "
                         r"forecast timestamps 2020-01-17 16:00:00 \.\.\. 2020-01-18 03:00:00"),
        (lambda f: _future(f).iloc[:-1], r"future= has 11 rows; the forecast has 12 steps"),
        (lambda f: _future(f).rename(columns={"promo": "promotion"}), r"missing \['promo'\], unexpected \['promotion'\]"),
        (lambda f: _future(f, temp=np.zeros(H)), r"exactly the future covariates \['promo'\]: missing \[\], unexpected \['temp'\]"),
        (lambda f: _future(f).shift(1, freq="h"), r"future= row 0 is at 2020-01-17 17:00:00; forecast step 1 is at 2020-01-17 16:00:00"),
        (lambda f: _future(f, promo=[0.0] * 5 + [np.nan] + [0.0] * 6), r"column 'promo' row 5 .* not a finite number"),
        (lambda f: _future(f).to_numpy(), r"future= must be a pandas DataFrame indexed by the forecast timestamps"),
    ],
    ids=["missing", "short", "renamed", "extra", "shifted", "nan", "array"],
)
def test_a_wrong_future_is_an_error_naming_what_is_wrong(with_covariates, make_future, message):
    with pytest.raises(DataError, match=message):
        with_covariates.predict(future=make_future(with_covariates))


def test_future_values_for_a_model_without_future_covariates_are_refused():
    plain = fitted(past_covariates=["temp"])
    with pytest.raises(DataError, match=r"future= was given, but this model was fitted without future covariates"):
        plain.predict(future=_future(plain))
    assert list(plain.predict().columns) == ["sales"]  # past covariates need nothing more


def test_saved_and_loaded_the_model_forecasts_the_same(with_covariates, tmp_path):
    future = _future(with_covariates, promo=np.linspace(-1, 1, H))
    expected = with_covariates.predict(future=future)
    loaded = Forecaster.load(with_covariates.save(tmp_path / "model"))
    assert loaded.meta_.history_columns == ["sales", "temp", "promo"]
    pd.testing.assert_frame_equal(loaded.predict(future=future), expected)
    # New history with its covariate columns, and the future after it.
    history = driven_frame(400).iloc[:300]
    later = pd.DataFrame({"promo": np.zeros(H)}, index=loaded.future_timestamps(history.index[-1]))
    assert len(loaded.predict(history, future=later)) == H
    with pytest.raises(DataError, match=r"missing \['promo'\]"):
        loaded.predict(history.drop(columns=["promo"]), future=later)


def test_backtest_reads_the_future_covariates_after_each_cutoff(with_covariates):
    frame = driven_frame(400)
    backtest = with_covariates.backtest(frame, n_windows=1)
    cutoff = len(frame) - H - 1
    history, after = frame.iloc[cutoff - L + 1 : cutoff + 1], frame.iloc[cutoff + 1 : cutoff + 1 + H]
    direct = with_covariates.predict(history, future=after[["promo"]])
    np.testing.assert_allclose(backtest["forecast"].to_numpy(), direct["sales"].to_numpy(), rtol=1e-6)
    np.testing.assert_allclose(backtest["value"].to_numpy(), after["sales"].to_numpy())


def test_intervals_and_evaluate_work_with_covariates(with_covariates):
    scores = with_covariates.evaluate(level=[80])
    assert 0.0 <= scores["coverage_80"] <= 1.0 and scores["windows"] > 0
    forecast = with_covariates.predict(future=_future(with_covariates), level=[80])
    assert list(forecast.columns) == ["sales", "sales-lo-80", "sales-hi-80"]


@pytest.mark.parametrize(
    ("keywords", "error", "message"),
    [
        ({"future_covariates": ["prom"]}, ConfigError, r"future_covariates \['prom'\] are not columns; did you mean 'promo'"),
        ({"past_covariates": ["sales"]}, ConfigError, r"the target 'sales' cannot also be a covariate"),
        ({"past_covariates": ["promo"], "future_covariates": ["promo"]}, ConfigError, r"both past and future covariates"),
        ({"static_covariates": ["store_size"]}, ConfigError, r"static_covariates is about many entities: name their column"),
    ],
    ids=["typo", "target", "both-kinds", "static"],
)
def test_covariate_mistakes_are_clear_errors(keywords, error, message):
    with pytest.raises(error, match=message):
        fitted(**keywords)


def test_new_data_is_evaluated_with_the_models_covariates_however_they_were_given():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forecaster = Forecaster("itransformer_mha", horizon=H, lookback=L, max_epochs=1, **SMALL)
        forecaster.fit(driven_frame(400), features="MS", target="sales", future_covariates=["promo"])  # a fit option
    scores = forecaster.evaluate(driven_frame(400, seed=1), features="MS", target="sales")
    assert scores["windows"] > 0 and np.isfinite(scores["mse"])


def test_fitting_again_with_other_covariates_starts_from_the_constructor():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Every size key given: fit keeps the config rather than sizing it from the data again.
        forecaster = Forecaster("itransformer_damcha", horizon=H, lookback=L, max_epochs=1, **SMALL,
                                generator_hidden=[8], future_covariates=["promo"])
        forecaster.fit(driven_frame(400), features="MS", target="sales")
        forecaster.fit(driven_frame(400), features="MS", target="sales", future_covariates=["promo", "temp"])
    assert forecaster.model_config["future_covariates"] == 2 and forecaster.meta_.future_covariates == ["promo", "temp"]


def test_future_timestamps_are_parsed_with_the_fits_date_format():
    frame = driven_frame(200).rename_axis("date").reset_index()  # ends on the 9th of January
    frame["date"] = frame["date"].dt.strftime("%d/%m/%Y %H:%M")  # day first: 09/01 is the 9th of January
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forecaster = Forecaster("itransformer_mha", horizon=H, lookback=L, max_epochs=1, **SMALL,
                                future_covariates=["promo"])
        forecaster.fit(frame, features="MS", target="sales", date_format="%d/%m/%Y %H:%M")
    stamps = forecaster.future_timestamps(pd.Timestamp("2020-01-09 07:00"))
    future = pd.DataFrame({"date": stamps.strftime("%d/%m/%Y %H:%M"), "promo": 0.0})
    assert len(forecaster.predict(future=future)) == H


def test_a_quantile_model_reads_the_future_covariates_in_every_level_block():
    """The point model of a quantile model forecasts Q blocks of H steps; each block gets the same
    horizon values of the future covariates, so changing them moves every level."""
    quantile_model = fitted(future_covariates=["promo"], quantiles=[0.1, 0.9])
    stamps = quantile_model.future_timestamps(driven_frame(400).index[-1])
    low = quantile_model.predict(future=pd.DataFrame({"promo": -np.ones(H)}, index=stamps))
    high = quantile_model.predict(future=pd.DataFrame({"promo": np.ones(H)}, index=stamps))
    assert list(low.columns) == ["sales", "sales_q0.1", "sales_q0.5", "sales_q0.9"]
    for column in low.columns:
        assert not np.allclose(low[column], high[column]), column
    assert (low["sales_q0.1"] <= low["sales_q0.9"]).all()
    assert 0.0 <= quantile_model.evaluate(level=[80])["coverage_80"] <= 1.0
