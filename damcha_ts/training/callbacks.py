"""Callbacks that measure where training time goes, a one-line-per-epoch (or per-validation) log
for background runs, and the record of every validation that says when training stopped too soon."""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import lightning as L

from damcha_ts.errors import ConvergenceWarning


class EpochTimer(L.Callback):
    """Wall time per epoch, split into training steps, data waiting and validation.

    Data waiting is the time between the end of one training batch and the start of the next
    (plus the wait for the first batch): the loader's work and Lightning's loop overhead together,
    so ``data_seconds`` is an upper bound on the time spent producing batches.
    """

    def __init__(self) -> None:
        self.epoch_seconds: list[float] = []
        self.data_seconds: list[float] = []
        self.validation_seconds: list[float] = []
        self.train_batches: list[int] = []
        self._epoch_start = self._last_batch_end = self._val_start = 0.0
        self._data = self._val = 0.0
        self._batches = 0

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._epoch_start = self._last_batch_end = time.perf_counter()
        self._data = self._val = 0.0
        self._batches = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._data += time.perf_counter() - self._last_batch_end

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._last_batch_end = time.perf_counter()
        self._batches += 1

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._val_start = time.perf_counter()

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._val += time.perf_counter() - self._val_start

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.epoch_seconds.append(time.perf_counter() - self._epoch_start)
        self.data_seconds.append(self._data)
        self.validation_seconds.append(self._val)
        self.train_batches.append(self._batches)

    def summary(self) -> dict:
        """Means over the epochs run in this process (empty dict before the first epoch ends)."""
        if not self.epoch_seconds:
            return {}
        epochs = len(self.epoch_seconds)
        train_seconds = [e - v for e, v in zip(self.epoch_seconds, self.validation_seconds)]
        return {
            "seconds_per_epoch": sum(self.epoch_seconds) / epochs,
            "train_seconds_per_epoch": sum(train_seconds) / epochs,
            "validation_seconds_per_epoch": sum(self.validation_seconds) / epochs,
            "data_wait_fraction": sum(self.data_seconds) / max(sum(train_seconds), 1e-12),
            "train_batches_per_epoch": sum(self.train_batches) / epochs,
        }


class EpochLog(L.Callback):
    """One line per epoch on stderr, for runs without a progress bar (leaderboard cells, log files):

        epoch 3/10  train 0.3291  val 0.6901  best 0.6875  41.2 s

    ``best`` is the lowest validation MSE of the epochs before; an epoch that improves on it says
    ``(best)`` instead. Printed at the end of the training epoch, when Lightning has both this epoch's
    mean training loss and the ``val_loss`` of its validation; a resumed run takes "best" from the
    restored best checkpoint.
    An epoch still running after ``progress_after_s`` also says how far it has got at each quarter
    (``epoch 2/10  50 % of 1147 batches  9.1 min``), so a log of long epochs shows signs of life.
    With validation every ``val_check_steps`` the line comes after each validation instead
    (``step 150/1000  train 0.3291  val 0.6901  (best)  3.2 s``, seconds since the one before).
    """

    QUARTERS = (0.25, 0.5, 0.75)

    def __init__(self, prefix: str = "", progress_after_s: float = 120.0) -> None:
        self.prefix = prefix
        self.progress_after_s = progress_after_s
        self._start = 0.0
        self._best: float | None = None
        self._quarters_left: list[float] = []
        self._since_validation = 0.0
        self._validated = False  # in this epoch: a step budget can end one before its validation

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()
        self._quarters_left = list(self.QUARTERS)
        self._validated = False

    def on_train_start(self, trainer, pl_module) -> None:
        self._since_validation = time.perf_counter()
        checkpoint = trainer.checkpoint_callback  # restored before training starts on a resume
        if checkpoint is not None and checkpoint.best_model_score is not None:
            self._best = float(checkpoint.best_model_score)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        total = trainer.num_training_batches
        if not self._quarters_left or not isinstance(total, int) or total <= 0:
            return
        done = (batch_idx + 1) / total
        if done < self._quarters_left[0]:
            return
        while self._quarters_left and done >= self._quarters_left[0]:
            quarter = self._quarters_left.pop(0)
        elapsed = time.perf_counter() - self._start
        if elapsed >= self.progress_after_s:
            print(f"{self.prefix}{_epoch_label(trainer)}  {quarter * 100:.0f} % of {total} "
                  f"batches  {elapsed / 60:.1f} min", file=sys.stderr, flush=True)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        # Validation every val_check_steps is logged where it happens.
        if self._validated and trainer.check_val_every_n_epoch is not None:
            self._report(trainer, _epoch_label(trainer), time.perf_counter() - self._start)

    def on_validation_end(self, trainer, pl_module) -> None:
        self._validated = self._validated or not trainer.sanity_checking
        # Per epoch, a sanity check, or a model with nothing to learn only validated (no step to report).
        if trainer.check_val_every_n_epoch is not None or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        now = time.perf_counter()
        self._report(trainer, f"step {trainer.global_step}/{trainer.max_steps}", now - self._since_validation)
        self._since_validation = now

    def _report(self, trainer, label: str, seconds: float) -> None:
        """One line: ``label``, the last training-loss mean, the validation loss and the best so far."""
        metrics = trainer.callback_metrics
        if "val_loss" not in metrics:
            return
        val = float(metrics["val_loss"])
        train = metrics.get("train_loss")
        improved = self._best is None or val <= self._best
        best_text = "  (best)" if improved else f"  best {self._best:.4f}"
        self._best = val if improved else self._best
        train_text = f"  train {float(train):.4f}" if train is not None else ""
        print(f"{self.prefix}{label}{train_text}  val {val:.4f}{best_text}  {seconds:.1f} s", file=sys.stderr, flush=True)


