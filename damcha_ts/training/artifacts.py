"""The saved-model directory: config, weights, scaler and column/frequency metadata.

Layout of a model directory::

    forecaster.json   # format version, model config, training config, data metadata, the digests
    weights.pt        # the model's state_dict (torch.save), loaded with weights_only=True
    history.npz       # the last rows the model saw (raw values + timestamps), for predict()
    calibration.npz   # optional: conformity scores of validation windows, for level= intervals

``forecaster.json`` is the manifest of the whole directory (format version 2): it records the sha256
of ``weights.pt`` and of ``history.npz`` and a digest of its own content (``content_sha256``, over
the document without that field as ``json.dumps(sort_keys=True)``). Loading validates every field
(types, lengths, finite values, scales > 0), then refuses any file whose digest differs from the
recorded one (modified or swapped after saving), and weights whose keys or shapes do not fit the
recorded config. Version-1 directories (digest of ``weights.pt`` only) still load, validated.

A calibrated model (``damcha_ts.forecasting.intervals``) also has a ``calibration`` section in
``forecaster.json`` (``split``, ``windows``, the CQR level ``pairs`` and the ``sha256`` of
``calibration.npz``, whose ``scores`` are [1 + pairs, windows, pred_len, forecast columns], sorted
over the windows). The section is optional: directories saved before it load as uncalibrated; a
``calibration.npz`` that the document does not record is ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from damcha_ts.errors import ChecksumError, ConfigError, DamchaError, DataError, DatasetNotFoundError
from damcha_ts.data.protocol import scored_slice
from damcha_ts.files import write_atomically
from damcha_ts.models.quantiles import QuantileForecastModel, validate_quantiles
from damcha_ts.training.config import plain_values

FORMAT = "damcha_ts.forecaster"
FORMAT_VERSION = 2
# Version 1 recorded the digest of weights.pt only; its directories still load.
READABLE_VERSIONS = (1, 2)
META_FILE = "forecaster.json"
WEIGHTS_FILE = "weights.pt"
HISTORY_FILE = "history.npz"
CALIBRATION_FILE = "calibration.npz"
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
        import dataclasses

        from damcha_ts.data.entities import check_entities

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
            **covariate_fields,
            columns=[str(c) for c in series.columns],
            freq=str(series.freq),
            features=series.features,
            seq_len=int(series.seq_len),
            pred_len=int(series.pred_len),
            scaler_mean=[float(v) for v in np.asarray(series.scaler.mean_)],
            scaler_scale=[float(v) for v in np.asarray(series.scaler.scale_)],
            time_features_freq=_time_features_freq(series),
            name=str(getattr(series, "name", "")),
            data_config=dict(data_config) if data_config is not None else None,
            input_kind=input_kind,
            input_options=dict(input_options or {}),
        )


def _entity_meta(entities, first: SeriesMeta) -> SeriesMeta:
    """The meta of a panel of many entities (data/panel.py): ``first``, the first entity's, with
    every entity's scalers and the static covariates."""
    import dataclasses

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


def _time_features_freq(series) -> str | None:
    return getattr(series, "time_features_freq", None)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def history_arguments(history) -> dict:
    """:func:`save_model_dir`'s history keywords for a series' ``latest`` rows: ``(values,
    timestamps)`` of one series, ``{entity: (values, timestamps)}`` of many, or None."""
    if history is None or isinstance(history, Mapping):
        return {"history_values": history, "history_timestamps": None}
    values, timestamps = history
    return {"history_values": values, "history_timestamps": timestamps}


