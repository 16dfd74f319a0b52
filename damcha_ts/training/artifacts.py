"""The saved-model directory: config, weights, scaler and column/frequency metadata.

Layout of a model directory::

    forecaster.json   # format version, model config, training config, data metadata, weights digest
    weights.pt        # the model's state_dict (torch.save), loaded with weights_only=True
    history.npz       # the last rows the model saw (raw values + timestamps), for predict()

Loading refuses a ``weights.pt`` whose sha256 differs from the one recorded at save time
(tampered or swapped file), and weights whose keys or shapes do not fit the recorded config.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from damcha_ts.errors import ChecksumError, ConfigError, DatasetNotFoundError
from damcha_ts.files import write_atomically
from damcha_ts.training.config import plain_values

FORMAT = "damcha_ts.forecaster"
FORMAT_VERSION = 1
META_FILE = "forecaster.json"
WEIGHTS_FILE = "weights.pt"
HISTORY_FILE = "history.npz"


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

    @classmethod
    def from_series(cls, series, *, data_config=None, input_kind="wide", input_options=None) -> SeriesMeta:
        return cls(
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


def _time_features_freq(series) -> str | None:
    return getattr(series, "time_features_freq", None)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def save_model_dir(
    directory: str | Path,
    model: torch.nn.Module,
    meta: SeriesMeta,
    *,
    training: Mapping[str, Any],
    history_values: np.ndarray | None = None,
    history_timestamps=None,
    metrics: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``model`` (built by build_model), its data metadata and optionally a history tail.

    ``history_values`` [T, C] (raw scale, model column order) and ``history_timestamps`` [T] are
    the rows ``predict()`` continues from when it is given no data.
    """
    import dataclasses

    import io

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # forecaster.json goes first and comes back last: a save cut short leaves a directory that
    # load_model_dir calls incomplete, never new weights under old metadata.
    (directory / META_FILE).unlink(missing_ok=True)
    weights = directory / WEIGHTS_FILE
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
    write_atomically(weights, buffer.getvalue())
    if history_values is not None:
        buffer = io.BytesIO()
        np.savez(buffer, values=np.asarray(history_values, dtype=np.float64), timestamps=pd_index_ns(history_timestamps),
                 tz=np.array(str(getattr(history_timestamps, "tz", None) or "")))  # UTC ns + the zone to show them in
        write_atomically(directory / HISTORY_FILE, buffer.getvalue())
    else:
        (directory / HISTORY_FILE).unlink(missing_ok=True)  # not an earlier save's history
    document = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": model_config_dict(model),
        "training": dict(training),
        "data": dataclasses.asdict(meta),
        "weights_sha256": _sha256(weights),
        "metrics": dict(metrics or {}),
    }
    write_atomically(directory / META_FILE, json.dumps(document, indent=2) + "\n")
    return directory


def pd_index_ns(index) -> np.ndarray:
    """Timestamps as int64 nanoseconds (storable without pickle)."""
    import pandas as pd

    return pd.DatetimeIndex(index).asi8.astype(np.int64)


def model_config_dict(model: torch.nn.Module) -> dict:
    """``asdict(model.config) | {"name": ...}``: what build_model needs to rebuild ``model``."""
    import dataclasses

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


def load_model_dir(directory: str | Path, map_location: str | torch.device = "cpu") -> LoadedModel:
    """Rebuild and load a saved model, refusing files that do not match their config."""
    import pandas as pd

    from damcha_ts.models import build_model

    directory = Path(directory)
    meta_path = directory / META_FILE
    weights = directory / WEIGHTS_FILE
    for path in (meta_path, weights):
        if not path.is_file():
            raise DatasetNotFoundError(
                f"{path} is missing: {directory} is not a saved damcha_ts model directory (or its save was cut short)"
            )
    try:
        document = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{meta_path}: not valid JSON: {exc}") from exc
    if document.get("format") != FORMAT or document.get("format_version") != FORMAT_VERSION:
        raise ConfigError(
            f"{meta_path}: format {document.get('format')!r} v{document.get('format_version')} is not "
            f"{FORMAT} v{FORMAT_VERSION}"
        )
    actual = _sha256(weights)
    if actual != document.get("weights_sha256"):
        raise ChecksumError(
            f"{weights}: sha256 {actual} differs from {document.get('weights_sha256')} recorded in "
            f"{META_FILE}; the weights were modified or replaced after saving"
        )
    model = build_model(dict(document["model"]))
    try:
        state = torch.load(weights, map_location=map_location, weights_only=True)
    except Exception as exc:  # any unpickling failure means an unusable file
        raise ChecksumError(f"{weights}: cannot be read as a weights-only checkpoint: {exc}") from exc
    _check_state_matches(model, state, weights)
    model.load_state_dict(state)
    model.eval()
    history_values = history_stamps = None
    history = directory / HISTORY_FILE
    if history.is_file():
        with np.load(history, allow_pickle=False) as stored:
            history_values = stored["values"]
            zone = str(stored["tz"]) if "tz" in stored else ""
            history_stamps = pd.DatetimeIndex(pd.to_datetime(stored["timestamps"], utc=bool(zone)), name="date")
        if zone:
            history_stamps = history_stamps.tz_convert(zone)
        columns = len(document["data"]["columns"])
        if history_values.ndim != 2 or history_values.shape[1] != columns or len(history_values) != len(history_stamps):
            raise ChecksumError(
                f"{history}: holds values of shape {history_values.shape} and {len(history_stamps)} timestamps; "
                f"the model has {columns} columns (is it another model's {HISTORY_FILE}?)"
            )
    return LoadedModel(
        model=model,
        meta=SeriesMeta(**document["data"]),
        training=document.get("training", {}),
        metrics=document.get("metrics", {}),
        history_values=history_values,
        history_timestamps=history_stamps,
    )


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