def _epoch_label(trainer) -> str:
    """``epoch 3/10``; under a step budget (no epoch count) ``epoch 3 (step 120/1000)``."""
    epoch = trainer.current_epoch + 1
    if trainer.max_epochs is not None and trainer.max_epochs > 0:
        return f"epoch {epoch}/{trainer.max_epochs}"
    return f"epoch {epoch} (step {trainer.global_step}/{trainer.max_steps})"


class ValidationRecord(L.Callback):
    """Every validation of a fit, ``(global step, epoch, val_loss)``, and a :class:`ConvergenceWarning`
    when the fit ends with its best validation the last one (of two or more): the loss was still
    falling when the budget ran out. One validation shows no trend, so it never warns.

    The record travels in checkpoints, so a resumed fit judges all of its validations. The best
    checkpoint keeps the first of equal losses (Lightning's strict "<"), and so does this record.
    """

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.epochs: list[int] = []
        self.losses: list[float] = []

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or "val_loss" not in trainer.callback_metrics:
            return
        self.steps.append(int(trainer.global_step))
        self.epochs.append(int(trainer.current_epoch))
        self.losses.append(float(trainer.callback_metrics["val_loss"]))

    def best_is_last(self) -> bool:
        return len(self.losses) >= 2 and self.losses[-1] < min(self.losses[:-1])

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero and self.best_is_last():
            warnings.warn(self.message(trainer), ConvergenceWarning, stacklevel=_outside_level())

    def message(self, trainer) -> str:
        if trainer.max_steps is not None and trainer.max_steps > 0:
            where = f"step {self.steps[-1]} of max_steps={trainer.max_steps}: raise max_steps"
        else:
            where = f"epoch {self.epochs[-1] + 1} of max_epochs={trainer.max_epochs}: raise max_epochs"
        return (f"still improving at {where} (the last of {len(self.losses)} validations was the best, val_loss "
                f"{min(self.losses[:-1]):.4g} before it, {self.losses[-1]:.4g} at it; its weights are kept)")

    def state_dict(self) -> dict:
        return {"steps": list(self.steps), "epochs": list(self.epochs), "losses": list(self.losses)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.steps, self.epochs = list(state_dict["steps"]), list(state_dict["epochs"])
        self.losses = [float(loss) for loss in state_dict["losses"]]


#: Frames of these folders are the toolkit's and Lightning's, not the caller's.
_INSIDE = (str(Path(__file__).resolve().parents[1]), str(Path(L.__file__).resolve().parent))


def _outside_level() -> int:
    """The ``stacklevel`` (for a ``warnings.warn`` in the function calling this one) of the first
    frame outside damcha_ts and Lightning: the line of user code that started the fit."""
    frame, level = sys._getframe(1), 1
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_INSIDE):
        frame, level = frame.f_back, level + 1
    return level
