"""curves.json: per-epoch losses copied out of Lightning logs, one entry per cell, rewritten atomically."""

from __future__ import annotations

import json

from damcha_ts.leaderboard.curves import curves_path, load_curves, read_run_curves, record_curves
from damcha_ts.leaderboard.dataset_results import ExpectedCell
from damcha_ts.leaderboard.figures import ablation_curves, render_plots
from damcha_ts.leaderboard.report import build_report

# The layout Lightning's CSVLogger writes for our module: lr rows without an epoch, step rows with
# train_loss_step only, then per epoch one val_loss row and one train_loss row.
LOG = """epoch,lr-Adam/default,step,train_loss,train_loss_step,val_loss
,0.0001,0,,,
0,,49,,0.47,
0,,263,,,0.7118
0,,263,0.4164,,
,0.0001,264,,,
1,,299,,0.34,
1,,527,,,0.6877
1,,527,0.3670,,
2,,549,,0.31,
"""


def _row(model: str, seed: int = 2023, config_hash: str = "abc123abc123") -> dict:
    return {"dataset": "ETTh1", "model": model, "horizon": 96, "seed": seed, "config_hash": config_hash}


def test_epoch_losses_are_read_from_the_lightning_log(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "metrics.csv").write_text(LOG)
    curve = read_run_curves(tmp_path)
    # Epoch 3 was cut short before validation: it is not a point of the curve.
    assert curve == {"epochs": [1, 2], "train_loss": [0.4164, 0.3670], "val_loss": [0.7118, 0.6877]}
    assert read_run_curves(tmp_path / "nowhere") is None


def test_a_validation_without_train_loss_keeps_the_epoch_with_null(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "metrics.csv").write_text("epoch,step,train_loss,val_loss\n0,10,,0.5\n")
    curve = read_run_curves(tmp_path)
    assert curve == {"epochs": [1], "train_loss": [None], "val_loss": [0.5]}


def test_record_replaces_the_same_cell_and_keeps_the_others(tmp_path):
    results = tmp_path / "leaderboard.csv"
    first = {"epochs": [1], "train_loss": [0.4], "val_loss": [0.7]}
    assert record_curves(results, [(_row("itransformer_mha"), first), (_row("itransformer_damcha"), first)]) == 2
    again = {"epochs": [1, 2], "train_loss": [0.4, 0.3], "val_loss": [0.7, 0.6]}
    assert record_curves(results, [(_row("itransformer_damcha"), again), (_row("itransformer_mha", 2024), None)]) == 1
    stored = {c["model"]: c for c in load_curves(results)}
    assert stored["itransformer_mha"]["val_loss"] == [0.7] and stored["itransformer_damcha"]["val_loss"] == [0.7, 0.6]
    assert len(load_curves(results)) == 2
    assert not list(tmp_path.glob(".curves.json.*.tmp"))  # the atomic rewrite left nothing behind
    assert json.loads(curves_path(results).read_text())[0]["model"] == "itransformer_damcha"  # sorted by cell


def test_figures_of_uncommitted_samples_survive_a_fresh_clone(tmp_path):
    """Samples are not committed: a report regenerated without them still links the committed PNGs."""
    results = tmp_path / "leaderboard.csv"
    plots = tmp_path / "plots"
    plots.mkdir()
    for name in ("forecast_ETTh1.png", "head_metrics_ETTh1_itransformer_damcha.png"):
        (plots / name).write_bytes(b"png")
    row = {**_row("itransformer_damcha"), "mse": 0.4, "mae": 0.41}
    record_curves(results, [(row, {"epochs": [1, 2], "train_loss": [0.4, 0.3], "val_loss": [0.7, 0.69]})])
    made = render_plots([row], results, plots)
    assert made["forecast:ETTh1"] == plots / "forecast_ETTh1.png"
    assert made["metrics:ETTh1:itransformer_damcha"] == plots / "head_metrics_ETTh1_itransformer_damcha.png"
    assert made["curves:ETTh1"].stat().st_size > 1000


def test_ablation_rows_get_their_own_curves_figure_beside_their_references(tmp_path):
    results, plots = tmp_path / "leaderboard.csv", tmp_path / "plots"
    curve = {"epochs": [1, 2], "train_loss": [0.4, 0.3], "val_loss": [0.7, 0.69]}
    rows = [{**_row(model), "mse": 0.4, "mae": 0.41}
            for model in ("itransformer_mha", "itransformer_damcha", "gateformer_mha", "itransformer_damcha_static")]
    record_curves(results, [(row, curve) for row in rows])
    expected = [ExpectedCell("ETTh1", "itransformer_damcha_static", 96, 2023,
                             compare_with=("itransformer_mha", "itransformer_damcha"))]
    made = render_plots(rows, results, plots, expected)
    assert made["curves:ETTh1"].name == "curves_ETTh1.png"
    assert made["curves_ablations:ETTh1"].name == "curves_ETTh1_ablations.png"
    report = build_report(rows, results_name="leaderboard.csv", plots={k: f"plots/{p.name}" for k, p in made.items()})
    assert "(plots/curves_ETTh1_ablations.png)" in report and "(plots/curves_ETTh1.png)" in report


