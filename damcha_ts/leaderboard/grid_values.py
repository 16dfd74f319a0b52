"""The checks of a grid file's values: each returns the value (canonicalised) or raises a
ConfigError that says where in the file the bad value is (``where``)."""

from __future__ import annotations

import math

from damcha_ts.baselines import METHODS as NAIVE_METHODS
from damcha_ts.data.registry import get_spec
from damcha_ts.errors import ConfigError
from damcha_ts.models.registry import BASELINE_NAMES, MODEL_NAMES, VARIANT_NAMES
from damcha_ts.schema import yaml_number


def int_list(value, where: str, minimum: int = 0) -> tuple[int, ...]:
    """A non-empty list of distinct integers ≥ ``minimum`` (YAML's true/false are not integers)."""
    if (not isinstance(value, (list, tuple)) or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value)):
        raise ConfigError(f"{where}: expected a non-empty list of integers ≥ {minimum}, got {value!r}")
    if len(set(value)) != len(value):
        raise ConfigError(f"{where}: {value!r} lists a value twice")
    return tuple(value)


def str_list(value, where: str) -> tuple[str, ...]:
    """A list of strings; a bare string is an error (it would otherwise be read letter by letter)."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def nonempty_text(value, where: str, allow_empty: bool = False) -> str:
    """A string with more than blanks in it (any string with ``allow_empty``)."""
    if not isinstance(value, str) or not (value.strip() or allow_empty):
        raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def positive_number(value, where: str) -> float:
    value = yaml_number(value)  # YAML 1.1 reads 1e-2 as a string
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: expected a positive number, got {value!r}")
    return value


def dataset_list(value, where: str, allow_empty: bool = False) -> tuple[str, ...]:
    """Distinct dataset names of the data registry, canonicalised."""
    names = str_list(value, where)
    if not names and not allow_empty:
        raise ConfigError(f"{where}: expected a non-empty list of dataset names, got {value!r}")
    canonical = tuple(canonical_dataset(name, where) for name in names)
    if len(set(canonical)) != len(canonical):
        raise ConfigError(f"{where}: {list(names)!r} lists a dataset twice")
    return canonical


def row_name(value, where: str) -> str:
    """A row some grid produces by default: a model name or a naive method."""
    if value not in (*MODEL_NAMES, *VARIANT_NAMES, *BASELINE_NAMES, *NAIVE_METHODS):
        raise ConfigError(f"{where} {value!r} is not one of {[*MODEL_NAMES, *VARIANT_NAMES, *BASELINE_NAMES, *NAIVE_METHODS]}")
    return value


def optional_mapping(value, where: str) -> dict:
    """A mapping, copied; an absent one is empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    return dict(value)


def canonical_dataset(name: str, where: str) -> str:
    """A dataset name as the data registry spells it (``etth1`` -> ``ETTh1``)."""
    try:
        return get_spec(name).name
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
