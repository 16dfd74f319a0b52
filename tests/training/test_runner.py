"""run_experiment on real ETTh1: what it writes, and its numbers against independent references."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from damcha_ts.forecasting.experiment import run_experiment

HORIZON = 96
TRAIN_BATCHES = 25
EPOCHS = 3


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_config, quiet):
    """A short real run: DAMCHA-iTransformer (tiny), ETTh1 H=96, 3 epochs of 25 batches, full val/test."""
    config = tiny_config(
        "model.d_model=32", "model.d_ff=32", "training.learning_rate=1e-3", f"training.max_epochs={EPOCHS}",
        "training.patience=5", horizon=HORIZON,
    )
    out = tmp_path_factory.mktemp("run")
    result = run_experiment(config, out, trainer_kwargs={"limit_train_batches": TRAIN_BATCHES, **quiet}, progress=False)
    return config, out, result


def windows(values: np.ndarray, start: int, stop: int, L: int, H: int) -> tuple[np.ndarray, np.ndarray]:
    """All stride-1 (input, target) windows of rows [start, stop), by explicit slicing."""
    rows = values[start:stop]
    n = len(rows) - L - H + 1
    x = np.stack([rows[i : i + L] for i in range(n)])
    y = np.stack([rows[i + L : i + L + H] for i in range(n)])
    return x, y


def reference_predictions(model, series, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Predictions and targets [n, H, C] for every window of a split (no DataLoader involved)."""
    start, stop = series.borders[split]
    x, y = windows(series.scaled, start, stop, series.seq_len, series.pred_len)
    marks, _ = windows(series.marks, start, stop, series.seq_len, series.pred_len)
    model.eval()
    with torch.no_grad():
        pred = np.concatenate(
            [model(torch.from_numpy(x[i : i + 500]), torch.from_numpy(marks[i : i + 500])).double().numpy() for i in range(0, len(x), 500)]
        )
    return pred, y.astype(np.float64)


@pytest.fixture(scope="module")
def best_model(trained):
    """The tiny model with the weights of the best checkpoint, and the prepared series."""
    from damcha_ts.models import build_model
    from damcha_ts.training.config import DataConfig

    config, out, _ = trained
    state = torch.load(out / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=True)
    model = build_model(config["model"])
    model.load_state_dict({k.removeprefix("model."): v for k, v in state["state_dict"].items()})
    return model, DataConfig.from_dict(config["data"]).prepare().series[0], state


def test_short_training_beats_the_window_mean_forecast_on_validation(trained, best_model):
    from damcha_ts.baselines import evaluate_naive
    from damcha_ts.data.panel import Panel

    _, _, result = trained
    _, series, _ = best_model
    naive = evaluate_naive(Panel.of(series), "window_mean", split="val")
    assert result["best_val_loss"] < 0.9 * naive["mse"], (result["best_val_loss"], naive["mse"])


def test_val_loss_is_the_mse_over_every_validation_window(trained, best_model):
    _, _, result = trained
    model, series, _ = best_model
    pred, true = reference_predictions(model, series, "val")
    assert len(pred) == series.window_count("val") == 2785
    assert result["best_val_loss"] == pytest.approx(float(np.mean((pred - true) ** 2)), rel=1e-5)
    # The mean of per-batch means (batch 32, a short last batch) is a different number.
    batch_means = [np.mean((pred[i : i + 32] - true[i : i + 32]) ** 2) for i in range(0, len(pred), 32)]
    assert abs(np.mean(batch_means) - result["best_val_loss"]) > 1e-5


def test_test_metrics_cover_every_window_with_the_best_weights(trained, best_model):
    _, out, result = trained
    model, series, _ = best_model
    pred, true = reference_predictions(model, series, "test")
    assert result["test_windows"] == len(pred) == series.window_count("test") == 2785
    error = pred - true
    assert result["mse"] == pytest.approx(np.mean(error**2), rel=1e-6)
    assert result["mae"] == pytest.approx(np.mean(np.abs(error)), rel=1e-6)
    raw_error = series.scaler.inverse_transform(pred) - series.scaler.inverse_transform(true)
    assert result["mse_inverse"] == pytest.approx(np.mean(raw_error**2), rel=1e-6)
    assert result["mae_inverse"] == pytest.approx(np.mean(np.abs(raw_error)), rel=1e-6)

    per_step = pd.read_csv(out / "metrics_per_step.csv")
    per_variate = pd.read_csv(out / "metrics_per_variate.csv")
    assert list(per_step["step"]) == list(range(1, HORIZON + 1))
    np.testing.assert_allclose(per_step["mse"], (error**2).mean(axis=(0, 2)), rtol=1e-6)
    np.testing.assert_allclose(per_step["mae_inverse"], np.abs(raw_error).mean(axis=(0, 2)), rtol=1e-6)
    assert list(per_variate["variate"]) == series.columns
    np.testing.assert_allclose(per_variate["mae"], np.abs(error).mean(axis=(0, 1)), rtol=1e-6)
    np.testing.assert_allclose(per_variate["mse_inverse"], (raw_error**2).mean(axis=(0, 1)), rtol=1e-6)