def test_ablation_figure_shows_each_row_with_the_rows_its_grid_compares_it_with():
    curve = {"epochs": [1], "train_loss": [0.4], "val_loss": [0.7]}
    labels = ("itransformer_mha", "itransformer_damcha", "gateformer_mha", "gateformer_damcha",
              "itransformer_damcha_static", "gateformer_damcha_static")
    per_horizon = {96: dict.fromkeys(labels, curve), 192: {"itransformer_mha": curve}}
    references = {"itransformer_damcha_static": {"itransformer_mha", "itransformer_damcha"},
                  "gateformer_damcha_static": {"gateformer_damcha"}}
    shown = ablation_curves(per_horizon, references)
    assert list(shown) == [96]  # no ablation row at H=192: no figure panel
    assert set(shown[96]) == {"itransformer_mha", "itransformer_damcha", "gateformer_damcha",
                              "itransformer_damcha_static", "gateformer_damcha_static"}
    assert set(ablation_curves(per_horizon, {})[96]) == {"itransformer_damcha_static", "gateformer_damcha_static"}


def _write_sample(path, horizon: int, with_metrics: bool) -> None:
    import numpy as np

    rng = np.random.default_rng(horizon)
    arrays = {"x": rng.normal(size=(2, 96, 3)), "y": rng.normal(size=(2, horizon, 3)),
              "pred": rng.normal(size=(2, horizon, 3)), "window": np.arange(2),
              "start": np.array(["2017-01-01 00:00:00", "2017-01-01 01:00:00"]),
              "columns": np.array(["HUFL", "MULL", "OT"])}
    if with_metrics:
        arrays["head_metrics"] = rng.normal(size=(2, 4, 4))
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)


def test_each_figure_comes_from_the_shortest_horizon_that_has_its_sample(tmp_path):
    """Only an ablation row has a sample at H=96: the forecast still comes from the main models'
    samples at H=192, and each model's metric heatmap from its own shortest horizon."""
    from damcha_ts.leaderboard.results import sample_path

    results, plots = tmp_path / "leaderboard.csv", tmp_path / "plots"
    have = {("itransformer_damcha_static", 96), ("itransformer_damcha_static", 192),
            ("itransformer_mha", 192), ("itransformer_damcha", 192), ("itransformer_damcha", 336)}
    rows = [{**_row(m), "horizon": h, "mse": 0.4, "mae": 0.41}
            for m in ("itransformer_mha", "itransformer_damcha", "itransformer_damcha_static") for h in (96, 192, 336)]
    for model, horizon in have:
        _write_sample(sample_path(results, "ETTh1", model, horizon), horizon, with_metrics="damcha" in model)
    made = render_plots(rows, results, plots)
    assert made["forecast:ETTh1"].stat().st_size > 1000
    assert {key for key in made if key.startswith("metrics:")} == {
        "metrics:ETTh1:itransformer_damcha", "metrics:ETTh1:itransformer_damcha_static"}


def test_a_diverged_run_with_no_finite_validation_loss_is_drawn_without_a_best_epoch(tmp_path):
    results, plots = tmp_path / "leaderboard.csv", tmp_path / "plots"
    rows = [{**_row(m), "mse": 0.4, "mae": 0.41} for m in ("itransformer_mha", "itransformer_damcha")]
    diverged = {"epochs": [1, 2], "train_loss": [float("nan")] * 2, "val_loss": [float("nan")] * 2}
    healthy = {"epochs": [1, 2], "train_loss": [0.4, 0.3], "val_loss": [0.7, 0.69]}
    record_curves(results, [(rows[0], healthy), (rows[1], diverged)])
    assert render_plots(rows, results, plots)["curves:ETTh1"].stat().st_size > 1000


def test_every_row_of_a_crowded_curves_figure_has_its_own_colour_and_line():
    """The ETTh2 ablation figure holds 17 rows; with colours alone the 11th repeated the 1st."""
    from damcha_ts.leaderboard.plots import line_styles

    models = [f"model_{k}" for k in range(17)]
    styles = line_styles(models)
    assert len(set(styles.values())) == 17
    assert styles["model_0"] == ("C0", "-") and styles["model_10"][0] == "C0" and styles["model_10"][1] != "-"
    many = line_styles([f"m{k}" for k in range(41)])  # a huge figure still draws, its pairs repeating
    assert len(set(many.values())) == 40 and many["m40"] == many["m0"]
