"""Quantile forecasts: levels, pinball loss, mean estimate and the quantile wrapper of a point model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from damcha_ts.errors import ConfigError
from damcha_ts.models import MODEL_NAMES, build_model
from damcha_ts.models.quantiles import (
    QuantileForecastModel,
    median_index,
    pinball_loss,
    quantile_column_name,
    quantile_columns,
    quantile_mean,
    quantile_mean_weights,
    validate_quantiles,
)

SEQ_LEN, HORIZON, N_VARIATES = 24, 6, 5


def tiny_config(name: str, **overrides) -> dict:
    config = {
        "name": name,
        "seq_len": SEQ_LEN,
        "pred_len": HORIZON,
        "d_model": 16,
        "n_heads": 2,
        "e_layers": 1,
        "d_ff": 16,
        "dropout": 0.0,
    }
    if name.startswith("itransformer"):
        config["use_time_marks"] = False
    if name.startswith("gateformer"):
        config.update(patch_len=8, stride=8)
    if name.endswith("damcha"):
        config["generator_hidden"] = (8,)
    return {**config, **overrides}


# -- levels ------------------------------------------------------------------------------------


def test_validate_quantiles_sorts_deduplicates_and_adds_the_median():
    assert validate_quantiles([0.9, 0.1, 0.9]) == (0.1, 0.5, 0.9)
    assert validate_quantiles((0.5,)) == (0.5,)
    assert validate_quantiles([0.25]) == (0.25, 0.5)
    assert validate_quantiles(np.array([0.9, 0.1], dtype=np.float32)) == (
        float(np.float32(0.1)),
        0.5,
        float(np.float32(0.9)),
    )
    assert median_index(validate_quantiles([0.05, 0.3, 0.95])) == 2
    assert quantile_column_name("OT", 0.1) == "OT_q0.1"


def test_quantile_columns_name_every_variate_and_level():
    values = np.arange(2 * 3 * 2, dtype=float).reshape(2, 3, 2)  # [Q=2, H=3, C=2]
    table = quantile_columns(["a", "b"], (0.1, 0.5), values)
    assert list(table) == ["a_q0.1", "a_q0.5", "b_q0.1", "b_q0.5"]
    np.testing.assert_array_equal(table["b_q0.1"], values[0, :, 1])
    np.testing.assert_array_equal(table["a_q0.5"], values[1, :, 0])
    with pytest.raises(ConfigError, match="quantile_columns"):
        quantile_columns(["a"], (0.1, 0.5), values)


@pytest.mark.parametrize("bad", [[], [0.0], [1.0], [1.5], [float("nan")], ["0.1"], [True], "0.1", 0.5, {0.1: 1}])
def test_validate_quantiles_rejects_bad_levels_naming_the_argument(bad):
    with pytest.raises(ConfigError, match="quantiles"):
        validate_quantiles(bad)


# -- pinball loss ------------------------------------------------------------------------------


def slow_pinball(prediction, target, levels, observed=None):
    """Element-by-element reference: ρ_τ(u) = τ·u if u >= 0 else (τ − 1)·u, u = y − q̂."""
    total, count = 0.0, 0.0
    batch, n_levels, horizon, n_variates = prediction.shape
    for b in range(batch):
        for k in range(n_levels):
            for h in range(horizon):
                for n in range(n_variates):
                    weight = 1.0 if observed is None else float(observed[b, h, n])
                    u = float(target[b, h, n] - prediction[b, k, h, n])
                    rho = levels[k] * u if u >= 0 else (levels[k] - 1.0) * u
                    total += weight * rho
                    count += weight
    return total / count


def test_pinball_loss_matches_an_element_by_element_reference():
    generator = torch.Generator().manual_seed(0)
    levels = (0.1, 0.5, 0.9)
    prediction = torch.randn(3, 3, 4, 2, generator=generator, dtype=torch.float64)
    target = torch.randn(3, 4, 2, generator=generator, dtype=torch.float64)
    observed = (torch.rand(3, 4, 2, generator=generator) > 0.3).double()
    assert pinball_loss(prediction, target, levels).item() == pytest.approx(
        slow_pinball(prediction, target, levels), rel=1e-12
    )
    assert pinball_loss(prediction, target, levels, observed=observed).item() == pytest.approx(
        slow_pinball(prediction, target, levels, observed), rel=1e-12
    )


def test_pinball_loss_at_the_median_is_half_the_mae():
    generator = torch.Generator().manual_seed(1)
    prediction = torch.randn(4, 1, 5, 3, generator=generator, dtype=torch.float64)
    target = torch.randn(4, 5, 3, generator=generator, dtype=torch.float64)
    mae = (prediction[:, 0] - target).abs().mean()
    assert pinball_loss(prediction, target, [0.5]).item() == pytest.approx(0.5 * mae.item(), rel=1e-12)


def test_pinball_loss_is_minimised_by_the_empirical_quantiles():
    # Over a sample, a τ-quantile of the sample (an order statistic) minimises the mean pinball loss
    # among all constants: compare it with a grid spanning the sample.
    rng = np.random.default_rng(2)
    sample = rng.exponential(size=501)  # skewed, so each level has a distinct answer
    target = torch.from_numpy(sample).view(-1, 1, 1)

    def loss_of_constant(value: float, level: float) -> float:
        prediction = torch.full((len(sample), 1, 1, 1), value, dtype=torch.float64)
        return pinball_loss(prediction, target, [level]).item()

    grid = np.linspace(sample.min(), sample.max(), 300)
    for level in (0.1, 0.5, 0.9):
        best = np.quantile(sample, level, method="inverted_cdf")
        best_loss = loss_of_constant(best, level)
        assert all(best_loss <= loss_of_constant(value, level) + 1e-12 for value in grid)
        assert best_loss < loss_of_constant(best * 1.2, level) and best_loss < loss_of_constant(best * 0.8, level)


def test_pinball_loss_rejects_mismatched_shapes():
    with pytest.raises(ConfigError, match="pinball_loss"):
        pinball_loss(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4), [0.1, 0.5, 0.9])
    with pytest.raises(ConfigError, match="levels"):
        pinball_loss(torch.zeros(2, 3, 4, 1), torch.zeros(2, 4, 1), [0.1, 0.5])


# -- mean estimate -----------------------------------------------------------------------------


def test_mean_weights_integrate_the_quantile_function():
    weights = quantile_mean_weights([0.1, 0.5, 0.9])
    # trapezoid between levels + flat tails: 0.1 + 0.2, 0.2 + 0.2, 0.2 + 0.1
    assert weights == pytest.approx([0.3, 0.4, 0.3])
    assert quantile_mean_weights([0.5]) == [1.0]
    dense = np.round(np.arange(0.01, 1.0, 0.01), 2)
    assert sum(quantile_mean_weights(dense)) == pytest.approx(1.0)


def test_mean_estimate_recovers_known_means():
    levels = validate_quantiles(np.round(np.arange(0.01, 1.0, 0.01), 2).tolist())
    u = torch.tensor(levels, dtype=torch.float64)
    # Exponential(1): Q(u) = −log(1 − u), mean 1. The flat tails lose ∫ beyond 0.99, about 0.01.
    exponential = -torch.log1p(-u)
    assert quantile_mean(exponential.view(1, -1), levels, dim=1).item() == pytest.approx(1.0, abs=0.015)
    # A symmetric distribution with symmetric levels: mean estimate = median exactly.
    symmetric_levels = validate_quantiles([0.1, 0.25, 0.75, 0.9])
    normal = torch.distributions.Normal(3.0, 2.0).icdf(torch.tensor(symmetric_levels, dtype=torch.float64))
    assert quantile_mean(normal, symmetric_levels, dim=0).item() == pytest.approx(3.0, abs=1e-12)


# -- the quantile wrapper ----------------------------------------------------------------------


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_wrapper_reads_the_point_output_level_major_and_sorts_it(name):
    torch.manual_seed(0)
    levels = validate_quantiles([0.1, 0.9])
    wrapper = build_model(tiny_config(name), quantiles=levels).double().eval()
    assert wrapper.point_model.config.pred_len == HORIZON * len(levels)
    assert wrapper.horizon == HORIZON
    assert wrapper.name == name and wrapper.config is wrapper.point_model.config
    x = torch.randn(2, SEQ_LEN, N_VARIATES, dtype=torch.float64)
    with torch.no_grad():
        stacked = wrapper.point_model(x).numpy()  # [B, Q·H, N]
        quantiles = wrapper(x).numpy()  # [B, Q, H, N]
    assert quantiles.shape == (2, len(levels), HORIZON, N_VARIATES)
    for b in range(2):
        for h in range(HORIZON):
            for n in range(N_VARIATES):
                column = sorted(stacked[b, k * HORIZON + h, n] for k in range(len(levels)))
                np.testing.assert_array_equal(quantiles[b, :, h, n], column)
    assert (np.diff(quantiles, axis=1) >= 0).all()
    np.testing.assert_array_equal(wrapper.median(torch.from_numpy(quantiles)).numpy(), quantiles[:, 1])


def test_wrapper_quantiles_follow_an_affine_change_of_the_data_scale():
    # Instance normalisation + de-normalisation: forecasts of a·x + b are a·forecast(x) + b for a > 0,
    # for every quantile, which is what makes one head per level valid with de-normalisation.
    torch.manual_seed(1)
    wrapper = build_model(tiny_config("itransformer_damcha"), quantiles=[0.1, 0.9]).double().eval()
    x = 10.0 * torch.randn(3, SEQ_LEN, N_VARIATES, dtype=torch.float64)  # variance >> the 1e-5 eps
    with torch.no_grad():
        base = wrapper(x)
        moved = wrapper(4.0 * x + 7.0)
    torch.testing.assert_close(moved, 4.0 * base + 7.0, rtol=1e-4, atol=1e-4)


def test_wrapper_gradients_reach_the_point_model():
    torch.manual_seed(2)
    wrapper = build_model(tiny_config("gateformer_damcha"), quantiles=[0.2, 0.8])
    x, y = torch.randn(4, SEQ_LEN, N_VARIATES), torch.randn(4, HORIZON, N_VARIATES)
    pinball_loss(wrapper(x), y, wrapper.quantiles).backward()
    grads = [p.grad for p in wrapper.point_model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)
    groups = wrapper.parameter_groups(1e-3)
    assert sum(len(list(g["params"])) for g in groups) == len(list(wrapper.parameters()))


def test_wrapper_rejects_inconsistent_inputs():
    point = build_model(tiny_config("itransformer_mha", pred_len=7))
    with pytest.raises(ConfigError, match="multiple"):
        QuantileForecastModel(point, [0.5, 0.9])
    with pytest.raises(ConfigError, match="validated"):
        QuantileForecastModel(build_model(tiny_config("itransformer_mha", pred_len=4)), [0.9, 0.1])


def test_future_covariates_are_tiled_once_per_level_block_of_the_point_model():
    from damcha_ts.models.base import Covariates

    torch.manual_seed(0)
    L, H, levels = 16, 4, (0.1, 0.5, 0.9)
    config = {"name": "itransformer_mha", "seq_len": L, "pred_len": H, "d_model": 16, "n_heads": 2, "e_layers": 1,
              "d_ff": 16, "dropout": 0.0, "future_covariates": 2}
    model = build_model(config, quantiles=levels).eval()
    x, future = torch.randn(3, L, 5), torch.randn(3, L + H, 2)
    tiled = torch.cat([future[:, :L], future[:, L:], future[:, L:], future[:, L:]], dim=1)  # [3, L + 3H, 2]
    expected = model.point_model(x, None, Covariates(future=tiled)).unflatten(1, (3, H)).sort(dim=1).values
    torch.testing.assert_close(model(x, None, Covariates(future=future)), expected)
    with pytest.raises(ConfigError, match=r"this quantile model reads \[B, 20, F\]"):
        model(x, None, Covariates(future=tiled))
