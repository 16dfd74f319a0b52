"""GPU check of the fused Triton DAMCHA kernel (issue 7): correctness, speed, one training step.

    python benchmarks/gpu/check_triton.py [--out-dir DIR] [--iters 100] [--warmup 3] [--write-dispatch]

Needs one CUDA GPU (exits with status 2 without one) and runs in about 5 minutes on an H200, most
of it Triton compiling and autotuning on first use. It needs neither optuna nor gluonts. Sections,
described in report order (they run in the order 2, 3, 4, 1, so that the timed ones have the GPU alone):

1. correctness: the "triton" backend against the "math" backend run in float64 on the same
   (rounded) inputs, forward output and the gradients of x, head_metrics and value, at the
   forecasting token counts 7, 11, 21, 25, 321, 325, 862, 866 (B=2, H=8, dh=64, a padding mask
   with one fully padded sample), in fp32 and bf16;
2. timing: forward and forward+backward of the Triton backend, the SDPA backend and MHA at
   (B, N, D, H) = (16, 866, 512, 8), (32, 25, 512, 8), (32, 11, 256, 8) in bf16, with CUDA events,
   warm-up and medians, both for the attention core ([B, H, T, dh] tensors in, no projections) and
   for the whole attention module (projections included, under bf16 autocast), plus peak memory;
3. training: one full bf16-mixed training step (forward, MSE loss, backward, AdamW step) of
   DAMCHA-iTransformer at the Traffic config (d_model 512, 4 layers, 8 heads, d_ff 512,
   N = 862 + 4 tokens, batch 16) with each backend, and of the MHA iTransformer for scale, each
   eager and compiled as ``training.compile`` does on CUDA (CUDA graphs);
4. profile: torch.profiler tables (host and device time per op) of five core fwd+bwd steps of
   the triton and sdpa backends at the first and last timing shapes, with kernel launches, device
   syncs, allocations and copies per step;
5. traffic_epoch: one training epoch of MHA and DAMCHA (sdpa, triton) at the Traffic config on
   synthetic data of Traffic's exact shape (17,544 x 862, hourly): seconds and peak memory.

Writes benchmarks/results/triton_gpu.json and triton_gpu.md (and copies them into --out-dir).
Exit status: 0 when every correctness check passed, 1 when one failed or a section crashed.
The issue's target (Triton fwd+bwd at the Traffic shape in bf16 <= 0.8 x SDPA) is reported in the
JSON under "target"; missing it does not change the exit status.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEVICE = "cuda"
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
TOKEN_COUNTS = (7, 11, 21, 25, 321, 325, 862, 866)
TIMING_SHAPES = ((16, 866, 512, 8), (32, 25, 512, 8), (32, 11, 256, 8))  # (B, N, D, H)
TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2}
TARGET_RATIO = 0.8
TRAFFIC = {"seq_len": 96, "pred_len": 96, "d_model": 512, "n_heads": 8, "e_layers": 4, "d_ff": 512,
           "variates": 862, "mark_features": 4, "batch": 16, "learning_rate": 1e-3}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ------------------------------------------------------------------------------------------------
# Measuring


def cuda_median_ms(fn, warmup: int, iters: int) -> dict:
    """Median wall time of ``fn`` on the GPU (CUDA events) and its peak extra memory."""
    import torch

    for _ in range(warmup):  # the first calls also compile and autotune
        fn()
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    peak_mib = (torch.cuda.max_memory_allocated() - baseline) / 2**20
    quartiles = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return {"median_ms": round(statistics.median(times), 4), "min_ms": round(min(times), 4),
            "iqr_ms": round(quartiles[2] - quartiles[0], 4), "peak_extra_mib": round(peak_mib, 1), "iters": iters}


def max_relative_error(actual, expected) -> float:
    scale = expected.abs().max().item()
    error = (actual.double() - expected.double()).abs().max().item()
    return error / scale if scale > 0 else error


# ------------------------------------------------------------------------------------------------
# 1. Correctness


def check_correctness() -> list[dict]:
    import torch

    from damcha_ts.models.attention import damcha_attention

    rows = []
    B, H, dh = 2, 8, 64
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for T in TOKEN_COUNTS:
            generator = torch.Generator(device=DEVICE).manual_seed(T)
            tokens = torch.randn(B, T, H * dh, device=DEVICE, generator=generator).to(dtype)
            values = torch.randn(B, T, H * dh, device=DEVICE, generator=generator).to(dtype)
            metrics = (torch.randn(B, H, dh, dh, device=DEVICE, generator=generator) / math.sqrt(dh)).to(dtype)
            mask = torch.rand(B, T, device=DEVICE, generator=generator) > 0.2
            mask[:, 0] = True
            mask[-1] = False  # a sample with no real token
            grad_out = torch.randn(B, H, T, dh, device=DEVICE, generator=generator, dtype=torch.float64)

            def run(backend, leaves):
                x = leaves[0].view(B, T, H, dh).transpose(1, 2)
                value = leaves[2].view(B, T, H, dh).transpose(1, 2)
                out, _ = damcha_attention(x, leaves[1], value, mask, backend=backend)
                grads = torch.autograd.grad(out, leaves, grad_out.to(out.dtype))
                return out, grads

            leaves = [t.clone().requires_grad_() for t in (tokens, metrics, values)]
            leaves64 = [t.double().requires_grad_() for t in (tokens, metrics, values)]
            out, grads = run("triton", leaves)
            expected, expected_grads = run("math", leaves64)
            errors = {"out": max_relative_error(out, expected)}
            for name, got, want in zip(("grad_x", "grad_head_metrics", "grad_value"), grads, expected_grads):
                errors[name] = max_relative_error(got, want)
            padded_sample_zero = bool(torch.equal(out[-1], torch.zeros_like(out[-1])))
            finite = all(bool(torch.isfinite(g).all()) for g in grads)
            passed = max(errors.values()) <= TOLERANCE[dtype_name] and padded_sample_zero and finite
            rows.append({"dtype": dtype_name, "tokens": T, "B": B, "H": H, "head_dim": dh,
                         "max_relative_error": {k: float(f"{v:.3g}") for k, v in errors.items()},
                         "tolerance": TOLERANCE[dtype_name], "padded_sample_output_zero": padded_sample_zero,
                         "gradients_finite": finite, "passed": passed})
            log(f"correctness {dtype_name} T={T}: {'ok' if passed else 'FAILED'} {rows[-1]['max_relative_error']}")
    return rows


# ------------------------------------------------------------------------------------------------
# 2. Timing


def time_shape(B: int, T: int, D: int, H: int, warmup: int, iters: int) -> dict:
    """Core and module timings of triton / sdpa / mha at one shape, in bf16."""
    import torch
    import torch.nn.functional as F

    from damcha_ts.models.attention import DamchaAttention, MultiHeadAttention, damcha_attention

    dh = D // H
    bf16 = torch.bfloat16
    result = {"B": B, "tokens": T, "d_model": D, "heads": H, "dtype": "bf16", "core": {}, "module": {}}

    # Core: the attention alone on [B, H, T, dh] tensors (DAMCHA: x, m, v; MHA: q, k, v via SDPA).
    x = torch.randn(B, T, D, device=DEVICE, dtype=bf16).view(B, T, H, dh).transpose(1, 2)
    metrics = (torch.randn(B, H, dh, dh, device=DEVICE) / math.sqrt(dh)).to(bf16)
    value = torch.randn(B, T, D, device=DEVICE, dtype=bf16).view(B, T, H, dh).transpose(1, 2)
    query = torch.randn_like(x)
    grad_out = torch.randn(B, H, T, dh, device=DEVICE, dtype=bf16)
    # backend -> (attention of its leaves, the tensors its leaves are made from)
    core = {
        "triton": (lambda x, m, v: damcha_attention(x, m, v, backend="triton")[0], (x, metrics, value)),
        "sdpa": (lambda x, m, v: damcha_attention(x, m, v, backend="sdpa")[0], (x, metrics, value)),
        "mha": (F.scaled_dot_product_attention, (query, x, value)),
    }
    for name, (attention, tensors) in core.items():
        leaves = [t.detach().clone().requires_grad_() for t in tensors]

        def forward(attention=attention, leaves=leaves):
            with torch.no_grad():
                attention(*leaves)

        def forward_backward(attention=attention, leaves=leaves):
            torch.autograd.grad(attention(*leaves), leaves, grad_out)

        result["core"][name] = {"fwd": cuda_median_ms(forward, warmup, iters),
                                "fwd_bwd": cuda_median_ms(forward_backward, warmup, iters)}
        log(f"core {name} B={B} T={T} D={D}: {result['core'][name]}")

    # Module: projections included, fp32 parameters under bf16 autocast (as in bf16-mixed training).
    tokens = torch.randn(B, T, D, device=DEVICE)
    module_metrics = torch.randn(B, H, dh, dh, device=DEVICE) / math.sqrt(dh)
    modules = {
        "triton": DamchaAttention(D, H, attn_backend="triton"),
        "sdpa": DamchaAttention(D, H, attn_backend="sdpa"),
        "mha": MultiHeadAttention(D, H),
    }
    grad_y = torch.randn(B, T, D, device=DEVICE, dtype=bf16)
    for name, module in modules.items():
        module = module.to(DEVICE)
        leaves = [tokens.clone().requires_grad_()] + ([] if name == "mha" else [module_metrics.clone().requires_grad_()])

        def call(module=module, leaves=leaves, name=name):
            with torch.autocast(DEVICE, dtype=bf16):
                if name == "mha":
                    return module(leaves[0])[0]
                return module(leaves[0], head_metrics=leaves[1])[0]

        def forward(call=call):
            with torch.no_grad():
                call()

        def forward_backward(call=call, leaves=leaves, module=module):
            y = call()
            torch.autograd.grad(y, leaves + list(module.parameters()), grad_y.to(y.dtype))

        result["module"][name] = {"fwd": cuda_median_ms(forward, warmup, iters),
                                  "fwd_bwd": cuda_median_ms(forward_backward, warmup, iters)}
        log(f"module {name} B={B} T={T} D={D}: {result['module'][name]}")

    for level in ("core", "module"):
        timings = result[level]
        result[level]["ratios"] = {
            f"triton/{other} {mode}": round(timings["triton"][mode]["median_ms"] / timings[other][mode]["median_ms"], 3)
            for other in ("sdpa", "mha") for mode in ("fwd", "fwd_bwd")
        }
    return result


def autotuned_configs() -> dict:
    """The tiles the autotuner picked most recently (the last shape timed)."""
    from damcha_ts.models.kernels.autotune import compiled_kernels

    kernels = compiled_kernels()
    return {name: str(getattr(getattr(kernels, name), "best_config", None))
            for name in ("forward", "backward_key", "backward_query")}


# Host-side calls whose count per step says where a fixed cost comes from (issue 22's "How").
HOST_CALLS = {"kernel_launches": ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx"),
              "device_syncs": ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize"),
              "allocations": ("cudaMalloc", "cudaMallocAsync"),
              "copies": ("cudaMemcpyAsync", "cudaMemcpy")}


def host_costs(averages, steps: int) -> dict:
    """Per fwd+bwd step: kernel launches, device syncs, raw allocations and copies, and the CPU time
    (ms) outside device work, from a profiler's key averages."""
    counts = {name: 0.0 for name in HOST_CALLS}
    for event in averages:
        for name, calls in HOST_CALLS.items():
            if event.key in calls:
                counts[name] += event.count
    per_step = {name: round(count / steps, 1) for name, count in counts.items()}
    per_step["cpu_ms"] = round(sum(e.self_cpu_time_total for e in averages) / 1000 / steps, 3)
    return per_step


