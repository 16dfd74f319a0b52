"""Data layer: benchmark registry, file location and download, loading, the protocol, windows.

Importing this package imports nothing heavy: every name below loads its module (NumPy and pandas
for the loaders, torch / Lightning for ``WindowDataset`` and ``ForecastDataModule``) on first use,
so that the typed options (``damcha_ts.data.options``) are read with configs at no cost.

    >>> from damcha_ts.data import prepare
    >>> data = prepare("ETTh1", seq_len=96, pred_len=96)        # a Panel of one  # doctest: +SKIP
    >>> data.window_count("test")                               # doctest: +SKIP
    2785
"""

from __future__ import annotations

from damcha_ts.lazy import lazy_attributes

_LAZY = {
    **dict.fromkeys(("frame_info", "load_frame"), "damcha_ts.data.frames"),
    **dict.fromkeys(("SeriesData", "StandardScaler", "prepare_series", "split_borders", "time_features"),
                    "damcha_ts.data.protocol"),
    **dict.fromkeys(("Panel", "describe", "prepare"), "damcha_ts.data.panel"),
    **dict.fromkeys(("DATASETS", "DatasetSpec", "DataWarning", "get_spec"), "damcha_ts.data.registry"),
    **dict.fromkeys(("cache_dir", "checksum_status", "download_dataset", "file_sha256", "locate_dataset", "verify_file"),
                    "damcha_ts.data.storage"),
    "WindowDataset": "damcha_ts.data.windows",
    "ForecastDataModule": "damcha_ts.data.datamodule",
}

__all__ = sorted(_LAZY)

# Each module loads when one of its names is first asked for.
__getattr__ = lazy_attributes("damcha_ts.data", _LAZY)
