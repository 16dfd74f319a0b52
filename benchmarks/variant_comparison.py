"""One leaderboard row against others, cell by cell and per dataset (issue 23's report).

For a model label of the results CSV (default: the gated DAMCHA-iTransformer) and the rows it is
compared with (default: iTransformer-MHA, the paper-default DAMCHA and the static metric): the
Avg MSE over the four protocol horizons per dataset (seed mean ± std, seeds that ran all four) beside
theirs and the published iTransformer; wins / losses / mean relative change of the seed-mean MSE over
the (dataset, horizon) cells both have; every cell; and per dataset the training curves of these rows
(validation and training MSE per epoch, seed 2023). The same measures as LEADERBOARD.md's
"DAMCHA vs MHA" table (``damcha_ts.leaderboard.tables``), against any row instead of MHA only.

    python benchmarks/variant_comparison.py [--label itransformer_damcha_gated_norm]
        [--against itransformer_mha itransformer_damcha itransformer_damcha_static]

Writes ``benchmarks/results/variant_comparison_<label>.{json,md}`` beside the CSV and
``plots/variant_curves_<label>_<dataset>.png`` beside LEADERBOARD.md's figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from damcha_ts.files import write_atomically
from damcha_ts.leaderboard.curves import load_curves
from damcha_ts.leaderboard.published import load_published
from damcha_ts.leaderboard.results import read_results
from damcha_ts.leaderboard.comparison import compare_damcha_mha, relative_change
from damcha_ts.leaderboard.dataset_results import collect, dataset_order
from damcha_ts.leaderboard.tables import PROTOCOL_HORIZONS, REFERENCE_PUBLISHED

ROOT = Path(__file__).resolve().parents[1]
AGAINST = ("itransformer_mha", "itransformer_damcha", "itransformer_damcha_static")
CURVE_SEED = 2023


def compare(results: dict, label: str, against: list[str]) -> dict:
    """-> {"averages": per dataset, "records": per compared row, "cells": per (dataset, horizon)}."""
    published = load_published()
    averages = []
    for dataset in dataset_order(results):
        data = results[dataset]
        ours = data.average(label, PROTOCOL_HORIZONS, "mse")
        if ours is None:
            continue
        entry = {"dataset": dataset, label: [ours.mean, ours.std, ours.n],
                 "published": published.value(dataset, REFERENCE_PUBLISHED, "avg", "mse")}
        for other in against:
            stat = data.average(other, PROTOCOL_HORIZONS, "mse")
            entry[other] = None if stat is None else [stat.mean, stat.std, stat.n]
        averages.append(entry)
    records = {}
    for other in against:
        # compare_damcha_mha(results, base, row): wins are cells where ``row`` has the lower MSE.
        cmp = compare_damcha_mha(results, other, label)
        records[other] = {key: cmp[key] for key in ("wins", "losses", "ties", "mean_relative_change_pct")}
        records[other]["cells"] = len(cmp["pairs"])
    cells = []
    for dataset in dataset_order(results):
        data = results[dataset]
        for horizon in data.horizons():
            ours = data.stat(label, horizon, "mse")
            if ours is None:
                continue
            row = {"dataset": dataset, "horizon": horizon, label: [ours.mean, ours.n]}
            for other in against:
                stat = data.stat(other, horizon, "mse")
                row[other] = None if stat is None else [stat.mean, stat.n]
            cells.append(row)
    return {"label": label, "against": against, "averages": averages, "records": records, "cells": cells}


def plot_curves(results_path: Path, label: str, against: list[str], datasets: list[str]) -> list[Path]:
    """One figure per dataset: the rows' per-epoch curves at ``CURVE_SEED``, one column per horizon."""
    from damcha_ts.leaderboard.plots import plot_curves as draw

    models = [label, *against]
    curves: dict[str, dict[int, dict[str, dict]]] = {}
    for curve in load_curves(results_path):
        if curve["seed"] == CURVE_SEED and curve["model"] in models and curve["dataset"] in datasets:
            curves.setdefault(curve["dataset"], {}).setdefault(curve["horizon"], {})[curve["model"]] = curve
    made = []
    for dataset, per_horizon in curves.items():
        ordered = {h: {m: per_horizon[h][m] for m in models if m in per_horizon[h]} for h in sorted(per_horizon)}
        path = results_path.parent / "plots" / f"variant_curves_{label}_{dataset}.png"
        made.append(draw(f"{dataset}, seed {CURVE_SEED}", ordered, path))
    return made