def save_model_dir(
    directory: str | Path,
    model: torch.nn.Module,
    meta: SeriesMeta,
    *,
    training: Mapping[str, Any],
    history_values: np.ndarray | None = None,
    history_timestamps=None,
    metrics: Mapping[str, Any] | None = None,
    calibration: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``model`` (built by build_model), its data metadata and optionally a history tail.

    A quantile model (``QuantileForecastModel``) may be given as itself or as its point model
    (``pred_len`` H·Q): either way its point model is written, and the levels are those of
    ``training["quantiles"]``, from which :func:`load_model_dir` wraps it again.
    ``history_values`` [T, C] (raw scale, model column order) and ``history_timestamps`` [T] are
    the rows ``predict()`` continues from when it is given no data; for many entities
    ``history_values`` is ``{entity: (values, timestamps)}`` (stored as [E, T, C] and [E, T]). ``calibration``:
    ``{"split", "windows", "pairs", "scores"}`` (``Calibration.to_saved()`` of
    ``damcha_ts.forecasting.intervals``), or None for a model without one.
    """
    model = _point_model(model, training)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # forecaster.json goes first and comes back last: a save cut short leaves a directory that
    # load_model_dir calls incomplete, never new weights under old metadata.
    (directory / META_FILE).unlink(missing_ok=True)
    weights = directory / WEIGHTS_FILE
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    write_atomically(weights, buffer.getvalue())
    history_digest = _write_history(directory, meta, history_values, history_timestamps)
    if calibration is not None:
        section = _write_calibration(directory, calibration, meta, training.get("quantiles"))
    else:
        (directory / CALIBRATION_FILE).unlink(missing_ok=True)  # not an earlier save's calibration
    document = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": model_config_dict(model),
        "training": dict(training),
        "data": dataclasses.asdict(meta),
        "weights_sha256": _sha256(weights),
        HISTORY_DIGEST: history_digest,
        "metrics": dict(metrics or {}),
    }
    if calibration is not None:
        document[CALIBRATION] = section
    _seal(directory, document)
    return directory


def _write_history(directory: Path, meta: SeriesMeta, history_values, history_timestamps) -> str | None:
    """Write history.npz (as :func:`save_model_dir` takes it) and return its sha256; without a
    history, remove an earlier save's and return None."""
    if isinstance(history_values, Mapping):  # many entities: {entity: (values [L, K], timestamps [L])}
        histories = [history_values[e] for e in meta.entities]
        history_values = np.stack([values for values, _ in histories])  # [E, L, K]
        history_timestamps = histories[0][1]  # its zone; the rows come from every entity
        stamps = np.stack([pd_index_ns(stamps) for _, stamps in histories])  # [E, L]
    elif history_values is not None:
        stamps = pd_index_ns(history_timestamps)
    path = directory / HISTORY_FILE
    if history_values is None:
        path.unlink(missing_ok=True)  # not an earlier save's history
        return None
    buffer = io.BytesIO()
    np.savez(buffer, values=np.asarray(history_values, dtype=np.float64), timestamps=stamps,
             tz=np.array(str(getattr(history_timestamps, "tz", None) or "")))  # UTC ns + the zone to show them in
    write_atomically(path, buffer.getvalue())
    return _sha256(path)


def _seal(directory: Path, document: Mapping[str, Any]) -> None:
    """Write ``document`` as forecaster.json, from version 2 on with the digest of its content, taken
    over the document as load reads it back (tuples as lists, NumPy floats as floats)."""
    document = json.loads(json.dumps(document))
    if document["format_version"] >= 2:
        document[CONTENT_DIGEST] = content_digest(document)
    write_atomically(directory / META_FILE, json.dumps(document, indent=2) + "\n")


def _point_model(model: torch.nn.Module, training: Mapping[str, Any]) -> torch.nn.Module:
    """The module whose weights and config are saved: a quantile model's point model, whose levels
    must be the training config's (load rebuilds them from it)."""
    levels = getattr(model, "quantiles", None)
    if levels is None:
        return model
    saved = training.get("quantiles")
    if saved is None or [float(q) for q in saved] != [float(q) for q in levels]:
        raise ConfigError(
            f"save_model_dir: the model forecasts the quantiles {list(levels)} but training.quantiles is {saved!r}; "
            "a loaded model would not forecast the same levels"
        )
    return model.point_model


def content_digest(document: Mapping[str, Any]) -> str:
    """sha256 of a forecaster.json document without its own digest field, as canonical JSON."""
    content = {k: v for k, v in document.items() if k != CONTENT_DIGEST}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode("utf-8")).hexdigest()


def model_directory(path: str | Path) -> Path:
    """``path`` itself, or its ``model/`` folder when ``path`` is a run folder (``damcha-ts fit``,
    ``run_experiment``)."""
    path = Path(path).expanduser()
    if not (path / META_FILE).is_file() and (path / "model" / META_FILE).is_file():
        return path / "model"
    return path


