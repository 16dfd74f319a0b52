"""LEADERBOARD.md, regenerated from the results CSV and nothing else.

For each dataset: MSE and MAE tables, one row per horizon plus Avg, our models as mean ± std over
seeds beside the published numbers (protocol.md §4), the best value of each row in bold. Then the
DAMCHA-vs-MHA summary per architecture, the protocol-parity check, the command that reproduces each
table, and a "missing" list for cells of the grids that have not run. A number appears only if a
CSV row holds it.

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
from pathlib import Path

from damcha_ts.leaderboard.published import PublishedResults, load_published

# Column order of our models; any other label in the CSV (an ablation) gets its own table.
MAIN_MODELS = (
    "itransformer_mha",
    "itransformer_damcha",
    "gateformer_mha",
    "gateformer_damcha",
    "repeat_last",
    "window_mean",
)
ARCHITECTURES = {"iTransformer": ("itransformer_mha", "itransformer_damcha"),
                 "Gateformer": ("gateformer_mha", "gateformer_damcha")}
PROTOCOL_HORIZONS = (96, 192, 336, 720)
PARITY_TOLERANCE = 0.015  # issue 5: our iTransformer-MHA Avg MSE vs the published one
ETT_DATASETS = ("ETTh1", "ETTh2", "ETTm1", "ETTm2")
DATASET_ORDER = ("ETTh1", "ETTh2", "ETTm1", "ETTm2", "Weather", "Traffic", "Electricity", "Exchange")
METRICS = ("mse", "mae")
FINDINGS_NAME = "FINDINGS.md"  # optional hand-written notes next to the CSV, included verbatim
# Beside the CSV: every grid the report covers, so a run over one grid keeps the others' sections
# (a grid whose dataset file is not redistributed has no row that would name it).
REPORT_GRIDS_NAME = "report_grids.yaml"
_REPORT_GRIDS_HEADER = (
    "# The grids LEADERBOARD.md covers (paths from the project root), kept by `damcha-ts leaderboard`:\n"
    "# a run over one grid adds it here and keeps every other grid's section in the report.\n"
)


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


def _dataset_order(names: Iterable[str]) -> list[str]:
    names = set(names)
    known = [d for d in DATASET_ORDER if d in names]
    return known + sorted(names - set(known))


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return lines


def _bold_best(cells: list[tuple[str, float | None]]) -> list[str]:
    """Bold every cell whose value, at the 3 decimals shown, is the row minimum."""
    shown = [round(v, 3) for _, v in cells if v is not None]
    best = min(shown) if shown else None
    return [f"**{text}**" if v is not None and round(v, 3) == best else text for text, v in cells]


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


def _metric_tables(
    data: DatasetResults,
    models: Sequence[str],
    horizons: Sequence[int],
    published: PublishedResults,
    expected_seeds: Mapping[str, int],
    with_published: bool,
) -> list[str]:
    avg_comparable = tuple(horizons) == PROTOCOL_HORIZONS
    pub_models = published.models if with_published and published.has_dataset(data.dataset) else ()
    lines: list[str] = []
    for metric in METRICS:
        header = ["H", *models, *(f"{m} (published)" for m in pub_models)]
        body = []
        for row_key in (*horizons, "avg"):
            cells = [_model_cell(data, m, row_key, horizons, metric, expected_seeds.get(m, 0)) for m in models]
            cells += [_published_cell(published, data.dataset, m, row_key, metric, avg_comparable) for m in pub_models]
            label = "Avg" if row_key == "avg" else str(row_key)
            # Bold needs something to beat: a lone column (one ablation row) stays plain.
            body.append([label, *(_bold_best(cells) if len(cells) > 1 else [text for text, _ in cells])])
        lines += [f"**{metric.upper()}**", "", *_table(header, body), ""]
    return lines


def _training_table(data: DatasetResults, models: Sequence[str]) -> list[str]:
    """How each trained cell ran (seed means): size, when validation peaked, and what it cost.

    The best epoch is where early stopping's validation MSE was lowest (1-based, the weights tested);
    a model that peaks in its first epochs while another improves until late learns faster or
    overfits sooner -- the first thing to look at when one attention kind loses to the other.
    """
    body = []
    for model in models:
        for horizon in sorted(data.runs.get(model, {})):
            rows = [r for r in data.runs[model][horizon].values()
                    if not _is_missing(r.get("epochs_run")) and int(r["epochs_run"]) > 0]  # naive rows train nothing
            if not rows:
                continue

            def mean(key: str) -> float:
                return statistics.fmean(float(r[key]) for r in rows)

            best = [int(r["best_epoch"]) + 1 for r in rows if not _is_missing(r.get("best_epoch"))]
            body.append([
                model, str(horizon), str(len(rows)), f"{mean('n_params') / 1e6:.2f}M",
                ", ".join(map(str, best)) or "–", f"{mean('epochs_run'):.1f}",
                f"{mean('seconds_per_epoch'):.0f}", f"{mean('wall_seconds') / 60:.1f}",
                "; ".join(dict.fromkeys(device_label(str(r.get("hardware") or "")) for r in rows)),
            ])
    if not body:
        return []
    header = ["model", "H", "seeds", "parameters", "best epoch (per seed)", "epochs run", "s / epoch", "wall min",
              "ran on"]
    return ["Training runs (seed means; best epoch 1-based, as early stopping chose it):", "", *_table(header, body), ""]


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


def _is_missing(value) -> bool:
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def relative_change(value: float, base: float) -> float:
    """100·(value − base)/base: the report's one measure of DAMCHA against MHA (negative = better)."""
    return 100.0 * (value - base) / base


