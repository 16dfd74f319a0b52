"""The kernels compile for an H100/H200 (sm_90) on a machine without a GPU.

The interpreter runs the kernels' Python, not triton's compiler, so code it accepts can still fail
to compile for a GPU (a dot shape, a layout, shared memory). Triton compiles ahead of time for a
named target without a driver (its wheel carries ptxas), so each kernel is built here with every
switch on: in bf16 at every autotune candidate (``AUTOTUNE_CONFIGS``) for 64-wide heads (Weather,
Traffic), and at the largest candidate in fp32 (TF32 dots) and for the widest head the kernels
accept. The builds are spread over the cores. That runs in a fresh interpreter: the kernels must be decorated while TRITON_INTERPRET is unset.
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
from damcha_ts.models.kernels.autotune import AUTOTUNE_CONFIGS
from damcha_ts.models.kernels.triton_damcha import MAX_HEAD_DIM, _GPU_BWD_QUERY_BLOCK

FLOATS = {"qk_scale_log2", "scale", "dropout_p"}
KERNELS = {"forward": kernels.damcha_fwd_kernel, "backward_key": kernels.damcha_bwd_key_kernel,
           "backward_query": kernels.damcha_bwd_query_kernel}

def pointers(name, io):  # io: dtype of x, value, metric, out and the gradients of the inputs
    common = dict(X=io, V=io, KEEP="u8", SEED="i64", LSE="fp32")
    return {"forward": dict(common, METRIC=io, OUT=io),
            "backward_key": dict(common, QUERY=io, GRAD_OUT=io, DELTA="fp32", GRAD_V=io, GRAD_X_KEY="fp32"),
            "backward_query": dict(common, QUERY=io, METRIC=io, GRAD_OUT=io, DELTA="fp32",
                                   GRAD_X_KEY="fp32", GRAD_X=io, GRAD_METRIC_PARTS="fp32")}[name]

def build(name, tiles, num_warps, num_stages, io, dot, block_d):
    kernel = KERNELS[name]
    constants = dict(HAS_KEEP=True, HAS_DROPOUT=True, BLOCK_D=block_d, DOT_DTYPE=dot,
                     DOT_PRECISION="tf32", ACC_DTYPE=tl.float32, **tiles)
    if name == "backward_query":
        constants.setdefault("BLOCK_M", _GPU_BWD_QUERY_BLOCK)
    names, typed = kernel.arg_names, pointers(name, io)
    signature = {n: "constexpr" if n in constants else "*" + typed[n] if n in typed
                 else "fp32" if n in FLOATS else "i32" for n in names}
    source = ASTSource(fn=kernel, signature=signature,
                       constexprs={(names.index(k),): v for k, v in constants.items()})
    label = {"kernel": name, "tiles": constants_label(constants), "warps": num_warps, "stages": num_stages,
             "io": io, "head": block_d}
    try:
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": num_warps, "num_stages": num_stages})
    except Exception as error:  # noqa: BLE001 - reported per candidate
        return dict(label, error=f"{type(error).__name__}: {str(error)[:200]}")
    ptx = compiled.asm["ptx"]
    # Hopper's warpgroup dots need 64-row tiles; smaller ones use the older mma.sync tensor cores.
    return dict(label, shared_bytes=compiled.metadata.shared, wgmma=ptx.count("wgmma.mma_async"),
                tensor_core_dots=ptx.count("wgmma.mma_async") + ptx.count("mma.sync.aligned"))

def constants_label(constants):
    return {k: v for k, v in constants.items() if k.startswith("BLOCK_") and k != "BLOCK_D"}

jobs = []
for name, candidates in AUTOTUNE_CONFIGS.items():
    for index, (tiles, warps, stages) in enumerate(candidates):
        jobs.append((name, tiles, warps, stages, "bf16", tl.bfloat16, 64))
        if index == 0:  # the largest tiles, which need the most shared memory
            jobs.append((name, tiles, warps, stages, "bf16", tl.bfloat16, MAX_HEAD_DIM))
            jobs.append((name, tiles, warps, stages, "fp32", tl.float32, 64))
    # Small token counts give the backward query kernel a 16-row query block (ETT: 11 tokens).
    if name == "backward_query":
        tiles, warps, stages = candidates[-1]
        jobs.append((name, dict(tiles, BLOCK_M=16), warps, stages, "bf16", tl.bfloat16, 64))

def run(job):
    return build(*job)

if __name__ == "__main__":
    import multiprocessing, os
    # Each build is one single-threaded compile: spread them over the cores (forked workers).
    with multiprocessing.get_context("fork").Pool(max(1, min(8, os.cpu_count() or 1))) as pool:
        print(json.dumps(pool.map(run, jobs, chunksize=1)))
"""

HOPPER_SHARED_MEMORY = 227 * 1024  # per block, sm_90


def fits(facts: dict) -> bool:
    return "error" not in facts and 0 < facts["shared_bytes"] <= HOPPER_SHARED_MEMORY


@pytest.fixture(scope="module")
def hopper_builds() -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, env=env,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_autotune_candidate_compiles_with_tensor_core_dots_for_64_wide_heads(hopper_builds):
    from damcha_ts.models.kernels.autotune import AUTOTUNE_CONFIGS

    bf16 = [facts for facts in hopper_builds if facts["io"] == "bf16" and facts["head"] == 64]
    assert len(bf16) == sum(len(c) for c in AUTOTUNE_CONFIGS.values()) + 1
    for facts in bf16:
        assert fits(facts), facts
        assert facts["tensor_core_dots"] > 0, f"compiled without tensor-core dots: {facts}"
        if min(facts["tiles"].values()) >= 64:
            assert facts["wgmma"] > 0, f"64-row tiles compiled without Hopper's warpgroup dots: {facts}"


def test_fp32_inputs_compile_with_tf32_tensor_core_dots(hopper_builds):
    fp32 = [facts for facts in hopper_builds if facts["io"] == "fp32"]
    assert {facts["kernel"] for facts in fp32} == {"forward", "backward_key", "backward_query"}
    for facts in fp32:
        assert fits(facts), facts
        assert facts["tensor_core_dots"] > 0, facts


def test_the_widest_head_fits_the_largest_tiles(hopper_builds):
    """dh = 128 (e.g. d_model 1024, 8 heads) needs the most shared memory. Each kernel's first
    candidate needs the most of all its candidates (checked at dh = 64); if it fits at dh = 128, the
    autotuner has no candidate that cannot run."""
    from damcha_ts.models.kernels.triton_damcha import MAX_HEAD_DIM

    for kernel in ("forward", "backward_key", "backward_query"):
        narrow = [f for f in hopper_builds if f["kernel"] == kernel and f["io"] == "bf16" and f["head"] == 64]
        assert narrow[0]["shared_bytes"] == max(f["shared_bytes"] for f in narrow), narrow
        (wide,) = [f for f in hopper_builds if f["kernel"] == kernel and f["head"] == MAX_HEAD_DIM]
        assert wide["tiles"] == narrow[0]["tiles"] and fits(wide), wide
        assert wide["tensor_core_dots"] > 0, wide
