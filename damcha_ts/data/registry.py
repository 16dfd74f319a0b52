"""The benchmark registry: what each standard long-term forecasting dataset looks like.

The registry ships inside the package (not in ``datasets/``), so an installed copy can find,
download and verify the files anywhere. Shapes, splits and checksums follow
``docs/protocol.md`` §1.1-1.2; the human-readable cards live in ``datasets/*.md``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from damcha_ts.errors import ConfigError

# zhouhaoyi/ETDataset commit whose ETT-small files are byte-identical to the benchmark copies.
_ETT_COMMIT = "1d16c8f4f943005d613b5bc962e9eeb06058cf07"
_ETT_RAW = "https://raw.githubusercontent.com/zhouhaoyi/ETDataset"
_TSLIB_HF = "https://huggingface.co/datasets/thuml/Time-Series-Library/resolve/main"

SPLIT_KINDS = ("ett_hour", "ett_minute", "custom")


class DataWarning(UserWarning):
    """Data we accept but that deserves attention: benchmark irregularities, unverifiable files."""


@dataclass(frozen=True)
class DatasetSpec:
    """One benchmark file and the protocol conventions that apply to it.

    ``n_rows`` counts data rows (no header) and ``n_variates`` the columns besides ``date``.
    ``sha256`` is the digest of the *uncompressed* canonical CSV; ``None`` means we do not know
    it, and loading then warns that the file cannot be verified. ``urls`` are tried in order.
    """

    name: str
    filename: str
    freq: str
    n_rows: int
    n_variates: int
    split: str
    sha256: str | None
    urls: tuple[str, ...]
    target: str = "OT"
    time_column: str = "date"
    # Explicit strptime format: parsing is then fast and never guesses; None lets pandas infer.
    date_format: str | None = "%Y-%m-%d %H:%M:%S"
    # Folder of the file inside the TSLib/iTransformer ``./dataset`` layout, also searched.
    subdir: str = ""
    aliases: tuple[str, ...] = ()
    license: str = ""
    citation: str = ""

    def __post_init__(self) -> None:
        if self.split not in SPLIT_KINDS:
            raise ConfigError(f"DatasetSpec {self.name!r}: split must be one of {SPLIT_KINDS}, got {self.split!r}")


def _ett(name: str, freq: str, n_rows: int, split: str, sha256: str) -> DatasetSpec:
    return DatasetSpec(name=name, filename=f"{name}.csv", freq=freq, n_rows=n_rows, n_variates=7, split=split,
                       sha256=sha256, subdir="ETT-small", license="CC BY-ND 4.0",
                       citation="Zhou et al., Informer, AAAI 2021",
                       urls=(f"{_ETT_RAW}/{_ETT_COMMIT}/ETT-small/{name}.csv", f"{_TSLIB_HF}/ETT-small/{name}.csv"))


def _tslib(name: str, folder: str, freq: str, n_rows: int, n_variates: int, sha256: str | None, *,
           citation: str = "Lai et al., LSTNet, SIGIR 2018; Wu et al., Autoformer, NeurIPS 2021",
           **extra) -> DatasetSpec:
    """A dataset of TSLib's collection (``<folder>/<folder>.csv`` on its Hugging Face mirror), split 70/10/20."""
    return DatasetSpec(name=name, filename=f"{folder}.csv", freq=freq, n_rows=n_rows, n_variates=n_variates,
                       split="custom", sha256=sha256, urls=(f"{_TSLIB_HF}/{folder}/{folder}.csv",),
                       subdir=folder, license="none stated (research-use benchmark data)", citation=citation, **extra)


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        _ett("ETTh1", "h", 17420, "ett_hour", "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066"),
        _ett("ETTh2", "h", 17420, "ett_hour", "a3dc2c597b9218c7ce1cd55eb77b283fd459a1d09d753063f944967dd6b9218b"),
        _ett("ETTm1", "15min", 69680, "ett_minute", "6ce1759b1a18e3328421d5d75fadcb316c449fcd7cec32820c8dafda71986c9e"),
        _ett("ETTm2", "15min", 69680, "ett_minute", "db973ca252c6410a30d0469b13d696cf919648d0f3fd588c60f03fdbdbadd1fd"),
        _tslib("Weather", "weather", "10min", 52696, 21, "34ee981d07313e51da2a50bb600072c8ae4a69cb4b0651f4cb93a069d7a2ba63",
               citation="Wu et al., Autoformer, NeurIPS 2021; MPI-BGC Jena weather station"),
        _tslib("Traffic", "traffic", "h", 17544, 862, "cb06463d56fa17d87f47027cd9389ceae82a69eddee51cdb61480e120dab0b16"),
        _tslib("Electricity", "electricity", "h", 26304, 321,
               "7e45845d54c5219bad0ae6bc1b5316cf8ff9cead5d33fa998a5a51c2e4a497ad", aliases=("ECL",)),
        # Its checksum is not verified by this project (see datasets/Exchange.md), nor the packaged
        # file's stamp layout (pandas infers it).
        _tslib("Exchange", "exchange_rate", "D", 7588, 8, None, date_format=None,
               aliases=("exchange_rate", "exchange-rate")),
    )
}


def _lookup_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for spec in DATASETS.values():
        for key in (spec.name, spec.filename, *spec.aliases):
            table[key.lower()] = spec.name
    return table


def is_benchmark_name(name: str) -> bool:
    """Whether ``name`` (any case, or an alias such as ``ecl``) names a registered benchmark."""
    return name.lower() in _lookup_table()


def get_spec(name: str | DatasetSpec) -> DatasetSpec:
    """The registry entry for ``name``, case-insensitive; aliases: ``ecl``, ``exchange_rate``.

    Raises ConfigError for an unknown name, suggesting the closest registered names.
    """
    if isinstance(name, DatasetSpec):
        return name
    table = _lookup_table()
    key = str(name).lower()
    if key in table:
        return DATASETS[table[key]]
    close = difflib.get_close_matches(key, list(table), n=3, cutoff=0.5)
    suggestions = list(dict.fromkeys(table[c] for c in close))
    hint = f" Did you mean {' or '.join(map(repr, suggestions))}?" if suggestions else ""
    raise ConfigError(f"unknown dataset {name!r}.{hint} Known datasets: {', '.join(DATASETS)}.")