def profile_backends() -> list[dict]:
    """Where one core fwd+bwd spends its time, host and device, per backend (torch.profiler).

    The timing section saw the Triton backend's fwd+bwd take about the same time at N=11 as at
    N=866, which points at host-side cost rather than kernel throughput; this table says which.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    from damcha_ts.models.attention import damcha_attention

    rows = []
    for B, T, D, H in (TIMING_SHAPES[0], TIMING_SHAPES[2]):
        dh = D // H
        x = torch.randn(B, T, D, device=DEVICE, dtype=torch.bfloat16).view(B, T, H, dh).transpose(1, 2)
        metrics = (torch.randn(B, H, dh, dh, device=DEVICE) / math.sqrt(dh)).to(torch.bfloat16)
        value = torch.randn_like(x)
        grad_out = torch.randn(B, H, T, dh, device=DEVICE, dtype=torch.bfloat16)
        for backend in ("triton", "sdpa"):
            leaves = [t.detach().clone().requires_grad_() for t in (x, metrics, value)]

            def step(leaves=leaves, backend=backend):
                torch.autograd.grad(damcha_attention(*leaves, backend=backend)[0], leaves, grad_out)

            for _ in range(3):
                step()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
            averages = prof.key_averages()
            table = averages.table(sort_by="self_cpu_time_total", row_limit=15)
            rows.append({"B": B, "tokens": T, "d_model": D, "heads": H, "backend": backend, "steps": 5,
                         "per_step": host_costs(averages, steps=5), "table": table})
            log(f"profile {backend} B={B} T={T}:\n{table}")
    return rows


# ------------------------------------------------------------------------------------------------
# 3. One training step at the Traffic config


def time_training_steps(warmup: int, iters: int) -> list[dict]:
    import torch

    try:
        from damcha_ts.models import build_model
    except ImportError as exc:
        raise RuntimeError(f"damcha_ts.models.build_model is missing ({exc}); the models package "
                           "must provide it for the training-step check") from exc

    c = TRAFFIC
    generator = torch.Generator(device=DEVICE).manual_seed(0)
    x = torch.randn(c["batch"], c["seq_len"], c["variates"], device=DEVICE, generator=generator)
    marks = torch.randn(c["batch"], c["seq_len"], c["mark_features"], device=DEVICE, generator=generator)
    target = torch.randn(c["batch"], c["pred_len"], c["variates"], device=DEVICE, generator=generator)
    rows = []
    # compiled: what training.compile does on CUDA (torch.compile with CUDA graphs, "reduce-overhead").
    for name, backend, compiled in (("itransformer_damcha", "triton", False), ("itransformer_damcha", "sdpa", False),
                                    ("itransformer_mha", None, False), ("itransformer_damcha", "sdpa", True),
                                    ("itransformer_mha", None, True)):
        config = {"name": name, **{k: c[k] for k in ("seq_len", "pred_len", "d_model", "n_heads", "e_layers", "d_ff")}}
        if backend is not None:
            config["attn_backend"] = backend
        torch.manual_seed(0)
        model = build_model(config).to(DEVICE).train()
        optimizer = torch.optim.AdamW(model.parameter_groups(c["learning_rate"]))
        forward = torch.compile(model, mode="reduce-overhead", dynamic=False) if compiled else model

        def step(forward=forward, optimizer=optimizer):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(DEVICE, dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(forward(x, marks).float(), target)
            loss.backward()
            optimizer.step()

        try:
            timing = cuda_median_ms(step, warmup + (3 if compiled else 0), iters)  # compiled: its compile untimed
        except Exception as exc:  # noqa: BLE001 - one variant failing (a compile error) must not cost the others
            rows.append({"model": name, "attn_backend": backend, "compiled": compiled, "error": repr(exc)[:500]})
            log(f"training step {name} backend={backend} compiled={compiled} failed: {exc!r}")
            continue
        rows.append({"model": name, "attn_backend": backend, "compiled": compiled, "precision": "bf16-mixed",
                     "parameters": sum(p.numel() for p in model.parameters()), **timing})
        log(f"training step {name} backend={backend} compiled={compiled}: {timing}")
        del model, optimizer
        torch.cuda.empty_cache()
    return rows


# ------------------------------------------------------------------------------------------------
# 5. One epoch at Traffic's size

TRAFFIC_ROWS, TRAFFIC_VARIATES = 17_544, 862


def traffic_frame(rows: int = TRAFFIC_ROWS, variates: int = TRAFFIC_VARIATES):
    """Synthetic data of Traffic's exact shape (hourly, 17,544 x 862): daily cycles plus noise, so
    the epoch does the real work without the real file (which is not redistributed)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    hours = np.arange(rows)[:, None]
    values = np.sin(2 * np.pi * (hours / 24 + rng.random(variates))) + 0.1 * rng.standard_normal((rows, variates))
    frame = pd.DataFrame(values.astype(np.float32), columns=[f"sensor_{i}" for i in range(variates)])
    frame.insert(0, "date", pd.date_range("2016-07-01", periods=rows, freq="h"))
    return frame


