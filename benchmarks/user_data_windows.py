"""Window by window: where a model wins or loses against seasonal naive on the user-data benchmark.

    python benchmarks/user_data_windows.py run [--datasets elecdemand] [--models defaults TSMixer] [--force]
    python benchmarks/user_data_windows.py report

The protocol, datasets and model kinds are ``benchmarks/user_data.py``'s; the models probed are
``benchmarks/user_data_windows.yaml``'s. Each test window's score is its MAE over the series' in-sample
seasonal-naive MAE (so the mean over windows is the cell's MASE), beside the seasonal-naive forecast's
own (the value one season before), and the window's mean truth and forecast in the data's units.
One JSON per (dataset, model) in ``results/user_data_windows/``; the report is ``results/user_data_windows.md``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import user_data as bench  # noqa: E402  (the benchmark: protocol, datasets, model kinds)

ROOT = Path(__file__).resolve().parent
CONFIG = ROOT / "user_data_windows.yaml"
RESULTS = ROOT / "results" / "user_data_windows"
REPORT = ROOT / "results" / "user_data_windows.md"


def window_scores(train: np.ndarray, truth: np.ndarray, forecast: np.ndarray, season: int) -> np.ndarray:
    """[W]: each window's MAE over each series' seasonal-naive training MAE, mean over series."""
    scale = np.abs(train[:, season:] - train[:, :-season]).mean(axis=1)  # [N]
    return (np.abs(truth - forecast).mean(axis=2) / scale[:, None]).mean(axis=0)


def seasonal_naive(frame, dataset: dict, cutoffs: list[int]) -> np.ndarray:
    """[N, W, H]: each window forecast by the values one season before (repeated when H > season)."""
    values, season, horizon = frame[dataset["columns"]].to_numpy().T, dataset["season_length"], dataset["horizon"]
    steps = np.arange(horizon) % season - season  # for H <= season: cutoff - season + h
    return np.stack([values[:, cutoff + steps] for cutoff in cutoffs], axis=1)


def run_cell(dataset: dict, spec: dict, frame) -> dict:
    import torch

    torch.manual_seed(bench.SEED)
    np.random.seed(bench.SEED)
    details: dict = {}
    forecaster = bench.FORECASTERS[spec["kind"]](spec, dataset, details)
    start = time.perf_counter()
    train, truth, forecast = bench.protocol_forecasts(frame, dataset["horizon"], dataset["test_windows"], forecaster,
                                                      tuple(dataset.get("future_covariates", ())))
    seconds = time.perf_counter() - start
    _, cutoffs = bench.test_rows(len(frame), dataset["horizon"], dataset["test_windows"])
    naive = seasonal_naive(frame, dataset, cutoffs)
    season = dataset["season_length"]
    return {"dataset": dataset["name"], "model": spec["name"], "spec": spec, "seconds": seconds,
            "window_start": [str(frame.index[cutoff]) for cutoff in cutoffs],
            "scores": window_scores(train, truth, forecast, season).tolist(),
            "seasonal_naive_scores": window_scores(train, truth, naive, season).tolist(),
            "truth_mean": truth.mean(axis=(0, 2)).tolist(), "forecast_mean": forecast.mean(axis=(0, 2)).tolist(),
            "details": {k: v for k, v in details.items() if k in ("library", "future_covariates", "fit_options")},
            "environment": bench.environment(), "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def run(datasets: list[str] | None, models: list[str] | None, force: bool) -> None:
    import torch

    torch.set_num_threads(1)
    probe, known = yaml.safe_load(CONFIG.read_text()), {d["name"]: d for d in bench.load_config()["datasets"]}
    for entry in probe["datasets"]:
        label, cut = entry.get("label", entry["name"]), int(entry.get("end_rows_before", 0))
        if datasets and label not in datasets:
            continue
        dataset = {**known[entry["name"]], "name": label,
                   **{key: entry[key] for key in ("future_covariates",) if key in entry}}
        frame = bench.load_dataset(dataset)
        frame = frame.iloc[:len(frame) - cut]
        chosen = [m for m in probe["models"] if m["name"] in entry.get("models", [m["name"]])]
        for spec in [m for m in chosen if not models or m["name"] in models]:
            path = RESULTS / f"{label}__{spec['name']}.json"
            if path.exists() and not force:
                continue
            bench.log(f"{label} x {spec['name']}")
            bench.write_json(path, run_cell(dataset, spec, frame))


def report() -> None:
    cells = [json.loads(path.read_text()) for path in sorted(RESULTS.glob("*.json"))]
    lines = ["# Window by window against seasonal naive", "",
             f"Written by `python benchmarks/user_data_windows.py report` from `results/user_data_windows/*.json` "
             "(models: `benchmarks/user_data_windows.yaml`; protocol: `results/user_data.md`). Each window: its MAE over "
             "the series' in-sample seasonal-naive MAE (the mean over windows is the MASE); SN is seasonal naive's; "
             "the last rows give each window's mean truth and forecast in the data's units.", ""]
    for name in sorted({cell["dataset"] for cell in cells}):
        rows = [cell for cell in cells if cell["dataset"] == name]
        starts = [stamp[:16] for stamp in rows[0]["window_start"]]
        lines += [f"## {name}", "", "| model | " + " | ".join(starts) + " | MASE | seconds |",
                  "|---|" + "---:|" * (len(starts) + 2)]
        lines.append("| seasonal naive | " + " | ".join(f"{v:.2f}" for v in rows[0]["seasonal_naive_scores"])
                     + f" | {np.mean(rows[0]['seasonal_naive_scores']):.3f} | |")
        order = sorted(rows, key=lambda cell: np.mean(cell["scores"]))
        lines += [f"| {cell['model']} | " + " | ".join(f"{v:.2f}" for v in cell["scores"])
                  + f" | {np.mean(cell['scores']):.3f} | {cell['seconds']:.0f} |" for cell in order]
        lines += ["", "Mean of each window (data units): truth and forecasts.", "",
                  "| | " + " | ".join(starts) + " |", "|---|" + "---:|" * len(starts),
                  "| truth | " + " | ".join(f"{v:.2f}" for v in rows[0]["truth_mean"]) + " |"]
        lines += [f"| {cell['model']} | " + " | ".join(f"{v:.2f}" for v in cell["forecast_mean"]) + " |" for cell in order]
        lines.append("")
    REPORT.write_text("\n".join(lines))
    print(f"wrote {REPORT}")


if __name__ == "__main__":
    bench.command_line(None, run, report, description=__doc__.split("\n\n")[0],
                       run_help="score the models of user_data_windows.yaml window by window",
                       report_help="write results/user_data_windows.md")
