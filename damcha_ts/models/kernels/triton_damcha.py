"""Fused DAMCHA attention in Triton: the metric is applied on chip, flash-attention style.

DAMCHA's per-head score is ``S_i = (X_i m_i) X_i^T / sqrt(dh)`` (damcha.md §1.5): the queries are
the input slice times the head metric and the keys are the input slice itself. The kernels in
``_damcha_kernels`` form ``q = X_i m_i`` per query block in registers, stream key/value blocks with
an online softmax and keep only the output and the log-sum-exp, so the forward writes neither q nor
the [T, T] score matrix to memory. The backward recomputes the scores block by block from q
(formed once by torch) and the saved log-sum-exp.

Importing this module does not import triton: the kernels are loaded on the first call. They run on
CUDA tensors, or on CPU tensors when ``TRITON_INTERPRET=1`` was set before that first call (the
interpreter is what CPU-only CI uses; it is slow and meant for tests).

Public entry points (the attention module's backend dispatch calls these):
    damcha_attention_triton(x, head_metrics, value, key_padding_mask=None, dropout_p=0.0, scale=None)
    triton_unsupported_reason(x, head_metrics, value, key_padding_mask=None, dropout_p=0.0,
                              need_weights=False) -> str | None
"""

from __future__ import annotations

import functools
import importlib.util
import math
from typing import Optional

import torch
from torch import Tensor

from damcha_ts.errors import ConfigError
from damcha_ts.models.kernels.autotune import compiled_kernels, triton_interpreting

__all__ = ["damcha_attention_triton", "triton_unsupported_reason", "MAX_HEAD_DIM"]

MAX_HEAD_DIM = 128
MAX_GRID_BATCH = 65535  # CUDA's grid limit on axis z, where the kernels put the batch
"""Widest head the kernels take. Narrower and non-power-of-two widths are zero-padded on chip."""

_GPU_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# float64 runs only in the interpreter: it exists for torch.autograd.gradcheck, not for training.
_INTERPRETER_DTYPES = _GPU_DTYPES + (torch.float64,)

# Tile size under the interpreter, whose cost is per operation more than per element, so larger
# tiles run faster. The tests lower it to cross several blocks and ragged tails at small T.
_INTERPRETER_BLOCK = 32
# Query rows per program of the backward query kernel on GPU. It is fixed rather than autotuned
# because it decides the number of partial-dm slots, which must be known before the launch.
_GPU_BWD_QUERY_BLOCK = 64  # the tiles autotuned on GPU: autotune.AUTOTUNE_CONFIGS