def compare_damcha_mha(results: Mapping[str, DatasetResults], mha: str, damcha: str) -> dict:
    """DAMCHA vs MHA over every (dataset, horizon) where both have a seed-mean MSE.

    Returns wins / losses / ties (lower MSE wins; a tie is equality of the means), the mean relative
    change 100·(DAMCHA − MHA)/MHA in %, and the matched pairs.
    """
    pairs = []
    for dataset in _dataset_order(results):
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


def _summary_section(
    results: Mapping[str, DatasetResults],
    published: PublishedResults,
    expected: Sequence[ExpectedCell],
    variants_plot: str | None = None,
) -> list[str]:
    lines = ["## Summary", ""]
    lines += _damcha_vs_mha_table(results)
    if variants_plot:
        lines += [f"![MSE change of each DAMCHA row against MHA, per dataset and horizon]({variants_plot})", ""]

    planned = {(c.dataset, c.model) for c in expected}
    datasets = _dataset_order({*results, *(dataset for dataset, _ in planned)})

    def average_text(dataset: str, model: str, stat: Stat | None) -> str:
        # "missing": a grid plans it but it has not run; "–": no grid plans it.
        return stat.text() if stat else ("missing" if (dataset, model) in planned else "–")

    lines += ["### Average MSE per dataset (Avg over 96/192/336/720)", ""]
    body = []
    for dataset in datasets:
        data = results.get(dataset, DatasetResults(dataset))
        row = [dataset]
        for mha, damcha in ARCHITECTURES.values():
            a = data.average(mha, PROTOCOL_HORIZONS, "mse")
            b = data.average(damcha, PROTOCOL_HORIZONS, "mse")
            row += [average_text(dataset, mha, a), average_text(dataset, damcha, b),
                    f"{relative_change(b.mean, a.mean):+.2f} %" if a and b else "–"]
        pub = published.value(dataset, "iTransformer", "avg", "mse")
        row.append("–" if pub is None else f"{pub:.3f}")
        body.append(row)
    lines += _table(["dataset", "itransformer_mha", "itransformer_damcha", "change",
                     "gateformer_mha", "gateformer_damcha", "change", "iTransformer (published)"], body)
    lines.append("")

    lines += ["### Protocol parity: our iTransformer-MHA Avg MSE vs the published iTransformer Avg", ""]
    body = []
    for dataset in _dataset_order({*datasets, *ETT_DATASETS}):
        pub = published.value(dataset, "iTransformer", "avg", "mse")
        if pub is None:
            continue
        ours = results[dataset].average("itransformer_mha", PROTOCOL_HORIZONS, "mse") if dataset in results else None
        if ours is None:
            body.append([dataset, "missing", f"{pub:.3f}", "–", "not run yet"])
            continue
        diff = ours.mean - pub
        verdict = "yes" if abs(diff) <= PARITY_TOLERANCE else "**NO**"
        body.append([dataset, ours.text(), f"{pub:.3f}", f"{diff:+.4f}", verdict])
    lines += _table(["dataset", "ours (itransformer_mha)", "published iTransformer", "difference",
                     f"within {PARITY_TOLERANCE}"], body)
    lines.append("")

    lines += _targets_table(results, published)
    return lines


