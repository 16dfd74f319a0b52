"""How large did the gated DAMCHA's input-adaptive part grow? (issue 23)

Reads the saved weights of every finished cell of a leaderboard grid's gated model (the best epoch's
weights, ``model/weights.pt`` under the cell's run folder) and reports per cell the per-head gates
g_i of m_i(x) = m0_i + g_i * Delta_i(x). With ``model.metric_delta_norm`` the adaptive term has
Frobenius norm |g_i| * sqrt(dh), so its size relative to the learned static metric is
|g_i| * sqrt(dh) / ||m0_i||_F; that ratio is reported too (0: the static metric, 1: as large as it).
Beside it: the farthest Adam can move one parameter from 0 by the best epoch, about the sum of the
learning rates of its steps (lr x batches per epoch x the schedule's factors); a gate near that
bound was pushed the same way at every step, so its size was set by the learning rate.

    python benchmarks/metric_gate_magnitudes.py [--runs runs/leaderboard/ablations_gated]
        [--label itransformer_damcha_gated_norm]

Writes ``benchmarks/results/metric_gate_magnitudes.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import torch

from damcha_ts.files import write_atomically
from damcha_ts.training.optim import lr_factor

ROOT = Path(__file__).resolve().parents[1]


def gate_record(cell: Path) -> dict:
    """One finished cell's folder -> its gates and the adaptive part's relative size per head."""
    saved = json.loads((cell / "model/forecaster.json").read_text())
    config, training = saved["model"], saved["training"]
    metrics = json.loads((cell / "metrics.json").read_text())
    weights = torch.load(cell / "model/weights.pt", map_location="cpu", weights_only=True)
    gate_keys = [key for key in weights if key.endswith("metric_generator.gate")]
    if not gate_keys:
        raise SystemExit(f"{cell}: no metric gate in model/weights.pt (not a model.metric_gate=true run)")
    head_dim = config["d_model"] // config["n_heads"]
    gates, relative = [], []
    for key in gate_keys:  # one per stack when the generator is shared, else one per layer
        gate = weights[key].double()
        gates += gate.tolist()
        static = weights[key.removesuffix("gate") + "static.reduced_metric"].double()
        if config["metric_delta_norm"]:
            static_norms = torch.linalg.matrix_norm(static)  # [H]
            relative += (gate.abs() * math.sqrt(head_dim) / static_norms).tolist()
    factor = lr_factor(training["lr_schedule"], training["max_epochs"])
    gate_lr = training["learning_rate"] * (training.get("gate_lr_scale") or 1.0)
    travel = gate_lr * metrics["train_batches_per_epoch"] * sum(map(factor, range(metrics["best_epoch"] + 1)))
    return {
        "dataset": metrics["dataset"],
        "horizon": metrics["horizon"],
        "seed": training["seed"],
        "best_epoch": metrics["best_epoch"] + 1,  # 1-based, as in LEADERBOARD.md
        "test_mse": metrics["mse"],
        "gates": gates,
        "mean_abs_gate": statistics.fmean(abs(g) for g in gates),
        "max_abs_gate": max(abs(g) for g in gates),
        "mean_relative_size": statistics.fmean(relative) if relative else None,
        "adam_travel_bound": travel,
    }


def markdown(records: list[dict], label: str) -> str:
    lines = [
        f"# Metric gates of `{label}` (issue 23)",
        "",
        "Per finished leaderboard cell (best epoch's weights): the mean and largest |g_i| over the heads,",
        "and the adaptive term's size relative to the learned static metric, |g_i| sqrt(dh) / ||m0_i||_F",
        "(mean over heads; 0 would be the static-metric model). Gates start at 0. The last column is",
        "about the farthest Adam moves one parameter by the best epoch (the sum of its steps' learning",
        "rates): a gate near it was pushed the same way at every step.",
        "",
        "| dataset | H | seed | best epoch | mean abs(g) | max abs(g) | adaptive / static | Adam travel bound |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        size = "" if r["mean_relative_size"] is None else f"{r['mean_relative_size']:.3f}"
        lines.append(
            f"| {r['dataset']} | {r['horizon']} | {r['seed']} | {r['best_epoch']} | "
            f"{r['mean_abs_gate']:.3f} | {r['max_abs_gate']:.3f} | {size} | {r['adam_travel_bound']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=ROOT / "runs/leaderboard/ablations_gated")
    parser.add_argument("--label", default="itransformer_damcha_gated_norm")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks/results")
    args = parser.parse_args()
    cells = sorted(p.parent.parent for p in args.runs.glob(f"*/{args.label}/H*/seed*/model/weights.pt"))
    if not cells:
        raise SystemExit(f"no finished cell of {args.label} under {args.runs}")
    records = sorted(map(gate_record, cells), key=lambda r: (r["dataset"], r["horizon"], r["seed"]))
    print(markdown(records, args.label))
    write_atomically(args.results / "metric_gate_magnitudes.json", json.dumps(records, indent=1) + "\n")
    write_atomically(args.results / "metric_gate_magnitudes.md", markdown(records, args.label))


if __name__ == "__main__":
    main()
