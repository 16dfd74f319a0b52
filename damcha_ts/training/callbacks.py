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
    mean training loss and the ``val_loss`` of its validation; a resumed run starts "best" afresh.
    """

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self._start = 0.0
        self._best: float | None = None

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()

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
