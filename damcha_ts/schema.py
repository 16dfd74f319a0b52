"""The rules every settings file and keyword obeys, in one place: unknown keys, YAML scalars,
plain values, and where the shipped YAML files (run configs, leaderboard grids, search spaces) live.

    reject_unknown_keys({"epochs": 3}, ["max_epochs", "patience"], "training")
    # ConfigError: unknown key 'training.epochs'; did you mean max_epochs? (valid keys: max_epochs, patience)
    find_shipped("grid", "ett")      # configs/leaderboard/ett.yaml
    load_shipped("search", "quick")  # the YAML mapping of configs/search/quick.yaml

Nothing here imports torch or pandas: configs are read before anything heavy loads.
"""

from __future__ import annotations

import datetime
import difflib
import numbers
import re
import types
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePath
from typing import Any, Union, get_args, get_origin

from damcha_ts.errors import ConfigError, plain_repr

#: The model ``Forecaster(...)`` and ``damcha-ts fit --data FILE`` train when none is named, chosen on
#: the public user-data benchmark (issue 34; benchmarks/results/user_data_candidates.md): under the
#: user-data recipe its mean geometric-mean MASE over seeds 0-4 is 0.618, against 0.626 for
#: gateformer_damcha and 0.642 for itransformer_damcha_static (on one to three variates a
#: variate-token model has little to attend over; the Gateformer's temporal stage attends over
#: patches). Here, not in models/registry.py, so that the constructor's default loads no torch.
DEFAULT_MODEL = "gateformer_damcha_gated"

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_INTEGER = re.compile(r"^[+-]?\d+$")


def reject_unknown_keys(values: Iterable[str], valid: Iterable[str], where: str, *, source: str | None = None) -> None:
    """ConfigError for the first key of ``values`` not in ``valid``, with close-name suggestions.

    ``where`` is the dotted place of the mapping (``"training"``, ``"models[0]"``); ``source`` the
    file it came from, put in front of the message.
    """
    valid = [str(v) for v in valid]
    for key in values:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            prefix = f"{source}: " if source else ""
            place = f"{where}.{key}" if where else str(key)
            raise ConfigError(f"{prefix}unknown key {place!r}{hint} (valid keys: {', '.join(valid)})")


def yaml_number(value: Any) -> Any:
    """A number written as text becomes a number: YAML 1.1 reads ``1e-4`` as a string."""
    if isinstance(value, str) and _NUMBER.match(value):
        return int(value) if _INTEGER.match(value) else float(value)
    return value


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """``value`` as the annotated type (``int``, ``float``, ``bool``, ``str``, optionals of them),
    accepting what YAML and command lines produce (``"1e-4"``, ``"true"``, ``"null"``, ``3.0``)."""
    options = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null") and type(None) in options):
        if type(None) in options:
            return None
        raise ConfigError(f"{where} must not be null")
    for option in options:
        if option is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
        elif option is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, str) and _INTEGER.match(value):
                return int(value)
            if isinstance(value, float) and value.is_integer():
                return int(value)
        elif option is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, str) and _NUMBER.match(value):
                return float(value)
        elif option is str and isinstance(value, str):
            return value
    names = " or ".join(getattr(o, "__name__", str(o)) for o in options)
    raise ConfigError(f"{where}={value!r} is not a valid {names}")


def positive_int(value: Any, argument: str, expected: str = "a positive integer") -> int:
    """``value`` as an int >= 1, or a ConfigError naming ``argument``: a Python or NumPy integer,
    never a bool (``True`` is no count) nor a float (``2.5`` would be cut silently, so ``2.0`` is
    refused too). ``expected``: what the message says the argument must be."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ConfigError(f"{argument} must be {expected}, got {plain_repr(value)}")
    return int(value)


def plain_values(value: Any) -> Any:
    """A copy as plain YAML/JSON data, recursively: mappings to dicts, tuples to lists, paths and
    timestamps to strings. Configs, saved metadata and search values compare equal after a round trip."""
    if isinstance(value, Mapping):
        return {k: plain_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_values(v) for v in value]
    if isinstance(value, (PurePath, datetime.date)):  # pd.Timestamp is a datetime.datetime
        return str(value)
    return value


# ---------------------------------------------------------------------------- shipped YAML files
def _find_shipped_root() -> Path:
    """The checkout's ``configs/`` (editable installs, CI), else the copy a built wheel carries."""
    checkout = Path(__file__).resolve().parents[1] / "configs"
    return checkout if checkout.is_dir() else Path(__file__).resolve().parent / "configs"


#: ``configs/`` at the repository root; setup.py copies it into wheels.
SHIPPED_ROOT = _find_shipped_root()

#: kind -> (folder under SHIPPED_ROOT, what the files are called in messages)
SHIPPED_KINDS = {"config": ("", "config"), "grid": ("leaderboard", "leaderboard grid"), "search": ("search", "search file")}
# Run configs are every file outside these folders (and outside _base/, the shared bases).
_NOT_RUN_CONFIGS = ("leaderboard", "search")


def available_shipped(kind: str) -> list[str]:
    """Names of the shipped files of a kind: ``"itransformer_damcha/etth1"``, ``"ett"``, ``"quick"``."""
    folder = SHIPPED_ROOT / _kind(kind)[0]
    if not folder.is_dir():
        return []
    names = (path.relative_to(folder).with_suffix("") for path in folder.rglob("*.yaml"))
    if kind == "config":
        names = (n for n in names if not n.parts[0].startswith("_") and n.parts[0] not in _NOT_RUN_CONFIGS)
    return sorted(str(name) for name in names)


def find_shipped(kind: str, name: str | Path) -> Path:
    """A YAML file from a path, or a shipped name of ``kind`` (``grid``: ``"ett"`` or ``"leaderboard/ett"``).

    Raises ConfigError naming the closest shipped names when it is neither.
    """
    folder, label = _kind(kind)
    path = Path(name).expanduser()
    if path.is_file():
        return path
    text = str(name)
    if folder:
        text = text.removeprefix(f"{folder}/")
    if not text.endswith((".yaml", ".yml")):
        shipped = SHIPPED_ROOT / folder / f"{text}.yaml"
        if shipped.is_file():
            return shipped
    names = available_shipped(kind)
    close = difflib.get_close_matches(text.lower(), names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f" (shipped: {', '.join(names)})"
    raise ConfigError(f"{label} {str(name)!r} is neither a file nor a shipped {label}{hint}")


def load_shipped(kind: str, name: str | Path) -> tuple[Path, Any]:
    """(the file, its YAML content) for a path or shipped name; ConfigError for invalid YAML."""
    path = find_shipped(kind, name)
    return path, read_yaml(path)


def read_yaml(path: Path) -> Any:
    """A YAML file's content; ConfigError naming the file when it is not valid YAML."""
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc


def _kind(kind: str) -> tuple[str, str]:
    if kind not in SHIPPED_KINDS:
        raise ValueError(f"kind must be one of {sorted(SHIPPED_KINDS)}, got {kind!r}")
    return SHIPPED_KINDS[kind]
