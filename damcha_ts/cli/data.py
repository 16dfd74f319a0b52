"""``damcha-ts data info NAME``: what the protocol makes of a dataset.

Prints rows, variates, frequency, split borders, windows per split and the checksum status.
``NAME`` is a benchmark name or a CSV path. With ``--json``, stdout holds exactly one JSON
object; warnings and download progress go to stderr.
"""

from __future__ import annotations

import argparse
import json

from damcha_ts.cli.arguments import add_csv_arguments, add_json_flag, csv_options
from damcha_ts.data import checksum_status, describe, get_spec, prepare
from damcha_ts.data.options import ProtocolOptions


def register(subparsers) -> None:
    parser = subparsers.add_parser("data", help="inspect benchmark or user datasets")
    actions = parser.add_subparsers(dest="data_command", metavar="ACTION")
    actions.required = True
    info = actions.add_parser("info", help="rows, variates, frequency, borders, windows per split, checksum")
    info.add_argument("name", metavar="NAME", help="benchmark name (ETTh1, Weather, ECL, ...) or CSV path")
    info.add_argument("--seq-len", "--lookback", dest="seq_len", type=int, default=ProtocolOptions.seq_len,
                      help="lookback L (default %(default)s)")
    info.add_argument("--pred-len", "--horizon", dest="pred_len", type=int, default=ProtocolOptions.pred_len,
                      help="horizon H (default %(default)s)")
    add_csv_arguments(info)
    add_json_flag(info)
    info.set_defaults(func=run_info)


def summary(name: str, seq_len: int, pred_len: int, **read_options) -> dict:
    """The facts ``data info`` prints, as a JSON-ready dict (``read_options``: how to read a CSV)."""
    data = prepare(name, seq_len=seq_len, pred_len=pred_len, **read_options)
    result = describe(data)
    if data.dataset is not None:
        spec = get_spec(data.dataset)
        result["split"] = spec.split
        result["checksum"] = {"algorithm": "sha256", **checksum_status(data.source, spec)}
    else:
        result["split"] = "custom (70/10/20)"
        result["checksum"] = {"algorithm": "sha256", "status": "not applicable (user data)", "expected": None, "actual": None}
    return result


def run_info(args: argparse.Namespace) -> int:
    result = summary(args.name, args.seq_len, args.pred_len, **csv_options(args))
    if args.json:
        print(json.dumps(result))
        return 0
    borders = "  ".join(f"{s} [{b1}, {b2})" for s, (b1, b2) in result["borders"].items())
    windows = "  ".join(f"{s} {n}" for s, n in result["windows"].items())
    checksum = result["checksum"]
    lines = [
        f"dataset     {result['name']}  ({result['source']})",
        f"rows        {result['rows']} ({result['rows_used']} used)   variates {result['variates']}   freq {result['freq']}",
        f"span        {result['first_timestamp']} -> {result['last_timestamp']}",
        f"split       {result['split']}   L={result['seq_len']}  H={result['pred_len']}",
        *([f"entities    {result['entities']} (column {result['entity_col']!r}), each split on its own; rows, "
           "borders and windows are their sums"] if "entities" in result else []),
        f"borders     {borders}",
        f"windows     {windows}",
        f"checksum    {checksum['status']}" + (f" (sha256 {checksum['actual']})" if checksum["actual"] else ""),
    ]
    print("\n".join(lines))
    return 0
