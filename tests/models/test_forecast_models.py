"""iTransformer and Gateformer: parameter counts against the reference architectures, symmetries,
gradients at several variate counts, time marks and attention maps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from damcha_ts.models import MODEL_NAMES, build_model, count_parameters

TINY = {"seq_len": 96, "pred_len": 24, "d_model": 8, "n_heads": 2, "e_layers": 2, "d_ff": 12, "generator_hidden": (12,)}


def count(*modules: nn.Module) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())


def reference_itransformer_count(seq_len, pred_len, d_model, d_ff, e_layers):
    """iTransformer's module structure rebuilt from torch pieces (protocol.md §2.1)."""
    embedding = nn.Linear(seq_len, d_model)
    layer_modules = []
    for _ in range(e_layers):
        attention_layer = [nn.Linear(d_model, d_model) for _ in range(4)]  # query, key, value, out
        feed_forward = [nn.Conv1d(d_model, d_ff, 1), nn.Conv1d(d_ff, d_model, 1)]
        layer_modules += attention_layer + feed_forward + [nn.LayerNorm(d_model), nn.LayerNorm(d_model)]
    return count(embedding, *layer_modules, nn.LayerNorm(d_model), nn.Linear(d_model, pred_len))


def reference_gateformer_count(seq_len, pred_len, d_model, n_heads, d_ff, e_layers, patch_len=8, stride=8):
    """Gateformer's module structure (protocol.md §3.1) with torch's own TransformerEncoderLayer."""
    n_patches = (seq_len + stride - patch_len) // stride + 1

    def encoder():
        return [nn.TransformerEncoderLayer(d_model, n_heads, d_ff, batch_first=True, norm_first=True) for _ in range(e_layers)]

    gates = [nn.Linear(d_model, d_model) for _ in range(4)]
    return count(
        nn.Linear(seq_len, d_model),  # global embedding
        nn.Linear(patch_len, d_model, bias=False),  # patch embedding
        *encoder(),
        nn.Linear(n_patches * d_model, d_model),  # flatten head
        *gates,
        *encoder(),
        nn.Linear(d_model, pred_len),
    )


def generator_count(d_model, n_heads, hidden, parameterization):
    widths = (d_model, *hidden)
    hidden_count = sum(a * b + b for a, b in zip(widths, widths[1:]))
    outputs = d_model * d_model if parameterization == "full" else d_model * d_model // n_heads
    return hidden_count + (widths[-1] + 1) * outputs


# official configs (protocol.md §2.3 / §3.2): (d_model, d_ff, e_layers, n_heads, pred_len)
ITRANSFORMER_OFFICIAL = {"ETTh1-96": (256, 256, 2, 8, 96), "ETTh2": (128, 128, 2, 8, 336), "Traffic-720": (512, 512, 4, 8, 720)}
GATEFORMER_OFFICIAL = {"ETTh1-96": (64, 64, 1, 4, 96), "Weather-96": (512, 1024, 2, 8, 96), "ETTm1-192": (128, 128, 1, 4, 192)}


@pytest.mark.parametrize("setting", list(ITRANSFORMER_OFFICIAL))
def test_itransformer_mha_count_equals_reference_architecture(setting):
    d_model, d_ff, e_layers, n_heads, pred_len = ITRANSFORMER_OFFICIAL[setting]
    model = build_model("itransformer_mha", d_model=d_model, d_ff=d_ff, e_layers=e_layers, n_heads=n_heads, pred_len=pred_len)
    assert count_parameters(model) == reference_itransformer_count(96, pred_len, d_model, d_ff, e_layers)


@pytest.mark.parametrize(
    "options", [{}, {"share_generator": False}, {"parameterization": "full"}, {"generator_hidden": (32, 16, 24)}]
)
def test_itransformer_damcha_count_drops_qk_and_adds_the_generators(options):
    """ETTh2's official config (D = 128): DAMCHA = MHA - W_q, W_k per layer + one generator per stack
    (or per layer); the D*D-output layer shrinks by H with "compact" (damcha.md §10)."""
    hyper = dict(d_model=128, d_ff=128, e_layers=2, n_heads=8, pred_len=96)
    damcha = build_model("itransformer_damcha", **(hyper | options))
    config = damcha.config
    without_qk = reference_itransformer_count(96, 96, 128, 128, 2) - 2 * (2 * 128**2 + 2 * 128)
    generator = generator_count(128, 8, config.generator_hidden, config.parameterization)
    n_generators = 1 if config.share_generator else 2
    assert count_parameters(damcha) == without_qk + n_generators * generator


