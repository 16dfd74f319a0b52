"""Callbacks that measure where training time goes, and a one-line-per-epoch log for background runs."""

from __future__ import annotations

import sys
import time

import lightning as L


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
    """

    QUARTERS = (0.25, 0.5, 0.75)

    def __init__(self, prefix: str = "", progress_after_s: float = 120.0) -> None:
        self.prefix = prefix
        self.progress_after_s = progress_after_s
        self._start = 0.0
        self._best: float | None = None
        self._quarters_left: list[float] = []

    def on_train_start(self, trainer, pl_module) -> None:
        checkpoint = trainer.checkpoint_callback  # restored before training starts on a resume
        if checkpoint is not None and checkpoint.best_model_score is not None:
            self._best = float(checkpoint.best_model_score)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()
        self._quarters_left = list(self.QUARTERS)

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
            print(f"{self.prefix}epoch {trainer.current_epoch + 1}/{trainer.max_epochs}  {quarter * 100:.0f} % of {total} "
                  f"batches  {elapsed / 60:.1f} min", file=sys.stderr, flush=True)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        metrics = trainer.callback_metrics
        if "val_loss" not in metrics:
            return
        val = float(metrics["val_loss"])
        train = metrics.get("train_loss")
        improved = self._best is None or val <= self._best
        best_text = "  (best)" if improved else f"  best {self._best:.4f}"
        self._best = val if improved else self._best
        train_text = f"  train {float(train):.4f}" if train is not None else ""
        print(
            f"{self.prefix}epoch {trainer.current_epoch + 1}/{trainer.max_epochs}{train_text}  val {val:.4f}"
            f"{best_text}  {time.perf_counter() - self._start:.1f} s",
            file=sys.stderr,
            flush=True,
        )