def pd_index_ns(index) -> np.ndarray:
    """Timestamps as int64 nanoseconds (storable without pickle)."""
    return pd.DatetimeIndex(index).asi8.astype(np.int64)


def model_config_dict(model: torch.nn.Module) -> dict:
    """``asdict(model.config) | {"name": ...}``: what build_model needs to rebuild ``model``."""
    config = dataclasses.asdict(model.config)
    name = getattr(model, "name", None) or config.get("name")
    if name is None:
        raise ConfigError(f"{type(model).__name__} does not say which model name it is")
    config["name"] = name
    return plain_values(config)


@dataclass
class LoadedModel:
    model: torch.nn.Module
    meta: SeriesMeta
    training: dict
    metrics: dict
    history_values: np.ndarray | None
    history_timestamps: Any
    # {"split", "windows", "pairs", "scores"} of a calibrated model (validated), or None
    calibration: dict | None = None


def load_model_dir(directory: str | Path, map_location: str | torch.device = "cpu") -> LoadedModel:
    """Rebuild and load a saved model, refusing files that are malformed, modified after saving or
    do not match their config (errors name the file and the field).

    The model comes back ready to forecast, in eval mode on ``map_location``: a model saved with
    ``training.quantiles`` as its ``QuantileForecastModel`` (output [B, Q, H, N]), whose horizon H
    must be the data's ``pred_len``."""
    directory = Path(directory)
    meta_path = directory / META_FILE
    weights = directory / WEIGHTS_FILE
    for path in (meta_path, weights):
        if not path.is_file():
            raise DatasetNotFoundError(
                f"{path} is missing: {directory} is not a saved damcha_ts model directory (or its save was cut short)"
            )
    document = _read_document(meta_path)
    # Fields first, digests second: an invalid field is named as such, a valid but changed one is
    # caught by the digest.
    meta = _check_document(document, meta_path)
    model, quantiles = _build_saved_model(document, meta, meta_path)
    if document["format_version"] >= 2:
        _check_digest(meta_path, content_digest(document), document[CONTENT_DIGEST], CONTENT_DIGEST)
    _check_digest(weights, _sha256(weights), document["weights_sha256"], "weights_sha256")
    try:
        state = torch.load(weights, map_location=map_location, weights_only=True)
    except Exception as exc:  # any unpickling failure means an unusable file
        raise ChecksumError(f"{weights}: cannot be read as a weights-only checkpoint: {exc}") from exc
    _check_state_matches(model, state, weights)
    model.load_state_dict(state)
    model.eval()
    history_values, history_stamps = _load_history(directory / HISTORY_FILE, document, meta)
    calibration = _load_calibration(directory / CALIBRATION_FILE, document, meta, quantiles, meta_path)
    if quantiles is not None:
        model = _quantile_model(model, quantiles, meta, directory)
    if isinstance(map_location, (str, torch.device)):  # torch.load also takes a mapping or a function
        model = model.to(map_location)
    return LoadedModel(
        model=model,
        meta=meta,
        training=document["training"],
        metrics=document["metrics"],
        history_values=history_values,
        history_timestamps=history_stamps,
        calibration=calibration,
    )


def _quantile_model(model: torch.nn.Module, quantiles, meta: SeriesMeta, directory: Path) -> torch.nn.Module:
    """The saved point model (pred_len H·Q) wrapped again as the quantile model it was trained as."""
    wrapped = QuantileForecastModel(model, validate_quantiles(quantiles, argument="training.quantiles"))
    if wrapped.horizon != meta.pred_len:
        raise ConfigError(
            f"{directory}: the quantile model forecasts {wrapped.horizon} steps but its data says {meta.pred_len}"
        )
    return wrapped.eval()


def _read_document(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc}); it is not a {META_FILE} that damcha_ts wrote") from exc


def _check_digest(path: Path, actual: str, recorded: str, field_name: str) -> None:
    """A ChecksumError naming both digests unless ``actual`` is the one recorded as ``field_name``."""
    what = "the sha256 of its content" if field_name == CONTENT_DIGEST else "sha256"
    if actual != recorded:
        raise ChecksumError(
            f"{path}: {what} {actual} differs from {recorded} recorded as {field_name} in {META_FILE}; "
            "the file was modified or replaced after saving"
        )


