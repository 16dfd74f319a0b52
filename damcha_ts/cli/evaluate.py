"""``damcha-ts evaluate --model DIR [--dataset NAME]``: test metrics of a saved model.

Without ``--dataset`` the model is scored on the test split of the data it was trained on (a
benchmark keeps its protocol split). ``--dataset`` scores it on another benchmark or CSV under the
same settings (its scaler fitted on its own train rows). ``--split`` picks train, val or test. With
``--json`` stdout holds exactly one JSON object.
"""

from __future__ import annotations

import argparse
import json

from damcha_ts.cli.arguments import add_command, add_csv_arguments, add_json_flag, add_model_dir_argument, csv_options


def register(subparsers) -> None:
    parser = add_command(subparsers, "evaluate", "MSE/MAE of a saved model over every window of a split", __doc__)
    add_model_dir_argument(parser)
    parser.add_argument("--dataset", help="benchmark name or CSV path (default: the training data)")
    parser.add_argument("--split", default="test", choices=("train", "val", "test"), help="which split (default test)")
    parser.add_argument("--level", metavar="PERCENT", type=float, nargs="+",
                        help="also score calibrated intervals at these levels: coverage_80, width_80, ... "
                             "(and pinball loss / wql for a quantile model)")
    add_csv_arguments(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from damcha_ts.api import Forecaster
    from damcha_ts.forecasting.intervals import check_levels

    forecaster = Forecaster.load(args.model)
    level = check_levels(args.level, argument="--level") or None
    scores = forecaster.evaluate(args.dataset, split=args.split, level=level, **csv_options(args))
    result = {"model": forecaster.model_config["name"], "horizon": forecaster.horizon, **scores}
    print(json.dumps(result) if args.json else (  # --json: stdout holds the one JSON object
        f"{result['model']} on {result['dataset']} ({args.split}, H={result['horizon']}): MSE {result['mse']:.4f}  "
        f"MAE {result['mae']:.4f} over {result['windows']} windows "
        f"(original scale: MSE {result['mse_inverse']:.4f}  MAE {result['mae_inverse']:.4f})"
        + "".join(f"\n{key[len('coverage_'):]} % interval: coverage {result[key]:.3f}, mean width "
                  f"{result['width_' + key[len('coverage_'):]]:.3f}"
                  for key in result if key.startswith("coverage_") and not key.endswith("_uncalibrated"))
    ))
    return 0