@pytest.mark.parametrize("setting", list(GATEFORMER_OFFICIAL))
def test_gateformer_mha_count_equals_reference_architecture(setting):
    d_model, d_ff, e_layers, n_heads, pred_len = GATEFORMER_OFFICIAL[setting]
    hyper = dict(d_model=d_model, d_ff=d_ff, e_layers=e_layers, n_heads=n_heads, pred_len=pred_len)
    model = build_model("gateformer_mha", **hyper)
    assert count_parameters(model) == reference_gateformer_count(96, pred_len, d_model, n_heads, d_ff, e_layers)
    if d_model > 128:
        return  # the DAMCHA variant is checked at the smaller widths, where building it is quick
    parameterization = "full" if d_model == 128 else "compact"
    damcha = build_model("gateformer_damcha", parameterization=parameterization, **hyper)
    # only the variate-wise encoder changes: no W_q, W_k there, plus its shared generator
    without_qk = count_parameters(model) - e_layers * (2 * d_model**2 + 2 * d_model)
    assert count_parameters(damcha) == without_qk + generator_count(d_model, n_heads, (256, 512), parameterization)


@pytest.mark.parametrize("name", ["itransformer_mha", "itransformer_damcha"])
def test_itransformer_without_marks_is_permutation_equivariant_over_variates(float64, name):
    torch.manual_seed(0)
    model = build_model(name, **TINY).eval()
    x = torch.randn(3, 96, 7)
    permutation = torch.randperm(7)
    torch.testing.assert_close(model(x[..., permutation]), model(x)[..., permutation])
    # the marks are tokens too: permuting only the variates stays equivariant with marks present
    marks = torch.randn(3, 96, 4)
    torch.testing.assert_close(model(x[..., permutation], marks), model(x, marks)[..., permutation])


@pytest.mark.parametrize("name", ["gateformer_mha", "gateformer_damcha"])
def test_gateformer_is_permutation_equivariant_over_variates(float64, name):
    torch.manual_seed(1)
    model = build_model(name, **TINY).eval()
    x = torch.randn(2, 96, 5)
    permutation = torch.randperm(5)
    torch.testing.assert_close(model(x[..., permutation]), model(x)[..., permutation])


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forecasts_follow_a_level_shift_of_the_input(float64, name):
    """Instance normalisation: shifting a variate's history shifts its forecast by the same amount."""
    torch.manual_seed(2)
    model = build_model(name, **TINY).eval()
    x = torch.randn(2, 96, 3)
    shift = torch.tensor([10.0, -3.0, 0.5])
    torch.testing.assert_close(model(x + shift), model(x) + shift)


@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("n_variates", [7, 21, 862])
def test_every_parameter_gets_a_gradient_at_any_variate_count(name, n_variates):
    torch.manual_seed(3)
    model = build_model(name, **TINY)
    x, marks = torch.randn(2, 96, n_variates), torch.randn(2, 96, 4)
    forecast = model(x, marks)
    assert forecast.shape == (2, 24, n_variates)
    forecast.square().mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing
    assert all(p.grad.abs().sum() > 0 for p in model.parameters())


@pytest.mark.parametrize(
    "options",
    [{"share_generator": False}, {"static_metric": True}, {"parameterization": "full"},
     {"static_metric": True, "share_generator": False, "parameterization": "full"}],
)
def test_damcha_variants_train_every_parameter(options):
    torch.manual_seed(4)
    for name in ("itransformer_damcha", "gateformer_damcha"):
        model = build_model(name, **(TINY | options))
        model(torch.randn(2, 96, 5), torch.randn(2, 96, 4)).square().mean().backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_time_marks_are_extra_tokens_of_itransformer_only():
    torch.manual_seed(5)
    x, marks = torch.randn(2, 96, 7), torch.randn(2, 96, 4)
    with_marks = build_model("itransformer_damcha", **TINY).eval()
    assert not torch.allclose(with_marks(x, marks), with_marks(x))
    maps = with_marks.attention_maps(x, marks)["encoder"]
    assert [r.weights.shape for r in maps] == [(2, 2, 11, 11)] * 2  # N + 4 tokens
    without = build_model("itransformer_damcha", use_time_marks=False, **TINY).eval()
    torch.testing.assert_close(without(x, marks), without(x))
    gateformer = build_model("gateformer_mha", **TINY).eval()
    torch.testing.assert_close(gateformer(x, marks), gateformer(x))


def test_attention_maps_match_the_forward_pass():
    torch.manual_seed(6)
    model = build_model("gateformer_damcha", **TINY).eval()
    x = torch.randn(2, 96, 5)
    maps = model.attention_maps(x)
    temporal, variate = maps["temporal_encoder"], maps["variate_encoder"]
    assert [r.weights.shape for r in temporal] == [(10, 2, 13, 13)] * 2  # B * N sequences of 13 patches
    assert [r.weights.shape for r in variate] == [(2, 2, 5, 5)] * 2
    assert temporal[0].head_metrics is None and variate[0].head_metrics.shape == (2, 2, 4, 4)
    torch.testing.assert_close(variate[1].weights.sum(-1), torch.ones(2, 2, 5))
    # The pass that records the maps (explicit attention) forecasts what forward (SDPA) forecasts.
    with torch.no_grad():
        recorded, _ = model._forecast(x, None, need_weights=True)
        torch.testing.assert_close(recorded, model(x), rtol=1e-5, atol=1e-6)


def test_wrong_lookback_is_refused():
    model = build_model("itransformer_mha", **TINY)
    with pytest.raises(ValueError, match="seq_len=96"):
        model(torch.randn(2, 48, 7))
