"""The metric generator against explicit references: contexts, fused RowSum, compact init, adaptivity."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from damcha_ts.models import MetricGenerator, StaticMetric, mean_context

D, H, HIDDEN = 8, 2, (12,)


def explicit_context(tokens, mask, is_causal):
    """Loop version of damcha.md §1.2: (prefix) sums of real tokens over max(count, 1)."""
    B, T, _ = tokens.shape
    valid = torch.ones(B, T, dtype=tokens.dtype) if mask is None else mask.to(tokens.dtype)
    rows = []
    for b in range(B):
        def mean_upto(last):
            total = sum(valid[b, s] * tokens[b, s] for s in range(last + 1))
            return total / max(float(valid[b, : last + 1].sum()), 1.0)

        rows.append(torch.stack([mean_upto(t) for t in range(T)]) if is_causal else mean_upto(T - 1))
    return torch.stack(rows)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
def test_mean_context_matches_loops(is_causal, with_mask):
    torch.manual_seed(0)
    tokens = torch.randn(3, 5, D, dtype=torch.float64)
    # sample 2 has only padding, and sample 1 starts with padding: both hit the max(count, 1) clamp
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [0, 0, 0, 0, 0]]).bool() if with_mask else None
    expected = explicit_context(tokens, mask, is_causal)
    torch.testing.assert_close(mean_context(tokens, mask, is_causal), expected)
    if with_mask:
        assert torch.all(mean_context(tokens, mask, is_causal)[2] == 0)


@pytest.mark.parametrize("is_causal", [False, True])
def test_fused_rowsum_equals_explicit_full_metric(float64, block_row_sum, is_causal):
    """Fused RowSum vs forming M [.., D, D] from the D*D-output layer, then summing blocks (Eq. 4)."""
    torch.manual_seed(1)
    generator = MetricGenerator(D, H, HIDDEN, dropout=0.0, parameterization="full")
    tokens = torch.randn(3, 5, D, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 1]]).bool()

    fused = generator(tokens, mask, is_causal)

    # Reference, written with the raw parameters: MLP -> full D*D output -> explicit block-row sum.
    first = generator.hidden_layers[0]
    hidden = F.gelu(F.linear(explicit_context(tokens, mask, is_causal), first.weight, first.bias))
    full = F.linear(hidden, generator.output_weight, generator.output_bias)
    reference = block_row_sum(full.view(*full.shape[:-1], D, D), H)

    expected_shape = (3, 5, H, D // H, D // H) if is_causal else (3, H, D // H, D // H)
    assert fused.shape == reference.shape == expected_shape
    torch.testing.assert_close(fused, reference, rtol=1e-12, atol=1e-12)

    cotangent = torch.randn_like(fused)
    names, params = zip(*generator.named_parameters())
    inputs = [tokens, *params]
    fused_grads = torch.autograd.grad(fused, inputs, cotangent)
    reference_grads = torch.autograd.grad(reference, inputs, cotangent)
    for got, want in zip(fused_grads, reference_grads):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # The broadcast gradient of the sum: the H block-columns of a block-row get identical gradients.
    weight_grad = fused_grads[1 + names.index("output_weight")].view(H, D // H, H, D // H, -1)
    torch.testing.assert_close(weight_grad[:, :, 0], weight_grad[:, :, 1], rtol=0, atol=0)


def test_compact_starts_as_block_column_sums_of_full(float64, block_row_sum):
    torch.manual_seed(7)
    full = MetricGenerator(D, H, HIDDEN, dropout=0.0, parameterization="full")
    torch.manual_seed(7)
    compact = MetricGenerator(D, H, HIDDEN, dropout=0.0, parameterization="compact")
    w = HIDDEN[-1]
    # Explicit sums over block-columns j of the full layer's rows (i, p, j, q).
    weight = full.output_weight.detach().view(D, D, w).permute(2, 0, 1)  # [w, D, D]
    expected_weight = block_row_sum(weight, H).permute(1, 2, 3, 0).reshape(-1, w)
    expected_bias = block_row_sum(full.output_bias.detach().view(D, D), H).reshape(-1)
    torch.testing.assert_close(compact.reduced_weight.detach(), expected_weight, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(compact.reduced_bias.detach(), expected_bias, rtol=1e-12, atol=1e-12)
    tokens = torch.randn(4, 6, D)
    torch.testing.assert_close(compact(tokens), full(tokens), rtol=1e-12, atol=1e-12)
    assert compact.reduced_weight.numel() * H == full.output_weight.numel()


def test_compact_init_has_the_variance_of_a_sum_of_h_default_draws():
    """damcha.md §10 (a): each reduced entry sums H draws of U(-1/sqrt(w), 1/sqrt(w)): variance H/(3w)."""
    torch.manual_seed(3)
    d_model, n_heads, width = 64, 8, 64
    compact = MetricGenerator(d_model, n_heads, (width,), dropout=0.0, parameterization="compact")
    variance = compact.reduced_weight.detach().double().var().item()
    assert variance == pytest.approx(n_heads / (3 * width), rel=0.05)  # a plain default init: 1/(3w)


def test_metrics_adapt_to_the_input_and_ignore_padding():
    torch.manual_seed(4)
    generator = MetricGenerator(D, H, HIDDEN, dropout=0.0).eval()
    tokens = torch.randn(2, 3, D)
    metrics = generator(tokens)
    assert not torch.allclose(generator(tokens + 1.0), metrics)
    assert not torch.allclose(metrics[0], metrics[1])
    # Two padded tokens with huge values, masked out: the metrics do not move.
    padded = torch.cat([tokens, 100.0 * torch.randn(2, 2, D)], dim=1)
    mask = torch.tensor([[1, 1, 1, 0, 0]] * 2)  # an integer mask, 1 = real
    torch.testing.assert_close(generator(padded, mask), metrics)


def test_generator_dropout_acts_in_training_only():
    torch.manual_seed(5)
    generator = MetricGenerator(D, H, HIDDEN, dropout=0.5)
    tokens = torch.randn(2, 3, D)
    assert not torch.allclose(generator(tokens), generator(tokens))
    generator.eval()
    torch.testing.assert_close(generator(tokens), generator(tokens))


def test_full_metric_is_available_with_full_only(block_row_sum):
    torch.manual_seed(6)
    full = MetricGenerator(D, H, HIDDEN, dropout=0.0, parameterization="full")
    tokens = torch.randn(2, 3, D)
    metric = full.full_metric(tokens)
    assert metric.shape == (2, D, D)
    torch.testing.assert_close(block_row_sum(metric, H), full(tokens))
    with pytest.raises(ValueError, match="parameterization='full'"):
        MetricGenerator(D, H, HIDDEN).full_metric(tokens)


@pytest.mark.parametrize("parameterization", ["full", "compact"])
def test_identity_init_starts_every_metric_at_the_identity_then_adapts(block_row_sum, parameterization):
    """The "identity" ablation: for every input (and any dropout draw) the head metrics start at I,
    the full cross-head metric at I_D; one optimiser step makes them depend on the input."""
    torch.manual_seed(9)
    generator = MetricGenerator(D, H, HIDDEN, dropout=0.3, parameterization=parameterization, init="identity")
    tokens = torch.randn(4, 3, D)
    identity = torch.eye(D // H).expand(4, H, -1, -1)
    torch.testing.assert_close(generator(tokens), identity, rtol=0, atol=0)
    if parameterization == "full":
        metric = generator.full_metric(tokens)
        torch.testing.assert_close(metric, torch.eye(D).expand(4, -1, -1), rtol=0, atol=0)
        torch.testing.assert_close(block_row_sum(metric, H), identity, rtol=0, atol=0)

    optimizer = torch.optim.Adam(generator.parameters(), lr=1e-2)
    target = torch.randn(4, H, D // H, D // H)
    for _ in range(2):  # step 1 moves the last layer off zero; step 2 then reaches the hidden layers
        optimizer.zero_grad()
        F.mse_loss(generator(tokens), target).backward()
        optimizer.step()
    generator.eval()
    metrics = generator(tokens)
    assert not torch.allclose(metrics[0], metrics[1])  # data-adaptive now
    assert all(p.grad.abs().sum() > 0 for p in generator.parameters())


def test_unknown_generator_init_is_rejected():
    with pytest.raises(ValueError, match="generator_init='zeros'"):
        MetricGenerator(D, H, HIDDEN, init="zeros")


@pytest.mark.parametrize("parameterization", ["full", "compact"])
def test_static_metric_starts_as_identity_per_head(parameterization):
    static = StaticMetric(D, H, parameterization)
    metrics = static(torch.randn(2, 3, D))
    assert metrics.shape == (H, D // H, D // H)
    torch.testing.assert_close(metrics, torch.eye(D // H).expand(H, -1, -1))
    metrics.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in static.parameters())


def test_generator_without_hidden_layers_is_one_linear(block_row_sum):
    torch.manual_seed(8)
    generator = MetricGenerator(D, H, (), dropout=0.0, parameterization="full")
    tokens = torch.randn(2, 3, D)
    full = F.linear(tokens.mean(1), generator.output_weight, generator.output_bias).view(2, D, D)
    torch.testing.assert_close(generator(tokens), block_row_sum(full, H))
