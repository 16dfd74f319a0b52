"""Encoder layers against the reference architectures, and stack-wise sharing of the generator."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from damcha_ts.models import AttentionConfig, MetricGenerator
from damcha_ts.models.layers import EncoderLayer, build_encoder

D, H, D_FF = 8, 2, 12


def make_encoder(kind="damcha", n_layers=3, share=True, layer="post", parameterization="compact"):
    config = AttentionConfig(
        kind=kind, n_heads=H, dropout=0.0, generator_hidden=(12,), share_generator=share,
        parameterization=parameterization,
    )
    if layer == "post":
        return build_encoder(
            lambda a: EncoderLayer(a, D, D_FF, 0.0, "gelu"), n_layers, D, config, nn.LayerNorm(D)
        )
    return build_encoder(lambda a: EncoderLayer(a, D, D_FF, 0.0, "relu", norm_first=True), n_layers, D, config)


class ReferenceITransformerLayer(nn.Module):
    """iTransformer's EncoderLayer + AttentionLayer + FullAttention, written as in the paper's code:
    four Linear(E, E) projections, softmax(scale QK^T) V, and two Conv1d(kernel 1) for the FFN."""

    def __init__(self):
        super().__init__()
        self.query_projection, self.key_projection = nn.Linear(D, D), nn.Linear(D, D)
        self.value_projection, self.out_projection = nn.Linear(D, D), nn.Linear(D, D)
        self.conv1 = nn.Conv1d(D, D_FF, kernel_size=1)
        self.conv2 = nn.Conv1d(D_FF, D, kernel_size=1)
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.query_projection(x).view(B, T, H, -1)
        k = self.key_projection(x).view(B, T, H, -1)
        v = self.value_projection(x).view(B, T, H, -1)
        scores = torch.einsum("blhe,bshe->bhls", q, k) / math.sqrt(D // H)
        attended = torch.einsum("bhls,bshd->blhd", torch.softmax(scores, dim=-1), v).reshape(B, T, D)
        x = self.norm1(x + self.out_projection(attended))
        y = F.gelu(self.conv1(x.transpose(-1, 1)))
        y = self.conv2(y).transpose(-1, 1)
        return self.norm2(x + y)


def test_post_norm_layer_equals_itransformer_reference(float64):
    torch.manual_seed(0)
    reference = ReferenceITransformerLayer()
    ours = make_encoder("mha", n_layers=1).layers[0]
    ours_count = sum(p.numel() for p in ours.parameters())
    assert ours_count == sum(p.numel() for p in reference.parameters())
    with torch.no_grad():
        ours.attention.qkv_projection.weight.copy_(
            torch.cat([reference.query_projection.weight, reference.key_projection.weight, reference.value_projection.weight])
        )
        ours.attention.qkv_projection.bias.copy_(
            torch.cat([reference.query_projection.bias, reference.key_projection.bias, reference.value_projection.bias])
        )
        ours.attention.out_projection.load_state_dict(reference.out_projection.state_dict())
        ours.feed_forward_in.weight.copy_(reference.conv1.weight.squeeze(-1))
        ours.feed_forward_in.bias.copy_(reference.conv1.bias)
        ours.feed_forward_out.weight.copy_(reference.conv2.weight.squeeze(-1))
        ours.feed_forward_out.bias.copy_(reference.conv2.bias)
        ours.norm1.load_state_dict(reference.norm1.state_dict())
        ours.norm2.load_state_dict(reference.norm2.state_dict())
    x = torch.randn(3, 6, D)
    torch.testing.assert_close(ours(x)[0], reference(x))


def test_pre_norm_layer_equals_torch_transformer_encoder_layer(float64):
    torch.manual_seed(1)
    reference = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.0, batch_first=True, norm_first=True).eval()
    ours = make_encoder("mha", n_layers=1, layer="pre").layers[0].eval()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in reference.parameters())
    # torch's own names for everything but the attention: they load as they are (checkpoints of
    # earlier versions used them for the feed-forward block).
    state = {
        name.replace("self_attn.in_proj_", "attention.qkv_projection.").replace("self_attn.out_proj.", "attention.out_projection."): value
        for name, value in reference.state_dict().items()
    }
    assert {"linear1.weight", "linear2.bias"} <= set(state)
    ours.load_state_dict(state)
    torch.testing.assert_close(ours.feed_forward_in.weight, reference.linear1.weight)
    x = torch.randn(3, 5, D)
    torch.testing.assert_close(ours(x)[0], reference(x))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 1, 1, 1]]).bool()
    expected = reference(x, src_key_padding_mask=~mask)  # torch's mask marks padding
    got = ours(x, mask)[0]
    torch.testing.assert_close(got[mask], expected[mask])


@pytest.mark.parametrize("layer", ["post", "pre"])
def test_shared_generator_runs_once_per_stack_on_the_stack_input(layer):
    torch.manual_seed(2)
    encoder = make_encoder(n_layers=3, share=True, layer=layer)
    generator = encoder.shared_metric_generator
    assert isinstance(generator, MetricGenerator)
    assert all(l.attention.metric_generator is None for l in encoder.layers)
    seen = []
    generator.hidden_layers[0].register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    x = torch.randn(2, 4, D)
    encoder(x)
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], x.mean(1))  # the context of the stack input, not of a layer's


def test_independent_generators_see_their_own_layer_input():
    torch.manual_seed(3)
    encoder = make_encoder(n_layers=2, share=False, layer="pre")
    generators = [l.attention.metric_generator for l in encoder.layers]
    assert generators[0] is not generators[1] and encoder.shared_metric_generator is None
    contexts, layer_inputs = [], []
    for g in generators:
        g.hidden_layers[0].register_forward_hook(lambda m, inputs, out: contexts.append(inputs[0]))
    for l in encoder.layers:
        l.register_forward_hook(lambda m, inputs, out: layer_inputs.append(inputs[0]))
    encoder(torch.randn(2, 4, D))
    assert len(contexts) == 2
    for context, layer, layer_input in zip(contexts, encoder.layers, layer_inputs):
        torch.testing.assert_close(context, layer.norm1(layer_input).mean(1))  # pre-norm: X = LN1(x)


@pytest.mark.parametrize("share", [True, False])
def test_causal_stack_output_depends_only_on_the_prefix(float64, share):
    torch.manual_seed(4)
    encoder = make_encoder(n_layers=2, share=share).eval()
    x = torch.randn(2, 6, D)
    full, _ = encoder(x, is_causal=True)
    prefix, _ = encoder(x[:, :3], is_causal=True)
    torch.testing.assert_close(full[:, :3], prefix, rtol=1e-10, atol=1e-12)
    non_causal, _ = encoder(x)
    assert not torch.allclose(non_causal[:, :3], full[:, :3])


@pytest.mark.parametrize("share", [True, False])
def test_padded_tokens_do_not_change_real_token_outputs_of_a_stack(float64, share):
    torch.manual_seed(5)
    encoder = make_encoder(n_layers=2, share=share).eval()
    x = torch.randn(2, 4, D)
    padded = torch.cat([x, 50.0 * torch.randn(2, 3, D)], dim=1)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0]] * 2).bool()
    torch.testing.assert_close(encoder(padded, mask)[0][:, :4], encoder(x)[0])


def test_stack_records_carry_the_shared_metrics_and_full_metric():
    torch.manual_seed(6)
    encoder = make_encoder(n_layers=2, share=True, parameterization="full").eval()
    x = torch.randn(2, 4, D)
    _, records = encoder(x, need_weights=True)
    assert len(records) == 2
    metrics = encoder.shared_metric_generator(x)
    for record in records:
        torch.testing.assert_close(record.head_metrics, metrics)
        assert record.full_metric.shape == (2, D, D)
    assert encoder(x)[1] == []
