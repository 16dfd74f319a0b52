"""The data settings of a run, typed: how to read a source (:class:`ReadOptions`) and how the
protocol cuts it into windows (:class:`ProtocolOptions`). Config files, the command line and the
``Forecaster`` keywords all become these two objects; ``load_frame`` and ``prepare`` read them as
keywords (``options.keywords()``).

    read = ReadOptions.from_mapping({"time_col": "ts", "sep": ";"}, where="data")
    protocol = ProtocolOptions.from_mapping({"seq_len": 96, "pred_len": 24, "features": "MS"})
    series = prepare("my.csv", **protocol.keywords(), **read.keywords())

A read option left at None was not given: the loader's own default applies, and it is not written
into a saved config (so configs that never set it hash as before it existed).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_type_hints

from damcha_ts.errors import ConfigError, plain_repr
from damcha_ts.schema import coerce, positive_int, reject_unknown_keys

FEATURE_MODES = ("M", "S", "MS")
LAYOUTS = ("auto", "wide", "long")
FILL_POLICIES = ("ffill", "interpolate", "zero")


def check_features(features: Any) -> None:
    if features not in FEATURE_MODES:
        raise ConfigError(f"features must be one of {FEATURE_MODES}, got {features!r}")


def check_layout(layout: Any) -> None:
    if layout not in LAYOUTS:
        raise ConfigError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def check_fill(fill: Any) -> None:
    if fill is not None and fill not in FILL_POLICIES:
        raise ConfigError(f"fill must be None or one of {FILL_POLICIES}, got {fill!r}")


def check_size(name: str, value: Any, *, where: str = "") -> int | float | None:
    """``val_size`` / ``test_size`` as given: None, a number of rows (an integer >= 0; ``3.0`` is 3
    rows) or a fraction of the rows in (0, 1); returned as an int (rows) or a float (fraction)."""
    if value is None:
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and value >= 0:
        if float(value).is_integer():
            return int(value)
        if value < 1:
            return float(value)
    raise ConfigError(
        f"{where}{name} must be a number of rows (an integer >= 0) or a fraction of the rows in (0, 1), got {plain_repr(value)}"
    )


def _typed_fields(cls, values: Mapping[str, Any], where: str, *, lists: tuple[str, ...] = ()) -> dict:
    """``values`` checked against ``cls``'s fields: unknown keys refused, scalars coerced to their
    annotated type (YAML's ``"1e-4"``, ``"true"``), ``lists`` kept as tuples of strings."""
    reject_unknown_keys(values, [f.name for f in dataclasses.fields(cls)], where)
    hints = get_type_hints(cls)
    typed = {}
    for name, value in values.items():
        if name in lists:
            typed[name] = _names(value, f"{where}.{name}")
        elif hints[name] is Any:
            typed[name] = value
        else:
            typed[name] = coerce(value, hints[name], f"{where}.{name}")
    return typed


def _names(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)  # one name
    if isinstance(value, bytes) or not hasattr(value, "__iter__"):
        raise ConfigError(f"{where}={value!r}: expected a list of column names")
    return tuple(str(v) for v in value)


@dataclass(frozen=True)
class ReadOptions:
    """How ``load_frame`` reads a benchmark, CSV, frame or array (see its docstring for each key).

    ``fill`` (NaN/inf policy) and ``allow_irregular`` (keep duplicate or off-step timestamps) are
    always part of a run's settings; the others only when given.
    """

    path: str | None = None  # where a benchmark's file lies (overrides the search)
    download: bool | None = None
    time_col: str | None = None
    date_format: str | None = None
    layout: str | None = None  # "auto" | "wide" | "long"
    id_col: str | None = None
    value_col: str | None = None
    freq: str | None = None
    start: str | None = None
    columns: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    sep: str | None = None
    fill: str | None = None
    allow_irregular: bool = False

    #: Always written into a run's data section (``prepare`` has them as its own keywords).
    ALWAYS = ("fill", "allow_irregular")

    def __post_init__(self) -> None:
        if self.layout is not None:
            check_layout(self.layout)
        check_fill(self.fill)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, where: str = "data") -> ReadOptions:
        values = {k: (str(v) if k in ("path", "start") and v is not None else v) for k, v in values.items()}
        return cls(**_typed_fields(cls, values, where, lists=("columns", "ignore")))

    def given(self) -> dict:
        """The options that were given, plus ``fill`` and ``allow_irregular``; lists as lists."""
        return {
            f.name: list(value) if isinstance(value, tuple) else value
            for f in dataclasses.fields(self)
            if (value := getattr(self, f.name)) is not None or f.name in self.ALWAYS
        }

    keywords = given  # load_frame's keyword arguments: what was not given keeps its default


