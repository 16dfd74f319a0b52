"""Same seed -> same run; an interrupted run resumed from its last checkpoint ends like an uninterrupted one."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from damcha_ts.errors import ConfigError
from damcha_ts.leaderboard.curves import read_run_curves
from damcha_ts.forecasting.experiment import run_experiment

BUDGET = {"limit_train_batches": 5, "limit_val_batches": 5}
KEYS = ("mse", "mae", "mse_inverse", "best_val_loss", "best_epoch", "epochs_run")


class Interrupted(Exception):
    pass


class InterruptInSecondEpoch(L.Callback):
    """Dies as the second epoch starts, after the first epoch's checkpoints were written."""

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == 1:
            raise Interrupted()


class SpoilAfterFirstEpoch(L.Callback):
    """Shifts every weight before each validation but the first, so no later epoch improves val_loss."""

    def on_validation_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch >= 1:
            with torch.no_grad():
                for parameter in pl_module.parameters():
                    parameter.add_(1.0)


@pytest.fixture(scope="module")
def config(tiny_config):
    # Dropout stays on (0.1) so that the global RNG matters, and patience is high so all 3 epochs run.
    return tiny_config("training.max_epochs=3", "training.deterministic=true", "training.patience=5")


@pytest.fixture(scope="module")
def reference(config, tmp_path_factory, quiet):
    out = tmp_path_factory.mktemp("reference")
    return out, run_experiment(config, out, progress=False, trainer_kwargs={**BUDGET, **quiet})


def weights(out):
    return torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_same_seed_gives_identical_metrics_and_weights(config, reference, tmp_path, quiet):
    out, first = reference
    second = run_experiment(config, tmp_path, progress=False, trainer_kwargs={**BUDGET, **quiet})
    assert {k: second[k] for k in KEYS} == {k: first[k] for k in KEYS}
    assert second["config_hash"] == first["config_hash"]
    assert_same_weights(weights(out), weights(tmp_path))


def test_another_seed_gives_another_run(config, reference, tmp_path, quiet):
    from damcha_ts.training import load_run_config

    other = run_experiment(load_run_config(config, overrides=["training.seed=7"]), tmp_path, progress=False, trainer_kwargs={**BUDGET, **quiet})
    assert other["mse"] != reference[1]["mse"]


def test_resume_after_interruption_matches_the_uninterrupted_run(config, reference, tmp_path, quiet):
    out, uninterrupted = reference
    with pytest.raises(Interrupted):
        run_experiment(config, tmp_path, progress=False, trainer_kwargs={**BUDGET, **quiet, "callbacks": [InterruptInSecondEpoch()]})
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0
    resumed = run_experiment(config, tmp_path, resume=True, progress=False, trainer_kwargs={**BUDGET, **quiet})
    assert {k: resumed[k] for k in KEYS} == {k: uninterrupted[k] for k in KEYS}
    assert_same_weights(weights(out), weights(tmp_path))
    # Lightning's logger drops the old metrics.csv on resume; the run puts the epochs before the
    # interruption back, so the training curve is the uninterrupted run's.
    assert read_run_curves(tmp_path) == read_run_curves(out)
    assert read_run_curves(out)["epochs"] == [1, 2, 3]
    assert not (tmp_path / "logs" / "metrics_before_resume.csv").exists()


def test_last_checkpoint_moves_on_in_epochs_that_do_not_improve(config, tmp_path, quiet):
    # Else a resume would go back to the best epoch and redo the epochs after it.
    result = run_experiment(config, tmp_path, progress=False,
                            trainer_kwargs={**BUDGET, **quiet, "callbacks": [SpoilAfterFirstEpoch()]})
    assert result["best_epoch"] == 0 and result["epochs_run"] == 3
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert (last["epoch"], last["global_step"]) == (2, 3 * BUDGET["limit_train_batches"])
    assert torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)["epoch"] == 0


def test_resuming_a_run_that_stopped_early_trains_no_further(config, tmp_path, quiet):
    # As when a cell is killed after training but before its result was written.
    from damcha_ts.training import load_run_config

    patient = load_run_config(config, overrides=["training.patience=1", "training.max_epochs=6"])
    kwargs = {**BUDGET, **quiet, "callbacks": [SpoilAfterFirstEpoch()]}
    first = run_experiment(patient, tmp_path, progress=False, trainer_kwargs=kwargs)
    assert (first["best_epoch"], first["epochs_run"]) == (0, 2)
    again = run_experiment(patient, tmp_path, resume=True, progress=False, trainer_kwargs=kwargs)
    assert {k: again[k] for k in KEYS} == {k: first[k] for k in KEYS}


def test_a_resumed_runs_log_compares_with_the_best_epoch_before_the_interruption(config, tmp_path, quiet, capsys):
    spoil = SpoilAfterFirstEpoch()  # epoch 1 is the best; the later ones are worse
    with pytest.raises(Interrupted):
        run_experiment(config, tmp_path, progress=False,
                       trainer_kwargs={**BUDGET, **quiet, "callbacks": [spoil, InterruptInSecondEpoch()]})
    capsys.readouterr()
    run_experiment(config, tmp_path, resume=True, progress=False, trainer_kwargs={**BUDGET, **quiet, "callbacks": [spoil]})
    lines = [line.strip() for line in capsys.readouterr().err.splitlines() if line.strip().startswith("epoch ")]
    best = read_run_curves(tmp_path)["val_loss"][0]
    assert [line.split()[1] for line in lines] == ["2/3", "3/3"]
    assert all("(best)" not in line and f"best {best:.4f}" in line for line in lines)


def test_resume_refuses_a_different_config(config, reference, tmp_path, quiet):
    from damcha_ts.training import load_run_config

    out, _ = reference
    changed = load_run_config(config, overrides=["training.learning_rate=3e-4"])
    with pytest.raises(ConfigError, match="cannot resume"):
        run_experiment(changed, out, resume=True, progress=False, trainer_kwargs={**BUDGET, **quiet})