def _check_document(document: Any, path: Path) -> SeriesMeta:
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
    # history_sha256 is null for a model saved without history.
    digests = {"weights_sha256": False} | ({HISTORY_DIGEST: True, CONTENT_DIGEST: False} if version >= 2 else {})
    _check_keys(document, ["format", "format_version", *sections, *digests], (CALIBRATION,), path, "the document")
    for name, kind in sections.items():
        if not isinstance(document[name], kind):
            raise ConfigError(f"{path}: {name} is a JSON {_json_type(document[name])}; expected a JSON object")
    for name, nullable in digests.items():
        value = document[name]
        if not (isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value)) and not (nullable and value is None):
            raise ConfigError(f"{path}: {name}={value!r} is not a sha256 hex digest")
    return _check_series_meta(document["data"], path)


def _check_keys(section: Mapping, required, optional, path: Path, where: str, error: type = ConfigError) -> None:
    """``section`` has every ``required`` key and no key outside ``required`` and ``optional``."""
    missing = [k for k in required if k not in section]
    unknown = sorted(set(section) - set(required) - set(optional))
    if missing or unknown:
        parts = [f"lacks the keys {missing}"] if missing else []
        parts += [f"has unknown keys {unknown}"] if unknown else []
        raise error(f"{path}: {where} {' and '.join(parts)}")


