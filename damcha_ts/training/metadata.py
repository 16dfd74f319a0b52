"""What a saved model says about itself and its data: the ``forecaster.json`` document (format
version, the model, training and data sections, the digests and the optional calibration section)
and its checks, each made once here. :mod:`damcha_ts.training.artifacts` reads and writes the files
of a saved model directory.

A calibrated model (``damcha_ts.forecasting.intervals``) also has a ``calibration`` section in
``forecaster.json`` (``split``, ``windows``, the CQR level ``pairs`` and the ``sha256`` of
``calibration.npz``, whose ``scores`` are [1 + pairs, windows, pred_len, forecast columns], sorted
over the windows). The section is optional: directories saved before it load as uncalibrated; a
``calibration.npz`` that the document does not record is ignored.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from damcha_ts.data.entities import check_entities, id_dtype_of, typed_ids
from damcha_ts.data.frames import check_freq
from damcha_ts.data.options import FEATURE_MODES
from damcha_ts.data.protocol import SPLITS
from damcha_ts.errors import ConfigError, DamchaError
from damcha_ts.models import build_model
from damcha_ts.schema import plain_values
from damcha_ts.training.config import TrainingConfig

FORMAT = "damcha_ts.forecaster"
FORMAT_VERSION = 2
# Version 1 recorded the digest of weights.pt only; its directories still load.
READABLE_VERSIONS = (1, 2)
CALIBRATION = "calibration"  # the optional section of forecaster.json
CONTENT_DIGEST = "content_sha256"
HISTORY_DIGEST = "history_sha256"
INPUT_KINDS = ("wide", "long", "numpy")


@dataclass
class SeriesMeta:
    """What predicting on new data needs to know about the data a model was fitted on."""

    columns: list[str]
    freq: str
    features: str
    seq_len: int
    pred_len: int
    scaler_mean: list[float]
    scaler_scale: list[float]
    time_features_freq: str | None
    name: str = ""
    # The data config section the model was trained from (None for in-memory data).
    data_config: dict | None = None
    # How the fit input looked ("wide", "long", "numpy") and its long-layout column names.
    input_kind: str = "wide"
    input_options: dict = field(default_factory=dict)
    # Forecasts (and their quantiles and intervals) are clipped at 0 (Forecaster(nonnegative=True));
    # directories saved before this field existed load as False.
    nonnegative: bool = False
    # Covariate columns (read, never forecast) and the scaler of the past ones, then the future
    # ones; empty for a model without covariates and for directories saved before them.
    past_covariates: list[str] = field(default_factory=list)
    future_covariates: list[str] = field(default_factory=list)
    covariate_mean: list[float] = field(default_factory=list)
    covariate_scale: list[float] = field(default_factory=list)
    # Many entities (data/entities.py): their column, names and per-entity scalers
    # ({entity: {"scaler_mean", "scaler_scale", "covariate_mean", "covariate_scale", "static"}}),
    # the static covariates with their scaler over the entities; an entity's own meta
    # (``for_entity``) has no entities and its raw ``static_values``.
    entity_col: str | None = None
    entities: list[str] = field(default_factory=list)
    # The dtype the ids come back in (int64, ...: numeric ids stay numbers); None: text, as inside
    # (and for directories saved before this field).
    entity_dtype: str | None = None
    entity_scalers: dict = field(default_factory=dict)
    static_covariates: list[str] = field(default_factory=list)
    static_mean: list[float] = field(default_factory=list)
    static_scale: list[float] = field(default_factory=list)
    static_values: list[float] = field(default_factory=list)

    @property
    def history_columns(self) -> list[str]:
        """The columns of a history table, in order: the model columns, then the covariates."""
        return [*self.columns, *self.past_covariates, *self.future_covariates]

    def for_entity(self, entity: str) -> SeriesMeta:
        """The meta of one entity of a many-entity model: its scalers and static values."""
        (entity,) = check_entities(self.entities, [entity])
        own = self.entity_scalers[entity]
        return dataclasses.replace(
            self, entities=[], entity_scalers={}, scaler_mean=list(own["scaler_mean"]),
            scaler_scale=list(own["scaler_scale"]), covariate_mean=list(own["covariate_mean"]),
            covariate_scale=list(own["covariate_scale"]), static_values=list(own["static"]),
        )

    @classmethod
    def from_panel(cls, panel, *, data_config=None, input_kind="wide", input_options=None) -> SeriesMeta:
        """The meta of a model of ``panel`` (data/panel.py): of its one series, or of its first
        entity's with every entity's scalers and the static covariates when it has an entity column."""
        first = cls.from_series(panel.series[0], data_config=data_config, input_kind=input_kind,
                                input_options=input_options)
        return first if panel.entity_col is None else _entity_meta(panel, first)

    @classmethod
    def from_series(cls, series, *, data_config=None, input_kind="wide", input_options=None) -> SeriesMeta:
        """The meta of one prepared series (a ``SeriesData``)."""
        covariates = getattr(series, "covariates", None)
        covariate_fields = {} if covariates is None else {
            "past_covariates": list(covariates.past_columns),
            "future_covariates": list(covariates.future_columns),
            "covariate_mean": [float(v) for v in np.asarray(covariates.scaler.mean_)],
            "covariate_scale": [float(v) for v in np.asarray(covariates.scaler.scale_)],
        }
        return cls(
            **covariate_fields, columns=[str(c) for c in series.columns], freq=str(series.freq),
            features=series.features, seq_len=int(series.seq_len), pred_len=int(series.pred_len),
            scaler_mean=[float(v) for v in np.asarray(series.scaler.mean_)],
            scaler_scale=[float(v) for v in np.asarray(series.scaler.scale_)],
            time_features_freq=getattr(series, "time_features_freq", None), name=str(getattr(series, "name", "")),
            data_config=dict(data_config) if data_config is not None else None, input_kind=input_kind,
            input_options=dict(input_options or {}),
        )


def _entity_meta(entities, first: SeriesMeta) -> SeriesMeta:
    """The meta of a panel of many entities (data/panel.py): ``first``, the first entity's, with
    every entity's scalers and the static covariates."""

    def scalers(i: int, one) -> dict:
        own = SeriesMeta.from_series(one)
        static = [] if entities.static_values is None else [float(v) for v in entities.static_values[i]]
        return {"scaler_mean": own.scaler_mean, "scaler_scale": own.scaler_scale,
                "covariate_mean": own.covariate_mean, "covariate_scale": own.covariate_scale, "static": static}

    statics = entities.static_scaler
    return dataclasses.replace(
        first, name=str(entities.name), entity_col=entities.entity_col, entities=list(entities.entities),
        entity_dtype=entities.id_dtype,
        entity_scalers={e: scalers(i, one) for i, (e, one) in enumerate(zip(entities.entities, entities.series))},
        static_covariates=list(entities.static_columns),
        static_mean=[] if statics is None else [float(v) for v in statics.mean_],
        static_scale=[] if statics is None else [float(v) for v in statics.scale_],
    )


