"""Attention modules and backends against explicit references (float64, tiny sizes)."""

from __future__ import annotations

import types

import pytest
import torch
from torch import nn

import damcha_ts.models.attention as attention_module
from damcha_ts.errors import ConfigError
from damcha_ts.models import (
    AttentionConfig,
    DamchaAttention,
    MetricGenerator,
    MultiHeadAttention,
    StaticMetric,
    build_attention,
    damcha_attention,
    select_backend,
)
from damcha_ts.models.attention import split_heads

D, H = 8, 2
DH = D // H
PADDING = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]).bool()  # sample 2: leading pads


def damcha_layer(parameterization="full", static=False, backend="math"):
    if static:
        generator = StaticMetric(D, H, parameterization)
        with torch.no_grad():  # move away from the identity so the metric matters
            for p in generator.parameters():
                p.add_(0.3 * torch.randn_like(p))
    else:
        generator = MetricGenerator(D, H, (12,), dropout=0.0, parameterization=parameterization)
    return DamchaAttention(D, H, dropout=0.0, metric_generator=generator, attn_backend=backend)


def metric_lookup(metrics):
    """(b, t, i) -> m_i for the metric shapes of apply_head_metrics."""
    if metrics.dim() == 3:
        return lambda b, t, i: metrics[i]
    if metrics.dim() == 4:
        return lambda b, t, i: metrics[b, i]
    return lambda b, t, i: metrics[b, t, i]


@pytest.mark.parametrize(
    "is_causal,mask,static",
    [(False, None, False), (False, PADDING, False), (True, None, False), (True, PADDING, False), (False, PADDING, True)],
)
def test_math_backend_matches_query_by_query_reference(float64, reference_damcha, is_causal, mask, static):
    torch.manual_seed(0)
    layer = damcha_layer(static=static)
    x = torch.randn(3, 5, D)
    y, record = layer(x, mask, is_causal, need_weights=True)
    metrics = layer.metric_generator(x, mask, is_causal)
    expected_y, expected_weights = reference_damcha(
        x, metric_lookup(metrics), layer.value_projection.weight, layer.value_projection.bias,
        layer.out_projection.weight, layer.out_projection.bias, H, mask, is_causal,
    )
    torch.testing.assert_close(y, expected_y)
    torch.testing.assert_close(record.weights, expected_weights)
    torch.testing.assert_close(record.head_metrics, metrics)


@pytest.mark.parametrize("metric_kind", ["sample", "static", "causal"])
@pytest.mark.parametrize("with_mask", [False, True])
def test_sdpa_backend_equals_math_backend_values_and_gradients(float64, metric_kind, with_mask):
    torch.manual_seed(1)
    B, T = 3, 5
    x = torch.randn(B, H, T, DH, requires_grad=True)
    value = torch.randn(B, H, T, DH, requires_grad=True)
    shape = {"sample": (B, H, DH, DH), "static": (H, DH, DH), "causal": (B, T, H, DH, DH)}[metric_kind]
    metrics = torch.randn(shape, requires_grad=True)
    mask = PADDING if with_mask else None
    is_causal = metric_kind == "causal"
    outputs = {}
    for backend in ("math", "sdpa"):
        out, _ = damcha_attention(x, metrics, value, mask, is_causal, backend=backend)
        grads = torch.autograd.grad(out, (x, metrics, value), torch.ones_like(out) + out.detach())
        outputs[backend] = (out, grads)
    torch.testing.assert_close(outputs["sdpa"][0], outputs["math"][0], rtol=1e-10, atol=1e-12)
    for got, want in zip(outputs["sdpa"][1], outputs["math"][1]):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", ["math", "sdpa"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_fully_masked_rows_get_zero_attention_and_finite_gradients(float64, backend, is_causal):
    torch.manual_seed(2)
    # Non-causal: sample 1 has no real token at all. Causal: sample 0's first two queries see only pads.
    mask = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0]]).bool()
    empty_rows = [(1, t) for t in range(4)] + ([(0, 0), (0, 1)] if is_causal else [])
    x = torch.randn(2, H, 4, DH, requires_grad=True)
    value = torch.randn(2, H, 4, DH, requires_grad=True)
    metrics = torch.randn(2, H, DH, DH, requires_grad=True)
    if is_causal:
        metrics = torch.randn(2, 4, H, DH, DH, requires_grad=True)
    out, weights = damcha_attention(x, metrics, value, mask, is_causal, backend=backend, need_weights=True)
    for b, t in empty_rows:
        assert torch.all(out[b, :, t] == 0)
        assert torch.all(weights[b, :, t] == 0)
    # every other row is a distribution over visible keys only
    assert torch.all(weights[0, :, 2:, :2] == 0)
    torch.testing.assert_close(weights[0, :, 2:].sum(-1), torch.ones(H, 2))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (x, value, metrics))

    # through the whole layer, gradients of every parameter stay finite too
    layer = damcha_layer(backend=backend)
    tokens = torch.randn(2, 4, D, requires_grad=True)
    y, _ = layer(tokens, mask, is_causal)
    assert torch.isfinite(y).all() and torch.all(y[1] == 0)
    y.square().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())


