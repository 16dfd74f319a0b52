"""GluonTS's covariate fields map to ours (issue 20): ``feat_dynamic_real`` is a future covariate,
``past_feat_dynamic_real`` a past one, ``feat_static_real`` a static one; each is checked per entry
with a message naming the entry and the field."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from gluonts.dataset.common import ListDataset

from damcha_ts.errors import ConfigError, DataError
from damcha_ts.gluonts import DAMCHAEstimator

H, L, T = 12, 24, 1200
SMALL = {"d_model": 32, "n_heads": 2, "e_layers": 1, "d_ff": 64, "dropout": 0.0}
START = pd.Period("2020-01-01 00:00", freq="h")


def entries(steps: int, *, with_horizon: bool, seed: int = 0, stores: int = 2) -> list[dict]:
    """Per store: target [1, steps] = 2 x promo + a daily cycle + noise; promo known in advance."""
    rng = np.random.default_rng(seed)
    data = []
    for store in range(stores):
        promo = rng.normal(size=steps + H)
        cycle = np.sin(np.arange(steps) * 2 * np.pi / 24)
        target = 2.0 * promo[:steps] + cycle + 0.2 * rng.normal(size=steps) + store
        data.append({"start": START, "target": target[None, :], "item_id": f"store{store}",
                     "feat_dynamic_real": promo[None, : steps + H if with_horizon else steps],
                     "past_feat_dynamic_real": rng.normal(size=(1, steps)),
                     "feat_static_real": np.array([float(store)])})
    return data


def estimator(trainer_kwargs, **counts) -> DAMCHAEstimator:
    return DAMCHAEstimator(prediction_length=H, context_length=L, model="itransformer_damcha", hyperparameters=SMALL,
                           lr=3e-3, batch_size=32, num_batches_per_epoch=50, trainer_kwargs=trainer_kwargs(max_epochs=6),
                           **counts)


def test_a_target_driven_by_feat_dynamic_real_is_forecast_far_better_with_it(trainer_kwargs):
    windows = 10
    full = entries(T + windows * H, with_horizon=False)
    training = ListDataset([cut(entry, T) for entry in full], freq="h", one_dim_target=False)
    # Test: rolling origins after the training rows, each with promo's values over its horizon.
    origins = [T + k * H for k in range(windows)]
    test_inputs = [cut(entry, origin, horizon=True) for origin in origins for entry in full]
    truth = np.stack([entry["target"][0, origin : origin + H] for origin in origins for entry in full])

    def test_mse(**counts) -> float:
        predictor = estimator(trainer_kwargs, **counts).train(training)
        forecasts = list(predictor.predict(ListDataset(test_inputs, freq="h", one_dim_target=False)))
        return float(np.mean((np.stack([f.mean[:, 0] for f in forecasts]) - truth) ** 2))

    without = test_mse()
    with_it = test_mse(num_feat_dynamic_real=1, num_past_feat_dynamic_real=1, num_feat_static_real=1)
    print(f"GluonTS test MSE without covariates {without:.3f}, with them {with_it:.3f}")
    assert without > 2.0, without  # var(2 x promo) = 4: only the cycle and level are predictable
    assert with_it < 0.3 * without, (without, with_it)


def cut(entry: dict, steps: int, *, horizon: bool = False) -> dict:
    """The entry's first ``steps`` steps (``feat_dynamic_real``: H more with ``horizon``)."""
    known = steps + H if horizon else steps
    return {**entry, "target": entry["target"][:, :steps], "feat_dynamic_real": entry["feat_dynamic_real"][:, :known],
            "past_feat_dynamic_real": entry["past_feat_dynamic_real"][:, :steps]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e.pop("feat_dynamic_real"), r"entry 'store0' has no 'feat_dynamic_real'"),
        (lambda e: e.update(feat_dynamic_real=e["feat_dynamic_real"][:, :-H]),
         r"entry 'store0': feat_dynamic_real has shape \(1, 100\); expected \(1, 112\).*12 forecast steps"),
        (lambda e: e.update(feat_static_real=np.array([1.0, 2.0])),
         r"entry 'store0': feat_static_real has shape \(2,\); expected \(1,\)"),
    ],
    ids=["missing", "no-horizon", "static-shape"],
)
def test_a_forecast_entry_without_its_covariates_is_an_error_naming_it(trainer_kwargs, change, message):
    predictor = estimator(trainer_kwargs, num_feat_dynamic_real=1, num_feat_static_real=1).train(
        ListDataset(entries(200, with_horizon=False), freq="h", one_dim_target=False))
    entry = entries(100, with_horizon=True, stores=1)[0]
    change(entry)
    with pytest.raises(DataError, match=message):
        list(predictor.predict(ListDataset([entry], freq="h", one_dim_target=False)))


def test_counts_are_the_estimators_own_arguments():
    with pytest.raises(ConfigError, match=r"hyperparameters\[.future_covariates.\] is set by DAMCHAEstimator from the num_\*_real"):
        DAMCHAEstimator(prediction_length=H, hyperparameters={"future_covariates": 1})
    with pytest.raises(ConfigError, match=r"num_feat_static_real=-1"):
        DAMCHAEstimator(prediction_length=H, num_feat_static_real=-1)
