"""The report's figures (PNG). matplotlib is imported here only, and pyplot never: each figure is a
standalone ``Figure`` on an Agg canvas, so plotting touches no global backend state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from damcha_ts.files import save_figure


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(figure, path, dpi=110, metadata={"Software": None})
    return path


def plot_average_mse(averages: Mapping[str, Mapping[str, float]], path: str | Path) -> Path:
    """Grouped bars: for each dataset, the average test MSE of each model.

    averages: {dataset: {model: mean Avg MSE}}; models missing for a dataset leave a gap.
    """
    datasets = list(averages)
    models = list(dict.fromkeys(m for per_model in averages.values() for m in per_model))
    figure = _figure(max(8.5, 1.3 * len(datasets) + 3.5), 4.0)
    axes = figure.add_subplot()
    width = 0.8 / max(1, len(models))
    positions = np.arange(len(datasets))
    for k, model in enumerate(models):
        heights = [averages[d].get(model, np.nan) for d in datasets]
        axes.bar(positions + (k - (len(models) - 1) / 2) * width, heights, width, label=model)
    axes.set_xticks(positions, datasets)
    axes.set_ylabel("average test MSE (z-scale)")
    axes.set_title("Average test MSE per dataset and model (lower is better)")
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.grid(axis="y", alpha=0.3)
    return _save(figure, Path(path))


def plot_relative_change(
    changes: Mapping[str, Mapping[tuple[str, int], float]], columns: Sequence[tuple[str, int]], path: str | Path
) -> Path:
    """Heatmap of each DAMCHA row's test-MSE change against MHA, in %, one column per (dataset, H).

    changes: {row label: {(dataset, horizon): 100·(DAMCHA − MHA)/MHA}}, rows top to bottom in this
    order; columns: the (dataset, horizon) cells left to right. Cells a row has not run stay blank.
    Blue is better than MHA, red worse, on a colour scale symmetric about 0 that saturates at ±10 %
    (every cell is labelled with its value).
    """
    labels = list(changes)
    grid = np.array([[changes[label].get(column, np.nan) for column in columns] for label in labels])
    limit = min(10.0, max(1.0, float(np.nanmax(np.abs(grid)))))  # one outlier must not wash out the rest
    figure = _figure(max(7.0, 0.55 * len(columns) + 3.5), 0.42 * len(labels) + 1.8)
    axes = figure.add_subplot()
    image = axes.imshow(np.ma.masked_invalid(grid), cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
    for row, column in zip(*np.nonzero(~np.isnan(grid))):
        value = grid[row, column]
        axes.text(column, row, f"{value:+.1f}", ha="center", va="center", fontsize=6.5,
                  color="white" if abs(value) > 0.6 * limit else "black")
    axes.set_xticks(range(len(columns)), [f"{d} {h}" for d, h in columns], rotation=60, ha="right", fontsize=7)
    axes.set_yticks(range(len(labels)), labels, fontsize=8)
    axes.set_title("Test MSE change against MHA of the same architecture, % (blue: better than MHA)")
    figure.colorbar(image, ax=axes, label="% change in MSE")
    return _save(figure, Path(path))


def plot_forecast(dataset: str, samples: Mapping[str, str | Path], path: str | Path) -> Path:
    """Lookback, truth and each model's forecast for the first saved test window, target variate.

    samples: {model: prediction_sample.npz} of the same dataset and horizon (same windows).
    """
    figure = _figure(9.0, 3.6)
    axes = figure.add_subplot()
    truth_drawn = False
    for model, sample_file in samples.items():
        with np.load(sample_file, allow_pickle=False) as sample:
            column = sample["columns"].shape[0] - 1  # the target (OT) is the last model column
            x, y, pred = sample["x"][0, :, column], sample["y"][0, :, column], sample["pred"][0, :, column]
            name, start = str(sample["columns"][column]), str(sample["start"][0])
        steps_in, steps_out = np.arange(-len(x), 0), np.arange(len(y))
        if not truth_drawn:
            axes.plot(steps_in, x, color="black", linewidth=1.0, label="lookback")
            axes.plot(steps_out, y, color="black", linewidth=1.6, label="truth")
            axes.set_title(f"{dataset}, H={len(y)}: forecast vs truth, variate {name}, first target step {start}")
            truth_drawn = True
        axes.plot(steps_out, pred, linewidth=1.2, label=model)
    axes.axvline(0, color="grey", linewidth=0.8, linestyle=":")
    axes.set_xlabel("step relative to the forecast origin")
    axes.set_ylabel("z-scored value")
    axes.legend(fontsize="small", ncols=3)
    return _save(figure, Path(path))


def plot_head_metrics(sample_file: str | Path, title: str, path: str | Path) -> Path | None:
    """Heatmaps of the learned per-head metrics m_i (first DAMCHA layer, averaged over test windows),
    and of the full cross-head metric M when the sample holds it. None if the sample has no metrics."""
    with np.load(sample_file, allow_pickle=False) as sample:
        if "head_metrics" not in sample:
            return None
        head_metrics = sample["head_metrics"]  # [H, dh, dh]
        full_metric = sample["full_metric"] if "full_metric" in sample else None
    n_heads = head_metrics.shape[0]
    columns = min(n_heads, 4)
    rows = -(-n_heads // columns) + (1 if full_metric is not None else 0)
    figure = _figure(2.6 * columns + 1.6, 2.5 * rows + 0.5)
    figure.suptitle(title)
    limit = float(np.abs(head_metrics).max()) or 1.0
    grid = figure.add_gridspec(rows, columns)
    image = None
    for head in range(n_heads):
        axes = figure.add_subplot(grid[head // columns, head % columns])
        image = axes.imshow(head_metrics[head], cmap="RdBu_r", vmin=-limit, vmax=limit)
        axes.set_title(f"head {head}: m_{head}", fontsize="small")
        axes.set_xticks([])
        axes.set_yticks([])
    figure.colorbar(image, ax=figure.axes, shrink=0.8)
    if full_metric is not None:
        axes = figure.add_subplot(grid[rows - 1, :])
        full_limit = float(np.abs(full_metric).max()) or 1.0
        axes.imshow(full_metric, cmap="RdBu_r", vmin=-full_limit, vmax=full_limit)
        head_width = head_metrics.shape[-1]
        for boundary in range(1, n_heads):  # block borders: M_ij is the (i, j) dh x dh block
            axes.axhline(boundary * head_width - 0.5, color="black", linewidth=0.4)
            axes.axvline(boundary * head_width - 0.5, color="black", linewidth=0.4)
        axes.set_title("full cross-head metric M (blocks M_ij; m_i = sum_j M_ij)", fontsize="small")
    return _save(figure, Path(path))


LINE_PATTERNS = ("-", "--", ":", "-.")


def line_styles(models: Sequence[str]) -> dict[str, tuple[str, str]]:
    """{model: (colour, line style)}, a different pair for each of the first 40 models: the ten default
    colours with solid lines, then again dashed, dotted, dash-dotted (an ablation figure can hold 17
    rows); beyond 40 the pairs repeat rather than fail the report."""
    return {model: (f"C{k % 10}", LINE_PATTERNS[(k // 10) % len(LINE_PATTERNS)]) for k, model in enumerate(models)}


def plot_curves(dataset: str, curves: Mapping[int, Mapping[str, Mapping]], path: str | Path) -> Path:
    """Validation (top row) and training (bottom row) MSE per epoch, one column per horizon, one colour
    per model; a star marks each model's lowest validation MSE (the weights that were tested).

    curves: {horizon: {model label: {"epochs", "train_loss", "val_loss"}}}.
    """
    horizons = sorted(curves)
    models = list(dict.fromkeys(m for per_model in curves.values() for m in per_model))
    styles = line_styles(models)
    figure = _figure(max(3.3 * len(horizons), 7.0), 6.2)
    figure.suptitle(f"{dataset}: MSE per epoch (z-scale)")
    for k, horizon in enumerate(horizons):
        top = figure.add_subplot(2, len(horizons), k + 1)
        bottom = figure.add_subplot(2, len(horizons), len(horizons) + k + 1, sharex=top)
        for model, curve in curves[horizon].items():
            epochs, val = np.asarray(curve["epochs"]), np.asarray(curve["val_loss"], dtype=float)
            colour, dashes = styles[model]
            top.plot(epochs, val, color=colour, linestyle=dashes, marker="o", markersize=3, linewidth=1.3, label=model)
            if not np.isnan(val).all():  # a run that diverged from its first epoch has no best
                best = int(np.nanargmin(val))
                top.plot(epochs[best], val[best], color=colour, marker="*", markersize=11)
            bottom.plot(epochs, np.asarray(curve["train_loss"], dtype=float), color=colour, linestyle=dashes,
                        linewidth=1.1)
        top.set_title(f"H={horizon}", fontsize="small")
        bottom.set_xlabel("epoch")
        if k == 0:
            top.set_ylabel("validation MSE")
            bottom.set_ylabel("training MSE")
        for axes in (top, bottom):
            axes.grid(alpha=0.3)
    # One legend entry per model, from whichever panel drew it first (a model may miss a horizon).
    entries: dict[str, object] = {}
    for axes in figure.axes:
        for handle, label in zip(*axes.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    figure.legend(list(entries.values()), list(entries), fontsize="small", loc="outside lower center",
                  ncols=min(3, len(entries)))
    return _save(figure, Path(path))
