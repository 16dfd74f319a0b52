"""Published long-term forecasting numbers (protocol.md section 4), kept as data in ``published.json``.

The JSON holds, per dataset and model, MSE / MAE for each horizon and the "avg" row, plus a source
line per model and notes for entries the protocol marks (e.g. a computed rather than published Avg).
The report prints them beside our own runs; nothing here is ever estimated or filled in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PUBLISHED_FILE = Path(__file__).with_name("published.json")


@dataclass(frozen=True)
class PublishedResults:
    """The published tables: ``results[dataset][model][row] = {"mse": .., "mae": ..}``.

    ``row`` is a horizon as a string ("96", "192", "336", "720") or "avg".
    """

    about: str
    horizons: tuple[int, ...]
    sources: dict[str, str]
    notes: tuple[dict, ...]
    results: dict[str, dict[str, dict[str, dict[str, float]]]]

    @property
    def models(self) -> tuple[str, ...]:
        """Published model names in table order (iTransformer, PatchTST, TimesNet, DLinear, TimeMixer)."""
        return tuple(self.sources)

    def has_dataset(self, dataset: str) -> bool:
        return dataset in self.results

    def value(self, dataset: str, model: str, row: int | str, metric: str) -> float | None:
        """One published number, or None where the table has none."""
        entry = self.results.get(dataset, {}).get(model, {}).get(str(row).lower())
        return None if entry is None else entry[metric]

    def note(self, dataset: str, model: str, row: int | str) -> str | None:
        """The protocol's remark on one entry (e.g. "computed: ..."), if any."""
        for note in self.notes:
            if (note["dataset"], note["model"], note["row"]) == (dataset, model, str(row).lower()):
                return note["text"]
        return None


@lru_cache(maxsize=1)
def load_published(path: str | Path = PUBLISHED_FILE) -> PublishedResults:
    """Read the published-numbers file (cached; the file ships with the package)."""
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    return PublishedResults(about=raw["about"], horizons=tuple(int(h) for h in raw["horizons"]),
                            sources=dict(raw["sources"]), notes=tuple(raw["notes"]), results=raw["results"])