def _targets_table(results: Mapping[str, DatasetResults], published: PublishedResults) -> list[str]:
    """Issue 5's targets for each iTransformer DAMCHA row: the main row first (the one the issue
    asks about), then every ablation variant with an Avg on an ETT dataset or Weather, so the
    reader sees which variant meets them without reading FINDINGS.md."""

    def word(verdict: bool | None) -> str:
        return "missing" if verdict is None else ("yes" if verdict else "no")

    mha_row = ARCHITECTURES["iTransformer"][0]
    body = []
    for label, mha in damcha_variants(results).items():
        if mha != mha_row:
            continue
        ett, weather, against_published = [], None, []
        for dataset in (*ETT_DATASETS, "Weather"):
            data = results.get(dataset)
            base = data.average(mha, PROTOCOL_HORIZONS, "mse") if data else None
            ours = data.average(label, PROTOCOL_HORIZONS, "mse") if data else None
            verdict = None if base is None or ours is None else ours.mean <= base.mean
            if dataset in ETT_DATASETS:
                ett.append((dataset, verdict))
            else:
                weather = verdict
            pub = published.value(dataset, "iTransformer", "avg", "mse")
            against_published.append((dataset, None if ours is None or pub is None else ours.mean <= pub))
        main = label in MAIN_MODELS
        if not main and all(v is None for _, v in against_published):
            continue
        decided = [v for _, v in ett if v is not None]
        met = sum(decided)
        if met >= 3:
            status = "met"
        elif met + len(ett) - len(decided) >= 3:
            status = "not decidable yet"
        else:
            status = "not met"
        body.append([
            f"**{label}**" if main else label,
            f"{met} of {len(decided)} run ({', '.join(f'{d} {word(v)}' for d, v in ett)}) → {status}",
            word(weather),
            ", ".join(f"{d} {word(v)}" for d, v in against_published),
        ])
    lines = ["### Issue 5 targets for DAMCHA-iTransformer (reported as they are)", ""]
    lines += _table(["DAMCHA row", "Avg MSE ≤ our iTransformer-MHA on ≥ 3 of 4 ETT datasets",
                     "Avg MSE ≤ our iTransformer-MHA on Weather", "Avg MSE ≤ the published iTransformer Avg"],
                    body)
    lines += ["", "The issue's targets are for the main row (bold, the method's defaults); the ablation rows "
              "show which variant would meet them. Avg: seed-mean of the Avg over the four horizons, as in "
              "the tables above; `missing`: not every horizon has run.", ""]
    return lines


def damcha_variants(results: Mapping[str, DatasetResults]) -> dict[str, str]:
    """{DAMCHA row: the MHA row it is compared with}, architecture by architecture: its main DAMCHA row,
    then its ablation labels, matched by prefix (``itransformer_…``). Labels of no known architecture
    are left out."""
    ablations = sorted({m for data in results.values() for m in data.runs} - set(MAIN_MODELS))
    variants = {}
    for mha, damcha in ARCHITECTURES.values():
        prefix = mha.split("_")[0] + "_"
        variants[damcha] = mha
        variants |= {label: mha for label in ablations if label.startswith(prefix)}
    return variants


