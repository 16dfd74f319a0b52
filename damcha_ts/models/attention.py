"""Multi-head attention (the baseline) and DAMCHA attention with one call interface.

Both modules take ``(x [B, T, D], key_padding_mask [B, T] | None, is_causal, head_metrics, need_weights)``
and return ``(y [B, T, D], AttentionRecord | None)``. Neither applies dropout to its output: the encoder
layers around them drop the residual branch (as iTransformer's AttentionLayer and PyTorch's
TransformerEncoderLayer do).

DAMCHA (damcha.md §1): with X_i the i-th positional head slice of the attention input (no projection),
queries are X_i m_i and keys are X_i, so S_i = X_i m_i X_i^T / sqrt(dh) (§1.5). Values and the output
projection are as in MHA. The per-head metrics m_i come from a metric generator
(``metric_generator.py``), either owned by the layer or computed once per encoder stack and passed in.

Masks: ``key_padding_mask`` is True (or 1) for real tokens. Padded keys get no attention, a query whose
keys are all masked gets exactly zero attention (damcha.md §1.5 step 4), and the outputs of padded
queries are zeroed.

Backends (``attn_backend``, DAMCHA only; MHA always uses SDPA, or math for weights):
``"math"`` -- explicit matmul, mask, softmax, matmul (the reference; the only path that returns weights);
``"sdpa"`` -- q = X_i m_i fed to ``torch.nn.functional.scaled_dot_product_attention`` (damcha.md §4.1);
``"triton"`` -- the fused kernel in ``damcha_ts.models.kernels.triton_damcha`` (imported lazily);
``"auto"`` -- on CUDA, triton where it was measured faster than sdpa for that GPU, dtype and token
count (``kernels/backend_speeds.json``, written by ``benchmarks/gpu/check_triton.py``) and the kernel can
run the call, else sdpa; sdpa on CPU (math when weights are asked).
triton itself is an extra (``pip install 'damcha-ts[gpu]'``): without it "triton" is refused and "auto"
on CUDA runs sdpa, saying why once.
"""

from __future__ import annotations

import functools
import math
import os
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from damcha_ts.errors import ConfigError
from damcha_ts.models.attention_config import ATTENTION_BACKENDS, AttentionConfig, AttentionRecord
from damcha_ts.models.metric_generator import MetricGenerator, StaticMetric, make_metric_generator
from damcha_ts.models.validation import check_choice, check_heads


# --------------------------------------------------------------------------------------------------
# Scaled dot-product attention with key padding, causal masks and the fully-masked-row guard


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """[B, T, D] -> [B, H, T, dh] (head i holds columns i*dh .. (i+1)*dh - 1)."""
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """[B, H, T, dh] -> [B, T, D]."""
    B, H, T, dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * dh)


def visible_keys(
    key_padding_mask: Tensor | None, is_causal: bool, n_tokens: int, device: torch.device
) -> Tensor | None:
    """Bool [B, 1, 1 or T, T]: which keys each query may see (None: all of them, no causal mask)."""
    visible = None
    if key_padding_mask is not None:
        visible = key_padding_mask.bool()[:, None, None, :]
    if is_causal:
        causal = torch.ones(n_tokens, n_tokens, dtype=torch.bool, device=device).tril()
        visible = causal if visible is None else visible & causal
    return visible


def masked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    use_math: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """softmax(q k^T / sqrt(dh) + masks) v with zero attention for fully masked rows.

    q, k, v [B, H, T, dh] -> (out [B, H, T, dh], weights [B, H, T, T] if ``use_math`` else None).
    ``use_math`` runs the explicit path; otherwise torch's fused SDPA. Fully masked rows are handled
    the same way on both paths, whatever SDPA would do: their keys are un-masked (so the softmax stays
    finite and so do the gradients) and their outputs set to 0.
    """
    visible = visible_keys(key_padding_mask, is_causal, q.shape[-2], q.device)
    empty_rows = None
    if key_padding_mask is not None:
        empty_rows = ~visible.any(dim=-1, keepdim=True)  # [B, 1, 1 or T, 1]
        visible = visible | empty_rows
    if use_math:
        # Scaling q (T x dh) rather than the scores (T x T) saves a pass over the largest tensor.
        scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)
        if visible is not None:
            scores = scores.masked_fill(~visible, float("-inf"))
        weights = scores.softmax(dim=-1)
        if empty_rows is not None:
            weights = weights.masked_fill(empty_rows, 0.0)
        weights = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
        return weights @ v, weights
    if key_padding_mask is None:
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=dropout_p)
    if empty_rows is not None:
        out = out.masked_fill(empty_rows, 0.0)
    return out, None


# --------------------------------------------------------------------------------------------------
# DAMCHA backends and their dispatch