def test_best_checkpoint_is_the_lowest_val_loss_and_is_what_gets_saved(trained, best_model):
    _, out, result = trained
    _, _, state = best_model
    logged = pd.read_csv(out / "logs" / "metrics.csv").dropna(subset=["val_loss"])
    assert list(logged["epoch"]) == list(range(EPOCHS)) and result["epochs_run"] == EPOCHS
    assert result["best_epoch"] == int(logged["epoch"].iloc[logged["val_loss"].argmin()]) == state["epoch"]
    assert result["best_val_loss"] == pytest.approx(logged["val_loss"].min(), rel=1e-6)
    saved = torch.load(out / "model" / "weights.pt", weights_only=True)
    for key, value in saved.items():
        assert torch.equal(value, state["state_dict"][f"model.{key}"]), key


def test_learning_rate_halves_per_group_as_tslib_type1(trained, best_model):
    """TSLib writes lr0 * 0.5**(epoch - 1) after each (1-based) epoch; the compact DAMCHA group keeps x H."""
    config, out, _ = trained
    lr0, heads = config["training"]["learning_rate"], config["model"]["n_heads"]
    reference, lr = [], lr0
    for epoch in range(1, EPOCHS + 1):
        reference.append(lr)  # the rate the epoch trained at
        lr = lr0 * 0.5 ** (epoch - 1)  # adjust_learning_rate(optimizer, epoch, lradj="type1")
    logged = pd.read_csv(out / "logs" / "metrics.csv")
    default = logged.dropna(subset=["lr-AdamW/default"])["lr-AdamW/default"].to_numpy()
    compact = logged.dropna(subset=[f"lr-AdamW/damcha_compact_x{heads}"])[f"lr-AdamW/damcha_compact_x{heads}"].to_numpy()
    np.testing.assert_allclose(default, reference, rtol=1e-12)
    np.testing.assert_allclose(compact, heads * np.asarray(reference), rtol=1e-12)


def test_run_directory_contents(trained):
    config, out, result = trained
    assert json.loads((out / "metrics.json").read_text()) == json.loads(json.dumps(result))
    assert yaml.safe_load((out / "config.yaml").read_text()) == config
    assert {p.name for p in (out / "checkpoints").iterdir()} == {"best.ckpt", "last.ckpt"}
    assert {p.name for p in (out / "model").iterdir()} == {"forecaster.json", "weights.pt", "history.npz"}
    for key in ("seconds_per_epoch", "data_wait_fraction", "wall_seconds"):
        assert key in result
    from damcha_ts.models import build_model, count_parameters
    from damcha_ts.training import config_hash

    assert result["config_hash"] == config_hash(config)
    assert result["n_params"] == count_parameters(build_model(config["model"]))
    assert 0.0 <= result["data_wait_fraction"] < 1.0
    assert result["train_batches_per_epoch"] == TRAIN_BATCHES


def test_evaluate_test_false_never_touches_the_test_split(tmp_path, tiny_config, quiet, monkeypatch):
    from damcha_ts.data.datamodule import ForecastDataModule

    def forbidden(self):
        raise AssertionError("the test split was read")

    monkeypatch.setattr(ForecastDataModule, "test_dataloader", forbidden)
    result = run_experiment(
        tiny_config("training.max_epochs=1"), tmp_path, evaluate_test=False, progress=False,
        trainer_kwargs={"limit_train_batches": 2, "limit_val_batches": 2, **quiet},
    )
    assert "mse" not in result and np.isfinite(result["best_val_loss"])
    assert not (tmp_path / "metrics_per_step.csv").exists()


def test_ms_setting_scores_the_target_only_with_gateformer(tmp_path, tiny_config, quiet):
    from damcha_ts.models import build_model
    from damcha_ts.training.config import DataConfig

    config = tiny_config("data.features=MS", "training.max_epochs=1", model="gateformer_damcha")
    result = run_experiment(config, tmp_path, progress=False, trainer_kwargs={"limit_train_batches": 3, "limit_val_batches": 2, **quiet})
    model = build_model(config["model"])
    model.load_state_dict(torch.load(tmp_path / "model" / "weights.pt", weights_only=True))
    series = DataConfig.from_dict(config["data"]).prepare().series[0]
    pred, true = reference_predictions(model, series, "test")
    assert result["mse"] == pytest.approx(np.mean((pred[..., -1] - true[..., -1]) ** 2), rel=1e-6)
    assert list(pd.read_csv(tmp_path / "metrics_per_variate.csv")["variate"]) == ["OT"]


