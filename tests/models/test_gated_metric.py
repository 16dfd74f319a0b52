"""The gated metric (issue 23): m_i(x) = m0_i + g_i * Delta_i(x), gates 0 at init, and its knobs.

Specified here: with the gates at 0 the model is exactly the static-metric model (every output, to
the bit); the gates learn from the first step while the generator waits for them; compact and full
parameterisations start as the same function; the option is refused beside static_metric.
``metric_delta_norm`` makes |g_i| the adaptive part's size relative to the identity; ``metric_rank``
gives rank-r metrics U_i(x) V_i^T that equal a full-rank generator whose last layer is constrained to
rank r; ``training.gate_lr_scale`` trains the gates (only them) faster.
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


def _gated(delta_norm: bool, parameterization: str = "compact", rank: int | None = None) -> GatedMetric:
    return GatedMetric(StaticMetric(16, 2, parameterization),
                       MetricGenerator(16, 2, (8,), 0.0, parameterization, rank=rank), delta_norm)


@pytest.mark.parametrize("parameterization", ["compact", "full"])
def test_delta_norm_makes_the_gate_the_adaptive_parts_relative_size(parameterization):
    """||m_i(x) - m0_i||_F = |g_i| * ||I_dh||_F for every sample and head, whatever the generator's scale."""
    torch.manual_seed(3)
    gated = _gated(True, parameterization)
    with torch.no_grad():
        gated.gate.copy_(torch.tensor([0.25, -1.5]))
        for layer in gated.adaptive.modules():  # a generator of any output scale
            if isinstance(layer, torch.nn.Linear):
                layer.weight.mul_(40.0)
    tokens = torch.randn(5, 7, 16)
    heads = gated(tokens)
    distance = torch.linalg.matrix_norm(heads - gated.static())  # [B, H]
    expected = gated.gate.abs() * 8 ** 0.5  # dh = 8
    torch.testing.assert_close(distance, expected.expand(5, 2), rtol=1e-5, atol=1e-6)
    # ... and the sums of the full metric's block-rows still are the head metrics (Eq. 4).
    full_heads, full = gated.with_full_metric(tokens)
    torch.testing.assert_close(full_heads, heads)
    if parameterization == "full":
        torch.testing.assert_close(full.view(5, 2, 8, 2, 8).sum(dim=3), heads, rtol=1e-5, atol=1e-5)
    unnormalised = _gated(False, parameterization)
    unnormalised.load_state_dict(gated.state_dict())
    assert not torch.allclose(torch.linalg.matrix_norm(unnormalised(tokens) - gated.static()), distance)


def test_delta_norm_with_gates_at_zero_is_still_the_static_metric():
    torch.manual_seed(4)
    gated = _gated(True)
    tokens = torch.randn(3, 6, 16)
    assert torch.equal(gated(tokens), gated.static().expand(3, 2, 8, 8))


def test_a_rank_r_generator_is_the_full_generator_with_a_rank_r_last_layer():
    """Explicit reference: the full-rank compact generator whose row (i, p, q) of the last layer is
    sum_k U[(i, p, k)] V_i[q, k] computes the same metrics, and each has matrix rank <= r."""
    torch.manual_seed(5)
    low = MetricGenerator(16, 2, (8,), 0.0, "compact", rank=3)
    with torch.no_grad():
        low.rank_basis.normal_()  # not the truncated identity it starts as
    full = MetricGenerator(16, 2, (8,), 0.0, "compact")
    full.hidden_layers.load_state_dict(low.hidden_layers.state_dict())
    with torch.no_grad():
        u_weight = low.reduced_weight.view(2, 8, 3, 8)  # (i, p, k, w)
        u_bias = low.reduced_bias.view(2, 8, 3)
        full.reduced_weight.copy_(torch.einsum("ipkw,iqk->ipqw", u_weight, low.rank_basis).reshape(-1, 8))
        full.reduced_bias.copy_(torch.einsum("ipk,iqk->ipq", u_bias, low.rank_basis).reshape(-1))
    tokens = torch.randn(4, 5, 16)
    metrics = low(tokens)
    torch.testing.assert_close(metrics, full(tokens), rtol=1e-5, atol=1e-6)
    assert torch.linalg.matrix_rank(metrics).max() == 3
    assert low.reduced_weight.numel() * 8 == full.reduced_weight.numel() * 3  # the layer shrinks by dh / r


def test_a_rank_dh_generator_is_the_full_rank_generator_from_the_same_seed():
    torch.manual_seed(6)
    explicit = MetricGenerator(16, 2, (8,), 0.0, "compact", rank=8)
    torch.manual_seed(6)
    default = MetricGenerator(16, 2, (8,), 0.0, "compact")
    assert not hasattr(explicit, "rank_basis")
    tokens = torch.randn(2, 5, 16)
    assert torch.equal(explicit(tokens), default(tokens))


def test_a_low_rank_generator_starts_as_the_first_r_columns_of_its_draws():
    """V starts as the first r columns of the identity, so at init U_i(x) V_i^T is U_i(x) padded."""
    torch.manual_seed(7)
    low = MetricGenerator(16, 2, (8,), 0.0, "compact", rank=2)
    tokens = torch.randn(3, 4, 16)
    metrics = low(tokens)
    assert torch.equal(metrics[..., 2:], torch.zeros_like(metrics[..., 2:]))
    assert metrics[..., :2].abs().min() > 0


@pytest.mark.parametrize("options, message", [
    ({"metric_delta_norm": True}, "metric_delta_norm=True needs metric_gate=True"),
    ({"static_metric": True, "metric_rank": 4}, "static_metric=True has no generator"),
    ({"metric_rank": 0}, "metric_rank=0; expected null"),
    ({"metric_rank": True}, "metric_rank=True; expected null"),
    ({"metric_rank": 9}, r"metric_rank=9; expected null \(full rank\) or an integer in 1..8"),
    ({"metric_rank": 4, "parameterization": "full"}, "metric_rank=4 needs parameterization='compact'"),
    ({"metric_rank": 4, "generator_init": "identity"}, "metric_rank=4 needs generator_init='default'"),
])
def test_the_new_knobs_refuse_what_they_cannot_mean(options, message):
    with pytest.raises(ConfigError, match=message):
        build_model({"name": "itransformer_damcha", **SIZE, **options})


def test_gate_lr_scale_trains_the_gates_and_only_them_faster():
    model = build_model({"name": "itransformer_damcha", "metric_gate": True, **SIZE})
    groups = {g["name"]: g for g in model.parameter_groups(1e-3, weight_decay=0.01, gate_lr_scale=20)}
    gates = [m.gate for m in model.modules() if isinstance(m, GatedMetric)]
    assert [id(p) for p in groups["metric_gate_x20"]["params"]] == [id(g) for g in gates]
    assert groups["metric_gate_x20"]["lr"] == pytest.approx(2e-2)
    assert groups["metric_gate_x20"]["weight_decay"] == 0.01  # the decay as set, not / 20
    assert groups["default"]["lr"] == 1e-3 and groups["damcha_compact_x2"]["lr"] == 2e-3
    unscaled = {g["name"] for g in model.parameter_groups(1e-3)}
    assert unscaled == {"default", "damcha_compact_x2"}  # without it the gates train at the base rate
    with pytest.raises(ConfigError, match="gate_lr_scale=20 needs a DAMCHA model with metric_gate=True"):
        build_model({"name": "itransformer_damcha", **SIZE}).parameter_groups(1e-3, gate_lr_scale=20)