def _check_series_meta(data: Mapping, path: Path) -> SeriesMeta:
    """The data section: what predict needs to scale, mark and label a history."""
    import dataclasses

    from damcha_ts.data.frames import check_freq
    from damcha_ts.data.options import FEATURE_MODES

    def where(name: str) -> str:
        return f"{path}: data.{name}"

    meta_fields = dataclasses.fields(SeriesMeta)
    required = [f.name for f in meta_fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    _check_keys(data, required, [f.name for f in meta_fields], path, "data")
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
        value = getattr(meta, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{where(name)}={value!r} is not a positive integer")
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
    import pandas as pd

    from damcha_ts.data.entities import id_dtype_of, typed_ids

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


def _json_type(value: Any) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _build_saved_model(document: Mapping, meta: SeriesMeta, path: Path) -> tuple[torch.nn.Module, list | None]:
    """(the model of the model section, the training section's quantile levels or None); the model
    must agree with the training and data sections."""
    from damcha_ts.models import build_model
    from damcha_ts.training.config import TrainingConfig

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


def _load_history(path: Path, document: Mapping, meta: SeriesMeta):
    """(values [seq_len, K], timestamps) of history.npz, or (None, None) when the model has none;
    for many entities ({entity: (values, timestamps)}, None)."""
    recorded = document.get(HISTORY_DIGEST)  # None in version 1 and for a model saved without history
    if not path.is_file():
        if recorded is not None:
            raise DatasetNotFoundError(f"{path} is missing; {META_FILE} records its sha256 {recorded}")
        return None, None
    stored = _read_archive(path, HISTORY_FILE, ("values", "timestamps"), ("tz",))
    values, stamps, zone = stored["values"], stored["timestamps"], stored.get("tz", np.array(""))
    if meta.entities:
        if values.ndim != 3 or len(values) != len(meta.entities) or stamps.shape != values.shape[:2]:
            raise ChecksumError(f"{path}: holds values of shape {values.shape} and timestamps of shape {stamps.shape}; "
                                f"the model has {len(meta.entities)} entities (is it another model's {HISTORY_FILE}?)")
        history = {e: _check_history(path, meta, rows, times, zone) for e, rows, times in zip(meta.entities, values, stamps)}
    else:
        history = _check_history(path, meta, values, stamps, zone)
    if recorded is not None:
        _check_digest(path, _sha256(path), recorded, HISTORY_DIGEST)
    elif document["format_version"] >= 2:
        raise ChecksumError(
            f"{path}: {META_FILE} records {HISTORY_DIGEST}=null (the model was saved without history); "
            "this file was put there after saving"
        )
    return (history, None) if meta.entities else history


def _check_history(path: Path, meta: SeriesMeta, values: np.ndarray, stamps: np.ndarray, zone):
    """(values [seq_len, K], timestamps) of one stored history, checked."""
    columns = len(meta.history_columns)
    if (not np.issubdtype(values.dtype, np.floating) or not np.issubdtype(stamps.dtype, np.integer)
            or not np.issubdtype(zone.dtype, np.str_) or zone.shape != ()):
        raise DataError(
            f"{path}: values are {values.dtype}, timestamps {stamps.dtype} and tz {zone.dtype} of shape {zone.shape}; "
            "expected floats, int64 nanoseconds and one string"
        )
    if values.ndim != 2 or values.shape[1] != columns or stamps.ndim != 1 or len(values) != len(stamps):
        raise ChecksumError(
            f"{path}: holds values of shape {values.shape} and {len(stamps)} timestamps; "
            f"the model has {columns} columns (is it another model's {HISTORY_FILE}?)"
        )
    if len(values) < meta.seq_len:
        raise DataError(f"{path}: holds {len(values)} rows; the model reads lookback={meta.seq_len} rows")
    if not np.isfinite(values).all():
        raise DataError(f"{path}: values hold {int((~np.isfinite(values)).sum())} NaN/inf entries")
    if (np.diff(stamps) <= 0).any():
        raise DataError(f"{path}: timestamps are not strictly increasing")
    zone = str(zone)
    stamps = pd.DatetimeIndex(pd.to_datetime(stamps[-meta.seq_len :], utc=bool(zone)), name="date")
    if zone:
        try:
            stamps = stamps.tz_convert(zone)
        except (ValueError, KeyError) as exc:
            raise DataError(f"{path}: tz {zone!r} is not a time zone: {exc}") from exc
    return values[-meta.seq_len :], stamps


def add_calibration(directory: str | Path, calibration: Mapping[str, Any]) -> Path:
    """Record ``calibration`` (as for :func:`save_model_dir`) in a saved model directory: writes
    ``calibration.npz`` and re-seals ``forecaster.json`` (its content digest). The directory must
    load (intact, unmodified) first; nothing else in it changes."""
    directory = Path(directory)
    loaded = load_model_dir(directory)
    document = _read_document(directory / META_FILE)
    document[CALIBRATION] = _write_calibration(directory, calibration, loaded.meta,
                                               getattr(loaded.model, "quantiles", None))
    _seal(directory, document)
    return directory


def _write_calibration(directory: Path, calibration: Mapping[str, Any], meta: SeriesMeta, quantiles) -> dict:
    """Write ``calibration.npz``; returns the validated ``calibration`` section with its sha256."""
    where = Path("save_model_dir(calibration=...)")
    if not isinstance(calibration, Mapping) or set(calibration) != {"split", "windows", "pairs", "scores"}:
        keys = sorted(calibration) if isinstance(calibration, Mapping) else type(calibration).__name__
        raise ConfigError(f"{where}: expected the keys ['pairs', 'scores', 'split', 'windows'] "
                          f"(Calibration.to_saved()), got {keys}")
    section = json.loads(json.dumps(plain_values({k: calibration[k] for k in ("split", "windows", "pairs")})))
    _check_calibration_section({**section, "sha256": "0" * 64}, where, quantiles)
    scores = np.asarray(calibration["scores"])
    _check_calibration_scores(scores, where, section, meta)
    buffer = io.BytesIO()
    np.savez(buffer, scores=scores.astype(np.float64))
    write_atomically(directory / CALIBRATION_FILE, buffer.getvalue())
    return {**section, "sha256": _sha256(directory / CALIBRATION_FILE)}


def _check_calibration_section(section: Any, path: Path, quantiles) -> dict:
    """The ``calibration`` section: where its windows came from, how many, the CQR level pairs
    (symmetric pairs of trained quantile levels) and the digest of calibration.npz."""
    from damcha_ts.data.protocol import SPLITS

    where = f"{path}: {CALIBRATION}"
    if not isinstance(section, dict):
        raise ConfigError(f"{where} is a JSON {_json_type(section)}; expected an object")
    _check_keys(section, ["split", "windows", "pairs", "sha256"], (), path, CALIBRATION)
    if section["split"] not in SPLITS:
        raise ConfigError(f"{where}.split={section['split']!r} is not one of {', '.join(SPLITS)}")
    windows = section["windows"]
    if isinstance(windows, bool) or not isinstance(windows, int) or windows < 1:
        raise ConfigError(f"{where}.windows={windows!r} is not a positive integer")
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
    digest = section["sha256"]
    if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
        raise ConfigError(f"{where}.sha256={digest!r} is not a sha256 hex digest")
    return section


def _check_calibration_scores(scores: np.ndarray, path: Path, section: Mapping, meta: SeriesMeta) -> None:
    """Scores [1 + pairs, windows, pred_len, forecast columns]: finite floats, sorted over the
    windows, absolute residuals (index 0) >= 0."""
    outputs = len(meta.columns[scored_slice(meta.features)])
    expected = (1 + len(section["pairs"]), section["windows"], meta.pred_len, outputs)
    if not np.issubdtype(scores.dtype, np.floating):
        raise DataError(f"{path}: the calibration scores are {scores.dtype}; expected floats")
    if scores.shape != expected:
        raise ChecksumError(
            f"{path}: holds calibration scores of shape {scores.shape}; the model's calibration section and data "
            f"say {expected} (1 + {len(section['pairs'])} pairs, {section['windows']} windows, pred_len "
            f"{meta.pred_len}, {outputs} forecast columns): is it another model's {CALIBRATION_FILE}?"
        )
    if not np.isfinite(scores).all():
        raise DataError(f"{path}: the calibration scores hold {int((~np.isfinite(scores)).sum())} NaN/inf entries")
    if (np.diff(scores, axis=1) < 0).any():
        raise DataError(f"{path}: the calibration scores are not sorted over the windows")
    if (scores[0] < 0).any():
        raise DataError(f"{path}: absolute residuals (scores[0]) below 0")


def _load_calibration(path: Path, document: Mapping, meta: SeriesMeta, quantiles, meta_path: Path) -> dict | None:
    """``{"split", "windows", "pairs", "scores"}`` of a calibrated model, or None (no section)."""
    section = document.get(CALIBRATION)
    if section is None:
        return None
    section = _check_calibration_section(section, meta_path, quantiles)
    if not path.is_file():
        raise DatasetNotFoundError(f"{path} is missing; {META_FILE} records its sha256 {section['sha256']}")
    scores = _read_archive(path, CALIBRATION_FILE, ("scores",), ())["scores"]
    _check_calibration_scores(scores, path, section, meta)
    _check_digest(path, _sha256(path), section["sha256"], f"{CALIBRATION}.sha256")
    return {"split": section["split"], "windows": section["windows"], "pairs": section["pairs"], "scores": scores}


def _read_archive(path: Path, kind: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict:
    """The arrays of an .npz archive damcha_ts wrote (no pickles), with exactly the expected keys;
    DataError naming the file for anything else."""
    unreadable = f"{path}: not a readable NumPy .npz archive; it is not a {kind} that damcha_ts wrote"
    if not zipfile.is_zipfile(path):  # before np.load, whose message for other bytes is about pickles
        raise DataError(f"{unreadable} ({'an empty file' if path.stat().st_size == 0 else 'not a zip archive'})")
    try:
        stored = np.load(path, allow_pickle=False)
        if not isinstance(stored, np.lib.npyio.NpzFile):
            raise DataError(f"{unreadable} (it holds a single .npy array)")
        with stored:
            _check_keys(stored, required, optional, path, "the archive", DataError)
            return {key: stored[key] for key in stored.files}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        if isinstance(exc, DamchaError):
            raise
        raise DataError(f"{unreadable} ({type(exc).__name__}: {exc or 'empty'})") from exc


def _check_state_matches(model: torch.nn.Module, state: Mapping, path: Path) -> None:
    """Name every key or shape that differs between the weights file and the configured model."""
    if not isinstance(state, Mapping):
        raise ConfigError(f"{path}: expected a state_dict, got {type(state).__name__}")
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    reshaped = [
        f"{k}: file {tuple(state[k].shape)} vs config {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and tuple(state[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or reshaped:
        parts = []
        if missing:
            parts.append(f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}")
        if reshaped:
            parts.append(f"shape mismatch {reshaped[:3]}{' ...' if len(reshaped) > 3 else ''}")
        raise ConfigError(f"{path} does not match the model config in {META_FILE}: " + "; ".join(parts))
