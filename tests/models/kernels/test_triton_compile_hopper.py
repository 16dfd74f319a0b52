"""The kernels compile for an H100/H200 (sm_90) on a machine without a GPU.

The interpreter runs the kernels' Python, not triton's compiler, so code it accepts can still fail
to compile for a GPU (a dot shape, a layout, shared memory). Triton compiles ahead of time for a
named target without a driver (its wheel carries ptxas), so every kernel is built here in bf16 with
every switch on, at the largest tiles the autotuner tries. That runs in a fresh interpreter: the
kernels must be decorated while TRITON_INTERPRET is unset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

COMPILE = r"""
import json, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from damcha_ts.models.kernels import _damcha_kernels as kernels

FLOATS = {"qk_scale_log2", "scale", "dropout_p"}

def build(kernel, pointers, constants, num_warps, num_stages):
    names = kernel.arg_names
    signature = {}
    for name in names:
        if name in constants:
            signature[name] = "constexpr"
        elif name in pointers:
            signature[name] = "*" + pointers[name]
        else:
            signature[name] = "fp32" if name in FLOATS else "i32"
    source = ASTSource(fn=kernel, signature=signature,
                       constexprs={(names.index(k),): v for k, v in constants.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    return {"shared_bytes": compiled.metadata.shared, "wgmma": compiled.asm["ptx"].count("wgmma.mma_async")}

switches = dict(HAS_KEEP=True, HAS_DROPOUT=True, BLOCK_D=64, DOT_DTYPE=tl.bfloat16,
                DOT_PRECISION="tf32", ACC_DTYPE=tl.float32)
common = dict(X="bf16", V="bf16", KEEP="u8", SEED="i64", LSE="fp32")
print(json.dumps({
    "forward": build(kernels.damcha_fwd_kernel, dict(common, METRIC="bf16", OUT="bf16"),
                     dict(switches, BLOCK_M=128, BLOCK_N=64), 8, 3),
    "backward_key": build(kernels.damcha_bwd_key_kernel,
                          dict(common, QUERY="bf16", GRAD_OUT="bf16", DELTA="fp32", GRAD_V="bf16",
                               GRAD_X_KEY="fp32"),
                          dict(switches, BLOCK_M=64, BLOCK_N=128), 8, 2),
    "backward_query": build(kernels.damcha_bwd_query_kernel,
                            dict(common, QUERY="bf16", METRIC="bf16", GRAD_OUT="bf16", DELTA="fp32",
                                 GRAD_X_KEY="fp32", GRAD_X="bf16", GRAD_METRIC_PARTS="fp32"),
                            dict(switches, BLOCK_M=64, BLOCK_N=128), 8, 2),
}))
"""

HOPPER_SHARED_MEMORY = 227 * 1024  # per block, sm_90


def test_every_kernel_compiles_for_sm90_with_tensor_core_dots():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    built = json.loads(result.stdout.strip().splitlines()[-1])
    for name, facts in built.items():
        assert 0 < facts["shared_bytes"] <= HOPPER_SHARED_MEMORY, (name, facts)
        assert facts["wgmma"] > 0, f"{name} compiled without Hopper tensor-core dots: {facts}"
