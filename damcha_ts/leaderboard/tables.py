"""Each table of LEADERBOARD.md as a header and rows of plain text, from the cells of
dataset_results.py and the comparisons of comparison.py. Nothing here writes Markdown (render.py does)
or holds a target (the grid files' ``targets:`` sections do).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from damcha_ts.leaderboard.comparison import compare_damcha_mha, damcha_variants, relative_change
from damcha_ts.leaderboard.dataset_results import (
    MAIN_MODELS,
    DatasetResults,
    ExpectedCell,
    Stat,
    dataset_order,
    device_label,
    is_missing,
)
from damcha_ts.models.registry import FAMILIES

if TYPE_CHECKING:
    from damcha_ts.leaderboard.published import PublishedResults
    from damcha_ts.leaderboard.targets import GoalColumn, GoalTable, ParityTarget

# (MHA row, DAMCHA row) of each model family, in the registry's order.
MHA_DAMCHA_PAIRS = tuple(spec.mha_and_damcha for spec in FAMILIES.values())
PROTOCOL_HORIZONS = (96, 192, 336, 720)
METRICS = ("mse", "mae")
# The published column beside the Summary's Avg table (the architectures are iTransformer-style).
REFERENCE_PUBLISHED = "iTransformer"


@dataclass(frozen=True)
class Table:
    """A table as text: the ``header``, then ``rows`` of cells; ``strong`` holds the (row, column)
    cells to emphasise (the best value of a row, a main row's label, a failed check)."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    strong: frozenset[tuple[int, int]] = frozenset()


def _table(header: Iterable[str], rows: Iterable[Iterable[str]], strong: Iterable[tuple[int, int]] = ()) -> Table:
    return Table(tuple(header), tuple(tuple(row) for row in rows), frozenset(strong))


def _best(cells: Sequence[tuple[str, float | None]]) -> list[int]:
    """The cells whose value, at the 3 decimals shown, is the minimum of the row."""
    shown = [round(v, 3) for _, v in cells if v is not None]
    best = min(shown) if shown else None
    return [k for k, (_, v) in enumerate(cells) if v is not None and round(v, 3) == best]


def _model_cell(
    data: DatasetResults, model: str, row_key, horizons, metric: str, expected_seeds: int
) -> tuple[str, float | None]:
    """One of our table cells: "mean ± std" (plus a seed count when short of the grid's) or "missing"."""
    stat = data.average(model, horizons, metric) if row_key == "avg" else data.stat(model, row_key, metric)
    if stat is None:
        return "missing", None
    text = stat.text()
    if expected_seeds and stat.n < expected_seeds:
        text += f" ({stat.n}/{expected_seeds} seeds)"
    return text, stat.mean


def _published_cell(
    published: PublishedResults, dataset: str, model: str, row_key, metric: str, avg_comparable: bool
) -> tuple[str, float | None]:
    """A published number ("*" if protocol.md marks it); "–" where there is none or the Avg would
    average other horizons than ours."""
    if row_key == "avg" and not avg_comparable:
        return "–", None
    value = published.value(dataset, model, row_key, metric)
    if value is None:
        return "–", None
    marker = "*" if published.note(dataset, model, row_key) else ""
    return f"{value:.3f}{marker}", value


def metric_tables(
    data: DatasetResults,
    models: Sequence[str],
    horizons: Sequence[int],
    published: PublishedResults,
    expected_seeds: Mapping[str, int],
    with_published: bool,
) -> list[tuple[str, Table]]:
    """[(metric, table)]: one row per horizon plus Avg, our models (and the published ones) as columns,
    the best value of each row strong; a lone column (one ablation row) has nothing to beat."""
    avg_comparable = tuple(horizons) == PROTOCOL_HORIZONS
    pub_models = published.models if with_published and published.has_dataset(data.dataset) else ()
    tables = []
    for metric in METRICS:
        rows, strong = [], []
        for row_key in (*horizons, "avg"):
            cells = [_model_cell(data, m, row_key, horizons, metric, expected_seeds.get(m, 0)) for m in models]
            cells += [_published_cell(published, data.dataset, m, row_key, metric, avg_comparable) for m in pub_models]
            if len(cells) > 1:
                strong += [(len(rows), 1 + k) for k in _best(cells)]
            rows.append(["Avg" if row_key == "avg" else str(row_key), *(text for text, _ in cells)])
        header = ["H", *models, *(f"{m} (published)" for m in pub_models)]
        tables.append((metric, _table(header, rows, strong)))
    return tables


def training_table(data: DatasetResults, models: Sequence[str]) -> Table | None:
    """How each trained cell ran (seed means): size, when validation peaked, and what it cost; None
    when nothing trained (naive rows train nothing).

    The best epoch is where early stopping's validation MSE was lowest (1-based, the weights tested);
    a model that peaks in its first epochs while another improves until late learns faster or
    overfits sooner -- the first thing to look at when one attention kind loses to the other.
    """
    body = []
    for model in models:
        for horizon in sorted(data.runs.get(model, {})):
            rows = [r for r in data.runs[model][horizon].values()
                    if not is_missing(r.get("epochs_run")) and int(r["epochs_run"]) > 0]
            if rows:
                body.append([model, str(horizon), *_training_cells(rows)])
    header = ["model", "H", "seeds", "parameters", "best epoch (per seed)", "epochs run", "s / epoch", "wall min",
              "ran on"]
    return _table(header, body) if body else None


def _training_cells(rows: Sequence[Mapping]) -> list[str]:
    def mean(key: str) -> float:
        return statistics.fmean(float(r[key]) for r in rows)

    best = [int(r["best_epoch"]) + 1 for r in rows if not is_missing(r.get("best_epoch"))]
    return [
        str(len(rows)), f"{mean('n_params') / 1e6:.2f}M", ", ".join(map(str, best)) or "–",
        f"{mean('epochs_run'):.1f}", f"{mean('seconds_per_epoch'):.0f}", f"{mean('wall_seconds') / 60:.1f}",
        "; ".join(dict.fromkeys(device_label(str(r.get("hardware") or "")) for r in rows)),
    ]


def damcha_vs_mha_table(results: Mapping[str, DatasetResults]) -> Table:
    """Every DAMCHA row against the MHA row of its architecture, in one table.

    Per architecture its main row comes first (the method's defaults, shown even before it has a
    result, its label strong), then its ablation variants with a result: each variant's record in
    one place instead of one table per dataset.
    """
    body, strong = [], []
    for label, mha in damcha_variants(results).items():
        cmp = compare_damcha_mha(results, mha, label)
        main = label in MAIN_MODELS
        if not cmp["pairs"] and not main:
            continue
        change = cmp["mean_relative_change_pct"]
        averages = []
        for dataset in dataset_order(results):
            ours = results[dataset].average(label, PROTOCOL_HORIZONS, "mse")
            base = results[dataset].average(mha, PROTOCOL_HORIZONS, "mse")
            if ours and base:
                averages.append(f"{dataset} {relative_change(ours.mean, base.mean):+.2f} %")
        if main:
            strong.append((len(body), 0))
        body.append([
            label, mha, str(len(cmp["pairs"])), str(cmp["wins"]), str(cmp["losses"]), str(cmp["ties"]),
            "missing" if change is None else f"{change:+.2f} %", ", ".join(averages) or "–",
        ])
    header = ["DAMCHA row", "vs", "compared cells", "wins", "losses", "ties", "mean relative change in MSE",
              "Avg MSE change per dataset (all four horizons run)"]
    return _table(header, body, strong)


def average_table(
    results: Mapping[str, DatasetResults], published: PublishedResults, expected: Sequence[ExpectedCell]
) -> Table:
    """Per dataset: each architecture's MHA and DAMCHA Avg MSE over the protocol horizons, the change,
    and the published reference Avg; "missing" where a grid plans the row, "–" where none does."""
    planned = {(c.dataset, c.model) for c in expected}

    def text(dataset: str, model: str, stat: Stat | None) -> str:
        return stat.text() if stat else ("missing" if (dataset, model) in planned else "–")

    body = []
    for dataset in dataset_order({*results, *(dataset for dataset, _ in planned)}):
        data = results.get(dataset, DatasetResults(dataset))
        row = [dataset]
        for mha, damcha in MHA_DAMCHA_PAIRS:
            a = data.average(mha, PROTOCOL_HORIZONS, "mse")
            b = data.average(damcha, PROTOCOL_HORIZONS, "mse")
            row += [text(dataset, mha, a), text(dataset, damcha, b),
                    f"{relative_change(b.mean, a.mean):+.2f} %" if a and b else "–"]
        pub = published.value(dataset, REFERENCE_PUBLISHED, "avg", "mse")
        row.append("–" if pub is None else f"{pub:.3f}")
        body.append(row)
    header = ["dataset", *(name for pair in MHA_DAMCHA_PAIRS for name in (*pair, "change")),
              f"{REFERENCE_PUBLISHED} (published)"]
    return _table(header, body)


# ---------------------------------------------------------------------------- targets
def parity_table(
    results: Mapping[str, DatasetResults], published: PublishedResults, parity: ParityTarget, datasets: Iterable[str]
) -> Table:
    """Our ``parity.model`` Avg MSE against the published one on every dataset (of ``datasets`` and the
    target's own) that has a published Avg; a difference beyond the tolerance is strong."""
    body, strong = [], []
    for dataset in dataset_order({*datasets, *parity.datasets}):
        pub = published.value(dataset, parity.published, "avg", "mse")
        if pub is None:
            continue
        ours = results[dataset].average(parity.model, PROTOCOL_HORIZONS, "mse") if dataset in results else None
        if ours is None:
            body.append([dataset, "missing", f"{pub:.3f}", "–", "not run yet"])
            continue
        diff = ours.mean - pub
        if abs(diff) > parity.tolerance:
            strong.append((len(body), 4))
        body.append([dataset, ours.text(), f"{pub:.3f}", f"{diff:+.4f}", "yes" if abs(diff) <= parity.tolerance else "NO"])
    header = ["dataset", f"ours ({parity.model})", f"published {parity.published}", "difference",
              f"within {parity.tolerance}"]
    return _table(header, body, strong)


def goal_table(results: Mapping[str, DatasetResults], published: PublishedResults, goal: GoalTable) -> Table:
    """One row per DAMCHA row compared with ``goal.baseline``: the main row first (its label strong,
    shown even before it has run), then every variant with at least one verdict; one cell per column."""
    body, strong = [], []
    for label, mha in damcha_variants(results).items():
        if mha != goal.baseline:
            continue
        verdicts = [[(d, _verdict(results, published, goal, column, label, d)) for d in column.datasets]
                    for column in goal.columns]
        main = label in MAIN_MODELS
        if not main and all(v is None for column in verdicts for _, v in column):
            continue
        if main:
            strong.append((len(body), 0))
        body.append([label, *(_goal_cell(c, v) for c, v in zip(goal.columns, verdicts))])
    return _table(["DAMCHA row", *(column.header for column in goal.columns)], body, strong)


def _verdict(
    results: Mapping[str, DatasetResults], published: PublishedResults, goal: GoalTable, column: GoalColumn,
    label: str, dataset: str,
) -> bool | None:
    """Whether ``label``'s Avg MSE on ``dataset`` is ≤ the column's reference; None until both exist."""
    data = results.get(dataset)
    ours = data.average(label, PROTOCOL_HORIZONS, "mse") if data else None
    if column.against == "baseline":
        base = data.average(goal.baseline, PROTOCOL_HORIZONS, "mse") if data else None
        reference = None if base is None else base.mean
    else:
        reference = published.value(dataset, goal.published, "avg", "mse")
    return None if ours is None or reference is None else ours.mean <= reference


def _goal_cell(column: GoalColumn, verdicts: Sequence[tuple[str, bool | None]]) -> str:
    """"k of n run (… yes, … no) → met / not met / not decidable yet" with ``at_least``; else the
    verdict of each dataset (a bare word for a single one)."""
    listed = ", ".join(f"{d} {_word(v)}" for d, v in verdicts)
    if column.at_least is None:
        return _word(verdicts[0][1]) if len(verdicts) == 1 else listed
    decided = [v for _, v in verdicts if v is not None]
    met = sum(decided)
    if met >= column.at_least:
        status = "met"
    elif met + len(verdicts) - len(decided) >= column.at_least:
        status = "not decidable yet"
    else:
        status = "not met"
    return f"{met} of {len(decided)} run ({listed}) → {status}"


def _word(verdict: bool | None) -> str:
    return "missing" if verdict is None else ("yes" if verdict else "no")


# ---------------------------------------------------------------------------- a dataset's section
@dataclass(frozen=True)
class CellProblems:
    """Planned cells of a dataset that the tables cannot show as planned: {model: ["H=96 seed 2023", …]}."""

    missing: dict[str, list[str]]  # no row yet (with the epochs its run folder has checkpointed)
    outdated: dict[str, list[str]]  # shown from a row of another config hash
    diverged: dict[str, list[str]]  # finished without a finite test MSE: left out of every mean


def cell_problems(dataset: str, expected: Sequence[ExpectedCell], data: DatasetResults) -> CellProblems:
    problems = CellProblems({}, {}, {})
    for cell in expected:
        if cell.dataset != dataset:
            continue
        row = data.runs.get(cell.model, {}).get(cell.horizon, {}).get(cell.seed)
        where = f"H={cell.horizon} seed {cell.seed}"
        if row is None:
            if cell.checkpointed_epochs:
                n = cell.checkpointed_epochs
                where += f" (in progress: {n} epoch{'' if n == 1 else 's'} checkpointed)"
            problems.missing.setdefault(cell.model, []).append(where)
        elif cell.config_hash is not None and row["config_hash"] != cell.config_hash:
            problems.outdated.setdefault(cell.model, []).append(where)
        elif is_missing(row["mse"]):
            problems.diverged.setdefault(cell.model, []).append(where)
    return problems


def expected_seed_counts(cells: Sequence[ExpectedCell]) -> dict[str, int]:
    """{model: the most seeds a grid plans for one of its horizons} (for the "(n/m seeds)" marks)."""
    counts: dict[str, int] = {}
    for cell in cells:
        seeds = {c.seed for c in cells if c.model == cell.model and c.horizon == cell.horizon}
        counts[cell.model] = max(counts.get(cell.model, 0), len(seeds))
    return counts


def table_columns(data: DatasetResults, cells: Sequence[ExpectedCell]) -> tuple[list[str], list[str]]:
    """(main models a row or a grid names, in column order; ablation labels with a result, sorted):
    an ablation row gets a column once it has a result, until then only the missing list names it."""
    labels = {*data.runs, *(c.model for c in cells)}
    return [m for m in MAIN_MODELS if m in labels], sorted(set(data.runs) - set(MAIN_MODELS))


def reproduce_commands(data: DatasetResults, cells: Sequence[ExpectedCell]) -> list[str]:
    """The commands that (re)produce a dataset's rows: the grids' and those of the grids its rows name."""
    commands = {c.command for c in cells if c.command}
    commands |= {f"damcha-ts leaderboard --config {row['grid']} --only-dataset {data.dataset}"
                 for row in data.rows() if row.get("grid")}
    return sorted(commands)