def time_traffic_epochs(out_dir: Path, frame=None, variants=None, accelerator: str = "gpu") -> list[dict]:
    """One training epoch (no validation) of MHA and DAMCHA (sdpa, triton) at the Traffic config on
    Traffic-sized data: seconds and peak GPU memory, through the real data pipeline and trainer."""
    import torch

    from damcha_ts.data import prepare
    from damcha_ts.training import TrainingConfig
    from damcha_ts.training.runner import fit_series

    c = TRAFFIC
    series = prepare(traffic_frame() if frame is None else frame, seq_len=c["seq_len"], pred_len=c["pred_len"])
    variants = variants or (("itransformer_mha", None), ("itransformer_damcha", "sdpa"),
                            ("itransformer_damcha", "triton"))
    rows = []
    for name, backend in variants:
        model = {"name": name, **{k: c[k] for k in ("seq_len", "pred_len", "d_model", "n_heads", "e_layers", "d_ff")},
                 **({"attn_backend": backend} if backend else {})}
        training = TrainingConfig(max_epochs=1, batch_size=c["batch"], learning_rate=c["learning_rate"], seed=0)
        if accelerator == "gpu":
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        try:
            fit_series(series, model, training, out_dir / f"traffic_{name}_{backend}", progress=False, validate=False,
                       trainer_kwargs={"accelerator": accelerator, "devices": 1, "enable_model_summary": False})
        except Exception as exc:  # noqa: BLE001 - one variant failing must not cost the others
            rows.append({"model": name, "attn_backend": backend, "error": repr(exc)[:500]})
            log(f"traffic epoch {name} backend={backend} failed: {exc!r}")
            continue
        seconds = time.perf_counter() - started
        peak = torch.cuda.max_memory_allocated() / 2**30 if accelerator == "gpu" else None
        rows.append({"model": name, "attn_backend": backend, "train_windows": len(series.windows("train")),
                     "epoch_seconds": round(seconds, 1), "peak_gib": None if peak is None else round(peak, 2)})
        log(f"traffic epoch {name} backend={backend}: {rows[-1]}")
    return rows


