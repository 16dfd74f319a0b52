"""DAMCHA against MHA: every DAMCHA row (a family's main row and its ablation labels) against the
MHA row of its family, over the (dataset, horizon) cells where both have results. The summary
table and the report's figures are drawn from these numbers.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from damcha_ts.leaderboard.dataset_results import (
    MAIN_MODELS,
    DatasetResults,
    ExpectedCell,
    dataset_order,
    table_horizons,
)
from damcha_ts.models.registry import FAMILIES


def relative_change(value: float, base: float) -> float:
    """100·(value − base)/base: the report's one measure of DAMCHA against MHA (negative = better)."""
    return 100.0 * (value - base) / base


def compare_damcha_mha(results: Mapping[str, DatasetResults], mha: str, damcha: str) -> dict:
    """DAMCHA vs MHA over every (dataset, horizon) where both have a seed-mean MSE.

    Returns wins / losses / ties (lower MSE wins; a tie is equality of the means), the mean relative
    change 100·(DAMCHA − MHA)/MHA in %, and the matched pairs.
    """
    pairs = []
    for dataset in dataset_order(results):
        data = results[dataset]
        for horizon in data.horizons():
            a, b = data.stat(mha, horizon, "mse"), data.stat(damcha, horizon, "mse")
            if a is not None and b is not None:
                pairs.append((dataset, horizon, a.mean, b.mean))
    changes = [relative_change(d, m) for _, _, m, d in pairs]
    return {
        "pairs": pairs,
        "wins": sum(d < m for _, _, m, d in pairs),
        "losses": sum(d > m for _, _, m, d in pairs),
        "ties": sum(d == m for _, _, m, d in pairs),
        "mean_relative_change_pct": statistics.fmean(changes) if changes else None,
    }


def damcha_variants(results: Mapping[str, DatasetResults]) -> dict[str, str]:
    """{DAMCHA row: the MHA row it is compared with}, architecture by architecture: its main DAMCHA row,
    then its ablation labels, matched by the family's prefix (``itransformer_…``). Labels of no known
    family are left out."""
    ablations = sorted({m for data in results.values() for m in data.runs} - set(MAIN_MODELS))
    variants = {}
    for spec in FAMILIES.values():
        mha, damcha = spec.mha_and_damcha
        variants[damcha] = mha
        variants |= {label: mha for label in ablations if label.startswith(spec.family + "_")}
    return variants


def mse_changes(results: Mapping[str, DatasetResults]) -> tuple[dict, list[tuple[str, int]]]:
    """({DAMCHA row: {(dataset, horizon): % MSE change against its MHA row}}, the (dataset, horizon)
    columns in dataset order): the data of the DAMCHA-vs-MHA figure."""
    changes = {}
    for label, mha in damcha_variants(results).items():
        pairs = compare_damcha_mha(results, mha, label)["pairs"]
        if pairs:
            changes[label] = {(d, h): relative_change(dam, base) for d, h, base, dam in pairs}
    order = dataset_order(results)
    columns = sorted({cell for per_cell in changes.values() for cell in per_cell},
                     key=lambda cell: (order.index(cell[0]), cell[1]))
    return changes, columns


def average_mse(results: Mapping[str, DatasetResults], expected: Sequence[ExpectedCell]) -> dict:
    """{dataset: {model: seed-mean Avg MSE over the table's horizons}}: the data of the Avg figure."""
    averages: dict[str, dict[str, float]] = {}
    for dataset in dataset_order(results):
        data = results[dataset]
        horizons = table_horizons(data, expected)
        for model in data.model_labels():
            stat = data.average(model, horizons, "mse")
            if stat is not None:
                averages.setdefault(dataset, {})[model] = stat.mean
    return averages

