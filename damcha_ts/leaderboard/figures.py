"""The report's figures as data: each one's plot key, PNG name, drawing function, caption and place
in LEADERBOARD.md (``FIGURES``), and what each is drawn from (``plan_figures``).

A figure's key, file and caption are templates over ``{dataset}`` and ``{model}``: the key names it
in the ``plots`` mapping that ``build_report`` takes (``"curves:ETTh1"``), the file is its PNG under
``plots/``, the caption its alt text. ``section`` says where the report shows it: ``top`` (under the
introduction), ``summary`` (under the DAMCHA-vs-MHA table) or ``dataset`` (at the end of a dataset's
section, in the order of ``FIGURES``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from damcha_ts.leaderboard import plots
from damcha_ts.leaderboard.comparison import average_mse, mse_changes
from damcha_ts.leaderboard.curves import load_curves
from damcha_ts.leaderboard.dataset_results import MAIN_MODELS, DatasetResults, ExpectedCell, collect, dataset_order
from damcha_ts.leaderboard.paths import inside
from damcha_ts.leaderboard.results import sample_path


@dataclass(frozen=True)
class FigureSpec:
    """One kind of figure (see the module docstring)."""

    key: str
    file: str
    caption: str
    section: str
    draw: Callable[..., Path | None]  # a function of damcha_ts.leaderboard.plots: (*inputs, path)
    # Drawn from prediction samples, which are not committed: without its sample the PNG already
    # there is kept (and linked) as it is.
    from_samples: bool = False

    @cached_property
    def _pattern(self) -> re.Pattern:
        parts = re.split(r"\{(\w+)\}", self.key)
        return re.compile("".join(re.escape(p) if k % 2 == 0 else f"(?P<{p}>[^:]+)" for k, p in enumerate(parts)) + r"\Z")

    def match(self, key: str) -> dict[str, str] | None:
        """The fields of a plot key of this kind (``{"dataset": "ETTh1"}``), or None."""
        found = self._pattern.match(key)
        return None if found is None else found.groupdict()


AVERAGE_MSE = FigureSpec("average_mse", "average_mse.png", "Average MSE per dataset and model", "top",
                         plots.plot_average_mse)
VARIANTS = FigureSpec("variants", "damcha_vs_mha.png",
                      "MSE change of each DAMCHA row against MHA, per dataset and horizon", "summary",
                      plots.plot_relative_change)
CURVES = FigureSpec("curves:{dataset}", "curves_{dataset}.png",
                    "Training and validation MSE per epoch, {dataset} (each model's lowest seed)", "dataset",
                    plots.plot_curves)
ABLATION_CURVES = FigureSpec("curves_ablations:{dataset}", "curves_{dataset}_ablations.png",
                             "Ablation rows per epoch, {dataset}", "dataset", plots.plot_curves)
FORECAST = FigureSpec("forecast:{dataset}", "forecast_{dataset}.png", "Forecast vs truth, {dataset}", "dataset",
                      plots.plot_forecast, from_samples=True)
HEAD_METRICS = FigureSpec("metrics:{dataset}:{model}", "head_metrics_{dataset}_{model}.png",
                          "Learned per-head metrics, {dataset} {model}", "dataset", plots.plot_head_metrics,
                          from_samples=True)
FIGURES = (AVERAGE_MSE, VARIANTS, CURVES, ABLATION_CURVES, FORECAST, HEAD_METRICS)


@dataclass(frozen=True)
class PlannedFigure:
    """One figure to draw: its kind, the values of its templates, and what its function draws."""

    spec: FigureSpec
    fields: Mapping[str, str] = field(default_factory=dict)
    inputs: tuple = ()  # the drawing function's arguments before the PNG path

    @property
    def key(self) -> str:
        return self.spec.key.format(**self.fields)

    def path(self, plots_dir: Path) -> Path:
        return inside(plots_dir, self.spec.file.format(**self.fields))

    def draw(self, plots_dir: Path) -> Path | None:
        """Write the PNG; None when its input holds nothing to draw (a sample without metrics)."""
        return self.spec.draw(*self.inputs, self.path(plots_dir))


def render_plots(
    rows: Sequence[Mapping], results_path: Path, plots_dir: Path, expected: Sequence[ExpectedCell] = ()
) -> dict[str, Path]:
    """Draw every figure the rows and saved samples allow; returns {plot key: PNG path}."""
    results = collect(rows, expected)
    made = {}
    for figure in plan_figures(results, Path(results_path), expected):
        png = figure.draw(Path(plots_dir))
        if png is not None:
            made[figure.key] = png
    return made | kept_figures(results, Path(plots_dir), made)


def plan_figures(
    results: Mapping[str, DatasetResults], results_path: Path, expected: Sequence[ExpectedCell] = ()
) -> list[PlannedFigure]:
    """Every figure the rows, the curves beside the CSV and its saved samples allow (none drawn)."""
    return [
        *_sample_figures(results, results_path),
        *_curve_figures(results, results_path, expected),
        *_summary_figures(results, expected),
    ]


def kept_figures(results: Mapping[str, DatasetResults], plots_dir: Path, made: Mapping[str, Path]) -> dict[str, Path]:
    """The PNGs already in ``plots_dir`` of figures drawn from samples that were not drawn now:
    samples are not committed, so in a fresh clone those figures stay as they are."""
    kept = {}
    for dataset, data in results.items():
        for spec in FIGURES:
            if not spec.from_samples:
                continue
            options = [{"dataset": dataset, "model": m} for m in data.runs] if "{model}" in spec.key else [
                {"dataset": dataset}]
            for fields in options:
                figure = PlannedFigure(spec, fields)
                if figure.key not in made and figure.path(plots_dir).is_file():
                    kept[figure.key] = figure.path(plots_dir)
    return kept


def _sample_figures(results: Mapping[str, DatasetResults], results_path: Path) -> Iterator[PlannedFigure]:
    """Per dataset, each figure from the shortest horizon that has what it needs: the forecast from
    the main models' samples (ablation rows only add metric heatmaps), each heatmap from its model's own."""
    for dataset in dataset_order(results):
        data = results[dataset]
        labels = data.model_labels()
        samples = {(m, h): sample_path(results_path, dataset, m, h) for h in data.horizons() for m in labels}
        samples = {key: p for key, p in samples.items() if p.is_file()}
        for horizon in data.horizons():
            main = {m: p for (m, h), p in samples.items() if h == horizon and m in MAIN_MODELS}
            if main:
                yield PlannedFigure(FORECAST, {"dataset": dataset}, (dataset, main))
                break
        for model in labels:
            horizon = min((h for m, h in samples if m == model), default=None)
            if horizon is not None:
                title = f"{dataset}, {model}, H={horizon}: learned per-head metrics"
                yield PlannedFigure(HEAD_METRICS, {"dataset": dataset, "model": model},
                                    (samples[(model, horizon)], title))


def _curve_figures(
    results: Mapping[str, DatasetResults], results_path: Path, expected: Sequence[ExpectedCell]
) -> Iterator[PlannedFigure]:
    """Per dataset the main models' curves together, and the ablation rows beside the rows their grid
    compares them with."""
    references = {cell.model: set(cell.compare_with) for cell in expected}
    for dataset, per_horizon in first_seed_curves(load_curves(results_path), results).items():
        main = {h: {m: c for m, c in per_model.items() if m in MAIN_MODELS} for h, per_model in per_horizon.items()}
        main = {h: curves for h, curves in main.items() if curves}
        if main:
            yield PlannedFigure(CURVES, {"dataset": dataset}, (dataset, main))
        ablated = ablation_curves(per_horizon, references)
        if ablated:
            yield PlannedFigure(ABLATION_CURVES, {"dataset": dataset}, (f"{dataset} ablations", ablated))


def _summary_figures(
    results: Mapping[str, DatasetResults], expected: Sequence[ExpectedCell]
) -> Iterator[PlannedFigure]:
    averages = average_mse(results, expected)
    if averages:
        yield PlannedFigure(AVERAGE_MSE, {}, (averages,))
    changes, columns = mse_changes(results)
    if changes:
        yield PlannedFigure(VARIANTS, {}, (changes, columns))


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


def first_seed_curves(stored: Sequence[Mapping], results: Mapping[str, DatasetResults]) -> dict:
    """{dataset: {horizon: {model: curve}}} for the rows the report shows, each model's first seed."""
    by_key = {(c["dataset"], c["model"], int(c["horizon"]), int(c["seed"]), c["config_hash"]): c for c in stored}
    chosen: dict[str, dict[int, dict[str, Mapping]]] = {}
    for dataset in dataset_order(results):
        for model, per_horizon in results[dataset].runs.items():
            for horizon, per_seed in per_horizon.items():
                row = per_seed[min(per_seed)]
                curve = by_key.get((dataset, model, horizon, int(row["seed"]), row["config_hash"]))
                if curve is not None:
                    chosen.setdefault(dataset, {}).setdefault(horizon, {})[model] = curve
    return chosen
