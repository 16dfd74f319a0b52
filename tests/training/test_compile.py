"""``training.compile``: the compiled model trains exactly as the plain one (CPU: inductor), and what it
leaves behind (checkpoint keys, the saved model) is the plain model's."""

from __future__ import annotations

import lightning as L
import pytest

from damcha_ts.forecasting.experiment import run_experiment

BUDGET = {"limit_train_batches": 5, "limit_val_batches": 2, "max_epochs": 1}


class StepLosses(L.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def _train(config, out, quiet) -> tuple[list[float], dict]:
    steps = StepLosses()
    result = run_experiment(config, out, progress=False, callbacks=[steps], evaluate_test=False,
                            trainer_kwargs={**BUDGET, **quiet})
    return steps.losses, result


def test_a_compiled_model_trains_as_the_plain_one(tiny_config, quiet, tmp_path):
    import torch._dynamo

    torch._dynamo.reset()
    settings = ("training.deterministic=true", "model.dropout=0.0", "model.attn_backend=sdpa")
    plain_losses, plain = _train(tiny_config(*settings), tmp_path / "plain", quiet)
    compiled_losses, compiled = _train(tiny_config(*settings, "training.compile=true"), tmp_path / "compiled", quiet)

    assert len(plain_losses) == len(compiled_losses) == 5
    assert compiled_losses == pytest.approx(plain_losses, rel=1e-5, abs=1e-7)  # 5 optimiser steps
    assert compiled["best_val_loss"] == pytest.approx(plain["best_val_loss"], rel=1e-5)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # it really went through dynamo
    # Checkpoints hold the model's own keys, so a compiled run resumes and loads like any other.
    keys = {name: set(torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"])
            for name, out in (("plain", tmp_path / "plain"), ("compiled", tmp_path / "compiled"))}
    assert keys["compiled"] == keys["plain"] and not any("_orig_mod" in key for key in keys["compiled"])
