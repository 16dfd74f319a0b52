"""Which compiled kernels a launch runs: the plain ones under triton's CPU interpreter, autotuned
ones on a GPU (the candidates, and which of them are worth benchmarking for a call).

Importing this module does not import triton; ``compiled_kernels`` does, on the first launch.
"""

from __future__ import annotations

import functools
import math
import os
from types import SimpleNamespace

#: The autotuner's candidates per kernel on GPU: (tiles, num_warps, num_stages). Large tiles come in
#: two or three warp/stage settings, since Hopper's best differs by kernel (deeper pipelines pay
#: where a loop streams tiles; more warps where tiles are large). In the backward key kernel BLOCK_N
#: is the key tile each program owns and BLOCK_M the query tile it streams; the backward query
#: kernel gets BLOCK_M from the caller (it sizes the partial-dm buffer), so only BLOCK_N is tuned.
AUTOTUNE_CONFIGS = {
    "forward": (
        ({"BLOCK_M": 128, "BLOCK_N": 64}, 8, 3), ({"BLOCK_M": 128, "BLOCK_N": 64}, 4, 3),
        ({"BLOCK_M": 64, "BLOCK_N": 64}, 4, 4), ({"BLOCK_M": 32, "BLOCK_N": 32}, 4, 2),
        ({"BLOCK_M": 16, "BLOCK_N": 16}, 4, 2),
    ),
    "backward_key": (
        ({"BLOCK_M": 64, "BLOCK_N": 128}, 8, 2), ({"BLOCK_M": 32, "BLOCK_N": 128}, 4, 3),
        ({"BLOCK_M": 64, "BLOCK_N": 64}, 4, 3), ({"BLOCK_M": 32, "BLOCK_N": 32}, 4, 2),
        ({"BLOCK_M": 16, "BLOCK_N": 16}, 4, 2),
    ),
    "backward_query": (
        ({"BLOCK_N": 128}, 8, 2), ({"BLOCK_N": 64}, 4, 3), ({"BLOCK_N": 32}, 4, 3),
        ({"BLOCK_N": 16}, 4, 2),
    ),
}


def triton_interpreting() -> bool:
    """True when ``TRITON_INTERPRET`` asks triton to run kernels in its CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def tiles_to_benchmark(candidates, named_args, **_):
    """The autotuner's candidates worth benchmarking for this call: at most three.

    Every candidate costs a compile (seconds each, more in fp32), so only the three largest tiles
    no taller than the token count rounded up to a power of two are kept (sorted is stable: among
    tiles of one area, the earlier candidate wins). Taller tiles only add masked work (ETT has 11
    tokens, Weather 25, Traffic 866); much smaller ones only add programs. When none fits, the
    smallest candidate runs.
    """
    limit = max(16, 1 << (int(named_args["num_tokens"]) - 1).bit_length())
    kept = [c for c in candidates if all(tile <= limit for tile in c.kwargs.values())]
    if not kept:
        return [min(candidates, key=lambda c: sum(c.kwargs.values()))]
    return sorted(kept, key=lambda c: -math.prod(c.kwargs.values()))[:3]


@functools.cache
def compiled_kernels() -> SimpleNamespace:
    """Import the kernels once; on real CUDA wrap them in a small autotuner.

    The autotuner benchmarks through the GPU driver, so under the interpreter (or without a driver)
    each kernel is launched with fixed tiles (``triton_damcha`` chooses them).
    """
    import triton

    from damcha_ts.models.kernels import _damcha_kernels as kernels

    interpret = triton_interpreting()
    if interpret:
        return SimpleNamespace(interpret=True, forward=kernels.damcha_fwd_kernel,
                               backward_key=kernels.damcha_bwd_key_kernel,
                               backward_query=kernels.damcha_bwd_query_kernel,
                               dropout_mask=kernels.dropout_keep_mask_kernel)

    def autotuned(name, kernel, extra_key=()):
        configs = [triton.Config(dict(tiles), num_warps=warps, num_stages=stages)
                   for tiles, warps, stages in AUTOTUNE_CONFIGS[name]]
        # Autotune keys: the token count and head width set the best tiles; the HAS_* switches change
        # the work per tile. Tensor dtypes are added to the key by triton itself.
        key = ["num_tokens", "head_dim", "HAS_KEEP", "HAS_DROPOUT", *extra_key]
        return triton.autotune(configs, key=key,
                               prune_configs_by={"early_config_prune": tiles_to_benchmark})(kernel)

    forward = autotuned("forward", kernels.damcha_fwd_kernel)
    backward_key = autotuned("backward_key", kernels.damcha_bwd_key_kernel)
    backward_query = autotuned("backward_query", kernels.damcha_bwd_query_kernel, extra_key=["BLOCK_M"])
    return SimpleNamespace(interpret=False, forward=forward, backward_key=backward_key,
                           backward_query=backward_query, dropout_mask=kernels.dropout_keep_mask_kernel)
