"""Kernel test setup: the triton interpreter on CPU-only machines, and a float64 reference.

Without CUDA the kernels run in triton's CPU interpreter. TRITON_INTERPRET must be set before the
kernels are first decorated, which ``triton_damcha`` does lazily on the first launch, so an autouse
fixture that sets it for every test here is early enough, and it does not leak into other tests.
With CUDA the same tests exercise the compiled kernels instead.
"""

from __future__ import annotations

import math

import pytest
import torch


@pytest.fixture(autouse=True)
def triton_interpreter_without_gpu(monkeypatch):
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def explicit_head_attention(x, head_metrics, value, key_padding_mask=None, keep=None, dropout_p=0.0,
                            scale=None):
    """DAMCHA attention per (sample, head), written out with explicit loops (damcha.md §1.5).

    x, value [B, H, T, dh]; head_metrics [B, H, dh, dh] or [H, dh, dh]; key_padding_mask [B, T]
    (True = real token); keep [B, H, T, T] dropout keep mask. Computes, for each (b, h):
    S = (x m) x^T * scale, hidden keys -> -inf, softmax per row (all hidden -> a row of zeros),
    dropout (keep / (1 - p)), then @ value. Differentiable; run it in float64.
    """
    B, H, T, dh = x.shape
    scale = 1.0 / math.sqrt(dh) if scale is None else scale
    heads_out = []
    for b in range(B):
        for h in range(H):
            metric = head_metrics[h] if head_metrics.dim() == 3 else head_metrics[b, h]
            scores = (x[b, h] @ metric) @ x[b, h].T * scale  # [T, T]: row = query, column = key
            if key_padding_mask is None:
                visible = torch.ones(T, dtype=torch.bool, device=x.device)
            else:
                visible = key_padding_mask[b]
            if visible.any():
                scores = scores.masked_fill(~visible[None, :], float("-inf"))
                row_max = scores.max(dim=1, keepdim=True).values
                exp_scores = torch.exp(scores - row_max)
                probs = exp_scores / exp_scores.sum(dim=1, keepdim=True)
            else:
                probs = torch.zeros_like(scores)
            if keep is not None:
                probs = probs * keep[b, h].to(probs.dtype) / (1.0 - dropout_p)
            heads_out.append(probs @ value[b, h])
    return torch.stack(heads_out).view(B, H, T, dh)


@pytest.fixture
def reference_attention():
    """The explicit per-head reference, as a fixture (test modules do not import conftest)."""
    return explicit_head_attention


def max_relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| / max |expected| (0 when both are exactly zero)."""
    scale = expected.abs().max().item()
    error = (actual.double() - expected.double()).abs().max().item()
    return error / scale if scale > 0 else error


@pytest.fixture
def relative_error():
    return max_relative_error