def _avg_text(value) -> str:
    if value is None:
        return "–"
    mean, std, n = value
    return f"{mean:.4f}" + ("" if std is None else f" ± {std:.4f}") + f" ({n})"


def markdown(report: dict) -> str:
    label, against = report["label"], report["against"]
    lines = [
        f"# `{label}` against {', '.join(f'`{a}`' for a in against)}",
        "",
        f"Test MSE from {report['results']}. Avg: mean over H = 96/192/336/720 per seed, then",
        "mean ± std over the seeds that ran all four (their count in brackets); change: 100·(row − other)/other.",
        "",
        "**Avg MSE per dataset**",
        "",
        f"| dataset | {label} | " + " | ".join(against) + f" | {REFERENCE_PUBLISHED} (published) | "
        + " | ".join(f"vs {a}" for a in against) + " | vs published |",
        "|---" * (3 + 2 * len(against)) + "|---|",
    ]
    for entry in report["averages"]:
        ours = entry[label][0]
        changes = [("–" if entry[a] is None else f"{relative_change(ours, entry[a][0]):+.2f} %") for a in against]
        pub = entry["published"]
        lines.append(
            f"| {entry['dataset']} | {_avg_text(entry[label])} | " + " | ".join(_avg_text(entry[a]) for a in against)
            + f" | {'–' if pub is None else f'{pub:.3f}'} | " + " | ".join(changes)
            + f" | {'–' if pub is None else f'{relative_change(ours, pub):+.2f} %'} |"
        )
    lines += ["", "**Cell by cell (seed-mean MSE)**", "",
              "| against | cells | wins | losses | ties | mean relative change |", "|---|---|---|---|---|---|"]
    for other, r in report["records"].items():
        change = "–" if r["mean_relative_change_pct"] is None else f"{r['mean_relative_change_pct']:+.2f} %"
        lines.append(f"| {other} | {r['cells']} | {r['wins']} | {r['losses']} | {r['ties']} | {change} |")
    lines += ["", f"| dataset | H | {label} | " + " | ".join(against) + " |", "|---" * (3 + len(against)) + "|"]
    for cell in report["cells"]:
        mean, n = cell[label]
        others = ["–" if cell[a] is None else f"{cell[a][0]:.4f} ({cell[a][1]})" for a in against]
        lines.append(f"| {cell['dataset']} | {cell['horizon']} | {mean:.4f} ({n}) | " + " | ".join(others) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="itransformer_damcha_gated_norm")
    parser.add_argument("--against", nargs="+", default=list(AGAINST))
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks/results/leaderboard.csv")
    args = parser.parse_args()
    results = collect(read_results(args.results))
    if not any(args.label in data.runs for data in results.values()):
        raise SystemExit(f"{args.results}: no row of model {args.label!r}")
    report = compare(results, args.label, args.against)
    path = args.results.resolve()
    report["results"] = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    text = markdown(report)
    print(text)
    stem = args.results.parent / f"variant_comparison_{args.label}"
    write_atomically(stem.with_suffix(".json"), json.dumps(report, indent=1) + "\n")
    write_atomically(stem.with_suffix(".md"), text)
    datasets = list(dict.fromkeys(cell["dataset"] for cell in report["cells"]))
    for path in plot_curves(args.results, args.label, args.against, datasets):
        print(f"figure: {path}")


if __name__ == "__main__":
    main()