def apply_head_metrics(x_heads: Tensor, head_metrics: Tensor) -> Tensor:
    """Queries q_i = X_i m_i (damcha.md §1.5).

    x_heads [B, H, T, dh]; head_metrics [H, dh, dh] (static), [B, H, dh, dh] (one per sample) or
    [B, T, H, dh, dh] (causal, one per query position) -> [B, H, T, dh].
    """
    if head_metrics.dim() == 5:
        return torch.einsum("bhtp,bthpq->bhtq", x_heads, head_metrics)
    return x_heads @ head_metrics


def _triton_module():
    """The kernel module, or the reason it cannot be imported (triton itself is imported lazily there)."""
    try:
        from damcha_ts.models.kernels import triton_damcha
    except ImportError as exc:  # the kernel module is optional
        return None, f"the triton kernel module could not be imported ({exc})"
    return triton_damcha, None


def select_backend(
    requested: str,
    x_heads: Tensor,
    head_metrics: Tensor,
    value: Tensor,
    key_padding_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    is_causal: bool = False,
) -> str:
    """The backend that will run this call: "math", "sdpa" or "triton".

    Whenever weights are requested (attention maps, a diagnostic), math: only the explicit path forms
    them, whatever the backend. Otherwise "auto" is triton when the input is on CUDA and the kernel
    supports the call, else sdpa; "triton" is honoured or refused (ConfigError with the kernel's reason).
    """
    check_choice("attn_backend", requested, ATTENTION_BACKENDS)
    if requested == "math" or need_weights:
        return "math"
    if requested == "auto" and x_heads.is_cuda and not _measured_faster(x_heads):
        return "sdpa"  # auto follows measured speeds: Triton only where it was timed faster (kernels/dispatch.py)
    if requested == "triton" or (requested == "auto" and x_heads.is_cuda):
        kernels, reason = None, None
        if is_causal or head_metrics.dim() == 5:
            reason = "causal attention (per-query metrics) is not supported by the triton kernel"
        if reason is None:
            kernels, reason = _triton_module()
        if reason is None:  # weights were not requested: that case returned "math" above
            reason = kernels.triton_unsupported_reason(x_heads, head_metrics, value, key_padding_mask, dropout_p)
        if reason is None:
            return "triton"
        missing = kernels is not None and reason == kernels.TRITON_MISSING
        if requested == "triton" and missing:
            raise ConfigError(f"attn_backend='triton' needs the triton package, which is not installed: "
                              f"{INSTALL_TRITON}")
        if requested == "triton":
            interpret = os.environ.get("TRITON_INTERPRET", "<unset>")
            raise ConfigError(
                f"attn_backend='triton' cannot run this call: {reason} "
                f"(device {x_heads.device}, dtype {x_heads.dtype}, TRITON_INTERPRET={interpret}); "
                "use attn_backend='auto' to fall back to sdpa"
            )
        if missing:
            _say_auto_runs_sdpa_without_triton()
    return "sdpa"


def _measured_faster(x_heads: Tensor) -> bool:
    # Imported here, as the kernel module is: the kernels package registers its torch ops on import,
    # and only CUDA inputs ever ask.
    from damcha_ts.models.kernels.dispatch import auto_runs_triton, dtype_name

    # Under autocast the kernel sees the autocast dtype, not the weights' float32.
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else x_heads.dtype
    return auto_runs_triton(torch.cuda.get_device_name(x_heads.device), dtype_name(dtype), x_heads.shape[-2])


INSTALL_TRITON = "pip install 'damcha-ts[gpu]'"


@functools.cache  # once per process, not on every forward
def _say_auto_runs_sdpa_without_triton() -> None:
    warnings.warn(f"attn_backend='auto' runs DAMCHA attention on sdpa: the fused Triton kernel needs the "
                  f"triton package, which is not installed ({INSTALL_TRITON})", RuntimeWarning, stacklevel=4)