def _compute_dtype(x: Tensor, head_metrics: Tensor, value: Tensor) -> Optional[torch.dtype]:
    """The dtype the kernels will run in: autocast's when it is on (as for SDPA), else the common
    dtype of the three inputs, or None when they disagree."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    if x.dtype == head_metrics.dtype == value.dtype:
        return x.dtype
    return None


# The reason triton_unsupported_reason gives without triton (an extra: pip install 'damcha-ts[gpu]').
TRITON_MISSING = "triton is not installed"


@functools.cache
def _triton_installed() -> bool:
    try:
        return importlib.util.find_spec("triton") is not None  # a file-system search: once is enough
    except (ImportError, ValueError):  # an import hook that refuses it, a half-removed module
        return False


def triton_unsupported_reason(
    x: Tensor,
    head_metrics: Tensor,
    value: Tensor,
    key_padding_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> Optional[str]:
    """Why ``damcha_attention_triton`` cannot run these inputs here, or None when it can.

    Cheap and import-free (it never imports triton), so the dispatch can call it on every forward.
    Shapes are those of ``damcha_attention_triton``.
    """
    if not _triton_installed():
        return TRITON_MISSING
    if need_weights:
        return "attention weights were requested (the fused kernel never forms them)"
    if x.dim() != 4:
        return f"x must be [B, H, T, dh], got shape {tuple(x.shape)}"
    batch, heads, _, head_dim = x.shape
    if value.shape != x.shape:
        return f"value shape {tuple(value.shape)} differs from x shape {tuple(x.shape)}"
    if tuple(head_metrics.shape) not in ((batch, heads, head_dim, head_dim), (heads, head_dim, head_dim)):
        return (f"head_metrics must be [B, H, dh, dh] or [H, dh, dh] = {(batch, heads, head_dim, head_dim)}"
                f" or {(heads, head_dim, head_dim)}, got {tuple(head_metrics.shape)}")
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (batch, x.shape[2]):
        return (f"key_padding_mask must be [B, T] = {(batch, x.shape[2])}, "
                f"got {tuple(key_padding_mask.shape)}")
    tensors = [x, head_metrics, value] + ([key_padding_mask] if key_padding_mask is not None else [])
    if any(t.device != x.device for t in tensors):
        return "x, head_metrics, value and key_padding_mask are on different devices"
    if head_dim > MAX_HEAD_DIM:
        return f"head_dim {head_dim} > {MAX_HEAD_DIM} unsupported"
    if batch > MAX_GRID_BATCH:  # e.g. temporal DAMCHA on Traffic: B * 862 variates
        return f"batch {batch} > {MAX_GRID_BATCH}, CUDA's limit on the launch-grid axis that holds the batch"
    if not 0.0 <= dropout_p < 1.0:
        return f"dropout_p must be in [0, 1), got {dropout_p}"

    dtype = _compute_dtype(x, head_metrics, value)
    if dtype is None:
        return (f"x, head_metrics and value have different dtypes "
                f"({x.dtype}, {head_metrics.dtype}, {value.dtype}) outside autocast")
    device_type = x.device.type
    if device_type == "cuda" and not triton_interpreting():
        if dtype not in _GPU_DTYPES:
            return f"dtype {str(dtype).removeprefix('torch.')} unsupported on cuda"
        return None
    if device_type not in ("cpu", "cuda"):
        return f"tensor is on {device_type}; the triton kernel needs cuda (or cpu under TRITON_INTERPRET=1)"
    if not triton_interpreting():
        return f"tensor is on {device_type} and TRITON_INTERPRET is not set"
    if dtype not in _INTERPRETER_DTYPES:
        return f"dtype {str(dtype).removeprefix('torch.')} unsupported"
    return None


def damcha_attention_triton(
    x: Tensor,
    head_metrics: Tensor,
    value: Tensor,
    key_padding_mask: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    scale: Optional[float] = None,
) -> Tensor:
    """Fused DAMCHA attention: ``softmax((x @ m) @ x^T * scale + key mask) @ value`` per head.

    Args:
        x: [B, H, T, dh] per-head slices of the attention input; the keys are x itself and the
            queries are x @ m (damcha.md §1.5).
        head_metrics: [B, H, dh, dh] one metric per sample and head (non-causal context, §9), or
            [H, dh, dh] one static metric per head, shared by the batch. The row index pairs with
            the query, the column index with the key.
        value: [B, H, T, dh].
        key_padding_mask: [B, T] bool, True for a real token; False hides that key from every query.
        dropout_p: attention-probability dropout (pass 0.0 in eval mode, as for SDPA). The kernels
            draw it from a Philox stream seeded from torch's generator, so ``torch.manual_seed``
            makes it reproducible; the stream differs from SDPA's.
        scale: score scale, 1/sqrt(dh) by default.

    Returns:
        [B, H, T, dh] in the compute dtype (autocast's when autocast is on, else the inputs').
        A query whose keys are all masked gets exactly 0, with zero gradients.

    Differentiable w.r.t. x (through both the query and the key path), head_metrics and value.
    Raises ConfigError with the reason when ``triton_unsupported_reason`` is not None.
    """
    reason = triton_unsupported_reason(x, head_metrics, value, key_padding_mask, dropout_p)
    if reason is not None:
        raise ConfigError(f"damcha_attention_triton cannot run these inputs: {reason}")
    dtype = _compute_dtype(x, head_metrics, value)
    x, head_metrics, value = x.to(dtype), head_metrics.to(dtype), value.to(dtype)
    if key_padding_mask is not None:
        # The kernels read it as contiguous bytes along T.
        key_padding_mask = (key_padding_mask != 0 if key_padding_mask.dtype != torch.bool
                            else key_padding_mask).contiguous()
    if scale is None:
        scale = 1.0 / math.sqrt(x.shape[-1])
    return _DamchaAttentionFunction.apply(x, head_metrics, value, key_padding_mask, float(dropout_p),
                                          float(scale))


class _DamchaAttentionFunction(torch.autograd.Function):
    """Autograd wrapper around the two torch.library ops (forward, backward), defined below.

    It only decides what to save and draws the dropout seed; torch.compile traces it as it is.
    """

    @staticmethod
    def forward(ctx, x, head_metrics, value, key_padding_mask, dropout_p, scale):
        dropout_seed = None
        if dropout_p > 0.0:
            dropout_seed = torch.randint(0, 2**31 - 1, (1,), dtype=torch.int64, device=x.device)
        # Under torch.compile the registered op (one opaque graph node); in eager mode the launch
        # function itself, which skips the op dispatcher's overhead (about 0.1 ms a call, as much
        # as the whole kernel at ETT's and Weather's token counts).
        forward = _forward_op if torch.compiler.is_compiling() else _forward_impl
        out, lse = forward(x, head_metrics, value, key_padding_mask, dropout_seed, dropout_p, scale)
        ctx.save_for_backward(x, head_metrics, value, key_padding_mask, dropout_seed, out, lse)
        ctx.dropout_p, ctx.scale = dropout_p, scale
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, head_metrics, value, key_padding_mask, dropout_seed, out, lse = ctx.saved_tensors
        backward = _backward_op if torch.compiler.is_compiling() else _backward_impl
        grad_x, grad_metrics, grad_value = backward(
            grad_out, x, head_metrics, value, key_padding_mask, dropout_seed, out, lse,
            ctx.dropout_p, ctx.scale,
        )
        return grad_x, grad_metrics, grad_value, None, None, None


# --------------------------------------------------------------------------------------------
# Launch plumbing: everything below that touches triton imports it inside the function.


def _interpreter_half_block() -> int:
    """Under the interpreter each kernel streams tiles half as tall as the ones it owns (at least
    16), so the tests exercise unequal query and key tiles, as the GPU configs have."""
    return max(16, _INTERPRETER_BLOCK // 2)


def _with_dense_layout(t: Tensor) -> Tensor:
    """t itself when [B, H, T, dh] is contiguous or a head-split [B, T, H, dh] view, else a copy.

    Gradients are allocated with ``empty_like``, which keeps these layouts, so the kernels can store
    them with the input's strides.
    """
    if t.is_contiguous() or t.transpose(1, 2).is_contiguous():
        return t
    return t.contiguous()


def _strides(t: Tensor) -> tuple[int, ...]:
    return tuple(t.stride())


def _metric_strides(head_metrics: Tensor) -> tuple[int, int, int, int]:
    """(batch, head, row, col) strides; batch stride 0 broadcasts a static [H, dh, dh] metric."""
    if head_metrics.dim() == 3:
        return (0,) + _strides(head_metrics)
    return _strides(head_metrics)


def _dot_config(dtype: torch.dtype, interpret: bool) -> dict:
    """Constexprs that choose the dot operand dtype, its fp32 precision and the accumulator."""
    import triton.language as tl

    accumulator = tl.float64 if dtype == torch.float64 else tl.float32
    if interpret:
        # The interpreter multiplies raw bf16 bits in tl.dot (ecosystem.md §4.2), so upcast first.
        return {"DOT_DTYPE": accumulator, "DOT_PRECISION": "ieee", "ACC_DTYPE": accumulator}
    operand = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}[dtype]
    # fp32 inputs follow torch's own matmul setting: TF32 only if the user allowed it.
    allow_tf32 = torch.get_float32_matmul_precision() != "highest"
    precision = "tf32" if (dtype != torch.float32 or allow_tf32) else "ieee"
    return {"DOT_DTYPE": operand, "DOT_PRECISION": precision, "ACC_DTYPE": accumulator}


def _block_d(head_dim: int) -> int:
    # tl.dot needs every tile side >= 16; heads narrower than 16 (or not powers of two) are padded.
    return max(16, 1 << (head_dim - 1).bit_length())


def _forward_outputs(x: Tensor) -> tuple[Tensor, Tensor]:
    """Uninitialised (out [B, H, T, dh] laid out like x, lse [B, H, T] in the accumulator dtype)."""
    acc_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    return torch.empty_like(x), torch.empty(x.shape[:3], dtype=acc_dtype, device=x.device)


def _kernel_switches(x, key_padding_mask, dropout_seed, placeholder, interpret):
    """(mask pointer, seed pointer, constexprs shared by all kernels).

    An absent mask or seed is replaced by ``placeholder``: the kernels never read it, since the
    matching HAS_* switch compiles the read away.
    """
    keep = key_padding_mask.view(torch.uint8) if key_padding_mask is not None else placeholder
    seed = dropout_seed if dropout_seed is not None else placeholder
    meta = {"HAS_KEEP": key_padding_mask is not None, "HAS_DROPOUT": dropout_seed is not None,
            "BLOCK_D": _block_d(x.shape[-1]), **_dot_config(x.dtype, interpret)}
    return keep, seed, meta


def _forward_impl(x, head_metrics, value, key_padding_mask, dropout_seed, dropout_p, scale):
    """Allocate the outputs and launch the forward kernel; returns (out, lse)."""
    x, value = _with_dense_layout(x), _with_dense_layout(value)
    batch, heads, tokens, head_dim = x.shape
    out, lse = _forward_outputs(x)
    if out.numel() == 0:  # nothing to launch over (a zero-sized grid is an error on some drivers)
        return out, lse
    kernels = compiled_kernels()
    keep, seed, meta = _kernel_switches(x, key_padding_mask, dropout_seed, lse, kernels.interpret)
    if kernels.interpret:
        meta.update(BLOCK_M=_INTERPRETER_BLOCK, BLOCK_N=_interpreter_half_block())

    def grid(m):
        return (math.ceil(tokens / m["BLOCK_M"]), heads, batch)

    kernels.forward[grid](
        x, head_metrics, value, keep, seed, out, lse,
        *_strides(x), *_metric_strides(head_metrics), *_strides(value),
        keep.stride(0) if key_padding_mask is not None else 0,
        *_strides(out),
        heads, tokens, head_dim,
        scale * math.log2(math.e), dropout_p,
        **meta,
    )
    return out, lse


def _backward_impl(grad_out, x, head_metrics, value, key_padding_mask, dropout_seed, out, lse,
                   dropout_p, scale):
    """Launch the two backward kernels; returns (grad_x, grad_head_metrics, grad_value)."""
    x, value = _with_dense_layout(x), _with_dense_layout(value)
    batch, heads, tokens, head_dim = x.shape
    grad_x, grad_value = torch.empty_like(x), torch.empty_like(value)
    if grad_x.numel() == 0:
        return grad_x, torch.zeros_like(head_metrics), grad_value
    acc_dtype = lse.dtype
    kernels = compiled_kernels()
    # The query once, for both kernels (B*T*D*dh MACs, small next to attention's B*T*T*D), formed as
    # the forward kernel forms it: x m accumulated in acc_dtype, times the base-2 score scale, then
    # rounded to the dot operand dtype. Scaling after rounding (as before) changed the recomputed
    # probabilities against the saved LSE by up to a bf16 ulp of each score.
    query_dtype = acc_dtype if kernels.interpret else x.dtype
    query = ((x.to(acc_dtype) @ head_metrics.to(acc_dtype)) * (scale * math.log2(math.e))).to(query_dtype)
    query = query.contiguous()
    # Softmax backward needs rowsum(P * dP) = rowsum(dO * O) per query (also under dropout).
    delta = (grad_out.to(acc_dtype) * out.to(acc_dtype)).sum(-1).contiguous()
    query_block = _INTERPRETER_BLOCK if kernels.interpret else min(
        _GPU_BWD_QUERY_BLOCK, max(16, 1 << (tokens - 1).bit_length()))
    num_query_blocks = math.ceil(tokens / query_block)
    grad_x_key = torch.empty((batch, heads, tokens, head_dim), dtype=acc_dtype, device=x.device)
    grad_metric_parts = torch.empty((batch, heads, num_query_blocks, head_dim, head_dim),
                                    dtype=acc_dtype, device=x.device)
    keep, seed, meta = _kernel_switches(x, key_padding_mask, dropout_seed, lse, kernels.interpret)
    key_meta, query_meta = dict(meta), dict(meta, BLOCK_M=query_block)
    if kernels.interpret:
        key_meta.update(BLOCK_M=_interpreter_half_block(), BLOCK_N=_INTERPRETER_BLOCK)
        query_meta.update(BLOCK_N=_interpreter_half_block())
    x_strides, value_strides, grad_out_strides = _strides(x), _strides(value), _strides(grad_out)
    keep_stride = keep.stride(0) if key_padding_mask is not None else 0
    scalars = (scale * math.log2(math.e), scale, dropout_p)

    def key_grid(m):
        return (math.ceil(tokens / m["BLOCK_N"]), heads, batch)

    kernels.backward_key[key_grid](
        x, query, value, keep, seed, grad_out, lse, delta, grad_value, grad_x_key,
        *x_strides, *value_strides, keep_stride, *grad_out_strides,
        heads, tokens, head_dim, *scalars, **key_meta,
    )
    kernels.backward_query[(num_query_blocks, heads, batch)](
        x, query, head_metrics, value, keep, seed, grad_out, lse, delta, grad_x_key, grad_x,
        grad_metric_parts,
        *x_strides, *_metric_strides(head_metrics), *value_strides, keep_stride, *grad_out_strides,
        heads, tokens, head_dim, num_query_blocks, *scalars, **query_meta,
    )
    grad_metrics = grad_metric_parts.sum(dim=2)
    if head_metrics.dim() == 3:  # a static metric is shared by the whole batch
        grad_metrics = grad_metrics.sum(dim=0)
    return grad_x, grad_metrics.to(head_metrics.dtype), grad_value


# torch.library registration. The ops are plain ``custom_op``s, defined at import time: that needs
# no triton (torch.library.triton_op imports triton when it decorates, and registering lazily fails
# inside a torch.compile trace), and torch.compile then keeps each op as one node without graph
# breaks. The price is that Inductor treats the kernels as opaque instead of inlining them.


@torch.library.custom_op("damcha_ts::damcha_attention_forward", mutates_args=())
def _forward_op(
    x: Tensor, head_metrics: Tensor, value: Tensor, key_padding_mask: Optional[Tensor],
    dropout_seed: Optional[Tensor], dropout_p: float, scale: float,
) -> tuple[Tensor, Tensor]:
    return _forward_impl(x, head_metrics, value, key_padding_mask, dropout_seed, dropout_p, scale)


@_forward_op.register_fake
def _forward_op_fake(x, head_metrics, value, key_padding_mask, dropout_seed, dropout_p, scale):
    return _forward_outputs(_with_dense_layout(x))


@torch.library.custom_op("damcha_ts::damcha_attention_backward", mutates_args=())
def _backward_op(
    grad_out: Tensor, x: Tensor, head_metrics: Tensor, value: Tensor,
    key_padding_mask: Optional[Tensor], dropout_seed: Optional[Tensor], out: Tensor, lse: Tensor,
    dropout_p: float, scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    return _backward_impl(grad_out, x, head_metrics, value, key_padding_mask, dropout_seed, out,
                          lse, dropout_p, scale)


@_backward_op.register_fake
def _backward_op_fake(grad_out, x, head_metrics, value, key_padding_mask, dropout_seed, out, lse,
                      dropout_p, scale):
    x, value = _with_dense_layout(x), _with_dense_layout(value)
    return torch.empty_like(x), torch.empty_like(head_metrics, memory_format=torch.contiguous_format), \
        torch.empty_like(value)


def _dropout_keep_mask(dropout_seed: Tensor, batch: int, heads: int, tokens: int,
                       dropout_p: float) -> Tensor:
    """[B, H, T, T] bool: the dropout keep mask the kernels draw for this seed (tests, debugging)."""
    keep = torch.empty((batch, heads, tokens, tokens), dtype=torch.uint8, device=dropout_seed.device)
    block = _INTERPRETER_BLOCK if compiled_kernels().interpret else 64
    compiled_kernels().dropout_mask[(math.ceil(tokens / block), heads, batch)](
        dropout_seed, keep, heads, tokens, dropout_p, BLOCK_M=block, BLOCK_N=block,
    )
    return keep.bool()