# ------------------------------------------------------------------------------------------------
# Report


def environment() -> dict:
    import torch
    import triton

    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(),
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def _table(title: str, header: list[str], rows: list[list]) -> list[str]:
    """A Markdown section: its title, then a table (one list of cells per row)."""
    return [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows), ""]


def markdown(report: dict) -> str:
    lines = ["# Triton DAMCHA kernel: GPU check", "",
             f"Status: {report['status']}. {report['environment'].get('gpu', '')}, torch "
             f"{report['environment'].get('torch', '')}, triton {report['environment'].get('triton', '')}. "
             f"Run time {report.get('elapsed_s', '?')} s. Command: `{report['command']}`.", ""]
    if report.get("correctness"):
        lines += ["## Correctness vs the float64 math backend (max relative error)", "",
                  "| dtype | T | out | grad x | grad m | grad v | passed |", "|---|---|---|---|---|---|---|"]
        for row in report["correctness"]:
            e = row["max_relative_error"]
            lines.append(f"| {row['dtype']} | {row['tokens']} | {e['out']:.2e} | {e['grad_x']:.2e} | "
                         f"{e['grad_head_metrics']:.2e} | {e['grad_value']:.2e} | {row['passed']} |")
        lines.append("")
    if report.get("timing"):
        lines += ["## Timing, bf16, median ms (peak extra MiB)", "",
                  "| level | B | N | D | H | backend | fwd | fwd+bwd |", "|---|---|---|---|---|---|---|---|"]
        for shape in report["timing"]:
            for level in ("core", "module"):
                for backend in ("triton", "sdpa", "mha"):
                    t = shape[level][backend]
                    lines.append(f"| {level} | {shape['B']} | {shape['tokens']} | {shape['d_model']} | "
                                 f"{shape['heads']} | {backend} | {t['fwd']['median_ms']:.3f} "
                                 f"({t['fwd']['peak_extra_mib']:.0f}) | {t['fwd_bwd']['median_ms']:.3f} "
                                 f"({t['fwd_bwd']['peak_extra_mib']:.0f}) |")
        lines.append("")
        for shape in report["timing"]:
            for level in ("core", "module"):
                ratios = ", ".join(f"{k} {v}" for k, v in shape[level]["ratios"].items())
                lines.append(f"- {level}, B={shape['B']} N={shape['tokens']} D={shape['d_model']}: {ratios}")
        lines.append("")
    if report.get("training_step"):
        lines += _table("One bf16-mixed training step, Traffic config (B=16, N=862+4)",
                        ["model", "backend", "compiled", "median ms", "peak extra MiB"],
                        [[row["model"], row["attn_backend"], row.get("compiled", False),
                          f"failed: {row['error'][:80]}" if "error" in row else f"{row['median_ms']:.2f}",
                          "" if "error" in row else f"{row['peak_extra_mib']:.0f}"] for row in report["training_step"]])
    if report.get("traffic_epoch"):
        lines += _table("One training epoch on Traffic-sized data (17,544 x 862, synthetic)",
                        ["model", "backend", "seconds", "peak GiB"],
                        [[row["model"], row["attn_backend"], row.get("epoch_seconds", row.get("error")),
                          row.get("peak_gib", "")] for row in report["traffic_epoch"]])
    for row in report.get("profile", []):
        lines += [f"## Profile: {row['backend']}, B={row['B']} N={row['tokens']} D={row['d_model']}, "
                  f"{row['steps']} core fwd+bwd steps", "", f"Per step: {row.get('per_step')}", "",
                  "```", row["table"], "```", ""]
    if report.get("target"):
        t = report["target"]
        lines += [f"Target: {t['description']}: ratio {t.get('ratio')}, met: {t.get('met')}.", ""]
    for section, error in report.get("errors", {}).items():
        lines += [f"Error in {section}: {error.splitlines()[-1] if error else ''}", ""]
    return "\n".join(lines)


