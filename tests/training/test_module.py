"""forecast_loss against element-by-element references, and ForecastModule's constructor and val_loss."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from damcha_ts.errors import ConfigError
from damcha_ts.training import TrainingConfig
from damcha_ts.training.module import ForecastModule, forecast_loss

LEVELS = [0.1, 0.5, 0.9]
MODEL = {"name": "itransformer_damcha", "seq_len": 12, "pred_len": 4, "d_model": 8, "n_heads": 2, "e_layers": 1,
         "d_ff": 8, "generator_hidden": [4]}


def tensors(*shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64)


def mask(*shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=generator) > 0.3).double()


def slow_squared_errors(prediction, target, observed=None):
    """(sum, count) of squared errors over observed entries, one element at a time."""
    total, count = 0.0, 0.0
    for b, h, n in itertools.product(*map(range, target.shape)):
        weight = 1.0 if observed is None else float(observed[b, h, n])
        total += weight * (float(prediction[b, h, n]) - float(target[b, h, n])) ** 2
        count += weight
    return total, count


def slow_pinball(prediction, target, levels, observed=None):
    """(sum, count) of ρ_τ(y − q̂) = max(τu, (τ−1)u) over levels and observed entries, one at a time."""
    total, count = 0.0, 0.0
    for b, k, h, n in itertools.product(*map(range, prediction.shape)):
        weight = 1.0 if observed is None else float(observed[b, h, n])
        u = float(target[b, h, n]) - float(prediction[b, k, h, n])
        total += weight * (levels[k] * u if u >= 0 else (levels[k] - 1.0) * u)
        count += weight
    return total, count


@pytest.mark.parametrize("masked", [False, True])
def test_point_loss_is_the_mse_over_observed_targets(masked):
    prediction, target = tensors(3, 4, 5, seed=1), tensors(3, 4, 5, seed=2)
    observed = mask(3, 4, 5) if masked else None
    total, count = slow_squared_errors(prediction, target, observed)
    assert forecast_loss(prediction, target, observed=observed).item() == pytest.approx(total / count, rel=1e-12)
    summed, counted = forecast_loss(prediction, target, observed=observed, reduction="sum")
    assert float(summed) == pytest.approx(total, rel=1e-12) and float(counted) == count


@pytest.mark.parametrize("masked", [False, True])
def test_quantile_loss_is_the_pinball_loss_over_levels_and_observed_targets(masked):
    prediction, target = tensors(3, len(LEVELS), 4, 5, seed=3), tensors(3, 4, 5, seed=4)
    observed = mask(3, 4, 5, seed=5) if masked else None
    total, count = slow_pinball(prediction, target, LEVELS, observed)
    loss = forecast_loss(prediction, target, LEVELS, observed=observed)
    assert loss.item() == pytest.approx(total / count, rel=1e-12)
    summed, counted = forecast_loss(prediction, target, LEVELS, observed=observed, reduction="sum")
    assert float(summed) == pytest.approx(total, rel=1e-12) and float(counted) == count


def test_unmasked_point_loss_is_torchs_mse_to_the_bit():
    """The trainer's loss before forecast_loss existed was F.mse_loss: the same kernel, same bits."""
    prediction, target = tensors(2, 3, 4, seed=6).float(), tensors(2, 3, 4, seed=7).float()
    assert torch.equal(forecast_loss(prediction, target), torch.nn.functional.mse_loss(prediction, target))


def test_sums_and_counts_give_the_exact_mean_over_batches_of_different_sizes():
    prediction, target, observed = tensors(7, 4, 3, seed=8), tensors(7, 4, 3, seed=9), mask(7, 4, 3, seed=10)
    parts = [forecast_loss(prediction[s], target[s], observed=observed[s], reduction="sum")
             for s in (slice(0, 5), slice(5, 7))]
    mean = sum(p[0] for p in parts) / sum(p[1] for p in parts)
    assert mean.item() == pytest.approx(forecast_loss(prediction, target, observed=observed).item(), rel=1e-12)


def test_bad_shapes_and_reductions_are_refused():
    with pytest.raises(ConfigError, match="forecast_loss"):
        forecast_loss(torch.zeros(2, 3, 4, 5), torch.zeros(2, 4, 5))  # quantile output without levels
    with pytest.raises(ConfigError, match="reduction"):
        forecast_loss(torch.zeros(2, 4, 5), torch.zeros(2, 4, 5), reduction="none")
    with pytest.raises(ConfigError, match="reduction"):
        forecast_loss(torch.zeros(2, 3, 4, 5), torch.zeros(2, 4, 5), LEVELS, reduction="none")


@pytest.mark.parametrize("quantiles", [None, [0.2, 0.8]])
def test_a_training_config_or_its_mapping_build_the_same_module(quantiles):
    config = TrainingConfig(learning_rate=3e-3, quantiles=quantiles)
    modules = []
    for training in (config, dataclasses.asdict(config)):  # the runner passes the mapping
        torch.manual_seed(0)
        modules.append(ForecastModule(MODEL, training))
    from_config, from_mapping = modules
    assert from_config.hparams == from_mapping.hparams
    # Plain types only, so a checkpoint's hyper_parameters load with torch.load(weights_only=True).
    assert type(from_config.hparams["training"]) is dict and type(from_config.hparams["model_config"]) is dict
    assert from_config.training_config == from_mapping.training_config == config
    for (name, a), (_, b) in zip(from_config.state_dict().items(), from_mapping.state_dict().items()):
        assert torch.equal(a, b), name


def test_validation_loss_is_the_mean_over_all_windows_not_of_batch_means():
    module = ForecastModule(MODEL, {"quantiles": LEVELS}).double().eval()
    batches = [{"x": tensors(b, 12, 3, seed=b), "y": tensors(b, 4, 3, seed=b + 10)} for b in (5, 1)]
    module.on_validation_epoch_start()
    predictions = []
    with torch.no_grad():
        for index, batch in enumerate(batches):
            module.validation_step(batch, index)
            predictions.append(module(batch["x"]))
    total, count = zip(*(slow_pinball(p, b["y"], LEVELS) for p, b in zip(predictions, batches)))
    assert (module._val_sum / module._val_count).item() == pytest.approx(sum(total) / sum(count), rel=1e-12)
