"""The fused Triton DAMCHA kernel against an explicit float64 reference.

Without CUDA everything runs in triton's CPU interpreter (conftest sets TRITON_INTERPRET=1); with
CUDA the same tests run the compiled kernels. The interpreter is slow, so shapes are small and the
interpreter tile size is set per case so that each case still crosses several blocks and a ragged
tail. Errors are max |kernel - reference| / max |reference| over the whole tensor.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from damcha_ts.errors import ConfigError
from damcha_ts.models.kernels import triton_damcha
from damcha_ts.models.kernels.triton_damcha import damcha_attention_triton, triton_unsupported_reason

FP32_TOLERANCE = 1e-4

needs_interpreter = pytest.mark.skipif(
    torch.cuda.is_available(), reason="float64 kernels run only in the interpreter (CPU-only machines)"
)


def make_inputs(B, H, T, dh, mask_kind=None, static_metric=False, seed=0, dtype=torch.float64,
                device="cpu"):
    """x and value as head-split views of [B, T, H*dh] tensors (the layout the attention module
    passes), head metrics scaled so that scores stay O(1), and a key padding mask:
    None, "random" (every sample keeps at least one key) or "empty_sample" (the last sample has no
    real key at all)."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randn(B, T, H * dh, generator=generator, dtype=torch.float64)
    values = torch.randn(B, T, H * dh, generator=generator, dtype=torch.float64)
    metric_shape = (H, dh, dh) if static_metric else (B, H, dh, dh)
    metrics = torch.randn(metric_shape, generator=generator, dtype=torch.float64) / math.sqrt(dh)
    mask = None
    if mask_kind is not None:
        mask = torch.rand(B, T, generator=generator) > 0.3
        mask[:, 0] = True
        mask[:, -1] = False
        if mask_kind == "empty_sample":
            mask[-1] = False
        mask = mask.to(device)

    def leaf(t):
        return t.to(device=device, dtype=dtype).requires_grad_()

    tokens, values, metrics = leaf(tokens), leaf(values), leaf(metrics)
    x = tokens.view(B, T, H, dh).transpose(1, 2)
    value = values.view(B, T, H, dh).transpose(1, 2)
    return (tokens, metrics, values), (x, metrics, value), mask