@dataclass(frozen=True)
class ProtocolOptions:
    """How ``prepare`` turns a frame into model windows: lookback, horizon, which columns go in and
    out, the time marks and the split. ``split`` None is the benchmark's own split (70/10/20 for user
    data); its shape (a kind, fractions or borders) is checked against the data by ``prepare``."""

    seq_len: int = 96
    pred_len: int = 96
    features: str = "M"  # M: all in, all out; MS: all in, target out; S: target only
    target: str = "OT"
    time_features_freq: str | None = "h"  # None: the data's own frequency
    split: Any = None
    # The validation and test tails instead of ``split``: an integer is a number of time steps
    # (rows; for long data, per id), a number in (0, 1) a fraction of the rows. ``test_size=0``
    # trains on everything but the validation tail. None: the default split's size.
    val_size: int | float | None = None
    test_size: int | float | None = None
    # Columns the model reads and never forecasts or scores (data/covariates.py): ``past_covariates``
    # are known up to the forecast origin, ``future_covariates`` over the horizon too.
    past_covariates: tuple[str, ...] | None = None
    future_covariates: tuple[str, ...] | None = None
    # Many entities with the same variates (data/entities.py): the column naming each entity, its
    # per-entity constants, and whether each entity has its own scaler ("entity") or all share one.
    entity_col: str | None = None
    static_covariates: tuple[str, ...] | None = None
    scaler: str | None = None

    #: Written into a run's data section only when given, so that configs without them hash as before.
    GIVEN_ONLY = ("val_size", "test_size", "past_covariates", "future_covariates", "entity_col",
                  "static_covariates", "scaler")
    SIZES = ("val_size", "test_size")

    def __post_init__(self) -> None:
        for name in ("seq_len", "pred_len"):
            object.__setattr__(self, name, positive_int(getattr(self, name), f"data.{name}"))
        check_features(self.features)
        for name in self.SIZES:
            check_size(name, getattr(self, name), where="data.")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, where: str = "data") -> ProtocolOptions:
        return cls(**_typed_fields(cls, values, where, lists=("past_covariates", "future_covariates",
                                                              "static_covariates")))

    def keywords(self) -> dict:
        """``prepare``'s protocol keywords, every one (defaults included) but ``val_size`` and
        ``test_size``, which are there only when given."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None or f.name not in self.GIVEN_ONLY
        }


READ_KEYS = tuple(f.name for f in dataclasses.fields(ReadOptions))
PROTOCOL_KEYS = tuple(f.name for f in dataclasses.fields(ProtocolOptions))


def split_options(values: Mapping[str, Any], *, where: str = "data") -> tuple[ReadOptions, ProtocolOptions]:
    """A flat mapping of data options (a config's data section without ``dataset``, or keywords)
    into its two typed halves; a key of neither is refused with a close-name suggestion."""
    reject_unknown_keys(values, [*PROTOCOL_KEYS, *READ_KEYS], where)
    read = ReadOptions.from_mapping({k: v for k, v in values.items() if k in READ_KEYS}, where=where)
    protocol = ProtocolOptions.from_mapping({k: v for k, v in values.items() if k in PROTOCOL_KEYS}, where=where)
    return read, protocol