def model_config_dict(model: torch.nn.Module) -> dict:
    """``asdict(model.config) | {"name": ...}``: what build_model needs to rebuild ``model``."""
    config = dataclasses.asdict(model.config)
    name = getattr(model, "name", None) or config.get("name")
    if name is None:
        raise ConfigError(f"{type(model).__name__} does not say which model name it is")
    config["name"] = name
    return plain_values(config)


def check_document(document: Any, path: Path) -> SeriesMeta:
    """Every top-level field of forecaster.json has its type; returns the validated data section."""
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: holds a JSON {_json_type(document)}, not the object damcha_ts writes")
    if document.get("format") != FORMAT:
        raise ConfigError(f"{path}: format {document.get('format')!r} is not {FORMAT!r}; not a saved damcha_ts model")
    version = document.get("format_version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise ConfigError(
            f"{path}: format_version {version!r} is not one this damcha_ts reads "
            f"({', '.join(map(str, READABLE_VERSIONS))}); was it saved by a newer damcha_ts?"
        )
    sections = {"model": dict, "training": dict, "data": dict, "metrics": dict}
    digests = {"weights_sha256": False} | ({HISTORY_DIGEST: True, CONTENT_DIGEST: False} if version >= 2 else {})
    check_keys(document, ["format", "format_version", *sections, *digests], (CALIBRATION,), path, "the document")
    for name, kind in sections.items():
        if not isinstance(document[name], kind):
            raise ConfigError(f"{path}: {name} is a JSON {_json_type(document[name])}; expected a JSON object")
    for name, nullable in digests.items():
        _check_sha256(document[name], f"{path}: {name}", nullable=nullable)
    return _check_series_meta(document["data"], path)


def check_keys(section: Mapping, required, optional, path: Path, where: str, error: type = ConfigError) -> None:
    """``section`` has every ``required`` key and no key outside ``required`` and ``optional``."""
    missing = [k for k in required if k not in section]
    unknown = sorted(set(section) - set(required) - set(optional))
    if missing or unknown:
        parts = [f"lacks the keys {missing}"] if missing else []
        parts += [f"has unknown keys {unknown}"] if unknown else []
        raise error(f"{path}: {where} {' and '.join(parts)}")


