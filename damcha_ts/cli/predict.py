"""``damcha-ts predict --model DIR --input history.csv --output forecast.csv``: forecast the future.

DIR is a directory written by ``damcha-ts fit`` (or ``Forecaster.save``). The input CSV holds the
recent history in the layout the model was fitted on: wide (a time column and the same variate
columns) or long (``--id-col``, ``--time-col``, ``--value-col``). Without ``--input`` the forecast
continues the data the model was trained on. The output CSV has the ``horizon`` rows after the last
input timestamp, in the input's layout and with its delimiter. With ``--json`` stdout holds one JSON object describing it.
A model fitted with ``--future-covariates`` needs ``--future CSV``: those columns at the forecast
timestamps (``damcha-ts predict`` says which when it is missing). ``--level 80 95`` adds calibrated prediction intervals: ``<variate>-lo-80`` / ``<variate>-hi-80``
columns (wide), ``<value column>-lo-80`` / ``-hi-80`` (long); see ``damcha_ts.forecasting.intervals``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from damcha_ts.cli.arguments import (
    add_command,
    add_csv_arguments,
    add_json_flag,
    add_model_dir_argument,
    check_output_file,
    csv_options,
)
from damcha_ts.data.csv_files import csv_separator, read_csv_frame
from damcha_ts.errors import DataError
from damcha_ts.files import write_atomically


def register(subparsers) -> None:
    parser = add_command(subparsers, "predict", "forecast the steps after a history CSV with a saved model", __doc__)
    add_model_dir_argument(parser)
    parser.add_argument("--input", metavar="CSV", help="history CSV (default: continue the training data)")
    parser.add_argument("--output", metavar="CSV", help="forecast CSV to write (default: print the CSV on stdout; with --json, print it on stderr)")
    parser.add_argument("--future", metavar="CSV",
                        help="values of the model's future covariates at the forecast timestamps (a time column and "
                             "those columns), for a model fitted with --future-covariates")
    parser.add_argument("--level", metavar="PERCENT", type=float, nargs="+",
                        help="prediction interval levels in percent, e.g. --level 80 95 (calibrated on validation windows)")
    add_csv_arguments(parser)
    add_json_flag(parser, "a JSON summary")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from damcha_ts.forecasting import Predictor, predict
    from damcha_ts.forecasting.intervals import check_levels, require_calibration

    predictor = Predictor.load(args.model)
    meta = predictor.meta
    level = check_levels(args.level, argument="--level") or None
    require_calibration(predictor, level)
    output = check_output_path(args, meta.data_config) if args.output else None
    options = csv_options(args)
    future = None
    if args.future is not None:
        future = read_csv_frame(args.future, sep=options.get("sep", meta.input_options.get("sep")))
    if args.input is None:
        if meta.input_kind == "numpy":
            raise DataError(
                f"--model {args.model} was fitted on a NumPy array, which has no CSV layout to continue; "
                "pass the recent history with --input history.csv"
            )
        forecast = predict(predictor, future=future, level=level)
    else:
        # Read as a frame so that the forecast comes back in the file's own layout; errors about
        # it still name the file and line.
        sep = options.get("sep", meta.input_options.get("sep"))  # as given at fit time
        forecast = predict(predictor, read_csv_frame(args.input, sep=sep), future=future, level=level, **options)
    # Wide forecasts are indexed by their timestamps; long ones carry a time column. The forecast
    # is written with the delimiter the history was read with (--sep, or the fit input's).
    wide = isinstance(forecast.index, pd.DatetimeIndex)
    history_file = args.input or (meta.data_config or {}).get("dataset")
    sep = _output_separator(history_file, options.get("sep", meta.input_options.get("sep")))
    if output is not None:
        write_atomically(output, forecast.to_csv(index=wide, sep=sep))
    else:  # stdout holds the one JSON object with --json, so the forecast goes to stderr then
        forecast.to_csv(sys.stderr if args.json else sys.stdout, index=wide, sep=sep)
    if args.json:
        print(json.dumps(_summary(predictor, forecast, args.output)))
    elif args.output:
        print(f"wrote {len(forecast)} rows to {args.output}", file=sys.stderr)
    return 0


def _summary(predictor, forecast: pd.DataFrame, output: str | None) -> dict:
    """The ``--json`` object: what was forecast, how many rows, from when to when."""
    # A long forecast keeps the input's column order, so find its time column by type.
    wide = isinstance(forecast.index, pd.DatetimeIndex)
    times = forecast.index if wide else next(
        forecast[c] for c in forecast.columns if pd.api.types.is_datetime64_any_dtype(forecast[c])
    )
    return {"model": predictor.model.name, "horizon": predictor.horizon, "output": output, "rows": len(forecast),
            "columns": [str(c) for c in forecast.columns], "first_timestamp": str(times.min()),
            "last_timestamp": str(times.max())}


def _output_separator(source, given: str | None) -> str:
    """The delimiter of the history CSV (given, or detected from its header as when it is read); a comma
    when the history is no CSV file (a benchmark name, an array)."""
    if source is None or not Path(str(source)).expanduser().is_file():
        return given or ","
    return csv_separator(Path(str(source)).expanduser(), given)[0]


def check_output_path(args: argparse.Namespace, data_config) -> Path:
    """Before anything is written: ``--output`` is none of the files predict reads (the history it
    continues, the ``--future`` covariates, the model's training data, ``data_config["dataset"]``)
    nor a file of the saved model or beside it."""
    from damcha_ts.training.artifacts import HISTORY_FILE, META_FILE, WEIGHTS_FILE, model_directory

    reads = {}
    if args.input is not None:
        reads[f"--input {args.input} (the history the forecast continues)"] = args.input
    if args.future is not None:
        reads[f"--future {args.future}"] = args.future
    training_data = (data_config or {}).get("dataset")
    if training_data:
        reads[f"{training_data}, the data --model {args.model} was trained on"] = training_data
    # The folder given and, for a run folder, its model/ folder: the saved files and any file beside them.
    for folder in {Path(args.model).expanduser(), model_directory(args.model)}:
        names = {META_FILE, WEIGHTS_FILE, HISTORY_FILE} | {p.name for p in folder.iterdir() if p.is_file()}
        reads.update({f"{path}, a file of --model {args.model}": path for path in sorted(folder / n for n in names)})
    return check_output_file(args.output, reads)
