"""Issue 23's selection step: which gated DAMCHA-iTransformer to run on the leaderboard.

Four Optuna studies (ETTh1 and ETTh2, H=96 and 336, seed 2023), each trying the candidates of
``configs/search/itransformer_damcha_gated.yaml`` once, on validation only. The score of a candidate
is its best validation MSE divided by the static metric's on the same target (from the committed
leaderboard curves), averaged over the four targets; MHA and the paper-default DAMCHA are shown the
same way. The test split is not read.

    OMP_NUM_THREADS=1 python benchmarks/metric_gate_selection.py [--workers 2] [--out runs/issue23]

Rerunning resumes each study where it stopped (the studies live in ``--out``) and only adds the
trials still missing. Writes ``benchmarks/results/metric_gate_selection.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from damcha_ts.tuning import run_study
from damcha_ts.tuning.search_file import load_search_spec
from damcha_ts.files import write_atomically

ROOT = Path(__file__).resolve().parents[1]
SEARCH = ROOT / "configs/search/itransformer_damcha_gated.yaml"
TARGETS = [("ETTh2", 96), ("ETTh2", 336), ("ETTh1", 96), ("ETTh1", 336)]
REFERENCES = ("itransformer_mha", "itransformer_damcha", "itransformer_damcha_static")
SEED = 2023


def reference_val_losses(curves_file: Path) -> dict[tuple[str, int, str], float]:
    """(dataset, horizon, model) -> the best validation MSE of the committed leaderboard run."""
    best = {}
    for curve in json.loads(curves_file.read_text()):
        if curve["seed"] == SEED and curve["model"] in REFERENCES:
            best[(curve["dataset"], curve["horizon"], curve["model"])] = min(curve["val_loss"])
    return best


def finished_trials(study_dir: Path, study_name: str) -> list:
    import optuna
    from optuna.trial import TrialState

    db = study_dir / "study.db"
    if not db.exists():
        return []
    study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{db}")
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="runs/issue23")
    parser.add_argument("--results", default=str(ROOT / "benchmarks/results/metric_gate_selection"))
    args = parser.parse_args()
    spec = load_search_spec(SEARCH)
    points = [dict(p) for p in spec.points]
    references = reference_val_losses(ROOT / "benchmarks/results/curves.json")

    rows = []
    for dataset, horizon in TARGETS:
        name = f"gated_{dataset.lower()}_{horizon}"
        study_dir = Path(args.out) / name
        done = finished_trials(study_dir, name)
        missing = len(points) - len({t.user_attrs.get("search_point") for t in done} - {None})
        if missing > 0:
            print(f"== {name}: {missing} of {len(points)} candidates to run", flush=True)
            run_study(f"itransformer_damcha/{dataset.lower()}", SEARCH, n_trials=missing, horizon=horizon,
                      overrides=["model.metric_gate=true"], workers=args.workers, out_dir=study_dir,
                      study_name=name, evaluate_test=False)
            done = finished_trials(study_dir, name)
        static = references[(dataset, horizon, "itransformer_damcha_static")]
        for trial in done:
            index = trial.user_attrs.get("search_point")
            if index is not None:
                rows.append({"dataset": dataset, "horizon": horizon, "point": index, "val_loss": trial.value,
                             "relative_to_static": trial.value / static, "trial": trial.number})
        for model in REFERENCES:
            value = references[(dataset, horizon, model)]
            rows.append({"dataset": dataset, "horizon": horizon, "point": model, "val_loss": value,
                         "relative_to_static": value / static, "trial": None})

    scores = {}
    for key in [*range(len(points)), *REFERENCES]:
        mine = [r["relative_to_static"] for r in rows if r["point"] == key]
        if len(mine) == len(TARGETS):
            scores[key] = statistics.fmean(mine)
    candidates = [k for k in scores if isinstance(k, int)]
    chosen = min(candidates, key=scores.get) if candidates else None
    report = {"search_file": str(SEARCH.relative_to(ROOT)), "seed": SEED, "targets": TARGETS,
              "points": points, "rows": rows, "mean_relative_to_static": {str(k): v for k, v in scores.items()},
              "chosen_point": chosen, "chosen": points[chosen] if chosen is not None else None}
    write_atomically(Path(args.results + ".json"), json.dumps(report, indent=2) + "\n")
    write_atomically(Path(args.results + ".md"), markdown(report, points, rows, scores))
    print(markdown(report, points, rows, scores))


def markdown(report: dict, points: list[dict], rows: list[dict], scores: dict) -> str:
    def label(key) -> str:
        if isinstance(key, int):
            return f"{key}: " + ", ".join(f"{path.split('.')[-1]}={value}" for path, value in points[key].items())
        return key

    header = "| candidate | " + " | ".join(f"{d} H={h}" for d, h in TARGETS) + " | mean vs static |"
    lines = ["# Gated DAMCHA: validation selection (issue 23)", "",
             f"Best validation MSE per target (seed {SEED}); the last column is the mean of val / "
             "static-metric val over the four targets (below 1: better than the static metric). "
             "Reference rows are the committed leaderboard runs' curves.", "",
             header, "|" + "---|" * (len(TARGETS) + 2)]
    for key in sorted(scores, key=scores.get):
        cells = []
        for dataset, horizon in TARGETS:
            value = next(r["val_loss"] for r in rows if r["point"] == key
                         and (r["dataset"], r["horizon"]) == (dataset, horizon))
            cells.append(f"{value:.4f}")
        mark = " **chosen**" if key == report["chosen_point"] else ""
        lines.append(f"| {label(key)}{mark} | " + " | ".join(cells) + f" | {scores[key]:.4f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
