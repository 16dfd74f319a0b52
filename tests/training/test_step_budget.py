"""Training for user data (issue 34, item 1): a budget in optimiser steps, validation every k steps
with early stopping that keeps the best weights, the warm-up + cosine schedule, the batch-size rule,
the user-data preset, and the ConvergenceWarning, each trained for real (Lightning trainer, CPU) on
small synthetic series and checked against explicit formulas and independent recomputations."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from damcha_ts.errors import ConfigError, ConvergenceWarning
from damcha_ts.training.config import TrainingConfig, batch_size_for_windows, split_keywords

LOOKBACK, HORIZON = 48, 12
TINY = {"name": "itransformer_mha", "seq_len": LOOKBACK, "pred_len": HORIZON, "d_model": 16, "d_ff": 16,
        "n_heads": 2, "e_layers": 1}
QUIET = {"enable_model_summary": False, "log_every_n_steps": 1}
#: The TrainingConfig keys of schema 1: a config that leaves the new fields at their defaults writes
#: exactly these (so its hash is the one recorded before they existed).
SCHEMA_1_KEYS = ["max_epochs", "patience", "batch_size", "learning_rate", "weight_decay", "lr_schedule", "seed",
                 "deterministic", "precision", "accelerator", "devices", "strategy", "num_nodes", "num_workers",
                 "gradient_clip_val", "variate_fraction"]


def hourly_frame(kind: str, rows: int = 600) -> pd.DataFrame:
    """Two variates: ``"cycles"`` (daily and half-daily cycles plus 10 % noise: learnable, so the
    validation loss falls for a while) or ``"noise"`` (white noise: nothing to learn, so a model that
    fits it at a high rate gets worse on validation)."""
    rng = np.random.default_rng(0)
    t = np.arange(rows)
    if kind == "cycles":
        values = np.stack([np.sin(2 * np.pi * t / 24), np.cos(2 * np.pi * t / 12)], axis=1)
        values = values + 0.1 * rng.standard_normal((rows, 2))
    else:
        values = rng.standard_normal((rows, 2))
    return pd.DataFrame(values, columns=["a", "b"], index=pd.date_range("2024-01-01", periods=rows, freq="h"))


def fit(kind: str, out_dir, **training):
    """fit_series (the real runner and trainer) on a frame; (result, validation record, warnings)."""
    from damcha_ts.data import prepare
    from damcha_ts.models.registry import resolve_model_config
    from damcha_ts.training.callbacks import ValidationRecord
    from damcha_ts.training.runner import fit_series

    panel = prepare(hourly_frame(kind), seq_len=LOOKBACK, pred_len=HORIZON)
    config = TrainingConfig.from_dict({"batch_size": 16, **training})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fit_series(panel, resolve_model_config(TINY), config, out_dir, progress=False, trainer_kwargs=QUIET)
    record = next(c for c in result.trainer.callbacks if isinstance(c, ValidationRecord))
    convergence = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    return result, record, convergence, panel.series[0]


def validation_mse(model, series) -> float:
    """The MSE over every validation window, by explicit slicing (no DataLoader, no Lightning)."""
    start, stop = series.borders["val"]
    n = stop - start - LOOKBACK - HORIZON + 1
    x = np.stack([series.scaled[start + i : start + i + LOOKBACK] for i in range(n)])
    y = np.stack([series.scaled[start + i + LOOKBACK : start + i + LOOKBACK + HORIZON] for i in range(n)])
    marks = np.stack([series.marks[start + i : start + i + LOOKBACK] for i in range(n)])
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(x).float(), torch.from_numpy(marks).float()).double().numpy()
    return float(np.mean((pred - y) ** 2))


def test_warmup_cosine_factor_matches_the_explicit_formula():
    from damcha_ts.training.optim import warmup_cosine_factor

    # 11 steps, 2 of warm-up, floor 0.2: the cosine runs over steps 2..10 (8 intervals).
    factor = warmup_cosine_factor(11, 2 / 11, 0.2)
    expected = {0: 0.5, 1: 1.0, 2: 1.0, 4: 0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi / 4)), 6: 0.6, 10: 0.2, 50: 0.2}
    assert {step: factor(step) for step in expected} == pytest.approx(expected, abs=1e-12)
    assert warmup_cosine_factor(4, 0.0, 0.0)(0) == 1.0  # no warm-up: the first step at the full rate
    with pytest.raises(ConfigError, match="total_steps=0"):
        warmup_cosine_factor(0, 0.1, 0.1)


def test_batch_size_follows_the_number_of_train_windows():
    windows = [1, 10, 16, 100, 600, 966, 2000, 8545, 50_000]
    assert [batch_size_for_windows(n) for n in windows] == [1, 10, 16, 16, 16, 16, 32, 128, 256]
    assert batch_size_for_windows(np.int64(8545)) == 128
    for bad in (0, -3, True, 2.5, "600"):
        with pytest.raises(ConfigError, match="train_windows must be a positive integer"):
            batch_size_for_windows(bad)


def test_new_fields_stay_out_of_the_dict_form_at_their_defaults():
    assert list(TrainingConfig().to_dict()) == SCHEMA_1_KEYS
    stepped = TrainingConfig(max_steps=300, val_check_steps=50, lr_schedule="warmup_cosine", warmup_fraction=0.05,
                             lr_floor=0.1).to_dict()
    assert list(stepped) == [*SCHEMA_1_KEYS, "max_steps", "val_check_steps", "warmup_fraction", "lr_floor"]


@pytest.mark.parametrize(("values", "named"), [
    ({"max_steps": 0}, "training.max_steps must be >= 1"),
    ({"val_check_steps": -1}, "training.val_check_steps must be >= 1"),
    ({"lr_schedule": "warmup_cosine", "warmup_fraction": 1.0}, "training.warmup_fraction must be in"),
    ({"lr_schedule": "warmup_cosine", "lr_floor": 1.5}, "training.lr_floor must be in"),
    ({"lr_floor": 0.1}, "training.lr_floor=0.1 applies to lr_schedule='warmup_cosine'"),
    ({"lr_schedule": "plateau"}, "training.lr_schedule='plateau' is not one of"),
    ({"max_step": 10}, "max_step"),
])
def test_bad_step_settings_are_refused_naming_the_field(values, named):
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace("[", r"\[")):
        TrainingConfig.from_dict(values)


def test_user_data_preset_is_one_named_set_and_forecaster_keywords_reach_it():
    from damcha_ts import Forecaster

    preset = TrainingConfig.for_user_data(train_windows=600)
    assert (preset.learning_rate, preset.lr_schedule, preset.warmup_fraction, preset.lr_floor) == (
        1e-3, "warmup_cosine", 0.05, 0.1)
    assert (preset.max_steps, preset.val_check_steps, preset.patience, preset.batch_size) == (1000, 50, 5, 16)
    assert TrainingConfig.for_user_data().batch_size == TrainingConfig().batch_size  # no windows: default size
    assert TrainingConfig.for_user_data(max_steps=200, seed=1).max_steps == 200
    # Forecaster keywords that name these fields route to the training config (split_keywords).
    keywords = {"max_steps": 300, "val_check_steps": 25, "lr_schedule": "warmup_cosine", "warmup_fraction": 0.1,
                "lr_floor": 0.05, "d_model": 8}
    assert split_keywords(keywords) == ({"d_model": 8}, {k: v for k, v in keywords.items() if k != "d_model"})
    training = Forecaster("itransformer_mha", horizon=HORIZON, lookback=LOOKBACK, **keywords).training
    assert (training.max_steps, training.val_check_steps, training.lr_schedule, training.warmup_fraction,
            training.lr_floor) == (300, 25, "warmup_cosine", 0.1, 0.05)


def test_a_step_budget_validates_every_k_steps_follows_the_schedule_and_warns_while_improving(tmp_path):
    lr = 1e-3
    result, record, convergence, series = fit(
        "cycles", tmp_path, max_steps=60, val_check_steps=20, learning_rate=lr, lr_schedule="warmup_cosine",
        warmup_fraction=0.1, lr_floor=0.1,
    )
    assert result.trainer.global_step == 60
    assert record.steps == [20, 40, 60]  # across epochs of 23 batches
    assert record.losses[0] > record.losses[1] > record.losses[2]
    # The rate of every step, as logged, is lr x the warm-up + cosine factor written out here.
    logged = pd.read_csv(tmp_path / "logs" / "metrics.csv").dropna(subset=["lr-AdamW/default"])
    warmup = 6
    expected = [lr * ((s + 1) / warmup if s < warmup else
                      0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - warmup) / (60 - 1 - warmup))))
                for s in logged["step"]]
    assert len(logged) >= 20 and logged["lr-AdamW/default"].tolist() == pytest.approx(expected, rel=1e-6)
    # The best (last) validation's weights are the ones returned, and the warning says so.
    assert validation_mse(result.module.model, series) == pytest.approx(record.losses[-1], rel=1e-4)
    assert result.best_val_loss == pytest.approx(record.losses[-1], rel=1e-6)
    assert len(convergence) == 1
    message = str(convergence[0].message)
    assert message.startswith("still improving at step 60 of max_steps=60: raise max_steps"), message
    assert convergence[0].filename == __file__  # pointed at the caller of fit, not inside the toolkit


def test_early_stopping_on_step_validations_keeps_the_best_weights_and_does_not_warn(tmp_path):
    patience = 3
    result, record, convergence, series = fit(
        "noise", tmp_path, max_steps=400, val_check_steps=20, learning_rate=1e-2, lr_schedule="constant",
        patience=patience,
    )
    best = int(np.argmin(record.losses))
    assert best < len(record.losses) - 1  # the validation loss stopped improving
    # Stopped after `patience` validations without improvement, long before the budget.
    assert len(record.losses) == best + 1 + patience
    assert result.trainer.global_step == record.steps[-1] == 20 * (best + 1 + patience) < 400
    assert validation_mse(result.module.model, series) == pytest.approx(record.losses[best], rel=1e-4)
    assert not convergence


def test_the_epoch_recipe_warns_when_its_last_epoch_is_the_best(tmp_path):
    result, record, convergence, _ = fit("cycles", tmp_path / "three", max_epochs=3, learning_rate=1e-3)
    assert record.epochs == [0, 1, 2] and record.losses == sorted(record.losses, reverse=True)
    assert [str(w.message).split(" (")[0] for w in convergence] == [
        "still improving at epoch 3 of max_epochs=3: raise max_epochs"]
    # One validation shows no trend: no warning.
    _, record, convergence, _ = fit("cycles", tmp_path / "one", max_epochs=1, learning_rate=1e-3)
    assert len(record.losses) == 1 and not convergence


def test_a_resumed_fit_judges_the_validations_before_the_interruption(tmp_path):
    """The record travels in checkpoints: a fit resumed at step 40 of 60 still knows steps 20 and 40."""
    from damcha_ts.data import prepare
    from damcha_ts.models.registry import resolve_model_config
    from damcha_ts.training.callbacks import ValidationRecord
    from damcha_ts.training.runner import fit_series

    panel = prepare(hourly_frame("cycles"), seq_len=LOOKBACK, pred_len=HORIZON)
    settings = {"batch_size": 16, "max_steps": 60, "val_check_steps": 20, "learning_rate": 1e-3}
    model = resolve_model_config(TINY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        first = fit_series(panel, model, TrainingConfig.from_dict({**settings, "max_steps": 40}), tmp_path,
                           progress=False, trainer_kwargs=QUIET)
    assert next(c for c in first.trainer.callbacks if isinstance(c, ValidationRecord)).steps == [20, 40]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = fit_series(panel, model, TrainingConfig.from_dict(settings), tmp_path, resume=True,
                             progress=False, trainer_kwargs=QUIET)
    record = next(c for c in resumed.trainer.callbacks if isinstance(c, ValidationRecord))
    assert record.steps == [20, 40, 60]
    assert [str(w.message).count("the last of 3 validations") for w in caught
            if issubclass(w.category, ConvergenceWarning)] == [1]


def test_a_step_budget_without_validation_trains_every_step_and_keeps_the_last(tmp_path):
    """A refit (``validate=False``) under a step budget: exactly max_steps steps, no validation, no
    warning, and last.ckpt written at the epoch ends (a resume point)."""
    from damcha_ts.data import prepare
    from damcha_ts.models.registry import resolve_model_config
    from damcha_ts.training.runner import fit_series

    panel = prepare(hourly_frame("cycles"), seq_len=LOOKBACK, pred_len=HORIZON)
    training = TrainingConfig(batch_size=16, max_steps=50, val_check_steps=20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fit_series(panel, resolve_model_config(TINY), training, tmp_path, progress=False,
                            trainer_kwargs=QUIET, validate=False)
    assert result.trainer.global_step == 50 and math.isnan(result.best_val_loss)
    assert "val_loss" not in pd.read_csv(tmp_path / "logs" / "metrics.csv").columns
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file()
    assert not [w for w in caught if issubclass(w.category, ConvergenceWarning)]


def test_forecaster_keywords_train_a_step_budget_and_the_warning_points_at_the_callers_line():
    from damcha_ts import Forecaster

    forecaster = Forecaster("itransformer_mha", horizon=HORIZON, lookback=LOOKBACK, d_model=16, d_ff=16, n_heads=2,
                            e_layers=1, batch_size=16, learning_rate=1e-3, max_steps=40, val_check_steps=20,
                            lr_schedule="warmup_cosine", warmup_fraction=0.1, lr_floor=0.1,
                            trainer_kwargs={"enable_progress_bar": False})
    with pytest.warns(ConvergenceWarning, match=r"still improving at step 40 of max_steps=40: raise max_steps") as caught:
        forecaster.fit(hourly_frame("cycles"))
    assert [w.filename for w in caught if issubclass(w.category, ConvergenceWarning)] == [__file__]


def test_warmup_cosine_under_an_epoch_budget_spans_all_the_epochs_steps(tmp_path):
    lr = 1e-3
    result, _, _, _ = fit("cycles", tmp_path, max_epochs=2, learning_rate=lr, lr_schedule="warmup_cosine",
                          lr_floor=0.5, patience=5)
    total = result.trainer.global_step  # every step of both epochs: the cosine's length
    assert total == 2 * result.trainer.num_training_batches
    logged = pd.read_csv(tmp_path / "logs" / "metrics.csv").dropna(subset=["lr-AdamW/default"])
    expected = [lr * (0.5 + 0.5 * 0.5 * (1 + math.cos(math.pi * s / (total - 1)))) for s in logged["step"]]
    assert logged["step"].max() == total - 1 and logged["lr-AdamW/default"].tolist() == pytest.approx(expected, rel=1e-6)


def test_a_refit_under_a_step_budget_trains_as_many_steps_as_the_first_pass_kept():
    """fit(refit=True) retrains on train + val rows for the first pass's best point: its steps under
    a step budget (before: the whole max_steps, whatever early stopping had chosen)."""
    from damcha_ts import Forecaster

    forecaster = Forecaster("itransformer_mha", horizon=HORIZON, lookback=LOOKBACK, d_model=16, d_ff=16, n_heads=2,
                            e_layers=1, batch_size=16, learning_rate=3e-2, max_steps=200, val_check_steps=10,
                            patience=2, trainer_kwargs={"enable_progress_bar": False})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        forecaster.fit(hourly_frame("cycles"), refit=True)
    facts = forecaster.fit_result_
    assert facts["refit"] is True and "refit_epochs" not in facts
    assert 0 < facts["best_step"] < 200 and facts["refit_steps"] == facts["best_step"]
    assert forecaster.predictor_.fit_record.trained.trainer.global_step == facts["best_step"]
