"""Entry point of the ``damcha-ts`` console script.

Every sub-command module in ``COMMAND_MODULES`` exposes ``register(subparsers)``, which adds its
parser and sets ``func`` (called with the parsed namespace, returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from damcha_ts import __version__
from damcha_ts.cli.messages import command_flags, in_cli_words, warnings_shown_once
from damcha_ts.errors import DamchaError, Stopped

COMMAND_MODULES = ("data", "baseline", "tune", "leaderboard", "fit", "predict", "evaluate", "quickstart")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="damcha-ts",
        description="Multivariate forecasting with DAMCHA attention (iTransformer / Gateformer).",
    )
    parser.add_argument("--version", action="version", version=f"damcha-ts {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"damcha_ts.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    flags = command_flags(parser, args)
    try:
        with warnings_shown_once(flags):
            return int(args.func(args) or 0)
    except Stopped as exc:  # a training command's SIGTERM or Ctrl+C (cli/fit.py: training_command)
        if hasattr(signal, "SIGCHLD"):
            # The command ends here. DataLoader workers the same signal ended are reaped from now on,
            # and torch's SIGCHLD handler would raise that as an error (before this fix: once in the
            # middle of the message below, under CI load), so it goes first.
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        print(f"damcha-ts {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`damcha-ts ... | head`): stop quietly, and keep Python from
        # complaining again while it flushes stdout on exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        # A path the user gave that cannot be read or written: the OS message names it.
        print(f"damcha-ts: error: {exc}", file=sys.stderr)
        _print_notes(exc)
        return 2
    except (ValueError, KeyError, RuntimeError) as exc:
        # Library errors already name the file/column/argument; show them without a traceback.
        if isinstance(exc, DamchaError):
            message = exc.cli or in_cli_words(str(exc), flags)  # Python's keywords as this command's flags
            print(f"damcha-ts: error: {message}", file=sys.stderr)
            _print_notes(exc)
            return 2
        raise


def _print_notes(exc: BaseException) -> None:
    """What the command added to the error (``add_note``), as a traceback would show it."""
    for note in getattr(exc, "__notes__", ()):
        print(f"damcha-ts {note}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
