"""``damcha-ts baseline NAME --method {repeat-last,window-mean} --pred-len H``.

Test-split MSE and MAE of a naive forecast under the protocol (z-scale, every window), plus the
raw-scale errors and the window count. With ``--json``, stdout holds exactly one JSON object.
"""

from __future__ import annotations

import argparse
import json

from damcha_ts.baselines import METHODS, evaluate_naive
from damcha_ts.cli.arguments import add_csv_arguments, add_json_flag, csv_options
from damcha_ts.data import prepare
from damcha_ts.data.options import ProtocolOptions

# The command line spells a method with dashes (repeat-last), as it does every flag.
CLI_METHODS = {method.replace("_", "-"): method for method in METHODS}


def register(subparsers) -> None:
    parser = subparsers.add_parser("baseline", help="test MSE/MAE of a naive forecast under the protocol")
    parser.add_argument("name", metavar="NAME", help="benchmark name (ETTh1, Weather, ECL, ...) or CSV path")
    parser.add_argument("--method", required=True, choices=sorted(CLI_METHODS), help="naive forecast to score")
    parser.add_argument("--seq-len", "--lookback", dest="seq_len", type=int, default=ProtocolOptions.seq_len,
                        help=f"lookback L (default {ProtocolOptions.seq_len})")
    parser.add_argument("--pred-len", "--horizon", dest="pred_len", type=int, required=True, help="horizon H")
    add_csv_arguments(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    data = prepare(args.name, seq_len=args.seq_len, pred_len=args.pred_len, **csv_options(args))
    scores = evaluate_naive(data, CLI_METHODS[args.method], split="test")
    scores.pop("method")  # reported under its command-line spelling
    result = {"dataset": data.name, "method": args.method, "seq_len": data.seq_len, "pred_len": data.pred_len, **scores}
    print(json.dumps(result) if args.json else (  # --json: stdout holds the one JSON object
        f"{result['dataset']} {args.method} L={data.seq_len} H={data.pred_len}: test MSE {result['mse']:.4f}  "
        f"MAE {result['mae']:.4f}  over {result['windows']} windows "
        f"(raw scale: MSE {result['mse_raw']:.4f}  MAE {result['mae_raw']:.4f})"
    ))
    return 0