def _check_series_meta(data: Mapping, path: Path) -> SeriesMeta:
    """The data section: what predict needs to scale, mark and label a history."""

    def where(name: str) -> str:
        return f"{path}: data.{name}"

    meta_fields = dataclasses.fields(SeriesMeta)
    required = [f.name for f in meta_fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    check_keys(data, required, [f.name for f in meta_fields], path, "data")
    meta = SeriesMeta(**data)
    columns = _check_names(meta.columns, where("columns"))
    if not columns:
        raise ConfigError(f"{where('columns')} is empty; a model forecasts at least one column")
    for name in ("freq", "features", "name", "input_kind"):
        if not isinstance(getattr(meta, name), str):
            raise ConfigError(f"{where(name)}={getattr(meta, name)!r} is not a string")
    check_freq(meta.freq, where("freq"))
    if meta.time_features_freq is not None:
        if not isinstance(meta.time_features_freq, str):
            raise ConfigError(f"{where('time_features_freq')}={meta.time_features_freq!r} is neither a string nor null")
        check_freq(meta.time_features_freq, where("time_features_freq"))
    for name, allowed in (("features", FEATURE_MODES), ("input_kind", INPUT_KINDS)):
        value = getattr(meta, name)
        if value not in allowed:
            raise ConfigError(f"{where(name)}={value!r} is not one of {', '.join(allowed)}")
    for name in ("seq_len", "pred_len"):
        _check_count(getattr(meta, name), where(name))
    covariates = [*_check_names(meta.past_covariates, where("past_covariates")),
                  *_check_names(meta.future_covariates, where("future_covariates"))]
    both = sorted(set(covariates) & set(columns)) or sorted({c for c in covariates if covariates.count(c) > 1})
    if both:
        raise ConfigError(f"{path}: data names {both} twice among the columns and covariates")
    statics = _check_names(meta.static_covariates, where("static_covariates"))
    for name, named in (("scaler_mean", columns), ("scaler_scale", columns),
                        ("covariate_mean", covariates), ("covariate_scale", covariates),
                        ("static_mean", statics), ("static_scale", statics)):
        _check_scaler(getattr(meta, name), named, where(name), scale=name.endswith("_scale"))
    _check_entities(meta, columns, covariates, statics, where)
    if meta.data_config is not None and not isinstance(meta.data_config, dict):
        raise ConfigError(
            f"{where('data_config')} is a JSON {_json_type(meta.data_config)}; expected an object or null"
        )
    if not isinstance(meta.input_options, dict):
        raise ConfigError(f"{where('input_options')} is a JSON {_json_type(meta.input_options)}; expected an object")
    if not isinstance(meta.nonnegative, bool):
        raise ConfigError(f"{where('nonnegative')}={meta.nonnegative!r} is not true or false")
    if "input_columns" in meta.input_options:
        given = _check_names(meta.input_options["input_columns"], where("input_options.input_columns"))
        named = set(given)  # a set: linear in the columns
        absent = [c for c in columns if c not in named]
        if absent:
            raise ConfigError(f"{where('input_options.input_columns')} lacks the model columns {absent}")
    return meta


def _check_entities(meta: SeriesMeta, columns: list[str], covariates: list[str], statics: list[str], where) -> None:
    """A many-entity model's entity column, names, id dtype and per-entity scalers."""
    entities = _check_names(meta.entities, where("entities"))
    if entities and not isinstance(meta.entity_col, str):
        raise ConfigError(f"{where('entity_col')}={meta.entity_col!r}: a model of {len(entities)} entities needs the "
                          "name of their column")
    if meta.entity_dtype is not None and not _ids_take(entities, meta.entity_dtype):
        raise ConfigError(f"{where('entity_dtype')}={meta.entity_dtype!r} is neither null (text ids) nor a numeric "
                          f"dtype (int64, float64, ...) that the entities {entities[:5]} are numbers of")
    if not isinstance(meta.entity_scalers, dict) or sorted(meta.entity_scalers) != sorted(entities):
        raise ConfigError(f"{where('entity_scalers')} must hold one scaler for each of the entities {entities[:5]}")
    for entity, own in meta.entity_scalers.items():
        if not isinstance(own, dict) or sorted(own) != sorted(_ENTITY_SCALER_KEYS):
            raise ConfigError(f"{where('entity_scalers')}[{entity!r}] must have the keys {list(_ENTITY_SCALER_KEYS)}")
        for key, named in zip(_ENTITY_SCALER_KEYS, (columns, columns, covariates, covariates, statics)):
            _check_scaler(own[key], named, where(f"entity_scalers[{entity!r}].{key}"), scale=key.endswith("_scale"))
    if meta.static_values:
        _check_scaler(meta.static_values, statics, where("static_values"), scale=False)


def _ids_take(entities: list[str], dtype: Any) -> bool:
    """Whether the text ``entities`` are numbers of ``dtype`` that read back as the same text."""
    if not isinstance(dtype, str) or id_dtype_of(dtype) != dtype:
        return False
    try:
        return typed_ids(pd.Series(entities, dtype=object), dtype).astype(str).tolist() == entities
    except (TypeError, ValueError, OverflowError):
        return False


_ENTITY_SCALER_KEYS = ("scaler_mean", "scaler_scale", "covariate_mean", "covariate_scale", "static")


def _check_scaler(values: Any, columns: list[str], where: str, *, scale: bool) -> None:
    """One finite number per column; a scale > 0 (a forecast is model output * scale + mean)."""
    if not isinstance(values, list) or len(values) != len(columns):
        given = f"has length {len(values)}" if isinstance(values, list) else f"is a JSON {_json_type(values)}"
        raise ConfigError(f"{where} {given}; expected a list of {len(columns)} numbers, one per column {columns}")
    for column, value in zip(columns, values):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{where} of column {column!r} is {value!r}; expected a finite number")
        if scale and value <= 0:
            raise ConfigError(f"{where} of column {column!r} is {value!r}; a scale must be > 0")


def _check_names(names: Any, where: str) -> list[str]:
    """A list of unique strings (column names)."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{where}={names!r} is not a list of column names (strings)")
    seen: set[str] = set()
    repeated = sorted({n for n in names if n in seen or seen.add(n)})
    if repeated:
        raise ConfigError(f"{where} names {repeated} more than once")
    return names


def _check_count(value: Any, label: str) -> None:
    """A JSON integer >= 1 (true is no count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{label}={value!r} is not a positive integer")


def _check_sha256(value: Any, label: str, *, nullable: bool = False) -> None:
    """A sha256 hex digest (or null where ``nullable``: a model saved without history)."""
    if not (isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value)) and not (nullable and value is None):
        raise ConfigError(f"{label}={value!r} is not a sha256 hex digest")


def _json_type(value: Any) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def build_saved_model(document: Mapping, meta: SeriesMeta, path: Path) -> tuple[torch.nn.Module, list | None]:
    """(the model of the model section, the training section's quantile levels or None); the model
    must agree with the training and data sections."""
    try:
        training = TrainingConfig.from_dict(document["training"])
    except (DamchaError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: training section: {exc}") from exc
    try:
        model = build_model(dict(document["model"]))
    except (DamchaError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: model section: {exc}") from exc
    # A quantile model is saved as its point model, pred_len H·Q (_quantile_model checks H).
    expected = {"seq_len": meta.seq_len} if training.quantiles else {"seq_len": meta.seq_len, "pred_len": meta.pred_len}
    expected.update(past_covariates=len(meta.past_covariates), future_covariates=len(meta.future_covariates),
                    static_covariates=len(meta.static_covariates))
    for name, value in expected.items():
        if getattr(model.config, name) != value:
            said = f"data.{name} lists {value}" if name.endswith("_covariates") else f"data.{name}={value}"
            raise ConfigError(f"{path}: model.{name}={getattr(model.config, name)} but {said}")
    return model, training.quantiles


def check_calibration_section(section: Any, path: Path, quantiles) -> dict:
    """The ``calibration`` section: where its windows came from, how many, the CQR level pairs
    (symmetric pairs of trained quantile levels) and the digest of calibration.npz."""
    where = f"{path}: {CALIBRATION}"
    if not isinstance(section, dict):
        raise ConfigError(f"{where} is a JSON {_json_type(section)}; expected an object")
    check_keys(section, ["split", "windows", "pairs", "sha256"], (), path, CALIBRATION)
    if section["split"] not in SPLITS:
        raise ConfigError(f"{where}.split={section['split']!r} is not one of {', '.join(SPLITS)}")
    _check_count(section["windows"], f"{where}.windows")
    trained = [float(q) for q in quantiles or ()]
    pairs = section["pairs"]
    if not isinstance(pairs, list):
        raise ConfigError(f"{where}.pairs is a JSON {_json_type(pairs)}; expected a list of [low, high] levels")
    for pair in pairs:
        numbers = isinstance(pair, list) and len(pair) == 2 and all(
            isinstance(q, (int, float)) and not isinstance(q, bool) and math.isfinite(q) for q in pair)
        known = numbers and all(any(abs(q - t) < 1e-9 for t in trained) for q in pair)
        if not (known and pair[0] < 0.5 and abs(pair[0] + pair[1] - 1.0) < 1e-9):
            raise ConfigError(
                f"{where}.pairs holds {pair!r}; each pair is [tau, 1 - tau] (tau < 0.5) of the trained quantile "
                f"levels {trained or 'None (a point model has no pairs)'}"
            )
    if len({tuple(p) for p in pairs}) != len(pairs):
        raise ConfigError(f"{where}.pairs names a pair more than once: {pairs}")
    _check_sha256(section["sha256"], f"{where}.sha256")
    return section