def _damcha_vs_mha_table(results: Mapping[str, DatasetResults]) -> list[str]:
    """Every DAMCHA row against the MHA row of its architecture, in one table.

    Per architecture its main row comes first (the method's defaults: issue 5's per-architecture
    summary, shown even before it has a result), then its ablation variants (issue 5 asks what would
    make DAMCHA win; this puts each variant's record in one place instead of one table per dataset).
    """
    body = []
    for label, mha in damcha_variants(results).items():
        cmp = compare_damcha_mha(results, mha, label)
        main = label in MAIN_MODELS
        if not cmp["pairs"] and not main:
            continue
        change = cmp["mean_relative_change_pct"]
        averages = []
        for dataset in _dataset_order(results):
            ours = results[dataset].average(label, PROTOCOL_HORIZONS, "mse")
            base = results[dataset].average(mha, PROTOCOL_HORIZONS, "mse")
            if ours and base:
                averages.append(f"{dataset} {relative_change(ours.mean, base.mean):+.2f} %")
        body.append([
            f"**{label}**" if main else label, mha, str(len(cmp["pairs"])), str(cmp["wins"]),
            str(cmp["losses"]), str(cmp["ties"]), "missing" if change is None else f"{change:+.2f} %",
            ", ".join(averages) or "–",
        ])
    lines = ["### DAMCHA vs MHA (seed-mean MSE per dataset × horizon)", ""]
    lines += _table(["DAMCHA row", "vs", "compared cells", "wins", "losses", "ties",
                     "mean relative change in MSE", "Avg MSE change per dataset (all four horizons run)"], body)
    lines += ["", "Bold: the main DAMCHA row of each architecture (the method's defaults); the rows under it "
              "are its ablation variants. A win is a lower seed-mean test MSE than the MHA row; the relative "
              "change is 100·(DAMCHA − MHA)/MHA, averaged over the compared cells (negative = DAMCHA better). "
              "A variant often has fewer seeds than the MHA row it is compared with (the per-dataset tables "
              "give the counts).", ""]
    return lines


def _missing_lines(dataset: str, expected: Sequence[ExpectedCell], data: DatasetResults | None) -> list[str]:
    missing: dict[str, list[str]] = {}
    outdated: dict[str, list[str]] = {}
    diverged: dict[str, list[str]] = {}  # finished without a finite test MSE: left out of every mean
    for cell in expected:
        if cell.dataset != dataset:
            continue
        row = data.runs.get(cell.model, {}).get(cell.horizon, {}).get(cell.seed) if data else None
        where = f"H={cell.horizon} seed {cell.seed}"
        if row is None:
            if cell.checkpointed_epochs:
                n = cell.checkpointed_epochs
                where += f" (in progress: {n} epoch{'' if n == 1 else 's'} checkpointed)"
            missing.setdefault(cell.model, []).append(where)
        elif cell.config_hash is not None and row["config_hash"] != cell.config_hash:
            outdated.setdefault(cell.model, []).append(where)
        elif _is_missing(row["mse"]):
            diverged.setdefault(cell.model, []).append(where)
    lines = []
    if missing:
        lines.append("Missing cells (no result yet; the tables say `missing` or count fewer seeds; a cell in "
                     "progress goes on from its last checkpoint when the grid's command runs again):")
        lines += [f"- {model}: {', '.join(cells)}" for model, cells in missing.items()]
    if outdated:
        lines.append("Outdated cells (shown from a row whose config hash differs from the grid's current "
                     "config; rerun the command to refresh):")
        lines += [f"- {model}: {', '.join(cells)}" for model, cells in outdated.items()]
    if diverged:
        lines.append("Cells without a finite test MSE (the run diverged; left out of every mean and seed count):")
        lines += [f"- {model}: {', '.join(cells)}" for model, cells in diverged.items()]
    return lines + [""] if lines else []


