"""The GluonTS module is the trainer's ForecastModule: same class, same loss, same optimiser; and
predictors serialised before that redesign (issue 19) still fit the module."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from gluonts.dataset.pandas import PandasDataset

import damcha_ts.training.module as module_file
from damcha_ts.gluonts import DAMCHAEstimator, DAMCHALightningModule
from damcha_ts.training.module import ForecastModule

DATA = Path(__file__).with_name("data")
TINY = {"d_model": 8, "n_heads": 2, "e_layers": 1, "d_ff": 8, "generator_hidden": [4]}
MEAN, SCALE = [1.0, -2.0, 0.5], [2.0, 0.5, 3.0]
QUIET_LOG = "ignore:You are trying to `self.log"


def sine_frame(steps: int = 240) -> pd.DataFrame:
    """Three hourly variates, computed without any random draw (the serialised fixture used it)."""
    t = np.arange(steps)
    values = np.stack([np.sin(2 * np.pi * t / 24 + k) * (k + 1) + 5.0 * k + 0.01 * t for k in range(3)], axis=1)
    return pd.DataFrame(values, index=pd.date_range("2020-01-01", periods=steps, freq="h"), columns=["a", "b", "c"])


@pytest.fixture
def loss_calls(monkeypatch):
    """The reduction of every call of damcha_ts.training.module.forecast_loss (what both modules call)."""
    calls = []
    original = module_file.forecast_loss

    def spy(*args, **kwargs):
        calls.append(kwargs.get("reduction", "mean"))
        return original(*args, **kwargs)

    monkeypatch.setattr(module_file, "forecast_loss", spy)
    return calls


def test_both_surfaces_train_through_forecast_module_and_forecast_loss(loss_calls, data_root, tmp_path):
    from damcha_ts.data import prepare
    from damcha_ts.training import TrainingConfig, fit_series

    # What GluonTS trains: a ForecastModule whose steps, loss, optimiser and val_loss are its own.
    assert issubclass(DAMCHALightningModule, ForecastModule)
    for hook in ("training_step", "validation_step", "on_validation_epoch_end", "configure_optimizers"):
        assert hook not in vars(DAMCHALightningModule), hook

    quiet = {"accelerator": "cpu", "logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    data = PandasDataset(sine_frame(), target=["a", "b", "c"], freq="h")
    estimator = DAMCHAEstimator(
        prediction_length=4, context_length=16, model="itransformer_damcha", hyperparameters=TINY,
        quantiles=[0.2], batch_size=4, num_batches_per_epoch=2,
        trainer_kwargs={"max_epochs": 1, "default_root_dir": str(tmp_path / "gluonts"), **quiet},
    )
    gluonts_module = estimator.train_model(data, data).trained_net
    assert type(gluonts_module) is DAMCHALightningModule and isinstance(gluonts_module, ForecastModule)
    assert loss_calls.count("mean") == 2 and loss_calls.count("sum") >= 1  # 2 training batches, validation
    loss_calls.clear()

    series = prepare("ETTh1", seq_len=16, pred_len=4, path=data_root)
    fit = fit_series(
        series, {"name": "itransformer_damcha", "seq_len": 16, "pred_len": 4, **TINY},
        TrainingConfig(max_epochs=1, batch_size=8), tmp_path / "trainer", progress=False,
        trainer_kwargs={"limit_train_batches": 2, "limit_val_batches": 1, **quiet},
    )
    assert type(fit.module) is ForecastModule
    assert loss_calls.count("mean") == 2 and loss_calls.count("sum") >= 1


def masked_batch(n_marks: int | None = None) -> dict:
    generator = torch.Generator().manual_seed(0)
    observed = torch.ones(3, 4, 3)
    observed[0, 1:, 2] = 0.0
    observed[2, :, 0] = 0.0
    batch = {
        "past_target": torch.randn(3, 16, 3, generator=generator) * 4 + 2,
        "future_target": torch.randn(3, 4, 3, generator=generator) * 4 + 2,
        "future_observed_values": observed,
    }
    if n_marks:
        batch["past_time_marks"] = torch.randn(3, 16, n_marks, generator=generator)
    return batch


@pytest.mark.filterwarnings(QUIET_LOG)
@pytest.mark.parametrize("quantiles", [None, [0.1, 0.9]])
def test_gluonts_loss_is_the_loss_on_observed_standardised_targets(quantiles):
    """The loss GluonTS trains on, by hand: standardise, forecast, and count observed targets only."""
    torch.manual_seed(0)
    module = DAMCHALightningModule(
        {"name": "itransformer_mha", "seq_len": 16, "pred_len": 4, **TINY}, quantiles=quantiles,
        target_mean=MEAN, target_scale=SCALE,
    ).eval()
    batch = masked_batch(n_marks=4)
    loss = module.training_step(batch, 0)

    mean, scale = torch.tensor(MEAN), torch.tensor(SCALE)
    forecast = module.model((batch["past_target"] - mean) / scale, batch["past_time_marks"]).detach().double()
    target = ((batch["future_target"] - mean) / scale).double()
    observed = batch["future_observed_values"].double()
    if quantiles is None:
        reference = ((forecast - target) ** 2 * observed).sum() / observed.sum()
    else:
        levels = torch.tensor(module.quantiles, dtype=torch.float64).view(1, -1, 1, 1)
        u = target.unsqueeze(1) - forecast
        terms = torch.where(u >= 0, levels * u, (levels - 1) * u) * observed.unsqueeze(1)
        reference = terms.sum() / (observed.sum() * len(module.quantiles))
    assert loss.item() == pytest.approx(reference.item(), rel=1e-5)


def test_gluonts_optimiser_is_adamw_at_the_one_rate_for_every_epoch():
    module = DAMCHALightningModule({"name": "gateformer_damcha", "seq_len": 16, "pred_len": 4, **TINY},
                                   lr=3e-3, weight_decay=0.1)
    configured = module.configure_optimizers()
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    assert isinstance(optimizer, torch.optim.AdamW)
    base = {g["name"]: (g["lr"], g["weight_decay"]) for g in optimizer.param_groups}
    assert base == {g["name"]: (g["lr"], g["weight_decay"]) for g in module.model.parameter_groups(3e-3, 0.1)}
    for _ in range(5):
        optimizer.step()  # no gradients: changes nothing, but orders the calls as Lightning does
        scheduler.step()
        assert {g["name"]: g["lr"] for g in optimizer.param_groups} == {k: v[0] for k, v in base.items()}


def test_a_predictor_serialised_before_the_redesign_still_fits_its_module():
    """``predictor_before_issue19/predictor.json`` was written by the code before issue 19 (its own
    DAMCHALightningModule); ``prediction-net-weights.json`` lists the names and shapes of the weights
    it saved. Its recorded constructor arguments still build the module, and the module's weights have
    exactly those names and shapes, so the saved state loads strictly. (The forecasts of that predictor
    were compared by hand once, bit-identical; the weights file is not kept in the repository.)"""
    from gluonts.core.serde import decode

    document = json.loads((DATA / "predictor_before_issue19" / "predictor.json").read_text())
    net = decode(document["kwargs"]["prediction_net"])
    assert isinstance(net, ForecastModule)
    saved = json.loads((DATA / "predictor_before_issue19" / "prediction-net-weights.json").read_text())
    assert {name: list(tensor.shape) for name, tensor in net.state_dict().items()} == saved
