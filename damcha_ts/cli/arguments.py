"""Arguments that several sub-commands share, so each is spelled and documented once."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Mapping
from pathlib import Path

from damcha_ts.errors import ConfigError
from damcha_ts.files import same_file


def add_command(subparsers, name: str, help: str, description: str | None) -> argparse.ArgumentParser:
    """A sub-command parser whose description (the module docstring) keeps its line breaks."""
    return subparsers.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def add_json_flag(parser: argparse.ArgumentParser, what: str = "one JSON object") -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} on stdout")


def add_resume_argument(parser: argparse.ArgumentParser) -> None:
    """``--resume`` of a command that trains into ``--out`` (a stopped run names it)."""
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoints/last.ckpt")


def add_model_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="DIR", help="model directory (from damcha-ts fit --out DIR)")


def add_csv_arguments(parser: argparse.ArgumentParser) -> None:
    """How to read a user CSV (the ``load_frame`` options); collected by :func:`csv_options`."""
    group = parser.add_argument_group("reading a CSV")
    group.add_argument("--time-col", help="name of the time column (default: date/time/timestamp/datetime/ds)")
    group.add_argument("--date-format", help="strptime format of the time column, e.g. %%d/%%m/%%Y %%H:%%M")
    group.add_argument("--id-col", help="series id column of a long CSV")
    group.add_argument("--value-col", help="value column of a long CSV")
    group.add_argument("--fill", choices=("ffill", "interpolate", "zero"), help="how to fill NaN/inf values")
    group.add_argument("--allow-irregular", action="store_true", help="keep duplicate or off-step timestamps")
    group.add_argument("--ignore", type=column_list, metavar="COL[,COL...]",
                       help="columns to leave out (a long CSV holds only its id, time and value columns)")
    group.add_argument("--sep", type=_separator, metavar="CHAR",
                       help="the CSV delimiter, e.g. ';' or '\\t' (default: detected from the header among , ; tab |)")


def csv_options(args: argparse.Namespace) -> dict:
    """The ``add_csv_arguments`` flags that were given, as ``load_frame`` / ``prepare`` keywords."""
    names = ("time_col", "date_format", "id_col", "value_col", "fill", "ignore", "sep")
    options = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.id_col or args.value_col:
        options["layout"] = "long"
    if args.allow_irregular:
        options["allow_irregular"] = True
    return options


def check_output_file(output: str, reads: Mapping[str, str | Path], flag: str = "--output") -> Path:
    """Before anything is written: ``flag``'s file can be written and is none of the files the
    command reads (``reads``: each as the user knows it, e.g. ``"--future F"``, to its path), also
    under another name (a link, ``./x`` for ``x``): writing it would destroy what the command read.
    Returns the path to write."""
    path = Path(output).expanduser()
    if not path.parent.is_dir():
        raise ConfigError(f"{flag} {output}: its folder does not exist")
    if path.is_dir():
        raise ConfigError(f"{flag} {output}: is a folder; name the file to write")
    for what, source in reads.items():
        if same_file(path, source):
            raise ConfigError(f"{flag} {output} is the same file as {what}, which this command reads; "
                              f"name another file for {flag}")
    return path


def column_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r}: give column names separated by commas, e.g. temp,humidity")
    return names


def _separator(text: str) -> str:
    # A tab is hard to type in a shell: '\t' and 'tab' name it too.
    return "\t" if text in ("\\t", "tab") else text


def add_overrides_argument(parser, example: str = "training.max_epochs=3", scope: str = "") -> None:
    """``--set KEY=VALUE`` (repeatable), collected in ``args.overrides``."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help=f"override a config value{scope}, e.g. --set {example} (repeatable; values are YAML)",
    )


def add_scale_out_arguments(parser: argparse.ArgumentParser) -> None:
    """Lightning Trainer flags for multi-device / multi-node runs (no code changes needed)."""
    group = parser.add_argument_group("hardware (passed to lightning.Trainer)")
    group.add_argument("--accelerator", help="cpu, gpu, auto ... (default: the config's, auto)")
    group.add_argument("--devices", help="number of devices or 'auto' (DDP when > 1)")
    group.add_argument("--num-nodes", type=int, help="machines for multi-node DDP (launch with torchrun/srun)")
    group.add_argument("--strategy", help="ddp, ddp_spawn, auto ... (default: the config's, auto)")
    group.add_argument("--precision", help="32-true, bf16-mixed, 16-mixed (default: bf16-mixed on CUDA, else 32-true)")


def add_trainer_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trainer", dest="trainer_kwargs", action="append", default=[], metavar="KEY=VALUE",
        help="extra lightning.Trainer argument, e.g. --trainer limit_train_batches=50 (repeatable; values are YAML)",
    )


def trainer_kwargs(args: argparse.Namespace) -> dict:
    """``--trainer key=value`` pairs as a dict of YAML-parsed values."""
    import yaml

    result = {}
    for text in args.trainer_kwargs:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--trainer {text!r} must look like key=value")
        try:
            result[key.strip()] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError as exc:
            raise ConfigError(f"--trainer {text!r}: the value is not valid YAML ({exc.problem})") from None
    if result:
        import lightning

        valid = inspect.signature(lightning.Trainer).parameters
        unknown = [key for key in result if key not in valid]
        if unknown:
            raise ConfigError(f"--trainer: {', '.join(unknown)} is not a lightning.Trainer argument "
                              f"(see help(lightning.Trainer))")
    return result


def scale_out_settings(args: argparse.Namespace) -> dict:
    """The device flags that were given, as ``training`` settings (validated by the run config)."""
    names = ("accelerator", "devices", "num_nodes", "strategy", "precision")
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
