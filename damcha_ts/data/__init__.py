"""Data layer: benchmark registry, file location and download, loading, the protocol, windows.

Importing this package needs only NumPy and pandas; ``WindowDataset`` and ``ForecastDataModule``
(torch / Lightning) are imported on first use.

    >>> from damcha_ts.data import prepare
    >>> data = prepare("ETTh1", seq_len=96, pred_len=96)        # doctest: +SKIP
    >>> data.window_count("test")                               # doctest: +SKIP
    2785
"""

from __future__ import annotations

from damcha_ts.data.frames import frame_info, load_frame
from damcha_ts.data.protocol import SeriesData, StandardScaler, describe, prepare, split_borders, time_features
from damcha_ts.data.registry import DATASETS, DatasetSpec, DataWarning, get_spec
from damcha_ts.data.storage import cache_dir, checksum_status, download_dataset, file_sha256, locate_dataset, verify_file

__all__ = [
    "DATASETS",
    "DataWarning",
    "DatasetSpec",
    "ForecastDataModule",
    "SeriesData",
    "StandardScaler",
    "WindowDataset",
    "cache_dir",
    "checksum_status",
    "describe",
    "download_dataset",
    "file_sha256",
    "frame_info",
    "get_spec",
    "load_frame",
    "locate_dataset",
    "prepare",
    "split_borders",
    "time_features",
    "verify_file",
]

_LAZY = {"WindowDataset": "damcha_ts.data.windows", "ForecastDataModule": "damcha_ts.data.datamodule"}


def __getattr__(name: str):
    # torch and Lightning load only when someone asks for the torch-facing classes.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'damcha_ts.data' has no attribute {name!r}")