CASES = {
    # id: (B, H, T, dh, mask kind, static metric, interpreter tile)
    "T7": (2, 2, 7, 16, None, False, 32),
    "T11-empty-sample": (2, 2, 11, 16, "empty_sample", False, 16),
    "T25-static-metric": (2, 2, 25, 16, "random", True, 16),
    "T130": (1, 2, 130, 16, "random", False, 64),
    "dh8-padded-to-16": (2, 1, 21, 8, None, False, 16),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_forward_and_all_gradients_match_float64_reference(case, device, monkeypatch,
                                                           reference_attention, relative_error):
    B, H, T, dh, mask_kind, static_metric, tile = case
    monkeypatch.setattr(triton_damcha, "_INTERPRETER_BLOCK", tile)
    leaves64, (x64, m64, v64), mask = make_inputs(B, H, T, dh, mask_kind, static_metric, device=device)
    leaves32, (x32, m32, v32), _ = make_inputs(B, H, T, dh, mask_kind, static_metric,
                                               dtype=torch.float32, device=device)
    grad_out = torch.randn(B, H, T, dh, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    grad_out = grad_out.to(device)

    expected = reference_attention(x64, m64, v64, mask)
    expected_grads = torch.autograd.grad(expected, leaves64, grad_out)
    out = damcha_attention_triton(x32, m32, v32, mask)
    grads = torch.autograd.grad(out, leaves32, grad_out.float())

    assert out.shape == (B, H, T, dh) and out.dtype == torch.float32
    assert relative_error(out, expected) <= FP32_TOLERANCE
    for name, got, want in zip(("x", "head_metrics", "value"), grads, expected_grads):
        assert got.shape == want.shape, name
        assert relative_error(got, want) <= FP32_TOLERANCE, name
    if mask_kind == "empty_sample":
        # A sample with no real key: exactly zero output and zero (finite) gradients.
        assert torch.equal(out[-1], torch.zeros_like(out[-1]))
        assert out[0].abs().max() > 0
        for got in grads:
            assert torch.isfinite(got).all()
            assert torch.equal(got[-1], torch.zeros_like(got[-1]))


# gradcheck runs in fast mode (random projections of the Jacobian): the slow mode's one evaluation
# per input element takes several seconds even at T=3 under the interpreter. The full Jacobians are
# covered by the comparisons with the float64 reference above.


@needs_interpreter
def test_gradcheck_float64_with_padding_mask(monkeypatch):
    monkeypatch.setattr(triton_damcha, "_INTERPRETER_BLOCK", 16)
    _, (x, metrics, value), _ = make_inputs(1, 2, 5, 4)
    mask = torch.tensor([[True, False, True, True, False]])
    inputs = tuple(t.detach().requires_grad_() for t in (x, metrics, value))
    assert torch.autograd.gradcheck(lambda a, b, c: damcha_attention_triton(a, b, c, mask), inputs,
                                    fast_mode=True)


@needs_interpreter
def test_gradcheck_float64_static_metric_empty_sample_and_dropout(monkeypatch):
    # Reseeding before each call makes the dropout mask the same for every evaluation.
    monkeypatch.setattr(triton_damcha, "_INTERPRETER_BLOCK", 16)
    _, (x, metrics, value), mask = make_inputs(2, 1, 5, 4, "empty_sample", static_metric=True)
    inputs = tuple(t.detach().requires_grad_() for t in (x, metrics, value))

    def seeded_attention(a, b, c):
        torch.manual_seed(7)
        return damcha_attention_triton(a, b, c, mask, dropout_p=0.25)

    assert torch.autograd.gradcheck(seeded_attention, inputs, fast_mode=True)


def test_dropout_matches_reference_with_the_kernels_own_keep_mask(device, monkeypatch,
                                                                  reference_attention, relative_error):
    monkeypatch.setattr(triton_damcha, "_INTERPRETER_BLOCK", 16)
    B, H, T, dh, dropout_p = 2, 2, 18, 16, 0.3
    leaves64, (x64, m64, v64), mask = make_inputs(B, H, T, dh, "random", device=device)
    x, m, v = (t.detach().float() for t in (x64, m64, v64))
    seed = torch.tensor([1234], dtype=torch.int64, device=device)
    scale = 1.0 / math.sqrt(dh)
    grad_out = torch.randn(B, H, T, dh, dtype=torch.float64, device=device)

    out, lse = torch.ops.damcha_ts.damcha_attention_forward(x, m, v, mask, seed, dropout_p, scale)
    grads = torch.ops.damcha_ts.damcha_attention_backward(grad_out.float(), x, m, v, mask, seed, out,
                                                          lse, dropout_p, scale)
    keep = triton_damcha._dropout_keep_mask(seed, B, H, T, dropout_p)
    expected = reference_attention(x64, m64, v64, mask, keep=keep, dropout_p=dropout_p)
    expected_grads = torch.autograd.grad(expected, (x64, m64, v64), grad_out)

    assert abs(keep.float().mean().item() - (1 - dropout_p)) < 0.05
    # Every (sample, head) draws its own mask.
    assert not torch.equal(keep[0, 0], keep[0, 1]) and not torch.equal(keep[0, 0], keep[1, 0])
    assert relative_error(out, expected) <= FP32_TOLERANCE
    for got, want in zip(grads, expected_grads):
        assert relative_error(got, want) <= FP32_TOLERANCE


def test_dropout_follows_torch_manual_seed(device):
    _, (x, m, v), mask = make_inputs(1, 2, 7, 16, "random", dtype=torch.float32, device=device)
    runs = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        runs.append(damcha_attention_triton(x, m, v, mask, dropout_p=0.5).detach())
    no_dropout = damcha_attention_triton(x, m, v, mask, dropout_p=0.0).detach()
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])
    assert not torch.equal(runs[0], no_dropout)


@pytest.mark.parametrize("dtype, tolerance", [(torch.bfloat16, 5e-2), (torch.float16, 1e-2)])
def test_half_precision_inputs(dtype, tolerance, device, monkeypatch, reference_attention,
                               relative_error):
    # The reference sees the same rounded inputs, so only the kernel's own rounding is measured.
    monkeypatch.setattr(triton_damcha, "_INTERPRETER_BLOCK", 16)
    leaves, (x, m, v), mask = make_inputs(2, 2, 25, 16, "empty_sample", dtype=dtype, device=device)
    x64, m64, v64 = (t.detach().double().requires_grad_() for t in (x, m, v))
    grad_out = torch.randn(2, 2, 25, 16, device=device, dtype=torch.float64)

    out = damcha_attention_triton(x, m, v, mask)
    grads = torch.autograd.grad(out, (x, m, v), grad_out.to(dtype))
    expected = reference_attention(x64, m64, v64, mask)
    expected_grads = torch.autograd.grad(expected, (x64, m64, v64), grad_out)

    assert out.dtype == dtype
    assert relative_error(out, expected) <= tolerance
    for got, want in zip(grads, expected_grads):
        assert got.dtype == dtype
        assert relative_error(got, want) <= tolerance


