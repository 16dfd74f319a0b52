"""``damcha-ts quickstart``: DAMCHA-iTransformer on ETTh1, horizon 96, the official config.

Trains with the official iTransformer ETTh1 settings (configs/itransformer_damcha/etth1.yaml: L=96,
d_model 256, 2 layers, batch 32, lr 1e-4 halved after every epoch from the second (TSLib type1), at most 10 epochs, early stopping),
prints the test MSE/MAE next to the published iTransformer figure and writes a forecast plot.
About 10 minutes on a 2-core CPU, far less on a GPU. ETTh1 is located (``$DAMCHA_TS_DATA``, the
cache) or downloaded and checksum-verified first. Stopped (SIGTERM, Ctrl+C), it exits 143 / 130 and
``--resume`` continues the run in ``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from damcha_ts.cli.arguments import (
    add_command,
    add_json_flag,
    add_overrides_argument,
    add_resume_argument,
    add_trainer_argument,
)

CONFIG = "itransformer_damcha/etth1"
DATASET, HORIZON = "ETTh1", 96


def register(subparsers) -> None:
    parser = add_command(
        subparsers, "quickstart",
        "train DAMCHA-iTransformer on ETTh1 (H=96) and compare with the published iTransformer", __doc__,
    )
    parser.add_argument("--out", default="runs/quickstart", help="output directory (default runs/quickstart)")
    add_resume_argument(parser)
    add_overrides_argument(parser, "training.max_epochs=2")
    add_json_flag(parser)
    add_trainer_argument(parser)
    parser.set_defaults(func=run)


def published_itransformer() -> dict:
    """The published iTransformer ETTh1 H=96 figures (protocol.md §4)."""
    from damcha_ts.leaderboard.published import load_published

    table = load_published()
    return {metric: table.value(DATASET, "iTransformer", HORIZON, metric) for metric in ("mse", "mae")}


def run(args: argparse.Namespace) -> int:
    from damcha_ts.cli.fit import train_run
    from damcha_ts.training import RunConfig

    config = RunConfig.load(CONFIG, horizon=HORIZON, overrides=args.overrides)
    out_dir = Path(args.out)
    result = train_run("quickstart", config, out_dir, args)
    if result is None:  # a DDP rank but 0: rank 0 speaks for the run
        return 0
    result["published_itransformer"] = published = published_itransformer()
    print(json.dumps(result) if args.json else (  # --json: stdout holds the one JSON object
        f"\nDAMCHA-iTransformer on {DATASET}, horizon {HORIZON} (official iTransformer config, seed "
        f"{config.training.seed}; {result['epochs_run']} epochs, best {result['best_epoch'] + 1})\n"
        f"{'':34}{'MSE':>8}{'MAE':>8}\n"
        f"{'DAMCHA-iTransformer (this run)':34}{result['mse']:8.3f}{result['mae']:8.3f}\n"
        f"{'iTransformer (published)':34}{published['mse']:8.3f}{published['mae']:8.3f}\n"
        f"\nwall time {result['wall_seconds'] / 60:.1f} min, {result['seconds_per_epoch']:.0f} s/epoch\n"
        f"forecast plot: {result['plot']}\nmodel, metrics and logs: {out_dir}/"
    ))
    return 0
