"""GPU-only checks of the compiled Triton kernels: forecasting token counts, half precision.

Skipped without CUDA. The tests in test_triton_damcha_kernel.py also run on the GPU (in float32)
when one is present; these add the dtypes and sizes that only make sense there. The reference is
the explicit float64 attention applied to the same (rounded) inputs, so the tolerances measure the
kernel's own arithmetic: fp32 dots run in IEEE fp32 (torch's default matmul precision), bf16/fp16
dots use tensor cores with fp32 accumulation.
"""

from __future__ import annotations

import math

import pytest
import torch

from damcha_ts.models.kernels.triton_damcha import damcha_attention_triton, triton_unsupported_reason

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# Variate-token counts of the benchmarks, without and with iTransformer's 4 time-mark tokens:
# ETT 7/11, Weather 21/25, ECL 321/325, Traffic 862/866 (damcha.md §9).
TOKEN_COUNTS = (7, 11, 21, 25, 321, 325, 862, 866)
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 2e-2}


def gpu_inputs(B, H, T, dh, dtype, static_metric=False, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    tokens = torch.randn(B, T, H * dh, device="cuda", generator=generator).to(dtype)
    values = torch.randn(B, T, H * dh, device="cuda", generator=generator).to(dtype)
    metric_shape = (H, dh, dh) if static_metric else (B, H, dh, dh)
    metrics = (torch.randn(metric_shape, device="cuda", generator=generator) / math.sqrt(dh)).to(dtype)
    mask = torch.rand(B, T, device="cuda", generator=generator) > 0.2
    mask[:, 0] = True
    mask[-1] = False  # the last sample has no real token: zero output, zero gradients
    return tokens, metrics, values, mask


def check_against_reference(B, H, T, dh, dtype, reference_attention, relative_error, static_metric=False):
    tokens, metrics, values, mask = gpu_inputs(B, H, T, dh, dtype, static_metric)
    leaves = [t.requires_grad_() for t in (tokens, metrics, values)]
    leaves64 = [t.detach().double().requires_grad_() for t in leaves]
    grad_out = torch.randn(B, H, T, dh, device="cuda", dtype=torch.float64)

    def heads(t):
        return t.view(B, T, H, dh).transpose(1, 2)

    out = damcha_attention_triton(heads(leaves[0]), leaves[1], heads(leaves[2]), mask)
    grads = torch.autograd.grad(out, leaves, grad_out.to(dtype))
    expected = reference_attention(heads(leaves64[0]), leaves64[1], heads(leaves64[2]), mask)
    expected_grads = torch.autograd.grad(expected, leaves64, grad_out)

    tolerance = TOLERANCE[dtype]
    assert out.dtype == dtype
    assert relative_error(out, expected) <= tolerance
    assert torch.equal(out[-1], torch.zeros_like(out[-1]))
    for name, got, want in zip(("x", "head_metrics", "value"), grads, expected_grads):
        assert torch.isfinite(got).all(), name
        assert relative_error(got, want) <= tolerance, name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("tokens", TOKEN_COUNTS)
def test_forecasting_token_counts(tokens, dtype, reference_attention, relative_error):
    check_against_reference(2, 8, tokens, 64, dtype, reference_attention, relative_error)


@pytest.mark.parametrize("tokens", (11, 866))
def test_fp16(tokens, reference_attention, relative_error):
    check_against_reference(2, 8, tokens, 64, torch.float16, reference_attention, relative_error)


@pytest.mark.parametrize("head_dim", (16, 32, 128))
def test_other_head_widths_and_static_metric(head_dim, reference_attention, relative_error):
    check_against_reference(2, 4, 325, head_dim, torch.bfloat16, reference_attention, relative_error,
                            static_metric=True)


def test_float64_is_left_to_the_interpreter():
    x = torch.zeros(1, 1, 4, 16, device="cuda", dtype=torch.float64)
    metrics = torch.zeros(1, 1, 16, 16, device="cuda", dtype=torch.float64)
    assert triton_unsupported_reason(x, metrics, x) == "dtype float64 unsupported on cuda"