def build_report(
    rows: Sequence[Mapping],
    *,
    results_name: str,
    expected: Sequence[ExpectedCell] = (),
    plots: Mapping[str, str] | None = None,
    published: PublishedResults | None = None,
    findings: str | None = None,
    unavailable: Mapping[str, str] | None = None,
) -> str:
    """The whole LEADERBOARD.md as text.

    Args:
        rows: results-CSV rows (``read_results``).
        results_name: how the report names the CSV (a path relative to the project root).
        expected: the cells the grids want (for "missing" notes, seed counts and commands).
        plots: {"average_mse": path, "variants": path, "forecast:<dataset>": path, "metrics:<dataset>:<model>": path},
            paths relative to the report's folder.
        findings: Markdown written by people (what the ablations showed, why a row looks as it
            does), printed under "Findings"; it is the one part of the report not derived from the CSV.
        unavailable: {dataset: note} for datasets whose file was not found when the report was made.
    """
    published = published or load_published()
    plots = dict(plots or {})
    results = collect(rows, expected)
    datasets = _dataset_order({*results, *(c.dataset for c in expected)})
    n_superseded = sum(d.superseded for d in results.values())

    lines = [
        "# damcha_ts leaderboard",
        "",
        f"Generated from `{results_name}` ({len(rows)} rows) by `damcha_ts.leaderboard.report`; "
        "edit the CSV's producers, not this file.",
        "",
        "Protocol (docs/protocol.md §1, §7): lookback L = 96, multivariate `M` setting, ETT 12/4/4-month "
        "borders, Weather/Traffic/Electricity 70/10/20, train-only scaler, `timeF` marks with freq `h`, "
        "stride-1 windows, no test window dropped. MSE / MAE on the z-scored scale over every test "
        "window, step and variate.",
        "",
        "Our columns: mean ± sample std (ddof 1) over seeds; one seed shows the mean only, fewer seeds than "
        "the grid asks for are marked `(n/m seeds)`. Avg: per seed the mean over the table's horizons "
        "(seeds that finished all of them), then mean ± std over seeds. `repeat_last` and `window_mean` "
        "are deterministic naive forecasts (seed column 0). Bold: the best value of the row at the 3 "
        "decimals shown, our columns and the published ones together. `missing`: not run yet; nothing is "
        "estimated.",
        "",
    ]
    if n_superseded:
        lines += [f"{n_superseded} CSV row(s) are not shown: another row of the same cell was used (the one "
                  "matching the grid's current config hash, else the latest).", ""]
    if "average_mse" in plots:
        lines += [f"![Average MSE per dataset and model]({plots['average_mse']})", ""]

    lines += _summary_section(results, published, expected, plots.get("variants"))
    if findings and findings.strip():
        lines += ["## Findings", "", f"(from `{FINDINGS_NAME}` beside the CSV, written by people)", "",
                  findings.strip(), ""]

    lines += ["## Published numbers: sources", ""]
    lines += [f"- **{model}**: {source}" for model, source in published.sources.items()]
    lines += [f"- `*` {note['dataset']} {note['model']} {note['row']}: {note['text']}" for note in published.notes]
    lines += ["- Gateformer's own published table is not transcribed (protocol.md §3.3: not verified), so "
              "no published Gateformer column is shown.", ""]

    for dataset in datasets:
        data = results.get(dataset, DatasetResults(dataset))
        cells = [c for c in expected if c.dataset == dataset]
        horizons = _table_horizons(data, expected)
        expected_seeds: dict[str, int] = {}
        for cell in cells:
            seeds = {c.seed for c in cells if c.model == cell.model and c.horizon == cell.horizon}
            expected_seeds[cell.model] = max(expected_seeds.get(cell.model, 0), len(seeds))
        labels = {*data.runs, *(c.model for c in cells)}
        main = [m for m in MAIN_MODELS if m in labels]
        # Ablation rows get a column once they have a result; until then only the missing list names them.
        ablations = sorted(set(data.runs) - set(MAIN_MODELS))

        lines += [f"## {dataset}", ""]
        commands = {c.command for c in cells if c.command}
        commands |= {f"damcha-ts leaderboard --config {row['grid']} --only-dataset {dataset}"
                     for row in data.rows() if row.get("grid")}
        lines += [f"Reproduce: `{command}`" for command in sorted(commands)] + [""]
        if dataset in (unavailable or {}):
            lines += [f"Data: {unavailable[dataset]}", ""]
        lines += _metric_tables(data, main, horizons, published, expected_seeds, with_published=True)
        if ablations:
            lines += ["Ablation rows (same protocol; labels from the grid file; bold: the best of these columns, "
                      "when there are two or more; the main models are in the table above):", ""]
            lines += _metric_tables(data, ablations, horizons, published, expected_seeds, with_published=False)
        lines += _training_table(data, [*main, *ablations])
        lines += _missing_lines(dataset, expected, results.get(dataset))
        if f"curves:{dataset}" in plots:
            caption = f"Training and validation MSE per epoch, {dataset} (each model's lowest seed)"
            lines += [f"![{caption}]({plots[f'curves:{dataset}']})", ""]
        if f"curves_ablations:{dataset}" in plots:
            lines += [f"![Ablation rows per epoch, {dataset}]({plots[f'curves_ablations:{dataset}']})", ""]
        if f"forecast:{dataset}" in plots:
            lines += [f"![Forecast vs truth, {dataset}]({plots[f'forecast:{dataset}']})", ""]
        for key, path in sorted(plots.items()):
            if key.startswith(f"metrics:{dataset}:"):
                lines += [f"![Learned per-head metrics, {dataset} {key.split(':')[2]}]({path})", ""]
    return "\n".join(lines).rstrip() + "\n"