@pytest.mark.parametrize("kind", ["mha", "damcha"])
def test_padded_tokens_change_nothing_for_real_tokens(float64, kind):
    torch.manual_seed(3)
    layer = build_attention(D, AttentionConfig(kind=kind, n_heads=H, dropout=0.0, generator_hidden=(12,))).eval()
    x = torch.randn(2, 3, D)
    y, _ = layer(x)
    padded = torch.cat([x, 100.0 * torch.randn(2, 2, D)], dim=1)
    mask = torch.tensor([[1, 1, 1, 0, 0]] * 2).bool()
    y_padded, _ = layer(padded, mask)
    torch.testing.assert_close(y_padded[:, :3], y)
    assert torch.all(y_padded[:, 3:] == 0)  # padded queries' outputs are zeroed


def test_mha_equals_torch_multihead_attention(float64):
    """The MHA baseline against nn.MultiheadAttention with the same weights (and the same count)."""
    torch.manual_seed(4)
    ours = MultiHeadAttention(D, H, dropout=0.0)
    reference = nn.MultiheadAttention(D, H, dropout=0.0, batch_first=True)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters())
    with torch.no_grad():
        reference.in_proj_weight.copy_(ours.qkv_projection.weight)
        reference.in_proj_bias.copy_(ours.qkv_projection.bias)
        reference.out_proj.weight.copy_(ours.out_projection.weight)
        reference.out_proj.bias.copy_(ours.out_projection.bias)
    x = torch.randn(3, 5, D)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]).bool()
    for need_weights in (False, True):
        y, record = ours(x, mask, need_weights=need_weights)
        expected, expected_weights = reference(x, x, x, key_padding_mask=~mask, average_attn_weights=False)
        torch.testing.assert_close(y, expected * mask[..., None])
        if need_weights:
            torch.testing.assert_close(record.weights, expected_weights)


def test_need_weights_reports_metrics_and_the_full_metric(float64, block_row_sum):
    torch.manual_seed(5)
    x = torch.randn(2, 4, D)
    full_layer = damcha_layer("full", backend="sdpa")
    y, record = full_layer(x, need_weights=True)
    y_plain, none = full_layer(x)
    assert none is None
    torch.testing.assert_close(y, y_plain)  # the weights path computes the same output
    assert record.weights.shape == (2, H, 4, 4)
    torch.testing.assert_close(record.weights.sum(-1), torch.ones(2, H, 4))
    assert record.full_metric.shape == (2, D, D)
    torch.testing.assert_close(block_row_sum(record.full_metric, H), record.head_metrics)
    _, compact_record = damcha_layer("compact")(x, need_weights=True)
    assert compact_record.full_metric is None and compact_record.head_metrics.shape == (2, H, DH, DH)


def test_in_training_mode_the_reported_full_metric_is_the_one_the_layer_used(float64, block_row_sum):
    # The generator's dropout draws anew on each pass: M must come from the pass that gave the metrics.
    torch.manual_seed(7)
    x = torch.randn(2, 4, D)
    layer = damcha_layer("full", backend="sdpa")
    layer.metric_generator.hidden_layers[2].p = 0.5  # dropout after the first hidden layer
    _, record = layer.train()(x, need_weights=True)
    torch.testing.assert_close(block_row_sum(record.full_metric, H), record.head_metrics)


# ---------------------------------------------------------------------------------------------------
# Backend dispatch (the triton kernel itself is tested with the kernels)