def test_bf16_gradients_are_no_less_accurate_than_torchs_own_bf16_attention(device, monkeypatch,
                                                                              reference_attention):
    # The backward recomputes the forward's probabilities from its saved LSE; if it forms the scaled
    # query with other rounding than the forward did, the gradients carry that mismatch. Scores of
    # order 10 (a unit-scale metric) make the softmax sharp enough for it to show.
    monkeypatch.setattr(triton_damcha, "_INTERPRETER_BLOCK", 16)
    generator = torch.Generator().manual_seed(0)
    x, m, v = (torch.randn(shape, generator=generator).to(device, torch.bfloat16)
               for shape in ((2, 2, 40, 16), (2, 2, 16, 16), (2, 2, 40, 16)))
    grad_out = torch.randn(2, 2, 40, 16, generator=generator, dtype=torch.float64).to(device)
    exact_leaves = [t.double().requires_grad_() for t in (x, m, v)]
    exact = torch.autograd.grad(reference_attention(*exact_leaves, None), exact_leaves, grad_out)
    torch_leaves = [t.clone().requires_grad_() for t in (x, m, v)]
    torch_bf16 = torch.autograd.grad(reference_attention(*torch_leaves, None), torch_leaves,
                                     grad_out.to(torch.bfloat16))
    kernel_leaves = [t.clone().requires_grad_() for t in (x, m, v)]
    kernel = torch.autograd.grad(damcha_attention_triton(*kernel_leaves), kernel_leaves, grad_out.to(torch.bfloat16))
    # The interpreter's dots accumulate bf16 operands in fp32; a GPU's bf16 tensor cores round more.
    factor = 1.5 if device.type == "cuda" else 1.0

    def error(got, want):  # over the whole tensor: the maximum alone is one rounding's luck
        return ((got.double() - want).norm() / want.norm()).item()

    for name, got, baseline, want in zip(("x", "metric", "value"), kernel, torch_bf16, exact):
        assert error(got, want) <= factor * error(baseline, want), name


def test_autocast_runs_the_kernel_in_the_autocast_dtype(device, monkeypatch, reference_attention,
                                                        relative_error):
    # Under bf16 autocast (Lightning's "bf16-mixed") the fp32 inputs are cast, as SDPA would be.
    monkeypatch.setattr(triton_damcha, "_INTERPRETER_BLOCK", 16)
    leaves, (x, m, v), mask = make_inputs(2, 2, 11, 16, "random", dtype=torch.float32, device=device)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        out = damcha_attention_triton(x, m, v, mask)
    out.float().sum().backward()
    rounded = [t.detach().to(torch.bfloat16).double().requires_grad_() for t in (x, m, v)]
    expected = reference_attention(*rounded, mask)
    expected.sum().backward()

    assert out.dtype == torch.bfloat16
    assert relative_error(out, expected) <= 5e-2
    for leaf in leaves:
        assert leaf.grad.dtype == torch.float32
    assert relative_error(leaves[1].grad, rounded[1].grad) <= 5e-2


def test_torch_compile_traces_the_library_ops_without_graph_breaks(device, monkeypatch):
    monkeypatch.setattr(triton_damcha, "_INTERPRETER_BLOCK", 16)
    _, (x, m, v), mask = make_inputs(1, 1, 7, 16, "random", dtype=torch.float32, device=device)

    def attention(a, b, c):
        return damcha_attention_triton(a, b, c, mask)

    compiled = torch.compile(attention, backend="aot_eager", fullgraph=True)
    eager_out = attention(x, m, v)
    eager_grads = torch.autograd.grad(eager_out.square().sum(), (x, m, v))
    compiled_out = compiled(x, m, v)
    compiled_grads = torch.autograd.grad(compiled_out.square().sum(), (x, m, v))
    torch.testing.assert_close(compiled_out, eager_out, rtol=0, atol=0)
    for got, want in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_no_tokens_gives_empty_output_and_zero_metric_gradient(device):
    x = torch.zeros(2, 2, 0, 16, device=device, requires_grad=True)
    metrics = torch.randn(2, 2, 16, 16, device=device, requires_grad=True)
    value = torch.zeros(2, 2, 0, 16, device=device, requires_grad=True)
    out = damcha_attention_triton(x, metrics, value)
    out.sum().backward()
    assert out.shape == (2, 2, 0, 16)
    assert torch.equal(metrics.grad, torch.zeros_like(metrics))


