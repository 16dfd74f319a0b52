"""``damcha-ts tune``: an Optuna study over a run config (see :mod:`damcha_ts.tuning`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys

from damcha_ts.cli.arguments import add_json_flag, add_overrides_argument


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="tune hyperparameters with Optuna (pruning, resume, many workers)",
        description=(
            "Run or resume an Optuna study: TPE sampling, median/Hyperband pruning on val_loss, "
            "objective = best validation MSE (the test split is used once, for the best config, "
            "after the study). Rerunning the same command resumes the study and adds --n-trials."
        ),
    )
    parser.add_argument("--config", required=True, help="base run config (YAML path or shipped name)")
    parser.add_argument("--search", required=True, help="search file (configs/search/NAME.yaml or a path)")
    parser.add_argument(
        "--n-trials", type=int, required=True, metavar="N", help="COMPLETE+PRUNED trials to add"
    )
    parser.add_argument(
        "--storage",
        help="sqlite:///file.db, postgresql+psycopg2://user@host/db, journal:///file.log, or a .db/.log path "
        "(default: OUT/study.db). Point many machines at one database URL to share a study.",
    )
    parser.add_argument("--study-name", help="default: the search file's study_name or its stem")
    parser.add_argument(
        "--workers", type=int, default=1, metavar="K", help="worker processes on this machine"
    )
    add_overrides_argument(parser, "training.max_epochs=5", scope=" of the base config for every trial")
    parser.add_argument("--horizon", "--pred-len", dest="horizon", type=int,
                        help="forecast horizon (picks per-horizon sections)")
    parser.add_argument("--out", help="study folder (default: runs/tune/STUDY_NAME)")
    parser.add_argument("--no-test", action="store_true", help="skip testing the best config")
    parser.add_argument(
        "--compare-default",
        action="store_true",
        help="also train and test the base config, and compare it with the tuned one in the report",
    )
    add_json_flag(parser, "one JSON object with the outcome")
    parser.set_defaults(func=run)


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this run (written into the report), with any database password
    replaced by ``***``."""
    from damcha_ts.workqueue.storage import display_url
    parts = ["damcha-ts", "tune", "--config", args.config, "--search", args.search, "--n-trials", str(args.n_trials)]
    for flag, value in (
        ("--storage", display_url(args.storage) if args.storage else None),  # no password in reports
        ("--study-name", args.study_name),
        ("--horizon", args.horizon),
        ("--out", args.out),
    ):
        if value is not None:
            parts += [flag, str(value)]
    if args.workers != 1:
        parts += ["--workers", str(args.workers)]
    for override in args.overrides:
        parts += ["--set", override]
    parts += [flag for flag, on in (("--no-test", args.no_test), ("--compare-default", args.compare_default)) if on]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    from damcha_ts.tuning.study import run_study

    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the --json object
        result = run_study(args.config, args.search, n_trials=args.n_trials, storage=args.storage,
                           study_name=args.study_name, workers=args.workers, overrides=args.overrides,
                           horizon=args.horizon, out_dir=args.out, evaluate_test=not args.no_test,
                           compare_default=args.compare_default, command=command_line(args))
    if args.json:
        print(json.dumps(result.to_json(), default=str))
    else:
        print(
            f"study {result.study_name}: {result.n_trials} trials ({result.n_complete} complete, "
            f"{result.n_pruned} pruned, {result.n_failed} failed, {result.n_running} running, "
            f"{result.n_waiting} waiting)"
        )
        if result.best_trial is not None:
            print(f"best: trial {result.best_trial}, val MSE {result.best_value:.6f}, {result.best_params}")
            print(f"best config: {result.best_config}")
        if result.tuned:
            print(f"test of the best config: MSE {result.tuned['mse']:.4f}, MAE {result.tuned['mae']:.4f}")
        print(f"report: {result.report}")
    failed_workers = [code for code in result.worker_exit_codes if code != 0]
    if failed_workers:
        missing = args.n_trials - result.n_added
        print(
            f"damcha-ts tune: {len(failed_workers)} worker(s) failed; this launch added "
            f"{result.n_added} of {args.n_trials} trials"
            + (f" (rerun with --n-trials {missing} to add the rest)" if missing > 0 else ""),
            file=sys.stderr,
        )
        return 1
    if args.n_trials > 0 and result.n_added == 0:
        print(
            f"damcha-ts tune: none of the {args.n_trials} trials finished ({result.n_failed} failed "
            "in the study); the [tune] lines above say why",
            file=sys.stderr,
        )
        return 1
    return 0