def damcha_attention(
    x_heads: Tensor,
    head_metrics: Tensor,
    value: Tensor,
    key_padding_mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    backend: str = "auto",
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """softmax(X_i m_i X_i^T / sqrt(dh) + masks) V_i for every head i (damcha.md §1.5).

    x_heads [B, H, T, dh] (keys, and queries after the metric); head_metrics as in
    :func:`apply_head_metrics`; value [B, H, T, dh] -> (out [B, H, T, dh], weights [B, H, T, T] | None).
    """
    chosen = select_backend(
        backend, x_heads, head_metrics, value, key_padding_mask, dropout_p, need_weights, is_causal
    )
    if chosen == "triton":
        kernels, _ = _triton_module()
        out = kernels.damcha_attention_triton(
            x_heads, head_metrics, value, key_padding_mask=key_padding_mask, dropout_p=dropout_p
        )
        return out, None
    queries = apply_head_metrics(x_heads, head_metrics)
    return masked_attention(
        queries, x_heads, value, key_padding_mask, is_causal, dropout_p, use_math=chosen == "math"
    )


# --------------------------------------------------------------------------------------------------
# Modules


def project_output(out_projection: nn.Linear, heads_out: Tensor, key_padding_mask: Tensor | None) -> Tensor:
    """[B, H, T, dh] -> merged heads through W_o -> [B, T, D], with padded queries' rows zeroed (§1.5)."""
    y = out_projection(merge_heads(heads_out))
    if key_padding_mask is not None:
        y = y * key_padding_mask.to(y.dtype).unsqueeze(-1)
    return y


class MultiHeadAttention(nn.Module):
    """The MHA baseline: Q/K/V/O projections (D x D, with bias) around scaled dot-product attention.

    Parameters: 4 D^2 + 4 D, as iTransformer's AttentionLayer and nn.MultiheadAttention. Q, K and V are
    one stacked [3D, D] Linear (the layout of nn.MultiheadAttention.in_proj_weight): one matmul, not three.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        check_heads(d_model, n_heads)
        self.n_heads, self.dropout = n_heads, dropout
        self.qkv_projection = nn.Linear(d_model, 3 * d_model)
        self.out_projection = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, is_causal: bool = False,
                head_metrics: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, AttentionRecord | None]:
        """x [B, T, D] -> (y [B, T, D], AttentionRecord with weights if ``need_weights``)."""
        if head_metrics is not None:
            raise ConfigError("MultiHeadAttention takes no head_metrics (only DAMCHA attention does)")
        q, k, v = (split_heads(part, self.n_heads) for part in self.qkv_projection(x).chunk(3, dim=-1))
        dropout_p = self.dropout if self.training else 0.0
        out, weights = masked_attention(q, k, v, key_padding_mask, is_causal, dropout_p, need_weights)
        y = project_output(self.out_projection, out, key_padding_mask)
        return y, (AttentionRecord(weights.detach()) if need_weights else None)


class DamchaAttention(nn.Module):
    """DAMCHA attention (damcha.md §1): no W_q / W_k; queries X_i m_i, keys X_i, MHA-style V and O.

    ``metric_generator`` is this layer's own metric source (computed from this layer's input), or None
    when the encoder stack shares one and passes ``head_metrics`` to every call (damcha.md §3.1).
    Parameters: 2 D^2 + 2 D plus the own generator, if any.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        metric_generator: MetricGenerator | StaticMetric | None = None,
        attn_backend: str = "auto",
    ) -> None:
        super().__init__()
        check_heads(d_model, n_heads)
        check_choice("attn_backend", attn_backend, ATTENTION_BACKENDS)
        self.n_heads, self.dropout, self.attn_backend = n_heads, dropout, attn_backend
        self.value_projection = nn.Linear(d_model, d_model)
        self.out_projection = nn.Linear(d_model, d_model)
        self.metric_generator = metric_generator

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None, is_causal: bool = False,
                head_metrics: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, AttentionRecord | None]:
        """x [B, T, D] -> (y [B, T, D], AttentionRecord with weights and metrics if ``need_weights``)."""
        full_metric = None
        if head_metrics is None:
            if self.metric_generator is None:
                raise ConfigError(
                    "this DamchaAttention has no metric generator of its own (share_generator=True): "
                    "pass the stack's head_metrics"
                )
            if need_weights:  # M from the same generator pass as the metrics used (one dropout draw)
                head_metrics, full_metric = self.metric_generator.with_full_metric(x, key_padding_mask, is_causal)
            else:
                head_metrics = self.metric_generator(x, key_padding_mask, is_causal)
        x_heads = split_heads(x, self.n_heads)
        value = split_heads(self.value_projection(x), self.n_heads)
        dropout_p = self.dropout if self.training else 0.0
        out, weights = damcha_attention(
            x_heads, head_metrics, value, key_padding_mask, is_causal, dropout_p, self.attn_backend,
            need_weights,
        )
        y = project_output(self.out_projection, out, key_padding_mask)
        if not need_weights:
            return y, None
        full_metric = full_metric.detach() if full_metric is not None else None
        return y, AttentionRecord(weights.detach(), head_metrics.detach(), full_metric)


def build_attention(
    d_model: int, config: AttentionConfig, own_generator: bool = True
) -> MultiHeadAttention | DamchaAttention:
    """The attention module for ``config``; ``own_generator=False`` for layers of a sharing stack."""
    if config.kind == "mha":
        return MultiHeadAttention(d_model, config.n_heads, config.dropout)
    generator = build_metric_generator(d_model, config) if own_generator else None
    return DamchaAttention(d_model, config.n_heads, config.dropout, generator, config.attn_backend)


def build_metric_generator(d_model: int, config: AttentionConfig) -> MetricGenerator | StaticMetric:
    """The metric source of a DAMCHA config; its dropout is the attention dropout unless
    ``generator_dropout`` is set (damcha.md §1.3)."""
    dropout = config.dropout if config.generator_dropout is None else config.generator_dropout
    return make_metric_generator(d_model, config.n_heads, hidden=config.generator_hidden, dropout=dropout,
                                 parameterization=config.parameterization, static_metric=config.static_metric,
                                 init=config.generator_init, metric_gate=config.metric_gate, rank=config.metric_rank,
                                 delta_norm=config.metric_delta_norm)
