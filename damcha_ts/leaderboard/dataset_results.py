"""CSV rows grouped into cells: per dataset, one row per (model, horizon, seed), and the mean ± std
over seeds that every table of LEADERBOARD.md is made of.

Conventions (stated in the report too):
- std is the sample standard deviation over seeds (ddof = 1); with one seed only the mean is shown;
- Avg of a model is computed per seed (mean over the table's horizons) for the seeds that finished
  every horizon, then mean ± std over those seeds;
- when a cell has several rows, the latest row matching the grid's current config hash wins, else
  the latest row (the others are counted as superseded in the report).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from damcha_ts.baselines import METHODS as NAIVE_METHODS
from damcha_ts.data.registry import DATASETS
from damcha_ts.models.registry import MODEL_NAMES

# Column order of our models: the registry's, then the naive baselines; any other label in the CSV
# (an ablation) gets its own table.
MAIN_MODELS = (*MODEL_NAMES, *NAIVE_METHODS)


@dataclass(frozen=True)
class Stat:
    """Mean ± sample std of one metric over ``n`` seeds (std is None for a single seed)."""

    mean: float
    std: float | None
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        values = list(values)
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None, len(values))

    def text(self) -> str:
        return f"{self.mean:.3f}" if self.std is None else f"{self.mean:.3f} ± {self.std:.3f}"


@dataclass(frozen=True)
class ExpectedCell:
    """A cell some grid wants; ``config_hash`` None means "any hash counts"."""

    dataset: str
    model: str
    horizon: int
    seed: int
    config_hash: str | None = None
    command: str = ""
    compare_with: tuple[str, ...] = ()  # rows drawn beside this one in the ablation figure (grid key)
    checkpointed_epochs: int = 0  # an unfinished cell's epochs in its run folder (the rerun goes on from there)


@dataclass
class DatasetResults:
    """The rows of one dataset: one row per (model, horizon, seed), as ``collect`` chose them."""

    dataset: str
    # runs[model][horizon][seed] = row
    runs: dict[str, dict[int, dict[int, dict]]] = field(default_factory=dict)
    superseded: int = 0

    def rows(self) -> list[dict]:
        return [row for per_h in self.runs.values() for per_s in per_h.values() for row in per_s.values()]

    def horizons(self) -> list[int]:
        return sorted({h for per_h in self.runs.values() for h in per_h})

    def stat(self, model: str, horizon: int, metric: str) -> Stat | None:
        seeds = self.runs.get(model, {}).get(horizon, {})
        values = [row[metric] for row in seeds.values() if not math.isnan(row[metric])]
        return Stat.of(values) if values else None

    def average(self, model: str, horizons: Sequence[int], metric: str) -> Stat | None:
        """Per-seed mean over ``horizons`` for seeds that finished all of them, then over seeds."""
        per_h = self.runs.get(model, {})
        complete = set.intersection(*(set(per_h.get(h, {})) for h in horizons)) if horizons else set()
        per_seed = [statistics.fmean(per_h[h][seed][metric] for h in horizons) for seed in sorted(complete)]
        per_seed = [v for v in per_seed if not math.isnan(v)]
        return Stat.of(per_seed) if per_seed else None

    def model_labels(self) -> list[str]:
        """The main models that have rows, in column order, then the ablation labels, sorted."""
        return [m for m in MAIN_MODELS if m in self.runs] + sorted(set(self.runs) - set(MAIN_MODELS))


def collect(rows: Iterable[Mapping], expected: Sequence[ExpectedCell] = ()) -> dict[str, DatasetResults]:
    """Group CSV rows by dataset, one row per (model, horizon, seed).

    When a cell has several rows, the last one whose config hash matches the grid's current config
    (``expected``) wins, else simply the last one; the others count as superseded.
    """
    wanted = {(c.dataset, c.model, c.horizon, c.seed): c.config_hash for c in expected if c.config_hash}
    grouped: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["dataset"], row["model"], int(row["horizon"]), int(row["seed"]))
        grouped.setdefault(key, []).append(dict(row))
    results: dict[str, DatasetResults] = {}
    for (dataset, model, horizon, seed), candidates in grouped.items():
        current = [r for r in candidates if r["config_hash"] == wanted.get((dataset, model, horizon, seed))]
        chosen = (current or candidates)[-1]
        entry = results.setdefault(dataset, DatasetResults(dataset))
        entry.runs.setdefault(model, {}).setdefault(horizon, {})[seed] = chosen
        entry.superseded += len(candidates) - 1
    return results


def dataset_order(names: Iterable[str]) -> list[str]:
    """The benchmark datasets in the data registry's order, then any other name, sorted."""
    names = set(names)
    known = [d for d in DATASETS if d in names]
    return known + sorted(names - set(known))


def table_horizons(data: DatasetResults, expected: Sequence[ExpectedCell]) -> list[int]:
    """The horizons of a dataset's tables: those with rows and those a grid plans."""
    return sorted({*data.horizons(), *(c.horizon for c in expected if c.dataset == data.dataset)})


def is_missing(value) -> bool:
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def device_label(hardware: str) -> str:
    """A row's ``hardware`` in a few words: the GPU's name, or the CPU threads it trained with.

    >>> device_label("gpu=NVIDIA H200 cpu=Intel Xeon threads=16"), device_label("cpu=AMD EPYC threads=1")
    ('NVIDIA H200', 'CPU, 1 thread')
    """
    fields = dict(re.findall(r"(\w+)=(.*?)(?= \w+=|$)", hardware))
    if "gpu" in fields:
        return fields["gpu"]
    threads = fields.get("threads")
    if threads is None:
        return hardware or "–"
    return f"CPU, {threads} thread{'' if threads == '1' else 's'}"

