"""The saved-model directory, read and written: its manifest, weights, history and calibration files.

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
recorded config. Version-1 directories (digest of ``weights.pt`` only) still load, validated. What the
document says and its checks are :mod:`damcha_ts.training.metadata`; this module reads and writes the files.

A calibrated model also has ``calibration.npz``, recorded in the document's ``calibration`` section
(:mod:`damcha_ts.training.metadata`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from damcha_ts.data.protocol import scored_slice
from damcha_ts.errors import ChecksumError, ConfigError, DamchaError, DataError, DatasetNotFoundError
from damcha_ts.files import write_atomically
from damcha_ts.models.quantiles import QuantileForecastModel, validate_quantiles
from damcha_ts.schema import plain_values
from damcha_ts.training.metadata import (
    CALIBRATION,
    CONTENT_DIGEST,
    FORMAT,
    FORMAT_VERSION,
    HISTORY_DIGEST,
    SeriesMeta,
    build_saved_model,
    check_calibration_section,
    check_document,
    check_keys,
    model_config_dict,
)

#: A run folder's saved model (``damcha-ts fit``, ``run_experiment``): ``<run>/model/``.
MODEL_DIR = "model"
META_FILE = "forecaster.json"
WEIGHTS_FILE = "weights.pt"
HISTORY_FILE = "history.npz"
CALIBRATION_FILE = "calibration.npz"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def history_arguments(history, meta: SeriesMeta) -> dict:
    """:func:`save_model_dir`'s history keywords for the rows a model continues from, as a fit leaves
    them (``Panel.history``): ``{entity: (values, timestamps)}`` of a model with entities
    (``meta.entities``), ``(values, timestamps)`` of one series, or None."""
    if history is None or meta.entities:
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
    document = {"format": FORMAT, "format_version": FORMAT_VERSION, "model": model_config_dict(model),
                "training": dict(training), "data": dataclasses.asdict(meta), "weights_sha256": _sha256(weights),
                HISTORY_DIGEST: history_digest, "metrics": dict(metrics or {})}
    if calibration is not None:
        document[CALIBRATION] = section
    _seal(directory, document)
    return directory


def _write_history(directory: Path, meta: SeriesMeta, history_values, history_timestamps) -> str | None:
    """Write history.npz (as :func:`save_model_dir` takes it) and return its sha256; without a
    history, remove an earlier save's and return None."""
    if history_values is None:
        (directory / HISTORY_FILE).unlink(missing_ok=True)  # not an earlier save's history
        return None
    if meta.entities:  # a model of many entities: {entity: (values [L, K], timestamps [L])}
        histories = [history_values[e] for e in meta.entities]
        history_values = np.stack([values for values, _ in histories])  # [E, L, K]
        history_timestamps = histories[0][1]  # its zone; the rows come from every entity
        stamps = np.stack([pd_index_ns(stamps) for _, stamps in histories])  # [E, L]
    else:
        stamps = pd_index_ns(history_timestamps)
    return _write_archive(directory / HISTORY_FILE, values=np.asarray(history_values, dtype=np.float64),
                          timestamps=stamps,  # UTC ns, and the zone to show them in
                          tz=np.array(str(getattr(history_timestamps, "tz", None) or "")))


def _write_archive(path: Path, **arrays: np.ndarray) -> str:
    """Write an .npz archive (no pickles) atomically; returns its sha256, which forecaster.json records."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
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
    if not (path / META_FILE).is_file() and (path / MODEL_DIR / META_FILE).is_file():
        return path / MODEL_DIR
    return path


def pd_index_ns(index) -> np.ndarray:
    """Timestamps as int64 nanoseconds (storable without pickle)."""
    return pd.DatetimeIndex(index).asi8.astype(np.int64)


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
    meta = check_document(document, meta_path)
    model, quantiles = build_saved_model(document, meta, meta_path)
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
    return LoadedModel(model=model, meta=meta, training=document["training"], metrics=document["metrics"],
                       history_values=history_values, history_timestamps=history_stamps, calibration=calibration)


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


def _write_calibration(directory: Path, calibration: Mapping[str, Any], meta: SeriesMeta, quantiles) -> dict:
    """Write ``calibration.npz``; returns the validated ``calibration`` section with its sha256."""
    where = Path("save_model_dir(calibration=...)")
    if not isinstance(calibration, Mapping) or set(calibration) != {"split", "windows", "pairs", "scores"}:
        keys = sorted(calibration) if isinstance(calibration, Mapping) else type(calibration).__name__
        raise ConfigError(f"{where}: expected the keys ['pairs', 'scores', 'split', 'windows'] "
                          f"(Calibration.to_saved()), got {keys}")
    section = json.loads(json.dumps(plain_values({k: calibration[k] for k in ("split", "windows", "pairs")})))
    check_calibration_section({**section, "sha256": "0" * 64}, where, quantiles)
    scores = np.asarray(calibration["scores"])
    _check_calibration_scores(scores, where, section, meta)
    return {**section, "sha256": _write_archive(directory / CALIBRATION_FILE, scores=scores.astype(np.float64))}


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
    section = check_calibration_section(section, meta_path, quantiles)
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
            check_keys(stored, required, optional, path, "the archive", DataError)
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
    parts = [f"{what} {names[:shown]}{' ...' if len(names) > shown else ''}"
             for what, names, shown in (("missing", missing, 5), ("unexpected", unexpected, 5),
                                        ("shape mismatch", reshaped, 3)) if names]
    if parts:
        raise ConfigError(f"{path} does not match the model config in {META_FILE}: " + "; ".join(parts))
