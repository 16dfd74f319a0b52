"""The gated metric (issue 23's first candidate): m_i(x) = m0_i + g_i * Delta_i(x), gates 0 at init.

Specified here: with the gates at 0 the model is exactly the static-metric model (every output, to
the bit); the gates learn from the first step while the generator waits for them; compact and full
parameterisations start as the same function; the option is refused beside static_metric.
"""

from __future__ import annotations

import pytest
import torch

from damcha_ts.errors import ConfigError
from damcha_ts.models import build_model
from damcha_ts.models.metric_generator import GatedMetric, MetricGenerator, StaticMetric

SIZE = {"seq_len": 24, "pred_len": 12, "d_model": 16, "n_heads": 2, "d_ff": 16, "e_layers": 2,
        "generator_hidden": [8], "dropout": 0.0}


def _static_keys_of_gated(key: str) -> str:
    """A static-model parameter's name in the gated model (its metric sits under ``static.``)."""
    return key.replace("metric_generator.", "metric_generator.static.")


@pytest.mark.parametrize("family", ["itransformer", "gateformer"])
def test_gates_at_zero_are_exactly_the_static_metric_model(family):
    torch.manual_seed(0)
    static = build_model({"name": f"{family}_damcha", "static_metric": True, **SIZE}).eval()
    gated = build_model({"name": f"{family}_damcha", "metric_gate": True, **SIZE}).eval()
    state = {_static_keys_of_gated(k): v for k, v in static.state_dict().items()}
    missing, unexpected = gated.load_state_dict(state, strict=False)
    assert not unexpected and missing and all(".adaptive." in k or k.endswith(".gate") for k in missing)
    x, marks = torch.randn(4, 24, 5), torch.randn(4, 24, 4)
    with torch.no_grad():
        assert torch.equal(gated(x, marks), static(x, marks))
        for module in gated.modules():  # and not because the adaptive part happens to be small
            if isinstance(module, GatedMetric):
                assert module.adaptive(torch.randn(4, 5, 16)).abs().max() > 0.05


def test_the_gates_learn_first_and_the_generator_follows():
    torch.manual_seed(0)
    model = build_model({"name": "itransformer_damcha", "metric_gate": True, **SIZE})
    (gated,) = [m for m in model.modules() if isinstance(m, GatedMetric)]
    model(torch.randn(4, 24, 5)).pow(2).mean().backward()
    assert gated.gate.grad.abs().min() > 0  # every head's gate gets a gradient at once
    assert all(p.grad is None or not p.grad.any() for p in gated.adaptive.parameters())
    with torch.no_grad():
        gated.gate.fill_(0.5)
    model.zero_grad()
    model(torch.randn(4, 24, 5)).pow(2).mean().backward()
    assert gated.adaptive.reduced_weight.grad.abs().max() > 0


def test_compact_and_full_gated_metrics_start_as_one_function():
    tokens = torch.randn(3, 7, 16)
    metrics = []
    for parameterization in ("compact", "full"):
        torch.manual_seed(1)
        gated = GatedMetric(StaticMetric(16, 2, parameterization), MetricGenerator(16, 2, (8,), 0.0, parameterization))
        with torch.no_grad():
            gated.gate.fill_(0.3)  # the adaptive part counts too
        metrics.append(gated(tokens))
    torch.testing.assert_close(metrics[0], metrics[1], rtol=1e-5, atol=1e-6)


def test_full_gated_metric_rowsums_are_the_head_metrics():
    """Eq. 4 for the gated metric: the block-row sums of M0 + G M(x) are the head metrics."""
    torch.manual_seed(2)
    gated = GatedMetric(StaticMetric(16, 2, "full"), MetricGenerator(16, 2, (8,), 0.0, "full"))
    with torch.no_grad():
        gated.gate.copy_(torch.tensor([0.2, -0.7]))
    heads, full = gated.with_full_metric(torch.randn(3, 7, 16))
    torch.testing.assert_close(full.view(3, 2, 8, 2, 8).sum(dim=3), heads, rtol=1e-5, atol=1e-6)


def test_the_gate_and_the_static_metric_exclude_each_other():
    with pytest.raises(ConfigError, match="static_metric=True and metric_gate=True exclude each other"):
        build_model({"name": "itransformer_damcha", "metric_gate": True, "static_metric": True, **SIZE})
