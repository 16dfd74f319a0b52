"""``damcha-ts fit --data FILE --model auto``: ``Forecaster("auto")`` (tuning/auto.py) on the command
line: the search within ``--time-budget``, then the chosen model, the table of candidates and the
test scores written into ``--out``."""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path

from damcha_ts.cli.arguments import csv_options, scale_out_settings, trainer_kwargs
from damcha_ts.cli.run_folder import check_out_dir, training_command
from damcha_ts.data.options import ProtocolOptions
from damcha_ts.errors import ConfigError, Stopped
from damcha_ts.files import write_atomically

AUTO_RUN = "auto"  # what fit_failed.txt names for a failed --model auto run
AUTO_OUTPUTS = ("metrics.json", "auto_trials.csv", "model")  # metrics.json first: a run without it is unfinished


def run_auto(args: argparse.Namespace) -> int:
    """``--data FILE --model auto``: ``Forecaster("auto")`` fitted on the CSV; DIR receives ``model/``,
    ``auto_trials.csv`` (every candidate: validation MASE, seconds, state) and ``metrics.json`` (the
    choice and, with a test split, its test scores); stdout the top of the table. SIGTERM / Ctrl+C
    exit 143 / 130; a study kept with ``--storage`` keeps its finished trials and the same command continues it
    (into a new ``--out``, or with ``--overwrite``)."""
    from damcha_ts import Forecaster

    if args.config or not args.data:
        raise ConfigError("--model auto searches on --data DATASET_OR_CSV (no --config)")
    refused = [flag for flag, given in (("--set", args.overrides), ("--resume", args.resume),
                                        ("--lookback", args.lookback is not None)) if given]
    if refused:
        raise ConfigError(f"--model auto takes no {', '.join(refused)}: it searches the lookback and the settings "
                          "(narrow them with --search FILE; continue a search with --storage)")
    out_dir = Path(args.out)
    check_out_dir(out_dir, resume=False, overwrite=args.overwrite, config_hash=AUTO_RUN, resumable=False)
    seed = {} if args.seed is None else {"random_state": args.seed}  # else Forecaster's default seed
    forecaster = Forecaster(
        "auto", horizon=args.horizon or ProtocolOptions.pred_len, time_budget=args.time_budget, search=args.search,
        storage=args.storage, workers=args.workers, trainer_kwargs={**trainer_kwargs(args), **scale_out_settings(args)},
        past_covariates=args.past_covariates, future_covariates=args.future_covariates,
        static_covariates=args.static_covariates, **seed)
    sizes = {key: getattr(args, key) for key in ("val_size", "test_size") if getattr(args, key) is not None}
    try:
        with training_command("fit", out_dir, resume=False, config_hash=AUTO_RUN, overwrite=args.overwrite):
            forecaster.fit(args.data, **sizes, **csv_options(args))
            result = _write_auto_run(forecaster, out_dir)
    except Stopped as stop:
        kept = ("the study in --storage keeps its finished trials: the same command continues it" if args.storage
                else "nothing was kept (give --storage to keep the study)")
        raise Stopped(stop.signum, f"fit --model auto: stopped by a signal; {kept}") from None
    if args.json:
        print(json.dumps(result, default=str, allow_nan=False))
        return 0
    columns = ["number", "model", "lookback", "validation_mase", "seconds", "state"]
    print(forecaster.leaderboard_[columns].head(10).to_string(index=False))
    chosen, search = result["chosen"], forecaster.fit_result_["auto"]
    scores = (f"; test MASE {result['test_mase']:.4f}, MSE {result['test_mse']:.4f}" if "test_mase" in result else "")
    print(f"chose {chosen['model']} (lookback {chosen['lookback']}) of {len(search['trials'])} trials in "
          f"{search['seconds']:.0f} s: validation MASE {chosen['validation_mase']:.4f}{scores}\nwritten to {out_dir}")
    return 0


def _write_auto_run(forecaster, out_dir: Path) -> dict:
    """``model/``, ``auto_trials.csv`` and ``metrics.json`` of a fitted search; returns the metrics."""
    test = forecaster.evaluate() if forecaster.predictor_.fit_record.panel.window_count("test") else {}
    search = forecaster.fit_result_["auto"]
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in AUTO_OUTPUTS:  # --overwrite: nothing of the run replaced may stay beside the new one
        if (out_dir / name).is_dir():
            shutil.rmtree(out_dir / name)
        else:
            (out_dir / name).unlink(missing_ok=True)
    forecaster.save(out_dir / "model")
    write_atomically(out_dir / "auto_trials.csv", forecaster.leaderboard_.to_csv(index=False))
    # A score that is not finite (a constant series has no MASE scale) is null: strict JSON has no NaN.
    result = {"model": "auto", "chosen": search["chosen"], "seconds": search["seconds"], "trials": len(search["trials"]),
              **{f"test_{key}": value if math.isfinite(value) else None for key, value in test.items()
                 if isinstance(value, (int, float))}}
    write_atomically(out_dir / "metrics.json", json.dumps(result, indent=1, default=str, allow_nan=False) + "\n")
    return result