def _table_horizons(data: DatasetResults, expected: Sequence[ExpectedCell]) -> list[int]:
    return sorted({*data.horizons(), *(c.horizon for c in expected if c.dataset == data.dataset)})


def render_plots(
    rows: Sequence[Mapping], results_path: Path, plots_dir: Path, expected: Sequence[ExpectedCell] = ()
) -> dict[str, Path]:
    """Draw every figure the rows and saved samples allow; returns {plot key: PNG path}."""
    from damcha_ts.leaderboard import plots as draw
    from damcha_ts.leaderboard.curves import load_curves
    from damcha_ts.leaderboard.results import sample_path

    made: dict[str, Path] = {}
    results = collect(rows, expected)
    averages: dict[str, dict[str, float]] = {}
    for dataset in _dataset_order(results):
        data = results[dataset]
        horizons = _table_horizons(data, expected)
        labels = [m for m in MAIN_MODELS if m in data.runs] + sorted(set(data.runs) - set(MAIN_MODELS))
        for model in labels:
            stat = data.average(model, horizons, "mse")
            if stat is not None:
                averages.setdefault(dataset, {})[model] = stat.mean
        # Each figure from the shortest horizon that has what it needs: the forecast from the main
        # models' samples (ablation rows only add metric heatmaps), each heatmap from its model's own.
        samples = {(m, h): sample_path(results_path, dataset, m, h) for h in data.horizons() for m in labels}
        samples = {key: p for key, p in samples.items() if p.is_file()}
        for horizon in data.horizons():
            main_samples = {m: p for (m, h), p in samples.items() if h == horizon and m in MAIN_MODELS}
            if main_samples:
                made[f"forecast:{dataset}"] = draw.plot_forecast(
                    dataset, main_samples, plots_dir / f"forecast_{dataset}.png"
                )
                break
        for model in labels:
            horizon = min((h for m, h in samples if m == model), default=None)
            if horizon is None:
                continue
            title = f"{dataset}, {model}, H={horizon}: learned per-head metrics"
            png = draw.plot_head_metrics(samples[(model, horizon)], title,
                                         plots_dir / f"head_metrics_{dataset}_{model}.png")
            if png is not None:
                made[f"metrics:{dataset}:{model}"] = png
    curves = _first_seed_curves(load_curves(results_path), results)
    references = {cell.model: set(cell.compare_with) for cell in expected}
    for dataset, per_horizon in curves.items():
        # The main models together; the ablation rows beside the rows their grid compares them with.
        main = {h: {m: c for m, c in per_model.items() if m in MAIN_MODELS} for h, per_model in per_horizon.items()}
        ablated = ablation_curves(per_horizon, references)
        if any(main.values()):
            made[f"curves:{dataset}"] = draw.plot_curves(
                dataset, {h: c for h, c in main.items() if c}, plots_dir / f"curves_{dataset}.png"
            )
        if ablated:
            made[f"curves_ablations:{dataset}"] = draw.plot_curves(
                f"{dataset} ablations", ablated, plots_dir / f"curves_{dataset}_ablations.png"
            )
    if averages:
        made["average_mse"] = draw.plot_average_mse(averages, plots_dir / "average_mse.png")
    changes = {}  # {DAMCHA row: {(dataset, horizon): % MSE change against its MHA row}}
    for label, mha in damcha_variants(results).items():
        pairs = compare_damcha_mha(results, mha, label)["pairs"]
        if pairs:
            changes[label] = {(d, h): relative_change(dam, base) for d, h, base, dam in pairs}
    if changes:
        order = _dataset_order(results)
        columns = sorted({cell for per_cell in changes.values() for cell in per_cell},
                         key=lambda cell: (order.index(cell[0]), cell[1]))
        made["variants"] = draw.plot_relative_change(changes, columns, plots_dir / "damcha_vs_mha.png")
    # Samples are not committed: in a fresh clone the figures drawn from them are kept as they are.
    for dataset, data in results.items():
        kept = {f"forecast:{dataset}": plots_dir / f"forecast_{dataset}.png"}
        kept |= {f"metrics:{dataset}:{m}": plots_dir / f"head_metrics_{dataset}_{m}.png" for m in data.runs}
        made |= {key: png for key, png in kept.items() if key not in made and png.is_file()}
    return made


