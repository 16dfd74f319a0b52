"""The baselines as models (models/baselines.py): each rule against its formula written out, and the
registry naming them wherever a model name is taken."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from damcha_ts.baselines import naive_forecast
from damcha_ts.errors import ConfigError
from damcha_ts.models import count_parameters
from damcha_ts.models.registry import BASELINE_NAMES, build_model, known_model_name, model_spec, resolve_model_config

L, H = 12, 7


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(0).normal(size=(5, L, 3)))


def loop_forecast(rule: str, window: np.ndarray, season: int = 4) -> np.ndarray:
    """One window [L, C] -> [H, C], step by step from the textbook definitions (FPP3 §5.2)."""
    out = np.empty((H, window.shape[1]))
    for h in range(1, H + 1):
        if rule == "naive":
            out[h - 1] = window[-1]
        elif rule == "seasonal_naive":  # y_{T+h} = y_{T+h-m(k+1)}, k = floor((h-1)/m)
            out[h - 1] = window[L - 1 + h - season * ((h - 1) // season + 1)]
        elif rule == "window_mean":
            out[h - 1] = window.mean(axis=0)
        else:  # drift: y_T + h (y_T - y_1) / (T - 1)
            out[h - 1] = window[-1] + h * (window[-1] - window[0]) / (L - 1)
    return out


@pytest.mark.parametrize("rule", ["naive", "seasonal_naive", "window_mean", "drift"])
def test_each_fixed_rule_is_its_textbook_formula_and_learns_nothing(rule, x):
    model = build_model({"name": rule, "seq_len": L, "pred_len": H, **({"season_length": 4} if rule == "seasonal_naive" else {})})
    forecast = model(x).numpy()
    for window, got in zip(x.numpy(), forecast):
        np.testing.assert_allclose(got, loop_forecast(rule, window), rtol=0, atol=1e-12)
    assert count_parameters(model) == 0 and model_spec(rule).trained is False


@pytest.mark.parametrize("rule, method", [("naive", "repeat_last"), ("window_mean", "window_mean")])
def test_the_models_agree_with_the_leaderboards_naive_methods(rule, method, x):
    model = build_model({"name": rule, "seq_len": L, "pred_len": H})
    np.testing.assert_allclose(model(x).numpy(), naive_forecast(method, x.numpy(), H), rtol=1e-13)  # torch vs NumPy sums


def test_linear_is_nlinear_with_its_own_weights(x):
    model = build_model({"name": "linear", "seq_len": L, "pred_len": H}).double()
    weight, bias = model.projection.weight.detach().numpy(), model.projection.bias.detach().numpy()  # [H, L], [H]
    for window, got in zip(x.numpy(), model(x).detach().numpy()):
        last = window[-1]
        expected = weight @ (window - last) + bias[:, None] + last
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert count_parameters(model) == L * H + H and model_spec("linear").trained


def test_every_baseline_is_a_model_name_with_its_own_canonical_name():
    assert BASELINE_NAMES == ("naive", "seasonal_naive", "window_mean", "drift", "linear")
    for name in BASELINE_NAMES:
        assert known_model_name(name)
        assert resolve_model_config({"name": name, "seq_len": L, "pred_len": H})["name"] == name
    with pytest.raises(ConfigError, match="did you mean seasonal_naive"):
        model_spec("seasonal_naiv")


def test_a_season_longer_than_the_lookback_or_quantiles_of_a_fixed_rule_are_refused():
    with pytest.raises(ConfigError, match="season_length=24 is longer than the lookback seq_len=12"):
        build_model({"name": "seasonal_naive", "seq_len": 12, "pred_len": 3, "season_length": 24})
    with pytest.raises(ConfigError, match="quantiles: drift is a fixed rule"):
        build_model({"name": "drift", "seq_len": 12, "pred_len": 3}, quantiles=[0.1, 0.9])
    with pytest.raises(ConfigError, match="season_length"):
        build_model({"name": "seasonal_naive", "seq_len": 12, "pred_len": 3, "season_length": 0})
    assert build_model({"name": "linear", "seq_len": 12, "pred_len": 3}, quantiles=[0.1, 0.9])(
        torch.zeros(2, 12, 1)).shape == (2, 3, 3, 1)  # [B, Q, H, N]: a trained baseline takes quantiles
