"""What a ``damcha-ts`` user reads: library messages in the command line's words, each warning once.

The Python API names its keywords (``future= has 3 rows``, ``pass fill='ffill'``); on the command
line the same message names the flag that sets it (``--future has 3 rows``, ``pass --fill ffill``).
The translation is derived from the parser of the command that ran, so it only ever names flags
that command has; a data setting without a flag of its own becomes ``--set data.KEY=VALUE`` in the
commands that take ``--set``. Messages that carry their own command-line wording
(``DamchaError(cli=...)``) are shown as written.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import warnings
from collections.abc import Iterator, Mapping

# keyword=value: a quoted string, a [list], "..." or a bare word or number; or nothing ("future= has").
_KEYWORD = re.compile(r"(?<![\w.\-])([a-z][a-z_]*)=('[^']*'|\"[^\"]*\"|\[[^\]]*\]|\.\.\.|[^\s,;:()\[\]]+)?")
# Inside a call's parentheses the keyword is Python's, e.g. "Forecaster.fit(data, test_size=0)".
_OPEN_CALL = re.compile(r"\w\([^()]*$")
_ASIDE = re.compile(r"\s*\(command line: [^()]*\)")
# Flags whose name means something else than the Python keyword spelled the same (``--model DIR`` of
# predict, ``model=`` of the API; ``--data``, ``--input``, ...): a message's keyword is not them.
_NOT_KEYWORDS = {"help", "version", "config", "data", "dataset", "model", "input", "output", "out", "json"}


def command_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """Each keyword (an argument's ``dest``) → its flag, over the command that ran and its parents
    (``time_col`` → ``--time-col``); a command with ``--set`` also maps every data key without a
    flag to ``--set data.KEY=``."""
    flags: dict[str, str] = {}
    while parser is not None:
        commands = None
        for action in parser._actions:  # argparse keeps no public list of a parser's arguments
            if isinstance(action, argparse._SubParsersAction):
                commands = action
            elif action.option_strings and action.dest not in _NOT_KEYWORDS:
                flags.setdefault(action.dest, action.option_strings[0])
        parser = commands.choices.get(getattr(args, commands.dest, None)) if commands else None
    if "overrides" in flags:  # --set section.key=value
        from damcha_ts.training.config import KEYS

        flags.update({key: f"--set data.{key}=" for key in KEYS["data"] if key not in flags})
    return flags


def in_cli_words(text: str, flags: Mapping[str, str]) -> str:
    """``text`` with each ``keyword=value`` the command has a flag for written as that flag
    (``val_size=0.01`` → ``--val-size 0.01``, ``ignore=['a', 'b']`` → ``--ignore a,b``), and
    without the ``(command line: --flag)`` asides that then repeat it."""

    def flag(match: re.Match) -> str:
        keyword, value = match.group(1), match.group(2) or ""
        if keyword not in flags or _OPEN_CALL.search(text, 0, match.start()) or _inside_a_word(text, match.start()):
            return match.group(0)
        setting = flags[keyword].endswith("=")  # --set data.KEY=VALUE (YAML)
        if value in ("False", "None"):  # an on/off flag left off: resume=False
            return f"without {flags[keyword].rstrip('=')}"
        if value.startswith("["):  # --ignore a,b; --set data.KEY=[a,b]
            items = ",".join(item.strip().strip("'\"") for item in value[1:-1].split(",") if item.strip())
            value = "" if items == "..." else f"[{items}]" if setting else items
        unquoted = value.strip("'\"")
        # A value with a space keeps its quotes, so that it can be pasted into a shell as it stands.
        value = "" if value in ("...", "True") else value if unquoted != value and " " in unquoted else unquoted
        if setting:
            return flags[keyword] + (value or "...")
        return f"{flags[keyword]} {value}" if value else flags[keyword]

    translated = _KEYWORD.sub(flag, text)
    return _ASIDE.sub("", translated) if translated != text else text


def _inside_a_word(text: str, start: int) -> bool:
    """Whether the ``keyword=`` at ``start`` is part of a path, a quoted name or another setting
    (``/data/split=2024/x.csv``, ``column 'target=y'``): the text since the last space says so."""
    since_space = re.split(r"\s", text[:start])[-1]
    return any(mark in since_space for mark in "/\\'\"=")


@contextlib.contextmanager
def warnings_shown_once(flags: Mapping[str, str]) -> Iterator[None]:
    """Within it, each warning is shown once, in the command line's words. The same warning comes
    again when one command reads its data several times (a fit reads its CSV to size the model,
    to train and to calibrate), and Python's own once-per-place rule forgets what it showed
    whenever a filter changes."""
    shown: set[tuple[type, str]] = set()
    original = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        text = in_cli_words(str(message), flags)
        if (category, text) in shown:
            return
        shown.add((category, text))
        original(text if text != str(message) else message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = original