def test_partial_variate_training_slices_variates_in_training_only(tmp_path, tiny_config, quiet):
    import lightning as L

    from damcha_ts.training.config import DataConfig, TrainingConfig
    from damcha_ts.training.runner import fit_series

    config = tiny_config("training.variate_fraction=0.5", "training.max_epochs=1")
    seen = {"train": set(), "eval": set()}

    class RecordWidths(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.handle = module.model.register_forward_pre_hook(lambda m, args: seen["train"].add(args[0].shape[-1]))

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.handle.remove()

        def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
            seen["eval"].add(batch["x"].shape[-1])

    fit = fit_series(
        DataConfig.from_dict(config["data"]).prepare(), config["model"], TrainingConfig.from_dict(config["training"]), tmp_path,
        callbacks=[RecordWidths()], progress=False, trainer_kwargs={"limit_train_batches": 3, "limit_val_batches": 1, **quiet},
    )
    assert seen == {"train": {4}, "eval": {7}}  # round(0.5 * 7) variates per training batch
    assert fit.epochs_run == 1


def test_compact_lr_scale_reaches_the_optimizer(tiny_config):
    """training.compact_lr_scale (the multiplier ablation) sets the compact group's lr and weight decay."""
    from damcha_ts.training.module import ForecastModule

    config = tiny_config("training.compact_lr_scale=1", "training.weight_decay=0.01")
    optimizer = ForecastModule(config["model"], config["training"]).configure_optimizers()["optimizer"]
    groups = {g["name"]: (g["lr"], g["weight_decay"]) for g in optimizer.param_groups}
    lr = config["training"]["learning_rate"]
    assert groups == {"default": (lr, 0.01), "damcha_compact_x1": (lr, 0.01)}


def test_background_runs_log_one_line_per_epoch(tmp_path, tiny_config, quiet, capsys):
    """Without a progress bar (leaderboard cells), each epoch prints its losses, and the best so far."""
    result = run_experiment(
        tiny_config("training.max_epochs=3", "training.patience=5"), tmp_path, evaluate_test=False, progress=False,
        trainer_kwargs={"limit_train_batches": 3, "limit_val_batches": 2, **quiet},
    )
    lines = [line.strip() for line in capsys.readouterr().err.splitlines() if line.strip().startswith("epoch ")]
    assert [line.split()[1] for line in lines] == ["1/3", "2/3", "3/3"]
    logged = pd.read_csv(tmp_path / "logs" / "metrics.csv").dropna(subset=["val_loss"])["val_loss"].tolist()
    assert [float(line.split(" val ")[1].split()[0]) for line in lines] == pytest.approx(logged, abs=5e-5)
    # The training loss printed is the same epoch's (not the previous one's).
    train = pd.read_csv(tmp_path / "logs" / "metrics.csv").dropna(subset=["train_loss"])["train_loss"].tolist()
    assert [float(line.split(" train ")[1].split()[0]) for line in lines] == pytest.approx(train, abs=5e-5)
    best_so_far = np.minimum.accumulate(logged)
    assert "(best)" in lines[0]
    for k, line in enumerate(lines[1:], start=1):
        improved = logged[k] <= best_so_far[k - 1]
        assert ("(best)" in line) == improved
    assert min(logged) == pytest.approx(result["best_val_loss"], rel=1e-6)
    assert " % of " not in capsys.readouterr().err  # short epochs: no progress lines


def test_long_epochs_also_log_each_quarter(tmp_path, tiny_config, quiet, capsys):
    from damcha_ts.training.callbacks import EpochLog

    run_experiment(
        tiny_config("training.max_epochs=1"), tmp_path, evaluate_test=False, progress=False,
        trainer_kwargs={"limit_train_batches": 8, "limit_val_batches": 2, **quiet,
                        "callbacks": [EpochLog(progress_after_s=0.0)]},
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if " % of " in line]
    assert [line.split()[2] for line in lines] == ["25", "50", "75"]
    assert all(line.startswith("epoch 1/1") and "of 8 batches" in line for line in lines)


def test_a_trainer_logs_no_cloud_service_tips(tmp_path, caplog):
    """Lightning advertises LitLogger with every Trainer; run logs keep to what matters."""
    import logging

    from damcha_ts.training.config import TrainingConfig
    from damcha_ts.training.trainer import build_trainer

    with caplog.at_level(logging.INFO, logger="lightning.pytorch.utilities.rank_zero"):
        build_trainer(TrainingConfig(), tmp_path, progress=False)
    messages = [record.getMessage() for record in caplog.records]
    assert any("GPU available" in message for message in messages)  # Lightning's own lines still show
    assert not any("Tip:" in message for message in messages)
