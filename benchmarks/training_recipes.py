"""The benchmark's training recipe against the user-data recipe (issue 34, item 1) on small data.

    OMP_NUM_THREADS=1 DAMCHA_TS_DATA=/work/shared/data python benchmarks/training_recipes.py [--model NAME]

(results of one run: benchmarks/results/training_recipes.txt)

Two series a new user might bring, each split 70/10/20 by ``Forecaster.fit`` (train-only scaler):

- ``etth1_2000``: the first 2000 hourly rows of the real ETTh1 file (7 variates), read as a user's
  frame (not the benchmark protocol), horizon 24, lookback 96;
- ``weekly_966``: a synthetic 7-series weekly set shaped as issue 34's epidemiology data (966 rows:
  yearly season of varying amplitude, slow trend, AR(1) noise), horizon 12, lookback 52.

For each it fits the same model under ``TrainingConfig()``'s recipe (lr 1e-4 halved every epoch,
10 epochs, patience 3, batch 32) and ``TrainingConfig.for_user_data(train_windows)``, and prints
the validation curve (optimiser step, val MSE), where it stopped, the best step, any
ConvergenceWarning, the test MSE (z-scale) and the repeat-last and window-mean baselines' test MSE.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd


def etth1_2000() -> tuple[pd.DataFrame, int, int]:
    from damcha_ts.data import load_frame

    return load_frame("ETTh1", download=False).iloc[:2000], 24, 96


def weekly_966(rows: int = 966, series: int = 7, seed: int = 0) -> tuple[pd.DataFrame, int, int]:
    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    columns = {}
    for k in range(series):
        amplitude = 1.0 + 0.5 * np.sin(2 * np.pi * t / (52 * 6) + k)  # seasons of varying height
        season = amplitude * np.maximum(np.sin(2 * np.pi * (t / 52.18) + 0.3 * k), -0.3) ** 2
        noise = np.zeros(rows)
        for i in range(1, rows):
            noise[i] = 0.7 * noise[i - 1] + 0.15 * rng.standard_normal()
        columns[f"region_{k}"] = 2.0 + 0.0015 * (k + 1) * t + season + noise
    index = pd.date_range("2002-01-06", periods=rows, freq="W-SUN")
    return pd.DataFrame(columns, index=index), 12, 52


def baseline_mse(frame: pd.DataFrame, horizon: int, lookback: int) -> dict:
    from damcha_ts.baselines import evaluate_naive
    from damcha_ts.data import prepare

    panel = prepare(frame, seq_len=lookback, pred_len=horizon)
    return {method: evaluate_naive(panel, method)["mse"] for method in ("repeat_last", "window_mean")}


def fit_once(model: str, frame, horizon: int, lookback: int, training) -> dict:
    from damcha_ts import Forecaster
    from damcha_ts.errors import ConvergenceWarning

    keywords = {k: v for k, v in dataclasses.asdict(training).items() if k not in ("quantiles",)}
    keywords["random_state"] = keywords.pop("seed")
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        forecaster = Forecaster(model, horizon=horizon, lookback=lookback,
                                trainer_kwargs={"default_root_dir": root}, **keywords)
        started = time.perf_counter()
        forecaster.fit(frame)
        seconds = time.perf_counter() - started
        logged = pd.read_csv(next(Path(root).glob("fit_*/logs/metrics.csv")))
    curve = logged.dropna(subset=["val_loss"])
    facts = forecaster.fit_result_
    return {
        "steps": [int(s) + 1 for s in curve["step"]], "val": curve["val_loss"].round(4).tolist(),
        "test_mse": forecaster.evaluate()["mse"], "seconds": seconds, "n_params": facts["n_params"],
        "windows": facts["windows"],
        "warnings": [str(w.message).split(" (")[0] for w in caught if issubclass(w.category, ConvergenceWarning)],
    }


def main() -> None:
    import torch

    from damcha_ts.data import prepare
    from damcha_ts.training.config import TrainingConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="itransformer_damcha_static")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, (frame, horizon, lookback) in {"etth1_2000": etth1_2000(), "weekly_966": weekly_966()}.items():
        train_windows = prepare(frame, seq_len=lookback, pred_len=horizon).window_count("train")
        print(f"== {name}: {frame.shape[0]} rows x {frame.shape[1]} variates, horizon {horizon}, lookback "
              f"{lookback}, {train_windows} train windows; baselines' test MSE "
              + ", ".join(f"{k} {v:.4f}" for k, v in baseline_mse(frame, horizon, lookback).items()))
        recipes = {"benchmark recipe": TrainingConfig(),
                   "user-data recipe": TrainingConfig.for_user_data(train_windows=train_windows)}
        for label, training in recipes.items():
            result = fit_once(args.model, frame, horizon, lookback, training)
            best = int(np.argmin(result["val"]))
            print(f"{label} (lr {training.learning_rate:g} {training.lr_schedule}, batch {training.batch_size}, "
                  f"{'max_steps ' + str(training.max_steps) if training.max_steps else 'max_epochs ' + str(training.max_epochs)}):"
                  f" {args.model} {result['n_params']:,} params; stopped at step {result['steps'][-1]} after "
                  f"{len(result['val'])} validations, best val {result['val'][best]:.4f} at step {result['steps'][best]}; "
                  f"test MSE {result['test_mse']:.4f}; {result['seconds']:.1f} s")
            print("  val curve (step: val MSE): " + ", ".join(f"{s}: {v:.4f}" for s, v in zip(result["steps"], result["val"])))
            print(f"  ConvergenceWarning: {result['warnings'] or 'none'}")


if __name__ == "__main__":
    main()