def write_dispatch(timing: list[dict], gpu: str, iters: int) -> str:
    """Replace this GPU's bf16 rows of the table attn_backend='auto' follows with this run's core
    fwd+bwd ratios (other GPUs' rows stay); returns the file written."""
    from damcha_ts.files import write_atomically
    from damcha_ts.models.kernels.dispatch import SPEEDS_FILE, parse_speeds

    table = json.loads(SPEEDS_FILE.read_text(encoding="utf-8"))
    stamp = time.strftime("%Y-%m-%d")
    rows = [{"device": gpu, "dtype": "bfloat16", "tokens": t["tokens"], "d_model": t["d_model"], "heads": t["heads"],
             "batch": t["B"], "triton_over_sdpa": t["core"]["ratios"]["triton/sdpa fwd_bwd"],
             "source": f"check_triton.py {stamp} ({iters} iterations)"} for t in timing if t["dtype"] == "bf16"]
    table["measured"] = [r for r in table["measured"] if not (r["device"] == gpu and r["dtype"] == "bfloat16")] + rows
    parse_speeds(table, str(SPEEDS_FILE))  # what the library will read
    write_atomically(SPEEDS_FILE, json.dumps(table, indent=2) + "\n")
    log(f"dispatch table: {len(rows)} rows for {gpu} in {SPEEDS_FILE}")
    return str(SPEEDS_FILE.relative_to(REPO_ROOT))


