"""Shared helpers for the model tests: float64 construction and an explicit DAMCHA reference."""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

import pytest
import torch



@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    """Build modules directly in ``dtype`` (so random inits are drawn in it too)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@pytest.fixture
def float64():
    with default_dtype(torch.float64):
        yield


def explicit_block_row_sum(metric: torch.Tensor, n_heads: int) -> torch.Tensor:
    """m_i = sum_j M_ij with explicit slicing (paper Eq. 4). metric [..., D, D] -> [..., H, dh, dh]."""
    D = metric.shape[-1]
    dh = D // n_heads
    heads = []
    for i in range(n_heads):
        block_sum = sum(
            metric[..., i * dh : (i + 1) * dh, j * dh : (j + 1) * dh] for j in range(n_heads)
        )
        heads.append(block_sum)
    return torch.stack(heads, dim=-3)


def explicit_damcha(
    x, head_metric_at, value_weight, value_bias, out_weight, out_bias, n_heads, key_padding_mask=None,
    is_causal=False,
):
    """DAMCHA attention written out query by query (damcha.md §1.5), the slow test reference.

    x [B, T, D]; head_metric_at(b, t, i) -> m_i [dh, dh] for sample b, query t, head i.
    Returns y [B, T, D] and weights [B, H, T, T]; a query with no visible key gets zero weights, and
    padded queries get zero outputs.
    """
    B, T, D = x.shape
    dh = D // n_heads
    value = x @ value_weight.T + value_bias
    rows = []
    weights = torch.zeros(B, n_heads, T, T, dtype=x.dtype)
    for b in range(B):
        token_rows = []
        for t in range(T):
            head_outputs = []
            for i in range(n_heads):
                cols = slice(i * dh, (i + 1) * dh)
                visible = [
                    s
                    for s in range(T)
                    if (key_padding_mask is None or bool(key_padding_mask[b, s])) and (not is_causal or s <= t)
                ]
                if not visible:
                    head_outputs.append(torch.zeros(dh, dtype=x.dtype))
                    continue
                query = x[b, t, cols] @ head_metric_at(b, t, i)
                scores = torch.stack([query @ x[b, s, cols] / math.sqrt(dh) for s in visible])
                probabilities = torch.softmax(scores, dim=0)
                for s, p in zip(visible, probabilities):
                    weights[b, i, t, s] = p.detach()
                head_outputs.append(sum(p * value[b, s, cols] for s, p in zip(visible, probabilities)))
            token_rows.append(torch.cat(head_outputs))
        rows.append(torch.stack(token_rows))
    y = torch.stack(rows) @ out_weight.T + out_bias
    if key_padding_mask is not None:
        y = y * key_padding_mask.to(y.dtype)[..., None]
    return y, weights


@pytest.fixture(scope="session")
def etth1_series() -> torch.Tensor:
    """The first 1,000 rows of the real ETTh1 file, z-scored with their own mean/std, [1000, 7]."""
    root = os.environ.get("DAMCHA_TS_DATA")
    if not root:
        pytest.fail("set DAMCHA_TS_DATA to the directory of the shared benchmark CSVs (../shared/data)")
    import pandas as pd

    frame = pd.read_csv(Path(root) / "ETTh1.csv.gz", nrows=1000)
    values = torch.tensor(frame.drop(columns=["date"]).to_numpy(), dtype=torch.float64)
    return (values - values.mean(0)) / values.std(0)


@pytest.fixture
def block_row_sum():
    """The explicit RowSum reference, as a fixture (test modules do not import conftest)."""
    return explicit_block_row_sum


@pytest.fixture
def reference_damcha():
    """The query-by-query DAMCHA reference, as a fixture."""
    return explicit_damcha
