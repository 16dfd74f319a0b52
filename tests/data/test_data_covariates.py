"""Covariate columns of a series (data/covariates.py): named, checked, scaled with the train rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from damcha_ts.data.covariates import covariate_names, scale_covariates, take_covariates
from damcha_ts.errors import ConfigError


def _frame(rows: int = 40) -> pd.DataFrame:
    generator = np.random.default_rng(0)
    return pd.DataFrame(generator.normal(size=(rows, 4)) * [1, 2, 3, 4] + [0, 10, 20, 30],
                        columns=["sales", "price", "promo", "temp"],
                        index=pd.date_range("2024-01-01", periods=rows, freq="D"))


def test_names_are_lists_of_columns_of_one_kind_each():
    assert covariate_names("temp", ["price", "promo"]) == {"past": ["temp"], "future": ["price", "promo"]}
    assert covariate_names(None, None) == {"past": [], "future": []}
    with pytest.raises(ConfigError, match=r"\['price'\] are named as both past and future"):
        covariate_names(["price"], ["price"])
    with pytest.raises(ConfigError, match=r"future_covariates names \['promo'\] twice"):
        covariate_names([], ["promo", "promo"])
    with pytest.raises(ConfigError, match=r"past_covariates=\[1\]: expected a list of column names"):
        covariate_names([1], None)


def test_missing_covariates_are_named_with_close_columns_and_the_target_cannot_be_one():
    frame = _frame()
    with pytest.raises(ConfigError, match=r"shop\.csv: future_covariates \['prise'\] are not columns; did you mean 'price'"):
        take_covariates(frame, covariate_names(None, ["prise"]), None, "shop.csv")
    with pytest.raises(ConfigError, match=r"the target 'sales' cannot also be a covariate"):
        take_covariates(frame, covariate_names(["sales"], None), "sales", "shop.csv")
    with pytest.raises(ConfigError, match="every column is a covariate"):
        take_covariates(frame, covariate_names(["sales", "temp"], ["price", "promo"]), None, "shop.csv")
    taken = take_covariates(frame, covariate_names(["temp"], ["price", "promo"]), "sales", "shop.csv")
    assert list(taken.columns) == ["temp", "price", "promo"]  # past first, then future


def test_covariates_are_scaled_with_the_train_rows_only():
    frame = _frame()
    names = covariate_names(["temp"], ["price", "promo"])
    series = scale_covariates(take_covariates(frame, names, None, "f"), names, (0, 20), used_rows=35)
    assert series.past.shape == (35, 1) and series.future.shape == (35, 2) and series.past.dtype == np.float32
    train = frame[["temp", "price", "promo"]].iloc[:20].to_numpy()
    expected = (frame[["temp", "price", "promo"]].iloc[:35].to_numpy() - train.mean(0)) / train.std(0)
    np.testing.assert_allclose(np.hstack([series.past, series.future]), expected, rtol=1e-5, atol=1e-5)
    assert series.counts() == {"past_covariates": 1, "future_covariates": 2}
    assert series.columns == ["temp", "price", "promo"]