def write_report(report: dict, out_dir: Path | None) -> None:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    json_path, md_path = RESULTS_DIR / "triton_gpu.json", RESULTS_DIR / "triton_gpu.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md_path.write_text(markdown(report) + "\n")
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        for path in (json_path, md_path):
            shutil.copy(path, out_dir / path.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=None, help="also copy the results here")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (after autotuning)")
    parser.add_argument("--iters", type=int, default=100, help="timed calls per measurement")
    parser.add_argument("--write-dispatch", action="store_true",
                        help="record this GPU's triton/sdpa timings in damcha_ts/models/kernels/backend_speeds.json, "
                             "which attn_backend='auto' follows")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("check_triton.py needs a CUDA GPU and none is visible (torch.cuda.is_available() is False); "
              "nothing was measured and the results file was left as it is.", file=sys.stderr)
        return 2
    if os.environ.get("TRITON_INTERPRET"):
        print("TRITON_INTERPRET is set: unset it, this check times the compiled kernels.", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO_ROOT))  # run from a checkout without installing

    started = time.time()
    report = {"status": "partial", "issue": 7, "command": " ".join(["python", "benchmarks/gpu/check_triton.py", *(argv or sys.argv[1:])]),
              "environment": environment(), "errors": {},
              "target": {"description": f"triton fwd+bwd <= {TARGET_RATIO} x sdpa, core, bf16, B=16 N=866 D=512 H=8"}}
    log(f"environment: {report['environment']}")
    # The timed and profiled sections run first, while this script has the GPU alone; correctness
    # (mostly compiling) runs last, and benchmarks/gpu/session.sh starts other GPU work beside it.
    sections = (
        ("timing", lambda: [time_shape(*shape, args.warmup, args.iters) for shape in TIMING_SHAPES]),
        ("training_step", lambda: time_training_steps(args.warmup, max(5, args.iters // 2))),
        ("traffic_epoch", lambda: time_traffic_epochs(REPO_ROOT / "runs" / "traffic_epoch")),
        ("profile", profile_backends),
        ("correctness", check_correctness),
    )
    for name, run in sections:
        log(f"--- {name}")
        try:
            report[name] = run()
            if name == "timing":
                traffic = report["timing"][0]["core"]["ratios"]["triton/sdpa fwd_bwd"]
                report["target"].update(ratio=traffic, met=traffic <= TARGET_RATIO)
                report["autotuned_configs_last_shape"] = autotuned_configs()
                if args.write_dispatch:
                    report["dispatch"] = write_dispatch(report["timing"], report["environment"]["gpu"], args.iters)
        except Exception:  # keep going: later sections are still worth measuring
            report["errors"][name] = traceback.format_exc()
            log(f"{name} crashed:\n{report['errors'][name]}")
        report["elapsed_s"] = round(time.time() - started, 1)
        write_report(report, args.out_dir)

    correct = all(row["passed"] for row in report.get("correctness", []))
    report["status"] = "ran" if not report["errors"] else "ran_with_errors"
    report["all_correct"] = correct and "correctness" in report
    report["elapsed_s"] = round(time.time() - started, 1)
    write_report(report, args.out_dir)
    log(f"done in {report['elapsed_s']} s; all correct: {report['all_correct']}; target: {report['target']}")
    return 0 if report["all_correct"] and not report["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