def ablation_curves(per_horizon: Mapping[int, Mapping[str, dict]], references: Mapping[str, set[str]]) -> dict:
    """{horizon: {label: curve}} of the ablation figure: every row that is not a main model, with the
    rows its grid names in ``compare_with``; horizons without ablation rows are left out."""
    ablated = {}
    for horizon, per_model in per_horizon.items():
        ablations = [m for m in per_model if m not in MAIN_MODELS]
        shown = set(ablations).union(*(references.get(m, set()) for m in ablations))
        if ablations:
            ablated[horizon] = {m: c for m, c in per_model.items() if m in shown}
    return ablated


def _first_seed_curves(stored: Sequence[Mapping], results: Mapping[str, DatasetResults]) -> dict:
    """{dataset: {horizon: {model: curve}}} for the rows the report shows, each model's first seed."""
    by_key = {(c["dataset"], c["model"], int(c["horizon"]), int(c["seed"]), c["config_hash"]): c for c in stored}
    chosen: dict[str, dict[int, dict[str, Mapping]]] = {}
    for dataset in _dataset_order(results):
        for model, per_horizon in results[dataset].runs.items():
            for horizon, per_seed in per_horizon.items():
                row = per_seed[min(per_seed)]
                curve = by_key.get((dataset, model, horizon, int(row["seed"]), row["config_hash"]))
                if curve is not None:
                    chosen.setdefault(dataset, {}).setdefault(horizon, {})[model] = curve
    return chosen


def write_report(
    results_path: str | Path,
    report_path: str | Path,
    *,
    expected: Sequence[ExpectedCell] = (),
    results_name: str | None = None,
    unavailable: Mapping[str, str] | None = None,
) -> Path:
    """Regenerate the report (and its plots in ``<report folder>/plots``) from the results CSV, plus
    the hand-written ``FINDINGS.md`` next to the CSV when there is one."""
    import os

    from damcha_ts.files import write_atomically
    from damcha_ts.leaderboard.results import read_results

    results_path, report_path = Path(results_path), Path(report_path)
    rows = read_results(results_path)
    made = render_plots(rows, results_path, report_path.parent / "plots", expected)
    plots = {key: os.path.relpath(path, report_path.parent) for key, path in made.items()}
    findings_file = results_path.parent / FINDINGS_NAME
    findings = findings_file.read_text(encoding="utf-8") if findings_file.is_file() else None
    text = build_report(rows, results_name=results_name or str(results_path), expected=expected, plots=plots,
                        findings=findings, unavailable=unavailable)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(report_path, text)


def read_report_grids(results_path: str | Path) -> list[str]:
    """The grid files the report beside ``results_path`` covers (``report_grids.yaml``; none if absent)."""
    import yaml

    from damcha_ts.errors import ConfigError

    path = Path(results_path).parent / REPORT_GRIDS_NAME
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    grids = data.get("grids") if isinstance(data, dict) else None
    if not isinstance(grids, list) or not all(isinstance(name, str) for name in grids):
        raise ConfigError(f"{path}: expected 'grids:' with a list of grid files, got {data!r}")
    return grids


def record_report_grids(results_path: str | Path, names: Sequence[str]) -> bool:
    """Add ``names`` to ``report_grids.yaml`` (written atomically, and only when the list grows)."""
    import yaml

    from damcha_ts.files import write_atomically

    known = read_report_grids(results_path)
    grids = [*known, *(name for name in dict.fromkeys(names) if name not in known)]
    if grids == known:
        return False
    text = _REPORT_GRIDS_HEADER + yaml.safe_dump({"grids": grids}, sort_keys=False)
    write_atomically(Path(results_path).parent / REPORT_GRIDS_NAME, text)
    return True
