"""Labels that become file names, and the proof that a path built from them stays in its folder.

Grid names, model labels and dataset names end up in run folders, prediction samples and plot
files. They come from grid files, from other machines' results CSVs (``--merge``) and from a shared
storage's trial attributes, so each is checked with :func:`safe_name`, the one rule for all of them;
every writer of a sample or plot path builds it with :func:`inside`, so that even a label that got past
the rule cannot lead a write out of its folder.
"""

from __future__ import annotations

import re
from pathlib import Path

from damcha_ts.errors import ConfigError, DamchaError, DataError

_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def safe_name(value, where: str, error: type[DamchaError] = ConfigError) -> str:
    """``value`` as text when it may name a file or folder: letters, digits, '_', '-' and '.', not
    starting with '.' or '-' (so no '..', no separator, no hidden file); else ``error`` naming ``where``."""
    text = str(value)
    if not _SAFE_NAME.fullmatch(text):
        raise error(f"{where}: {text!r} may only use letters, digits, '_', '-' and '.' (it names files and folders)")
    return text


def inside(folder: str | Path, name: str) -> Path:
    """``folder / name``, proved to stay inside ``folder`` once '..' and links are resolved; a
    DataError otherwise, before anything is written there."""
    folder = Path(folder)
    path = folder / name
    if not path.resolve().is_relative_to(folder.resolve()):
        raise DataError(f"{path} is outside {folder}: refused, nothing is written there")
    return path
