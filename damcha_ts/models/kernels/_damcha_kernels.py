"""Triton kernels for fused DAMCHA attention (forward, backward, dropout mask).

This module imports triton at the top, so only ``autotune.compiled_kernels`` imports it, lazily, on the
first kernel launch. Read ``triton_damcha`` first: it holds the maths, the shapes and the launch logic.

Notation (damcha.md §1.5, per batch b and head h; T tokens, dh head width):
    x  [T, dh]   per-head slice of the attention input; the keys are x itself
    m  [dh, dh]  the head metric m_i (one per sample and head, or one static metric per head)
    q  = x @ m                       query path; the forward forms it on chip, never in memory
    S  = q @ x^T * scale             [T, T] scores
    P  = softmax_row(S + key mask)   a query whose keys are all masked gets P = 0
    O  = dropout(P) @ v
Scores are handled in base 2: ``qk_scale_log2 = scale * log2(e)`` so that exp2 replaces exp.
LSE is the base-2 log-sum-exp of one row of scaled scores; +inf marks a row with no visible key.

Backward (with Pd = dropout(P), dO the output gradient, delta = rowsum(dO * O)):
    dV  = Pd^T @ dO
    dP  = dropout'(dO @ v^T)                  dropout' re-applies the same keep mask and 1/(1-p)
    dS  = P * (dP - delta)                    softmax backward; delta = rowsum(P * dP) = rowsum(dO * O)
    dX_key   = dS^T @ q * scale               keys are x itself
    dq       = dS @ x * scale
    dX_query = dq @ m^T
    dm       = x^T @ dq                        summed over all query blocks
    dX       = dX_query + dX_key
The backward first lets torch form q = x m once ([B, H, T, dh], cheap next to attention) and
delta. Then two kernels: one program per key block (dV, dX_key), then one per query block (dX
total, and a per-query-block partial dm that torch sums: deterministic, no atomics).

Every tile is loaded with row and column masks, so any token count and any head width up to
BLOCK_D work (block pointers are gone in triton 3.9; plain pointer arithmetic runs on 3.6 and 3.9).
Dot operands are cast to DOT_DTYPE first: float32 under the interpreter, where bf16 tl.dot is
wrong (ecosystem.md §4.2), and the input dtype on GPU (bf16/fp16 tensor cores, fp32 accumulation).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _load_tile(base, rows, cols, stride_row, stride_col, num_rows, num_cols):
    """Load base[rows, cols] -> [len(rows), len(cols)]; entries outside the tensor read as 0."""
    pointers = base + rows[:, None] * stride_row + cols[None, :] * stride_col
    inside = (rows[:, None] < num_rows) & (cols[None, :] < num_cols)
    return tl.load(pointers, mask=inside, other=0.0)


@triton.jit
def _store_tile(base, tile, rows, cols, stride_row, stride_col, num_rows, num_cols):
    """Store tile -> base[rows, cols], skipping entries outside the tensor."""
    pointers = base + rows[:, None] * stride_row + cols[None, :] * stride_col
    inside = (rows[:, None] < num_rows) & (cols[None, :] < num_cols)
    tl.store(pointers, tile.to(base.dtype.element_ty), mask=inside)


@triton.jit
def _dot(a, b, DOT_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """a @ b with operands cast to DOT_DTYPE and the product accumulated in ACC_DTYPE."""
    return tl.dot(a.to(DOT_DTYPE), b.to(DOT_DTYPE), input_precision=DOT_PRECISION, out_dtype=ACC_DTYPE)


@triton.jit
def _visible_keys(KEEP, stride_keep_b, batch, key_rows, num_tokens, HAS_KEEP: tl.constexpr):
    """[BLOCK_N] bool: the key exists (row < T) and, with a padding mask, is a real token."""
    visible = key_rows < num_tokens
    if HAS_KEEP:
        keep = tl.load(KEEP + batch * stride_keep_b + key_rows, mask=visible, other=0)
        visible = visible & (keep != 0)
    return visible


@triton.jit
def _dropout_keep(seed, batch_head, query_rows, key_rows, num_tokens, dropout_p):
    """Keep mask of attention dropout for query_rows x key_rows, given as broadcastable 2-D index
    tensors: [BLOCK_M, 1] and [1, BLOCK_N] give the [BLOCK_M, BLOCK_N] tile, [1, BLOCK_M] and
    [BLOCK_N, 1] its transpose.

    Philox is counter based: the forward and both backward kernels regenerate exactly the same mask
    from (seed, batch*H + head, query, key), in either orientation, so the mask never goes to memory.
    """
    query_index = batch_head.to(tl.int64) * num_tokens + query_rows.to(tl.int64)
    offsets = query_index * num_tokens + key_rows.to(tl.int64)
    return tl.rand(seed, offsets) >= dropout_p


@triton.jit
def damcha_fwd_kernel(
    X, METRIC, V, KEEP, SEED, OUT, LSE,
    stride_xb, stride_xh, stride_xt, stride_xd,
    stride_mb, stride_mh, stride_mr, stride_mc,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_keep_b,
    stride_ob, stride_oh, stride_ot, stride_od,
    num_heads, num_tokens, head_dim,
    qk_scale_log2, dropout_p,
    HAS_KEEP: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, ACC_DTYPE: tl.constexpr,
):
    """One program per (query block, head, batch): OUT[b, h, rows] and LSE[b, h, rows]."""
    block, head = tl.program_id(0), tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)  # int64 offsets: B * stride may pass 2**31
    batch_head = batch * num_heads + head
    X += batch * stride_xb + head * stride_xh
    V += batch * stride_vb + head * stride_vh
    METRIC += batch * stride_mb + head * stride_mh  # stride_mb = 0 for a static [H, dh, dh] metric

    query_rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    metric = _load_tile(METRIC, dims, dims, stride_mr, stride_mc, head_dim, head_dim)
    x_query = _load_tile(X, query_rows, dims, stride_xt, stride_xd, num_tokens, head_dim)
    # Query path q = x m (damcha.md §1.5), pre-multiplied by the base-2 score scale and cast to the
    # dot dtype once per block rather than once per key block.
    query = _dot(x_query, metric, DOT_DTYPE, DOT_PRECISION, ACC_DTYPE) * qk_scale_log2
    query = query.to(DOT_DTYPE)
    seed = 0
    if HAS_DROPOUT:
        seed = tl.load(SEED)

    row_max = tl.full([BLOCK_M], float("-inf"), ACC_DTYPE)
    row_sum = tl.zeros([BLOCK_M], ACC_DTYPE)
    acc = tl.zeros([BLOCK_M, BLOCK_D], ACC_DTYPE)
    for start in range(0, num_tokens, BLOCK_N):
        key_rows = start + tl.arange(0, BLOCK_N)
        keys = _load_tile(X, key_rows, dims, stride_xt, stride_xd, num_tokens, head_dim)
        values = _load_tile(V, key_rows, dims, stride_vt, stride_vd, num_tokens, head_dim)
        scores = _dot(query, tl.trans(keys), DOT_DTYPE, DOT_PRECISION, ACC_DTYPE)
        visible = _visible_keys(KEEP, stride_keep_b, batch, key_rows, num_tokens, HAS_KEEP)
        scores = tl.where(visible[None, :], scores, float("-inf"))

        # Online softmax. While a row has seen no visible key its max is -inf; subtracting 0
        # instead keeps exp2 at exp2(-inf) = 0 rather than exp2(nan).
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        probs = tl.exp2(scores - shift[:, None])
        rescale = tl.exp2(row_max - shift)
        row_sum = row_sum * rescale + tl.sum(probs, 1)
        if HAS_DROPOUT:
            keep = _dropout_keep(seed, batch_head, query_rows[:, None], key_rows[None, :], num_tokens, dropout_p)
            # The normaliser uses the undropped weights: dropout acts on softmax(S), not inside it.
            probs = tl.where(keep, probs / (1.0 - dropout_p), 0.0)
        acc = acc * rescale[:, None] + _dot(probs, values, DOT_DTYPE, DOT_PRECISION, ACC_DTYPE)
        row_max = new_max

    has_keys = row_sum > 0
    out = acc / tl.where(has_keys, row_sum, 1.0)[:, None]  # a row with no visible key stays 0
    lse = tl.where(has_keys, row_max + tl.log2(tl.where(has_keys, row_sum, 1.0)), float("inf"))
    OUT += batch * stride_ob + head * stride_oh
    _store_tile(OUT, out, query_rows, dims, stride_ot, stride_od, num_tokens, head_dim)
    tl.store(LSE + batch_head * num_tokens + query_rows, lse, mask=query_rows < num_tokens)


@triton.jit
def _probs_and_score_grad(
    query, keys, values, grad_out, lse, delta, visible, seed, batch_head, query_rows, key_rows,
    num_tokens, dropout_p,
    HAS_DROPOUT: tl.constexpr,
    DOT_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, ACC_DTYPE: tl.constexpr,
):
    """Recompute one [BLOCK_M, BLOCK_N] tile: (dropped probabilities Pd, score gradient dS).

    query is the forward's scaled query, q * qk_scale_log2 rounded to the dot dtype (so these
    scores are bit for bit the forward's); lse and delta are [BLOCK_M]; visible is [BLOCK_M, BLOCK_N].
    """
    scores = _dot(query, tl.trans(keys), DOT_DTYPE, DOT_PRECISION, ACC_DTYPE)
    # Masked entries give exp2(-inf) = 0; an all-masked row has lse = +inf, so it is 0 as well.
    probs = tl.exp2(tl.where(visible, scores, float("-inf")) - lse[:, None])
    grad_probs = _dot(grad_out, tl.trans(values), DOT_DTYPE, DOT_PRECISION, ACC_DTYPE)
    dropped_probs = probs
    if HAS_DROPOUT:
        keep = _dropout_keep(seed, batch_head, query_rows[:, None], key_rows[None, :], num_tokens, dropout_p)
        dropped_probs = tl.where(keep, probs / (1.0 - dropout_p), 0.0)
        grad_probs = tl.where(keep, grad_probs / (1.0 - dropout_p), 0.0)
    grad_scores = probs * (grad_probs - delta[:, None])
    return dropped_probs, grad_scores


@triton.jit
def damcha_bwd_key_kernel(
    X, QUERY, V, KEEP, SEED, GRAD_OUT, LSE, DELTA, GRAD_V, GRAD_X_KEY,
    stride_xb, stride_xh, stride_xt, stride_xd,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_keep_b,
    stride_gb, stride_gh, stride_gt, stride_gd,
    num_heads, num_tokens, head_dim,
    qk_scale_log2, scale, dropout_p,
    HAS_KEEP: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, ACC_DTYPE: tl.constexpr,
):
    """One program per (key block, head, batch): dV and the key-path part of dX for those rows.

    QUERY holds the forward's scaled query q * qk_scale_log2 (q = x m) in the dot dtype, contiguous
    [B, H, T, dh] (computed once by torch: recomputing it here would cost one more dot per query block). GRAD_V has the strides of V; GRAD_X_KEY is a contiguous
    [B, H, T, dh] ACC_DTYPE buffer.
    """
    block, head = tl.program_id(0), tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)  # int64 offsets: B * stride may pass 2**31
    batch_head = batch * num_heads + head
    X += batch * stride_xb + head * stride_xh
    QUERY += batch_head * num_tokens * head_dim
    V += batch * stride_vb + head * stride_vh
    GRAD_OUT += batch * stride_gb + head * stride_gh
    LSE += batch_head * num_tokens
    DELTA += batch_head * num_tokens

    key_rows = block * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    keys = _load_tile(X, key_rows, dims, stride_xt, stride_xd, num_tokens, head_dim)
    values = _load_tile(V, key_rows, dims, stride_vt, stride_vd, num_tokens, head_dim)
    key_visible = _visible_keys(KEEP, stride_keep_b, batch, key_rows, num_tokens, HAS_KEEP)
    seed = 0
    if HAS_DROPOUT:
        seed = tl.load(SEED)

    # This program works in the transposed frame: tiles are [BLOCK_N keys, BLOCK_M queries], so
    # dV = Pd^T dO and dX_key = dS^T q take the probability tiles as they come, rather than
    # transposing an fp32 register tile each step (a round trip through shared memory).
    grad_values = tl.zeros([BLOCK_N, BLOCK_D], ACC_DTYPE)
    grad_keys = tl.zeros([BLOCK_N, BLOCK_D], ACC_DTYPE)
    for start in range(0, num_tokens, BLOCK_M):
        query_rows = start + tl.arange(0, BLOCK_M)
        query_exists = query_rows < num_tokens
        query_t = _load_tile(QUERY, dims, query_rows, 1, head_dim, head_dim, num_tokens)  # [D, M]
        grad_out = _load_tile(GRAD_OUT, query_rows, dims, stride_gt, stride_gd, num_tokens, head_dim)
        lse = tl.load(LSE + query_rows, mask=query_exists, other=float("inf"))
        delta = tl.load(DELTA + query_rows, mask=query_exists, other=0.0)
        # The forward's scores, transposed: the same operands, so equal up to fp32 summation order.
        scores_t = _dot(keys, query_t, DOT_DTYPE, DOT_PRECISION, ACC_DTYPE)
        visible_t = key_visible[:, None] & query_exists[None, :]
        probs_t = tl.exp2(tl.where(visible_t, scores_t, float("-inf")) - lse[None, :])
        grad_probs_t = _dot(values, tl.trans(grad_out), DOT_DTYPE, DOT_PRECISION, ACC_DTYPE)
        dropped_probs_t = probs_t
        if HAS_DROPOUT:
            keep_t = _dropout_keep(seed, batch_head, query_rows[None, :], key_rows[:, None], num_tokens,
                                   dropout_p)
            dropped_probs_t = tl.where(keep_t, probs_t / (1.0 - dropout_p), 0.0)
            grad_probs_t = tl.where(keep_t, grad_probs_t / (1.0 - dropout_p), 0.0)
        grad_scores_t = probs_t * (grad_probs_t - delta[None, :])
        grad_values += _dot(dropped_probs_t, grad_out, DOT_DTYPE, DOT_PRECISION, ACC_DTYPE)
        grad_keys += _dot(grad_scores_t, tl.trans(query_t), DOT_DTYPE, DOT_PRECISION, ACC_DTYPE)

    GRAD_V += batch * stride_vb + head * stride_vh
    _store_tile(GRAD_V, grad_values, key_rows, dims, stride_vt, stride_vd, num_tokens, head_dim)
    GRAD_X_KEY += batch_head * num_tokens * head_dim
    # dX_key = dS^T q scale, and QUERY holds q * qk_scale_log2.
    _store_tile(GRAD_X_KEY, grad_keys * (scale / qk_scale_log2), key_rows, dims, head_dim, 1, num_tokens,
                head_dim)


@triton.jit
def damcha_bwd_query_kernel(
    X, QUERY, METRIC, V, KEEP, SEED, GRAD_OUT, LSE, DELTA, GRAD_X_KEY, GRAD_X, GRAD_METRIC_PARTS,
    stride_xb, stride_xh, stride_xt, stride_xd,
    stride_mb, stride_mh, stride_mr, stride_mc,
    stride_vb, stride_vh, stride_vt, stride_vd,
    stride_keep_b,
    stride_gb, stride_gh, stride_gt, stride_gd,
    num_heads, num_tokens, head_dim, num_query_blocks,
    qk_scale_log2, scale, dropout_p,
    HAS_KEEP: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_DTYPE: tl.constexpr, DOT_PRECISION: tl.constexpr, ACC_DTYPE: tl.constexpr,
):
    """One program per (query block, head, batch): the full dX of those rows and a partial dm.

    Runs after ``damcha_bwd_key_kernel`` and adds its key-path gradient, so GRAD_X (strides of X)
    receives dX_query + dX_key. GRAD_METRIC_PARTS is a contiguous [B, H, num_query_blocks, dh, dh]
    buffer; slot ``block`` receives this block's x^T dq.
    """
    block, head = tl.program_id(0), tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)  # int64 offsets: B * stride may pass 2**31
    batch_head = batch * num_heads + head
    X += batch * stride_xb + head * stride_xh
    V += batch * stride_vb + head * stride_vh
    GRAD_OUT += batch * stride_gb + head * stride_gh
    METRIC += batch * stride_mb + head * stride_mh

    query_rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    query_exists = query_rows < num_tokens
    dims = tl.arange(0, BLOCK_D)
    metric = _load_tile(METRIC, dims, dims, stride_mr, stride_mc, head_dim, head_dim)
    x_query = _load_tile(X, query_rows, dims, stride_xt, stride_xd, num_tokens, head_dim)
    query = _load_tile(QUERY + batch_head * num_tokens * head_dim, query_rows, dims, head_dim, 1,
                       num_tokens, head_dim)
    grad_out = _load_tile(GRAD_OUT, query_rows, dims, stride_gt, stride_gd, num_tokens, head_dim)
    lse = tl.load(LSE + batch_head * num_tokens + query_rows, mask=query_exists, other=float("inf"))
    delta = tl.load(DELTA + batch_head * num_tokens + query_rows, mask=query_exists, other=0.0)
    seed = 0
    if HAS_DROPOUT:
        seed = tl.load(SEED)

    grad_query = tl.zeros([BLOCK_M, BLOCK_D], ACC_DTYPE)
    for start in range(0, num_tokens, BLOCK_N):
        key_rows = start + tl.arange(0, BLOCK_N)
        keys = _load_tile(X, key_rows, dims, stride_xt, stride_xd, num_tokens, head_dim)
        values = _load_tile(V, key_rows, dims, stride_vt, stride_vd, num_tokens, head_dim)
        key_visible = _visible_keys(KEEP, stride_keep_b, batch, key_rows, num_tokens, HAS_KEEP)
        visible = query_exists[:, None] & key_visible[None, :]
        _, grad_scores = _probs_and_score_grad(
            query, keys, values, grad_out, lse, delta, visible, seed, batch_head, query_rows,
            key_rows, num_tokens, dropout_p,
            HAS_DROPOUT, DOT_DTYPE, DOT_PRECISION, ACC_DTYPE,
        )
        grad_query += _dot(grad_scores, keys, DOT_DTYPE, DOT_PRECISION, ACC_DTYPE)
    grad_query = grad_query * scale

    # q = x m, so dx_query = dq m^T and dm = x^T dq (this block's share of the sum over queries).
    grad_x = _dot(grad_query, tl.trans(metric), DOT_DTYPE, DOT_PRECISION, ACC_DTYPE)
    grad_x += _load_tile(GRAD_X_KEY + batch_head * num_tokens * head_dim, query_rows, dims,
                         head_dim, 1, num_tokens, head_dim)
    GRAD_X += batch * stride_xb + head * stride_xh
    _store_tile(GRAD_X, grad_x, query_rows, dims, stride_xt, stride_xd, num_tokens, head_dim)
    grad_metric = _dot(tl.trans(x_query), grad_query, DOT_DTYPE, DOT_PRECISION, ACC_DTYPE)
    GRAD_METRIC_PARTS += (batch_head * num_query_blocks + block) * head_dim * head_dim
    _store_tile(GRAD_METRIC_PARTS, grad_metric, dims, dims, head_dim, 1, head_dim, head_dim)


@triton.jit
def dropout_keep_mask_kernel(
    SEED, KEEP_OUT, num_heads, num_tokens, dropout_p,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Write the attention-dropout keep mask [B, H, T, T] (uint8) that the kernels above use.

    Only for tests and debugging: it lets a reference implementation apply the very same mask.
    """
    block, head = tl.program_id(0), tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)  # int64 offsets: B * stride may pass 2**31
    batch_head = batch * num_heads + head
    seed = tl.load(SEED)
    query_rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    KEEP_OUT += batch_head * num_tokens * num_tokens
    for start in range(0, num_tokens, BLOCK_N):
        key_rows = start + tl.arange(0, BLOCK_N)
        keep = _dropout_keep(seed, batch_head, query_rows[:, None], key_rows[None, :], num_tokens, dropout_p)
        _store_tile(KEEP_OUT, keep.to(tl.uint8), query_rows, key_rows, num_tokens, 1,
                    num_tokens, num_tokens)