# --------------------------------------------------------------------------------------------
# What the kernel refuses, and why (the backend dispatch shows these reasons to the user)


def small_inputs(B=2, H=2, T=5, dh=16, dtype=torch.float32, device="cpu"):
    return tuple(torch.randn(shape, dtype=dtype, device=device)
                 for shape in ((B, H, T, dh), (B, H, dh, dh), (B, H, T, dh)))


def test_supported_inputs_have_no_reason(device):
    x, m, v = small_inputs(device=device)
    mask = torch.ones(2, 5, dtype=torch.bool, device=device)
    assert triton_unsupported_reason(x, m, v, mask, dropout_p=0.1) is None
    assert triton_unsupported_reason(x, m[0], v) is None  # static [H, dh, dh] metric
    assert triton_unsupported_reason(*small_inputs(dh=24, device=device)) is None  # padded on chip
    assert triton_unsupported_reason(*small_inputs(dtype=torch.bfloat16, device=device)) is None


@pytest.mark.parametrize(
    "change, reason",
    [
        (dict(need_weights=True), "attention weights were requested"),
        (dict(dropout_p=1.0), "dropout_p must be in [0, 1)"),
        (dict(x=torch.randn(2, 5, 32)), "x must be [B, H, T, dh]"),
        (dict(value=torch.randn(2, 2, 6, 16)), "value shape (2, 2, 6, 16) differs"),
        (dict(head_metrics=torch.randn(2, 2, 8, 8)), "head_metrics must be [B, H, dh, dh] or [H, dh, dh]"),
        (dict(key_padding_mask=torch.ones(2, 6, dtype=torch.bool)), "key_padding_mask must be [B, T]"),
        (dict(head_metrics=torch.randn(2, 2, 16, 16, dtype=torch.float64)), "different dtypes"),
        (dict(x=torch.randn(1, 1, 5, 256), head_metrics=torch.randn(1, 1, 256, 256),
              value=torch.randn(1, 1, 5, 256)), "head_dim 256 > 128 unsupported"),
        (dict(x=torch.randn(65536, 1, 1, 16), head_metrics=torch.randn(1, 16, 16), value=torch.randn(65536, 1, 1, 16)),
         "batch 65536 > 65535"),
        (dict(x=torch.ones(2, 2, 5, 16, dtype=torch.int64), head_metrics=torch.ones(2, 2, 16, 16, dtype=torch.int64),
              value=torch.ones(2, 2, 5, 16, dtype=torch.int64)), "dtype int64 unsupported"),
    ],
)
def test_unsupported_inputs_are_named(change, reason, device):
    x, m, v = small_inputs(device=device)
    arguments = dict(x=x, head_metrics=m, value=v, key_padding_mask=None, dropout_p=0.0, need_weights=False)
    arguments.update({name: value.to(device) for name, value in change.items() if torch.is_tensor(value)})
    arguments.update({name: value for name, value in change.items() if not torch.is_tensor(value)})
    assert reason in triton_unsupported_reason(**arguments)
    if not arguments.pop("need_weights"):
        with pytest.raises(ConfigError, match="damcha_attention_triton cannot run these inputs"):
            damcha_attention_triton(**arguments)


def test_cpu_without_interpreter_is_refused(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert triton_unsupported_reason(*small_inputs()) == "tensor is on cpu and TRITON_INTERPRET is not set"


def test_missing_triton_is_reported(monkeypatch, request):
    real_find_spec = triton_damcha.importlib.util.find_spec
    # The answer is cached per process: forget it now and again after the test.
    triton_damcha._triton_installed.cache_clear()
    request.addfinalizer(triton_damcha._triton_installed.cache_clear)

    def find_spec_without_triton(name, *args):
        return None if name == "triton" else real_find_spec(name, *args)

    monkeypatch.setattr(triton_damcha.importlib.util, "find_spec", find_spec_without_triton)
    assert triton_unsupported_reason(*small_inputs()) == "triton is not installed"


def test_importing_and_asking_does_not_import_triton():
    code = (
        "import sys, torch\n"
        "from damcha_ts.models.kernels import triton_unsupported_reason\n"
        "x = torch.zeros(1, 1, 3, 16)\n"
        "triton_unsupported_reason(x, torch.zeros(1, 1, 16, 16), x)\n"
        "assert 'triton' not in sys.modules, 'triton was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