def dispatch_inputs(device="cpu"):
    x = torch.randn(2, H, 5, DH, device=device)
    return x, torch.randn(2, H, DH, DH, device=device), torch.randn(2, H, 5, DH, device=device)


def test_auto_on_cpu_picks_sdpa_and_math_for_weights():
    x, metrics, value = dispatch_inputs()
    assert select_backend("auto", x, metrics, value) == "sdpa"
    assert select_backend("auto", x, metrics, value, need_weights=True) == "math"
    assert select_backend("sdpa", x, metrics, value, need_weights=True) == "math"
    assert select_backend("math", x, metrics, value) == "math"
    # Attention maps are a diagnostic: even a forced triton backend gives them through math.
    assert select_backend("triton", x, metrics, value, need_weights=True) == "math"


def test_forced_triton_on_cpu_without_interpreter_is_refused_with_the_reason(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x, metrics, value = dispatch_inputs()
    with pytest.raises(ConfigError, match="attn_backend='triton' cannot run this call: .*TRITON_INTERPRET"):
        select_backend("triton", x, metrics, value)
    with pytest.raises(ConfigError, match="causal"):
        select_backend("triton", x, torch.randn(2, 5, H, DH, DH), value, is_causal=True)
    layer = damcha_layer(backend="triton")
    with pytest.raises(ConfigError, match="triton"):
        layer(torch.randn(2, 5, D))
    with pytest.raises(ConfigError, match="attn_backend"):
        select_backend("flash", x, metrics, value)


def test_attention_maps_of_a_triton_model_come_from_the_explicit_path(monkeypatch):
    from damcha_ts.models import build_model

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the kernel could not run here at all
    model = build_model({"name": "itransformer_damcha", "seq_len": 24, "pred_len": 12, "d_model": 16, "d_ff": 16,
                         "n_heads": 2, "e_layers": 1, "generator_hidden": [8], "attn_backend": "triton"}).eval()
    (records,) = model.attention_maps(torch.randn(2, 24, 3)).values()
    weights = records[0].weights
    assert weights.shape == (2, 2, 3, 3)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 3))


def test_dispatch_routes_to_the_kernel_when_it_accepts_the_call(monkeypatch, float64):
    """A stand-in kernel module (same contract) shows what the dispatch hands over and when."""
    calls = []

    def fake_kernel(x, head_metrics, value, key_padding_mask=None, dropout_p=0.0, scale=None):
        calls.append((x.shape, head_metrics.shape, key_padding_mask, dropout_p))
        return attention_module.damcha_attention(x, head_metrics, value, key_padding_mask, backend="math")[0]

    fake = types.SimpleNamespace(
        damcha_attention_triton=fake_kernel,
        triton_unsupported_reason=lambda *args: None,
    )
    monkeypatch.setattr(attention_module, "_triton_module", lambda: (fake, None))
    x, metrics, value = dispatch_inputs()
    assert select_backend("auto", x, metrics, value) == "sdpa"  # auto uses triton on CUDA only
    assert select_backend("triton", x, metrics, value) == "triton"
    assert select_backend("triton", x, metrics, value, need_weights=True) == "math"
    torch.manual_seed(6)
    layer = damcha_layer(backend="triton")
    tokens = torch.randn(3, 5, D)
    y, _ = layer(tokens, PADDING)
    assert len(calls) == 1 and calls[0][:2] == ((3, H, 5, DH), (3, H, DH, DH))
    assert torch.equal(calls[0][2], PADDING)
    layer.attn_backend = "math"
    torch.testing.assert_close(y, layer(tokens, PADDING)[0])


def test_mha_rejects_head_metrics_and_shared_layers_need_them():
    x = torch.randn(1, 3, D)
    with pytest.raises(ConfigError, match="head_metrics"):
        MultiHeadAttention(D, H)(x, head_metrics=torch.randn(1, H, DH, DH))
    with pytest.raises(ConfigError, match="share_generator"):
        DamchaAttention(D, H, metric_generator=None)(x)


def test_heads_are_positional_slices():
    x = torch.arange(2 * 3 * D, dtype=torch.float32).view(2, 3, D)
    heads = split_heads(x, H)
    for i in range(H):
        assert torch.equal(heads[:, i], x[..., i * DH : (i + 1) * DH])
