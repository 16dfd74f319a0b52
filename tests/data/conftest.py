"""Shared fixtures of the data-layer tests: the real benchmark files, each read once per session."""

from __future__ import annotations

import gzip
import warnings

import pandas as pd
import pytest



@pytest.fixture(scope="session")
def benchmark_frame(data_root):
    """``benchmark_frame(name)``: ``load_frame(name)`` read once per session, plus its warnings."""
    from damcha_ts.data import load_frame

    cache: dict[str, tuple[pd.DataFrame, list[warnings.WarningMessage]]] = {}

    def get(name: str) -> pd.DataFrame:
        if name not in cache:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                frame = load_frame(name, download=False)
            cache[name] = (frame, caught)
        return cache[name][0]

    get.warnings_of = lambda name: (get(name), cache[name][1])  # (frame, warnings on loading)
    return get


@pytest.fixture(scope="session")
def etth1_csv_bytes(data_root) -> bytes:
    """The uncompressed canonical ETTh1.csv, byte for byte."""
    return gzip.decompress((data_root / "ETTh1.csv.gz").read_bytes())


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Tests never write into the checkout's datasets/ or the user's ~/.cache.
    monkeypatch.setenv("DAMCHA_TS_CACHE", str(tmp_path_factory.mktemp("cache")))
