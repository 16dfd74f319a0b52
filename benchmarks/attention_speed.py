"""DAMCHA vs MHA on CPU: forward+backward time and peak memory of one attention layer, and the time of
a whole iTransformer training step at the official ETTh1 and Traffic configs.

    python benchmarks/attention_speed.py            # the committed numbers (several minutes on 2 cores)
    python benchmarks/attention_speed.py --quick    # fewer repeats, a smoke run

Method: both kinds are built side by side and timed in alternation (MHA, DAMCHA, MHA, DAMCHA, ...),
so drifts of a shared machine hit both alike; each record reports the medians and their ratio
DAMCHA / MHA. Before timing, each step runs once under the torch profiler (the warm-up, and the peak
memory: the high-water mark of tensor memory allocated during the step, replayed from the profiler's
allocation records); steps of milliseconds get one more untimed warm-up.

Layers run in training mode, with an input that requires grad as inside a model, at attention dropout
0.1 (the official value; torch's CPU SDPA then falls back to its explicit kernel) and at 0 (the fused
CPU kernel). DAMCHA uses the package defaults: compact generator with hidden widths (256, 512), its own
generator (one layer has no stack to share one with), backend "auto" (SDPA on CPU). A model step is
forward, MSE loss, backward and an Adam step over ``model.parameter_groups``: the training optimiser
(``damcha_ts.training.optim.adamw``, the foreach update), and at ETTh1 also PyTorch's CPU default (the
per-tensor loop) and ``fused=True``; dropout 0.1 and the official iTransformer config; DAMCHA shares
one generator per stack (the default).

Writes benchmarks/results/attention_speed.json: a list of records with kind ("layer" | "model"),
B, N (tokens, marks included), D, H, damcha_ms, mha_ms, ratio (wall-clock medians), damcha_cpu_ms,
mha_cpu_ms, cpu_ratio (process CPU time medians, steadier on a shared machine), damcha_peak_mib,
mha_peak_mib, load_average, ... and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from damcha_ts.models import AttentionConfig, build_attention, build_model
from damcha_ts.training.optim import adamw

# (label, B, tokens, D, H): iTransformer's ETT, Weather and Traffic token counts (N + 4 marks)
LAYER_SHAPES = [("ETT", 32, 11, 256, 8), ("Weather", 32, 25, 512, 8), ("Traffic", 16, 866, 512, 8)]
# (label, batch, variates, official iTransformer config at pred_len 96 (protocol.md §2.3), Adam update)
ETTH1 = {"d_model": 256, "d_ff": 256, "e_layers": 2, "n_heads": 8}
TRAFFIC = {"d_model": 512, "d_ff": 512, "e_layers": 4, "n_heads": 8}
MODEL_SETTINGS = [
    ("ETTh1", 32, 7, ETTH1, "foreach"),
    ("ETTh1", 32, 7, ETTH1, "loop"),
    ("ETTh1", 32, 7, ETTH1, "fused"),
    ("Traffic", 16, 862, TRAFFIC, "foreach"),
]
N_MARKS = 4
KINDS = ("mha", "damcha")  # the timing alternates in this order
DROPOUT = 0.1


def peak_mib(step) -> float:
    """High-water mark (MiB) of CPU tensor memory allocated while ``step()`` runs.

    The profiler records each operator's net allocation and each release; replaying them in time
    order gives the allocation curve, whose maximum is the peak above the starting level.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    level = peak = 0
    for event in events:
        level += event.cpu_memory_usage if event.name == "[memory]" else event.self_cpu_memory_usage
        peak = max(peak, level)
    return peak / 2**20


def time_alternating(steps: dict, repeats: int, warm_up: bool) -> dict[str, dict[str, list[float]]]:
    """Per kind, the wall-clock and process-CPU milliseconds of each of ``repeats`` alternating runs.

    CPU time (all threads of this process) does not advance while the process waits for a core, so on
    a shared machine it is the steadier of the two.
    """
    for step in steps.values() if warm_up else ():
        step()
    times = {kind: {"wall": [], "cpu": []} for kind in steps}
    for _ in range(repeats):
        for kind, step in steps.items():
            wall, cpu = time.perf_counter(), time.process_time()
            step()
            times[kind]["cpu"].append(1e3 * (time.process_time() - cpu))
            times[kind]["wall"].append(1e3 * (time.perf_counter() - wall))
    return times


def layer_step(kind: str, B: int, tokens: int, D: int, H: int, dropout: float):
    config = AttentionConfig(kind=kind, n_heads=H, dropout=dropout)
    layer = build_attention(D, config).train()
    x = torch.randn(B, tokens, D, requires_grad=True)

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        y, _ = layer(x)
        y.square().mean().backward()

    return step


ADAM_UPDATES = {
    "foreach": lambda groups: adamw(groups, 1e-4),  # what training uses
    "loop": lambda groups: torch.optim.Adam(groups, lr=1e-4, foreach=False),  # PyTorch's CPU default
    "fused": lambda groups: torch.optim.Adam(groups, lr=1e-4, fused=True),  # one kernel, other rounding
}


def model_step(name: str, B: int, n_variates: int, hyper: dict, update: str):
    model = build_model(name, seq_len=96, pred_len=96, dropout=DROPOUT, **hyper).train()
    optimizer = ADAM_UPDATES[update](model.parameter_groups(1e-4))
    x, marks = torch.randn(B, 96, n_variates), torch.rand(B, 96, N_MARKS) - 0.5
    target = torch.randn(B, 96, n_variates)

    def step():
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(model(x, marks), target).backward()
        optimizer.step()

    return step


def record(kind: str, label: str, B: int, N: int, D: int, H: int, steps: dict, repeats: int, **extra) -> dict:
    peaks = {k: peak_mib(step) for k, step in steps.items()}  # also the first warm-up
    times = time_alternating(steps, repeats, warm_up=repeats > 3)
    wall = {k: statistics.median(t["wall"]) for k, t in times.items()}
    cpu = {k: statistics.median(t["cpu"]) for k, t in times.items()}
    result = {
        "kind": kind, "label": label, "B": B, "N": N, "D": D, "H": H, **extra,
        "damcha_ms": round(wall["damcha"], 2), "mha_ms": round(wall["mha"], 2),
        "ratio": round(wall["damcha"] / wall["mha"], 3),
        "damcha_cpu_ms": round(cpu["damcha"], 2), "mha_cpu_ms": round(cpu["mha"], 2),
        "cpu_ratio": round(cpu["damcha"] / cpu["mha"], 3),
        "damcha_peak_mib": round(peaks["damcha"], 1), "mha_peak_mib": round(peaks["mha"], 1),
        "repeats": repeats, "load_average": round(os.getloadavg()[0], 2),
        "damcha_ms_all": [round(t, 2) for t in times["damcha"]["wall"]],
        "mha_ms_all": [round(t, 2) for t in times["mha"]["wall"]],
    }
    print_row(result)
    return result


def print_row(r: dict) -> None:
    print(
        f"{r['kind']:<6} {r['label']:<8} p={r['dropout']:<4} {r.get('optimizer', ''):<16} "
        f"B={r['B']:<3} N={r['N']:<4} D={r['D']:<4} H={r['H']}  "
        f"mha {r['mha_ms']:>9.1f} ms  damcha {r['damcha_ms']:>9.1f} ms  ratio {r['ratio']:.3f}  "
        f"(CPU time ratio {r['cpu_ratio']:.3f})  "
        f"peak MiB mha {r['mha_peak_mib']:>8.1f} damcha {r['damcha_peak_mib']:>8.1f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run, not for the record)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).parent / "results" / "attention_speed.json"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    # Small steps take milliseconds and get many repeats; the Traffic ones take seconds (a model step
    # tens of seconds on 2 cores) and get few.
    small_repeats, layer_repeats, model_repeats = (3, 1, 1) if args.quick else (15, 3, 2)
    common = {"threads": args.threads, "torch": torch.__version__, "machine": platform.machine()}
    load = os.getloadavg()[0]
    print(f"load average before the run: {load:.2f} (the timings assume an otherwise idle machine)")

    records = []
    for dropout in (DROPOUT, 0.0):
        for label, B, tokens, D, H in LAYER_SHAPES:
            steps = {kind: layer_step(kind, B, tokens, D, H, dropout) for kind in KINDS}
            repeats = layer_repeats if tokens > 100 else small_repeats
            records.append(record("layer", label, B, tokens, D, H, steps, repeats, dropout=dropout, **common))
    for label, B, n_variates, hyper, update in MODEL_SETTINGS:
        steps = {kind: model_step(f"itransformer_{kind}", B, n_variates, hyper, update) for kind in KINDS}
        repeats = model_repeats if n_variates > 100 else small_repeats
        extra = {
            "variates": n_variates, "e_layers": hyper["e_layers"], "d_ff": hyper["d_ff"], "dropout": DROPOUT,
            "optimizer": f"Adam ({update})", **common,
        }
        D, H, tokens = hyper["d_model"], hyper["n_heads"], n_variates + N_MARKS
        records.append(record("model", label, B, tokens, D, H, steps, repeats, **extra))

    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(records, indent=1) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
